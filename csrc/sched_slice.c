/* Ask Linux for a shorter time slice for the calling thread (sched_slice.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sched_slice.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#if defined(__linux__) && defined(SYS_sched_setattr) && defined(SYS_sched_getattr)

/* struct sched_attr of the Linux UAPI (include/uapi/linux/sched/types.h),
 * its first version (48 bytes, SCHED_ATTR_SIZE_VER0): glibc declares it
 * only from 2.41, so it is spelt out here. */
struct rmq_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime; /* SCHED_OTHER/BATCH: the slice (6.12+) */
    uint64_t sched_deadline;
    uint64_t sched_period;
};

/* sched_attr.sched_flags: the thread's children start with the default
 * policy and nice value (SCHED_FLAG_RESET_ON_FORK of the UAPI) */
#define RMQ_SCHED_FLAG_RESET_ON_FORK 0x01ULL

static int get_attr(struct rmq_sched_attr *a) {
    memset(a, 0, sizeof *a);
    if (syscall(SYS_sched_getattr, 0, a, (unsigned)sizeof *a, 0U) != 0) return -errno;
    return 0;
}

int64_t rmq_sched_slice(int64_t slice_ns) {
    if (slice_ns != 0 && (slice_ns < RMQ_SCHED_SLICE_MIN_NS || slice_ns > RMQ_SCHED_SLICE_MAX_NS))
        return -EINVAL;
    struct rmq_sched_attr a;
    int rc = get_attr(&a);
    if (rc != 0) return rc;
    if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) return -EINVAL;
    a.size = sizeof a;
    /* a fair thread's flags are not kept across calls; the reset-on-fork
     * flag is the one a caller may have set */
    a.sched_flags &= RMQ_SCHED_FLAG_RESET_ON_FORK;
    a.sched_runtime = (uint64_t)slice_ns;
    a.sched_deadline = a.sched_period = 0;
    if (syscall(SYS_sched_setattr, 0, &a, 0U) != 0) return -errno;
    rc = get_attr(&a);
    if (rc != 0) return rc;
    return (int64_t)a.sched_runtime;
}

#else

int64_t rmq_sched_slice(int64_t slice_ns) {
    (void)slice_ns;
    return -ENOSYS;
}

#endif
