/* kv.h — the KV cache as the forward pass sees it: a memory hierarchy behind a small interface.
 *
 * One cache holds every live sequence. Its tiers are pools of slots owned by the cache, shared by all
 * sequences (T0 fast memory, T1 host at full precision, T2 host int8; T3 = evicted, no slot); a slot
 * holds one token's K and V for every layer, in the backend's memory (src/backend/backend.h: the
 * cache decides, the backend stores and copies). Sequences are added and removed at run time, each
 * with its own context limit; admission is refused with the numbers when the budgets cannot hold one
 * more (never half-admitted). Pools grow by chunks with use; a T0 byte budget (t0_budget_bytes)
 * holds for all live sequences together and re-tiering ranks tokens across them by score.
 *
 * The forward, per call: kv_append every token (reserves its T0 slot), then per layer
 * kv_layer_begin (waits for that layer's in-flight moves, stages the T1/T2 rows the attention must read
 * from STAGE), writes K (after RoPE) and V into kv_new_slot through the backend, takes the layer's
 * attention table (kv_attn_table: per token its sequence's slot table, where position p is read,
 * BE_SLOT_NONE when evicted, and the keep masks of head-wise policies), runs the attention, and hands
 * its weights to the policy in one call: in host memory (kv_attn_mass), or, where
 * kv_scores_on_device says, where the backend wrote them (kv_attn_mass_device: the scores are
 * updated there and the weights never come back); kv_batch_end closes the call (re-tiering happens
 * there).
 *
 * Rows hold kv_dim = n_head_kv * head_dim values, head g at [g*head_dim, (g+1)*head_dim): f32, or
 * fp16 when kv_options.f16 is set, the default (as llama.cpp's f16 cache: rounded once).
 * Threading: kv_* calls come from one thread; the transfer engine is internal; kv_attn_mass runs its
 * score updates on the backend's host threads (be_ops.host_for) and returns when they are done. */
#ifndef TKV_KV_H
#define TKV_KV_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "base/buf.h"
#include "tierkv.h"

typedef enum {
    KV_POLICY_FULL = 0,   /* every token in T0, nothing moves: the reference */
    KV_POLICY_HIERARCHY,  /* T0 by score, then T1 (exact), then T2 (int8), evict only the tail */
    KV_POLICY_EVICT,      /* same scores and budgets, what does not fit in T0 is evicted */
    KV_POLICY_QUANT,      /* what does not fit in T0 goes to T2 */
    KV_POLICY_STREAMING,  /* baselines (docs/BASELINES.md) */
    KV_POLICY_H2O,
    KV_POLICY_RKV,
    KV_POLICY_SNAPKV,
    KV_POLICY_SINK,       /* sinks + window only, the rest evicted at once (src/kv/policy_sink.c) */
    KV_POLICY_COUNT
} kv_policy_kind;

