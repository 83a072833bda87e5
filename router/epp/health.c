/*
 * grpc.health.v1.Health/Check (the gRPC health checking protocol): a unary call whose answer is the status
 * the embedder set for the service asked about (pdr_epp_set_health), SERVICE_UNKNOWN for a name never set.
 * The table is small and fixed (PDR_EPP_HEALTH_SERVICES names). Watch is not served (UNIMPLEMENTED, as for
 * any method not in the server's table). Loop thread only.
 */
#include <stdlib.h>
#include <string.h>
#include "epp_internal.h"
#include "err.h"
#include "health.pb-c.h"

int pdr_epp_set_health(pdr_epp_t *e, const char *service, pdr_epp_health_t st)
{
    size_t n = strlen(service);
    if (n >= EPP_SERVICE_MAX)
        return PDR_ETOOBIG;
    for (size_t i = 0; i < e->nhealth; i++) {
        if (strcmp(e->health[i].service, service) == 0) {
            e->health[i].status = st;
            return 0;
        }
    }
    if (e->nhealth == PDR_EPP_HEALTH_SERVICES)
        return PDR_ETOOBIG;
    memcpy(e->health[e->nhealth].service, service, n + 1);
    e->health[e->nhealth++].status = st;
    return 0;
}

static Grpc__Health__V1__HealthCheckResponse__ServingStatus status_of(const pdr_epp_t *e, const char *service)
{
    for (size_t i = 0; i < e->nhealth; i++) {
        if (strcmp(e->health[i].service, service) != 0)
            continue;
        switch (e->health[i].status) {
        case PDR_EPP_HEALTH_SERVING:
            return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        case PDR_EPP_HEALTH_NOT_SERVING:
            return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        default:
            return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__UNKNOWN;
        }
    }
    return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
}

static void on_message(void *data, pdr_grpc_call_t *call, const uint8_t *msg, size_t len)
{
    pdr_epp_t *e = data;
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(NULL, len, msg);
    if (req == NULL) {
        e->malformed++;
        pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT,
                        "malformed HealthCheckRequest (not a protobuf message)");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = status_of(e, req->service);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    uint8_t out[16]; /* one enum field: a tag and a varint */
    size_t n = grpc__health__v1__health_check_response__pack(&resp, out);
    if (pdr_grpc_send(call, out, n) == 0)
        pdr_grpc_finish(call, PDR_GRPC_OK, NULL);
    else
        pdr_grpc_finish(call, PDR_GRPC_INTERNAL, "cannot queue the answer");
}

static void on_half_close(void *data, pdr_grpc_call_t *call)
{
    (void)data;
    /* A unary call that sent no request (an answered one is finished already: this is then a no-op). */
    pdr_grpc_finish(call, PDR_GRPC_INVALID_ARGUMENT, "Check needs one HealthCheckRequest");
}

void pdr__epp_health_method(pdr_epp_t *e, pdr_grpc_method_t *m)
{
    memset(m, 0, sizeof(*m));
    m->path = EPP_PATH_HEALTH_CHECK;
    m->on_message = on_message;
    m->on_half_close = on_half_close;
    m->data = e;
}
