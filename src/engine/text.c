/* text.c (engine) — the text half of the public API: tokenizer, streaming detokenizer, chat
 * templates and their reasoning markers, sampling and stop strings, over src/model's tokenizer,
 * chat and sampler. Owns the parameter checks users meet first (NaN and out-of-range sampling
 * values are refused here, naming the parameter). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/argmax.h"
#include "base/err.h"
#include "base/version.h"
#include "engine/engine.h"
#include "model/chat.h"
#include "model/sampler.h"

/* ---- tokenizer ---- */

static int tok_flags(int flags) {
    return (flags & TKV_TOK_ADD_SPECIAL ? TOK_ADD_SPECIAL : 0) | (flags & TKV_TOK_PARSE_SPECIAL ? TOK_PARSE_SPECIAL : 0);
}

int tkv_tokenize(const tkv_model *m, const char *text, size_t len, int flags, int32_t *out, int cap) {
    int n = tok_encode(m->vocab, text, len, tok_flags(flags), out, cap);
    return n < 0 ? TKV_ERR : n;
}

int tkv_tokenize_alloc(const tkv_model *m, const char *text, size_t len, int flags, int32_t **out) {
    int n = tok_encode_alloc(m->vocab, text, len, tok_flags(flags), NULL, 0, out);
    return n < 0 ? TKV_ERR : n;
}

int tkv_token_piece(const tkv_model *m, int32_t id, int special, const char **bytes) {
    int n = tok_piece(m->vocab, id, special, bytes);
    return n < 0 ? TKV_ERR : n;
}

int tkv_token_is_eog(const tkv_model *m, int32_t id) { return tok_is_eog(m->vocab, id); }

void tkv_detok_init(tkv_detok *d) { memset(d, 0, sizeof *d); }

size_t tkv_detok_out_size(const tkv_model *m) { return TOK_STREAM_OUT(tok_max_piece(m->vocab)) + 16; }

/* tkv_detok has tok_stream's layout (checked below), so the stream runs on it in place */
_Static_assert(sizeof(tkv_detok) == sizeof(tok_stream), "tkv_detok mirrors tok_stream");

size_t tkv_detok_token(tkv_detok *d, const tkv_model *m, int32_t id, int special, char *out) {
    return tok_stream_token((tok_stream *)(void *)d, m->vocab, id, special, out);
}

size_t tkv_detok_flush(tkv_detok *d, char *out) { return tok_stream_flush((tok_stream *)(void *)d, out); }

char *tkv_detokenize(const tkv_model *m, const int32_t *ids, int n, int special, size_t *len) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(m->vocab)) return NULL;
    return tok_decode(m->vocab, ids, n, special, len);
}

/* ---- chat ---- */

struct tkv_chat {
    const tkv_model *m;
    chat_template t;
};

int tkv_chat_open(const tkv_model *m, const char *name, int flags, tkv_chat **out, char *err, size_t errlen) {
    *out = NULL;
    tkv_chat *c = tkv_xcalloc(1, sizeof *c);
    c->m = m;
    if (chat_template_from_gguf(m->file, name, &c->t, err, errlen)) { free(c); return TKV_ERR; }
    if (flags & TKV_CHAT_NO_DEFAULT_SYSTEM) c->t.default_system[0] = 0;
    if ((flags & TKV_CHAT_THINK_OFF) && !chat_think_switch(c->t.kind)) {
        tkv_errf(err, errlen, "the %s chat format has no thinking switch (qwen3 has): thinking cannot be turned off",
                 chat_name(c->t.kind));
        free(c);
        return TKV_ERR;
    }
    c->t.think_off = !!(flags & TKV_CHAT_THINK_OFF);
    *out = c;
    return 0;
}

void tkv_chat_close(tkv_chat *c) { free(c); }

const char *tkv_chat_name(const tkv_chat *c) { return chat_name(c->t.kind); }

int tkv_chat_think_switch(const tkv_chat *c) { return chat_think_switch(c->t.kind); }

