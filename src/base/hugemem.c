/* hugemem.c — see hugemem.h. The mapping is over-allocated by one huge page and trimmed, because
 * mmap only promises 4 KiB alignment and huge pages need 2 MiB-aligned ranges. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "base/hugemem.h"

void *tkv_huge_alloc(size_t n, size_t *len) {
    size_t L = (n + TKV_HUGE_PAGE - 1) & ~(TKV_HUGE_PAGE - 1);
    if (L < n || L + TKV_HUGE_PAGE < L) return NULL;
    if (L == 0) L = TKV_HUGE_PAGE;
    uint8_t *raw = mmap(NULL, L + TKV_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)raw + TKV_HUGE_PAGE - 1) & ~(uintptr_t)(TKV_HUGE_PAGE - 1));
    size_t head = (size_t)(a - raw), tail = TKV_HUGE_PAGE - head;
    if (head) munmap(raw, head);
    if (tail) munmap(a + L, tail);
    (void)madvise(a, L, MADV_HUGEPAGE); /* advice only: without huge pages the memory still works */
    *len = L;
    return a;
}

void tkv_huge_free(void *p, size_t len) {
    if (p) munmap(p, len);
}

int tkv_huge_allowed(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return 0;
    char buf[128];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return n > 0 && !strstr(buf, "[never]");
}
