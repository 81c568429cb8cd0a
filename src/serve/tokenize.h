/* tokenize.h — POST /tokenize and /detokenize in llama-server's shapes, for clients that count or
 * build prompts with the served model's own tokenizer (evaluation harnesses do):
 *   /tokenize   {"content": "text", "add_special": false, "parse_special": true, "with_pieces": false}
 *               -> {"tokens": [ids]}, or with_pieces {"tokens": [{"id": 1, "piece": "text"}]} (a piece
 *               that is not valid UTF-8 on its own is given as its bytes, an array of integers)
 *   /detokenize {"tokens": [ids]} -> {"content": "text"}
 * Parsing is pure (bytes in, a request or an error out) and fuzzed with the request bodies
 * (fuzz/fuzz_serve_request.c); any other field is refused, as for completions. Rendering calls the
 * tokenizer, which reads the vocabulary only (any thread may). */
#ifndef TKV_SERVE_TOKENIZE_H
#define TKV_SERVE_TOKENIZE_H
#include <stddef.h>
#include <stdint.h>

#include "serve/request.h"
#include "tierkv.h"

typedef struct {
    char *content;     /* tokenize */
    size_t content_len;
    int add_special, parse_special, with_pieces;
    int32_t *ids;      /* detokenize */
    int n_ids;
} serve_tok_request;

/* 0 and *out filled (free with serve_tok_request_free), or -1 and *e filled. detok: /detokenize. */
int serve_tok_parse(const char *body, size_t n, int detok, const serve_limits *lim, serve_tok_request *out,
                    serve_error *e);
void serve_tok_request_free(serve_tok_request *r);
/* The answer's JSON (malloc'd), or NULL and *e filled (a token id outside the vocabulary). */
char *serve_tok_answer(const tkv_model *m, const serve_tok_request *r, int detok, serve_error *e);

#endif
