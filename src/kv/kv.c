/* kv.c — the KV cache behind kv.h: token slots across the tiers, appends, per-layer views with
 * fences and staging, scoring from kv_observe, and re-tiering into a batch of moves for the transfer
 * engine. The policy (who goes where) is in kv_policy.c, storage in kv_store.c, the T2 codec in
 * kv_codec.c, the engine thread in kv_xfer.c, reporting in kv_stats.c, the checker in kv_check.c.
 *
 * Budgets (kv_options): T0 is a ratio of the current length (hbm_ratio) or an absolute byte budget
 * for all sequences together (hbm_budget_bytes), split EQUALLY: each sequence gets
 * floor(bytes / n_seq / token_bytes) T0 slots, preallocated, so sequences never compete for T0 and a
 * sequence's placement does not depend on its neighbours. T2 and eviction are ratios of the current
 * length; T1 takes the rest. Policy full ignores budgets (everything stays in T0).
 *
 * Headroom: new tokens enter T0 between re-tierings, so a re-tiering fills T0 only to
 * budget - headroom: delta tokens for an absolute budget, ceil(delta * (1 - hbm_ratio)) + 1 for a
 * ratio (the budget grows by hbm_ratio per token), never below the protected tokens. If a new token
 * still would overflow T0 (prompt tokens, rounding), the lowest-scored unprotected T0 token is demoted
 * synchronously to the policy's overflow tier (stats.sync_demotions).
 *
 * Moves: at re-tiering only tokens whose tier changes move. Destination slots are allocated here on
 * the main thread; a T0 slot given up by a demoted (or evicted) token is handed straight to a promoted
 * token, so T0 never counts both; other source slots are freed when the batch is done. Within a layer
 * the engine copies demotions before promotions, so a recycled slot is read before it is overwritten.
 * A new token may also take a T0 slot whose demotion is still in flight: kv_put fences on the layer
 * before writing the row, exactly as kv_view_layer does.
 *
 * Hook-only policies (the baselines, kv_baselines.c): no ranking, no moves, no protection; T0 has a
 * slot for every position and the policy's step (policy_step: at the prompt end, then after each
 * decode step) clears per-(layer, kv head) keep masks and evicts whole tokens, whose slots are freed
 * at once. Their budget is checked per row by kv_check against the limit the step reports. */
#include "kv/kv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/half.h"
#include "kv/kv_internal.h"
#include "base/clock.h"

void kv_options_default(kv_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = KV_POLICY_FULL;
    o->hbm_ratio = o->t2_ratio = o->evict_ratio = -1.0;
    o->delta = 64;
    o->sinks = 4;
    o->window = 64;
    o->f16 = 1; /* llama.cpp's default cache type; f32 on request */
}

/* Sets the keep mask of position pos for every layer and kv head (head-wise policies only). */
static void set_keep(const kv_cache *kv, kv_seq *s, int pos, uint8_t v) {
    if (!s->keep) return;
    for (size_t r = 0; r < (size_t)kv->o.n_layer * kv->o.n_head_kv; r++) s->keep[r * kv->o.n_ctx + pos] = v;
}

static kv_seq *get_seq(const kv_cache *kv, int seq) {
    TKV_ASSERT(seq >= 0 && seq < kv->o.n_seq);
    return &kv->seq[seq];
}

static int64_t elem_bytes(const kv_options *o) { return o->f16 ? (int64_t)sizeof(uint16_t) : (int64_t)sizeof(float); }

/* The store kind of a tier: T0/T1 hold the cache's element type, T2 int8. */
static int tier_kind(const kv_options *o, int tier) {
    return tier == KV_T2 ? KV_STORE_Q8 : o->f16 ? KV_STORE_F16 : KV_STORE_F32;
}

int64_t kv_row_bytes(const kv_cache *kv) { return 2 * (int64_t)kv->o.head_dim * elem_bytes(&kv->o); }

int64_t kv_token_bytes(const kv_cache *kv, int tier) {
    if (tier == KV_T3) return 0;
    return store_kind_token_bytes(tier_kind(&kv->o, tier), kv->o.n_layer, kv->o.n_head_kv, kv->o.head_dim);
}

/* ---- protection and budgets ---- */

int kv_is_protected(const kv_cache *kv, const kv_seq *s, int pos, int len) {
    return s->prompt[pos] || pos < kv->o.sinks || pos >= len - kv->window;
}

int kv_prot_count(const kv_cache *kv, const kv_seq *s, int len) {
    int n = s->n_prompt, sink_end = kv->o.sinks < len ? kv->o.sinks : len;
    for (int i = 0; i < sink_end; i++) n += !s->prompt[i];
    int w0 = len - kv->window;
    if (w0 < sink_end) w0 = sink_end;
    for (int i = w0; i < len; i++) n += !s->prompt[i];
    return n;
}

