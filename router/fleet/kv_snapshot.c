/*
 * Snapshots of the precise prefix index (docs/internals/routing.md, "Snapshots of the index"): saved to
 * kv_events.snapshot_path every kv_events.snapshot_interval_ms and at a clean shutdown, loaded at start,
 * or fetched at start from a sibling router's admin API (kv_events.snapshot_from). The encoding and its
 * checks are routing/kvindex_snapshot.c's.
 *
 * Names: the index knows workers by their uid, which lives only as long as the process; a snapshot names
 * each by its target (the URL, with "@RANK" for a data-parallel rank), the name the subscriber uses too.
 * A worker of the index that is no longer in the pool is left out; a worker of the snapshot that is not
 * in the pool at the load (or has no kv_events endpoint) is parked (routing/kvsnap_park.h) for PARK_MS, and
 * loaded when a worker of that name is subscribed (discovery lists its workers only after the start).
 *
 * Threads: start runs before any loop (it may block: a file read, a libcurl fetch bounded by its
 * timeout). The timer and the admin route run on loop 0: each copies the index (under the index's lock,
 * one walk) and names the workers there, and a libuv worker thread encodes the copy (and writes the file);
 * `wlock` keeps the timer's write and the last one at shutdown from sharing the temporary file. The counters
 * are atomic.
 */
#include "kv_snapshot.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "kvsnap_park.h"
#include "kvsnap.h"
#include "router.h"
#include "util.h"

/* A bearer token file's ceiling (the admin token is one line). */
#define TOKEN_MAX 4096
/* How long a snapshot's workers that are not in the pool at the load wait for it (discovery's first
 * lists come within seconds of the start); then their entries are dropped (logged). */
#define PARK_MS 60000

enum { OP_WRITE, OP_LOAD, OP_FETCH, OP_N };
enum { OC_OK, OC_MISSING, OC_CORRUPT, OC_VERSION, OC_FOREIGN, OC_TOO_BIG, OC_FAILED, OC_N };
static const char *const op_names[OP_N] = {"write", "load", "fetch"};
static const char *const oc_names[OC_N] = {"ok",      "missing", "corrupt", "version",
                                           "foreign", "too_big", "failed"};
static uint64_t counts[OP_N][OC_N]; /* atomic */
static uint64_t loaded_entries;     /* atomic */
static uint64_t parked_entries;     /* atomic */

struct pdr_kv_snap {
    pdr_router_t *r;
    pdr_kvindex_t *ix;
    char *path, *tmp;
    uint64_t max_bytes;
    uv_timer_t timer;
    int timer_live;
    int in_flight; /* loop 0: a write is queued on the thread pool */
    uv_work_t work;
    pdr_kvsnap_t pending; /* the copy the queued write encodes */
    uint64_t pending_gen;
    uint64_t gen;         /* loop 0: copies taken */
    uint64_t gen_written; /* under wlock: the newest copy written (an older one never overwrites it) */
    char **names;         /* its workers' names (malloc'd each) */
    pthread_mutex_t wlock;
    pdr_kv_park_t *park; /* loop 0: the snapshot's workers not in the pool at the load, until park_until */
    uint64_t park_until;
};

static void count(int op, int oc)
{
    __atomic_add_fetch(&counts[op][oc], 1, __ATOMIC_RELAXED);
}

static int outcome_of(int rc)
{
    switch (rc) {
    case 0:
        return OC_OK;
    case PDR_EPROTO:
        return OC_CORRUPT;
    case PDR_ENOTSUP:
        return OC_VERSION;
    case PDR_ECONFIG:
        return OC_FOREIGN;
    case PDR_ETOOBIG:
        return OC_TOO_BIG;
    default:
        return OC_FAILED;
    }
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The name a snapshot gives w: its target, as the KV event subscriber names it. */
static const char *worker_name(const pdr_worker_t *w)
{
    return w->target[0] != '\0' ? w->target : w->conf.url;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; names != NULL && i < n; i++)
        free(names[i]);
    free(names);
}

/*
 * Copies the index into *s and names its workers from the pool (*names: malloc'd, n_workers of them);
 * workers no longer in the pool and their entries are left out.
 */
