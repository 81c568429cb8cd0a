/* kv_state.h — the state behind kv.h: the data every file of the KV module reads (no functions but
 * inline accessors). Not for use outside src/kv. Each file's functions are declared in its own header,
 * and the files are layered: each includes only the headers of the files below it.
 *
 *   kv.c, kv_stats.c, kv_check.c   the interface (init/free, sequences in and out, appends,
 *                the call's end), reporting and the consistency checker
 *   kv_io.c      a sequence written out as a record and read back
 *   kv_baselines.c  (kv_hooks.h) the own-budget policies' hooks run on the cache
 *   kv_plan.c    the planner: scores + budgets -> target tiers -> batches of moves; every tier change
 *   kv_budget.c  budgets and protection, option checks, admission, the plan for `tierkv plan`
 *   kv_view.c    what attention reads: slot tables, keep masks, staging, host views
 *   kv_scores.c  the ranked scores: the update from attention weights, on the host or the backend
 *   kv_pool.c    mechanism: pools of slots per tier (chunks, free lists, holders), who is where
 *   kv_xfer.c    the transfer engine thread (knows nothing of tiers)
 *   kv_policy.c, policy_*.c   the policies (kv_policy.h: pure functions over plain data)
 *
 * Invariants (kv_check verifies them):
 *   - ref[pos] is the token's location *after* the last planned re-tiering; while a batch is in
 *     flight, layer l's bytes are there once the engine has finished layer l (the fence);
 *   - a slot is held by the sequences that reference it (holders = their count; > 1 only for a
 *     shared prompt prefix, whose slots never move), or is free, or waits for its batch to finish
 *     (deferred);
 *   - T0 slots in use (held + deferred) never exceed the shared budget; each sequence's own T0 slots
 *     (t0_held, deferred ones it gave up included) never exceed its budget in the per-sequence modes;
 *   - protected positions are in T0 (an unpinned prompt, kv_options.unpin_prompt, in T0 or T1);
 *     T3 positions hold no slot and never change tier again;
 *   - att[pos] = ref[pos], except positions read through STAGE (T2, and T1 when staged), which read
 *     the STAGE slot mirroring ref[pos] (kv_stage_slot); STAGE slots are never held;
 *   - hook-only policies (the baselines) protect nothing and use only T0 and T3: no (layer, kv head)
 *     row holds more than the limit their last step reported (plus the tokens appended since), a T3
 *     position is held by no row, and a T0 position by at least one (else its slot would be freed). */
#ifndef TKV_KV_STATE_H
#define TKV_KV_STATE_H
#include <stdint.h>

#include "base/err.h"
#include "kv/kv.h"
#include "kv/kv_policy.h"
#include "kv/kv_xfer.h"

#define KV_CHUNK_SHIFT 8 /* 256 slots per chunk */
#define KV_STAGE_LAYERS 2 /* STAGE's layers on a backend that is not host memory (kv_pool.c) */

/* How the T0 budget is given (kv_budget.c). */
enum {
    KV_B_NONE = 0,   /* policy full without a byte budget: T0 grows with the tokens */
    KV_B_RATIO,      /* t0_ratio: each sequence its own share of its length */
    KV_B_SEQ,        /* t0_tokens (or the baselines' share of a byte budget): tokens per sequence */
    KV_B_SHARED,     /* t0_budget_bytes: one budget for all live sequences */
};

/* One tier's pool of slots. The chunk pointer array (pools.pool[tier].chunks) is allocated at its
 * full capacity at init and never moves: the transfer thread reads it while this thread grows the
 * pool. Everything else here is this thread's. */
typedef struct {
    int tier;
    int cap_chunks;       /* capacity of the chunk array */
    int64_t cap_slots;    /* hard cap on slots in use (a shared T0 budget), else INT64_MAX */
    int n_slots;          /* slots in the chunks allocated so far */
    int32_t *free;        /* [n_slots] free slot ids, lowest on top */
    int n_free;
    uint16_t *holders;    /* [n_slots] sequences holding each slot (0: free or deferred) */
    int64_t peak;         /* most slots in use at once */
    int64_t reserved;     /* slots the live sequences may need at their full lengths (kv_tier_bound) */
} kv_tpool;

static inline int64_t kv_tpool_in_use(const kv_tpool *p) { return p->n_slots - p->n_free; }

typedef struct {
    int32_t ref;          /* slot given up, freed when its batch completes */
    int16_t seq;          /* the sequence that gave it up */
} kv_deferred;

/* The one batch of moves in flight (all sequences that re-tiered in one step). */
typedef struct {
    int active;
    be_move *moves;       /* the engine's list: demotions first, then the rest */
    int n_moves, cap_moves;
    be_move *rest;        /* planning scratch for the non-demotion moves */
    int n_rest, cap_rest;
    kv_deferred *deferred;
    int n_deferred, cap_deferred;
    int32_t *recycle;     /* T0 slots given up by demotions, handed to promotions */
    int n_recycle, cap_recycle;
    int16_t *recycle_seq; /* [cap_recycle] the sequence that gave each up */
    int *seqs;            /* [n_seq] sequences with a record in this batch */
    int n_seqs;
} kv_batch;