int kv_t0_budget(const kv_cache *kv, const kv_seq *s, int len, int *raised) {
    if (raised) *raised = 0;
    if (!kv->ops->tiered || !kv->ops->select) return kv->o.n_ctx; /* full, or a baseline that evicts itself */
    if (kv->abs_tokens > 0) return kv->abs_tokens;
    int b = kv->o.hbm_ratio >= 0 ? (int)floor(kv->o.hbm_ratio * len + 1e-9) : 0;
    int p = kv_prot_count(kv, s, len);
    if (b < p) {
        if (raised) *raised = 1;
        b = p;
    }
    return b;
}

static int ratio_tokens(double r, int len) { return r > 0 ? (int)floor(r * len + 1e-9) : 0; }

/* ---- init / free ---- */

static int check_ratio(const char *name, double r, char *err, size_t errlen) {
    if (isnan(r) || r > 1.0)
        return tkv_errf(err, errlen, "kv: %s %g is not a share of the length: it must lie in [0, 1]", name, r);
    return 0;
}

static int validate(const kv_options *o, const kv_policy_ops *ops, int64_t tb, int *abs_tokens, char *err, size_t errlen) {
    *abs_tokens = 0;
    if (o->n_layer <= 0 || o->n_head <= 0 || o->n_head_kv <= 0 || o->head_dim <= 0 || o->n_seq <= 0 || o->n_ctx <= 0)
        return tkv_errf(err, errlen, "kv: bad shape (layers %d, heads %d, kv heads %d, head dim %d, seqs %d, ctx %d)",
                        o->n_layer, o->n_head, o->n_head_kv, o->head_dim, o->n_seq, o->n_ctx);
    if (o->n_head % o->n_head_kv)
        return tkv_errf(err, errlen, "kv: %d heads are not a multiple of %d kv heads", o->n_head, o->n_head_kv);
    if (!ops) return tkv_errf(err, errlen, "kv: unknown policy %d", (int)o->policy);
    if (!ops->tiered) return 0; /* full: budgets do not apply */
    if (!ops->select && !ops->hooks)
        return tkv_errf(err, errlen, "kv: policy %s is not wired to its selection functions yet (src/kv/baselines.h)", ops->name);
    if (o->delta < 1) return tkv_errf(err, errlen, "kv: delta %d: re-tiering needs delta >= 1 decode steps", o->delta);
    if (o->sinks < 0 || o->window < 0)
        return tkv_errf(err, errlen, "kv: sinks %d and window %d must be >= 0", o->sinks, o->window);
    if (check_ratio("hbm ratio", o->hbm_ratio, err, errlen) || check_ratio("t2 ratio", o->t2_ratio, err, errlen) ||
        check_ratio("evict ratio", o->evict_ratio, err, errlen))
        return -1;
    if (o->hbm_ratio >= 0 && o->hbm_budget_bytes > 0)
        return tkv_errf(err, errlen, "kv: give the T0 budget once: either a ratio (%g) or bytes (%llu), not both",
                        o->hbm_ratio, (unsigned long long)o->hbm_budget_bytes);
    int baseline = o->policy >= KV_POLICY_STREAMING;
    if (!baseline && o->hbm_ratio < 0 && o->hbm_budget_bytes == 0)
        return tkv_errf(err, errlen, "kv: policy %s needs a T0 budget (hbm ratio or hbm budget bytes)", ops->name);
    if (o->t2_ratio >= 0 && !ops->t2_ratio_ok)
        return tkv_errf(err, errlen, "kv: policy %s has no T2 share to set (t2 ratio %g); use policy hierarchy",
                        ops->name, o->t2_ratio);
    if (o->evict_ratio >= 0 && !ops->evict_ratio_ok)
        return tkv_errf(err, errlen, "kv: policy %s decides eviction itself; an evict ratio (%g) does not apply",
                        ops->name, o->evict_ratio);
    double sum = (o->hbm_ratio > 0 ? o->hbm_ratio : 0) + (o->t2_ratio > 0 ? o->t2_ratio : 0) +
                 (o->evict_ratio > 0 ? o->evict_ratio : 0);
    if (sum > 1.0 + 1e-9)
        return tkv_errf(err, errlen, "kv: budgets do not add up: hbm %g + t2 %g + evict %g = %g of the length (> 1)",
                        o->hbm_ratio > 0 ? o->hbm_ratio : 0, o->t2_ratio > 0 ? o->t2_ratio : 0,
                        o->evict_ratio > 0 ? o->evict_ratio : 0, sum);
    if (o->hbm_budget_bytes > 0) {
        uint64_t per_seq = o->hbm_budget_bytes / (uint64_t)o->n_seq / (uint64_t)tb;
        /* the baselines protect nothing of ours (each raises its budget to its own floor) */
        int need = ops->select ? o->sinks + (o->window > 1 ? o->window : 1) : 1;
        if (per_seq < (uint64_t)need)
            return tkv_errf(err, errlen,
                            "kv: hbm budget %llu bytes / %d sequences = %llu tokens of %lld bytes each per sequence, "
                            "fewer than the %d protected sinks + window tokens (needs %lld bytes)",
                            (unsigned long long)o->hbm_budget_bytes, o->n_seq, (unsigned long long)per_seq,
                            (long long)tb, need, (long long)need * tb * o->n_seq);
        *abs_tokens = per_seq > (uint64_t)o->n_ctx ? o->n_ctx : (int)per_seq;
    }
    return 0;
}

