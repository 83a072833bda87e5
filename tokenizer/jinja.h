/*
 * A Jinja template engine for the subset that models' chat templates use (tokenizer_config.json's
 * "chat_template", chat_template.jinja), rendering to the same bytes as python3-jinja2 in the environment
 * the engines use: transformers' ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loopcontrols extension, its tojson (json.dumps with ensure_ascii=False), raise_exception() and
 * strftime_now(). docs/internals/jinja.md lists the subset, the limits and what differs from jinja2.
 *
 * A template is compiled once and rendered any number of times, concurrently from several threads: a
 * render reads the compiled template and keeps its own state. A template is input: its size, the output,
 * the loop iterations, the nesting and the memory of one render all have ceilings, and passing one is a
 * clean error (PDR_ETOOBIG), never a crash or a hang. Errors read "line:col: message" (1-based, in the
 * template's text).
 */
#ifndef PDR_JINJA_H
#define PDR_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef struct pdr_jinja_tmpl pdr_jinja_tmpl_t;

typedef struct pdr_jinja_limits {
    size_t max_template_bytes;    /* the template's text */
    size_t max_output_bytes;      /* one render's output (and any string it builds) */
    size_t max_memory_bytes;      /* one render's working memory: values, strings, scopes */
    uint64_t max_loop_iterations; /* all the iterations of one render's for loops and filters together */
    unsigned max_depth;           /* nesting of statements and expressions, and of macro calls */
} pdr_jinja_limits_t;

/* The defaults: 1 MiB of template, 16 MiB of output, 256 MiB of memory, 1e6 iterations, depth 64. */
void pdr_jinja_limits_default(pdr_jinja_limits_t *l);

/*
 * Compiles len bytes of template text. limits may be NULL (the defaults); the template keeps a copy. On
 * success returns 0 and sets *out; otherwise returns PDR_EINVAL (a syntax error), PDR_ETOOBIG or
 * PDR_ENOMEM with "line:col: message" in err.
 */
int pdr_jinja_compile(const char *text, size_t len, const pdr_jinja_limits_t *limits, pdr_jinja_tmpl_t **out,
                      char *err, size_t errlen);

/*
 * Renders the template with the variables of context (a JSON object, or NULL: messages, tools,
 * add_generation_prompt, bos_token, ...). now is the time strftime_now() formats, in seconds since the
 * epoch (local time, as Python's datetime.now()), or -1 for the current time. On success returns 0 with a
 * malloc'd NUL-terminated string in *out (free it) and its length in *outlen; otherwise PDR_EINVAL (an
 * error of the template or a call of raise_exception, whose message err carries), PDR_ETOOBIG (a limit)
 * or PDR_ENOMEM, with "line:col: message" in err.
 */
int pdr_jinja_render(const pdr_jinja_tmpl_t *t, const json_t *context, int64_t now, char **out,
                     size_t *outlen, char *err, size_t errlen);

void pdr_jinja_free(pdr_jinja_tmpl_t *t);

#endif
