/* conv.h — kept conversations: when a job ends, its sequence (prompt and generated tokens, in every
 * tier, with their scores) stays in the session as an entry instead of being freed, idle
 * (tkv_seq_idle: out of T0 for the policies with T1), and a later job whose prompt begins with an
 * entry's tokens takes the entry over (tkv_seq_take) and prefills only the rest: a conversation's
 * next turn, or a regenerated answer, without recomputing what came before.
 *
 * Rules: the match is token by token over what the sequence holds (the job's last sampled token was
 * never decoded, so an entry ends before it); a job takes at most n_prompt - 1 tokens (its last one is
 * prefilled to give its first logits) and at least min_len; ties go to the most recently kept. A job
 * that would continue only part of an entry takes it over only when that gains at least what it
 * gives up beside what the prefix cache shares (two clients with one system prompt keep their own). An
 * entry is taken by one job and leaves the cache then: a second job on the same conversation at the
 * same time finds nothing and prefills. Entries carry the job's salt: only a job of the same salt
 * matches (isolation between users or tenants). Bounds: at most `cap` entries and `max_bytes` of rows
 * (every tier; 0: no byte bound): beyond the bytes, the least recently used entry not compressed yet
 * has its T1 rows moved to T2 first (policies with T2: the int8 or 4-bit codec, half or a quarter of
 * the bytes), then the least recently used are given up (counted); whenever a
 * job is refused for room the scheduler drops entries too, least recently used first. With a park
 * store (park.h) an entry given up so is parked there instead, and every entry is at conv_free.
 * Not done here: admission and the prefix cache (sched.c, prefix.c). */
#ifndef TKV_SCHED_CONV_H
#define TKV_SCHED_CONV_H
#include <stdint.h>

#include "tierkv.h"

typedef struct {
    int seq;          /* the session's sequence holding tokens[0..n), idle */
    int32_t *tokens;
    int n;
    int n_prompt;     /* the first n_prompt were its job's prompt (the rest, the answer) */
    uint64_t salt;
    uint64_t used;    /* LRU clock */
    int64_t bytes;    /* its rows in every tier (when it was kept, or compressed) */
    int compressed;   /* 1: its T1 rows went to T2 to stay within the bytes bound */
} conv_entry;

struct park_index;

typedef struct {
    conv_entry *e;    /* [cap] */
    struct park_index *park; /* where entries beyond the bounds (and all at conv_free) go; NULL: dropped */
    int n, cap;
    int min_len;
    int64_t max_bytes;
    uint64_t tick;
    int64_t kept, hits, misses, reused, drops, compressed;
} conv_cache;

void conv_init(conv_cache *c, int cap, int min_len, int64_t max_bytes);
void conv_free(conv_cache *c, tkv_session *s); /* closes every entry's sequence */
/* The entry whose tokens prompt[0..n) continues the furthest (at most n - 1 of them, at least
 * min_len), of this salt and worth taking over beside `floor` ids shared otherwise (ids.h,
 * sched_take_worth), or -1; the count in *lcp. */
int conv_lookup(const conv_cache *c, const int32_t *prompt, int n, uint64_t salt, int floor, int *lcp);
/* Clients send an answer back as text, and tokenising it again need not give the ids that were
 * generated. When prompt[0..n) leaves an entry of this salt at token l (< the entry's n) but the
 * entry's remaining ids spell the same bytes as prompt[l..k) (pieces with special tokens as text),
 * the prompt is rewritten as the entry's ids followed by prompt[k..n), so that it continues the whole
 * entry; the best such entry (the most tokens reused) wins, and only when no entry is continued as
 * it stands by at least as many. With close, a reasoning format's close marker (keep mode), the
 * entry's remaining ids may begin with a reasoning block the client's transcript stripped (up to the
 * marker and the whitespace after it): it is kept, and [*stale_from, *stale_to) says where it lies
 * in the new prompt (empty when nothing was skipped). Returns the new count with the malloc'd ids in
 * *out, or 0. */
int conv_splice(const conv_cache *c, const tkv_model *m, const int32_t *prompt, int n, uint64_t salt, const char *close,
                int32_t **out, int *stale_from, int *stale_to);
/* Keeps sequence seq (holding tokens[0..n)) as an entry: idles it and drops entries beyond the
 * bounds. Takes the sequence in every case (closes it when it cannot be kept). */
void conv_keep(conv_cache *c, tkv_session *s, int seq, const int32_t *tokens, int n, int n_prompt, uint64_t salt);
/* Removes entry i from the cache and returns its sequence (the caller takes it over or closes it). */
int conv_take(conv_cache *c, int i);
/* Closes the least recently used entry other than `keep_seq`'s; 0, or -1 when there is none. */
int conv_evict(conv_cache *c, tkv_session *s, int keep_seq);

#endif