static void xfer_run_layer(void *ctx, int seq, int layer);
static void policy_step(kv_cache *kv, int seq);

kv_cache *kv_init(const kv_options *o, char *err, size_t errlen) {
    const kv_policy_ops *ops = kv_policy_ops_of(o->policy);
    int64_t tb = (int64_t)(o->n_layer > 0 ? o->n_layer : 0) * 2 * o->n_head_kv * (int64_t)o->head_dim * elem_bytes(o);
    int abs_tokens = 0;
    if (validate(o, ops, tb, &abs_tokens, err, errlen)) return NULL;
    kv_cache *kv = tkv_xcalloc(1, sizeof *kv);
    kv->o = *o;
    kv->ops = ops;
    kv->kv_dim = o->n_head_kv * o->head_dim;
    kv->abs_tokens = abs_tokens;
    kv->window = o->window > 1 ? o->window : 1;
    size_t n = (size_t)o->n_ctx;
    kv->seq = tkv_xcalloc((size_t)o->n_seq, sizeof(kv_seq));
    for (int q = 0; q < o->n_seq; q++) {
        kv_seq *s = &kv->seq[q];
        s->tier = tkv_xcalloc(n, 1);
        s->slot = tkv_xcalloc(n, sizeof(int32_t));
        s->prompt = tkv_xcalloc(n, 1);
        s->lossy = tkv_xcalloc(n, 1);
        s->score = tkv_xcalloc(n, sizeof(double));
        if (ops->head_scores) s->head_score = tkv_xcalloc(n * o->n_head_kv, sizeof(float));
        if (ops->prefill_scores) s->prefill_score = tkv_xcalloc(n * o->n_head_kv, sizeof(float));
        if (ops->head_masks) s->keep = tkv_xcalloc(n * o->n_head_kv * o->n_layer, 1);
        /* hook-only policies (baselines) evict by themselves: T0 is sized for everything */
        int t0_slots = abs_tokens > 0 && ops->select ? abs_tokens : o->n_ctx;
        store_init(&s->st[KV_T0], tier_kind(o, KV_T0), t0_slots, o->n_layer, o->n_head_kv, o->head_dim);
        store_init(&s->st[KV_T1], tier_kind(o, KV_T1), ops->uses_t1 ? o->n_ctx : 0, o->n_layer, o->n_head_kv, o->head_dim);
        store_init(&s->st[KV_T2], tier_kind(o, KV_T2), ops->uses_t2 ? o->n_ctx : 0, o->n_layer, o->n_head_kv, o->head_dim);
        s->prot = tkv_xcalloc(n, 1);
        s->target = tkv_xcalloc(n, 1);
        s->order = tkv_xcalloc(n, sizeof(int32_t));
        s->scratch = tkv_xcalloc(n, sizeof(int32_t));
        s->recycle = tkv_xcalloc(n, sizeof(int32_t));
        s->moves = tkv_xcalloc(n, sizeof(kv_move));
        s->deferred = tkv_xcalloc(n, sizeof(kv_slot_ref));
        s->vk = tkv_xcalloc(n, sizeof(float *));
        s->vv = tkv_xcalloc(n, sizeof(float *));
        if (o->f16) {
            s->hk = tkv_xcalloc(n, sizeof(uint16_t *));
            s->hv = tkv_xcalloc(n, sizeof(uint16_t *));
            if (ops->hooks) s->hook_k = tkv_xmalloc(n * kv->kv_dim * sizeof(float));
        }
        if (ops->uses_t1 || ops->uses_t2) s->stage = tkv_xmalloc(n * 2 * kv->kv_dim * (size_t)elem_bytes(o));
    }
    kv->log = tkv_xcalloc(KV_RETIER_LOG_MAX, sizeof(kv_retier_record));
    for (int q = 0; q < o->n_seq && ops->hooks && ops->hooks->init; q++) {
        kv->seq[q].pstate = ops->hooks->init(o, err, errlen);
        if (!kv->seq[q].pstate) {
            kv_free(kv);
            return NULL;
        }
    }
    if (ops->select && !o->sync_transfers) kv->xfer = xfer_init(xfer_run_layer, kv, o->n_layer, o->n_seq);
    return kv;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    xfer_free(kv->xfer); /* waits for in-flight batches */
    for (int q = 0; q < kv->o.n_seq; q++) {
        kv_seq *s = &kv->seq[q];
        free(s->tier); free(s->slot); free(s->prompt); free(s->lossy); free(s->score);
        free(s->head_score); free(s->prefill_score); free(s->keep);
        for (int t = 0; t < 3; t++) store_free(&s->st[t]);
        free(s->prot); free(s->target); free(s->order); free(s->scratch); free(s->recycle);
        free(s->moves); free(s->deferred); free(s->vk); free(s->vv); free(s->stage);
        free(s->hk); free(s->hv); free(s->hook_k);
        if (s->pstate && kv->ops->hooks->free) kv->ops->hooks->free(s->pstate);
    }
    free(kv->seq);
    free(kv->log);
    free(kv);
}

