/*
 * Request-head checks h2o 2.2.5 does not make (pure: no I/O, no allocation). h2o accepts, and then frames
 * by its own rule, request heads that front-door proxies must refuse because a server behind them, or
 * the next request on the connection, may read them differently (request smuggling, RFC 9112 sections
 * 6.1 and 6.3):
 *
 *   - Content-Length together with Transfer-Encoding (h2o uses the chunked body and keeps the
 *     connection, so bytes after it are read as the next request);
 *   - more than one Content-Length (h2o uses the first), or more than one Transfer-Encoding;
 *   - Transfer-Encoding in an HTTP/1.0 request;
 *   - obs-fold (a header line that begins with whitespace), whitespace between a field name and its
 *     colon, a bare LF as a line end;
 *   - an HTTP/1.1 request without Host, or with more than one.
 *
 * The router calls it on every HTTP/1 request with the raw head, which h2o keeps at the start of the
 * connection's input buffer until the response is over; a refused request gets 400 and the connection
 * is closed. nginx and HAProxy refuse the same heads.
 */
#ifndef PDR_REQGUARD_H
#define PDR_REQGUARD_H

#include <stddef.h>

/* Checks the request head at the start of p (leading empty lines are skipped, as parsers do). Returns 0
 * when it is acceptable, or -1 with *why set to a static description of the problem. A head that does not
 * end within n bytes is refused too ("incomplete request head"). */
int pdr_reqguard_check_head(const char *p, size_t n, const char **why);

#endif