typedef struct {
    /* model shape */
    int n_layer, n_head, n_head_kv, head_dim;
    /* capacity: sequences live at once, and the longest context one may ask for */
    int n_seq, n_ctx;
    /* policy and budgets; ratios < 0 and budget 0 mean "not given". Policy full ignores ratios.
     *   t0_ratio: T0 share of each sequence's current length (each sequence its own budget);
     *   t0_budget_bytes: T0 bytes for all live sequences together (hierarchy, evict, quant: one
     *     pool ranked across sequences; full: admission reserves each sequence's whole context; the
     *     baselines, which keep per-sequence budgets by definition: an equal share per sequence slot);
     *   t0_tokens: T0 tokens per sequence, absolute (raised to the protected tokens for our policies;
     *     the method's budget for the baselines).
     * T2 and eviction are shares of each sequence's length; T1 takes the rest. */
    kv_policy_kind policy;
    double t0_ratio;          /* T0 share of current length */
    double t2_ratio;           /* T2 share of current length */
    double evict_ratio;        /* evicted share of current length */
    uint64_t t0_budget_bytes; /* absolute T0 budget for all sequences together */
    int t0_tokens;             /* absolute T0 budget per sequence, in tokens */
    int protect_prompt;        /* baselines: the prompt is kept outside their budget */
    int unpin_prompt;          /* hierarchy: the prompt is never evicted nor lossy, but not pinned in T0:
                                  it competes for T0 by score and waits in T1 otherwise, so T0 can hold
                                  less than the prompt (0: pinned in T0, the default) */
    int delta;                 /* re-tier every delta decode steps (default 64) */
    int sinks;                 /* protected first tokens (default 4) */
    int window;                /* protected last positions (default 64); the newest token always is */
    int staged;                /* 1: T1 rows are copied to a staging area per layer before attention */
    int stage_t2;              /* 1: T2 rows are staged (dequantised into STAGE per layer) even for a
                                  backend whose attention reads them where they lie (be_ops.attn_t2_fmts):
                                  the reference path of the tests; 0: staged only where it cannot */
    int sync_transfers;        /* 1: moves run on the caller's thread (for debugging and tests) */
    int host_scores;           /* 1: the ranked scores are updated on the host even where the backend
                                  could (be_ops.score_add): the attention weights come back every
                                  step (the reference for the backend's update); 0: on the backend
                                  when it is not host memory */
    int f16;                   /* 1 (default): T0/T1 rows are fp16; 0: f32 */
    be_kv_fmt t2_fmt;          /* the T2 codec (default BE_KV_Q8_HEAD, "q8h"; a session sets its
                                  backend's default, be_kv_t2_default) */
    const float *k_center;     /* [n_layer][n_head_kv * head_dim] host f32, the key centre of the
                                  centred T2 formats (the model's K bias), or NULL; not owned */
} kv_options;

/* Defaults: policy full, delta 64, sinks 4, window 64, ratios unset, async transfers, f16 rows. */
void kv_options_default(kv_options *o);

typedef struct kv_cache kv_cache;

/* Validates the options (budgets that cannot hold one sequence's protected tokens or do not add up
 * are refused here with a message saying why). Memory is taken from the backend as the pools grow;
 * an absolute T0 budget is allocated whole here. The backend must outlive the cache. */
kv_cache *kv_init(const kv_options *o, be_backend *be, char *err, size_t errlen);
void kv_free(kv_cache *kv);

/* Adds an empty sequence of at most n_ctx positions, n_prompt of them the prompt it is about to get.
 * Returns 0 and its id (0..n_seq-1, the lowest free), -2 (TKV_EFULL: with the numbers) when n_seq
 * sequences are live or the T0 budget net of the live sequences' reservations cannot hold this one's
 * protected tokens now, -1 when it could never be admitted. */
int kv_seq_add(kv_cache *kv, int n_ctx, int n_prompt, int *seq, char *err, size_t errlen);
/* Removes a sequence: its slots return to the pools at once (its counters join the cache's totals). */
void kv_seq_remove(kv_cache *kv, int seq);
/* Forgets a sequence's tokens, keeping it live (kv_seq_remove + kv_seq_add with the same limits). */
void kv_seq_reset(kv_cache *kv, int seq);
int kv_seq_live(const kv_cache *kv, int seq);
/* Number of positions the sequence holds. */
int kv_seq_len(const kv_cache *kv, int seq);

/* Positions 0..n-1 of sequence src become the prompt of the empty sequence dst, sharing src's slots
 * (refcounted: the rows are held once and never move while shared). Refused with a message when the
 * policy scores the prompt (kv_policy_copies_prefix), dst is not empty, src is shorter than n or one
 * of those positions is not held exactly (T2 or evicted). */