static int export_named(pdr_router_t *r, pdr_kvindex_t *ix, pdr_kvsnap_t *s, char ***names)
{
    int rc = pdr_kvindex_export(ix, s);
    if (rc != 0)
        return rc;
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&r->pool, -1, &ws);
    uint32_t *map = malloc((s->n_workers + 1) * sizeof(*map));
    char **nm = calloc(s->n_workers + 1, sizeof(*nm));
    if (map == NULL || nm == NULL) {
        free(map);
        free(nm);
        pdr_pool_release(ws, nw);
        pdr_kvsnap_free(s);
        return PDR_ENOMEM;
    }
    size_t kept = 0;
    for (size_t i = 0; i < s->n_workers; i++) {
        map[i] = UINT32_MAX;
        for (size_t k = 0; k < nw; k++) {
            if (ws[k]->uid != s->workers[i].id)
                continue;
            if ((nm[kept] = strdup(worker_name(ws[k]))) == NULL)
                break;
            s->workers[kept] = s->workers[i];
            s->workers[kept].name = nm[kept];
            s->workers[kept].name_len = strlen(nm[kept]);
            map[i] = (uint32_t)kept++;
            break;
        }
    }
    pdr_pool_release(ws, nw);
    size_t ne = 0;
    for (size_t i = 0; i < s->n_entries; i++) {
        if (map[s->entries[i].worker] == UINT32_MAX)
            continue;
        s->entries[ne] = s->entries[i];
        s->entries[ne++].worker = map[s->entries[i].worker];
    }
    s->n_workers = kept;
    s->n_entries = ne;
    s->created_ms = wall_ms();
    free(map);
    *names = nm;
    return 0;
}

typedef struct {
    uv_work_t work;
    pdr_kvsnap_t copy;
    char **names;
    uint64_t max_bytes;
    char *buf;
    size_t len;
    int rc;
    char msg[256];
    pdr_kv_snapshot_done_cb cb;
    void *data;
} encode_job_t;

static void on_encode(uv_work_t *w)
{
    encode_job_t *j = w->data;
    j->rc = pdr_kvsnap_encode(&j->copy, j->max_bytes, &j->buf, &j->len, j->msg, sizeof(j->msg));
}

static void on_encoded(uv_work_t *w, int status)
{
    encode_job_t *j = w->data;
    (void)status;
    free_names(j->names, j->copy.n_workers);
    pdr_kvsnap_free(&j->copy);
    j->cb(j->data, j->rc, j->buf, j->len, j->msg);
    free(j);
}

int pdr_kv_snapshot_encode_async(pdr_router_t *r, pdr_kv_snapshot_done_cb cb, void *data, char *msg,
                                 size_t cap)
{
    pdr_kvindex_t *ix = __atomic_load_n(&r->pool.kvindex, __ATOMIC_ACQUIRE);
    if (ix == NULL) {
        snprintf(msg, cap, "no pool uses precise_prefix: there is no index");
        return PDR_ENOTSUP;
    }
    encode_job_t *j = calloc(1, sizeof(*j));
    int rc = j != NULL ? export_named(r, ix, &j->copy, &j->names) : PDR_ENOMEM;
    if (rc != 0) {
        free(j);
        snprintf(msg, cap, "cannot copy the index: %s", pdr_strerror(rc));
        return rc;
    }
    pdr_kvindex_stats_t st;
    pdr_kvindex_stats(ix, &st);
    j->max_bytes = st.max_bytes;
    j->cb = cb;
    j->data = data;
    j->work.data = j;
    if (uv_queue_work(r->threads[0].loop, &j->work, on_encode, on_encoded) != 0) {
        free_names(j->names, j->copy.n_workers);
        pdr_kvsnap_free(&j->copy);
        free(j);
        snprintf(msg, cap, "cannot queue the encoding");
        return PDR_ENOMEM;
    }
    return 0;
}

