/* hugemem.h — anonymous memory for data streamed once per token (the weights; the bandwidth
 * probe): 2 MiB-aligned, a multiple of 2 MiB long, advised for transparent huge pages before it
 * is touched, so the kernel backs it with huge pages where it allows them and with 4 KiB pages
 * otherwise. Not for small or short-lived buffers. */
#ifndef TKV_HUGEMEM_H
#define TKV_HUGEMEM_H
#include <stddef.h>

#define TKV_HUGE_PAGE ((size_t)2 << 20)

/* Zeroed read-write memory of at least n bytes; *len receives the mapped length (pass it to
 * tkv_huge_free). NULL when the system refuses the mapping (errno set). */
void *tkv_huge_alloc(size_t n, size_t *len);
void tkv_huge_free(void *p, size_t len);
/* 1 unless the kernel reports transparent huge pages as never used (or has none). */
int tkv_huge_allowed(void);

#endif
