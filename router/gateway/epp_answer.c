/*
 * The endpoint picker's answers (gateway_internal.h): the pick in the stream's exchange, a refusal as an
 * ImmediateResponse with an OpenAI-style error body, and the request's headers as the gateway sent them.
 * Loop 0.
 */
#include <stdio.h>
#include <string.h>

#include "gateway_internal.h"
#include "router.h"

/* The ImmediateResponse the gateway answers the client with, counted under outcome. */
void pdr__gw_refuse(gw_req_t *q, int status, const char *type, const char *msg, int outcome)
{
    char body[640];
    char esc[480];
    size_t k = 0;
    for (const char *p = msg; *p != '\0' && k + 2 < sizeof(esc); p++) {
        if (*p == '"' || *p == '\\')
            esc[k++] = '\\';
        esc[k++] = (*p >= 0x20) ? *p : ' ';
    }
    esc[k] = '\0';
    snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}", esc, type,
             status);
    pdr__gw_count(outcome);
    q->answered = 1;
    (void)pdr_epp_answer_immediate(q->s, status, body);
}

/* The request's header `name` (lower case) as the gateway sent it, or NULL. */
const char *pdr__gw_header(const gw_req_t *q, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < q->nh; i++)
        if (q->h[i].name_len == n && memcmp(q->h[i].name, name, n) == 0) {
            *len = q->h[i].value_len;
            return q->h[i].value;
        }
    return NULL;
}

/* The pick is made: answer the gateway in the stream's exchange. */
void pdr__gw_answer(gw_req_t *q, const char *const *eps, size_t n, const char *prefill)
{
    pdr_epp_header_t extra[2];
    size_t nx = 0;
    char clen[24];
    const pdr_config_t *c = q->g->r->threads[0].config;
    if (prefill != NULL) {
        extra[nx].name = c->epp.prefill_header;
        extra[nx].name_len = strlen(c->epp.prefill_header);
        extra[nx].value = prefill;
        extra[nx++].value_len = strlen(prefill);
    }
    q->answered = 1;
    if (q->mode == PDR_EPP_MODE_FULL_DUPLEX_STREAMED && q->body_sent) {
        snprintf(clen, sizeof(clen), "%zu", q->len);
        extra[nx].name = "content-length";
        extra[nx].name_len = 14;
        extra[nx].value = clen;
        extra[nx++].value_len = strlen(clen);
        (void)pdr_epp_answer_pick(q->s, PDR_EPP_REQUEST_HEADERS, eps, n, extra, nx);
        (void)pdr_epp_answer_body(q->s, PDR_EPP_REQUEST_BODY, (const uint8_t *)q->body, q->len, 1);
    } else if (q->mode == PDR_EPP_MODE_BUFFERED && q->body_sent) {
        (void)pdr_epp_answer_pick(q->s, PDR_EPP_REQUEST_BODY, eps, n, extra, nx);
    } else {
        (void)pdr_epp_answer_pick(q->s, PDR_EPP_REQUEST_HEADERS, eps, n, extra, nx);
    }
}