/* Writes buf to s->tmp, then renames it over s->path: the path never names a half-written snapshot. */
static int write_file(pdr_kv_snap_t *s, const char *buf, size_t len, char *msg, size_t cap)
{
    int fd = open(s->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(msg, cap, "cannot open %s: %s", s->tmp, strerror(errno));
        return PDR_EIO;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(msg, cap, "cannot write %s: %s", s->tmp, n < 0 ? strerror(errno) : "short write");
            close(fd);
            unlink(s->tmp);
            return PDR_EIO;
        }
        off += (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        snprintf(msg, cap, "cannot flush %s: %s", s->tmp, strerror(errno));
        unlink(s->tmp);
        return PDR_EIO;
    }
    if (rename(s->tmp, s->path) != 0) {
        snprintf(msg, cap, "cannot rename %s to %s: %s", s->tmp, s->path, strerror(errno));
        unlink(s->tmp);
        return PDR_EIO;
    }
    return 0;
}

/* Encodes and writes a copy, the gen-th taken (any thread; under wlock). */
static void save(pdr_kv_snap_t *s, const pdr_kvsnap_t *copy, uint64_t gen)
{
    char msg[512] = "";
    char *buf = NULL;
    size_t len = 0;
    uint64_t t0 = pdr_now_ms();
    pthread_mutex_lock(&s->wlock);
    if (gen < s->gen_written) {
        pthread_mutex_unlock(&s->wlock);
        return; /* the copy at shutdown was written first: this older one must not replace it */
    }
    s->gen_written = gen;
    int rc = pdr_kvsnap_encode(copy, s->max_bytes, &buf, &len, msg, sizeof(msg));
    if (rc == 0)
        rc = write_file(s, buf, len, msg, sizeof(msg));
    pthread_mutex_unlock(&s->wlock);
    free(buf);
    count(OP_WRITE, outcome_of(rc));
    if (rc != 0)
        pdr_warn("kv index snapshot: not written to %s: %s", s->path, msg);
    else
        pdr_debug("kv index snapshot: %zu entries of %zu workers written to %s (%zu bytes, %" PRIu64 " ms)",
                  copy->n_entries, copy->n_workers, s->path, len, pdr_now_ms() - t0);
}

static void on_work(uv_work_t *w)
{
    pdr_kv_snap_t *s = w->data;
    save(s, &s->pending, s->pending_gen);
}

static void on_work_done(uv_work_t *w, int status)
{
    pdr_kv_snap_t *s = w->data;
    (void)status;
    free_names(s->names, s->pending.n_workers);
    s->names = NULL;
    pdr_kvsnap_free(&s->pending);
    s->in_flight = 0;
}

/* Loop 0: copies the index and queues its write on the thread pool (one at a time). */
static void on_timer(uv_timer_t *t)
{
    pdr_kv_snap_t *s = t->data;
    if (s->in_flight)
        return;
    int rc = export_named(s->r, s->ix, &s->pending, &s->names);
    if (rc != 0) {
        count(OP_WRITE, OC_FAILED);
        pdr_warn("kv index snapshot: cannot copy the index: %s", pdr_strerror(rc));
        return;
    }
    s->pending_gen = ++s->gen;
    s->work.data = s;
    s->in_flight = 1;
    if (uv_queue_work(t->loop, &s->work, on_work, on_work_done) != 0)
        on_work_done(&s->work, 0);
}

