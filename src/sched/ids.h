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

/* Whether a job that shares l leading ids with a kept conversation of n ids should take it over, when
 * `floor` of them could be shared without (the prefix cache). Always when it continues the whole
 * conversation. Part of one only when the job is the same conversation: it continues the
 * conversation's whole prompt but for its last few ids (a regenerated answer; a template that drops
 * the reasoning: the generation prompt's "<think>" differs), n_prompt its prompt's length (< 0:
 * unknown, then when it gains at least the n - l ids it gives up). Never another client's conversation
 * that shares only a system prompt with the job. */
enum { SCHED_TAKE_SLACK = 8 };
static inline int sched_take_worth(int l, int n, int n_prompt, int floor) {
    if (l <= floor) return 0;
    if (l == n) return 1;
    return n_prompt >= 0 ? l >= n_prompt - SCHED_TAKE_SLACK : l - floor >= n - l;
}

#endif
