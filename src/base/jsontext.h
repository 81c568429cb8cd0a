/* jsontext.h — JSON text written as Python's json.dumps writes it, for the chat templates' `tojson`
 * (src/model/chat.c) and the server (src/serve/tools.c): a string literal, and a value's text laid
 * out again with an indent. Apart from json.h so that code speaking JSON through jansson (whose
 * names json.h's types would clash with) can use it too. Numbers are not written here: the server
 * writes Python's repr of a float itself (serve_pyjson). */
#ifndef TKV_BASE_JSONTEXT_H
#define TKV_BASE_JSONTEXT_H
#include <stddef.h>

#include "base/buf.h"

/* Escapes s[0..len) as a JSON string literal with quotes into dst (snprintf-like: writes at most
 * cap bytes incl. NUL, returns the length the full literal needs): ", \ and control characters
 * escaped (\n, \t ... or \u00XX), non-ASCII UTF-8 kept as is, each invalid byte \ufffd. For valid
 * UTF-8 this is Python's json.dumps(s, ensure_ascii=False). */
size_t json_escape(char *dst, size_t cap, const char *s, size_t len);
/* The same literal appended to b. */
void json_add_str(tkv_buf *b, const char *s, size_t len);
/* JSON text s[0..len) laid out again as Python's json.dumps(x, indent=indent) writes it: each member
 * and element on a line of its own, indent spaces a level deeper, "," at a line's end and ": " after
 * a key, empty containers as {} and []. Strings, numbers and literals are copied as they are (given
 * text that Python's json.dumps wrote, the result is what it writes with the indent); blanks between
 * tokens are dropped. Text that is not JSON is copied token by token, never read past len. */
void json_add_indented(tkv_buf *b, const char *s, size_t len, int indent);

#endif
