/*
 * The router's tokenizers: the top-level one (config key `tokenizer`, --tokenizer-path) and each pool's own
 * (pools[].tokenizer), loaded at start and on reload, and handed out by reference so that a reload can swap
 * them while requests on other loops still encode with the previous ones. A request routed to a pool takes
 * its pool's tokenizer, else the top-level one. A file that did not change (same path, inode, size and
 * mtime) is not parsed again: a reload keeps its loaded tables, and keys that name the same file share one
 * tokenizer. A file that fails to load fails the start or the reload with the loader's message (a pool's
 * prefixed with its key's file:line:col), and a failed reload keeps the running tokenizers.
 *
 * A reload prepares the new tokenizers first and installs them only once nothing else can refuse the
 * reload, so that a refused reload changes nothing.
 *
 * Threads: load and swap on loop 0 (start, reload); pdr_router_tokenizer() and pdr_router_tokenizer_for()
 * from any loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "router.h"
#include "chat_template.h"
#include "tokenizer.h"
#include "util.h"

static int same_file(const pdr_tokenizer_t *tok, const char *tpath, const struct stat *tst, const char *path,
                     const struct stat *st)
{
    return tok != NULL && tpath != NULL && strcmp(tpath, path) == 0 && tst->st_ino == st->st_ino &&
           tst->st_dev == st->st_dev && tst->st_size == st->st_size &&
           tst->st_mtim.tv_sec == st->st_mtim.tv_sec && tst->st_mtim.tv_nsec == st->st_mtim.tv_nsec;
}

/* The file at path (identity st) as loaded already: by the running tokenizers (r; NULL: none) or by one
 * prepared before it in next. A reference, or NULL. */
static pdr_tokenizer_t *loaded(const pdr_router_t *r, const pdr_tokenizer_next_t *next, const char *path,
                               const struct stat *st)
{
    if (r != NULL && same_file(r->tokenizer, r->tokenizer_path, &r->tokenizer_stat, path, st))
        return pdr_tokenizer_ref(r->tokenizer);
    for (size_t i = 0; r != NULL && i < r->n_pool_tokenizers; i++) {
        const pdr_pool_tokenizer_t *e = &r->pool_tokenizers[i];
        if (same_file(e->tok, e->path, &e->st, path, st))
            return pdr_tokenizer_ref(e->tok);
    }
    if (same_file(next->tok, next->path, &next->st, path, st))
        return pdr_tokenizer_ref(next->tok);
    for (size_t i = 0; i < next->n_pools; i++) {
        const pdr_pool_tokenizer_t *e = &next->pools[i];
        if (same_file(e->tok, e->path, &e->st, path, st))
            return pdr_tokenizer_ref(e->tok);
    }
    return NULL;
}

/* Parses file (spec's tokenizer.json) and, with templates, attaches the model's chat template read beside
 * spec. who names the key in the log lines. NULL with err. */
static pdr_tokenizer_t *load_file(const char *spec, const char *file, const char *who, int templates,
                                  char *err, size_t errlen)
{
    pdr_tokenizer_t *tok = pdr_tokenizer_load(file, err, errlen);
    if (tok == NULL || !templates)
        return tok;
    /* The model's chat template beside it, for the ids of chat requests: one that is missing or does not
     * compile leaves chat requests without ids (the prefix tree routes them), said here once. */
    char dir[PDR_TOKENIZER_PATH_MAX], why[512];
    pdr_chat_template_dir(spec, dir, sizeof(dir));
    pdr_chat_template_t *ct = NULL;
    if (pdr_chat_template_load(dir, &ct, why, sizeof(why)) != 0)
        pdr_warn("%s: %s; chat requests get no token ids (the prefix tree routes them)", who, why);
    else if (ct == NULL)
        pdr_info("%s: no chat template in %s (chat_template.jinja, tokenizer_config.json): chat requests "
                 "get no token ids",
                 who, dir);
    else
        pdr_info("%s: chat template from %s", who, pdr_chat_template_source(ct));
    if (ct != NULL)
        pdr_tokenizer_set_extra(tok, ct, pdr_chat_template_free);
    return tok;
}

/* spec's tokenizer (the one loaded already when the same file is, else parsed now) into *tok, its file's
 * path (malloc'd) and identity; *load_ms and *reused say which. */
