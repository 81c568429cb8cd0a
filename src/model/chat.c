/* chat.c - the chat formats of chat.h, written out from the official Jinja templates (FORMATS.md 6.2,
 * 6.3) and llama.cpp's detection order (6.1). Messages are rendered in order; there is no tool use.
 *   ChatML:      [<|im_start|>system\nS<|im_end|>\n] (<|im_start|>ROLE\nTEXT<|im_end|>\n)* [<|im_start|>assistant\n]
 *   DeepSeek-R1: BOS S (<｜User｜>U | <｜Assistant｜>A'<｜end▁of▁sentence｜>)* [<｜Assistant｜><think>\n]
 *                where A' is A after its last </think> (earlier reasoning is dropped)
 *   Llama 3:     BOS (<|start_header_id|>ROLE<|end_header_id|>\n\nTRIMMED<|eot_id|>)* [... assistant header]
 * The R1 generation prompt always ends with "<think>\n" (the early-2025 template revision), even for
 * files whose embedded template is older and ends with <｜Assistant｜>. */
#include "model/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"

#define R1_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define R1_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static int has(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)) != NULL; }

chat_kind chat_detect(const char *t, size_t n) {
    char name[32];
    if (n < sizeof name) {
        memcpy(name, t, n);
        name[n] = 0;
        chat_kind k = chat_by_name(name);
        if (k != CHAT_UNKNOWN) return k;
    }
    if (has(t, n, "<|im_start|>") && !has(t, n, "<|im_sep|>")) return CHAT_CHATML;
    if (has(t, n, "<|start_header_id|>") && has(t, n, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (has(t, n, R1_ASSISTANT) && has(t, n, R1_USER) && has(t, n, R1_EOS)) return CHAT_DEEPSEEK_R1;
    return CHAT_UNKNOWN;
}

chat_kind chat_by_name(const char *name) {
    if (!strcmp(name, "chatml")) return CHAT_CHATML;
    if (!strcmp(name, "deepseek-r1") || !strcmp(name, "deepseek3")) return CHAT_DEEPSEEK_R1;
    if (!strcmp(name, "llama3")) return CHAT_LLAMA3;
    return CHAT_UNKNOWN;
}

const char *chat_name(chat_kind k) {
    switch (k) {
    case CHAT_CHATML: return "chatml";
    case CHAT_DEEPSEEK_R1: return "deepseek-r1";
    case CHAT_LLAMA3: return "llama3";
    default: return "unknown";
    }
}

void chat_template_init(chat_template *t, chat_kind kind) {
    memset(t, 0, sizeof *t);
    t->kind = kind;
    if (kind == CHAT_CHATML) snprintf(t->default_system, sizeof t->default_system, "%s", QWEN25_SYSTEM);
}

/* The ChatML default system prompt written as a literal in the Jinja source:
 * '<|im_start|>system\nTEXT<|im_end|>' where TEXT holds no quote or Jinja syntax. */
static int chatml_default_system(const char *t, size_t n, char *out, size_t cap) {
    static const char open[] = "<|im_start|>system\\n", close[] = "<|im_end|>";
    const char *p = t, *end = t + n;
    while ((p = memmem(p, (size_t)(end - p), open, sizeof open - 1)) != NULL) {
        p += sizeof open - 1;
        const char *q = memmem(p, (size_t)(end - p), close, sizeof close - 1);
        if (!q) return 0;
        size_t k = (size_t)(q - p);
        int ok = k > 0 && k < cap;
        for (size_t i = 0; ok && i < k; i++) ok = !strchr("'\"{}+\\", p[i]);
        if (ok) { memcpy(out, p, k); out[k] = 0; return 1; }
    }
    return 0;
}

int chat_template_from_gguf(const gguf_file *f, const char *name, chat_template *t, char *err, size_t errlen) {
    gguf_str tmpl = {0};
    char e[8];
    int have = gguf_find(f, "tokenizer.chat_template") && gguf_get_str(f, "tokenizer.chat_template", &tmpl, e, sizeof e) == 0;
    chat_kind k = name ? chat_by_name(name) : (have ? chat_detect(tmpl.ptr, tmpl.len) : CHAT_UNKNOWN);
    if (k == CHAT_UNKNOWN) {
        if (name) return tkv_errf(err, errlen, "unknown chat template name '%s' (choose chatml, deepseek-r1 or llama3)", name);
        return tkv_errf(err, errlen, "%s; choose one by name: chatml, deepseek-r1 or llama3",
                        have ? "the model's chat template is not one we recognise" : "the model has no tokenizer.chat_template");
    }
    chat_template_init(t, k);
    if (k == CHAT_CHATML && have) {
        /* the default belongs to the template: Qwen2 has another one, and a template without one has none */
        if (!chatml_default_system(tmpl.ptr, tmpl.len, t->default_system, sizeof t->default_system))
            t->default_system[0] = 0;
    }
    return 0;
}

static const char *bos_text(const tok_vocab *v, const char *fallback, size_t *n) {
    const char *t = v && tok_bos(v) >= 0 ? tok_text(v, tok_bos(v), n) : NULL;
    if (t) return t;
    *n = strlen(fallback);
    return fallback;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

char *chat_render(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n,
                  int add_generation_prompt, size_t *len, size_t **lit) {
    tkv_buf b = {0};
    size_t *rg = tkv_xcalloc(2 * (size_t)(n > 0 ? n : 1), sizeof *rg);
    tkv_buf_adds(&b, "");
#define CONTENT(i, s, k) do { rg[2 * (i)] = b.n; tkv_buf_add(&b, (s), (k)); rg[2 * (i) + 1] = b.n; } while (0)
    if (t->kind == CHAT_CHATML) {
        int has_system = n > 0 && !strcmp(msgs[0].role, "system");
        if (!has_system && t->default_system[0])
            tkv_buf_adds(&b, "<|im_start|>system\n"), tkv_buf_adds(&b, t->default_system), tkv_buf_adds(&b, "<|im_end|>\n");
        for (int i = 0; i < n; i++) {
            tkv_buf_adds(&b, "<|im_start|>"), tkv_buf_adds(&b, msgs[i].role), tkv_buf_adds(&b, "\n");
            CONTENT(i, msgs[i].content, strlen(msgs[i].content));
            tkv_buf_adds(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt) tkv_buf_adds(&b, "<|im_start|>assistant\n");
    } else if (t->kind == CHAT_DEEPSEEK_R1) {
        size_t bn;
        const char *bt = bos_text(v, R1_BOS, &bn);
        tkv_buf_add(&b, bt, bn);
        int sys = -1; /* the (last) system prompt goes first, raw, after BOS */
        for (int i = 0; i < n; i++) if (!strcmp(msgs[i].role, "system")) sys = i;
        if (sys >= 0) CONTENT(sys, msgs[sys].content, strlen(msgs[sys].content));
        for (int i = 0; i < n; i++) {
            const char *c = msgs[i].content;
            if (!strcmp(msgs[i].role, "user")) {
                tkv_buf_adds(&b, R1_USER);
                CONTENT(i, c, strlen(c));
            } else if (!strcmp(msgs[i].role, "assistant")) {
                const char *a = c, *p;
                while ((p = strstr(a, "</think>")) != NULL) a = p + 8;
                tkv_buf_adds(&b, R1_ASSISTANT);
                CONTENT(i, a, strlen(a));
                tkv_buf_adds(&b, R1_EOS);
            }
        }
        if (add_generation_prompt) tkv_buf_adds(&b, R1_ASSISTANT "<think>\n");
    } else if (t->kind == CHAT_LLAMA3) {
        size_t bn;
        const char *bt = bos_text(v, "<|begin_of_text|>", &bn);
        tkv_buf_add(&b, bt, bn);
        for (int i = 0; i < n; i++) {
            const char *c = msgs[i].content, *e = c + strlen(c);
            while (c < e && is_space(*c)) c++;
            while (e > c && is_space(e[-1])) e--;
            tkv_buf_adds(&b, "<|start_header_id|>"), tkv_buf_adds(&b, msgs[i].role), tkv_buf_adds(&b, "<|end_header_id|>\n\n");
            CONTENT(i, c, (size_t)(e - c));
            tkv_buf_adds(&b, "<|eot_id|>");
        }
        if (add_generation_prompt) tkv_buf_adds(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
#undef CONTENT
    if (len) *len = b.n;
    if (lit) *lit = rg; else free(rg);
    return b.p;
}

int chat_encode(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n,
                int add_generation_prompt, int32_t **ids) {
    size_t len, *lit;
    char *s = chat_render(t, v, msgs, n, add_generation_prompt, &len, &lit);
    /* sized by the encoder: an invalid byte alone can become three ids (U+FFFD) */
    int k = tok_encode_alloc(v, s, len, TOK_PARSE_SPECIAL, lit, n, ids);
    free(s);
    free(lit);
    return k;
}
