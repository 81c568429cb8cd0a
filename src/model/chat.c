/* chat.c - the chat formats of chat.h, written out from the official Jinja templates (FORMATS.md 6.2,
 * 6.3; Qwen3's: tests/data/qwen3-chat-template.jinja) and llama.cpp's detection order (6.1). Messages
 * are rendered in order. Tool use in Qwen2.5's ChatML (when the file's template has it) and Qwen3:
 * the tools in the system turn, an assistant's calls as <tool_call> blocks, consecutive "tool"
 * messages as <tool_response> blocks of one user turn.
 *   ChatML:      [<|im_start|>system\nS<|im_end|>\n] (<|im_start|>ROLE\nTEXT<|im_end|>\n)* [<|im_start|>assistant\n]
 *   Qwen3:       ChatML without a default system prompt; an assistant turn after the last user query
 *                keeps its reasoning as "<think>\nR\n</think>\n\n" before the answer, one before it
 *                loses it; [<|im_start|>assistant\n[<think>\n\n</think>\n\n with thinking off]]
 *   DeepSeek-R1: BOS S (<｜User｜>U | <｜Assistant｜>A'<｜end▁of▁sentence｜>)* [<｜Assistant｜><think>\n]
 *                where A' is A after its last </think> (earlier reasoning is dropped)
 *   Llama 3:     BOS (<|start_header_id|>ROLE<|end_header_id|>\n\nTRIMMED<|eot_id|>)* [... assistant header]
 *   Llama 3.1:   BOS, a system turn of the dates (and "Environment: ipython" with tools) and the system
 *                message, then Llama 3's turns; with tools the first message after the system one
 *                becomes a user turn that lists them (tojson(indent=4)); a call is an assistant turn
 *                {"name": "N", "parameters": ARGS}, a tool result an ipython turn of its content as a
 *                JSON string (tests/data/llama31-chat-template.jinja, with no date_string, custom_tools
 *                or builtin_tools given: "26 Jul 2024", or today's for 3.2's template, which asks
 *                strftime_now; tools in the user turn)
 * The R1 generation prompt always ends with "<think>\n" (the early-2025 template revision), even for
 * files whose embedded template is older and ends with <｜Assistant｜>. */
#include "model/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jsontext.h"
#include "model/unicode.h"

#define R1_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define R1_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
/* Qwen3's template as its Jinja source writes it: the thinking switch, the generation prompt with
 * thinking off, the rule that keeps reasoning after the last user query, and the tool instruction
 * (Qwen2.5's). Qwen3.5's and QwQ's templates lack one of them: they stay ChatML, as in llama.cpp. */
static const char *const QWEN3_MARKS[] = {
    "<|im_start|>", "enable_thinking", "last_query_index", "'<think>\\n\\n</think>\\n\\n'",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags"};

/* Llama 3.1's template (3.2's and 3.3's too): its system header's dates and its tool instruction,
 * both written out below; a Llama 3 template without them stays llama3. */
static const char *const LLAMA31_MARKS[] = {"<|start_header_id|>", "<|end_header_id|>", "Cutting Knowledge Date: December 2023",
                                            "\"parameters\": dictionary of argument name and its value"};

static int has(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)) != NULL; }

static int has_all(const char *s, size_t n, const char *const *needles, size_t k) {
    int all = 1;
    for (size_t i = 0; i < k; i++) all &= has(s, n, needles[i]);
    return all;
}