static int take(const pdr_router_t *r, const pdr_tokenizer_next_t *next, const char *spec, const char *who,
                int templates, pdr_tokenizer_t **tok, char **path, struct stat *st, uint64_t *load_ms,
                int *reused, char *err, size_t errlen)
{
    char file[PDR_TOKENIZER_PATH_MAX];
    if (pdr_tokenizer_file(spec, file, sizeof(file), err, errlen) != 0)
        return PDR_ECONFIG;
    uint64_t t0 = pdr_now_ms();
    int have = stat(file, st) == 0;
    if (!have)
        memset(st, 0, sizeof(*st)); /* the loader says why it cannot read it */
    *tok = have ? loaded(r, next, file, st) : NULL;
    *reused = *tok != NULL;
    if (*tok == NULL && (*tok = load_file(spec, file, who, templates, err, errlen)) == NULL)
        return PDR_ECONFIG;
    *load_ms = pdr_now_ms() - t0;
    if ((*path = strdup(file)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", file);
        return PDR_ENOMEM;
    }
    return 0;
}

/* The pool i's error: its key's place in the file before the loader's message. */
static void pool_err(const pdr_config_t *c, size_t i, char *err, size_t errlen)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", err);
    const pdr_pool_conf_t *pl = &c->pools[i];
    if (pl->tokenizer_line > 0)
        snprintf(err, errlen, "%s:%zu:%zu: pools[%zu].tokenizer: %s", c->source, pl->tokenizer_line,
                 pl->tokenizer_col, i, msg);
    else
        snprintf(err, errlen, "pools[%zu].tokenizer: %s", i, msg);
}

static int prepare(const pdr_router_t *r, const pdr_config_t *c, pdr_tokenizer_next_t *next, int templates,
                   char *err, size_t errlen)
{
    memset(next, 0, sizeof(*next));
    int rc = 0;
    if (c->tokenizer == NULL) {
        next->change = r != NULL && r->tokenizer != NULL;
    } else {
        char file[PDR_TOKENIZER_PATH_MAX];
        struct stat st;
        if (pdr_tokenizer_file(c->tokenizer, file, sizeof(file), err, errlen) != 0)
            return PDR_ECONFIG;
        /* A directory stands for its tokenizer.json: that file's identity decides whether a reload reloads.
         */
        int same = r != NULL && stat(file, &st) == 0 &&
                   same_file(r->tokenizer, r->tokenizer_path, &r->tokenizer_stat, file, &st);
        if (!same && (rc = take(r, next, c->tokenizer, "tokenizer", templates, &next->tok, &next->path,
                                &next->st, &next->load_ms, &next->reused, err, errlen)) != 0) {
            pdr_router_tokenizer_abandon(next);
            return rc;
        }
        next->change = !same;
    }
    size_t np = 0;
    for (size_t i = 0; i < c->n_pools; i++)
        np += c->pools[i].tokenizer != NULL;
    if (np > 0 && (next->pools = calloc(np, sizeof(*next->pools))) == NULL) {
        pdr_router_tokenizer_abandon(next);
        snprintf(err, errlen, "tokenizer: out of memory");
        return PDR_ENOMEM;
    }
    for (size_t i = 0; i < c->n_pools; i++) {
        const pdr_pool_conf_t *pl = &c->pools[i];
        if (pl->tokenizer == NULL)
            continue;
        char who[PDR_CONFIG_MAX_POOL_NAME + 32];
        snprintf(who, sizeof(who), "pool %s: tokenizer", pl->name);
        pdr_pool_tokenizer_t e = {0};
        rc = take(r, next, pl->tokenizer, who, templates, &e.tok, &e.path, &e.st, &e.load_ms, &e.reused, err,
                  errlen);
        if (rc == 0 && (e.pool = strdup(pl->name)) == NULL) {
            snprintf(err, errlen, "tokenizer: out of memory");
            rc = PDR_ENOMEM;
        }
        next->pools[next->n_pools++] = e; /* freed with next, whatever failed */
        if (rc != 0) {
            pool_err(c, i, err, errlen);
            pdr_router_tokenizer_abandon(next);
            return rc;
        }
    }
    return 0;
}

int pdr_router_tokenizer_prepare(pdr_router_t *r, const pdr_config_t *c, pdr_tokenizer_next_t *next,
                                 char *err, size_t errlen)
{
    return prepare(r, c, next, 1, err, errlen);
}

int pdr_router_tokenizer_check(const pdr_config_t *c, char *err, size_t errlen)
{
    pdr_tokenizer_next_t next;
    int rc = prepare(NULL, c, &next, 0, err, errlen);
    if (rc == 0)
        pdr_router_tokenizer_abandon(&next);
    return rc;
}

static void free_pools(pdr_pool_tokenizer_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pdr_tokenizer_free(v[i].tok); /* one reference: requests still encoding hold their own */
        free(v[i].path);
        free(v[i].pool);
    }
    free(v);
}