/* ---- moves ---- */

/* One layer of a batch: demotions first (they come first in s->moves), then the rest. */
static void run_layer_moves(kv_cache *kv, kv_seq *s, int layer) {
    for (int i = 0; i < s->n_moves; i++) {
        const kv_move *m = &s->moves[i];
        store_copy_layer(&s->st[m->from], m->src, &s->st[m->to], m->dst, layer);
    }
    (void)kv;
}

static void xfer_run_layer(void *ctx, int seq, int layer) {
    kv_cache *kv = ctx;
    run_layer_moves(kv, &kv->seq[seq], layer);
}

static void retire_batch(kv_cache *kv, int seq, double move_seconds) {
    kv_seq *s = &kv->seq[seq];
    for (int i = 0; i < s->n_deferred; i++) store_release(&s->st[s->deferred[i].tier], s->deferred[i].slot);
    s->n_deferred = 0;
    s->n_moves = 0;
    s->batch_active = 0;
    s->rec.move_seconds = move_seconds;
    s->c.move_seconds += move_seconds;
    if (kv->log_n < KV_RETIER_LOG_MAX) kv->log[kv->log_n++] = s->rec;
    if (kv->cb) kv->cb(kv->cb_ctx, &s->rec);
}

void kv_complete_batch(kv_cache *kv, int seq) {
    kv_seq *s = &kv->seq[seq];
    if (!s->batch_active) return;
    s->c.fence_wait_seconds += xfer_wait_layer(kv->xfer, seq, kv->o.n_layer - 1);
    retire_batch(kv, seq, xfer_batch_seconds(kv->xfer, seq));
}

static void fence(kv_cache *kv, int seq, int layer) {
    kv_seq *s = &kv->seq[seq];
    if (s->batch_active) s->c.fence_wait_seconds += xfer_wait_layer(kv->xfer, seq, layer);
}

void kv_sync(kv_cache *kv) {
    for (int q = 0; q < kv->o.n_seq; q++) kv_complete_batch(kv, q);
}

/* Moves token pos out of T0 right now (all layers, on this thread). No batch may be in flight. */
static void demote_sync(kv_cache *kv, kv_seq *s, int pos, int to) {
    TKV_ASSERT(!s->batch_active && s->tier[pos] == KV_T0);
    int src = s->slot[pos];
    if (to == KV_T3) {
        s->slot[pos] = -1;
        s->c.tokens_evicted++;
        set_keep(kv, s, pos, 0);
    } else {
        int dst = store_alloc(&s->st[to]);
        TKV_ASSERT(dst >= 0);
        for (int l = 0; l < kv->o.n_layer; l++) store_copy_layer(&s->st[KV_T0], src, &s->st[to], dst, l);
        s->slot[pos] = dst;
        s->c.bytes_moved_down += kv_token_bytes(kv, KV_T0);
        if (to == KV_T2) s->lossy[pos] = 1;
    }
    store_release(&s->st[KV_T0], src);
    s->tier[pos] = (uint8_t)to;
    s->ntok[KV_T0]--;
    s->ntok[to]++;
    s->c.sync_demotions++;
}

/* Lowest-scored unprotected T0 token that is already written (ties: the earlier position goes). */
static int pick_victim(const kv_cache *kv, const kv_seq *s, int new_len) {
    int best = -1;
    for (int i = 0; i < s->fresh_from && i < s->len; i++) {
        if (s->tier[i] != KV_T0 || kv_is_protected(kv, s, i, new_len)) continue;
        if (best < 0 || s->score[i] < s->score[best]) best = i;
    }
    return best;
}

/* Finds a T0 slot for the token being appended at position len (prompt flag already set). */
static int t0_slot_for_new(kv_cache *kv, kv_seq *s, char *err, size_t errlen) {
    kv_store *t0 = &s->st[KV_T0];
    int new_len = s->len + 1;
    for (;;) {
        int budget = kv_t0_budget(kv, s, new_len, NULL);
        /* a T0 slot whose demotion is in flight: in use already, so the budget is unchanged */
        for (int i = s->n_deferred - 1; i >= 0 && s->batch_active; i--) {
            if (s->deferred[i].tier != KV_T0) continue;
            int slot = s->deferred[i].slot;
            s->deferred[i] = s->deferred[--s->n_deferred];
            return slot;
        }
        if (store_in_use(t0) + 1 <= budget && t0->n_free > 0) return store_alloc(t0);
        if (s->batch_active) {
            kv_complete_batch(kv, (int)(s - kv->seq));
            continue;
        }
        int v = pick_victim(kv, s, new_len);
        if (v < 0)
            return tkv_errf(err, errlen,
                            "kv: T0 budget of %d tokens is full of protected or unwritten tokens at position %d "
                            "(%d prompt tokens, sinks %d, window %d)",
                            budget, s->len, s->n_prompt, kv->o.sinks, kv->window);
        demote_sync(kv, s, v, kv->ops->overflow_tier);
    }
}

