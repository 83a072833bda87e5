/*
 * The router's tokenizer (config key `tokenizer`, --tokenizer-path): loaded at start and on reload, and
 * handed out by reference so that a reload can swap it while requests on other loops still encode with
 * the previous one. A reload whose file did not change (same path, inode, size and mtime) keeps the
 * loaded tables instead of parsing the file again; a file that fails to load fails the start or the
 * reload with the loader's message, and a failed reload keeps the running tokenizer.
 *
 * A reload prepares the new tokenizer first and installs it only once nothing else can refuse the reload,
 * so that a refused reload changes nothing.
 *
 * Threads: load and swap on loop 0 (start, reload); pdr_router_tokenizer() from any loop.
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

static int same_file(const pdr_router_t *r, const char *path, const struct stat *st)
{
    return r->tokenizer != NULL && r->tokenizer_path != NULL && strcmp(r->tokenizer_path, path) == 0 &&
           r->tokenizer_stat.st_ino == st->st_ino && r->tokenizer_stat.st_dev == st->st_dev &&
           r->tokenizer_stat.st_size == st->st_size &&
           r->tokenizer_stat.st_mtim.tv_sec == st->st_mtim.tv_sec &&
           r->tokenizer_stat.st_mtim.tv_nsec == st->st_mtim.tv_nsec;
}

static void swap_in(pdr_router_t *r, pdr_tokenizer_t *tok, char *path, const struct stat *st)
{
    pthread_mutex_lock(&r->config_lock);
    pdr_tokenizer_t *old = r->tokenizer;
    char *old_path = r->tokenizer_path;
    r->tokenizer = tok;
    r->tokenizer_path = path;
    if (st != NULL)
        r->tokenizer_stat = *st;
    pthread_mutex_unlock(&r->config_lock);
    pdr_tokenizer_free(old); /* one reference: requests still encoding hold their own */
    free(old_path);
}

int pdr_router_tokenizer_prepare(pdr_router_t *r, const pdr_config_t *c, pdr_tokenizer_next_t *next,
                                 char *err, size_t errlen)
{
    memset(next, 0, sizeof(*next));
    if (c->tokenizer == NULL) {
        next->change = r->tokenizer != NULL;
        return 0;
    }
    /* A directory stands for its tokenizer.json: that file's identity decides whether a reload reloads. */
    char file[PDR_TOKENIZER_PATH_MAX];
    if (pdr_tokenizer_file(c->tokenizer, file, sizeof(file), err, errlen) != 0)
        return PDR_ECONFIG;
    if (stat(file, &next->st) == 0 && same_file(r, file, &next->st))
        return 0;
    uint64_t t0 = pdr_now_ms();
    pdr_tokenizer_t *tok = pdr_tokenizer_load(file, err, errlen);
    if (tok == NULL)
        return PDR_ECONFIG;
    if ((next->path = strdup(file)) == NULL) {
        pdr_tokenizer_free(tok);
        snprintf(err, errlen, "%s: out of memory", file);
        return PDR_ENOMEM;
    }
    /* The model's chat template beside it, for the ids of chat requests: one that is missing or does not
     * compile leaves chat requests without ids (the prefix tree routes them), said here once. */
    char dir[PDR_TOKENIZER_PATH_MAX], why[512];
    pdr_chat_template_dir(c->tokenizer, dir, sizeof(dir));
    pdr_chat_template_t *ct = NULL;
    if (pdr_chat_template_load(dir, &ct, why, sizeof(why)) != 0)
        pdr_warn("tokenizer: %s; chat requests get no token ids (the prefix tree routes them)", why);
    else if (ct == NULL)
        pdr_info(
            "tokenizer: no chat template in %s (chat_template.jinja, tokenizer_config.json): chat requests "
            "get no token ids",
            dir);
    else
        pdr_info("tokenizer: chat template from %s", pdr_chat_template_source(ct));
    if (ct != NULL)
        pdr_tokenizer_set_extra(tok, ct, pdr_chat_template_free);
    next->load_ms = pdr_now_ms() - t0;
    next->tok = tok;
    next->change = 1;
    return 0;
}

void pdr_router_tokenizer_commit(pdr_router_t *r, pdr_tokenizer_next_t *next)
{
    if (!next->change)
        return;
    if (next->tok == NULL && r->tokenizer != NULL)
        pdr_info("tokenizer: none any more (%s dropped)", r->tokenizer_path);
    if (next->tok != NULL)
        pdr_info("tokenizer: %s loaded in %llu ms (%zu tokens, %zu merges, %zu KiB)", next->path,
                 (unsigned long long)next->load_ms, pdr_tokenizer_vocab_size(next->tok),
                 pdr_tokenizer_merges(next->tok), pdr_tokenizer_bytes(next->tok) / 1024);
    swap_in(r, next->tok, next->path, next->tok != NULL ? &next->st : NULL);
    memset(next, 0, sizeof(*next));
}

void pdr_router_tokenizer_abandon(pdr_tokenizer_next_t *next)
{
    pdr_tokenizer_free(next->tok);
    free(next->path);
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
    pthread_mutex_lock(&r->config_lock);
    pdr_tokenizer_t *tok = r->tokenizer ? pdr_tokenizer_ref(r->tokenizer) : NULL;
    pthread_mutex_unlock(&r->config_lock);
    return tok;
}

void pdr_router_tokenizer_dispose(pdr_router_t *r)
{
    pdr_tokenizer_free(r->tokenizer);
    free(r->tokenizer_path);
    r->tokenizer = NULL;
    r->tokenizer_path = NULL;
}