static void log_loaded(const char *who, const char *path, const pdr_tokenizer_t *tok, uint64_t ms, int reused)
{
    if (reused)
        pdr_info("%s: %s (loaded already: not parsed again)", who, path);
    else
        pdr_info("%s: %s loaded in %llu ms (%zu tokens, %zu merges, %zu KiB)", who, path,
                 (unsigned long long)ms, pdr_tokenizer_vocab_size(tok), pdr_tokenizer_merges(tok),
                 pdr_tokenizer_bytes(tok) / 1024);
}

/* Logs what the pools' tokenizers become: a new file, or none any more (the top-level one applies). */
static void log_pools(const pdr_router_t *r, const pdr_tokenizer_next_t *next)
{
    for (size_t i = 0; i < next->n_pools; i++) {
        const pdr_pool_tokenizer_t *e = &next->pools[i];
        int kept = 0;
        for (size_t k = 0; k < r->n_pool_tokenizers; k++)
            kept |= strcmp(r->pool_tokenizers[k].pool, e->pool) == 0 && r->pool_tokenizers[k].tok == e->tok;
        char who[PDR_CONFIG_MAX_POOL_NAME + 32];
        snprintf(who, sizeof(who), "pool %s: tokenizer", e->pool);
        if (!kept)
            log_loaded(who, e->path, e->tok, e->load_ms, e->reused);
    }
    for (size_t k = 0; k < r->n_pool_tokenizers; k++) {
        int still = 0;
        for (size_t i = 0; i < next->n_pools; i++)
            still |= strcmp(r->pool_tokenizers[k].pool, next->pools[i].pool) == 0;
        if (!still)
            pdr_info("pool %s: tokenizer: none of its own any more (%s dropped; the top-level one applies)",
                     r->pool_tokenizers[k].pool, r->pool_tokenizers[k].path);
    }
}

void pdr_router_tokenizer_commit(pdr_router_t *r, pdr_tokenizer_next_t *next)
{
    if (next->change && next->tok == NULL && r->tokenizer != NULL)
        pdr_info("tokenizer: none any more (%s dropped)", r->tokenizer_path);
    if (next->change && next->tok != NULL)
        log_loaded("tokenizer", next->path, next->tok, next->load_ms, next->reused);
    log_pools(r, next);
    pthread_mutex_lock(&r->config_lock);
    pdr_tokenizer_t *old = NULL;
    char *old_path = NULL;
    if (next->change) {
        old = r->tokenizer;
        old_path = r->tokenizer_path;
        r->tokenizer = next->tok;
        r->tokenizer_path = next->path;
        if (next->tok != NULL)
            r->tokenizer_stat = next->st;
    }
    pdr_pool_tokenizer_t *old_pools = r->pool_tokenizers;
    size_t old_n = r->n_pool_tokenizers;
    r->pool_tokenizers = next->pools;
    r->n_pool_tokenizers = next->n_pools;
    pthread_mutex_unlock(&r->config_lock);
    pdr_tokenizer_free(old); /* one reference: requests still encoding hold their own */
    free(old_path);
    free_pools(old_pools, old_n);
    memset(next, 0, sizeof(*next));
}

void pdr_router_tokenizer_abandon(pdr_tokenizer_next_t *next)
{
    pdr_tokenizer_free(next->tok);
    free(next->path);
    free_pools(next->pools, next->n_pools);
    memset(next, 0, sizeof(*next));
}

int pdr_router_tokenizer_load(pdr_router_t *r, const pdr_config_t *c, char *err, size_t errlen)
{
    pdr_tokenizer_next_t next;
    int rc = pdr_router_tokenizer_prepare(r, c, &next, err, errlen);
    if (rc == 0)
        pdr_router_tokenizer_commit(r, &next);
    return rc;
}

pdr_tokenizer_t *pdr_router_tokenizer(pdr_router_t *r)
{
    return pdr_router_tokenizer_for(r, NULL);
}

pdr_tokenizer_t *pdr_router_tokenizer_for(pdr_router_t *r, const char *pool)
{
    pthread_mutex_lock(&r->config_lock);
    pdr_tokenizer_t *tok = r->tokenizer;
    for (size_t i = 0; pool != NULL && i < r->n_pool_tokenizers; i++)
        if (strcmp(r->pool_tokenizers[i].pool, pool) == 0) {
            tok = r->pool_tokenizers[i].tok;
            break;
        }
    tok = tok != NULL ? pdr_tokenizer_ref(tok) : NULL;
    pthread_mutex_unlock(&r->config_lock);
    return tok;
}

void pdr_router_tokenizer_dispose(pdr_router_t *r)
{
    pdr_tokenizer_free(r->tokenizer);
    free(r->tokenizer_path);
    free_pools(r->pool_tokenizers, r->n_pool_tokenizers);
    r->tokenizer = NULL;
    r->tokenizer_path = NULL;
    r->pool_tokenizers = NULL;
    r->n_pool_tokenizers = 0;
}
