/* baselines.h — the eviction baselines of the literature as pure selection functions.
 *
 * StreamingLLM, H2O, R-KV and SnapKV, each reduced to "given scores (or attention) and a token
 * budget, which positions does this head keep". Nothing here knows a model, a tier, a slot or a
 * byte: the KV policy (kv.c) calls these from its dispatch, turns the keep masks into moves, and
 * owns every buffer. docs/BASELINES.md gives the papers, every constant and where it came from.
 *
 * Conventions shared by every function below:
 *   - Positions are token indices 0..n-1 of ONE sequence, in original order.
 *   - keep[pos] is uint8: 1 = the head (or the whole token, for StreamingLLM) holds the position,
 *     0 = evicted. Selection functions write keep[0..n-1] completely; they never set keep[pos] = 1
 *     for a position the caller says is no longer held ("held" masks), since evicted rows are gone.
 *   - Budgets are token counts per (layer, kv head): the caller converts --hbm-ratio/--hbm-budget
 *     (kv_bl_budget_from_ratio below). budget >= number of held tokens always keeps everything.
 *   - Attention rows are what kv_observe receives: att[h * att_stride + j], softmax weights of the
 *     query for q head h over positions j <= q_pos (0 where masked or evicted). For kv head g of a
 *     model with group = n_head / n_head_kv q heads per kv head, pass att + g * group * att_stride
 *     and `group`: the rows of that kv head's q heads are consecutive (llama.cpp/HF layout).
 *   - Tie rule, everywhere: a higher score ranks higher; on equal scores the LOWER position ranks
 *     higher (is kept first, evicted last). NaN scores rank below every number. So results are a
 *     pure function of the inputs, whatever the platform.
 *   - Errors (bad budgets or options) return -1 and write one line into err; keep is then
 *     untouched. Per-step functions never allocate: scratch comes from the caller
 *     (kv_bl_*_scratch_bytes), long-lived state from an init/free pair.
 *   - Threading: none inside; distinct states/scratch may be used from distinct threads. */
#ifndef TKV_KV_BASELINES_H
#define TKV_KV_BASELINES_H
#include <stddef.h>
#include <stdint.h>

/* Largest GQA group (q heads per kv head) the functions accept. */
#define KV_BL_MAX_GROUP 256

/* How the q heads that share one kv head (grouped-query attention) combine into the kv head's
 * score. The keep masks are per kv head (a K/V row is shared by its group), so the group needs one
 * number per position. MEAN of the group's weights ranks exactly like their SUM. */
typedef enum {
    KV_BL_GQA_MEAN = 0, /* mean over the group's q heads */
    KV_BL_GQA_MAX = 1,  /* max over the group's q heads (R-KV's compute_attention_scores default) */
} kv_bl_gqa;

/* Pooling of a score row along positions (SnapKV, R-KV): odd kernel, stride 1, "same" length.
 * MAX ignores out-of-range neighbours (torch max_pool1d pads with -inf); AVG counts them as 0 and
 * always divides by the kernel (torch avg_pool1d, count_include_pad=True). */
typedef enum {
    KV_BL_POOL_MAX = 0,
    KV_BL_POOL_AVG = 1,
} kv_bl_pool;

/* ---- budgets ------------------------------------------------------------------------------ */

/* --hbm-ratio r: the share of the current length n a policy may keep: floor(r * n + 1e-9),
 * clamped to [0, n]; r >= 1 gives n (keeps everything). --hbm-budget (absolute) is converted to a
 * token count by the caller (bytes / bytes per token per head) and passed as is. */
int kv_bl_budget_from_ratio(double ratio, int n);

/* ---- StreamingLLM (Xiao et al., 2023) --------------------------------------------------------
 * Keeps the first `sinks` positions (attention sinks) and the most recent budget - sinks
 * positions; evicts the rest. Position-wise: the same for every layer and head.
 * Who calls it: the policy, after every appended token (prompt end and each decode step); the
 * mask is monotone (a position, once evicted, is evicted at every later n for the same budget).
 * n >= 0; budget >= n keeps all. Otherwise requires 0 <= sinks < budget (the authors' assert).
 * Writes keep[0..n-1]. Returns 0, or -1 with a message. */
int kv_bl_streaming_select(int n, int budget, int sinks, uint8_t *keep, char *err, size_t errlen);

/* ---- H2O (Zhang et al., 2023) ----------------------------------------------------------------
 * One state per (layer, kv head) of one sequence. score[j] = sum, over every query since position
 * j entered, of the attention that query's q heads (combined by `gqa`) gave to j. The budget
 * splits into a recent window (the last `recent` positions, never evicted) and heavy hitters;
 * once the head holds more than the budget, the held non-recent position with the lowest score is
 * evicted (tie rule above: among equal scores the highest position goes first). Evictions are
 * final: an evicted position never comes back and stops accumulating. */
