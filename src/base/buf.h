/* buf.h — the growable buffer of bytes or text, one for the whole program: the server's JSON and
 * text, the graders' strings, the GGUF writer's records and mutate-gguf's edits.
 * Owns its bytes; grows by doubling; always NUL-terminated after the first append, so text users
 * read `p` as a C string and byte users read `u`. Allocation failure aborts: the sizes are the
 * program's own (inputs are bounded before they get here). Zero-initialised is empty. */
#ifndef TKV_BASE_BUF_H
#define TKV_BASE_BUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    union {
        char *p;    /* as text: NULL until the first append; p[n] == 0 after */
        uint8_t *u; /* the same bytes, unsigned */
    };
    size_t n;   /* bytes held */
    size_t cap; /* bytes allocated */
} tkv_buf;

/* Room for `more` bytes and a NUL after the n held: the caller writes at p + n, then adds to n. */
void tkv_buf_reserve(tkv_buf *b, size_t more);
void tkv_buf_add(tkv_buf *b, const void *s, size_t n);
void tkv_buf_adds(tkv_buf *b, const char *s);
void tkv_buf_addc(tkv_buf *b, char c);
void tkv_buf_le(tkv_buf *b, uint64_t v, int k); /* v as k bytes (1..8), little-endian */
void tkv_buf_printf(tkv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The bytes as a C string ("" when empty), still owned by b. */
const char *tkv_buf_str(const tkv_buf *b);
/* The bytes as a heap C string (never NULL), now the caller's; b is left empty. */
char *tkv_buf_take(tkv_buf *b);
void tkv_buf_free(tkv_buf *b);

#endif
