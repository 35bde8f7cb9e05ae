/* rmq_errors.h: status codes of the C core. Functions return RMQ_OK (0), a
 * negative errno (-ENOSPC, -EIO, ...) for operating-system failures, or one of
 * the RMQ_E* codes below (all <= -1000, so they never collide with errno).
 * rmqcore maps them to Python exceptions in one place (_raise_for). */
#ifndef RMQ_ERRORS_H
#define RMQ_ERRORS_H

#define RMQ_OK 0
#define RMQ_EINVAL_TOPIC (-1001)      /* topic empty, too long or bad characters */
#define RMQ_EMSG_TOO_LARGE (-1002)    /* body or record over max_message_size */
#define RMQ_EPROPS_TOO_LARGE (-1003)  /* properties over 32767 bytes */
#define RMQ_EQUEUE_ID (-1004)         /* queue id out of range */
#define RMQ_EBAD_BATCH (-1005)        /* malformed batch body */
#define RMQ_ECORRUPT (-1006)          /* a record or file failed validation */
#define RMQ_ENOT_FOUND (-1007)        /* no record / unit at that offset */
#define RMQ_ECLOSED (-1008)           /* the store or file is closed */
#define RMQ_ENOT_STORE (-1009)        /* the directory is not a pyrmq store */
#define RMQ_EBAD_ARG (-1010)          /* an argument outside its documented range */
#define RMQ_EBAD_HOST (-1011)         /* a host address that is not 8 or 20 bytes */
#define RMQ_ELOCKED (-1012)           /* another process holds the store lock */
#define RMQ_EFULL (-1013)             /* a fixed-size file has no room (IndexFile) */

/* A human-readable name for a status code (static storage). */
const char *rmq_strerror(int rc);

#endif /* RMQ_ERRORS_H */
