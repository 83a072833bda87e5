/*
 * Answers every listener and handler sends itself (reply.c): the OpenAI error shape, a body of a given
 * type, a JSON object. h2o and jansson only, any loop.
 */
#ifndef PDR_REPLY_H
#define PDR_REPLY_H

#include <h2o.h>
#include <jansson.h>
#include <stddef.h>

/* The OpenAI error shape {"error":{"message","type","code"}} with status; retry_after_s > 0 adds
 * Retry-After. */
void pdr_send_error(h2o_req_t *req, int status, const char *type, const char *msg, int retry_after_s);
/* s as the inside of a JSON string (quotes, backslashes and control characters escaped), cut to fit cap. */
void pdr_json_escape(char *out, size_t cap, const char *s);
/* Answers status with body (copied by h2o) of content type ctype (a string that outlives the request). */
void pdr_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
/* Answers status with the compact JSON text of o (its reference is taken), or 503 when out of memory.
 * Returns the status sent. */
int pdr_send_json(h2o_req_t *req, int status, json_t *o);

#endif
