/* response.c — OpenAI response objects by jansson (see response.h). Texts reach here as valid
 * UTF-8 (the detokenizer releases whole characters); should a byte sequence still be invalid,
 * it goes out with U+FFFD in its place rather than failing the response. */
#include "serve/response.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/utf8.h"
#include "base/buf.h"

static json_t *text(serve_text t) {
    json_t *s = json_stringn(t.p ? t.p : "", t.n);
    if (s) return s;
    tkv_buf b = {0};
    tkv_utf8_repair(t.p, t.n, &b, NULL);
    s = json_stringn(tkv_buf_str(&b), b.n);
    tkv_buf_free(&b);
    TKV_ASSERT(s);
    return s;
}

static char *dump(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    TKV_ASSERT(s);
    return s;
}

static char *sse(json_t *o) {
    char *j = dump(o);
    size_t n = strlen(j);
    char *s = tkv_xmalloc(n + 9);
    memcpy(s, "data: ", 6);
    memcpy(s + 6, j, n);
    memcpy(s + 6 + n, "\n\n", 3);
    free(j);
    return s;
}

static json_t *error_obj(const serve_error *e) {
    json_t *o = json_object();
    json_object_set_new(o, "message", text((serve_text){e->message, strlen(e->message)}));
    json_object_set_new(o, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(o, "param", e->param[0] ? text((serve_text){e->param, strlen(e->param)}) : json_null());
    json_object_set_new(o, "code", e->code ? json_string(e->code) : json_null());
    json_t *r = json_object();
    json_object_set_new(r, "error", o);
    return r;
}

char *serve_json_error(const serve_error *e) { return dump(error_obj(e)); }
char *serve_sse_error(const serve_error *e) { return sse(error_obj(e)); }

static json_t *head(const serve_resp_meta *m, int chunk) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(m->id));
    const char *obj = m->kind == SERVE_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    json_object_set_new(o, "object", json_string(obj));
    json_object_set_new(o, "created", json_integer(m->created));
    json_object_set_new(o, "model", text((serve_text){m->model, strlen(m->model)}));
    return o;
}

