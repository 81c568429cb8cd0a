/* err.h — the error convention of every module.
 * A function that can fail on bad input or environment returns int (0 ok, nonzero error) and takes
 * (char *err, size_t errlen); it writes one line naming the problem. Broken invariants use TKV_ASSERT,
 * which prints file:line and aborts. Library code never calls exit(). */
#ifndef TKV_ERR_H
#define TKV_ERR_H
#include <stddef.h>

/* Writes a formatted message into err (if err and errlen > 0) and returns -1. */
int tkv_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void tkv_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define TKV_ASSERT(e) ((e) ? (void)0 : tkv_assert_fail(#e, __FILE__, __LINE__))

/* Allocation that aborts on failure: only for sizes the program chose, never for sizes read
 * from a file (those are checked first and fail with an error). */
void *tkv_xmalloc(size_t n);
void *tkv_xcalloc(size_t n, size_t size);
void *tkv_xrealloc(void *p, size_t n);
void *tkv_xaligned(size_t align, size_t n); /* zeroed; free with free() */

#endif