/* Decodes and loads a snapshot read from `from`; names are matched to the pool's workers. 0: loaded. */
static int load_bytes(pdr_kv_snap_t *s, int op, const char *buf, size_t len, const char *from)
{
    uint64_t t0 = pdr_now_ms();
    char msg[512] = "";
    pdr_kvsnap_t snap;
    int rc = pdr_kvsnap_decode(buf, len, s->max_bytes, &snap, msg, sizeof(msg));
    if (rc != 0) {
        count(op, outcome_of(rc));
        pdr_warn("kv index snapshot from %s refused: %s; the index starts empty", from, msg);
        return rc;
    }
    pdr_worker_t **ws;
    size_t nw = pdr_pool_snapshot(&s->r->pool, -1, &ws), skipped = 0;
    for (size_t i = 0; i < snap.n_workers; i++) {
        pdr_kvsnap_worker_t *sw = &snap.workers[i];
        sw->id = 0;
        for (size_t k = 0; k < nw && sw->id == 0; k++) {
            const char *name = worker_name(ws[k]);
            if (ws[k]->conf.kv_events != NULL && strlen(name) == sw->name_len &&
                memcmp(name, sw->name, sw->name_len) == 0)
                sw->id = ws[k]->uid;
        }
        if (sw->id == 0) {
            skipped++;
            pdr_info("kv index snapshot from %s: worker %.*s is not in the pool (or has no kv_events "
                     "endpoint): its entries wait %d s for it to join (discovery)",
                     from, (int)sw->name_len, sw->name, PARK_MS / 1000);
        }
    }
    pdr_pool_release(ws, nw);
    uint64_t n = 0;
    rc = pdr_kvindex_import(s->ix, &snap, &n);
    int nomem = 0;
    if (rc == 0 && skipped > 0 && (s->park = pdr_kv_park_new(&snap, &nomem)) != NULL) {
        s->park_until = pdr_now_ms() + PARK_MS;
        __atomic_store_n(&parked_entries, pdr_kv_park_entries(s->park), __ATOMIC_RELAXED);
    } else if (nomem) {
        pdr_warn("kv index snapshot: out of memory: the entries of workers not in the pool are dropped");
    }
    count(op, outcome_of(rc));
    __atomic_store_n(&loaded_entries, n, __ATOMIC_RELAXED);
    uint64_t now = wall_ms();
    if (rc != 0)
        pdr_warn("kv index snapshot from %s: loading stopped after %" PRIu64 " entries: %s", from, n,
                 pdr_strerror(rc));
    else
        pdr_info("kv index snapshot loaded from %s: %" PRIu64 " entries of %zu workers (%zu skipped), "
                 "written %" PRId64 " ms ago, loaded in %" PRIu64 " ms; its workers are warm until their "
                 "next KV event message confirms continuity",
                 from, n, snap.n_workers - skipped, skipped, (int64_t)(now - snap.created_ms),
                 pdr_now_ms() - t0);
    pdr_kvsnap_free(&snap);
    return rc;
}

/* Reads kv_events.snapshot_path (at most max_bytes) and loads it. */
static void load_file(pdr_kv_snap_t *s)
{
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int missing = errno == ENOENT;
        count(OP_LOAD, missing ? OC_MISSING : OC_FAILED);
        if (missing)
            pdr_info("kv index snapshot: no file at %s yet; the index starts empty", s->path);
        else
            pdr_warn("kv index snapshot: cannot open %s: %s; the index starts empty", s->path,
                     strerror(errno));
        return;
    }
    struct stat st;
    char *buf = NULL;
    int rc = fstat(fd, &st) != 0 ? PDR_EIO : (uint64_t)st.st_size > s->max_bytes ? PDR_ETOOBIG : 0;
    size_t len = rc == 0 ? (size_t)st.st_size : 0, off = 0;
    if (rc == 0 && (buf = malloc(len + 1)) == NULL)
        rc = PDR_ENOMEM;
    while (rc == 0 && off < len) {
        ssize_t n = read(fd, buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            rc = PDR_EIO;
        else
            off += (size_t)n;
    }
    close(fd);
    if (rc != 0) {
        count(OP_LOAD, outcome_of(rc));
        pdr_warn("kv index snapshot: cannot read %s (%s%s); the index starts empty", s->path,
                 pdr_strerror(rc), rc == PDR_ETOOBIG ? ": larger than kv_events.max_index_bytes" : "");
        free(buf);
        return;
    }
    (void)load_bytes(s, OP_LOAD, buf, len, s->path);
    free(buf);
}

typedef struct {
    char *buf;
    size_t len, alloc, cap; /* cap: kv_events.max_index_bytes, the answer's ceiling */
    int too_big, no_memory;
} fetch_buf_t;

