/* prefix.h — the scheduler's prefix cache: a few sequences of the session that hold prompt
 * prefixes, so that a job whose prompt begins with the same tokens (a system prompt, a few-shot
 * block, the template's header) shares their K/V rows (tkv_seq_share_prefix) instead of
 * prefilling them.
 *
 * Entries: a *seed* is the whole prompt of a job that found nothing, or that goes on past what it
 * found (it may begin a prefix later jobs share: the chains of one problem after a shared system
 * turn); when a job shares only part of an entry, that common part becomes an *established* entry
 * (replacing the entry when it was a seed). The match is token by token, so it does not
 * depend on the chat template; a job shares at most n_prompt - 1 tokens (its last one is
 * prefilled to give its first logits).
 *
 * Cost and bound: each entry is one live sequence (a session slot) holding its tokens as prompt,
 * so they count in T0 once (shared rows are held once by the session). At most `cap` entries;
 * when the cache is full a new entry replaces the least recently used seed, else the least
 * recently used entry; and whenever a job is refused for room (TKV_EFULL) entries are closed, least
 * recently used first, before the job waits: the cache only holds T0 no job is asking for.
 * Not done here: admission (sched.c). */
#ifndef TKV_SCHED_PREFIX_H
#define TKV_SCHED_PREFIX_H
#include <stdint.h>

#include "tierkv.h"

typedef struct {
    int seq;         /* the session's sequence holding tokens[0..n) */
    int32_t *tokens;
    int n;
    uint64_t used;   /* LRU clock */
    int seed;        /* 1: a whole prompt not yet known to be shared */
    uint64_t salt;   /* only jobs of the same salt share it */
} prefix_entry;

typedef struct {
    prefix_entry *e; /* [cap] */
    int n, cap;
    int min_len;
    uint64_t tick;
    int64_t hits, misses, evictions;
} prefix_cache;

void prefix_init(prefix_cache *c, int cap, int min_len);
void prefix_free(prefix_cache *c, tkv_session *s); /* closes every entry's sequence */
/* The entry of this salt sharing the most leading tokens with prompt[0..n) (at most n - 1, at least
 * min_len; ties to the shorter entry), or -1; the count in *lcp. */
int prefix_lookup(const prefix_cache *c, const int32_t *prompt, int n, uint64_t salt, int *lcp);
/* After a job's prefill (its sequence `seq` holds prompt[0..n)): counts the hit or miss and keeps
 * the entries as described above. Failures (no room for an entry) are silent: the cache is an
 * optimisation only. */
void prefix_update(prefix_cache *c, tkv_session *s, int hit, int lcp, int seq, const int32_t *prompt, int n, uint64_t salt);
/* Closes one entry (the least recently used); 0, or -1 when there is none. */
int prefix_evict(prefix_cache *c, tkv_session *s);
int64_t prefix_tokens(const prefix_cache *c);

#endif
