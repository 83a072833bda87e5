/*
 * The model's chat template, for the token ids of a chat request: the engines (sglang, vLLM) render the
 * messages through the template of the model directory (chat_template.jinja, or tokenizer_config.json's
 * "chat_template") and tokenize the text without adding special tokens (the template writes its own); the
 * router does the same, so that precise prefix routing and the KV deadline see the engine's ids for
 * /v1/chat/completions too. The template is read beside the router's tokenizer (config `tokenizer`: the
 * directory, or the directory of the tokenizer.json) and attached to it (pdr_tokenizer_set_extra), so it is
 * loaded, reloaded and shared with it. Rendered by pdr_jinja (docs/internals/jinja.md). Any thread.
 */
#ifndef PDR_CHAT_TEMPLATE_H
#define PDR_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct pdr_chat_template pdr_chat_template_t;

/* Reads and compiles the chat template of the model directory dir (chat_template.jinja first, then
 * tokenizer_config.json's "chat_template": a string, or the list form's entry named "default"), with that
 * file's bos_token and eos_token. 0 with *out set; 0 with *out NULL when dir has neither; otherwise an
 * error (PDR_ECONFIG, PDR_ENOMEM) with the file and the reason (for a template, "line:col: message"). */
int pdr_chat_template_load(const char *dir, pdr_chat_template_t **out, char *err, size_t errlen);
/* The directory of a tokenizer path as pdr_tokenizer_load takes it: path itself when it is a directory,
 * else the file's directory. */
void pdr_chat_template_dir(const char *tokenizer_path, char *out, size_t cap);
/* Frees ct (void * for pdr_tokenizer_set_extra). */
void pdr_chat_template_free(void *ct);
/* Where it came from ("DIR/chat_template.jinja" or "DIR/tokenizer_config.json"). */
const char *pdr_chat_template_source(const pdr_chat_template_t *ct);

/*
 * The token ids of a chat request's body (the client's JSON, already validated): the template rendered with
 * the body's messages, tools, add_generation_prompt (true unless the body says false or asks
 * continue_final_message), continue_final_message, the members of chat_template_kwargs, bos_token and
 * eos_token, then encoded with tk without special tokens. 0 with *ids (malloc'd) and *n; PDR_EINVAL with
 * the reason in err (the body has no messages list, the template failed: raise_exception, an undefined
 * call, a limit), PDR_ENOMEM, or the encoder's error.
 */
int pdr_chat_template_ids(const pdr_chat_template_t *ct, const pdr_tokenizer_t *tk, const char *body,
                          size_t len, uint32_t **ids, size_t *n, char *err, size_t errlen);

#endif
