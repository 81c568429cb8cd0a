/* tokenize.c — /tokenize and /detokenize (see tokenize.h). */
#include "serve/tokenize.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/utf8.h"

static int bad(serve_error *e, const char *param, const char *code, const char *msg) {
    return serve_error_set(e, 400, "invalid_request_error", param, code, "%s", msg);
}

static int get_flag(const json_t *root, const char *key, int *out, serve_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return serve_error_set(e, 400, "invalid_request_error", key, "invalid_type", "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int parse_root(const json_t *root, int detok, const serve_limits *lim, serve_tok_request *r, serve_error *e) {
    if (!json_is_object(root)) return bad(e, "", "invalid_type", "the body must be a JSON object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        int known = detok ? !strcmp(key, "tokens")
                          : !strcmp(key, "content") || !strcmp(key, "add_special") || !strcmp(key, "parse_special") ||
                                !strcmp(key, "with_pieces");
        if (!known)
            return serve_error_set(e, 400, "invalid_request_error", key, "unsupported_parameter",
                                   "unknown field '%s' (%s takes %s)", key, detok ? "/detokenize" : "/tokenize",
                                   detok ? "tokens" : "content, add_special, parse_special and with_pieces");
    }
    if (detok) {
        const json_t *t = json_object_get(root, "tokens");
        if (!json_is_array(t)) return bad(e, "tokens", "invalid_type", "'tokens' must be an array of token ids");
        size_t n = json_array_size(t);
        if (n > (size_t)lim->max_prompt_ids)
            return serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value", "%zu token ids, at most %d", n,
                                   lim->max_prompt_ids);
        r->ids = tkv_xmalloc((n ? n : 1) * sizeof *r->ids);
        for (size_t i = 0; i < n; i++) {
            const json_t *x = json_array_get(t, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
                return serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value",
                                       "tokens[%zu] must be a token id (an integer >= 0)", i);
            r->ids[i] = (int32_t)json_integer_value(x);
        }
        r->n_ids = (int)n;
        return 0;
    }
    const json_t *c = json_object_get(root, "content");
    if (!json_is_string(c)) return bad(e, "content", "invalid_type", "'content' must be a string");
    r->content_len = json_string_length(c);
    r->content = tkv_xmalloc(r->content_len + 1);
    memcpy(r->content, json_string_value(c), r->content_len + 1);
    r->parse_special = 1; /* llama-server's default: special tokens written in the text are read as such */
    if (get_flag(root, "add_special", &r->add_special, e) || get_flag(root, "parse_special", &r->parse_special, e) ||
        get_flag(root, "with_pieces", &r->with_pieces, e))
        return -1;
    return 0;
}

int serve_tok_parse(const char *body, size_t n, int detok, const serve_limits *lim, serve_tok_request *out,
                    serve_error *e) {
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return serve_error_set(e, 400, "invalid_request_error", "", "invalid_json", "the body is not valid JSON: %.160s (line %d)",
                               je.text, je.line);
    int rc = parse_root(root, detok, lim, out, e);
    json_decref(root);
    if (rc) serve_tok_request_free(out);
    return rc;
}

void serve_tok_request_free(serve_tok_request *r) {
    free(r->content);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* a piece as a JSON string when it is valid UTF-8 on its own, else as its bytes */
static json_t *piece_json(const char *p, size_t n) {
    size_t bad;
    tkv_utf8_repair(p, n, NULL, &bad);
    if (!bad) return json_stringn(p, n);
    json_t *a = json_array();
    for (size_t k = 0; k < n; k++) json_array_append_new(a, json_integer((unsigned char)p[k]));
    return a;
}

char *serve_tok_answer(const tkv_model *m, const serve_tok_request *r, int detok, serve_error *e) {
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    json_t *o = json_object();
    if (detok) {
        for (int i = 0; i < r->n_ids; i++)
            if (r->ids[i] >= mi.n_vocab) {
                json_decref(o);
                serve_error_set(e, 400, "invalid_request_error", "tokens", "invalid_value",
                                "token id %d (at %d) is out of the vocabulary (0..%d)", r->ids[i], i, mi.n_vocab - 1);
                return NULL;
            }
        size_t len = 0;
        char *text = tkv_detokenize(m, r->ids, r->n_ids, 1, &len); /* special tokens written out, as llama-server does */
        TKV_ASSERT(text);
        json_t *s = json_stringn(text, len);
        if (!s) { /* bytes that are not UTF-8 (ids that split a character): U+FFFD for each */
            tkv_buf fixed = {0};
            tkv_utf8_repair(text, len, &fixed, NULL);
            s = json_stringn(tkv_buf_str(&fixed), fixed.n);
            tkv_buf_free(&fixed);
        }
        free(text);
        json_object_set_new(o, "content", s);
    } else {
        int flags = (r->add_special ? TKV_TOK_ADD_SPECIAL : 0) | (r->parse_special ? TKV_TOK_PARSE_SPECIAL : 0);
        int32_t *ids = NULL;
        int n = tkv_tokenize_alloc(m, r->content, r->content_len, flags, &ids);
        if (n < 0) {
            json_decref(o);
            serve_error_set(e, 413, "invalid_request_error", "content", "content_too_large", "the content is too large to tokenize");
            return NULL;
        }
        json_t *a = json_array();
        for (int i = 0; i < n; i++) {
            if (!r->with_pieces) {
                json_array_append_new(a, json_integer(ids[i]));
                continue;
            }
            const char *b = NULL;
            int pn = tkv_token_piece(m, ids[i], 1, &b);
            json_t *t = json_object();
            json_object_set_new(t, "id", json_integer(ids[i]));
            json_object_set_new(t, "piece", piece_json(b ? b : "", pn > 0 ? (size_t)pn : 0));
            json_array_append_new(a, t);
        }
        free(ids);
        json_object_set_new(o, "tokens", a);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    TKV_ASSERT(s);
    return s;
}
