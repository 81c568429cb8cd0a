/* chat.h - chat prompt formats (FORMATS.md 6): Qwen2/2.5 ChatML (with Qwen2.5's tool calls when the
 * file's template has them), DeepSeek-R1 (assistant turn opens with "<think>\n"), Llama 3, Llama
 * 3.1 (also 3.2 and 3.3: the system header's dates, tools in the first user turn, one JSON call per
 * assistant turn, results as ipython turns) and Qwen3 (ChatML with tool calls, reasoning kept only
 * after the last user query, and the enable_thinking switch). The format is recognised from the GGUF
 * tokenizer.chat_template by the substring tests llama.cpp uses (Qwen3's and Llama 3.1's own before
 * them: llama.cpp reads them as ChatML and Llama 3), or chosen by name. No Jinja: each format is
 * written out in C and reproduces the official template's output (with the Qwen default system
 * prompt read from the file).
 * The rendered text already holds BOS where the template has it: encode it with chat_encode (or
 * tok_encode with TOK_PARSE_SPECIAL and without TOK_ADD_SPECIAL), never adding a second BOS. */
#ifndef TKV_CHAT_H
#define TKV_CHAT_H
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/tokenizer.h"

typedef enum { CHAT_UNKNOWN = 0, CHAT_CHATML, CHAT_DEEPSEEK_R1, CHAT_LLAMA3, CHAT_QWEN3, CHAT_LLAMA31, CHAT_KINDS } chat_kind;

/* One past tool call: the tool's name (written as it is) and its arguments as JSON text the way
 * the template's `tojson` writes them (Python's json.dumps: ", " and ": ", non-ASCII as is). */
typedef struct {
    const char *name;
    const char *arguments;
} chat_call;

typedef struct {
    const char *role;    /* "system", "user", "assistant" or "tool" (formats with tools) */
    const char *content; /* UTF-8, NUL-terminated ("" for an assistant turn of tool calls alone) */
    const chat_call *tool_calls; /* assistant: its calls (each format writes them its own way) */
    int n_tool_calls;
    const char *reasoning_content; /* assistant, Qwen3: its reasoning; NULL: none given (the template then
                                      reads a <think> block out of content); other formats ignore it */
} chat_msg;

/* Tool definitions, each as Python's json.dumps writes it (`tool | tojson`: {"type": "function", ...});
 * a format that writes them with tojson(indent=N) lays this text out again (json_add_indented). */
typedef struct {
    const char *const *defs;
    int n;
} chat_tools;

typedef struct {
    chat_kind kind;
    char default_system[512]; /* ChatML: system prompt used when no message has role "system"; "" none */
    int tools;                /* 1: tools and calls (Qwen3's, Llama 3.1's, or the file's template is
                                 Qwen2.5's with them: <tools>, <tool_call>) */
    int tools_braces;         /* its instruction writes the call as {{"name": ...}} (Qwen2.5-Coder's files) */
    int think_off;            /* Qwen3's enable_thinking=false: the generation prompt holds an empty think
                                 block (0, the default: thinking on); only for a format with the switch */
    int date_now;             /* Llama 3.1 family: the template asks strftime_now for "Today Date" (3.2's):
                                 the day of each render, local time, as Hugging Face's renderer gives it */
    char date[24];            /* Llama 3.1 family: "Today Date" as given ("" : the above, or else the
                                 template's own default, 26 Jul 2024) */
} chat_template;

/* The format a Jinja template string stands for; CHAT_UNKNOWN if none matches. */
chat_kind chat_detect(const char *tmpl, size_t len);
/* "chatml", "deepseek-r1" (also "deepseek3"), "llama3", "llama3.1", "qwen3" -> kind; CHAT_UNKNOWN otherwise. */
chat_kind chat_by_name(const char *name);
const char *chat_name(chat_kind k);

/* Picks the template of a model: the format named by `name` if non-NULL, else the one detected from
 * tokenizer.chat_template. Fails with a message (naming the choices) when neither gives a format. */
int chat_template_from_gguf(const gguf_file *f, const char *name, chat_template *t, char *err, size_t errlen);
/* A template of the given kind with its built-in default system prompt (Qwen2.5's for ChatML); Qwen3's
 * and Llama 3.1's with their tools, thinking on. */
void chat_template_init(chat_template *t, chat_kind kind);
/* How the format writes a call: the key of its arguments ("arguments"; Llama 3.1's "parameters"),
 * and the calls one assistant message may hold (0: any; Llama 3.1: 1). */
const char *chat_call_key(chat_kind k);
int chat_max_calls(chat_kind k);
/* What the format's template refuses (it raises): Llama 3.1 with tools and no message after the
 * system message to carry them, an assistant message with more calls than chat_max_calls. 0, or
 * -1 with a message naming messages[i]. chat_render writes such messages anyway (the first call
 * only; an empty first user turn), so that it never fails. */
int chat_check(const chat_template *t, const chat_msg *msgs, int n, const chat_tools *tools, char *err, size_t errlen);
/* 1 when the format has a thinking switch (think_off may be set): Qwen3's enable_thinking. */
int chat_think_switch(chat_kind k);

/* Who writes the open marker of a reasoning block, given the template (think_off included). */
typedef enum {
    CHAT_THINK_NONE,          /* a format without reasoning markers */
    CHAT_THINK_MODEL_OPENS,   /* the model writes "<think>" itself (Qwen3, thinking on) */
    CHAT_THINK_PROMPT_OPENS,  /* the generation prompt ends inside the block (DeepSeek-R1's "<think>\n") */
    CHAT_THINK_PROMPT_CLOSED, /* the generation prompt holds a closed, empty block (Qwen3, thinking off):
                                 everything generated is answer */
} chat_think;
/* The format's markers ("<think>", "</think>"; NULL for CHAT_THINK_NONE) and who opens the block. */
chat_think chat_reasoning(const chat_template *t, const char **open, const char **close);

/* Renders the prompt into a malloc'd NUL-terminated string. v supplies the BOS text (may be NULL:
 * the usual text is used). tools (NULL or none: no tools) only with t->tools. With lit != NULL,
 * *lit receives a malloc'd array of 2 * *n_lit byte offsets: the [start, end) of each piece of the
 * callers' text in the output (contents, tool definitions and calls, also as a format re-encodes
 * them: Llama 3.1's tool results as JSON strings, its definitions indented; for tok_encode_protected). */
char *chat_render(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n, const chat_tools *tools,
                  int add_generation_prompt, size_t *len, size_t **lit, int *n_lit);

/* Renders and encodes: special tokens of the template are parsed, those typed inside a message stay
 * text. Returns the number of ids in the malloc'd *ids (any bytes in the messages: the buffer is
 * sized by the encoder), or -1 with *ids NULL when the prompt is over TOK_MAX_TEXT bytes. */
int chat_encode(const chat_template *t, const tok_vocab *v, const chat_msg *msgs, int n, const chat_tools *tools,
                int add_generation_prompt, int32_t **ids);

#endif
