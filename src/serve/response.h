/* response.h — the JSON the server sends: OpenAI's completion objects (chat and text), their
 * server-sent-event chunks, usage, the model list and the error object. Pure: values in, malloc'd
 * NUL-terminated bytes out (free with free()); JSON written by jansson. Not done here: HTTP
 * status codes, headers and connections (http.c, api.c). */
#ifndef TKV_SERVE_RESPONSE_H
#define TKV_SERVE_RESPONSE_H
#include <stddef.h>
#include <stdint.h>

#include "serve/request.h"
#include "serve/tools.h"

typedef struct {
    const char *id;    /* "chatcmpl-…" or "cmpl-…" */
    long long created; /* seconds since the epoch */
    const char *model;
    enum serve_kind kind;
} serve_resp_meta;

typedef struct {
    int prompt_tokens, completion_tokens;
    int reasoning_tokens; /* completion tokens inside the reasoning block */
    int cached_tokens;    /* prompt tokens served from a shared prefix (not recomputed) */
} serve_usage;

typedef struct {
    const char *p;
    size_t n;
} serve_text;

/* Log-probabilities of generated tokens (and of an echoed prompt's, first): each token's bytes lie
 * at bytes + off, len long. */
typedef struct {
    uint32_t off, len;
    float logprob;
} serve_lp_tok;
typedef struct {
    serve_lp_tok tok;
    int n_top;             /* -1: none at all (an echoed prompt's first token: its logprob is null too) */
    serve_lp_tok top[SERVE_MAX_TOP_LOGPROBS];
} serve_lp;
typedef struct {
    const serve_lp *v; /* v[0..n) */
    int n;
    const char *bytes;
    size_t text_off;   /* completions' text_offset of v[0]: the characters of the tokens before it */
} serve_lps;
/* The characters of a token's text as the answer writes it (each byte that is not part of valid
 * UTF-8 becomes one U+FFFD). */
size_t serve_lp_chars(const char *bytes, const serve_lp_tok *t);

/* {"error":{"message","type","param","code"}} */
char *serve_json_error(const serve_error *e);
/* One choice of an answer: its texts, finish reason, and logprobs (chat: {"content": [{token,
 * logprob, bytes, top_logprobs}]}; completions: {tokens, token_logprobs, top_logprobs,
 * text_offset}), or NULL for "logprobs": null. */
typedef struct {
    serve_text content, reasoning;
    const char *finish;
    const serve_lps *lps;
    const serve_tool_calls *calls; /* chat: the calls read from the text (NULL or none: message.tool_calls absent;
                                      else content is null when empty) */
} serve_choice;
/* The whole answer: choices c[0..n) with indexes 0..n-1. With_reasoning: message.reasoning_content
 * and message.reasoning carry the reasoning (null when empty); content is null when empty and
 * reasoning is not. */
char *serve_json_completion(const serve_resp_meta *m, const serve_choice *c, int n, int with_reasoning,
                            const serve_usage *u);
/* One SSE event "data: {chunk}\n\n" of choice `index`: the role (first chunk of a chat), reasoning
 * and/or content deltas, finish_reason (NULL: null). usage_null: "usage": null
 * (stream_options.include_usage). */
char *serve_sse_chunk(const serve_resp_meta *m, int index, int with_role, serve_text reasoning, serve_text content,
                      const char *finish, int usage_null, const serve_lps *lps);
/* A chat chunk of choice `index` whose delta carries its tool calls, whole, each with its "index". */
char *serve_sse_tool_calls(const serve_resp_meta *m, int index, const serve_tool_calls *calls, int usage_null);
/* The last chunk with include_usage: "choices": [] and the usage. */
char *serve_sse_usage(const serve_resp_meta *m, const serve_usage *u);
/* An error inside a stream: "data: {"error":{…}}\n\n". */
char *serve_sse_error(const serve_error *e);
/* GET /v1/models */
char *serve_json_models(const char *model, long long created);

#endif