static void update_peak(const kv_cache *kv, kv_seq *s) {
    int64_t t0_bytes = store_in_use(&s->st[KV_T0]) * kv_token_bytes(kv, KV_T0);
    if (t0_bytes > s->c.peak_t0_bytes) s->c.peak_t0_bytes = t0_bytes;
}

/* ---- the interface ---- */

void kv_seq_reset(kv_cache *kv, int seq) {
    kv_seq *s = get_seq(kv, seq);
    kv_complete_batch(kv, seq);
    for (int i = 0; i < s->len; i++)
        if (s->tier[i] != KV_T3) store_release(&s->st[s->tier[i]], s->slot[i]);
    s->len = s->n_prompt = s->fresh_from = s->steps_since = 0;
    s->n_decode = 0;
    s->keep_used = 0;
    s->bl_budget = s->bl_limit = s->bl_len = 0;
    s->bl_held_rows = 0;
    memset(s->ntok, 0, sizeof s->ntok);
    if (s->pstate && kv->ops->hooks->reset) kv->ops->hooks->reset(s->pstate);
}

int kv_seq_len(const kv_cache *kv, int seq) { return get_seq(kv, seq)->len; }

int kv_append(kv_cache *kv, int seq, int pos, int is_prompt, char *err, size_t errlen) {
    kv_seq *s = get_seq(kv, seq);
    if (pos != s->len) return tkv_errf(err, errlen, "kv: append at position %d, sequence %d holds %d", pos, seq, s->len);
    if (pos >= kv->o.n_ctx) return tkv_errf(err, errlen, "kv: sequence %d is full (%d positions)", seq, kv->o.n_ctx);
    if (is_prompt && kv->abs_tokens > 0 && kv->ops->select) { /* (the baselines compress the prompt) */
        /* the prompt, the sinks outside it (future ones counted as generated) and a full window must fit
         * in the sequence's T0 share, or generation could not go on */
        int sinks_np = 0;
        for (int i = 0; i < kv->o.sinks; i++) sinks_np += i == pos ? 0 : i > pos ? 1 : !s->prompt[i];
        int need = s->n_prompt + 1 + sinks_np + kv->window;
        if (need > kv->abs_tokens)
            return tkv_errf(err, errlen,
                            "kv: prompt token %d does not fit in T0: %d prompt tokens + %d sinks + window %d = %d "
                            "tokens, the hbm budget gives %d per sequence (%lld bytes); raise the budget or shorten the prompt",
                            pos, s->n_prompt + 1, sinks_np, kv->window, need, kv->abs_tokens,
                            (long long)kv->abs_tokens * kv_token_bytes(kv, KV_T0));
    }
    if (!is_prompt && pos > 0 && s->prompt[pos - 1]) policy_step(kv, seq); /* the end of a prompt */
    s->prompt[pos] = (uint8_t)(is_prompt != 0);
    s->n_prompt += s->prompt[pos]; /* counted now: the budget below must see the new token */
    int slot;
    if (!kv->ops->tiered) {
        slot = store_alloc(&s->st[KV_T0]);
    } else {
        slot = t0_slot_for_new(kv, s, err, errlen);
        if (slot < 0) {
            s->n_prompt -= s->prompt[pos];
            s->prompt[pos] = 0;
            return -1;
        }
    }
    TKV_ASSERT(slot >= 0);
    s->tier[pos] = KV_T0;
    s->slot[pos] = slot;
    s->lossy[pos] = 0;
    s->score[pos] = 0;
    set_keep(kv, s, pos, 1);
    for (int g = 0; g < kv->o.n_head_kv; g++) {
        size_t i = (size_t)g * kv->o.n_ctx + pos;
        if (s->head_score) s->head_score[i] = 0;
        if (s->prefill_score) s->prefill_score[i] = 0;
    }
    s->len++;
    s->ntok[KV_T0]++;
    update_peak(kv, s);
    return 0;
}

int kv_seq_copy_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen) {
    const kv_seq *s = get_seq(kv, src);
    if (!kv_policy_copies_prefix(kv->o.policy))
        return tkv_errf(err, errlen, "kv: policy %s scores the prompt's own attention; its prefix cannot be copied", kv->ops->name);
    if (src == dst || get_seq(kv, dst)->len != 0 || n < 1 || n > s->len)
        return tkv_errf(err, errlen, "kv: cannot copy %d positions of sequence %d (holding %d) into sequence %d (holding %d)", n, src,
                        s->len, dst, get_seq(kv, dst)->len);
    for (int p = 0; p < n; p++)
        if (s->tier[p] != KV_T0 && s->tier[p] != KV_T1)
            return tkv_errf(err, errlen, "kv: position %d of sequence %d is not held exactly (tier %d)", p, src, s->tier[p]);
    size_t kd = (size_t)kv->kv_dim;
    float *k = tkv_xmalloc(2 * kd * sizeof(float)), *v = k + kd;
    int rc = 0;
    for (int p = 0; p < n && !rc; p++) {
        rc = kv_append(kv, dst, p, 1, err, errlen);
        for (int l = 0; l < kv->o.n_layer && !rc; l++) {
            fence(kv, src, l);
            store_read_layer(&s->st[s->tier[p]], s->slot[p], l, k, v);
            kv_put(kv, dst, l, p, k, v);
        }
    }
    free(k);
    return rc;
}

