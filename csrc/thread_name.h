/* thread_name.h: the name the calling thread shows as, in `top -H`,
 * `ps -L`, `pidstat -t`, /proc/<pid>/task/<tid>/comm, gdb and py-spy.
 *
 * Linux keeps 15 bytes of it; a longer name is cut there. The broker's C
 * threads name themselves after RocketMQ's services where one does the same
 * job (the index thread "BuildIndex", the C send threads "SendMessage_<n>"),
 * and the store's Python threads take theirs through rmqcore.name_thread
 * (pyrmq/common/threads.py). Python 3.11-3.13 leave the OS name alone, so
 * without this every thread of the process shows as "python". Elsewhere than
 * Linux it does nothing. */
#ifndef RMQ_THREAD_NAME_H
#define RMQ_THREAD_NAME_H

/* The most of a name Linux keeps (its TASK_COMM_LEN less the NUL). */
#define RMQ_THREAD_NAME_MAX 15

/* Name the calling thread (cut to RMQ_THREAD_NAME_MAX bytes). Returns 0,
 * or -errno when the kernel refused it. Thread-safe; no GIL needed. */
int rmq_name_thread(const char *name);

#endif /* RMQ_THREAD_NAME_H */