static json_t *usage_obj(const serve_usage *u) {
    json_t *pd = json_object(), *cd = json_object(), *o = json_object();
    json_object_set_new(pd, "cached_tokens", json_integer(u->cached_tokens));
    json_object_set_new(cd, "reasoning_tokens", json_integer(u->reasoning_tokens));
    json_object_set_new(o, "prompt_tokens", json_integer(u->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(u->completion_tokens));
    json_object_set_new(o, "total_tokens", json_integer(u->prompt_tokens + u->completion_tokens));
    json_object_set_new(o, "prompt_tokens_details", pd);
    json_object_set_new(o, "completion_tokens_details", cd);
    return o;
}

static json_t *finish_val(const char *finish) { return finish ? json_string(finish) : json_null(); }


/* a log-probability as JSON: -inf (a token the logits rule out) as -9999.0, as vLLM writes it */
static json_t *lp_real(float v) { return json_real(isfinite(v) ? (double)v : -9999.0); }

static json_t *lp_token(const serve_lps *l, const serve_lp_tok *t) { return text((serve_text){l->bytes + t->off, t->len}); }

static json_t *lp_bytes(const serve_lps *l, const serve_lp_tok *t) {
    json_t *a = json_array();
    for (uint32_t i = 0; i < t->len; i++) json_array_append_new(a, json_integer((unsigned char)l->bytes[t->off + i]));
    return a;
}

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null} */
static json_t *lps_chat(const serve_lps *l) {
    json_t *content = json_array();
    for (int i = 0; i < l->n; i++) {
        const serve_lp *p = &l->v[i];
        json_t *e = json_object(), *top = json_array();
        json_object_set_new(e, "token", lp_token(l, &p->tok));
        json_object_set_new(e, "logprob", lp_real(p->tok.logprob));
        json_object_set_new(e, "bytes", lp_bytes(l, &p->tok));
        for (int k = 0; k < p->n_top; k++) {
            json_t *t = json_object();
            json_object_set_new(t, "token", lp_token(l, &p->top[k]));
            json_object_set_new(t, "logprob", lp_real(p->top[k].logprob));
            json_object_set_new(t, "bytes", lp_bytes(l, &p->top[k]));
            json_array_append_new(top, t);
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    json_object_set_new(o, "refusal", json_null());
    return o;
}

size_t serve_lp_chars(const char *bytes, const serve_lp_tok *t) { return tkv_utf8_repair(bytes + t->off, t->len, NULL, NULL); }

/* completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset (characters)} */
static json_t *lps_text(const serve_lps *l) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = l->text_off;
    for (int i = 0; i < l->n; i++) {
        const serve_lp *p = &l->v[i];
        json_array_append_new(toks, lp_token(l, &p->tok));
        json_array_append_new(lps, p->n_top < 0 ? json_null() : lp_real(p->tok.logprob));
        if (p->n_top < 0) { /* an echoed prompt's first token: nothing came before it */
            json_array_append_new(tops, json_null());
            json_array_append_new(offs, json_integer((json_int_t)off));
            off += serve_lp_chars(l->bytes, &p->tok);
            continue;
        }
        json_t *t = json_object();
        for (int k = 0; k < p->n_top; k++) {
            json_t *key = lp_token(l, &p->top[k]);
            if (!json_object_get(t, json_string_value(key))) /* two ids of one text: the likelier stays */
                json_object_set_new(t, json_string_value(key), lp_real(p->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, t);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += serve_lp_chars(l->bytes, &p->tok);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

/* A choice of a response or chunk, closed and appended to choices: its logprobs (null unless
 * asked), its finish reason (null while going). */
static void put_choice(json_t *choices, json_t *choice, const char *finish, enum serve_kind kind, const serve_lps *lps) {
    json_object_set_new(choice, "logprobs", !lps ? json_null() : kind == SERVE_CHAT ? lps_chat(lps) : lps_text(lps));
    json_object_set_new(choice, "finish_reason", finish_val(finish));
    json_array_append_new(choices, choice);
}

/* [{"id", "type": "function", "function": {"name", "arguments"}}], with "index" in stream deltas;
 * the ids follow from the answer's id, the choice and the call */
static json_t *tool_calls_arr(const serve_resp_meta *m, int choice, const serve_tool_calls *calls, int with_index) {
    json_t *a = json_array();
    const char *tail = strrchr(m->id, '-');
    for (int k = 0; k < calls->n; k++) {
        char id[64];
        snprintf(id, sizeof id, "call_%s_%d_%d", tail ? tail + 1 : m->id, choice, k);
        json_t *f = json_object(), *c = json_object();
        json_object_set_new(f, "name", text((serve_text){calls->v[k].name, strlen(calls->v[k].name)}));
        json_object_set_new(f, "arguments", text((serve_text){calls->v[k].arguments, strlen(calls->v[k].arguments)}));
        if (with_index) json_object_set_new(c, "index", json_integer(k));
        json_object_set_new(c, "id", json_string(id));
        json_object_set_new(c, "type", json_string("function"));
        json_object_set_new(c, "function", f);
        json_array_append_new(a, c);
    }
    return a;
}

char *serve_sse_tool_calls(const serve_resp_meta *m, int index, const serve_tool_calls *calls, int usage_null) {
    json_t *o = head(m, 1), *choice = json_object(), *choices = json_array(), *d = json_object();
    json_object_set_new(choice, "index", json_integer(index));
    json_object_set_new(d, "tool_calls", tool_calls_arr(m, index, calls, 1));
    json_object_set_new(choice, "delta", d);
    put_choice(choices, choice, NULL, m->kind, NULL);
    json_object_set_new(o, "choices", choices);
    if (usage_null) json_object_set_new(o, "usage", json_null());
    return sse(o);
}

char *serve_json_completion(const serve_resp_meta *m, const serve_choice *c, int n, int with_reasoning,
                            const serve_usage *u) {
    json_t *o = head(m, 0), *choices = json_array();
    for (int i = 0; i < n; i++) {
        json_t *choice = json_object();
        json_object_set_new(choice, "index", json_integer(i));
        if (m->kind == SERVE_CHAT) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            int calls = c[i].calls && c[i].calls->n > 0;
            int null_content = c[i].content.n == 0 && ((with_reasoning && c[i].reasoning.n > 0) || calls);
            json_object_set_new(msg, "content", null_content ? json_null() : text(c[i].content));
            if (calls) json_object_set_new(msg, "tool_calls", tool_calls_arr(m, i, c[i].calls, 0));
            if (with_reasoning) {
                json_object_set_new(msg, "reasoning_content", c[i].reasoning.n ? text(c[i].reasoning) : json_null());
                json_object_set_new(msg, "reasoning", c[i].reasoning.n ? text(c[i].reasoning) : json_null());
            }
            json_object_set_new(choice, "message", msg);
        } else {
            json_object_set_new(choice, "text", text(c[i].content));
        }
        put_choice(choices, choice, c[i].finish, m->kind, c[i].lps);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_obj(u));
    return dump(o);
}

char *serve_sse_chunk(const serve_resp_meta *m, int index, int with_role, serve_text reasoning, serve_text content,
                      const char *finish, int usage_null, const serve_lps *lps) {
    json_t *o = head(m, 1), *choice = json_object(), *choices = json_array();
    json_object_set_new(choice, "index", json_integer(index));
    if (m->kind == SERVE_CHAT) {
        json_t *d = json_object();
        if (with_role) json_object_set_new(d, "role", json_string("assistant"));
        if (reasoning.n) {
            json_object_set_new(d, "reasoning_content", text(reasoning));
            json_object_set_new(d, "reasoning", text(reasoning));
        }
        if (content.n || (with_role && !reasoning.n)) json_object_set_new(d, "content", text(content));
        json_object_set_new(choice, "delta", d);
    } else {
        json_object_set_new(choice, "text", text(content));
    }
    put_choice(choices, choice, finish, m->kind, lps);
    json_object_set_new(o, "choices", choices);
    if (usage_null) json_object_set_new(o, "usage", json_null());
    return sse(o);
}

char *serve_sse_usage(const serve_resp_meta *m, const serve_usage *u) {
    json_t *o = head(m, 1);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_obj(u));
    return sse(o);
}

char *serve_json_models(const char *model, long long created) {
    json_t *md = json_object(), *data = json_array(), *o = json_object();
    json_object_set_new(md, "id", text((serve_text){model, strlen(model)}));
    json_object_set_new(md, "object", json_string("model"));
    json_object_set_new(md, "created", json_integer(created));
    json_object_set_new(md, "owned_by", json_string("tierkv"));
    json_array_append_new(data, md);
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return dump(o);
}
