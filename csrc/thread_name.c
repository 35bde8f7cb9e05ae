/* The calling thread's name (thread_name.h). */
#include "thread_name.h"

#include <errno.h>
#include <stdio.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

int rmq_name_thread(const char *name) {
#ifdef __linux__
    char buf[RMQ_THREAD_NAME_MAX + 1];
    snprintf(buf, sizeof buf, "%s", name); /* cut to what Linux keeps */
    return prctl(PR_SET_NAME, buf, 0, 0, 0) == 0 ? 0 : -errno;
#else
    (void)name;
    return 0;
#endif
}
