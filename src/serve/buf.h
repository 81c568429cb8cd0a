/* buf.h — a growable byte buffer (always NUL-terminated) for the server's text and JSON.
 * Owns its bytes; grows by doubling; allocation failure aborts (sizes are the program's own:
 * bodies and outputs are bounded by the server's limits before they get here). */
#ifndef TKV_SERVE_BUF_H
#define TKV_SERVE_BUF_H
#include <stddef.h>

typedef struct {
    char *p;    /* NULL until the first append; p[n] == 0 after */
    size_t n;   /* bytes held */
    size_t cap; /* bytes allocated */
} serve_buf;

void serve_buf_add(serve_buf *b, const char *s, size_t n);
void serve_buf_adds(serve_buf *b, const char *s);
void serve_buf_printf(serve_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void serve_buf_free(serve_buf *b);
/* The bytes as a C string ("" when empty), still owned by b. */
const char *serve_buf_str(const serve_buf *b);

#endif