static size_t on_fetch_data(char *p, size_t size, size_t n, void *o)
{
    fetch_buf_t *f = o;
    size_t add = size * n;
    if (add > f->cap - f->len) {
        f->too_big = 1;
        return 0; /* aborts the transfer */
    }
    if (f->len + add > f->alloc) {
        size_t na = f->alloc ? f->alloc : 64 * 1024;
        while (na < f->len + add)
            na *= 2;
        if (na > f->cap)
            na = f->cap;
        char *nb = realloc(f->buf, na);
        if (nb == NULL) {
            f->no_memory = 1;
            return 0;
        }
        f->buf = nb;
        f->alloc = na;
    }
    memcpy(f->buf + f->len, p, add);
    f->len += add;
    return add;
}

/* Reads a bearer token file (one line, at most TOKEN_MAX bytes; trailing white space dropped). */
static int read_token(const char *path, char *out, size_t cap, char *msg, size_t mcap)
{
    FILE *fp = fopen(path, "re");
    if (fp == NULL) {
        snprintf(msg, mcap, "cannot open the token file %s: %s", path, strerror(errno));
        return PDR_EIO;
    }
    size_t n = fread(out, 1, cap - 1, fp);
    int more = fgetc(fp) != EOF;
    fclose(fp);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ' || out[n - 1] == '\t'))
        n--;
    out[n] = '\0';
    if (more || n == 0 || strpbrk(out, "\r\n") != NULL) {
        snprintf(msg, mcap, "the token file %s is empty, over %zu bytes or more than one line", path,
                 cap - 1);
        return PDR_EINVAL;
    }
    return 0;
}

/* Fetches the sibling's snapshot (blocking, bounded by the timeout and max_bytes) and loads it. Returns 0
 * when a snapshot was loaded. */
static int fetch(pdr_kv_snap_t *s)
{
    const pdr_config_t *c = s->r->config;
    char url[2048], msg[512] = "", token[TOKEN_MAX + 1], auth[TOKEN_MAX + 32];
    const char *base = c->kv_events.snapshot_from;
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    snprintf(url, sizeof(url), "%.*s/admin/v1/kv-index/snapshot", (int)bl, base);
    uint64_t t0 = pdr_now_ms();
    int rc = 0;
    if (c->kv_events.snapshot_from_token_file != NULL)
        rc = read_token(c->kv_events.snapshot_from_token_file, token, sizeof(token), msg, sizeof(msg));
    fetch_buf_t f = {NULL, 0, 0, (size_t)s->max_bytes, 0, 0};
    CURL *h = rc == 0 ? curl_easy_init() : NULL;
    struct curl_slist *hdr = NULL;
    long status = 0;
    if (rc == 0 && h == NULL) {
        snprintf(msg, sizeof(msg), "out of memory");
        rc = PDR_ENOMEM;
    }
    if (rc == 0) {
        if (c->kv_events.snapshot_from_token_file != NULL) {
            snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
            hdr = curl_slist_append(NULL, auth);
        }
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->kv_events.snapshot_fetch_timeout_ms);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_fetch_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &f);
        CURLcode cc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (f.too_big) {
            snprintf(msg, sizeof(msg), "the answer is larger than kv_events.max_index_bytes (%zu)", f.cap);
            rc = PDR_ETOOBIG;
        } else if (f.no_memory) {
            snprintf(msg, sizeof(msg), "out of memory for the answer");
            rc = PDR_ENOMEM;
        } else if (cc != CURLE_OK) {
            snprintf(msg, sizeof(msg), "%s", curl_easy_strerror(cc));
            rc = cc == CURLE_OPERATION_TIMEDOUT ? PDR_ETIMEDOUT : PDR_EIO;
        } else if (status != 200) {
            snprintf(msg, sizeof(msg), "HTTP status %ld", status);
            rc = PDR_EIO;
        }
    }
    curl_slist_free_all(hdr);
    if (h != NULL)
        curl_easy_cleanup(h);
    if (rc != 0) {
        count(OP_FETCH, outcome_of(rc));
        pdr_warn("kv index snapshot: cannot fetch %s: %s (after %" PRIu64 " ms); %s", url, msg,
                 pdr_now_ms() - t0,
                 s->path != NULL ? "reading kv_events.snapshot_path instead" : "the index starts empty");
        free(f.buf);
        return rc;
    }
    pdr_info("kv index snapshot: fetched %zu bytes from %s in %" PRIu64 " ms", f.len, url, pdr_now_ms() - t0);
    rc = load_bytes(s, OP_FETCH, f.buf, f.len, url);
    free(f.buf);
    return rc;
}