typedef struct {
    float *score;  /* [cap] accumulated attention per position; 0 once evicted or before seen */
    uint8_t *keep; /* [cap] 1 while this head holds the position (valid for j < n) */
    int cap;       /* positions the state can track (the sequence's n_ctx) */
    int n;         /* positions seen so far: 0..n-1 */
    int n_kept;    /* number of j < n with keep[j] == 1 */
    int *cand;         /* [cap] scratch of kv_bl_h2o_enforce: candidate positions */
    float *cand_score; /* [cap] scratch: their scores */
    void *work;        /* [cap] scratch: sort pairs */
} kv_bl_h2o;

/* Allocates the state for up to cap positions (cap >= 1). Returns 0 or -1 with a message. */
int kv_bl_h2o_init(kv_bl_h2o *s, int cap, char *err, size_t errlen);
void kv_bl_h2o_free(kv_bl_h2o *s);
/* Forgets the sequence (n = 0, scores 0). */
void kv_bl_h2o_reset(kv_bl_h2o *s);

/* Adds one query's attention: att[h * att_stride + j] for h < group (this kv head's q heads) and
 * j < n, where n = q_pos + 1 (s->n <= n <= cap; positions s->n..n-1 enter as held with score 0
 * before the add). Evicted positions are skipped. Who calls it: kv_observe, for every query
 * (each prompt token during prefill, then each decode step), every layer and kv head. */
void kv_bl_h2o_accumulate(kv_bl_h2o *s, const float *att, int att_stride, int group, int n,
                          kv_bl_gqa gqa);

/* The recent window of a budget: floor(budget * recent_share) (paper and H2O code: half of the
 * budget, share 0.5); the heavy-hitter part is budget - recent. */
int kv_bl_h2o_recent(int budget, double recent_share);

/* Evicts the held position j < n - recent with the lowest score (ties: highest position).
 * Returns the position, or -1 when no held position lies outside the recent window. */
int kv_bl_h2o_evict_one(kv_bl_h2o *s, int recent);

/* Evicts (kv_bl_h2o_evict_one, repeatedly) until the head holds at most `budget` positions.
 * Who calls it: the policy after every accumulate round of a step (kv_step_end; at prompt end it
 * may evict many at once, later usually one per step). Requires budget >= 1 and
 * 0 <= recent <= budget. Returns the number evicted (>= 0), or -1 with a message. Read the result
 * from s->keep[0..s->n-1]. */
int kv_bl_h2o_enforce(kv_bl_h2o *s, int budget, int recent, char *err, size_t errlen);

/* ---- R-KV (Cai et al., 2025) -----------------------------------------------------------------
 * Decode-time compression for reasoning models. At each compression point the last `window`
 * held positions (the observation window) are kept; every other held position j gets
 *   importance[j] = max-pool_kernel( mean over the window's queries of the attention of the query
 *                   (q heads combined by `gqa`), renormalised over the held non-window positions )
 *   redundancy[j] = softmax over held positions of the column mean of the cosine-similarity matrix
 *                   of the head's keys (diagonal 0; in each row i the similarity to the highest
 *                   position i' with cos > sim_threshold is zeroed: that most recent near-duplicate
 *                   is "retained"; a row without such a neighbour zeroes its first column instead,
 *                   as the authors' code does)
 *   final[j]      = lambda * importance[j] - (1 - lambda) * redundancy[j]
 * and the top budget - window by final are kept: important and non-redundant tokens survive.
 * With lambda = 1 this is the decode-time SnapKV of the R-KV paper's comparison. */
typedef struct {
    int window;            /* observation queries = always-kept last positions (8) */
    int kernel;            /* max-pool kernel along positions, odd (7) */
    double lambda;         /* importance weight; redundancy gets 1 - lambda (0.1) */
    double sim_threshold;  /* cosine above which two keys are near-duplicates (0.5) */
    int interval;          /* compress every `interval` generated tokens (128) */
    kv_bl_gqa gqa;         /* group combine for importance (KV_BL_GQA_MAX) */
} kv_bl_rkv_opts;
void kv_bl_rkv_opts_default(kv_bl_rkv_opts *o);
/* 0 if usable: window >= 1, odd kernel >= 1, 0 <= lambda <= 1, interval >= window. */
int kv_bl_rkv_opts_check(const kv_bl_rkv_opts *o, char *err, size_t errlen);

/* Whether a compression is due once the cache holds positions 0..n-1 (n_prompt = prompt length):
 * at the end of the prompt (n == n_prompt), then at decode when (n - 1) % interval == 0 (the
 * authors set the flag when their running length is a multiple of 128 and compress in the next
 * forward, after appending its token), except a decode point with n - n_prompt < window, whose
 * observation window would overlap the prompt-end one (skipped, so each query observes for one
 * compression only). Compressing only does something when the head holds more than the budget;
 * the caller may skip the call otherwise. */
int kv_bl_rkv_due(const kv_bl_rkv_opts *o, int n, int n_prompt);

/* The compression point n_c whose observation window contains the query at q_pos
 * (n_c - window <= q_pos < n_c and kv_bl_rkv_due(n_c)), or 0 if none. The policy uses it in
 * kv_observe to decide whether to accumulate importance for this query, and n_obs = n_c - window. */
int kv_bl_rkv_window_end(const kv_bl_rkv_opts *o, int q_pos, int n_prompt);

