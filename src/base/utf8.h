/* utf8.h — strict UTF-8: the length of one valid sequence (no overlongs, surrogates or code points
 * past U+10FFFF), for the readers that check text from outside (GGUF names, server output). */
#ifndef TKV_UTF8_H
#define TKV_UTF8_H
#include <stddef.h>

#include "base/buf.h"

/* Length (1..4) of the valid UTF-8 sequence at p[0..n), n >= 1; 0 if it is not one. */
size_t tkv_utf8_seq(const unsigned char *p, size_t n);
/* p[0..n) read as text: each byte that is not part of a valid sequence (a NUL too) stands for one
 * U+FFFD. Returns the characters; *bad (when not NULL) the bytes replaced; with out, the text so
 * repaired is appended to it. */
size_t tkv_utf8_repair(const char *p, size_t n, tkv_buf *out, size_t *bad);

#endif
