/* prefix.c — the prefix cache (see prefix.h). Entries are few (a handful), so lookups are a
 * linear scan over them, token by token. Invariant: every entry's sequence is live and holds
 * exactly its n tokens. */
#include "sched/prefix.h"
#include "sched/ids.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void prefix_init(prefix_cache *c, int cap, int min_len) {
    memset(c, 0, sizeof *c);
    c->cap = cap > 0 ? cap : 0;
    c->min_len = min_len > 1 ? min_len : 1;
    if (c->cap) c->e = tkv_xcalloc((size_t)c->cap, sizeof *c->e);
}

static void drop(prefix_cache *c, tkv_session *s, int i) {
    tkv_seq_close(s, c->e[i].seq);
    free(c->e[i].tokens);
    c->e[i] = c->e[--c->n];
}

void prefix_free(prefix_cache *c, tkv_session *s) {
    while (c->n) drop(c, s, c->n - 1);
    free(c->e);
    memset(c, 0, sizeof *c);
}

int prefix_lookup(const prefix_cache *c, const int32_t *prompt, int n, uint64_t salt, int *lcp) {
    int best = -1, best_l = 0;
    for (int i = 0; i < c->n; i++) {
        const prefix_entry *e = &c->e[i];
        if (e->salt != salt) continue;
        int l = sched_ids_lcp(e->tokens, e->n, prompt, n - 1);
        if (l > best_l || (l == best_l && best >= 0 && l > 0 && e->n < c->e[best].n)) best = i, best_l = l;
    }
    if (best_l < c->min_len) best = -1, best_l = 0;
    *lcp = best_l;
    return best;
}

/* The entry to give up for a new one: the least recently used seed, else the least recently used. */
static int victim(const prefix_cache *c) {
    int v = -1;
    for (int pass = 0; pass < 2 && v < 0; pass++)
        for (int i = 0; i < c->n; i++)
            if ((pass || c->e[i].seed) && (v < 0 || c->e[i].used < c->e[v].used)) v = i;
    return v;
}

/* A new entry holding prompt[0..n) of live sequence `from`. */
static void insert(prefix_cache *c, tkv_session *s, int from, const int32_t *prompt, int n, int seed, uint64_t salt) {
    if (c->n == c->cap) drop(c, s, victim(c));
    int seq;
    if (tkv_seq_open(s, n, n, &seq, NULL, 0)) return;
    if (tkv_seq_share_prefix(s, from, seq, n, NULL, 0)) { tkv_seq_close(s, seq); return; }
    prefix_entry *e = &c->e[c->n++];
    e->seq = seq;
    e->n = n;
    e->tokens = tkv_xmalloc((size_t)n * sizeof(int32_t));
    memcpy(e->tokens, prompt, (size_t)n * sizeof(int32_t));
    e->used = ++c->tick;
    e->seed = seed;
    e->salt = salt;
}

void prefix_update(prefix_cache *c, tkv_session *s, int hit, int lcp, int seq, const int32_t *prompt, int n, uint64_t salt) {
    if (!c->cap) return;
    if (hit < 0) {
        c->misses++;
        if (n > c->min_len) insert(c, s, seq, prompt, n, 1, salt);
        return;
    }
    c->hits++;
    prefix_entry *e = &c->e[hit];
    e->used = ++c->tick;
    if (lcp != e->n) {
        if (e->seed) drop(c, s, hit); /* its tail was one job's own: keep the part found shared */
        insert(c, s, seq, prompt, lcp, 0, salt);
    }
    /* a prompt that goes on past what it found may itself begin later prompts (the chains of one
     * problem, the n choices of one request, after a shared system turn): a seed of its own */
    if (n - 1 > lcp && n > c->min_len) insert(c, s, seq, prompt, n, 1, salt);
}

int prefix_evict(prefix_cache *c, tkv_session *s) {
    if (!c->n) return -1;
    int v = 0;
    for (int i = 1; i < c->n; i++)
        if (c->e[i].used < c->e[v].used) v = i;
    drop(c, s, v);
    c->evictions++;
    return 0;
}

int64_t prefix_tokens(const prefix_cache *c) {
    int64_t t = 0;
    for (int i = 0; i < c->n; i++) t += c->e[i].n;
    return t;
}