int kv_seq_share_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen);
/* Sequence dst (empty) takes over positions 0..n-1 of src, which is removed (its other positions
 * freed): no copy and nothing shared; the rows stay in the tiers they lie in, with their scores, lossy
 * flags and keep masks, evicted ones stay evicted (the continuation sees what src's last step saw).
 * They are not a prompt in dst: dst protects its own prompt tokens (appended after them), sinks and
 * window, and is re-tiered at once to its budget (a protected row in T1 or T2 comes back to T0);
 * rows shared with another sequence (a prefix cache's prompt) never move and stay a pinned prompt.
 * Refused with a message (nothing changed) for policies with state beside the positions
 * (kv_policy_copies_prefix), or when a position dst would protect (a sink, the last window) was evicted. */
int kv_seq_take(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen);
/* The sequence is kept for a later take-over and not decoded until then: it protects nothing, holds no
 * T0 but the slots it shares (the prefix cache's), reserves none of a shared budget, and its rows leave
 * T0 now, as one batch through the planner, for the tiers the policy ranks them into (hierarchy: T1,
 * exact, and its T2 and evicted shares as at a re-tiering). Policies without T1 (full, evict, quant, the
 * baselines) leave it as it is. */
void kv_seq_idle(kv_cache *kv, int seq);
/* Sequence seq written out as a record (kv_rec.h) appended to b: tokens[0..len) (what it holds),
 * the model's identity and a salt in its head, every position's tier, lossy flag and score, and
 * its rows as the pools hold them (kv_io.c), and the caller's note (NULL: none). Waits for the moves in flight. Refused (-1, message)
 * for policies with state beside the positions. */
struct kv_rec;
int kv_seq_export(kv_cache *kv, int seq, const int32_t *tokens, uint64_t model, uint64_t salt, const void *note,
                  size_t note_len, tkv_buf *b, char *err, size_t errlen);
/* Fills the empty sequence seq from a parsed record of this cache's shape and row formats (its model
 * identity is the caller's to check): exact rows to T1 when the policy has one, else T0; T2 rows to
 * T2 (the same codec), evicted positions evicted; then re-tiered to its budget and protection.
 * Refused (-1, message, nothing changed) when the shape, formats or room do not match. */
int kv_seq_import(kv_cache *kv, int seq, const struct kv_rec *r, char *err, size_t errlen);
/* Positions from..to-1 of seq rank below every other one from now on (scores kept): an earlier
 * turn's reasoning kept in a conversation is the first to leave T0 and the first to be evicted.
 * Kept through a take-over and a record. Nothing for policies that do not rank. */
void kv_seq_set_stale(kv_cache *kv, int seq, int from, int to);
/* An idle sequence's exact rows in T1 go to T2, the policy's int8 or 4-bit codec (its kept rows
 * halved or quartered while no one attends them; lossy: the deviation is the codec's). The count
 * moved; 0 when it is not idle or the policy has no T2. */
int kv_seq_idle_compress(kv_cache *kv, int seq);
/* The old name of the same operation. */
int kv_seq_copy_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen);

/* Adds the token at position pos (must equal kv_seq_len) and reserves its T0 slot (demoting the
 * lowest-scored unprotected token first when T0 is at its budget). is_prompt marks prompt tokens
 * (protected in T0). Returns -1 with a message when the sequence is full or the token cannot fit. */
int kv_append(kv_cache *kv, int seq, int pos, int is_prompt, char *err, size_t errlen);
/* The slot of an appended token, for the backend's kv_write. */
int32_t kv_new_slot(const kv_cache *kv, int seq, int pos);
/* Stores one layer's K (after RoPE) and V of an appended token (fences the layer first): a
 * convenience over kv_layer_begin + be kv_write, for tests and one-off writes. */
void kv_put(kv_cache *kv, int seq, int layer, int pos, const float *k, const float *v);

/* The pools, for the backend's ops. */
const be_kv_pools *kv_pools(const kv_cache *kv);

/* Where one forward call's attention reads T1. KV_T1_AS_OPENED: as the options say (through STAGE
 * with kv_options.staged, else where it lies). KV_T1_IN_PLACE: where it lies even when the cache
 * stages it: split attention's decode steps, whose host part reads T1 (a session with both staged
 * and split stages its prefill chunks, whose T1 rows cross once per chunk, and splits its decode
 * steps, whose T1 rows do not cross at all). Without staged the two are the same. */
