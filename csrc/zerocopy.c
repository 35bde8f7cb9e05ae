#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "zerocopy.h"

#include <errno.h>
#include <sys/sendfile.h>

#include "rmq_errors.h"

int rmq_sendfile(int sock_fd, int file_fd, int64_t offset, int64_t count, int64_t *sent) {
    *sent = 0;
    if (offset < 0 || count < 0) return RMQ_EBAD_ARG;
    off_t off = (off_t)offset;
    while (*sent < count) {
        ssize_t n = sendfile(sock_fd, file_fd, &off, (size_t)(count - *sent));
        if (n > 0) {
            *sent += n;
            continue;
        }
        if (n == 0) return RMQ_ENOT_FOUND; /* past the end of the file */
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return RMQ_OK;
        return -errno;
    }
    return RMQ_OK;
}
