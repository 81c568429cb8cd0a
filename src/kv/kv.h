/* kv.h — the KV cache as the forward pass sees it: a memory hierarchy behind a small interface.
 *
 * The forward never owns a KV array. Per token it asks for the rows to write the token's K (after
 * RoPE) and V into; per layer it asks for a *view*: one K and one V row pointer per position of the
 * sequence, in original position order, wherever each token lives (T0 pool, T1 host, T2 dequantised
 * into staging). Evicted positions have NULL rows and are skipped by attention. A per-(kv head,
 * position) keep mask lets head-wise policies (H2O) drop a token for some heads only.
 * After a layer's attention the forward reports the attention weights (kv_observe) so that the
 * policy can score tokens; after a decode step it calls kv_step_end, where re-tiering happens.
 *
 * Rows hold kv_dim = n_head_kv * head_dim values, head g at [g*head_dim, (g+1)*head_dim): f32, or
 * fp16 when kv_options.f16 is set, the default (T0 and T1 then hold fp16, half the bytes; the forward
 * still hands f32 rows to kv_put, which rounds them once, like llama.cpp's default f16 cache).
 * Threading: the kv_* calls come from the forward's main thread only; the transfer engine is
 * internal. A view stays valid until the next kv_* call on the same sequence. */
#ifndef TKV_KV_H
#define TKV_KV_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    KV_POLICY_FULL = 0,   /* every token in T0, nothing moves: the reference */
    KV_POLICY_HIERARCHY,  /* T0 by score, then T1 (exact), then T2 (int8), evict only the tail */
    KV_POLICY_EVICT,      /* same scores and budgets, what does not fit in T0 is evicted */
    KV_POLICY_QUANT,      /* what does not fit in T0 goes to T2 */
    KV_POLICY_STREAMING,  /* baselines (issue 6) */
    KV_POLICY_H2O,
    KV_POLICY_RKV,
    KV_POLICY_SNAPKV,
    KV_POLICY_COUNT
} kv_policy_kind;

typedef struct {
    /* model shape */
    int n_layer, n_head, n_head_kv, head_dim;
    /* capacity: sequences and positions per sequence */
    int n_seq, n_ctx;
    /* policy and budgets; ratios < 0 and budget 0 mean "not given". Policy full ignores budgets.
     * hbm_budget_bytes is split equally over the n_seq sequences (each gets its own T0 slots);
     * give either hbm_ratio or hbm_budget_bytes. T1 takes what T0, T2 and eviction do not. */
    kv_policy_kind policy;
    double hbm_ratio;          /* T0 share of current length */
    double t2_ratio;           /* T2 share of current length */
    double evict_ratio;        /* evicted share of current length */
    uint64_t hbm_budget_bytes; /* absolute T0 budget for all sequences together */
    int delta;                 /* re-tier every delta decode steps (default 64) */
    int sinks;                 /* protected first tokens (default 4) */
    int window;                /* protected last positions (default 64); the newest token always is */
    int staged;                /* 1: T1 rows are copied to a staging area per layer before attention */
    int sync_transfers;        /* 1: moves run on the caller's thread (for debugging and tests) */
    int f16;                   /* 1 (default): T0/T1 rows are fp16 (views give k16/v16); 0: f32 (views give k/v) */
} kv_options;

/* Defaults: policy full, delta 64, sinks 4, window 64, ratios unset, async transfers, f16 rows. */
void kv_options_default(kv_options *o);

typedef struct {
    /* f32 caches: k[pos] is kv_dim floats, or NULL if evicted; k16/v16 are NULL.
     * f16 caches: k16[pos] is kv_dim fp16 values, or NULL if evicted; k/v are NULL. */
    const float *const *k;
    const float *const *v;
    const uint16_t *const *k16;
    const uint16_t *const *v16;
    const uint8_t *keep;   /* NULL (all kept) or keep[g * keep_stride + pos] != 0 for kv head g */
    int keep_stride;
    int n;                 /* positions 0..n-1 exist */
} kv_view;

