/* paths.c: see paths.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rmq_errors.h"

int rmq_mkdirs(const char *dir) {
    if (!*dir) return RMQ_EBAD_ARG;
    char *p = strdup(dir);
    if (!p) return -ENOMEM;
    int rc = RMQ_OK;
    size_t len = strlen(p);
    for (size_t i = 1; i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = -errno;
            break;
        }
        p[i] = c;
    }
    free(p);
    if (rc != RMQ_OK) return rc;
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    return S_ISDIR(st.st_mode) ? RMQ_OK : -ENOTDIR;
}

char *rmq_path_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", a, b);
    return p;
}
