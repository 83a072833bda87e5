/*
 * One table of error codes shared by every module (libuv style). Functions return 0 or a negative
 * PDR_E* value; only these codes cross a module boundary. Foreign errors (CURLcode, CUresult,
 * errno, libyaml marks) are translated at the edge.
 */
#ifndef PDR_ERR_H
#define PDR_ERR_H

/* XX(name, value, description): every value explicit, never its position in the list. */
#define PDR_ERRNO_MAP(XX)                                                                                    \
    XX(EAGAIN, -999, "operation would block")                                                                \
    XX(ENOMEM, -998, "out of memory")                                                                        \
    XX(EINVAL, -997, "invalid argument")                                                                     \
    XX(ETOOBIG, -996, "size limit exceeded")                                                                 \
    XX(ETIMEDOUT, -995, "deadline passed")                                                                   \
    XX(ECANCELED, -994, "operation canceled")                                                                \
    XX(EPEERGONE, -993, "peer closed the connection")                                                        \
    XX(ECONNREFUSED, -992, "connection refused")                                                             \
    XX(ESIZE, -991, "size mismatch between source and destination")                                          \
    XX(ENOROOM, -990, "unknown room")                                                                        \
    XX(EEXIST, -989, "already exists")                                                                       \
    XX(EPROTO, -988, "protocol error")                                                                       \
    XX(EIO, -987, "input/output error")                                                                      \
    XX(ENOWORKER, -986, "no healthy worker")                                                                 \
    XX(ECONFIG, -985, "invalid configuration")                                                               \
    XX(ENOTSUP, -984, "not supported")                                                                       \
    XX(ECLOSED, -983, "engine is shutting down")                                                             \
    XX(EBADTICKET, -982, "malformed ticket")                                                                 \
    XX(ETICKETEXPIRED, -981, "expired ticket")                                                               \
    XX(EFORGED, -980, "forged ticket (bad signature or unknown key)")                                        \
    XX(EREPLAYED, -979, "replayed ticket (already used)")                                                    \
    XX(EWRONGPEER, -978, "ticket names another peer")

/*
 * The values are ABI: they cross the wire (transport ERROR frames) and the shim's C and Python APIs
 * (worker-shim/pdshim.h and python/pdshim.py hold copies, checked against this table by a test). A
 * value never changes and is never reused; a new code takes the next free value, PDR__ERR_LAST's, and
 * PDR__ERR_LAST moves up by one (toward zero). pdshim.h defines the same enum under the same guard, so
 * either header may come first.
 */
#define PDR__ERR_FIRST (-1000) /* below every code */
#define PDR__ERR_LAST (-977)   /* above every code */

#ifndef PDR_ERRNO_DEFINED
#define PDR_ERRNO_DEFINED
enum {
    PDR_OK = 0,
#define PDR__ERR_ENUM(name, value, msg) PDR_##name = (value),
    PDR_ERRNO_MAP(PDR__ERR_ENUM)
#undef PDR__ERR_ENUM
};
#endif

/* Whichever header defined the enum, its values are the table's, and the table lies in (FIRST, LAST). */
#define PDR__ERR_CHECK(name, value, msg)                                                                     \
    _Static_assert(PDR_##name == (value) && (value) > PDR__ERR_FIRST && (value) < PDR__ERR_LAST,             \
                   "PDR_" #name " differs from common/err.h or lies outside its range");
PDR_ERRNO_MAP(PDR__ERR_CHECK)
#undef PDR__ERR_CHECK

/* Returns a static description of a PDR_E* code (or of a negative errno). Never NULL. */
const char *pdr_strerror(int err);
/* Returns the symbolic name ("ETIMEDOUT") of a PDR_E* code. Never NULL. */
const char *pdr_errname(int err);

#endif
