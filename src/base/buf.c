/* buf.c — the growable buffer (see buf.h). */
#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void tkv_buf_reserve(tkv_buf *b, size_t more) {
    TKV_ASSERT(more < ((size_t)1 << 40) && b->n < ((size_t)1 << 40));
    if (b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    TKV_ASSERT(p);
    b->p = p;
    b->cap = cap;
}

void tkv_buf_add(tkv_buf *b, const void *s, size_t n) {
    tkv_buf_reserve(b, n);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tkv_buf_adds(tkv_buf *b, const char *s) { tkv_buf_add(b, s, strlen(s)); }

void tkv_buf_addc(tkv_buf *b, char c) { tkv_buf_add(b, &c, 1); }

void tkv_buf_le(tkv_buf *b, uint64_t v, int k) {
    TKV_ASSERT(k >= 1 && k <= 8);
    uint8_t t[8];
    for (int i = 0; i < k; i++) t[i] = (uint8_t)(v >> (8 * i));
    tkv_buf_add(b, t, (size_t)k);
}

void tkv_buf_printf(tkv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    TKV_ASSERT(k >= 0);
    tkv_buf_reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

const char *tkv_buf_str(const tkv_buf *b) { return b->p ? b->p : ""; }

char *tkv_buf_take(tkv_buf *b) {
    if (!b->p) tkv_buf_add(b, "", 0);
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

void tkv_buf_free(tkv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