/* Adds one window query's contribution to imp[j], j < n_obs (n_obs = n_c - window):
 * for each q head h < group, w_h[j] = att[h*att_stride + j] / sum_{held j' < n_obs} att[h*..+j']
 * (0 if that sum is 0), combined over h by o->gqa, divided by o->window (mean over the window's
 * queries), added for held j only. held: [n_obs] mask of this head (NULL = all held).
 * The caller zeroes imp[0..n_obs-1] before the first window query of each compression point. */
void kv_bl_rkv_observe(const kv_bl_rkv_opts *o, float *imp, const float *att, int att_stride,
                       int group, int n_obs, const uint8_t *held);

/* Scratch for kv_bl_rkv_select on n positions. */
size_t kv_bl_rkv_scratch_bytes(int n);

/* The compression of one (layer, kv head) at n_c = n positions.
 *   imp:    [n - window] importance accumulated by kv_bl_rkv_observe (unpooled).
 *   k_rows: k_rows[j] = the K row of position j (the kv_view's k, kv_dim floats) for held j;
 *           this head's key is k_rows[j] + k_offset (k_offset = g * head_dim), head_dim floats.
 *   held:   [n] the head's current mask (NULL = all held). The window, positions
 *           n - window..n - 1, must be held (it always is: R-KV never evicts its newest tokens).
 *   keep:   [n] out. If the head holds <= budget positions, keep = held. Otherwise keep holds
 *           exactly `budget` positions: the window plus the top budget - window by final score.
 * Requires budget > window (the authors' assert). Returns 0 or -1 with a message. */
int kv_bl_rkv_select(const kv_bl_rkv_opts *o, int n, int budget, const float *imp,
                     const float *const *k_rows, int k_offset, int head_dim, const uint8_t *held,
                     uint8_t *keep, void *scratch, size_t scratch_bytes, char *err, size_t errlen);

/* ---- SnapKV (Li et al., 2024) ----------------------------------------------------------------
 * Prompt-time selection, once, at the end of the prompt (n = prompt length). The last `window`
 * prompt positions are the observation window and are kept; for each earlier position j and each
 * q head h, score_h[j] = sum over the window's queries of their (causal softmax) attention to j;
 * the group's rows combine by `gqa`, the row is pooled along positions, and the top
 * budget - window prefix positions are kept. Decode tokens are never evicted by SnapKV (the
 * original method); for a decode-time variant use kv_bl_rkv_* with lambda = 1. */
typedef struct {
    int window;       /* observation window at the end of the prompt (32) */
    int kernel;       /* pooling kernel, odd (7) */
    kv_bl_pool pool;  /* KV_BL_POOL_MAX */
    kv_bl_gqa gqa;    /* group combine of the per-q-head scores (KV_BL_GQA_MAX) */
} kv_bl_snapkv_opts;
void kv_bl_snapkv_opts_default(kv_bl_snapkv_opts *o);
/* 0 if usable: window >= 1, odd kernel >= 1. */
int kv_bl_snapkv_opts_check(const kv_bl_snapkv_opts *o, char *err, size_t errlen);

/* Adds the attention of one window query (q_pos in [n - window, n)) to acc[h * acc_stride + j],
 * h < group, j < n_prefix = n - window: the per-q-head sums. The caller zeroes acc first. */
void kv_bl_snapkv_observe(float *acc, int acc_stride, const float *att, int att_stride, int group,
                          int n_prefix);

size_t kv_bl_snapkv_scratch_bytes(int n);

/* Selection for one (layer, kv head) at the end of a prompt of n positions.
 *   acc: per-q-head window sums from kv_bl_snapkv_observe, acc[h * acc_stride + j], j < n - window.
 *   keep: [n] out. n <= budget keeps all; otherwise exactly `budget` positions: the window plus
 *   the top budget - window prefix positions by pooled score.
 * Requires budget > window when n > budget. Returns 0 or -1 with a message. */
int kv_bl_snapkv_select(const kv_bl_snapkv_opts *o, int n, int budget, const float *acc,
                        int acc_stride, int group, uint8_t *keep, void *scratch,
                        size_t scratch_bytes, char *err, size_t errlen);

/* ---- shared helpers (used by the methods above; usable by the policy) ----------------------- */

/* out[j] = pool of in[] over [j - kernel/2, j + kernel/2] (see kv_bl_pool). odd kernel >= 1. */
void kv_bl_pool1d(const float *in, int m, int kernel, kv_bl_pool kind, float *out);

/* Combines `group` rows (row h at x[h * stride]) at column j by `gqa`. */
float kv_bl_gqa_combine(const float *x, int stride, int group, int j, kv_bl_gqa gqa);

/* Sets keep[pos[i]] = 1 for the k best of the m candidates (score[i], pos[i]) by the tie rule
 * above; does not touch other entries. pairs: scratch of m * kv_bl_pair_bytes() bytes. */
size_t kv_bl_pair_bytes(void);
void kv_bl_keep_topk(const float *score, const int *pos, int m, int k, uint8_t *keep, void *pairs);

#endif
