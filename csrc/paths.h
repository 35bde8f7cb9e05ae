/* paths.h: the store's directory and file-name helpers (one of each). */
#ifndef RMQ_PATHS_H
#define RMQ_PATHS_H

/* mkdir -p: RMQ_OK when dir is a directory afterwards; -ENOTDIR when
 * something else has its name; RMQ_EBAD_ARG for "". */
int rmq_mkdirs(const char *dir);

/* "a/b", malloc'ed (NULL: out of memory). */
char *rmq_path_join(const char *a, const char *b);

#endif /* RMQ_PATHS_H */
