/*
 * pdsim's data plane: one h2o context on the main uv loop, the request state machine and the glue to
 * libpdshim (server_internal.h lists its parts). This part holds the state, the responses, a request's
 * lifetime, the listener, start and shutdown. Everything runs on the loop thread, except on_shim_done()
 * (kv_flow.c), which runs on a shim thread and only appends the finished item to a locked queue and wakes the
 * loop with a uv_async_t.
 *
 * A request's state (sim_req_t) is malloc'ed and reference counted: one reference for the h2o request
 * (dropped by the pool's dispose callback, which h2o runs even when stop never ran: an HTTP/2 client that
 * resets before the headers receives no stop), one per pending shim operation and one per thread-pool job. KV
 * buffers live in it, so they stay valid until every shim callback has run. Its two timers are closed, and it
 * is freed, when the count is zero. After dispose (ctx->req == NULL) nothing touches h2o again; after stop
 * nothing is sent again.
 */
#include "server_internal.h"

struct sim_state sim__state;

const char *const sim__ticket_reasons[7] = {"missing",  "malformed",  "forged",    "expired",
                                            "replayed", "wrong_peer", "wrong_room"};

/* The reason for a shim's ticket error, or -1 when status is not one. */
int sim__ticket_reason(int status)
{
    switch (status) {
    case PDR_EBADTICKET:
        return TICKET_MALFORMED;
    case PDR_EFORGED:
        return TICKET_FORGED;
    case PDR_ETICKETEXPIRED:
        return TICKET_EXPIRED;
    case PDR_EREPLAYED:
        return TICKET_REPLAYED;
    case PDR_EWRONGPEER:
        return TICKET_WRONG_PEER;
    default:
        return -1;
    }
}

const char *sim__role_name(int role)
{
    return role == PDSIM_ROLE_PREFILL ? "prefill" : role == PDSIM_ROLE_DECODE ? "decode" : "both";
}

/* Sends a complete response with a known length (h2o_send_inline alone would send it chunked). */
void sim__send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    req->res.status = status;
    req->res.reason = pdr_http_reason(status);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    req->res.content_length = len;
    h2o_send_inline(req, body, len);
}

void sim__send_json(h2o_req_t *req, int status, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (s == NULL) {
        static const char oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"internal_error\",\"code\":500}}";
        sim__send_body(req, 500, "application/json", oom, sizeof(oom) - 1);
        return;
    }
    sim__send_body(req, status, "application/json", s, strlen(s));
    free(s);
}

static json_t *error_obj(int status, const char *msg)
{
    const char *type = status == 400 || status == 404 || status == 405 || status == 413
                           ? "invalid_request_error"
                       : status == 403 ? "permission_error"
                       : status == 503 ? "service_unavailable"
                                       : "internal_error";
    return json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", type, "code", status);
}

/* The OpenAI error shape {"error":{"message","type","code"}}. */
void sim__send_error(h2o_req_t *req, int status, const char *msg)
{
    json_t *o = error_obj(status, msg);
    sim__send_json(req, status, o);
    json_decref(o);
}

/* ------------------------------------------------------------------ request lifetime */

/* The request's answer is complete, failed or cancelled: it no longer counts as in progress. */
void sim__req_inactive(sim_req_t *ctx)
{
    if (ctx->active) {
        ctx->active = 0;
        sim__state.active--;
    }
}

static void req_on_handle_close(uv_handle_t *h)
{
    sim_req_t *ctx = h->data;
    if (++ctx->closed_handles < 2)
        return;
    pdr_dqueue_unlink(&sim__state.reqs, &ctx->link);
    sim__state.nreqs--;
    sim__req_inactive(ctx);
    for (size_t i = 0; i < ctx->n_items; i++) {
        pdsim_toks_free(&ctx->items[i].toks);
        pdsim_gen_free(&ctx->items[i].gen);
        free(ctx->items[i].kv);
    }
    free(ctx->items);
    pdr_buf_free(&ctx->send);
    json_decref(ctx->body);
    json_decref(ctx->vllm_kv);
    free(ctx);
    if (sim__state.shutting_down && sim__state.nreqs == 0 && sim__state.nconns == 0 &&
        sim__state.on_drained != NULL)
        sim__state.on_drained();
}