typedef enum { KV_T1_AS_OPENED = 0, KV_T1_IN_PLACE = 1 } kv_t1_read;

/* Before a layer's K/V writes and attention for these sequences: waits for in-flight moves of this
 * layer (the per-layer fence) and stages the rows attention reads from STAGE (T2 where the backend
 * cannot read it in place or stage_t2 asks, T1 with --staged unless `how` is KV_T1_IN_PLACE) for
 * this layer. */
void kv_layer_begin(kv_cache *kv, const int *seqs, int n_seqs, int layer, kv_t1_read how);
/* Whether kv_layer_begin, given the same arguments, will wait for the copy queue in the call about
 * to run (moves in flight, or rows to stage): the forward brackets a call for the backend
 * (step_begin) only where it will not. */
int kv_step_may_wait(kv_cache *kv, const int *seqs, int n_seqs, kv_t1_read how);
/* The attention table of one layer for n query tokens (sequence seq[i] at position pos[i], both
 * appended already): fills the cache's fields of *a (n_tok, layer, pools, slot tables, n_pos, keep
 * masks and their stride, the weights the policy wants back in mass_mode, tables_gen); the caller
 * sets the rest (dimensions, queries, output, the mass buffer and its stride). With KV_T1_IN_PLACE
 * the tables hold T1 positions at their true slots even when the cache stages T1 (the call's
 * kv_layer_begin must have been given the same `how`). The arrays stay valid until the next
 * kv_attn_table, kv_append, kv_batch_end or kv_seq_* call. */
void kv_attn_table(kv_cache *kv, int layer, const int *seq, const int *pos, int n, kv_t1_read how, be_attn *a);
/* The weights of that table's attention, handed to the policy in one call: w[i] (at w + i *
 * n_head * stride) is token i's [n_head][stride] softmax weights. Nothing when mass_mode was
 * BE_MASS_NONE. */
void kv_attn_mass(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride);
/* 1 when this cache takes the weights where the backend wrote them (kv_attn_mass_device instead of
 * kv_attn_mass): a ranked policy (no hooks) on a backend that is not host memory and has
 * be_ops.score_add, unless kv_options.host_scores. The same for the cache's life. */
int kv_scores_on_device(const kv_cache *kv);
/* kv_attn_mass with w in backend memory (as the attention wrote it; it may be overwritten by ops
 * queued after this call): the generated tokens' weights are added to their sequences' scores by
 * the backend, queued in order, nothing read back; the host reads the scores when it ranks them. */
void kv_attn_mass_device(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride);
/* Bytes of scores read back from the backend since init, and in *reads (if not NULL) how many reads
 * (each a wait for the device); *uploads (if not NULL): whole score arrays sent up. 0 unless
 * kv_scores_on_device. */
uint64_t kv_scores_read_back(const kv_cache *kv, uint64_t *reads, uint64_t *uploads);

/* Attention weights of the query at q_pos, layer `layer`: att[h * att_stride + j] for heads
 * h < n_head and positions j <= q_pos (0 where masked or evicted). Policies accumulate scores here
 * (kv_attn_mass calls it per token). */
void kv_observe(kv_cache *kv, int seq, int layer, int q_pos, const float *att, int att_stride);

/* End of one forward call over these tokens' sequences (is_prompt per token, NULL: none): every
 * layer of the new tokens is written; for each sequence that decoded a token, a decode step ends
 * (scoring bookkeeping, and every delta steps the re-tiering, whose moves start asynchronously;
 * all sequences due in this step share one batch of moves). */
void kv_batch_end(kv_cache *kv, const int *seqs, const uint8_t *is_prompt, int n);
/* One decode step of one sequence ended (kv_batch_end of one decoded token). */
void kv_step_end(kv_cache *kv, int seq);

