/* conv.c — kept conversations (see conv.h). Entries are tens at most, so lookups scan them token by
 * token. Invariant: every entry's sequence is live, idle and holds exactly its n tokens. */
#include "sched/conv.h"
#include "sched/ids.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "sched/park.h"

void conv_init(conv_cache *c, int cap, int min_len, int64_t max_bytes) {
    memset(c, 0, sizeof *c);
    c->cap = cap > 0 ? cap : 0;
    c->min_len = min_len > 1 ? min_len : 1;
    c->max_bytes = max_bytes > 0 ? max_bytes : 0;
    if (c->cap) c->e = tkv_xcalloc((size_t)c->cap, sizeof *c->e);
}

static int lru(const conv_cache *c, int keep_seq) {
    int v = -1;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].seq != keep_seq && (v < 0 || c->e[i].used < c->e[v].used)) v = i;
    return v;
}

static void remove_at(conv_cache *c, int i) {
    free(c->e[i].tokens);
    c->e[i] = c->e[--c->n];
}

/* Gives entry i up: parked when there is a store (and it takes it), else dropped. */
static void drop(conv_cache *c, tkv_session *s, int i) {
    const conv_entry *e = &c->e[i];
    /* parked (a shared store has it already) or dropped */
    if (!c->park || (!park_write_through(c->park) && park_put(c->park, s, e->seq, e->tokens, e->n, e->salt))) c->drops++;
    tkv_seq_close(s, e->seq);
    remove_at(c, i);
}

void conv_free(conv_cache *c, tkv_session *s) {
    while (c->n) { /* parked, most recently used last (so it is the last a bound deletes) */
        int v = lru(c, -1);
        if (c->park && !park_write_through(c->park)) park_put(c->park, s, c->e[v].seq, c->e[v].tokens, c->e[v].n, c->e[v].salt);
        tkv_seq_close(s, c->e[v].seq);
        remove_at(c, v);
    }
    free(c->e);
    memset(c, 0, sizeof *c);
}

int conv_lookup(const conv_cache *c, const int32_t *prompt, int n, uint64_t salt, int floor, int *lcp) {
    int best = -1, best_l = 0;
    for (int i = 0; i < c->n; i++) {
        const conv_entry *e = &c->e[i];
        if (e->salt != salt) continue;
        int l = sched_ids_lcp(e->tokens, e->n, prompt, n - 1);
        if (!sched_take_worth(l, e->n, e->n_prompt, floor)) continue;
        if (l > best_l || (l == best_l && best >= 0 && l > 0 && e->used > c->e[best].used)) best = i, best_l = l;
    }
    if (best_l < c->min_len) best = -1, best_l = 0;
    *lcp = best_l;
    return best;
}

/* The end k of the run prompt[l..k) whose pieces spell the bytes of e's tokens from j on (special
 * tokens as their text), or -1. With a close marker (keep mode: the entry's reasoning stays in the
 * transcript the client stripped), the entry's tokens from l may first hold a reasoning block: the
 * bytes up to the marker and the whitespace after it, ending on a token boundary; then *j is where its
 * answer starts (the block is [l, *j)). Without one, or when the plain spelling matches, *j = l. */
static int spelled_to(const tkv_model *m, const conv_entry *e, int l, const char *close, const int32_t *prompt, int n,
                      int *j) {
    tkv_buf d = {0};
    size_t *at_tok = tkv_xmalloc(((size_t)(e->n - l) + 1) * sizeof *at_tok); /* byte offset of each token */
    const char *p;
    int k = -1;
    for (int i = l; i < e->n; i++) {
        at_tok[i - l] = d.n;
        int len = tkv_token_piece(m, e->tokens[i], 1, &p);
        if (len < 0) goto out;
        tkv_buf_add(&d, p, (size_t)len);
    }
    at_tok[e->n - l] = d.n;
    for (int pass = 0; pass < 2 && k < 0; pass++) {
        size_t from = 0;
        *j = l;
        if (pass == 1) { /* keep mode: skip the reasoning block */
            const char *mk = close && *close && d.n ? memmem(d.p, d.n, close, strlen(close)) : NULL;
            if (!mk) break;
            from = (size_t)(mk - d.p) + strlen(close);
            while (from < d.n && (d.p[from] == '\n' || d.p[from] == ' ' || d.p[from] == '\r' || d.p[from] == '\t')) from++;
            int t = 0;
            while (t <= e->n - l && at_tok[t] < from) t++;
            if (t > e->n - l || at_tok[t] != from) break; /* the answer does not begin on a token */
            *j = l + t;
        }
        size_t at = from;
        int kk = l;
        while (at < d.n && kk < n) {
            int len = tkv_token_piece(m, prompt[kk++], 1, &p);
            if (len < 0 || at + (size_t)len > d.n || memcmp(d.p + at, p, (size_t)len)) { kk = -1; break; }
            at += (size_t)len;
        }
        if (kk >= 0 && at == d.n) k = kk; /* else the prompt ended first, or differs */
    }
out:
    free(at_tok);
    tkv_buf_free(&d);
    return k;
}