chat_kind chat_detect(const char *t, size_t n) {
    char name[32];
    if (n < sizeof name) {
        memcpy(name, t, n);
        name[n] = 0;
        chat_kind k = chat_by_name(name);
        if (k != CHAT_UNKNOWN) return k;
    }
    if (has_all(t, n, QWEN3_MARKS, sizeof QWEN3_MARKS / sizeof QWEN3_MARKS[0])) return CHAT_QWEN3;
    if (has(t, n, "<|im_start|>") && !has(t, n, "<|im_sep|>")) return CHAT_CHATML;
    if (has_all(t, n, LLAMA31_MARKS, sizeof LLAMA31_MARKS / sizeof LLAMA31_MARKS[0])) return CHAT_LLAMA31;
    if (has(t, n, "<|start_header_id|>") && has(t, n, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (has(t, n, R1_ASSISTANT) && has(t, n, R1_USER) && has(t, n, R1_EOS)) return CHAT_DEEPSEEK_R1;
    return CHAT_UNKNOWN;
}

chat_kind chat_by_name(const char *name) {
    if (!strcmp(name, "chatml")) return CHAT_CHATML;
    if (!strcmp(name, "deepseek-r1") || !strcmp(name, "deepseek3")) return CHAT_DEEPSEEK_R1;
    if (!strcmp(name, "llama3")) return CHAT_LLAMA3;
    if (!strcmp(name, "llama3.1")) return CHAT_LLAMA31;
    if (!strcmp(name, "qwen3")) return CHAT_QWEN3;
    return CHAT_UNKNOWN;
}

const char *chat_name(chat_kind k) {
    switch (k) {
    case CHAT_CHATML: return "chatml";
    case CHAT_DEEPSEEK_R1: return "deepseek-r1";
    case CHAT_LLAMA3: return "llama3";
    case CHAT_LLAMA31: return "llama3.1";
    case CHAT_QWEN3: return "qwen3";
    default: return "unknown";
    }
}

void chat_template_init(chat_template *t, chat_kind kind) {
    memset(t, 0, sizeof *t);
    t->kind = kind;
    if (kind == CHAT_CHATML) snprintf(t->default_system, sizeof t->default_system, "%s", QWEN25_SYSTEM);
    t->tools = kind == CHAT_QWEN3 || kind == CHAT_LLAMA31; /* their one template has them */
}

const char *chat_call_key(chat_kind k) { return k == CHAT_LLAMA31 ? "parameters" : "arguments"; }

int chat_max_calls(chat_kind k) { return k == CHAT_LLAMA31 ? 1 : 0; }

int chat_check(const chat_template *t, const chat_msg *msgs, int n, const chat_tools *tools, char *err, size_t errlen) {
    int max = chat_max_calls(t->kind);
    for (int i = 0; i < n; i++)
        if (max && msgs[i].n_tool_calls > max)
            return tkv_errf(err, errlen, "messages[%d] holds %d tool calls: the %s format takes %d per assistant message (its "
                            "template raises \"This model only supports single tool-calls at once!\")", i,
                            msgs[i].n_tool_calls, chat_name(t->kind), max);
    if (t->kind == CHAT_LLAMA31 && tools && tools->n > 0 && n <= (n > 0 && !strcmp(msgs[0].role, "system")))
        return tkv_errf(err, errlen, "messages[%d]: the %s format puts the tools in the first message after the system "
                        "message, and there is none (its template raises \"Cannot put tools in the first user message "
                        "when there's no first user message!\")", n, chat_name(t->kind));
    return 0;
}

int chat_think_switch(chat_kind k) { return k == CHAT_QWEN3; }

chat_think chat_reasoning(const chat_template *t, const char **open, const char **close) {
    *open = *close = NULL;
    if (t->kind != CHAT_DEEPSEEK_R1 && t->kind != CHAT_QWEN3) return CHAT_THINK_NONE;
    *open = "<think>";
    *close = "</think>";
    if (t->kind == CHAT_DEEPSEEK_R1) return CHAT_THINK_PROMPT_OPENS; /* its generation prompt ends with "<think>\n" */
    return t->think_off ? CHAT_THINK_PROMPT_CLOSED : CHAT_THINK_MODEL_OPENS;
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
        if (name)
            return tkv_errf(err, errlen, "unknown chat template name '%s' (choose chatml, deepseek-r1, llama3, llama3.1 or qwen3)", name);
        return tkv_errf(err, errlen, "%s; choose one by name: chatml, deepseek-r1, llama3, llama3.1 or qwen3",
                        have ? "the model's chat template is not one we recognise" : "the model has no tokenizer.chat_template");
    }
    chat_template_init(t, k);
    if (k == CHAT_CHATML && have) {
        /* the default belongs to the template: Qwen2 has another one, and a template without one has none */
        if (!chatml_default_system(tmpl.ptr, tmpl.len, t->default_system, sizeof t->default_system))
            t->default_system[0] = 0;
        t->tools = has(tmpl.ptr, tmpl.len, "<tools>") && has(tmpl.ptr, tmpl.len, "<tool_call>") &&
                   has(tmpl.ptr, tmpl.len, "<tool_response>") && has(tmpl.ptr, tmpl.len, "# Tools");
        t->tools_braces = has(tmpl.ptr, tmpl.len, "{{\\\"name\\\": <function-name>");
    }
    if (k == CHAT_LLAMA31 && have) t->date_now = has(tmpl.ptr, tmpl.len, "strftime_now(");
    return 0;
}

static const char *bos_text(const tok_vocab *v, const char *fallback, size_t *n) {
    const char *t = v && tok_bos(v) >= 0 ? tok_text(v, tok_bos(v), n) : NULL;
    if (t) return t;
    *n = strlen(fallback);
    return fallback;
}

/* A character Python's str.strip() (Jinja's |trim) takes off: \s of the tokenizer and U+001C..U+001F. */
static int py_space(uint32_t cp) { return tok_is_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

/* s[0..*n) without the leading and trailing characters Python's strip() removes; invalid bytes stay. */
static const char *py_strip(const char *s, size_t *n) {
    const unsigned char *b = (const unsigned char *)s;
    size_t i = 0, e = *n;
    uint32_t cp;
    while (i < e) {
        int k = tok_utf8_decode(b + i, e - i, &cp);
        if (!py_space(cp)) break;
        i += (size_t)k;
    }
    while (e > i) { /* the last character: its lead byte at most 3 bytes back */
        size_t at = e - 1;
        while (at > i && e - at < 4 && (b[at] & 0xC0) == 0x80) at--;
        int k = tok_utf8_decode(b + at, e - at, &cp);
        if ((size_t)k != e - at || !py_space(cp)) break;
        e = at;
    }
    *n = e - i;
    return s + i;
}

#define TOOLS_HEAD "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided " \
                   "with function signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL(OPEN, CLOSE)                                                                                      \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "         \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n" OPEN "\"name\": <function-name>, \"arguments\": "              \
    "<args-json-object>" CLOSE "\n</tool_call><|im_end|>\n"

/* The rendered text and the ranges of the callers' text in it (kept literal by the encoder). */
typedef struct {
    tkv_buf b;
    size_t *rg; /* [2 * cap]: start, end */
    size_t n_rg, cap;
} render;

static void lit(render *R, const char *s, size_t k) {
    if (R->n_rg == R->cap) R->cap = R->cap ? 2 * R->cap : 16, R->rg = tkv_xrealloc(R->rg, 2 * R->cap * sizeof *R->rg);
    R->rg[2 * R->n_rg] = R->b.n;
    tkv_buf_add(&R->b, s, k);
    R->rg[2 * R->n_rg++ + 1] = R->b.n;
}

/* The system turn that carries the tools (Qwen2.5's ChatML, Qwen3): the system text, a caller's
 * (callers: a literal of the prompt) or the template's own, when there is one, then the tools. */
static void tools_turn(render *R, const char *text, int callers, const chat_tools *tools, int braces) {
    tkv_buf_adds(&R->b, "<|im_start|>system\n");
    if (text) {
        if (callers) lit(R, text, strlen(text));
        else tkv_buf_adds(&R->b, text);
        tkv_buf_adds(&R->b, "\n\n");
    }
    tkv_buf_adds(&R->b, TOOLS_HEAD);
    for (int k = 0; k < tools->n; k++) tkv_buf_adds(&R->b, "\n"), lit(R, tools->defs[k], strlen(tools->defs[k]));
    tkv_buf_adds(&R->b, braces ? TOOLS_TAIL("{{", "}}") : TOOLS_TAIL("{", "}"));
}

/* A call as Qwen2.5's and Qwen3's templates write it: {"name": "N", "arguments": A}. */
static void qwen_call(render *R, const chat_call *c) {
    tkv_buf_adds(&R->b, "{\"name\": \""), lit(R, c->name, strlen(c->name));
    tkv_buf_adds(&R->b, "\", \"arguments\": "), lit(R, c->arguments, strlen(c->arguments)), tkv_buf_adds(&R->b, "}");
}

/* Tool message i: a run of tool results is one user turn of <tool_response> blocks. */
static void tool_result(render *R, const chat_msg *msgs, int n, int i) {
    if (i == 0 || strcmp(msgs[i - 1].role, "tool")) tkv_buf_adds(&R->b, "<|im_start|>user");
    tkv_buf_adds(&R->b, "\n<tool_response>\n"), lit(R, msgs[i].content, strlen(msgs[i].content));
    tkv_buf_adds(&R->b, "\n</tool_response>");
    if (i == n - 1 || strcmp(msgs[i + 1].role, "tool")) tkv_buf_adds(&R->b, "<|im_end|>\n");
}

/* ---- Qwen3 ---- */

typedef struct {
    const char *p;
    size_t n;
} span;

static span lstrip_nl(span s) {
    while (s.n && *s.p == '\n') s.p++, s.n--;
    return s;
}
static span rstrip_nl(span s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}

/* The last occurrence of needle in s, or NULL. */
static const char *last_of(span s, const char *needle) {
    size_t k = strlen(needle);
    const char *hit = NULL;
    for (const char *p = s.p; (p = memmem(p, (size_t)(s.p + s.n - p), needle, k)) != NULL; p++) hit = p;
    return hit;
}

/* A user message that is not the template's tool-response wrapping: a query. */
static int qwen3_is_query(const chat_msg *m) {
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    size_t n = strlen(m->content);
    int wrapped = n >= sizeof open - 1 && !memcmp(m->content, open, sizeof open - 1) && n >= sizeof close - 1 &&
                  !memcmp(m->content + n - (sizeof close - 1), close, sizeof close - 1);
    return !strcmp(m->role, "user") && !wrapped;
}

/* The template's assistant turn, in its order: reasoning_content when given (content whole), else a
 * "</think>" in content splits it: the answer after the last one (leading newlines dropped), the
 * reasoning before the first one, after the last "<think>" there, without newlines at its ends. The
 * reasoning is written only after the last user query (ns.last_query_index), and there for the last
 * message even when empty; the calls follow, each on a line of its own but a first one without text
 * before it. */
static void qwen3_assistant(render *R, const chat_msg *m, int after_query, int last) {
    span c = {m->content, strlen(m->content)}, r = {"", 0};
    if (m->reasoning_content) r = (span){m->reasoning_content, strlen(m->reasoning_content)};
    else if (memmem(c.p, c.n, "</think>", 8)) {
        const char *end = last_of(c, "</think>"), *first = memmem(c.p, c.n, "</think>", 8);
        r = rstrip_nl((span){c.p, (size_t)(first - c.p)});
        const char *open = last_of(r, "<think>");
        if (open) r = (span){open + 7, (size_t)(r.p + r.n - (open + 7))};
        r = lstrip_nl(r);
        c = lstrip_nl((span){end + 8, (size_t)(c.p + c.n - (end + 8))});
    }
    tkv_buf_adds(&R->b, "<|im_start|>assistant\n");
    if (after_query && (last || r.n)) {
        span rs = lstrip_nl(rstrip_nl(r)), cs = lstrip_nl(c);
        tkv_buf_adds(&R->b, "<think>\n"), lit(R, rs.p, rs.n), tkv_buf_adds(&R->b, "\n</think>\n\n"), lit(R, cs.p, cs.n);
    } else {
        lit(R, c.p, c.n);
    }
    for (int k = 0; k < m->n_tool_calls; k++) {
        if (k > 0 || c.n) tkv_buf_adds(&R->b, "\n");
        tkv_buf_adds(&R->b, "<tool_call>\n"), qwen_call(R, &m->tool_calls[k]);
        tkv_buf_adds(&R->b, "\n</tool_call>");
    }
    tkv_buf_adds(&R->b, "<|im_end|>\n");
}

static void render_qwen3(render *R, const chat_template *t, const chat_msg *msgs, int n, const chat_tools *tools, int gen) {
    int has_system = n > 0 && !strcmp(msgs[0].role, "system");
    if (tools && tools->n > 0) {
        tools_turn(R, has_system ? msgs[0].content : NULL, 1, tools, 0);
    } else if (has_system) {
        tkv_buf_adds(&R->b, "<|im_start|>system\n"), lit(R, msgs[0].content, strlen(msgs[0].content));
        tkv_buf_adds(&R->b, "<|im_end|>\n");
    }
    int last_query = n - 1; /* the last user query: tool results wrapped by hand do not count */
    for (int i = n - 1; i >= 0; i--)
        if (qwen3_is_query(&msgs[i])) { last_query = i; break; }
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            tkv_buf_adds(&R->b, "<|im_start|>"), tkv_buf_adds(&R->b, role), tkv_buf_adds(&R->b, "\n");
            lit(R, msgs[i].content, strlen(msgs[i].content));
            tkv_buf_adds(&R->b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            qwen3_assistant(R, &msgs[i], i > last_query, i == n - 1);
        } else if (!strcmp(role, "tool")) {
            tool_result(R, msgs, n, i);
        }
    }
    if (gen) tkv_buf_adds(&R->b, t->think_off ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n");
}

/* ---- Llama 3, Llama 3.1 ---- */

/* <|start_header_id|>ROLE<|end_header_id|>\n\n, the content as |trim leaves it, <|eot_id|> */
static void llama3_turn(render *R, const char *role, const char *content) {
    size_t k = strlen(content);
    const char *c = py_strip(content, &k);
    tkv_buf_adds(&R->b, "<|start_header_id|>"), tkv_buf_adds(&R->b, role), tkv_buf_adds(&R->b, "<|end_header_id|>\n\n");
    lit(R, c, k), tkv_buf_adds(&R->b, "<|eot_id|>");
}

#define LLAMA31_CALL_FORMAT "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."

/* "Today Date": t->date when given; today's (strftime_now("%d %b %Y"), local time) for a template
 * that asks for it; else the template's default. */
static void today(render *R, const chat_template *t) {
    char d[64];
    time_t now = time(NULL);
    struct tm tm;
    if (t->date[0]) tkv_buf_adds(&R->b, t->date);
    else if (t->date_now && localtime_r(&now, &tm) && strftime(d, sizeof d, "%d %b %Y", &tm)) tkv_buf_adds(&R->b, d);
    else tkv_buf_adds(&R->b, "26 Jul 2024");
}

/* The template with no date_string (its default date, or 3.2's strftime_now), no custom_tools or
 * builtin_tools, and tools_in_user_message true (its default): the tools go into the first message
 * after the system one, whatever its role. What chat_check refuses is written as the nearest thing
 * that can be: the first call alone, an empty first user turn. */
static void render_llama31(render *R, const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n,
                           const chat_tools *tools, int gen) {
    size_t bn;
    const char *bt = bos_text(v, "<|begin_of_text|>", &bn);
    tkv_buf_add(&R->b, bt, bn);
    int with_tools = tools && tools->n > 0, i = 0;
    tkv_buf_adds(&R->b, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (with_tools) tkv_buf_adds(&R->b, "Environment: ipython\n");
    tkv_buf_adds(&R->b, "Cutting Knowledge Date: December 2023\nToday Date: ");
    today(R, t);
    tkv_buf_adds(&R->b, "\n\n");
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        size_t k = strlen(msgs[0].content);
        const char *c = py_strip(msgs[0].content, &k);
        lit(R, c, k);
        i = 1;
    }
    tkv_buf_adds(&R->b, "<|eot_id|>");
    if (with_tools) {
        tkv_buf_adds(&R->b, "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a "
                            "JSON for a function call with its proper arguments that best answers the given prompt.\n\n"
                            LLAMA31_CALL_FORMAT "Do not use variables.\n\n");
        for (int k = 0; k < tools->n; k++) {
            tkv_buf d = {0};
            json_add_indented(&d, tools->defs[k], strlen(tools->defs[k]), 4);
            lit(R, d.p, d.n), tkv_buf_adds(&R->b, "\n\n");
            tkv_buf_free(&d);
        }
        size_t k = i < n ? strlen(msgs[i].content) : 0;
        const char *c = i < n ? py_strip(msgs[i].content, &k) : "";
        lit(R, c, k), tkv_buf_adds(&R->b, "<|eot_id|>");
        i++;
    }
    for (; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (m->n_tool_calls > 0) {
            tkv_buf_adds(&R->b, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            lit(R, m->tool_calls[0].name, strlen(m->tool_calls[0].name)), tkv_buf_adds(&R->b, "\", \"parameters\": ");
            lit(R, m->tool_calls[0].arguments, strlen(m->tool_calls[0].arguments)), tkv_buf_adds(&R->b, "}<|eot_id|>");
        } else if (!strcmp(m->role, "tool")) { /* a string is iterable to Jinja: tojson writes it quoted */
            tkv_buf q = {0};
            json_add_str(&q, m->content, strlen(m->content));
            tkv_buf_adds(&R->b, "<|start_header_id|>ipython<|end_header_id|>\n\n"), lit(R, q.p, q.n);
            tkv_buf_adds(&R->b, "<|eot_id|>");
            tkv_buf_free(&q);
        } else {
            llama3_turn(R, m->role, m->content);
        }
    }
    if (gen) tkv_buf_adds(&R->b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

char *chat_render(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n, const chat_tools *tools,
                  int add_generation_prompt, size_t *len, size_t **lit_out, int *n_lit) {
    render R = {0};
    tkv_buf_adds(&R.b, "");
#define CONTENTS(s) lit(&R, (s), strlen(s))
    if (t->kind == CHAT_CHATML) {
        int has_system = n > 0 && !strcmp(msgs[0].role, "system");
        int with_tools = tools && tools->n > 0 && t->tools;
        if (with_tools) { /* the system turn carries the tools (the caller's system text, or the default) */
            tools_turn(&R, has_system ? msgs[0].content : t->default_system, has_system, tools, t->tools_braces);
        } else if (!has_system && t->default_system[0]) {
            tkv_buf_adds(&R.b, "<|im_start|>system\n"), tkv_buf_adds(&R.b, t->default_system), tkv_buf_adds(&R.b, "<|im_end|>\n");
        }
        for (int i = 0; i < n; i++) {
            const char *role = msgs[i].role;
            if (i == 0 && has_system && with_tools) continue; /* written above */
            if (!strcmp(role, "tool")) {
                tool_result(&R, msgs, n, i);
            } else if (!strcmp(role, "assistant") && msgs[i].n_tool_calls > 0) {
                tkv_buf_adds(&R.b, "<|im_start|>assistant");
                if (msgs[i].content[0]) tkv_buf_adds(&R.b, "\n"), CONTENTS(msgs[i].content);
                for (int k = 0; k < msgs[i].n_tool_calls; k++)
                    tkv_buf_adds(&R.b, "\n<tool_call>\n"), qwen_call(&R, &msgs[i].tool_calls[k]), tkv_buf_adds(&R.b, "\n</tool_call>");
                tkv_buf_adds(&R.b, "<|im_end|>\n");
            } else {
                tkv_buf_adds(&R.b, "<|im_start|>"), tkv_buf_adds(&R.b, role), tkv_buf_adds(&R.b, "\n");
                CONTENTS(msgs[i].content);
                tkv_buf_adds(&R.b, "<|im_end|>\n");
            }
        }
        if (add_generation_prompt) tkv_buf_adds(&R.b, "<|im_start|>assistant\n");
    } else if (t->kind == CHAT_DEEPSEEK_R1) {
        size_t bn;
        const char *bt = bos_text(v, R1_BOS, &bn);
        tkv_buf_add(&R.b, bt, bn);
        int sys = -1; /* the (last) system prompt goes first, raw, after BOS */
        for (int i = 0; i < n; i++) if (!strcmp(msgs[i].role, "system")) sys = i;
        if (sys >= 0) CONTENTS(msgs[sys].content);
        for (int i = 0; i < n; i++) {
            const char *c = msgs[i].content;
            if (!strcmp(msgs[i].role, "user")) {
                tkv_buf_adds(&R.b, R1_USER);
                CONTENTS(c);
            } else if (!strcmp(msgs[i].role, "assistant")) {
                const char *a = c, *p;
                while ((p = strstr(a, "</think>")) != NULL) a = p + 8;
                tkv_buf_adds(&R.b, R1_ASSISTANT);
                CONTENTS(a);
                tkv_buf_adds(&R.b, R1_EOS);
            }
        }
        if (add_generation_prompt) tkv_buf_adds(&R.b, R1_ASSISTANT "<think>\n");
    } else if (t->kind == CHAT_LLAMA3) {
        size_t bn;
        const char *bt = bos_text(v, "<|begin_of_text|>", &bn);
        tkv_buf_add(&R.b, bt, bn);
        for (int i = 0; i < n; i++) llama3_turn(&R, msgs[i].role, msgs[i].content);
        if (add_generation_prompt) tkv_buf_adds(&R.b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else if (t->kind == CHAT_LLAMA31) {
        render_llama31(&R, t, v, msgs, n, tools, add_generation_prompt);
    } else if (t->kind == CHAT_QWEN3) {
        render_qwen3(&R, t, msgs, n, tools, add_generation_prompt);
    }
#undef CONTENTS
    if (len) *len = R.b.n;
    if (n_lit) *n_lit = (int)R.n_rg;
    if (lit_out) *lit_out = R.rg ? R.rg : tkv_xcalloc(2, sizeof *R.rg);
    else free(R.rg);
    return R.b.p;
}

int chat_encode(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n, const chat_tools *tools,
                int add_generation_prompt, int32_t **ids) {
    size_t len, *lit;
    int n_lit;
    char *s = chat_render(t, v, msgs, n, tools, add_generation_prompt, &len, &lit, &n_lit);
    /* sized by the encoder: an invalid byte alone can become three ids (U+FFFD) */
    int k = tok_encode_alloc(v, s, len, TOK_PARSE_SPECIAL, lit, n_lit, ids);
    free(s);
    free(lit);
    return k;
}
