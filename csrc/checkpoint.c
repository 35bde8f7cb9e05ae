#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "crc32.h"
#include "endian.h"
#include "rmq_errors.h"
#include "rmq_format.h"

int rmq_checkpoint_load(const char *path, rmq_checkpoint_t *cp) {
    memset(cp, 0, sizeof(*cp));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    uint8_t page[RMQ_CHECKPOINT_PAYLOAD + 4];
    ssize_t n = pread(fd, page, sizeof(page), 0);
    close(fd);
    if (n != (ssize_t)sizeof(page)) return RMQ_ECORRUPT;
    if (rmq_get_be32(page + 48) != RMQ_CHECKPOINT_MAGIC) return RMQ_ECORRUPT;
    if (rmq_get_be32(page + 52) != rmq_body_crc(page, RMQ_CHECKPOINT_PAYLOAD)) return RMQ_ECORRUPT;
    cp->physic_msg_timestamp = rmq_get_be64(page);
    cp->logics_msg_timestamp = rmq_get_be64(page + 8);
    cp->index_msg_timestamp = rmq_get_be64(page + 16);
    cp->confirm_phy_offset = rmq_get_be64(page + 32);
    cp->dispatched_offset = rmq_get_be64(page + 40);
    if (cp->confirm_phy_offset < 0 || cp->dispatched_offset < 0) return RMQ_ECORRUPT;
    return RMQ_OK;
}

int rmq_checkpoint_open(const char *path, int *fd) {
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    return *fd < 0 ? -errno : RMQ_OK;
}

int rmq_checkpoint_save(int fd, const rmq_checkpoint_t *cp) {
    uint8_t page[RMQ_CHECKPOINT_FILE_SIZE];
    memset(page, 0, sizeof(page));
    rmq_put_be64(page, cp->physic_msg_timestamp);
    rmq_put_be64(page + 8, cp->logics_msg_timestamp);
    rmq_put_be64(page + 16, cp->index_msg_timestamp);
    rmq_put_be64(page + 32, cp->confirm_phy_offset);
    rmq_put_be64(page + 40, cp->dispatched_offset);
    rmq_put_be32(page + 48, RMQ_CHECKPOINT_MAGIC);
    rmq_put_be32(page + 52, rmq_body_crc(page, RMQ_CHECKPOINT_PAYLOAD));
    if (pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page)) return errno ? -errno : -EIO;
    if (fdatasync(fd) != 0) return -errno;
    return RMQ_OK;
}