typedef struct kv_cache kv_cache;

/* Validates the options (budgets that cannot hold the protected tokens or do not add up are refused
 * here with a message saying why) and preallocates everything. */
kv_cache *kv_init(const kv_options *o, char *err, size_t errlen);
void kv_free(kv_cache *kv);

/* Forgets a sequence (its slots return to the pools). */
void kv_seq_reset(kv_cache *kv, int seq);
/* Number of positions the sequence holds. */
int kv_seq_len(const kv_cache *kv, int seq);

/* Appends positions 0..n-1 of sequence src, as prompt tokens, to the empty sequence dst: their K/V
 * rows of every layer are copied (f16 rows go through f32 and back, which is exact). Refused with a
 * message when the policy scores the prompt (kv_policy_copies_prefix), dst is not empty, src is shorter
 * than n or one of those positions is not held exactly (T2 or evicted). */
int kv_seq_copy_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen);

/* Adds the token at position pos (must equal kv_seq_len); its K and V for every layer are then given
 * by kv_put. is_prompt marks prompt tokens (protected in T0). Returns -1 with a message when the
 * sequence is full. */
int kv_append(kv_cache *kv, int seq, int pos, int is_prompt, char *err, size_t errlen);
/* Stores one layer's K (after RoPE) and V of an appended token, converting to the cache's type. */
void kv_put(kv_cache *kv, int seq, int layer, int pos, const float *k, const float *v);

/* The view of one layer for attention. Waits for in-flight moves of this layer (the per-layer fence)
 * and stages T1/T2 rows when needed. */
void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out);

/* Attention weights of the query at q_pos, layer `layer`: att[h * att_stride + j] for heads
 * h < n_head and positions j <= q_pos (0 where masked or evicted). Policies accumulate scores here. */
void kv_observe(kv_cache *kv, int seq, int layer, int q_pos, const float *att, int att_stride);

/* End of one decode step of the sequence (after every layer): scoring bookkeeping, and every delta
 * steps the re-tiering, whose moves start asynchronously. */
void kv_step_end(kv_cache *kv, int seq);

/* Statistics, summed over sequences (per-sequence with seq >= 0). */
typedef struct {
    int64_t tokens[4];          /* tokens per tier T0..T3 (T3 = evicted) */
    int64_t bytes[4];           /* bytes per tier (T3: 0) */
    int64_t peak_t0_bytes;
    int64_t t0_budget_bytes;    /* effective budget (after raising to the protected tokens) */
    int64_t budget_raised;      /* times the budget was raised to hold the protected tokens */
    int64_t bytes_moved_down;   /* T0 -> slower tiers */
    int64_t bytes_moved_up;     /* slower tiers -> T0 */
    int64_t bytes_staged;       /* T1/T2 rows copied into staging for attention (not tier moves) */
    int64_t tokens_evicted;
    /* positions whose K/V can no longer be read, averaged over the (layer, kv head) rows, now: the T3
     * count for whole-token policies; for the per-head baselines (H2O, R-KV, SnapKV keep different
     * positions per row) the positions each row has dropped, averaged */
    double evicted_equiv;
    int64_t retiers;
    double move_seconds;        /* time the transfer engine spent copying */
    double retier_seconds;      /* time spent ranking and planning */
    double fence_wait_seconds;  /* time the forward waited at per-layer fences */
    /* added by the kv module (after the fields above, which the forward already uses) */
    int64_t sync_demotions;     /* T0 tokens demoted synchronously because a new token would overflow T0 */
    int64_t bytes_moved_host;   /* T1 <-> T2 conversions (host side, no bus traffic) */
    /* The baselines (streaming, h2o, rkv, snapkv) drop tokens per (layer, kv head) row; a token's
     * slot (bytes[0]) is freed only once every row dropped it. What they hold, counted per row:
     * held_bytes = held (layer, kv head, position) rows x 2*head_dim*(2 or 4 bytes) (other policies: T0+T1+T2
     * bytes); peak_held_bytes = the most held right after a policy step (the prompt is held whole
     * until its end, as in the papers); t0_budget_bytes = the method's budget now (raised to its
     * floor); limit_bytes = what its published rule allows now: the budget, plus for rkv the tokens
     * since its last compression (up to its 128-token buffer) and for snapkv every decode token
     * (it compresses the prompt only). Non-baselines: limit = budget, peak_held = 0. */
    int64_t held_bytes;
    int64_t peak_held_bytes;
    int64_t limit_bytes;
} kv_stats;
void kv_get_stats(const kv_cache *kv, int seq, kv_stats *out);

