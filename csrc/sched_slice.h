/* sched_slice.h: ask Linux for a shorter time slice for the calling thread.
 *
 * Linux's fair scheduler (EEVDF, 6.6+) takes a per-thread slice request
 * from sched_setattr(2)'s sched_runtime since 6.12, clamped to 0.1-100 ms
 * (the default is base_slice_ns, 0.75 ms times 1 + log2(CPUs)). A thread
 * with a shorter slice gets an earlier virtual deadline: when it wakes it
 * runs sooner, and a thread it wakes (a client reading its answer) does
 * not take its CPU in the middle of its turn. The broker's event loop asks
 * for one while it is mostly idle (eventLoopSchedSliceUs,
 * pyrmq/broker/loop_slice.py).
 *
 * Only the slice changes: the thread's policy, nice value and
 * reset-on-fork flag are read first and written back as they were. Older
 * kernels accept the call and ignore the slice; other systems have no such
 * call. */
#ifndef RMQ_SCHED_SLICE_H
#define RMQ_SCHED_SLICE_H

#include <stdint.h>

/* The slices a thread may ask for besides 0 (the kernel's default): the
 * range the kernel clamps a request to. */
#define RMQ_SCHED_SLICE_MIN_NS 100000LL
#define RMQ_SCHED_SLICE_MAX_NS 100000000LL

/* Ask for slice_ns (0: the kernel's default) for the calling thread.
 * Returns the slice the kernel now reports for it (> 0: honoured; 0: the
 * kernel keeps no per-thread slice, before 6.12), or -errno: -ENOSYS
 * where there is no sched_setattr, -EINVAL for a policy other than
 * SCHED_OTHER or SCHED_BATCH (a real-time thread keeps what it has), or
 * what the kernel refused with; -EINVAL too for a slice outside 0 and
 * RMQ_SCHED_SLICE_MIN_NS..MAX_NS. Thread-safe; no GIL needed. */
int64_t rmq_sched_slice(int64_t slice_ns);

#endif /* RMQ_SCHED_SLICE_H */
