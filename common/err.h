/*
 * One table of error codes shared by every module (libuv style). Functions return 0 or a negative
 * PDR_E* value; only these codes cross a module boundary. Foreign errors (CURLcode, CUresult,
 * errno, libyaml marks) are translated at the edge.
 */
#ifndef PDR_ERR_H
#define PDR_ERR_H

#define PDR_ERRNO_MAP(XX)                                                                                    \
    XX(EAGAIN, "operation would block")                                                                      \
    XX(ENOMEM, "out of memory")                                                                              \
    XX(EINVAL, "invalid argument")                                                                           \
    XX(ETOOBIG, "size limit exceeded")                                                                       \
    XX(ETIMEDOUT, "deadline passed")                                                                         \
    XX(ECANCELED, "operation canceled")                                                                      \
    XX(EPEERGONE, "peer closed the connection")                                                              \
    XX(ECONNREFUSED, "connection refused")                                                                   \
    XX(ESIZE, "size mismatch between source and destination")                                                \
    XX(ENOROOM, "unknown room")                                                                              \
    XX(EEXIST, "already exists")                                                                             \
    XX(EPROTO, "protocol error")                                                                             \
    XX(EIO, "input/output error")                                                                            \
    XX(ENOWORKER, "no healthy worker")                                                                       \
    XX(ECONFIG, "invalid configuration")                                                                     \
    XX(ENOTSUP, "not supported")                                                                             \
    XX(ECLOSED, "engine is shutting down")

enum {
    PDR_OK = 0,
#define PDR__ERR_ENUM(name, msg) PDR_##name,
    PDR__ERR_FIRST = -1000,
    PDR_ERRNO_MAP(PDR__ERR_ENUM) PDR__ERR_LAST
#undef PDR__ERR_ENUM
};

/* Returns a static description of a PDR_E* code (or of a negative errno). Never NULL. */
const char *pdr_strerror(int err);
/* Returns the symbolic name ("ETIMEDOUT") of a PDR_E* code. Never NULL. */
const char *pdr_errname(int err);

#endif