/* Waits for every in-flight move of every sequence and settles their accounting (stats, log). */
void kv_sync(kv_cache *kv);

/* Stats as one JSON object (no newline) into buf; returns the length snprintf would write. */
int kv_stats_json(const kv_stats *s, char *buf, size_t n);
/* {"policy":..., "total":{...}, "seqs":[{...}, ...]} for the whole cache, newline-terminated. */
void kv_stats_write_json(FILE *f, const kv_cache *kv);
/* A short table for people: one line per tier (tokens, MiB), moves, staging, times. seq < 0: total. */
void kv_stats_print(FILE *f, const kv_cache *kv, int seq);

/* One record per re-tiering (after its moves completed). */
typedef struct {
    int seq;
    int len;                 /* sequence length when it was planned */
    int64_t step;            /* decode steps of the sequence so far */
    int64_t tokens[4];       /* tokens per tier after the re-tiering */
    int64_t bytes_down;      /* T0 -> T1/T2 */
    int64_t bytes_up;        /* T1/T2 -> T0 */
    int64_t bytes_host;      /* T1 <-> T2 */
    int moves;               /* tokens that changed tier with a copy */
    int evicted;             /* tokens newly evicted */
    double plan_seconds;     /* ranking and slot allocation, on the caller's thread */
    double move_seconds;     /* transfer engine time */
} kv_retier_record;
typedef void (*kv_retier_fn)(void *ctx, const kv_retier_record *r);
/* Calls fn (on the forward's thread) for every re-tiering once its moves are done; NULL to stop. */
void kv_set_retier_callback(kv_cache *kv, kv_retier_fn fn, void *ctx);
/* The first KV_RETIER_LOG_MAX records, oldest first: returns them and their count in *n. */
#define KV_RETIER_LOG_MAX 4096
const kv_retier_record *kv_retier_log(const kv_cache *kv, int *n);
void kv_retier_log_print(FILE *f, const kv_cache *kv);

/* Introspection for tests and tools: tier (0..3) of a position, and a full consistency check of the
 * internal state (slots unique and matching the tier counts, T0 within its byte budget, protected
 * tokens in T0). kv_check returns 0 or -1 with a message. */
int kv_token_tier(const kv_cache *kv, int seq, int pos);
int kv_check(const kv_cache *kv, char *err, size_t errlen);
/* Bytes one token occupies in a tier (T0/T1: f32 or fp16 rows, T2: int8 rows + per-head scales). */
int64_t kv_token_bytes(const kv_cache *kv, int tier);

const char *kv_policy_name(kv_policy_kind p);
int kv_policy_parse(const char *name, kv_policy_kind *out); /* 0 ok, -1 unknown */
/* 1 if the policy drops a position from every (layer, kv head) row at once, 0 if head-wise. */
int kv_policy_whole_token(kv_policy_kind k);
/* 1 if the policy's state depends on nothing but the positions' K/V and prompt flags (it does not
 * score the prompt's own attention: full, hierarchy, evict, quant), so that a prompt prefix copied
 * from another sequence (kv_seq_copy_prefix) is the same as one prefilled in place. */
int kv_policy_copies_prefix(kv_policy_kind k);

#endif