/* A host view of one layer, for tests and host-side readers: one K and one V row pointer per
 * position in original order (NULL when evicted), f32 (k/v) or fp16 (k16/v16) as the cache's
 * element type, T2 rows dequantised (into staging, or into the view's own buffer where attention
 * reads them in place: as a stage slot would hold them), and the keep mask. Needs host-addressable pools
 * (the CPU backend). Valid until the next kv_* call on the same sequence. */
typedef struct {
    const float *const *k;
    const float *const *v;
    const uint16_t *const *k16;
    const uint16_t *const *v16;
    const uint8_t *keep;   /* NULL (all kept) or keep[g * keep_stride + pos] != 0 for kv head g */
    int keep_stride;
    int n;                 /* positions 0..n-1 exist */
} kv_view;
void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out);

/* Statistics, summed over sequences (per-sequence with seq >= 0, since it was added): the public
 * struct itself (include/tierkv.h's tkv_stats, its fields documented there), so the engine hands it
 * out without a copy. Beyond the public comments: evicted_equiv is the T3 count for whole-token
 * policies; for the per-head baselines (H2O, R-KV, SnapKV keep different positions per row) the
 * positions each (layer, kv head) row has dropped, averaged. held_bytes = held (layer, kv head,
 * position) rows x 2*head_dim*(2 or 4 bytes) for the baselines (other policies: T0+T1+T2 bytes);
 * peak_held_bytes the most held right after a policy step; limit_bytes what the method's published
 * rule allows now (non-baselines: limit = budget, peak_held = 0). */
typedef tkv_stats kv_stats;
/* seq >= 0: a live sequence since it was added; seq < 0: the cache over its lifetime (live
 * sequences now, plus the counters of removed ones). */
void kv_get_stats(const kv_cache *kv, int seq, kv_stats *out);

/* Waits for every move in flight and settles their accounting (stats, log). */
void kv_sync(kv_cache *kv);

/* Stats as one JSON object, written with the engine's JSON writer (base/json.h). */
struct json_out;
void kv_stats_json(struct json_out *o, const kv_stats *s);
/* {"policy":..., "total":{...}, "seqs":[{...}, ...]} (live sequences), newline-terminated. */
void kv_stats_write_json(FILE *f, const kv_cache *kv);
/* A short table for people: one line per tier (tokens, MiB), moves, staging, times. seq < 0: total. */
void kv_stats_print(FILE *f, const kv_cache *kv, int seq);

/* One record per re-tiering of a sequence (after its batch completed). */
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
    double move_seconds;     /* transfer engine time of the batch it was part of */
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
 * score the prompt's own attention: full, hierarchy, evict, quant), so that a prompt prefix shared
 * with another sequence (kv_seq_share_prefix) is the same as one prefilled in place. */
int kv_policy_copies_prefix(kv_policy_kind k);
/* 1 if the policy with this T2 share stores tokens in T2 (quant always, hierarchy when t2_ratio > 0). */
int kv_policy_uses_t2(kv_policy_kind k, double t2_ratio);

/* ---- budgets without a cache (tierkv plan and the session's checks use the same rules) ---- */

typedef struct {
    int64_t token_bytes[3];      /* per tier */
    int64_t t0, t1, t2, t3;      /* tokens per sequence at length ctx */
    int raised;                  /* the T0 budget was raised to the protected tokens */
    int64_t protected_tokens;    /* per sequence at length ctx */
    int64_t t0_bytes_total;      /* for `batch` sequences together */
    int64_t stage_bytes_total;   /* the STAGE pool on a GPU, for `batch` sequences: fast memory too */
} kv_plan_result;
/* Where the tokens of `batch` sequences of `ctx` positions (`prompt` of them prompt) sit at the end
 * of a run, by the same budget code the cache runs (the steady state after a re-tiering, without its
 * headroom). Refuses bad options and budgets with kv_init's messages. */
int kv_plan(const kv_options *o, int batch, int ctx, int prompt, kv_plan_result *out, char *err, size_t errlen);

#endif
