/* err.c — error messages, asserts and checked allocation (see err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tkv_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void tkv_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "tierkv: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

void *tkv_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "tierkv: out of memory allocating %zu bytes\n", n);
        abort();
    }
    return p;
}

void *tkv_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "tierkv: out of memory reallocating %zu bytes\n", n);
        abort();
    }
    return q;
}

void *tkv_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "tierkv: out of memory allocating %zu x %zu bytes\n", n, size);
        abort();
    }
    return p;
}

void *tkv_xaligned(size_t align, size_t n) {
    size_t rounded = (n + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (!p) {
        fprintf(stderr, "tierkv: out of memory allocating %zu bytes\n", n);
        abort();
    }
    memset(p, 0, rounded ? rounded : align);
    return p;
}