typedef struct {
    int live;
    int idle;                 /* 1: kept for a later take-over, never decoded (kv_seq_idle): protects
                                 nothing, its T0 budget is the T0 slots it shares (they cannot move) */
    int n_ctx;                /* this sequence's capacity */
    int len;                  /* positions held */
    int n_prompt;             /* prompt positions among them */
    int fresh_from;           /* positions >= this were appended but maybe not written yet */
    int steps_since;          /* decode steps since the last re-tiering */
    int64_t n_decode;         /* decode steps so far */
    int reserve;              /* T0 tokens reserved at admission (shared budget, policy full with one) */
    int64_t mem;              /* host bytes counted at admission (kv_pools_admit) */
    int bound[BE_N_POOLS];    /* slots of each pool it may hold at its full length, reserved at admission */
    int t0_held;              /* T0 slots this sequence holds or gave up in the batch in flight */
    int32_t *ref;             /* [n_ctx] BE_SLOT(tier, slot), BE_SLOT_NONE for T3 */
    int32_t *att;             /* [n_ctx] where attention reads the position (ref, or a STAGE slot) */
    int32_t *att_ip;          /* [n_ctx] att with T1 positions at ref (KV_T1_IN_PLACE with staged T1),
                                 allocated at first use; built for tables_gen att_ip_gen - 1 */
    uint64_t att_ip_gen;
    uint8_t *prompt;          /* [n_ctx] 1 = prompt token */
    uint8_t *lossy;           /* [n_ctx] 1 = went through T2 once */
    uint8_t *stale;           /* [n_ctx] 1 = ranked below every other position (an earlier turn's
                                 reasoning kept in a conversation: first out of T0, first evicted) */
    int n_stale;
    double *rank;             /* [n_ctx] the scores ranked, stale ones pushed below all (when n_stale) */
    double *score;            /* [n_ctx] hierarchy score (current where score_at says: kv_scores.h) */
    double *score_dev;        /* [n_ctx] in backend memory, or NULL: the scores updated there */
    int score_at;             /* KV_SCORES_* */
    float *head_score;        /* [n_head_kv][n_ctx] or NULL (ops->head_scores) */
    float *prefill_score;     /* [n_head_kv][n_ctx] or NULL (ops->prefill_scores) */
    uint8_t *keep;            /* [n_layer][n_head_kv][keep stride] per-head keep masks, or NULL */
    int keep_used;
    int64_t ntok[4];          /* tokens per tier */
    int64_t n_shared;         /* positions whose slot has other holders */
    double t0_share_sum;      /* sum over decode steps of T0 tokens / length */
    int64_t t0_share_n;
    /* re-tiering scratch, all [n_ctx] */
    uint8_t *prot, *target, *cur;
    int32_t *order, *scratch;
    int in_batch;             /* 1 while its record waits in the batch in flight */
    kv_retier_record rec;     /* of the batch in flight */
    /* host views (kv_view_layer) and the hooks' f32 keys */
    const float **vk, **vv;   /* [n_ctx] */
    const uint16_t **hk, **hv;
    void *view_t2;            /* [n_ctx][2][kv_dim] T2 rows read in place, decoded for host views (on first use) */
    float *hook_k;            /* [n_ctx][kv_dim] f32 keys for hooks that read K (R-KV), or NULL */
    const float **hook_rows;  /* [n_ctx] */
    kv_stats c;               /* counters; tokens/bytes/budget are filled in by kv_get_stats */
    void *pstate;             /* the policy hooks' state (baselines), or NULL */
    /* what the hooks' last step reported (kv_step_io), 0 before the first step */
    int bl_budget, bl_limit;  /* tokens per (layer, kv head) row: the budget, the most the rule allows */
    int bl_len;               /* length at that step (positions appended since are held by every row) */
    int64_t bl_held_rows;     /* (layer, kv head, position) triples held after it */
} kv_seq;

/* What the staging list (kv_cache.stage_moves) was built for: every layer of a forward call stages
 * the same positions (a move names slots, not a layer), so the list is built once while tables_gen,
 * the call's sequences and its T1 read stay the same. */
typedef struct {
    uint64_t kv_gen;
    int valid, n, n_seqs, cap;
    kv_t1_read how;
    int *seqs, *count;    /* [cap] the call's sequences as given, and the rows each stages a layer
                             that none before it in the call stages (0 for a repeat) */
    int64_t builds;       /* lists built since init (tests) */
} kv_stage_memo;

/* The last attention table handed out (kv_attn_table): its arrays, and what its tables_gen stood for. */
typedef struct {
    const int32_t **slots;
    const uint8_t **keep;
    int *n_pos, *seq, *pos;   /* [cap] */
    int cap, n, layer;
    kv_t1_read how;
    uint64_t gen, kv_gen;
} kv_attn_memo;