static kv_store *new_slot(kv_cache *kv, int seq, int layer, int pos, int *slot) {
    kv_seq *s = get_seq(kv, seq);
    TKV_ASSERT(pos >= 0 && pos < s->len && layer >= 0 && layer < kv->o.n_layer);
    TKV_ASSERT(s->tier[pos] == KV_T0 || s->tier[pos] == KV_T1);
    fence(kv, seq, layer); /* the slot may have been taken from a demotion in flight */
    *slot = s->slot[pos];
    return &s->st[s->tier[pos]];
}

void kv_put(kv_cache *kv, int seq, int layer, int pos, const float *k, const float *v) {
    int slot;
    kv_store *st = new_slot(kv, seq, layer, pos, &slot);
    store_write_layer(st, slot, layer, k, v);
}

void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out) {
    kv_seq *s = get_seq(kv, seq);
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer);
    fence(kv, seq, layer);
    if (layer == kv->o.n_layer - 1) s->fresh_from = s->len; /* every layer of the new tokens is written */
    size_t kd = (size_t)kv->kv_dim, es = (size_t)elem_bytes(&kv->o);
    int64_t staged = 0;
    for (int p = 0; p < s->len; p++) {
        int t = s->tier[p];
        const kv_store *st = &s->st[t < 3 ? t : 0];
        const void *k = NULL, *v = NULL;
        if (t == KV_T0 || (t == KV_T1 && !kv->o.staged)) {
            k = store_any_row(st, layer, s->slot[p], 0);
            v = store_any_row(st, layer, s->slot[p], 1);
        } else if (t != KV_T3) { /* T1 staged (a copy), or T2 dequantised: into the staging row of this position */
            char *sk = (char *)s->stage + (size_t)p * 2 * kd * es, *sv = sk + kd * es;
            if (kv->o.f16) store_read_layer_f16(st, s->slot[p], layer, (uint16_t *)sk, (uint16_t *)sv);
            else store_read_layer(st, s->slot[p], layer, (float *)sk, (float *)sv);
            k = sk;
            v = sv;
            staged += (int64_t)(2 * kd * es);
        }
        if (kv->o.f16) s->hk[p] = k, s->hv[p] = v;
        else s->vk[p] = k, s->vv[p] = v;
    }
    memset(out, 0, sizeof *out);
    if (kv->o.f16) out->k16 = s->hk, out->v16 = s->hv;
    else out->k = s->vk, out->v = s->vv;
    s->c.bytes_staged += staged;
    out->keep = s->keep_used ? s->keep + (size_t)layer * kv->o.n_head_kv * kv->o.n_ctx : NULL;
    out->keep_stride = s->keep_used ? kv->o.n_ctx : 0;
    out->n = s->len;
}

void kv_observe(kv_cache *kv, int seq, int layer, int q_pos, const float *att, int att_stride) {
    kv_seq *s = get_seq(kv, seq);
    if (!kv->ops->tiered) return;
    TKV_ASSERT(q_pos >= 0 && q_pos < s->len);
    if (kv->ops->hooks && kv->ops->hooks->observe) {
        int h16 = kv->o.f16;
        kv_view v = {.k = h16 ? NULL : s->vk, .v = h16 ? NULL : s->vv, .k16 = h16 ? s->hk : NULL, .v16 = h16 ? s->hv : NULL,
                     .keep = s->keep_used ? s->keep + (size_t)layer * kv->o.n_head_kv * kv->o.n_ctx : NULL,
                     .keep_stride = s->keep_used ? kv->o.n_ctx : 0, .n = s->len};
        kv->ops->hooks->observe(s->pstate, layer, q_pos, s->prompt[q_pos], att, att_stride, &v);
    }
    if (!kv->ops->select) return; /* hook-only policies keep their own scores */
    int H = kv->o.n_head, group = kv->o.n_head / kv->o.n_head_kv;
    size_t nc = (size_t)kv->o.n_ctx;
    if (s->prompt[q_pos]) { /* prefill: the hierarchy score ignores it; SnapKV-style policies keep it */
        if (s->prefill_score)
            for (int h = 0; h < H; h++)
                for (int i = 0; i <= q_pos; i++) s->prefill_score[(size_t)(h / group) * nc + i] += att[(size_t)h * att_stride + i];
        return;
    }
    double w = 1.0 / ((double)kv->o.n_layer * H);
    for (int h = 0; h < H; h++) {
        const float *a = att + (size_t)h * att_stride;
        for (int i = 0; i <= q_pos; i++) s->score[i] += w * a[i];
        if (s->head_score) {
            float *hs = s->head_score + (size_t)(h / group) * nc;
            for (int i = 0; i <= q_pos; i++) hs[i] += a[i];
        }
    }
}

