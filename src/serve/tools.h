/* tools.h — tool calls for the chat endpoint (Qwen2.5's, Qwen3's and Llama 3.1's formats, with the
 * chat templates of src/model/chat.c): the request's tools and an assistant's past calls' arguments
 * written as the template's `tojson` writes them (Python's json.dumps: ", " and ": " separators,
 * non-ASCII as is), and the calls read back out of the generated text:
 * <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks, or, as llama.cpp also reads them,
 * bare {"name": ..., "arguments": ...} objects naming a declared tool, alone or in a ```json fence
 * (small Qwen2.5 models often drop the tags), "parameters" (Llama 3.1's key) read as "arguments", and
 * a leading <|python_tag|> (Llama 3.1's) passed over. While a stream runs, serve_tools_visible says how
 * much of the text cannot turn out to be part of a call. Not done here: HTTP and the request's other
 * fields (request.c), the answer's JSON (response.c). */
#ifndef TKV_SERVE_TOOLS_H
#define TKV_SERVE_TOOLS_H
#include <jansson.h>
#include <stddef.h>

#include "serve/request.h"

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (malloc'd). */
char *serve_pyjson(const json_t *v);

/* The request's "tools": an array of {"type": "function", "function": {"name", "description"?,
 * "parameters"?}}; each written with serve_pyjson into r->tools, its name into r->tool_names. */
int serve_tools_parse(const json_t *tools, serve_request *r, serve_error *e);
/* An assistant's past call {"type": "function", "function": {"name", "arguments"}}: its name, and
 * the "arguments" string read as JSON written with serve_pyjson (the string itself, quoted, when it
 * is not JSON; {} when absent), as the templates take it. *out zeroed on failure. */
int serve_tool_call_read(const json_t *call, const char *field, serve_tool_call *out, serve_error *e);

typedef struct {
    serve_tool_call *v;
    int n;
    size_t content_len; /* the text before the calls, trailing blanks cut: what the answer keeps as content */
} serve_tool_calls;

/* The calls in the generated text[0..n) (0 and out->n == 0 when there are none, or when any block
 * does not read as a call: then the whole text is content). names: the declared tools. */
int serve_tools_extract(const char *text, size_t n, char *const *names, int n_names, int parallel, serve_tool_calls *out);
void serve_tool_calls_free(serve_tool_calls *c);
/* How much of text[0..n), still growing, a stream may send: not from a "<tool_call>" (or a part of
 * one at the end) on, nothing while the text is blank or opens with "{", "```" or "<|python_tag|>"
 * (so a reply that opens with a code block comes whole at its end), no trailing blanks. */
size_t serve_tools_visible(const char *text, size_t n);
#endif
