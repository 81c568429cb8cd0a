/* pystr.h — Python str semantics in C, for porting the reference graders line by line.
 * The graders in GRADING.md are Python; their results depend on exactly how str.replace,
 * split, strip and `re` behave. These helpers reproduce those behaviours on NUL-terminated UTF-8.
 * Ownership: functions named ps_*_take consume their first argument and return a new heap string
 * (so `s = ps_replace_take(s, a, b)` reads like Python); the others do not consume.
 * Unicode: lengths and single-"character" operations work on code points. \w and whitespace use
 * Python's classes for ASCII and a documented approximation beyond it (ps_is_word); \d is ASCII. */
#ifndef TKV_EVAL_PYSTR_H
#define TKV_EVAL_PYSTR_H
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h" /* tkv_buf: the growable strings the helpers build */

char *ps_dup(const char *s);
char *ps_ndup(const char *s, size_t n);
/* Decodes the code point at s[*i] and advances *i; an invalid byte decodes as 0xDC00+byte (1 byte). */
uint32_t ps_next(const char *s, size_t *i);
size_t ps_cplen(const char *s); /* len() in code points */
int ps_is_space(uint32_t cp);   /* str.isspace() */
int ps_is_word(uint32_t cp);    /* re \w: ASCII alnum, '_', and non-ASCII letters/digits (approx.) */
int ps_is_digit(uint32_t cp);   /* ASCII 0-9 */

int ps_contains(const char *s, const char *sub);
int ps_startswith(const char *s, const char *pre);
int ps_endswith(const char *s, const char *suf);
size_t ps_count(const char *s, const char *sub); /* non-overlapping, as str.count */

char *ps_replace_take(char *s, const char *from, const char *to);
char *ps_strip_take(char *s);                                  /* str.strip() */
/* str.strip(chars)/lstrip/rstrip with an ASCII set; which: 1 left, 2 right, 3 both */
char *ps_strip_chars_take(char *s, const char *chars, int which);
char *ps_lower_take(char *s); /* ASCII lower-casing; other bytes unchanged */

/* Splits on sep (non-empty) like str.split(sep): returns n >= 1 parts, each a heap string; free
 * with ps_free_parts. */
char **ps_split(const char *s, const char *sep, size_t *n);
void ps_free_parts(char **parts, size_t n);
/* The part after the last occurrence of sep (the whole string if none) == s.split(sep)[-1]. */
char *ps_after_last(const char *s, const char *sep);

/* Python's int(x) == canonical form: is s exactly the str() of some int? ("-0", "07", "+1": no) */
int ps_is_canonical_int(const char *s);
/* Python float(s) for the forms float() accepts (whitespace, sign, digits with '_' separators,
 * '.', exponent, inf/infinity/nan). Returns 1 and sets *out on success. */
int ps_parse_float(const char *s, double *out);
/* str(x) for a Python float (repr: shortest round-trip, "1.0", "1e+16"). */
void ps_float_repr(double x, char *buf, size_t cap);

#endif
