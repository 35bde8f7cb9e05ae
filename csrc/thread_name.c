/* The calling thread's name (thread_name.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strnlen */
#endif
#include "thread_name.h"

#include <errno.h>
#include <string.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

int rmq_name_thread(const char *name) {
#ifdef __linux__
    char buf[RMQ_THREAD_NAME_MAX + 1];
    size_t n = strnlen(name, RMQ_THREAD_NAME_MAX);
    memcpy(buf, name, n);
    buf[n] = '\0';
    return prctl(PR_SET_NAME, buf, 0, 0, 0) == 0 ? 0 : -errno;
#else
    (void)name;
    return 0;
#endif
}
