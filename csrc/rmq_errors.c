#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "rmq_errors.h"

#include <string.h>

const char *rmq_strerror(int rc) {
    switch (rc) {
    case RMQ_OK: return "ok";
    case RMQ_EINVAL_TOPIC: return "invalid topic name (rules: ^[%|a-zA-Z0-9_-]+$, at most 127 characters)";
    case RMQ_EMSG_TOO_LARGE: return "message too large (over maxMessageSize)";
    case RMQ_EPROPS_TOO_LARGE: return "properties too large (over 32767 bytes)";
    case RMQ_EQUEUE_ID: return "queue id out of range";
    case RMQ_EBAD_BATCH: return "malformed batch body";
    case RMQ_ECORRUPT: return "corrupt data";
    case RMQ_ENOT_FOUND: return "not found";
    case RMQ_ECLOSED: return "closed";
    case RMQ_ENOT_STORE: return "not a pyrmq store directory";
    case RMQ_EBAD_ARG: return "bad argument";
    case RMQ_EBAD_HOST: return "host address must be 8 (IPv4+port) or 20 (IPv6+port) bytes";
    case RMQ_ELOCKED: return "store is locked by another process";
    case RMQ_EFULL: return "file full";
    default: return rc < 0 && rc > -1000 ? strerror(-rc) : "unknown error";
    }
}
