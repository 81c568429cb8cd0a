/* t_chat.h — a chat renderer against a committed Jinja template (one of tests/data), byte for byte:
 * the conversation written as tests/chat_jinja.py reads it, rendered there by jinja2 with Hugging
 * Face's conventions, and compared with chat_render's text; and a template as a GGUF file's
 * tokenizer.chat_template, for the detection tests. Used by test_chat_qwen3.c and test_chat_llama31.c. */
#ifndef TKV_T_CHAT_H
#define TKV_T_CHAT_H
#include <stddef.h>

#include "gguf/gguf.h"
#include "model/chat.h"

/* What the template does with the conversation. think: -1 not given to the template, 1 or 0 its
 * enable_thinking; bos: the template's bos_token (NULL: not given); today: what strftime_now returns
 * (NULL: the renderer has no strftime_now). */
enum { T_CHAT_SKIPPED = 0, T_CHAT_RENDERED, T_CHAT_RAISES, T_CHAT_FAILED };
int t_chat_jinja(const char *template_path, const char *tag, const chat_msg *m, int n, const chat_tools *tools, int think,
                 const char *bos, const char *today, int gen, char **text);
/* Our text for the conversation equals the template's (a failed check says where they part); a
 * t->date given is the template's strftime_now.
 * Returns 1 when compared, 0 when skipped (jinja2 missing: the test is marked skipped) or failed. */
int t_chat_same(const char *template_path, const char *tag, const chat_template *t, const chat_msg *m, int n,
                const chat_tools *tools, int think, const char *bos, int gen);
/* The template a GGUF file holding text as tokenizer.chat_template (and nothing else) gives
 * chat_template_from_gguf, with no name: 0, or -1 when the file cannot be made or read or no format
 * is recognised. */
int t_chat_template_of(const char *text, chat_template *t);

#endif
