/* Placeholder until the k8s source lands: reports that it is not available. */
#include <stdio.h>
#include "discovery.h"

pdr_discovery_t *pdr_k8s_discovery_start(const pdr_config_t *c, pdr_discovery_emit_cb cb, void *ud, char *err,
                                         size_t errlen)
{
    (void)c, (void)cb, (void)ud;
    snprintf(err, errlen, "k8s discovery is not available in this build");
    return NULL;
}
