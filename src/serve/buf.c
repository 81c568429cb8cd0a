/* buf.c — the growable byte buffer (see buf.h). */
#include "serve/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static void reserve(serve_buf *b, size_t more) {
    TKV_ASSERT(more < ((size_t)1 << 40) && b->n < ((size_t)1 << 40));
    if (b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    TKV_ASSERT(p);
    b->p = p;
    b->cap = cap;
}

void serve_buf_add(serve_buf *b, const char *s, size_t n) {
    reserve(b, n);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void serve_buf_adds(serve_buf *b, const char *s) { serve_buf_add(b, s, strlen(s)); }

void serve_buf_printf(serve_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    TKV_ASSERT(k >= 0);
    reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void serve_buf_free(serve_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

const char *serve_buf_str(const serve_buf *b) { return b->p ? b->p : ""; }
