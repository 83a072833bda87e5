/* Placeholder until the dns source lands: reports that it is not available. */
#include <stdio.h>
#include "discovery.h"

pdr_discovery_t *pdr_dns_discovery_start(const pdr_config_t *c, pdr_discovery_emit_cb cb, void *ud, char *err,
                                         size_t errlen)
{
    (void)c, (void)cb, (void)ud;
    snprintf(err, errlen, "dns discovery is not available in this build");
    return NULL;
}