int pdr_kv_snapshot_wanted(const pdr_router_t *r)
{
    return r->config->kv_events.snapshot_path != NULL || r->config->kv_events.snapshot_from != NULL;
}

pdr_kv_snap_t *pdr_kv_snapshot_start(pdr_router_t *r, pdr_kvindex_t *ix)
{
    const pdr_config_t *c = r->config;
    pdr_kv_snap_t *s = calloc(1, sizeof(*s));
    size_t pl = c->kv_events.snapshot_path != NULL ? strlen(c->kv_events.snapshot_path) : 0;
    if (s == NULL || (pl > 0 && ((s->path = strdup(c->kv_events.snapshot_path)) == NULL ||
                                 (s->tmp = malloc(pl + 5)) == NULL))) {
        pdr_warn("kv index snapshot: out of memory; the index starts empty and is not saved");
        if (s != NULL) {
            free(s->path);
            free(s);
        }
        return NULL;
    }
    if (pl > 0)
        snprintf(s->tmp, pl + 5, "%s.tmp", s->path);
    s->r = r;
    s->ix = ix;
    pdr_kvindex_stats_t st;
    pdr_kvindex_stats(ix, &st);
    s->max_bytes = st.max_bytes;
    pthread_mutex_init(&s->wlock, NULL);
    if (c->kv_events.snapshot_from == NULL || fetch(s) != 0)
        if (s->path != NULL)
            load_file(s);
    uv_timer_init(r->threads[0].loop, &s->timer);
    s->timer.data = s;
    s->timer_live = 1;
    if (s->path != NULL && c->kv_events.snapshot_interval_ms > 0)
        uv_timer_start(&s->timer, on_timer, (uint64_t)c->kv_events.snapshot_interval_ms,
                       (uint64_t)c->kv_events.snapshot_interval_ms);
    return s;
}

void pdr_kv_snapshot_stop(pdr_kv_snap_t *s)
{
    if (s == NULL || !s->timer_live)
        return;
    s->timer_live = 0;
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->timer, NULL);
    if (s->path == NULL)
        return;
    /* The last save, on loop 0 while it finishes: no request is left on it (server_shutdown.c). */
    pdr_kvsnap_t copy;
    char **names = NULL;
    int rc = export_named(s->r, s->ix, &copy, &names);
    if (rc != 0) {
        count(OP_WRITE, OC_FAILED);
        pdr_warn("kv index snapshot: cannot copy the index at shutdown: %s", pdr_strerror(rc));
        return;
    }
    save(s, &copy, ++s->gen);
    pdr_info("kv index snapshot: %zu entries of %zu workers saved to %s at shutdown", copy.n_entries,
             copy.n_workers, s->path);
    free_names(names, copy.n_workers);
    pdr_kvsnap_free(&copy);
}

/* Loop 0: drops what is still parked (logged). */
static void unpark(pdr_kv_snap_t *s, const char *why)
{
    size_t nw = pdr_kv_park_workers(s->park);
    if (nw > 0)
        pdr_warn("kv index snapshot: %zu entries of %zu workers dropped (%s%s, ...): %s",
                 pdr_kv_park_entries(s->park), nw, pdr_kv_park_name(s->park, 0), nw > 1 ? ", " : "", why);
    pdr_kv_park_free(s->park);
    s->park = NULL;
    __atomic_store_n(&parked_entries, 0, __ATOMIC_RELAXED);
}

