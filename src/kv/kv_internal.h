/* kv_internal.h — the state behind kv.h, shared by kv.c (mechanism: slots, moves, views), kv_stats.c
 * (reporting) and kv_check.c (consistency). Not for use outside src/kv.
 *
 * Invariants (kv_check verifies them):
 *   - tier[pos]/slot[pos] is the token's location *after* the last planned re-tiering; while a batch
 *     is in flight, layer l's bytes are there once the engine has finished layer l (the fence);
 *   - a slot is owned by exactly one token, or is free, or is a source slot waiting for its batch to
 *     finish (`deferred`);
 *   - T0 slots in use (owned + deferred) never exceed the T0 budget at the current length;
 *   - protected positions are in T0; T3 positions own no slot and never change tier again;
 *   - hook-only policies (the baselines) protect nothing and use only T0 and T3: no (layer, kv head)
 *     row holds more than the limit their last step reported (plus the tokens appended since), a T3
 *     position is held by no row, and a T0 position by at least one (else its slot would be freed). */
#ifndef TKV_KV_INTERNAL_H
#define TKV_KV_INTERNAL_H
#include <stdint.h>

#include "kv/kv.h"
#include "kv/kv_policy.h"
#include "kv/kv_store.h"
#include "kv/kv_xfer.h"

typedef struct {
    int32_t pos;
    uint8_t from, to;  /* tiers */
    int32_t src, dst;  /* slots */
} kv_move;

typedef struct {
    uint8_t tier;
    int32_t slot;
} kv_slot_ref;

typedef struct {
    int len;                  /* positions held */
    int n_prompt;             /* prompt positions among them */
    int fresh_from;           /* positions >= this were appended but maybe not written yet */
    int steps_since;          /* decode steps since the last re-tiering */
    int64_t n_decode;         /* decode steps so far */
    uint8_t *tier;            /* [n_ctx] KV_T0..KV_T3 */
    int32_t *slot;            /* [n_ctx] slot in st[tier] (-1 for T3) */
    uint8_t *prompt;          /* [n_ctx] 1 = prompt token */
    uint8_t *lossy;           /* [n_ctx] 1 = went through T2 once (its f32 rows are dequantised) */
    double *score;            /* [n_ctx] hierarchy score */
    float *head_score;        /* [n_head_kv][n_ctx] or NULL (ops->head_scores) */
    float *prefill_score;     /* [n_head_kv][n_ctx] or NULL (ops->prefill_scores) */
    uint8_t *keep;            /* [n_layer][n_head_kv][n_ctx] per-head keep masks (head-wise baselines), or NULL */
    int keep_used;
    kv_store st[3];           /* T0, T1, T2 */
    int64_t ntok[4];          /* tokens per tier */
    /* re-tiering scratch, all [n_ctx] */
    uint8_t *prot, *target;
    int32_t *order, *scratch, *recycle;
    /* the batch of moves in flight (at most one) */
    kv_move *moves;           /* [n_ctx] */
    int n_moves;
    kv_slot_ref *deferred;    /* [n_ctx] source slots to free when the batch is done */
    int n_deferred;
    int batch_active;
    kv_retier_record rec;     /* of the batch in flight */
    /* views */
    const float **vk, **vv;   /* [n_ctx] (f32 caches) */
    const uint16_t **hk, **hv; /* [n_ctx] (f16 caches) */
    void *stage;              /* [n_ctx][2][kv_dim] of the cache's element type: T1 (staged) and T2 rows for one layer */
    float *hook_k;            /* [n_ctx][kv_dim] f32 keys for hooks that read K (f16 caches, R-KV), or NULL */
    kv_stats c;               /* counters; tokens/bytes/budget are filled in by kv_get_stats */
    void *pstate;             /* the policy hooks' state (baselines), or NULL */
    /* what the hooks' last step reported (kv_step_io), 0 before the first step */
    int bl_budget, bl_limit;  /* tokens per (layer, kv head) row: the budget, the most the rule allows */
    int bl_len;               /* length at that step (positions appended since are held by every row) */
    int64_t bl_held_rows;     /* (layer, kv head, position) triples held after it */
} kv_seq;

struct kv_cache {
    kv_options o;
    const kv_policy_ops *ops;
    int kv_dim;
    int abs_tokens;           /* per-sequence T0 budget in tokens from hbm_budget_bytes; 0 = ratio mode */
    int window;               /* effective window: max(1, o.window) */
    kv_seq *seq;              /* [n_seq] */
    kv_xfer *xfer;            /* NULL when sync_transfers or policy full */
    kv_retier_record *log;    /* [KV_RETIER_LOG_MAX] */
    int log_n;
    kv_retier_fn cb;
    void *cb_ctx;
};

/* T0 budget in tokens of sequence s at length len (raised to the protected tokens in ratio mode). */
int kv_t0_budget(const kv_cache *kv, const kv_seq *s, int len, int *raised);
/* Number of protected positions at length len. */
int kv_prot_count(const kv_cache *kv, const kv_seq *s, int len);
int kv_is_protected(const kv_cache *kv, const kv_seq *s, int pos, int len);
/* Bytes of one (layer, kv head) row of one token: K and V, f32 or fp16. */
int64_t kv_row_bytes(const kv_cache *kv);
/* Waits for s's batch and frees its source slots. */
void kv_complete_batch(kv_cache *kv, int seq);

#endif
