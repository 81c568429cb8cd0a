/* ids.h — the one comparison the scheduler's caches make: how many leading token ids two arrays
 * share. */
#ifndef TKV_SCHED_IDS_H
#define TKV_SCHED_IDS_H
#include <stdint.h>

/* The count of leading ids a[0..na) and b[0..nb) share. */
static inline int sched_ids_lcp(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = na < nb ? na : nb, l = 0;
    while (l < m && a[l] == b[l]) l++;
    return l;
}

#endif