/* Plans a re-tiering of sequence seq and starts its moves. */
static void retier(kv_cache *kv, int seq) {
    kv_seq *s = &kv->seq[seq];
    kv_complete_batch(kv, seq);
    double t0 = tkv_now_s();
    int len = s->len, raised = 0;
    int budget = kv_t0_budget(kv, s, len, &raised);
    int nprot = 0;
    for (int i = 0; i < len; i++) nprot += s->prot[i] = (uint8_t)kv_is_protected(kv, s, i, len);
    int headroom = kv->abs_tokens > 0 ? kv->o.delta
                                      : (int)ceil(kv->o.delta * (1.0 - (kv->o.hbm_ratio > 0 ? kv->o.hbm_ratio : 0))) + 1;
    int b0 = budget - headroom < nprot ? nprot : budget - headroom;
    int evicted = (int)s->ntok[KV_T3];
    int n_cand = len - nprot - evicted;
    kv_select_in in = {
        .n = len, .score = s->score, .tier = s->tier, .prot = s->prot,
        .head_score = s->head_score, .prefill_score = s->prefill_score,
        .n_head_kv = kv->o.n_head_kv, .stride = kv->o.n_ctx,
        .order = s->order, .scratch = s->scratch,
    };
    int room3 = ratio_tokens(kv->o.evict_ratio, len) - evicted;
    kv_policy_caps(kv->ops, n_cand, b0 - nprot, ratio_tokens(kv->o.t2_ratio, len), room3 < 0 ? 0 : room3, in.cap);
    kv_select_out out = {.target = s->target, .keep = s->keep, .keep_used = s->keep_used};
    kv->ops->select(&in, &out);
    s->keep_used = out.keep_used;

    /* diff: demotions out of T0 first (their T0 slots go to `recycle`), then everything else */
    int64_t tb0 = kv_token_bytes(kv, KV_T0);
    kv_retier_record *r = &s->rec;
    memset(r, 0, sizeof *r);
    s->n_moves = s->n_deferred = 0;
    int n_recycle = 0;
    for (int i = 0; i < len; i++) {
        int from = s->tier[i], to = s->target[i];
        TKV_ASSERT(to <= KV_T3 && (from != KV_T3 || to == KV_T3) && (!s->prot[i] || to == KV_T0));
        if (from != KV_T0 || to == KV_T0) continue;
        s->recycle[n_recycle++] = s->slot[i];
        if (to == KV_T3) {
            s->slot[i] = -1;
            r->evicted++;
        } else {
            int dst = store_alloc(&s->st[to]);
            TKV_ASSERT(dst >= 0);
            s->moves[s->n_moves++] = (kv_move){i, (uint8_t)from, (uint8_t)to, s->slot[i], dst};
            s->slot[i] = dst;
            r->bytes_down += tb0;
            if (to == KV_T2) s->lossy[i] = 1;
        }
        s->tier[i] = (uint8_t)to;
    }
    for (int i = 0; i < len; i++) {
        int from = s->tier[i], to = s->target[i];
        if (from == to || from == KV_T0) continue;
        s->deferred[s->n_deferred++] = (kv_slot_ref){(uint8_t)from, s->slot[i]};
        if (to == KV_T3) {
            s->slot[i] = -1;
            r->evicted++;
        } else {
            int dst = to == KV_T0 && n_recycle > 0 ? s->recycle[--n_recycle] : store_alloc(&s->st[to]);
            TKV_ASSERT(dst >= 0);
            s->moves[s->n_moves++] = (kv_move){i, (uint8_t)from, (uint8_t)to, s->slot[i], dst};
            s->slot[i] = dst;
            if (to == KV_T0) r->bytes_up += kv_token_bytes(kv, from);
            else r->bytes_host += kv_token_bytes(kv, from);
            if (to == KV_T2) s->lossy[i] = 1;
        }
        s->tier[i] = (uint8_t)to;
    }
    while (n_recycle > 0) s->deferred[s->n_deferred++] = (kv_slot_ref){KV_T0, s->recycle[--n_recycle]};
    memset(s->ntok, 0, sizeof s->ntok);
    for (int i = 0; i < len; i++) s->ntok[s->tier[i]]++;
    for (int i = 0; i < len; i++)
        if (s->tier[i] == KV_T3) set_keep(kv, s, i, 0);

    r->seq = seq;
    r->len = len;
    r->step = s->n_decode;
    memcpy(r->tokens, s->ntok, sizeof r->tokens);
    r->moves = s->n_moves;
    r->plan_seconds = tkv_now_s() - t0;
    update_peak(kv, s);
    s->c.bytes_moved_down += r->bytes_down;
    s->c.bytes_moved_up += r->bytes_up;
    s->c.bytes_moved_host += r->bytes_host;
    s->c.tokens_evicted += r->evicted;
    s->c.retiers++;
    s->c.retier_seconds += r->plan_seconds;
    s->c.budget_raised += raised;

    s->batch_active = 1;
    if (kv->xfer && s->n_moves > 0) {
        xfer_submit(kv->xfer, seq);
    } else { /* synchronous transfers (or nothing to copy): run every layer here */
        double m0 = tkv_now_s();
        for (int l = 0; l < kv->o.n_layer; l++) run_layer_moves(kv, s, l);
        retire_batch(kv, seq, s->n_moves > 0 ? tkv_now_s() - m0 : 0.0);
    }
}