void sim__req_unref(sim_req_t *ctx)
{
    if (--ctx->refs > 0)
        return;
    uv_close((uv_handle_t *)&ctx->timer, req_on_handle_close);
    uv_close((uv_handle_t *)&ctx->peek, req_on_handle_close);
}

/* The engine's load as the shim reports it to the router (--events-url). */
void sim__report_load(void)
{
    if (sim__state.shim == NULL || sim__state.opts.events_url == NULL)
        return;
    uint64_t cap = (uint64_t)sim__state.opts.kv_capacity_bytes;
    pdshim_load_t ld = {0};
    if (cap > 0) {
        ld.kv_total_bytes = cap;
        ld.kv_free_bytes = cap > sim__state.kv_used ? cap - sim__state.kv_used : 0;
        ld.kv_bytes_per_token = (uint64_t)sim__state.opts.kv_bytes_per_token;
    }
    ld.queue_depth = sim__state.nreqs;
    pdshim_report_load(sim__state.shim, &ld);
}

/* Gives back the KV a request held (before its last bytes go out: the router may send the next request
 * the moment it has them). */
static void kv_give_back(sim_req_t *ctx)
{
    if (ctx->kv_held == 0)
        return;
    sim__state.kv_used -= ctx->kv_held;
    ctx->kv_held = 0;
    sim__report_load();
}

/* Stops the timers and cancels pending transfers; the shim callbacks still come and drop their refs. */
void sim__req_release(sim_req_t *ctx)
{
    kv_give_back(ctx);
    uv_timer_stop(&ctx->timer);
    uv_timer_stop(&ctx->peek);
    for (size_t i = 0; i < ctx->n_items; i++) {
        if (ctx->items[i].op_pending && sim__state.shim != NULL)
            pdshim_cancel(sim__state.shim, ctx->items[i].room);
    }
}

static void mark_cancelled(sim_req_t *ctx)
{
    if (ctx->cancelled || ctx->finished)
        return;
    ctx->cancelled = 1;
    sim__state.cancelled++;
    sim__req_inactive(ctx);
}

static void on_die(uv_timer_t *t)
{
    (void)t;
    pdr_warn("pdsim: --die-after reached (%" PRIu64 " requests completed), exiting with status 3",
             sim__state.completed);
    fflush(stderr);
    _exit(3);
}

static void on_dispose(void *p)
{
    sim_req_t *ctx = *(sim_req_t **)p;
    ctx->req = NULL;
    mark_cancelled(ctx);
    sim__req_release(ctx);
    if (ctx->die_on_dispose)
        uv_timer_start(&sim__state.die_timer, on_die, 0, 0);
    sim__req_unref(ctx);
}

/* h2o calls stop when the connection goes away after h2o_start_response and before the final send. */
static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    sim_req_t *ctx = (sim_req_t *)gen;
    (void)req;
    ctx->stopped = 1;
    mark_cancelled(ctx);
    sim__req_release(ctx);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    sim_req_t *ctx = (sim_req_t *)gen;
    (void)req;
    ctx->sending = 0;
    sim__pump(ctx);
}

int sim__req_is_live(const sim_req_t *ctx)
{
    return ctx->req != NULL && !ctx->finished && !ctx->stopped && !ctx->cancelled && !ctx->aborted;
}

/* Ends a request that has not started its response with an error. */
void sim__req_fail(sim_req_t *ctx, int status, const char *msg)
{
    if (!sim__req_is_live(ctx) || ctx->started)
        return;
    ctx->finished = 1;
    sim__state.errors++;
    sim__req_inactive(ctx);
    sim__req_release(ctx);
    sim__send_error(ctx->req, status, msg);
}

int sim__fd_of(h2o_req_t *req)
{
    h2o_socket_t *sock =
        req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
    return sock != NULL ? h2o_socket_get_fd(sock) : -1;
}

int sim__req_peer_closed(const sim_req_t *ctx)
{
    int fd = ctx->req != NULL && ctx->req->version < 0x200 ? sim__fd_of(ctx->req) : -1;
    if (fd < 0)
        return 0;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)));
}

