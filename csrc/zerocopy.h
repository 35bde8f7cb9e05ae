/* zerocopy.h: send a byte range of a file to a socket with sendfile(2),
 * never copying through user space. Works on blocking and non-blocking
 * sockets: on a non-blocking socket it returns RMQ_OK with *sent < count when
 * the socket buffer is full (EAGAIN), and the caller waits for writability
 * and calls again with the rest. Blocking only as the socket is; thread-safe;
 * call without the GIL. */
#ifndef RMQ_ZEROCOPY_H
#define RMQ_ZEROCOPY_H

#include <stdint.h>

int rmq_sendfile(int sock_fd, int file_fd, int64_t offset, int64_t count, int64_t *sent);

#endif /* RMQ_ZEROCOPY_H */
