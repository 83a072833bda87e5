/* Error code descriptions. Pure functions; any thread. */
#include <string.h>
#include "err.h"

const char *pdr_strerror(int err)
{
    switch (err) {
    case PDR_OK:
        return "success";
#define PDR__ERR_CASE(name, value, msg)                                                                      \
    case PDR_##name:                                                                                         \
        return msg;
        PDR_ERRNO_MAP(PDR__ERR_CASE)
#undef PDR__ERR_CASE
    default:
        break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *pdr_errname(int err)
{
    switch (err) {
    case PDR_OK:
        return "OK";
#define PDR__ERR_NAME(name, value, msg)                                                                      \
    case PDR_##name:                                                                                         \
        return #name;
        PDR_ERRNO_MAP(PDR__ERR_NAME)
#undef PDR__ERR_NAME
    default:
        return "EUNKNOWN";
    }
}