/* h2o does not read an HTTP/1 socket while the handler is pending. */
void sim__on_peek(uv_timer_t *t)
{
    sim_req_t *ctx = t->data;
    if (!sim__req_is_live(ctx) || (ctx->started && !ctx->kv_wait)) {
        uv_timer_stop(t);
        return;
    }
    if (sim__req_peer_closed(ctx))
        sim__req_disconnected(ctx);
}

void sim__req_disconnected(sim_req_t *ctx)
{
    mark_cancelled(ctx);
    sim__req_release(ctx);
    if (ctx->started) {
        /* stream_head_before_kv: the answer has begun (h2o sees the close only at its next write). */
        ctx->kv_wait = 0;
        ctx->abort_pending = 1;
        sim__pump(ctx);
        return;
    }
    ctx->finished = 1;
    h2o_send_error_generic(ctx->req, 502, "Bad Gateway", "client closed the connection",
                           H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
}

sim_req_t *sim__req_new(h2o_req_t *req, enum sim_route route)
{
    sim_req_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    sim_req_t **holder = h2o_mem_alloc_shared(&req->pool, sizeof(*holder), on_dispose);
    *holder = ctx;
    ctx->gen.proceed = on_proceed;
    ctx->gen.stop = on_stop;
    ctx->req = req;
    ctx->refs = 1;
    ctx->route = route;
    ctx->role = sim__state.opts.role;
    ctx->created = (int64_t)time(NULL);
    uv_timer_init(sim__state.loop, &ctx->timer);
    uv_timer_init(sim__state.loop, &ctx->peek);
    ctx->timer.data = ctx;
    ctx->peek.data = ctx;
    pdr_dqueue_append(&sim__state.reqs, &ctx->link);
    sim__state.nreqs++;
    ctx->active = 1;
    if (++sim__state.active > sim__state.active_max)
        sim__state.active_max = sim__state.active;
    if (req->version < 0x200)
        uv_timer_start(&ctx->peek, sim__on_peek, SIM_PEEK_MS, SIM_PEEK_MS);
    return ctx;
}

/* ------------------------------------------------------------------ listener, start, shutdown */

static void on_conn_close(uv_handle_t *h)
{
    sim_conn_t *c = (sim_conn_t *)h;
    pdr_dqueue_unlink(&sim__state.conns, &c->link);
    sim__state.nconns--;
    free(c);
    if (sim__state.shutting_down && sim__state.nreqs == 0 && sim__state.nconns == 0 &&
        sim__state.on_drained != NULL)
        sim__state.on_drained();
}

static void on_accept(uv_stream_t *listener, int status)
{
    if (status != 0)
        return;
    sim_conn_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return;
    uv_tcp_init(listener->loop, &c->tcp);
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    pdr_dqueue_append(&sim__state.conns, &c->link);
    sim__state.nconns++;
    h2o_accept(&sim__state.actx, h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_close));
}

