/*
 * The model's chat template (chat_template.h): read beside the tokenizer, rendered with a chat request's
 * messages, tokenized as the engines do. Any thread: a compiled template renders concurrently.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat_template.h"
#include "err.h"
#include "jinja.h"

/* A template file's ceiling (the engines' templates are a few KiB; pdr_jinja has its own limits too). */
#define TEMPLATE_FILE_MAX (1u << 20)
#define CONFIG_FILE_MAX (16u << 20)

struct pdr_chat_template {
    pdr_jinja_tmpl_t *tmpl;
    char *bos, *eos; /* NULL: not given */
    char source[PDR_TOKENIZER_PATH_MAX + 32];
};

void pdr_chat_template_dir(const char *path, char *out, size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, cap, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(out, cap, ".");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path > 0 ? slash - path : 1), path);
}

/* The whole file at path (at most max bytes), NUL-terminated; NULL with *missing set when it does not exist,
 * NULL with err otherwise. */
static char *read_file(const char *path, size_t max, size_t *len, int *missing, char *err, size_t errlen)
{
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (errno == ENOENT)
            *missing = 1;
        else
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf != NULL ? fread(buf, 1, max + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL || bad || n > max) {
        snprintf(err, errlen, "%s: %s", path,
                 buf == NULL ? "out of memory"
                 : bad       ? "read error"
                             : "larger than the ceiling of a template file");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* tokenizer_config.json's special token: a string, or an AddedToken object {"content": ...}. */
static char *token_string(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int compile(pdr_chat_template_t *ct, const char *text, size_t len, char *err, size_t errlen)
{
    char why[256];
    int rc = pdr_jinja_compile(text, len, NULL, &ct->tmpl, why, sizeof(why));
    if (rc != 0)
        snprintf(err, errlen, "%s: the chat template does not compile: %s", ct->source, why);
    return rc == 0 ? 0 : rc == PDR_ENOMEM ? PDR_ENOMEM : PDR_ECONFIG;
}

int pdr_chat_template_load(const char *dir, pdr_chat_template_t **out, char *err, size_t errlen)
{
    *out = NULL;
    pdr_chat_template_t *ct = calloc(1, sizeof(*ct));
    if (ct == NULL) {
        snprintf(err, errlen, "out of memory");
        return PDR_ENOMEM;
    }
    char path[sizeof(ct->source)];
    size_t len = 0;
    int missing = 0, rc = 0;
    /* tokenizer_config.json: the special tokens, and the template when there is no chat_template.jinja. */
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    char *cfg = read_file(path, CONFIG_FILE_MAX, &len, &missing, err, errlen);
    json_t *root = NULL;
    if (cfg == NULL && !missing) {
        pdr_chat_template_free(ct);
        return PDR_ECONFIG;
    }
    if (cfg != NULL) {
        json_error_t je;
        root = json_loadb(cfg, len, 0, &je);
        free(cfg);
        if (!json_is_object(root)) {
            snprintf(err, errlen, "%s:%d:%d: %s", path, je.line, je.column,
                     root == NULL ? je.text : "expected an object");
            json_decref(root);
            pdr_chat_template_free(ct);
            return PDR_ECONFIG;
        }
        ct->bos = token_string(json_object_get(root, "bos_token"));
        ct->eos = token_string(json_object_get(root, "eos_token"));
    }
    snprintf(ct->source, sizeof(ct->source), "%s/chat_template.jinja", dir);
    char *text = read_file(ct->source, TEMPLATE_FILE_MAX, &len, &missing, err, errlen);
    if (text != NULL) {
        rc = compile(ct, text, len, err, errlen);
        free(text);
    } else if (!missing) {
        rc = PDR_ECONFIG;
    } else {
        /* The string form, or the list of {"name", "template"} whose "default" entry is the chat's. */
        const json_t *t = json_object_get(root, "chat_template");
        if (json_is_array(t)) {
            size_t i;
            const json_t *e, *found = NULL;
            json_array_foreach(t, i, e)
            {
                const json_t *nm = json_object_get(e, "name");
                if (json_is_string(nm) && strcmp(json_string_value(nm), "default") == 0)
                    found = json_object_get(e, "template");
            }
            t = found;
        }
        snprintf(ct->source, sizeof(ct->source), "%s", path);
        if (json_is_string(t))
            rc = compile(ct, json_string_value(t), json_string_length(t), err, errlen);
        else
            ct->tmpl = NULL; /* neither file names a template */
    }
    json_decref(root);
    if (rc != 0 || ct->tmpl == NULL) {
        pdr_chat_template_free(ct);
        return rc;
    }
    *out = ct;
    return 0;
}

void pdr_chat_template_free(void *p)
{
    pdr_chat_template_t *ct = p;
    if (ct == NULL)
        return;
    pdr_jinja_free(ct->tmpl);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

const char *pdr_chat_template_source(const pdr_chat_template_t *ct)
{
    return ct->source;
}

/* The variables a template sees, as vLLM and sglang pass them. NULL when the body has no messages. */
static json_t *context_of(const pdr_chat_template_t *ct, json_t *body)
{
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs))
        return NULL;
    json_t *c = json_object();
    if (c == NULL)
        return NULL;
    json_t *kw = json_object_get(body, "chat_template_kwargs");
    if (json_is_object(kw))
        json_object_update(c, kw);
    json_object_set(c, "messages", msgs);
    json_t *tools = json_object_get(body, "tools");
    if (tools != NULL && !json_is_null(tools))
        json_object_set(c, "tools", tools);
    int cont = json_is_true(json_object_get(body, "continue_final_message"));
    json_t *agp = json_object_get(body, "add_generation_prompt");
    int gen = json_is_boolean(agp) ? json_is_true(agp) : !cont;
    json_object_set_new(c, "add_generation_prompt", json_boolean(gen));
    json_object_set_new(c, "continue_final_message", json_boolean(cont));
    if (ct->bos != NULL)
        json_object_set_new(c, "bos_token", json_string(ct->bos));
    if (ct->eos != NULL)
        json_object_set_new(c, "eos_token", json_string(ct->eos));
    return c;
}

int pdr_chat_template_ids(const pdr_chat_template_t *ct, const pdr_tokenizer_t *tk, const char *body,
                          size_t len, uint32_t **ids, size_t *n, char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    json_t *b = json_loadb(body, len, 0, NULL);
    json_t *c = json_is_object(b) ? context_of(ct, b) : NULL;
    json_decref(b);
    if (c == NULL) {
        snprintf(err, errlen, "the chat request has no messages list");
        return PDR_EINVAL;
    }
    char *text = NULL, why[256];
    size_t tl = 0;
    int rc = pdr_jinja_render(ct->tmpl, c, -1, &text, &tl, why, sizeof(why));
    json_decref(c);
    if (rc != 0) {
        snprintf(err, errlen, "the chat template (%s) failed: %s", ct->source, why);
        return rc == PDR_ENOMEM ? PDR_ENOMEM : PDR_EINVAL;
    }
    /* The rendered text, as vLLM and sglang encode it: the template wrote the special tokens itself. */
    rc = pdr_tokenizer_encode_special(tk, text, tl, 0, ids, n);
    free(text);
    if (rc != 0)
        snprintf(err, errlen, "the tokenizer refused the chat template's text (%s)", pdr_strerror(rc));
    return rc;
}
