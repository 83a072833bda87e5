/*
 * The endpoint picker's state shared by its files: the server (epp_server.c, which starts and stops it),
 * the health table (health.c), the ext_proc streams (extproc.c reads the gateway's messages,
 * extproc_answer.c encodes the answers). epp.h is the public side. Loop thread only.
 */
#ifndef PDR_EPP_INTERNAL_H
#define PDR_EPP_INTERNAL_H

#include "epp.h"
#include "grpc.h"

#define EPP_SERVICE_MAX 128
/* The joined endpoint list of a pick ("ip:port,ip:port..."). */
#define EPP_ENDPOINTS_MAX 8192

#define EPP_PATH_PROCESS "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
#define EPP_PATH_HEALTH_CHECK "/grpc.health.v1.Health/Check"

typedef struct epp_health_entry {
    char service[EPP_SERVICE_MAX];
    pdr_epp_health_t status;
} epp_health_entry_t;

struct pdr_epp {
    pdr_grpc_server_t *grpc;
    pdr_grpc_method_t methods[2];
    pdr_epp_handler_t handler;
    epp_health_entry_t health[PDR_EPP_HEALTH_SERVICES];
    size_t nhealth;
    uint64_t streams, messages, malformed;
    void (*close_cb)(void *data);
    void *close_data;
};

struct pdr_epp_stream {
    pdr_epp_t *epp;
    pdr_grpc_call_t *call;
    pdr_epp_body_mode_t request_body_mode, response_body_mode;
    void *data;
};

/* health.c: the Health/Check method's row. */
void pdr__epp_health_method(pdr_epp_t *e, pdr_grpc_method_t *m);
/* extproc.c: the ExternalProcessor/Process method's row. */
void pdr__epp_extproc_method(pdr_epp_t *e, pdr_grpc_method_t *m);

#endif