int pdsim_server_start(uv_loop_t *loop, const pdsim_opts_t *opts)
{
    sim__state.loop = loop;
    sim__state.opts = *opts;
    sim__state.layout = pdsim_layout_salt(opts);
    sim__state.faults = opts->faults;
    sim__set_die_after(opts->faults.die_after);
    sim__state.conns = sim__state.reqs = (pdr_dqueue_t){NULL, NULL};
    pthread_mutex_init(&sim__state.qlock, NULL);
    uv_async_init(loop, &sim__state.async, sim__on_async);
    uv_timer_init(loop, &sim__state.die_timer);
    if (opts->prefix_cache_tokens > 0 && opts->role != PDSIM_ROLE_DECODE) {
        sim__state.pcache =
            pdsim_pcache_new((uint64_t)opts->prefix_cache_tokens, (uint64_t)opts->cache_block_tokens);
        if (sim__state.pcache == NULL) {
            pdr_error("pdsim: cannot allocate the prefix cache (%" PRId64 " tokens)",
                      opts->prefix_cache_tokens);
            return PDR_ENOMEM;
        }
        if (opts->kv_events_endpoint != NULL && pdsim_kvev_start(opts, sim__state.pcache) != 0)
            return PDR_EIO;
    }

    h2o_config_init(&sim__state.config);
    sim__state.config.max_request_entity_size = SIM_MAX_BODY;
    h2o_hostconf_t *host =
        h2o_config_register_host(&sim__state.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof(*handler));
    handler->on_req = sim__on_req;
    h2o_context_init(&sim__state.ctx, loop, &sim__state.config);
    sim__state.actx.ctx = &sim__state.ctx;
    sim__state.actx.hosts = sim__state.config.hosts;
    if (opts->tls_cert != NULL || opts->tls_key != NULL) {
        SSL_CTX *tls = SSL_CTX_new(TLS_server_method());
        if (tls == NULL || opts->tls_cert == NULL || opts->tls_key == NULL ||
            SSL_CTX_use_certificate_chain_file(tls, opts->tls_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(tls, opts->tls_key, SSL_FILETYPE_PEM) != 1 ||
            (opts->tls_client_ca != NULL &&
             SSL_CTX_load_verify_locations(tls, opts->tls_client_ca, NULL) != 1)) {
            fprintf(stderr, "pdsim: --tls-cert and --tls-key: cannot load the certificate and key\n");
            if (tls != NULL)
                SSL_CTX_free(tls);
            return PDR_EINVAL;
        }
        if (opts->tls_client_ca != NULL)
            SSL_CTX_set_verify(tls, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        /* A session (ticket) the client resumes is checked against this context: without one, OpenSSL
         * fails every resumption once client certificates are verified, where engines' servers (Python's
         * ssl module, uvicorn) set one and resume. */
        if (!opts->tls_no_resumption) /* --tls-fail-resumption: the misconfigured server, on purpose */
            SSL_CTX_set_session_id_context(tls, (const unsigned char *)"pdsim", 5);
        sim__state.actx.ssl_ctx = tls; /* kept for the process's life */
    }

    if (opts->role != PDSIM_ROLE_BOTH) {
        pdshim_opts_t so = {0};
        so.listen_host = opts->role == PDSIM_ROLE_PREFILL ? opts->host : NULL;
        so.listen_port = opts->role == PDSIM_ROLE_PREFILL ? opts->bootstrap_port : 0;
        so.default_timeout_ms = (uint32_t)opts->kv_timeout_ms;
        so.ticket_key_files = opts->ticket_keys;
        so.n_ticket_key_files = (size_t)opts->n_ticket_keys;
        if (opts->role == PDSIM_ROLE_DECODE && opts->n_ticket_keys > 0) {
            if (opts->ticket_identity != NULL)
                snprintf(sim__state.ticket_identity, sizeof(sim__state.ticket_identity), "%s",
                         opts->ticket_identity);
            else if (strchr(opts->host, ':') != NULL && opts->host[0] != '[')
                snprintf(sim__state.ticket_identity, sizeof(sim__state.ticket_identity), "[%s]:%d",
                         opts->host, opts->port);
            else
                snprintf(sim__state.ticket_identity, sizeof(sim__state.ticket_identity), "%s:%d", opts->host,
                         opts->port);
            so.ticket_identity = sim__state.ticket_identity[0] != '\0' ? sim__state.ticket_identity : NULL;
        }
        char wurl[128];
        if (opts->events_url != NULL) {
            int v6 = strchr(opts->host, ':') != NULL && opts->host[0] != '[';
            snprintf(wurl, sizeof(wurl), "http://%s%s%s:%d", v6 ? "[" : "", opts->host, v6 ? "]" : "",
                     opts->port);
            so.events_url = opts->events_url;
            so.events_key_file = opts->events_key_file;
            so.worker_url = wurl;
        }
        int err = 0;
        sim__state.shim = pdshim_create(&so, &err);
        if (sim__state.shim == NULL) {
            pdr_error("pdsim: cannot start the shim%s (bootstrap port %d): %s",
                      so.listen_host ? " listener" : "", so.listen_port, pdshim_strerror(err));
            return err != 0 ? err : PDR_EIO;
        }
    }

    /* "127.0.0.1", "::1" or "[::1]" */
    struct sockaddr_storage addr;
    pdr_hostport_t hp;
    char name[64];
    int r = pdr_split_hostport(opts->host, strlen(opts->host), &hp) != 0 || hp.port != NULL ||
                    hp.hlen >= sizeof(name)
                ? UV_EINVAL
                : 0;
    if (r == 0) {
        memcpy(name, hp.host, hp.hlen);
        name[hp.hlen] = '\0';
        r = hp.ipv6 ? uv_ip6_addr(name, opts->port, (struct sockaddr_in6 *)&addr)
                    : uv_ip4_addr(name, opts->port, (struct sockaddr_in *)&addr);
    }
    if (r != 0) {
        pdr_error("pdsim: bad --host %s: %s", opts->host, uv_strerror(r));
        return PDR_EINVAL;
    }
    uv_tcp_init(loop, &sim__state.listener);
    if ((r = uv_tcp_bind(&sim__state.listener, (struct sockaddr *)&addr, 0)) != 0 ||
        (r = uv_listen((uv_stream_t *)&sim__state.listener, 1024, on_accept)) != 0) {
        pdr_error("pdsim: cannot listen on %s:%d: %s", opts->host, opts->port, uv_strerror(r));
        return PDR_EIO;
    }
    if (pdsim_lease_start(loop, opts, sim__vllm_lease_expired, sim__vllm_heartbeat_tick) != 0)
        return PDR_EIO;
    snprintf(sim__state.engine_id, sizeof(sim__state.engine_id), "pdsim-%s-%d", opts->host, opts->port);
    sim__report_load(); /* the first report: the router learns this instance at once */
    pdr_info("pdsim: role %s listening on %s:%d%s", sim__role_name(opts->role), opts->host, opts->port,
             opts->role == PDSIM_ROLE_PREFILL ? " (bootstrap port open)" : "");
    return 0;
}

/* Stops accepting, fails what is pending, half-closes every connection so h2o closes it, and calls
 * on_drained once no connection and no request is left. */
void pdsim_server_shutdown(void (*on_drained)(void))
{
    if (sim__state.shutting_down)
        return;
    sim__state.shutting_down = 1;
    sim__state.on_drained = on_drained;
    if (!uv_is_closing((uv_handle_t *)&sim__state.listener))
        uv_close((uv_handle_t *)&sim__state.listener, NULL);
    pdsim_lease_stop();
    if (sim__state.shim != NULL) {
        pdshim_destroy(sim__state.shim); /* pending operations complete with PDR_ECLOSED, into the queue */
        sim__state.shim = NULL;
    }
    sim__drain_queue();
    for (pdr_dlink_t *l = sim__state.reqs.head, *next; l != NULL; l = next) {
        sim_req_t *ctx = PDR_DLINK_ITEM(l, sim_req_t, link);
        next = l->next;
        if (!sim__req_is_live(ctx))
            continue;
        if (!ctx->started) {
            sim__req_fail(ctx, 503, "pdsim is shutting down");
        } else if (ctx->sending) {
            ctx->abort_pending = 1;
        } else {
            ctx->abort_pending = 1;
            sim__pump(ctx);
        }
    }
    /* Idle keep-alive connections are in h2o's read: an EOF makes h2o close them cleanly. */
    for (pdr_dlink_t *l = sim__state.conns.head; l != NULL; l = l->next) {
        sim_conn_t *c = PDR_DLINK_ITEM(l, sim_conn_t, link);
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
            shutdown(fd, SHUT_RD);
    }
    if (sim__state.nreqs == 0 && sim__state.nconns == 0)
        on_drained();
}

/* After the loop stopped: closes what is left and frees h2o's state. The caller runs the loop once
 * more so the close callbacks run, then closes the loop. */
void pdsim_server_dispose(void)
{
    sim__drain_queue();
    uv_close((uv_handle_t *)&sim__state.async, NULL);
    uv_close((uv_handle_t *)&sim__state.die_timer, NULL);
    pdsim_lease_stop();
    if (!uv_is_closing((uv_handle_t *)&sim__state.listener))
        uv_close((uv_handle_t *)&sim__state.listener, NULL);
    h2o_context_dispose(&sim__state.ctx);
    h2o_config_dispose(&sim__state.config);
    for (size_t i = 0; i < SIM_LAST_MAX; i++)
        json_decref(sim__state.last[i]);
    for (size_t i = 0; i < 3; i++)
        json_decref(sim__state.last_headers[i]);
    pdsim_kvev_stop();
    pdsim_pcache_free(sim__state.pcache);
    sim__state.pcache = NULL;
    pthread_mutex_destroy(&sim__state.qlock);
}
