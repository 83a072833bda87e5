/*
 * What the server's files share, bottom up: server_listen.c (bind, accept, close a listener),
 * server_shutdown.c (stop accepting, let in-flight requests finish, close every loop) and server.c
 * (routes, CORS, loops, the start). Each calls only the files before it. Nothing outside server/
 * includes it.
 */
#ifndef PDR_SERVER_INTERNAL_H
#define PDR_SERVER_INTERNAL_H
#include "router.h"

/* server_listen.c */
/* Binds host:port (SO_REUSEPORT when reuseport) and accepts on t's loop into `h`; sets *listening. */
int pdr__server_open_listener(pdr_thread_t *t, const char *host, int port, int reuseport, pdr_listener_t *h,
                              int *listening);
void pdr__server_accept_backlog(pdr_thread_t *t, pdr_listener_t *l);
void pdr__server_close_listener(pdr_listener_t *l);

/* server_shutdown.c */
void pdr__server_start_loop_shutdown(pdr_thread_t *t);
void pdr__server_begin_drain(pdr_router_t *r);

#endif
