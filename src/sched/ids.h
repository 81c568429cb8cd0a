/* ids.h — the one comparison the scheduler's caches make: how many leading token ids two arrays
 * share. */
#ifndef TKV_SCHED_IDS_H
#define TKV_SCHED_IDS_H
#include <stdint.h>

#include "base/version.h"

/* The count of leading ids a[0..na) and b[0..nb) share. */
static inline int sched_ids_lcp(const int32_t *a, int na, const int32_t *b, int nb) {
    int m = na < nb ? na : nb, l = 0;
    while (l < m && a[l] == b[l]) l++;
    return l;
}

/* The hash of a salt and token ids, each little-endian (FNV-1a, base/version.h): sched_ids_hash_salt
 * begins it, sched_ids_hash_more continues it over n more ids; the key of a parked record (park.c) and
 * the prefix hashes of a shared store's index (serve/park_redis.c) are the same stream. */
static inline uint64_t sched_ids_hash_salt(uint64_t salt) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(salt >> (8 * i));
    return tkv_fnv1a64_more(TKV_FNV1A64_INIT, b, 8);
}
static inline uint64_t sched_ids_hash_more(uint64_t h, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)ids[i];
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        h = tkv_fnv1a64_more(h, b, 4);
    }
    return h;
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