void pdr_kv_snapshot_adopt(pdr_kv_snap_t *s, const pdr_worker_t *w)
{
    if (s == NULL || s->park == NULL)
        return;
    if (pdr_now_ms() > s->park_until) {
        unpark(s, "they did not join the pool within the time they are kept");
        return;
    }
    int rc;
    uint64_t n = pdr_kv_park_adopt(s->park, s->ix, worker_name(w), w->uid, &rc);
    if (n > 0 || rc != 0) {
        __atomic_add_fetch(&loaded_entries, n, __ATOMIC_RELAXED);
        __atomic_store_n(&parked_entries, pdr_kv_park_entries(s->park), __ATOMIC_RELAXED);
        pdr_info("kv index snapshot: %" PRIu64 " entries of %s loaded as it joined the pool%s%s", n,
                 worker_name(w), rc != 0 ? ", then stopped: " : "", rc != 0 ? pdr_strerror(rc) : "");
    }
    if (pdr_kv_park_workers(s->park) == 0)
        unpark(s, "");
}

void pdr_kv_snapshot_tick(pdr_kv_snap_t *s)
{
    if (s != NULL && s->park != NULL && pdr_now_ms() > s->park_until)
        unpark(s, "they did not join the pool within the time they are kept");
}

void pdr_kv_snapshot_free(pdr_kv_snap_t *s)
{
    if (s == NULL)
        return;
    pdr_kv_park_free(s->park);
    if (s->in_flight)
        return; /* loop 0 was stopped with a write still on the thread pool: it keeps its memory (exit) */
    pthread_mutex_destroy(&s->wlock);
    free(s->path);
    free(s->tmp);
    free(s);
}

/* Workers of the pool whose entries came from a snapshot and whose stream has not confirmed them yet. */
static unsigned long long warm_workers(pdr_router_t *r)
{
    pdr_kvindex_t *ix = __atomic_load_n(&r->pool.kvindex, __ATOMIC_ACQUIRE);
    if (ix == NULL)
        return 0;
    pdr_worker_t **ws;
    size_t n = pdr_pool_snapshot(&r->pool, -1, &ws);
    unsigned long long warm = 0;
    for (size_t i = 0; i < n; i++) {
        pdr_kvindex_worker_stats_t st;
        warm += pdr_kvindex_worker_stats(ix, ws[i]->uid, &st) == 0 && st.warm;
    }
    pdr_pool_release(ws, n);
    return warm;
}

void pdr_kv_snapshot_metrics(pdr_router_t *r, pdr_kv_snapshot_put_cb put, void *o)
{
    put(o, "# HELP pdr_kv_index_snapshots_total Snapshots of the precise prefix index written, loaded from "
           "kv_events.snapshot_path and fetched from kv_events.snapshot_from, by outcome.\n"
           "# TYPE pdr_kv_index_snapshots_total counter\n");
    for (int op = 0; op < OP_N; op++)
        for (int oc = 0; oc < OC_N; oc++)
            put(o, "pdr_kv_index_snapshots_total{op=\"%s\",outcome=\"%s\"} %llu\n", op_names[op],
                oc_names[oc], (unsigned long long)__atomic_load_n(&counts[op][oc], __ATOMIC_RELAXED));
    put(o,
        "# HELP pdr_kv_index_snapshot_loaded_entries Entries the index loaded from a snapshot at start.\n"
        "# TYPE pdr_kv_index_snapshot_loaded_entries gauge\npdr_kv_index_snapshot_loaded_entries %llu\n",
        (unsigned long long)__atomic_load_n(&loaded_entries, __ATOMIC_RELAXED));
    put(o,
        "# HELP pdr_kv_index_snapshot_parked_entries Entries of a loaded snapshot whose workers were not in "
        "the pool at the load, kept until they join it (discovery) or for 60 s.\n"
        "# TYPE pdr_kv_index_snapshot_parked_entries gauge\npdr_kv_index_snapshot_parked_entries %llu\n",
        (unsigned long long)__atomic_load_n(&parked_entries, __ATOMIC_RELAXED));
    put(o,
        "# HELP pdr_kv_index_snapshot_warm_workers Workers whose index entries came from a snapshot and "
        "whose "
        "KV events have not confirmed them yet (their matches are used meanwhile).\n"
        "# TYPE pdr_kv_index_snapshot_warm_workers gauge\npdr_kv_index_snapshot_warm_workers %llu\n",
        warm_workers(r));
}
