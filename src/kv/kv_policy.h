/* kv_policy.h — the replacement policy, apart from the mechanism (SQLite pcache style): a small
 * vtable per policy kind, and pure selection functions that turn scores + budgets into a target
 * tier per position. Nothing here touches storage, threads or the clock.
 *
 * How a re-tiering is decided (kv.c computes the inputs):
 *   - protected tokens (whole prompt, first `sinks`, last `window` positions) always stay in T0;
 *   - evicted tokens (T3) never come back;
 *   - every other token is a candidate; candidates are ranked by score, highest first; TIES: the
 *     later position wins (recent tokens are the likelier to be read again, and the rule is total,
 *     so the ranking is deterministic);
 *   - the ranked candidates fill T0 up to cap[0], then T1 up to cap[1], then T2 up to cap[2]; the
 *     tail that is left is evicted. Each policy only chooses the caps (its host_caps, kv_policy_caps);
 *   - candidates marked exact (an unpinned prompt, hierarchy only) are never T2 nor evicted: the
 *     evicted tail and then T2 are taken from the lowest-ranked other candidates, the rest fill T0 in
 *     rank order and T1 takes what is left.
 *
 * Baselines (streaming, h2o, rkv, snapkv) plug in here: their pure selection functions live in
 * src/kv/baselines*.c (baselines.h) and work per (layer, kv head) with their own state, so besides
 * `select` (called at re-tiering) the ops have optional per-sequence hooks: state init/free/reset,
 * observe (every kv_observe, prompt queries included, with the layer's view for key-based scores)
 * and step (every kv_step_end, and once at the end of the prompt), which writes per-layer, per-kv-head
 * keep masks and may evict whole tokens (T3). kv_baselines.c implements the hooks of the four
 * baselines and their tables. */
#ifndef TKV_KV_POLICY_H
#define TKV_KV_POLICY_H
#include <stdint.h>

#include "kv/kv.h"

enum { KV_T0 = 0, KV_T1 = 1, KV_T2 = 2, KV_T3 = 3 };

typedef struct {
    int n;                    /* positions 0..n-1 */
    const double *score;      /* [n] s_i = sum over decode steps of mean over layers and heads of attention */
    const uint8_t *tier;      /* [n] current tier */
    const uint8_t *prot;      /* [n] 1 = protected (must end in T0) */
    const uint8_t *exact;     /* [n] 1 = a candidate that must stay exact, T0 or T1 (an unpinned prompt
                                 token), or NULL; only for policies with a T1 */
    const float *head_score;  /* [n_head_kv][stride] decode scores per kv head, or NULL (ops.head_scores) */
    const float *prefill_score; /* [n_head_kv][stride] prefill observations per kv head, or NULL */
    int n_head_kv, stride;
    int cap[3];               /* candidates allowed in T0, T1, T2; the rest are evicted */
    int32_t *order, *scratch; /* [n] scratch for ranking */
} kv_select_in;

typedef struct {
    uint8_t *target;  /* [n] out: target tier of every position */
    uint8_t *keep;    /* [n_layer][n_head_kv][stride] per-head keep masks (head-wise policies), or NULL */
    int keep_used;    /* out: 1 if keep is meaningful (head-wise eviction) */
} kv_select_out;

typedef void (*kv_select_fn)(const kv_select_in *in, kv_select_out *out);

/* What the step hook sees and may change, for one sequence. */
typedef struct {
    int n, n_prompt;          /* positions held, prompt positions among them */
    int t0_budget;            /* T0 budget in tokens at this length (from hbm ratio/budget) */
    int n_layer, n_head_kv, n_head;
    const uint8_t *tier;      /* [n] current tiers (T3: gone) */
    uint8_t *keep;            /* [n_layer][n_head_kv][stride] per-head keep masks, 1 = attended */
    int stride;               /* n_ctx */
    uint8_t *evict;           /* [n] out: set 1 to evict the whole token (all layers, all heads) */
    int keep_used;            /* out: 1 once the masks mean something */
    char *err;                /* for a message when step returns -1 (the decode then asserts) */
    size_t errlen;
    /* any layer's K rows as f32 (R-KV's redundancy at a compression point): one row pointer per
     * position, NULL where evicted; valid until the next keys_layer call */
    const float *const *(*keys_layer)(void *ctx, int layer);
    void *view_ctx;
    /* out, for the stats and kv_check: what the policy holds after this step, per (layer, kv head)
     * row. budget = the method's budget at this length after raising it to the method's floor;
     * limit = the most one row may hold now by the method's published rule (budget, or more where
     * the method keeps tokens past its budget: R-KV between compressions, SnapKV's decode tokens);
     * held_rows = (layer, kv head, position) triples held, over every row. */
    int budget, raised, limit;
    int64_t held_rows;
} kv_step_io;