struct kv_cache {
    kv_options o;
    const kv_policy_ops *ops;
    be_backend *be;
    be_kv_pools pools;        /* what the backend reads: formats, chunks */
    kv_tpool tp[BE_N_POOLS];  /* T0, T1, T2, STAGE */
    int32_t *stage_chunk[2];  /* [T1, T2 cap_chunks]: the STAGE chunk mirroring chunk c of T1 (T2), -1:
                                 none (kv_stage_slot); STAGE chunks are added as the tiers grow */
    int32_t *stage_src;       /* [STAGE cap_chunks]: the first slot of the chunk a STAGE chunk mirrors */
    int kv_dim;
    int t2_staged;            /* T2 positions are read through STAGE (o.stage_t2, or a backend that
                                 cannot read o.t2_fmt where it lies); else attention reads T2 in place */
    int window;               /* effective window: max(1, o.window) */
    int mode;                 /* KV_B_* */
    int seq_tokens;           /* KV_B_SEQ: T0 tokens per sequence */
    int64_t shared_tokens;    /* KV_B_SHARED (and full with a byte budget): T0 tokens for all */
    int64_t reserved;         /* T0 tokens reserved by live sequences */
    kv_seq *seq;              /* [n_seq] */
    int n_live;
    int64_t committed;        /* bytes the live sequences may still make the host pools hold, at full length */
    kv_batch batch;
    kv_xfer *xfer;            /* NULL when sync_transfers or nothing ever moves */
    int steps_since;          /* KV_B_SHARED: decode steps since the last re-tiering of all */
    uint64_t tables_gen;      /* bumps when any slot table may have changed: after appends and moves */
    kv_attn_memo att_memo;
    int64_t stage_bytes_layer;/* bytes one staged row pair takes (for bytes_staged) */
    be_move *stage_moves;     /* [cap] stage copies of one layer, in STAGE slot order */
    int cap_stage_moves;
    uint64_t *stage_mark;     /* [cap] a bit per STAGE slot, set while a list is built (else all 0) */
    int64_t cap_stage_mark;
    kv_stage_memo stage_memo; /* what stage_moves holds */
    int dev_scores;           /* generated queries' weights added on the backend (kv_scores.h) */
    int64_t score_reads;      /* reads of scores back from the backend, and their bytes */
    int64_t score_read_bytes;
    int64_t score_uploads;    /* whole score arrays sent up (one per sequence, unless rewritten) */
    double **score_ptr;       /* [cap_score_ptr] kv_attn_mass_device's per-token arrays */
    int *score_npos;
    int cap_score_ptr;
    struct obs_item *obs;     /* [cap_obs] kv_observe_batch's items (kv_scores.c) */
    int cap_obs;
    uint8_t *obs_gen;         /* [cap_obs_gen] its per-token flags */
    int cap_obs_gen;
    kv_stats retired;         /* counters of removed sequences */
    kv_retier_record *log;    /* [KV_RETIER_LOG_MAX] */
    int log_n;
    kv_retier_fn cb;
    void *cb_ctx;
    /* cross-sequence ranking scratch (kv_plan.c) */
    kv_share_seq *share;      /* [n_seq] */
    int *share_room;          /* [n_seq] */
    uint8_t *mark;            /* [T0 slots] */
    int cap_mark;
};

static inline kv_seq *kv_get_seq(const kv_cache *kv, int seq) {
    if (!(seq >= 0 && seq < kv->o.n_seq && kv->seq[seq].live)) tkv_assert_fail("live sequence", __FILE__, __LINE__);
    return &kv->seq[seq];
}

/* The tier of a slot reference: 0..2, or 3 (evicted) for BE_SLOT_NONE. */
static inline int kv_ref_tier(int32_t ref) { return ref == BE_SLOT_NONE ? 3 : BE_SLOT_TIER(ref); }

/* 1 when the records of a tier's pool can be read and written from the host (not a GPU's T0). */
static inline int kv_host_pool(const kv_cache *kv, int tier) {
    return kv->pools.pool[tier].mem != BE_MEM_DEVICE || kv->be->ops->unified;
}

/* The host waits until the device has run every op and copy submitted so far (the backend's
 * host_sync; nothing where ops finish before they return). */
static inline void kv_host_sync(kv_cache *kv) {
    if (kv->be->ops->host_sync) kv->be->ops->host_sync(kv->be);
}

/* The sequence's T0 peak, after its T0 slots grew. */
static inline void kv_note_t0_peak(const kv_cache *kv, kv_seq *s) {
    int64_t b = (int64_t)s->t0_held * kv_token_bytes(kv, BE_T0);
    if (b > s->c.peak_t0_bytes) s->c.peak_t0_bytes = b;
}

/* Positions per (layer, kv head) row of the keep masks. */
static inline int kv_keep_stride(const kv_cache *kv) { return kv->o.n_ctx; }

#endif