int conv_splice(const conv_cache *c, const tkv_model *m, const int32_t *prompt, int n, uint64_t salt, const char *close,
                int32_t **out, int *stale_from, int *stale_to) {
    *out = NULL;
    *stale_from = *stale_to = 0;
    int best = -1, best_k = 0, best_l = 0, best_j = 0, plain = 0;
    for (int i = 0; i < c->n; i++) {
        const conv_entry *e = &c->e[i];
        if (e->salt != salt) continue;
        int l = sched_ids_lcp(e->tokens, e->n, prompt, n), j;
        if (l == e->n) { /* continued as it stands */
            if (l < n && l > plain) plain = l;
            continue;
        }
        if (l < c->min_len) continue;
        int k = spelled_to(m, e, l, close, prompt, n, &j);
        if (k < 0 || k >= n) continue; /* the job must prefill at least one token of its own */
        if (best < 0 || e->n > c->e[best].n) best = i, best_k = k, best_l = l, best_j = j;
    }
    if (best < 0 || c->e[best].n <= plain) return 0;
    const conv_entry *e = &c->e[best];
    int nn = e->n + (n - best_k);
    int32_t *ids = tkv_xmalloc((size_t)nn * sizeof(int32_t));
    memcpy(ids, e->tokens, (size_t)e->n * sizeof(int32_t));
    memcpy(ids + e->n, prompt + best_k, (size_t)(n - best_k) * sizeof(int32_t));
    *out = ids;
    *stale_from = best_l, *stale_to = best_j; /* the reasoning kept, when it was skipped */
    return nn;
}


static int64_t total_bytes(const conv_cache *c) {
    int64_t b = 0;
    for (int i = 0; i < c->n; i++) b += c->e[i].bytes;
    return b;
}

void conv_keep(conv_cache *c, tkv_session *s, int seq, const int32_t *tokens, int n, int n_prompt, uint64_t salt) {
    if (!c->cap || n < c->min_len) {
        tkv_seq_close(s, seq);
        return;
    }
    if (c->n == c->cap) drop(c, s, lru(c, -1));
    tkv_seq_idle(s, seq);
    if (c->park && park_write_through(c->park)) park_put(c->park, s, seq, tokens, n, salt); /* for the other servers */
    tkv_stats st;
    int64_t bytes = 0;
    if (tkv_stats_get(s, seq, &st, NULL, 0) == 0) bytes = st.bytes[0] + st.bytes[1] + st.bytes[2];
    conv_entry *e = &c->e[c->n++];
    e->seq = seq;
    e->n = n;
    e->n_prompt = n_prompt;
    e->tokens = tkv_xmalloc((size_t)n * sizeof(int32_t));
    memcpy(e->tokens, tokens, (size_t)n * sizeof(int32_t));
    e->salt = salt;
    e->used = ++c->tick;
    e->bytes = bytes;
    c->kept++;
    while (c->max_bytes && c->n > 0 && total_bytes(c) > c->max_bytes) {
        int v = -1; /* the least recently used one not compressed yet: to T2 first */
        for (int i = 0; i < c->n; i++)
            if (!c->e[i].compressed && (v < 0 || c->e[i].used < c->e[v].used)) v = i;
        if (v >= 0) {
            c->e[v].compressed = 1;
            if (tkv_seq_idle_compress(s, c->e[v].seq) > 0 && tkv_stats_get(s, c->e[v].seq, &st, NULL, 0) == 0) {
                c->e[v].bytes = st.bytes[0] + st.bytes[1] + st.bytes[2];
                c->compressed++;
            }
            continue;
        }
        drop(c, s, lru(c, -1));
    }
}

int conv_take(conv_cache *c, int i) {
    int seq = c->e[i].seq;
    remove_at(c, i);
    return seq;
}

int conv_evict(conv_cache *c, tkv_session *s, int keep_seq) {
    int v = lru(c, keep_seq);
    if (v < 0) return -1;
    drop(c, s, v);
    return 0;
}