static int check_msgs(const chat_template *t, const tkv_chat_msg *msgs, int n, const char *const *tools, int n_tools,
                      char *err, size_t errlen) {
    if (n < 1) return tkv_errf(err, errlen, "chat: no messages");
    if (n_tools > 0 && !t->tools)
        return tkv_errf(err, errlen, "chat: the %s format of this model takes no tools", chat_name(t->kind));
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) return tkv_errf(err, errlen, "chat: message %d has no role or content", i);
        int tool = !strcmp(msgs[i].role, "tool");
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant") && !tool)
            return tkv_errf(err, errlen, "chat: message %d has role '%.32s' (system, user, assistant or tool)", i, msgs[i].role);
        if ((tool || msgs[i].n_tool_calls > 0) && !t->tools)
            return tkv_errf(err, errlen, "chat: message %d is a tool %s, which the %s format of this model cannot say", i,
                            tool ? "result" : "call", chat_name(t->kind));
        if (msgs[i].n_tool_calls > 0 && (strcmp(msgs[i].role, "assistant") || !msgs[i].tool_calls))
            return tkv_errf(err, errlen, "chat: message %d: only an assistant message carries tool calls", i);
        for (int k = 0; k < msgs[i].n_tool_calls; k++)
            if (!msgs[i].tool_calls[k].name || !msgs[i].tool_calls[k].arguments)
                return tkv_errf(err, errlen, "chat: message %d: tool call %d has no name or arguments", i, k);
    }
    chat_tools ct = {tools, n_tools};
    char why[256];
    if (chat_check(t, (const chat_msg *)(const void *)msgs, n, &ct, why, sizeof why))
        return tkv_errf(err, errlen, "chat: %s", why);
    return 0;
}

_Static_assert(sizeof(tkv_chat_msg) == sizeof(chat_msg) &&
                   offsetof(tkv_chat_msg, reasoning_content) == offsetof(chat_msg, reasoning_content),
               "tkv_chat_msg mirrors chat_msg");
_Static_assert(sizeof(tkv_chat_call) == sizeof(chat_call) && offsetof(tkv_chat_call, arguments) == offsetof(chat_call, arguments),
               "tkv_chat_call mirrors chat_call");

int tkv_chat_has_tools(const tkv_chat *c) { return c->t.tools; }

const char *tkv_chat_call_key(const tkv_chat *c) { return chat_call_key(c->t.kind); }

int tkv_chat_max_calls(const tkv_chat *c) { return chat_max_calls(c->t.kind); }

int tkv_chat_encode_tools(const tkv_chat *c, const tkv_chat_msg *msgs, int n, const char *const *tools, int n_tools,
                          int add_generation_prompt, int32_t **ids, char *err, size_t errlen) {
    *ids = NULL;
    if (check_msgs(&c->t, msgs, n, tools, n_tools, err, errlen)) return TKV_ERR;
    chat_tools ct = {tools, n_tools};
    return chat_encode(&c->t, c->m->vocab, (const chat_msg *)(const void *)msgs, n, &ct, add_generation_prompt, ids);
}

int tkv_chat_encode(const tkv_chat *c, const tkv_chat_msg *msgs, int n, int add_generation_prompt, int32_t **ids,
                    char *err, size_t errlen) {
    return tkv_chat_encode_tools(c, msgs, n, NULL, 0, add_generation_prompt, ids, err, errlen);
}

char *tkv_chat_render_tools(const tkv_chat *c, const tkv_chat_msg *msgs, int n, const char *const *tools, int n_tools,
                            int add_generation_prompt, size_t *len) {
    if (check_msgs(&c->t, msgs, n, tools, n_tools, NULL, 0)) return NULL;
    chat_tools ct = {tools, n_tools};
    return chat_render(&c->t, c->m->vocab, (const chat_msg *)(const void *)msgs, n, &ct, add_generation_prompt, len, NULL,
                       NULL);
}

char *tkv_chat_render(const tkv_chat *c, const tkv_chat_msg *msgs, int n, int add_generation_prompt, size_t *len) {
    return tkv_chat_render_tools(c, msgs, n, NULL, 0, add_generation_prompt, len);
}

int tkv_chat_reasoning(const tkv_chat *c, const char **open, const char **close, int *by) {
    switch (chat_reasoning(&c->t, open, close)) {
    case CHAT_THINK_PROMPT_OPENS: *by = TKV_THINK_PROMPT_OPENS; break;
    case CHAT_THINK_PROMPT_CLOSED: *by = TKV_THINK_PROMPT_CLOSED; break;
    default: *by = TKV_THINK_MODEL_OPENS; break;
    }
    return 0;
}

/* ---- sampling ---- */

struct tkv_sampler {
    sampler s;
    int n_vocab;
};