typedef struct {
    kv_cache *kv;
    int seq;
} step_view_ctx;

/* The hooks read keys as f32 (R-KV's similarities): an f16 cache widens them (exactly) into hook_k. */
static void step_view(void *ctx, int layer, kv_view *out) {
    step_view_ctx *c = ctx;
    kv_view_layer(c->kv, c->seq, layer, out);
    if (!c->kv->o.f16) return;
    kv_seq *s = &c->kv->seq[c->seq];
    size_t kd = (size_t)c->kv->kv_dim;
    for (int p = 0; p < out->n; p++) {
        s->vk[p] = NULL;
        if (!s->hk[p]) continue;
        float *k = s->hook_k + (size_t)p * kd;
        tkv_f16_row_to_f32(s->hk[p], k, kd);
        s->vk[p] = k;
    }
    out->k = s->vk;
}

/* Runs a hook policy's step: it may rewrite keep masks and evict whole tokens (T0 -> T3 at once). */
static void policy_step(kv_cache *kv, int seq) {
    kv_seq *s = &kv->seq[seq];
    const kv_policy_hooks *h = kv->ops->hooks;
    if (!h || !h->step) return;
    char msg[256] = "";
    int len = s->len;
    int budget = kv->abs_tokens > 0 ? kv->abs_tokens : kv->o.hbm_ratio >= 0 ? ratio_tokens(kv->o.hbm_ratio, len) : len;
    memset(s->target, 0, (size_t)len);
    step_view_ctx vc = {kv, seq};
    kv_step_io io = {len, s->n_prompt, budget, kv->o.n_layer, kv->o.n_head_kv, kv->o.n_head, s->tier, s->keep,
                     kv->o.n_ctx, s->target, s->keep_used, msg, sizeof msg, step_view, &vc, 0, 0, 0, 0};
    if (h->step(s->pstate, &io) != 0) {
        fprintf(stderr, "tierkv: policy %s: %s\n", kv->ops->name, msg);
        TKV_ASSERT(!"policy step failed");
    }
    s->keep_used = io.keep_used;
    s->bl_budget = io.budget;
    s->bl_limit = io.limit;
    s->bl_len = len;
    s->bl_held_rows = io.held_rows;
    s->c.budget_raised += io.raised;
    if (io.held_rows * kv_row_bytes(kv) > s->c.peak_held_bytes) s->c.peak_held_bytes = io.held_rows * kv_row_bytes(kv);
    kv_complete_batch(kv, seq);
    for (int i = 0; i < len; i++) {
        if (!s->target[i] || s->tier[i] == KV_T3) continue;
        store_release(&s->st[s->tier[i]], s->slot[i]);
        s->ntok[s->tier[i]]--;
        s->ntok[KV_T3]++;
        s->tier[i] = KV_T3;
        s->slot[i] = -1;
        set_keep(kv, s, i, 0);
        s->c.tokens_evicted++;
    }
}

void kv_step_end(kv_cache *kv, int seq) {
    kv_seq *s = get_seq(kv, seq);
    if (!kv->ops->tiered) return;
    s->fresh_from = s->len;
    s->n_decode++;
    s->steps_since++;
    if (s->batch_active && xfer_finished(kv->xfer, seq)) kv_complete_batch(kv, seq);
    policy_step(kv, seq);
    if (!kv->ops->select) return;
    if (s->steps_since >= kv->o.delta) {
        s->steps_since = 0;
        retier(kv, seq);
    } else if (kv->abs_tokens == 0 && kv->o.hbm_ratio >= 0) {
        int raised;
        kv_t0_budget(kv, s, s->len, &raised);
        s->c.budget_raised += raised;
    }
}

int kv_token_tier(const kv_cache *kv, int seq, int pos) {
    const kv_seq *s = get_seq(kv, seq);
    TKV_ASSERT(pos >= 0 && pos < s->len);
    return s->tier[pos];
}

void kv_set_retier_callback(kv_cache *kv, kv_retier_fn fn, void *ctx) {
    kv->cb = fn;
    kv->cb_ctx = ctx;
}

const kv_retier_record *kv_retier_log(const kv_cache *kv, int *n) {
    *n = kv->log_n;
    return kv->log;
}