typedef struct {
    void *(*init)(const kv_options *o, char *err, size_t errlen); /* per sequence, at kv_init */
    void (*free)(void *st);
    void (*reset)(void *st);
    /* n: positions the sequence holds (the attention just read 0..q_pos of them) */
    void (*observe)(void *st, int layer, int q_pos, int is_prompt, const float *att, int att_stride, int n);
    int (*step)(void *st, kv_step_io *io);
} kv_policy_hooks;

/* A policy: one table, defined in the policy's own file (policy_*.c, the baselines in
 * kv_baselines.c) and listed once in kv_policy.c's registry. The engine asks the table, never the
 * policy's kind. */
typedef struct {
    kv_policy_kind kind;
    const char *name;
    int tiered;          /* 0: policy full (no scores, no re-tiering, no budgets) */
    int own_budget;      /* keeps its own scores and per-(layer, kv head) budget and evicts by itself
                            through `hooks` (the published baselines); 0: ranked by the engine's
                            cumulative attention and re-tiered by `select` */
    int overflow_tier;   /* where the lowest unprotected T0 token goes when a new token would overflow T0 */
    int uses_t1, uses_t2;/* which host tiers need storage */
    int t2_ratio_ok;     /* accepts --t2-ratio */
    int evict_ratio_ok;  /* accepts --evict-ratio */
    int unpin_ok;        /* accepts an unpinned prompt (it waits in T1) */
    int fixed_t0;        /* T0 holds the protected tokens only: no T0 budget is given or accepted */
    int head_scores;     /* keep per-kv-head decode scores (for a head-wise `select`) */
    int head_masks;      /* per-layer, per-kv-head keep masks in the views (head-wise policies) */
    int prefill_scores;  /* keep per-kv-head prefill observations (SnapKV) */
    /* ranked policies: how the `rest` candidates that miss T0 split into T1 (out[0]) and T2 (out[1])
     * given the T2 budget b2 and the eviction room left room3; what neither takes is evicted. NULL:
     * T0 or nothing */
    void (*host_caps)(int rest, int b2, int room3, int out[2]);
    kv_select_fn select; /* at re-tiering; NULL: the policy only uses hooks */
    const kv_policy_hooks *hooks; /* NULL for the ranked policies */
    const char *limit_rule; /* own-budget policies: what a row may hold beyond the budget (the stats) */
} kv_policy_ops;

/* ranked by the engine (hierarchy, evict, quant): scores, re-tiering, a T0 budget */
static inline int kv_ops_ranked(const kv_policy_ops *o) { return o->tiered && !o->own_budget; }

const kv_policy_ops *kv_policy_ops_of(kv_policy_kind k);

/* The tables, one per file (the registry in kv_policy.c lists them by kind). */
extern const kv_policy_ops kv_policy_full, kv_policy_hierarchy, kv_policy_evict, kv_policy_quant;
extern const kv_policy_ops kv_policy_streaming, kv_policy_h2o, kv_policy_rkv, kv_policy_snapkv;
extern const kv_policy_ops kv_policy_sink;

/* Candidate counts per tier for `n_cand` candidates, given room in T0 for unprotected tokens
 * (`room0`), the T2 budget (`b2`) and the eviction room left (`room3` = eviction budget minus tokens
 * already evicted). */
void kv_policy_caps(const kv_policy_ops *ops, int n_cand, int room0, int b2, int room3, int cap[3]);

/* The ranked fill described above (hierarchy, evict, quant). */
void kv_select_ranked(const kv_select_in *in, kv_select_out *out);

/* Sorts idx[0..m) by score descending, ties later position first. Stable merge sort, no allocation. */
void kv_rank(const double *score, int32_t *idx, int m, int32_t *scratch);

/* ---- one T0 budget for several sequences ----
 * A sequence's raw scores grow with its decode steps (each step hands out one unit of attention
 * mass over its positions), so a long sequence's tokens would outrank a short one's. Each sequence's
 * scores are normalised by its mean: norm = score * len / (sum of its scores), so a token scores 1
 * when it gets exactly the share of attention a uniform spread would give it, in a sequence of any
 * length and age. The normalisation is monotone within a sequence, so its own ranking (kv_rank) is
 * unchanged and each sequence gets a prefix of it. */
typedef struct {
    const double *score;      /* raw scores, indexed by position */
    const int32_t *order;     /* [n_cand] candidate positions, ranked (kv_rank) */
    int n_cand;
    double norm;              /* len / sum of the sequence's scores (0 when the sum is 0) */
} kv_share_seq;
/* Splits room0 T0 places over the sequences' candidates by normalised score, highest first (ties:
 * lower sequence index, then the sequence's own rank), writing each one's count to room[i]: a k-way
 * merge of the ranked lists. scratch holds n * kv_share_scratch_item() bytes. Pure. */
size_t kv_share_scratch_item(void);
void kv_policy_share_t0(const kv_share_seq *seqs, int n, int room0, int *room, void *scratch);

#endif
