/*
 * The server (server/): the listeners, the loop threads, the route dispatch and the shutdown sequence.
 * main.c alone calls it; the shutdown's entry points are in server_shutdown.h.
 */
#ifndef PDR_SERVER_H
#define PDR_SERVER_H

#include <uv.h>
#include "config.h"
#include "router.h"
#include "server_shutdown.h"

/* Sets up the shared state and every loop (loop 0 on `loop0`), starts threads 1..n-1. */
int pdr_router_start(pdr_router_t *r, pdr_config_t *c, uv_loop_t *loop0);

#endif
