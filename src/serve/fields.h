/* fields.h — every top-level field of an OpenAI request body, and what this server does with it:
 * honoured (request.c parses it), accepted without effect on the output (`user`, `metadata` ...),
 * or refused with a 400 naming it unless it holds its neutral value (`logprobs: false`,
 * `tools: []`, `frequency_penalty: 0` ...). A field this table does not know is refused too: nothing
 * a client sends is silently ignored. docs/SERVE-FIELDS.md is this table in prose. */
#ifndef TKV_SERVE_FIELDS_H
#define TKV_SERVE_FIELDS_H
#include "serve/request.h"

struct json_t;

/* 0 when every field of the object root is honoured, without effect, or neutral; else -1 with a
 * 400 in e naming the first field that is not (in the body's order). */
int serve_fields_check(const struct json_t *root, enum serve_kind kind, serve_error *e);

/* How a field is treated, for the docs and tests: "honoured", "no effect", "refused unless neutral"
 * or NULL when unknown (refused). */
const char *serve_field_class(const char *name, enum serve_kind kind);
#endif