void tkv_sampling_default(tkv_sampling *p) {
    sampler_opts o = sampler_defaults();
    *p = (tkv_sampling){o.temperature, o.top_k, o.top_p, o.min_p, o.repeat_penalty, o.repeat_last_n, o.seed};
}

int tkv_sampler_open(const tkv_sampling *p, int n_vocab, tkv_sampler **out, char *err, size_t errlen) {
    *out = NULL;
    if (!isfinite(p->temperature) || p->temperature < 0 || p->temperature > 1e6)
        return tkv_errf(err, errlen, "temperature %g: must be a finite number >= 0", (double)p->temperature);
    if (!isfinite(p->top_p) || p->top_p < 0 || p->top_p > 1)
        return tkv_errf(err, errlen, "top_p %g: must lie in [0, 1]", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0 || p->min_p > 1)
        return tkv_errf(err, errlen, "min_p %g: must lie in [0, 1]", (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0 || p->repeat_penalty > 1e6)
        return tkv_errf(err, errlen, "repeat_penalty %g: must be a finite number > 0", (double)p->repeat_penalty);
    if (n_vocab < 1) return tkv_errf(err, errlen, "sampler: empty vocabulary");
    tkv_sampler *s = tkv_xcalloc(1, sizeof *s);
    sampler_opts o = {p->temperature, p->top_k, p->top_p, p->min_p, p->repeat_penalty, p->repeat_last_n, p->seed};
    sampler_init(&s->s, &o, n_vocab);
    s->n_vocab = n_vocab;
    *out = s;
    return 0;
}

void tkv_sampler_close(tkv_sampler *s) {
    if (!s) return;
    sampler_free(&s->s);
    free(s);
}

int32_t tkv_sampler_sample(tkv_sampler *s, float *logits, const int32_t *history, int n_hist) {
    return sampler_sample(&s->s, logits, s->n_vocab, history, n_hist);
}

int32_t tkv_argmax(const float *x, int n) { return tkv_argmax_f32(x, n); }

/* ---- stop strings ---- */

struct tkv_stop {
    stop_matcher m;
};

tkv_stop *tkv_stop_open(const char *const *stops, int n_stops) {
    tkv_stop *s = tkv_xcalloc(1, sizeof *s);
    stop_init(&s->m, stops, n_stops);
    return s;
}

void tkv_stop_close(tkv_stop *s) {
    if (!s) return;
    stop_free(&s->m);
    free(s);
}

size_t tkv_stop_out_size(const tkv_stop *s, size_t n) { return n + s->m.max_len + 16; }

int tkv_stop_feed(tkv_stop *s, const char *text, size_t n, char *out, size_t *out_n) {
    return stop_feed(&s->m, text, n, out, out_n);
}

size_t tkv_stop_flush(tkv_stop *s, char *out) { return stop_flush(&s->m, out); }

/* ---- policies and the build ---- */

_Static_assert((int)TKV_POLICY_FULL == (int)KV_POLICY_FULL && (int)TKV_POLICY_SNAPKV == (int)KV_POLICY_SNAPKV &&
                   (int)TKV_POLICY_COUNT == (int)KV_POLICY_COUNT,
               "tkv_policy mirrors kv_policy_kind");

const char *tkv_policy_name(tkv_policy p) { return kv_policy_name((kv_policy_kind)p); }

int tkv_policy_parse(const char *name, tkv_policy *out) {
    kv_policy_kind k;
    if (kv_policy_parse(name, &k)) return TKV_ERR;
    *out = (tkv_policy)k;
    return 0;
}

int tkv_policy_shares_prefix(tkv_policy p) { return kv_policy_copies_prefix((kv_policy_kind)p); }

int tkv_kv_shares_prefix(const tkv_kv_params *p) { return tkv_policy_shares_prefix(p->policy) && !p->unpin_prompt; }

int tkv_t2_codec_known(const char *name) {
    be_kv_fmt f;
    return name && be_kv_t2_parse(name, &f) == 0;
}

const char *tkv_t2_codec_names(void) { return be_kv_t2_names(); }

const char *tkv_t2_codec_default(const char *backend) { return be_kv_t2_name(be_kv_t2_default(backend)); }

int tkv_kv_uses_t2(const tkv_kv_params *p) { return kv_policy_uses_t2((kv_policy_kind)p->policy, p->t2_ratio); }

int tkv_policy_whole_token(tkv_policy p) { return kv_policy_whole_token((kv_policy_kind)p); }
