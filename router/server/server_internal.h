/*
 * What the server's files share: server.c (routes, CORS, listeners and loops, the start) and
 * server_shutdown.c (stop accepting, let in-flight requests finish, close every loop). Nothing outside
 * these two files includes it.
 */
#ifndef PDR_SERVER_INTERNAL_H
#define PDR_SERVER_INTERNAL_H
#include "router.h"

/* server.c */
void pdr__server_accept_backlog(pdr_thread_t *t, pdr_listener_t *l);
void pdr__server_close_listener(pdr_listener_t *l);

/* server_shutdown.c */
void pdr__server_start_loop_shutdown(pdr_thread_t *t);
void pdr__server_begin_drain(pdr_router_t *r);

#endif
