/* kv.c — the KV cache behind kv.h: init and free, sequences in and out (admission), appends and
 * their T0 slots, the shared prompt prefix, and the end of a forward call, where re-tierings are
 * due. Mechanism lives in kv_pool.c, budgets in kv_budget.c, the planner in kv_plan.c, what
 * attention reads in kv_view.c, the scores in kv_scores.c, the baselines' hooks in kv_baselines.c.
 *
 * Sequence ids are slots 0..n_seq-1 of the cache, the lowest free one taken at kv_seq_add. Each
 * sequence's metadata is sized for its own context when it is added, not for the cache's. */
#include "kv/kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_hooks.h"
#include "kv/kv_scores.h"

/* ---- per-position state ---- */

/* ---- init / free ---- */

static void xfer_run_layer(void *ctx, int layer) {
    kv_cache *kv = ctx;
    kv->be->ops->copy_moves(kv->be, &kv->pools, kv->batch.moves, kv->batch.n_moves, layer);
}

kv_cache *kv_init(const kv_options *o, be_backend *be, char *err, size_t errlen) {
    const kv_policy_ops *ops = kv_policy_ops_of(o->policy);
    int mode, seq_tokens;
    int64_t shared;
    if (kv_validate(o, ops, &mode, &seq_tokens, &shared, err, errlen)) return NULL;
    be_kv_fmt exact = o->f16 ? BE_KV_F16 : BE_KV_F32;
    if (!(be->ops->kv_fmts & 1u << exact) || (ops->uses_t2 && !(be->ops->kv_fmts & 1u << o->t2_fmt))) {
        tkv_errf(err, errlen, "kv: the %s backend cannot store %s records%s", be->ops->name,
                 !(be->ops->kv_fmts & 1u << exact) ? (o->f16 ? "f16" : "f32") : be_kv_t2_name(o->t2_fmt),
                 be->ops->kv_fmts & 1u << BE_KV_Q8_HEAD ? " (its T2 codec: q8h)" : "");
        return NULL;
    }
    kv_cache *kv = tkv_xcalloc(1, sizeof *kv);
    kv->o = *o;
    kv->ops = ops;
    kv->be = be;
    kv->kv_dim = o->n_head_kv * o->head_dim;
    kv->t2_staged = ops->uses_t2 && (o->stage_t2 || !(be->ops->attn_t2_fmts & 1u << o->t2_fmt));
    kv->window = o->window > 1 ? o->window : 1;
    kv->mode = mode;
    kv->seq_tokens = seq_tokens;
    kv->shared_tokens = shared;
    kv->seq = tkv_xcalloc((size_t)o->n_seq, sizeof(kv_seq));
    kv->log = tkv_xcalloc(KV_RETIER_LOG_MAX, sizeof(kv_retier_record));
    kv->share = tkv_xcalloc((size_t)o->n_seq, sizeof *kv->share);
    kv->share_room = tkv_xcalloc((size_t)o->n_seq, sizeof *kv->share_room);
    kv->batch.seqs = tkv_xcalloc((size_t)o->n_seq, sizeof(int));
    kv->dev_scores = kv_scores_pick_device(o, ops, be);
    if (kv_pools_init(kv, err, errlen)) {
        kv_free(kv);
        return NULL;
    }
    kv->stage_bytes_layer = (int64_t)kv->pools.pool[BE_STAGE].record_bytes;
    if (kv_ops_ranked(ops) && !o->sync_transfers) kv->xfer = xfer_init(xfer_run_layer, kv, o->n_layer);
    return kv;
}

static void seq_free_arrays(kv_cache *kv, kv_seq *s) {
    free(s->ref); free(s->att); free(s->att_ip); free(s->prompt); free(s->lossy); free(s->stale); free(s->rank); free(s->score);
    free(s->head_score); free(s->prefill_score); free(s->keep);
    free(s->prot); free(s->target); free(s->cur); free(s->order); free(s->scratch);
    free(s->vk); free(s->vv); free(s->hk); free(s->hv); free(s->view_t2); free(s->hook_k); free(s->hook_rows);
    if (s->pstate && kv->ops->hooks->free) kv->ops->hooks->free(s->pstate);
    kv_scores_free(kv, s);
    memset(s, 0, sizeof *s);
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    xfer_free(kv->xfer); /* waits for the batch in flight */
    kv->xfer = NULL;
    if (kv->tp[BE_T0].free) {
        kv_settle(kv); /* no copy may still read or write the pools freed below */
    }
    for (int q = 0; q < kv->o.n_seq; q++)
        if (kv->seq[q].live) seq_free_arrays(kv, &kv->seq[q]);
    kv_pools_free(kv);
    free(kv->batch.moves); free(kv->batch.rest); free(kv->batch.deferred); free(kv->batch.recycle);
    free(kv->batch.recycle_seq); free(kv->batch.seqs);
    free(kv->stage_moves); free(kv->stage_mark); free(kv->stage_memo.seqs); free(kv->stage_memo.count); free(kv->obs); free(kv->obs_gen);
    free(kv->score_ptr); free(kv->score_npos);
    free(kv->share); free(kv->share_room); free(kv->mark);
    free(kv->att_memo.slots), free(kv->att_memo.keep), free(kv->att_memo.n_pos), free(kv->att_memo.seq), free(kv->att_memo.pos);
    free(kv->seq);
    free(kv->log);
    free(kv);
}

/* ---- sequences ---- */

int kv_seq_live(const kv_cache *kv, int seq) { return seq >= 0 && seq < kv->o.n_seq && kv->seq[seq].live; }

static int seq_init(kv_cache *kv, kv_seq *s, int n_ctx, char *err, size_t errlen) {
    const kv_options *o = &kv->o;
    const kv_policy_ops *ops = kv->ops;
    size_t n = (size_t)n_ctx;
    s->n_ctx = n_ctx;
    s->ref = tkv_xmalloc(n * sizeof(int32_t));
    s->att = tkv_xmalloc(n * sizeof(int32_t));
    s->prompt = tkv_xcalloc(n, 1);
    s->lossy = tkv_xcalloc(n, 1);
    s->stale = tkv_xcalloc(n, 1);
    s->score = tkv_xcalloc(n, sizeof(double));
    if (kv->dev_scores && !(s->score_dev = kv->be->ops->alloc(kv->be, n * sizeof(double), BE_MEM_DEVICE, err, errlen)))
        return -1;
    if (ops->head_scores) s->head_score = tkv_xcalloc(n * o->n_head_kv, sizeof(float));
    if (ops->prefill_scores) s->prefill_score = tkv_xcalloc(n * o->n_head_kv, sizeof(float));
    if (ops->head_masks) s->keep = tkv_xcalloc((size_t)kv_keep_stride(kv) * o->n_head_kv * o->n_layer, 1);
    s->prot = tkv_xcalloc(n, 1);
    s->target = tkv_xcalloc(n, 1);
    s->cur = tkv_xcalloc(n, 1);
    s->order = tkv_xcalloc(n, sizeof(int32_t));
    s->scratch = tkv_xcalloc(n, sizeof(int32_t));
    s->vk = tkv_xcalloc(n, sizeof(float *));
    s->vv = tkv_xcalloc(n, sizeof(float *));
    s->hk = tkv_xcalloc(n, sizeof(uint16_t *));
    s->hv = tkv_xcalloc(n, sizeof(uint16_t *));
    if (ops->hooks) {
        s->hook_k = tkv_xmalloc(n * (size_t)kv->kv_dim * sizeof(float));
        s->hook_rows = tkv_xcalloc(n, sizeof(float *));
        if (ops->hooks->init) {
            kv_options so = *o;
            so.n_ctx = n_ctx;
            s->pstate = ops->hooks->init(&so, err, errlen);
            if (!s->pstate) return -1;
        }
    }
    return 0;
}

int kv_seq_add(kv_cache *kv, int n_ctx, int n_prompt, int *seq, char *err, size_t errlen) {
    *seq = -1;
    if (n_ctx < 1 || n_ctx > kv->o.n_ctx)
        return tkv_errf(err, errlen, "kv: a sequence of %d positions: the cache takes 1..%d", n_ctx, kv->o.n_ctx);
    if (n_prompt < 0 || n_prompt > n_ctx)
        return tkv_errf(err, errlen, "kv: a prompt of %d tokens in a sequence of %d positions", n_prompt, n_ctx);
    int q = 0;
    while (q < kv->o.n_seq && kv->seq[q].live) q++;
    if (q == kv->o.n_seq) {
        tkv_errf(err, errlen, "kv: all %d sequences are live", kv->o.n_seq);
        return -2;
    }
    int reserve = 0;
    if (kv->mode == KV_B_SHARED) {
        int64_t tb = kv_token_bytes(kv, BE_T0);
        reserve = kv_reserve_need(kv, n_ctx, n_prompt);
        if (reserve > kv->shared_tokens)
            return tkv_errf(err, errlen,
                            "kv: a sequence of %d positions with a %d-token prompt must hold %d tokens in T0 (%lld bytes); "
                            "the whole hbm budget holds %lld",
                            n_ctx, n_prompt, reserve, (long long)reserve * tb, (long long)kv->shared_tokens);
        if (kv->reserved + reserve > kv->shared_tokens) {
            tkv_errf(err, errlen,
                     "kv: T0 is taken: %d live sequences reserve %lld of the %lld tokens (%lld bytes) of the hbm budget; "
                     "this one needs %d more",
                     kv->n_live, (long long)kv->reserved, (long long)kv->shared_tokens,
                     (long long)kv->shared_tokens * tb, reserve);
            return -2;
        }
    }
    int64_t mem;
    if (kv_pools_admit(kv, n_ctx, &mem, err, errlen)) return kv->n_live > 0 ? -2 : -1; /* others may leave room */
    kv_seq *s = &kv->seq[q];
    memset(s, 0, sizeof *s);
    if (seq_init(kv, s, n_ctx, err, errlen)) {
        seq_free_arrays(kv, s);
        return -1;
    }
    s->live = 1;
    s->reserve = reserve;
    s->mem = mem;
    kv->committed += mem;
    kv->reserved += reserve;
    kv->n_live++;
    for (int t = 0; t < BE_N_POOLS; t++) {
        s->bound[t] = kv->tp[t].cap_chunks ? kv_tier_bound(kv, t, n_ctx, n_prompt) : 0;
        kv->tp[t].reserved += s->bound[t];
    }
    if (kv_pools_reserve(kv, err, errlen)) { /* the memory is out: the sequence is not added */
        kv_seq_remove(kv, q);
        return kv->n_live > 0 ? -2 : -1;
    }
    *seq = q;
    return 0;
}

/* The counters a removed sequence leaves to the cache's totals. */
static void retire_counters(kv_cache *kv, const kv_seq *s) {
    kv_stats *r = &kv->retired;
    r->budget_raised += s->c.budget_raised;
    r->bytes_moved_down += s->c.bytes_moved_down;
    r->bytes_moved_up += s->c.bytes_moved_up;
    r->bytes_moved_host += s->c.bytes_moved_host;
    r->bytes_staged += s->c.bytes_staged;
    r->tokens_evicted += s->c.tokens_evicted;
    r->retiers += s->c.retiers;
    r->sync_demotions += s->c.sync_demotions;
    r->move_seconds += s->c.move_seconds;
    r->retier_seconds += s->c.retier_seconds;
}

/* Drops every slot the sequence holds. No batch may be in flight. */
static void release_all(kv_cache *kv, kv_seq *s) {
    for (int i = 0; i < s->len; i++) {
        if (s->ref[i] != BE_SLOT_NONE) kv_slot_drop(kv, s->ref[i]);
        s->ref[i] = s->att[i] = BE_SLOT_NONE;
    }
    kv->tables_gen++;
}

void kv_seq_remove(kv_cache *kv, int seq) {
    kv_seq *s = kv_get_seq(kv, seq);
    kv_complete_batch(kv);
    release_all(kv, s);
    retire_counters(kv, s);
    kv->reserved -= s->reserve;
    kv->committed -= s->mem;
    for (int t = 0; t < BE_N_POOLS; t++) kv->tp[t].reserved -= s->bound[t];
    kv->n_live--;
    seq_free_arrays(kv, s);
}

void kv_seq_reset(kv_cache *kv, int seq) {
    kv_seq *s = kv_get_seq(kv, seq);
    int n_ctx = s->n_ctx, n_prompt = s->reserve ? s->n_prompt : 0, got;
    char err[256];
    kv_seq_remove(kv, seq);
    TKV_ASSERT(kv_seq_add(kv, n_ctx, n_prompt, &got, err, sizeof err) == 0 && got == seq);
}

int kv_seq_len(const kv_cache *kv, int seq) { return kv_get_seq(kv, seq)->len; }

int kv_seq_share_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen) {
    if (!kv_seq_live(kv, src) || !kv_seq_live(kv, dst))
        return tkv_errf(err, errlen, "kv: sequence %d or %d is not live", src, dst);
    kv_seq *s = &kv->seq[src], *d = &kv->seq[dst];
    if (!kv_policy_copies_prefix(kv->o.policy))
        return tkv_errf(err, errlen, "kv: policy %s scores the prompt's own attention; its prefix cannot be copied", kv->ops->name);
    if (kv->o.unpin_prompt)
        return tkv_errf(err, errlen, "kv: an unpinned prompt may leave T0 and shared rows never move: no prefix is shared");
    if (src == dst || d->len != 0 || n < 1 || n > s->len || n > d->n_ctx)
        return tkv_errf(err, errlen, "kv: cannot copy %d positions of sequence %d (holding %d) into sequence %d (holding %d)", n,
                        src, s->len, dst, d->len);
    for (int p = 0; p < n; p++)
        if (s->ref[p] == BE_SLOT_NONE || BE_SLOT_TIER(s->ref[p]) != BE_T0)
            return tkv_errf(err, errlen, "kv: position %d of sequence %d is not in T0 (tier %d)", p, src,
                            kv_token_tier(kv, src, p));
    if (n > s->fresh_from) return tkv_errf(err, errlen, "kv: position %d of sequence %d is not written yet", s->fresh_from, src);
    for (int p = 0; p < n; p++) {
        d->ref[p] = s->ref[p];
        kv_slot_hold(kv, d->ref[p]);
        d->att[p] = BE_SLOT_NONE;
        kv_att_update(kv, d, p);
        d->prompt[p] = 1;
        d->lossy[p] = 0;
        d->score[p] = 0;
        kv_set_keep(kv, d, p, 1);
    }
    kv_scores_wrote(d);
    d->len = d->fresh_from = n;
    d->n_prompt = n;
    d->ntok[BE_T0] += n;
    d->t0_held += n;
    kv_note_t0_peak(kv, d);
    kv->tables_gen++;
    return 0;
}

void kv_seq_idle(kv_cache *kv, int seq) {
    kv_seq *s = kv_get_seq(kv, seq);
    if (s->idle || !kv_ops_ranked(kv->ops) || !kv->ops->uses_t1) return; /* no exact tier to wait in */
    s->idle = 1;
    kv->reserved -= s->reserve; /* it will hold no T0 of the shared budget (what it shares is the holder's) */
    s->reserve = 0;
    kv_retier_one(kv, s);
    kv_complete_batch(kv); /* its T0 slots are free now, not only given up (its budget is 0 at once) */
}

int kv_seq_idle_compress(kv_cache *kv, int seq) { return kv_idle_to_t2(kv, kv_get_seq(kv, seq)); }

int kv_seq_take(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen) {
    if (!kv_seq_live(kv, src) || !kv_seq_live(kv, dst))
        return tkv_errf(err, errlen, "kv: sequence %d or %d is not live", src, dst);
    kv_seq *s = &kv->seq[src], *d = &kv->seq[dst];
    if (!kv_policy_copies_prefix(kv->o.policy))
        return tkv_errf(err, errlen, "kv: policy %s keeps state of its own beside the positions; they cannot be taken over",
                        kv->ops->name);
    if (src == dst || d->len != 0 || d->idle || n < 1 || n > s->len || n > d->n_ctx || n > s->fresh_from)
        return tkv_errf(err, errlen, "kv: cannot take %d positions of sequence %d (holding %d, %d written) into sequence %d "
                        "(holding %d of %d)", n, src, s->len, s->fresh_from, dst, d->len, d->n_ctx);
    /* dst protects its sinks and its last window at once: none of them may be gone */
    for (int p = 0; p < n; p++)
        if (s->ref[p] == BE_SLOT_NONE && (p < kv->o.sinks || p >= n - kv->window))
            return tkv_errf(err, errlen, "kv: position %d of sequence %d was evicted and would be protected once taken", p, src);
    kv_complete_batch(kv); /* no slot of src is in flight */
    size_t stride = (size_t)kv_keep_stride(kv);
    kv_scores_host(kv, s); /* copied below */
    d->n_prompt = 0;
    for (int p = 0; p < n; p++) {
        int32_t r = s->ref[p];
        int t = kv_ref_tier(r);
        s->ref[p] = s->att[p] = BE_SLOT_NONE;
        s->ntok[t]--;
        d->ref[p] = r;
        kv_att_update(kv, d, p);
        d->ntok[t]++;
        if (t == BE_T0) s->t0_held--, d->t0_held++;
        /* dst protects its own prompt (what it prefills after them), sinks and window; rows shared with
         * another sequence (a prefix cache's prompt) never move, so they stay a pinned prompt */
        d->prompt[p] = (uint8_t)(t == BE_T0 && kv_slot_holders(kv, r) > 1);
        d->n_prompt += d->prompt[p];
        d->lossy[p] = s->lossy[p];
        d->stale[p] = s->stale[p];
        d->n_stale += s->stale[p];
        d->score[p] = s->score[p];
        for (int g = 0; g < kv->o.n_head_kv; g++) {
            if (d->head_score) d->head_score[(size_t)g * d->n_ctx + p] = s->head_score[(size_t)g * s->n_ctx + p];
            if (d->prefill_score) d->prefill_score[(size_t)g * d->n_ctx + p] = s->prefill_score[(size_t)g * s->n_ctx + p];
        }
        if (d->keep)
            for (size_t row = 0; row < (size_t)kv->o.n_layer * kv->o.n_head_kv; row++) d->keep[row * stride + p] = s->keep[row * stride + p];
    }
    kv_scores_wrote(d);
    d->keep_used = s->keep_used;
    d->len = d->fresh_from = n;
    kv_note_t0_peak(kv, d);
    kv_seq_remove(kv, src);
    kv->tables_gen++;
    if (kv_ops_ranked(kv->ops)) { /* back to dst's budget and protection, before its first append */
        kv_retier_one(kv, d);
        kv_complete_batch(kv); /* the T0 slots it gave up count against its budget until then */
    }
    return 0;
}

void kv_seq_set_stale(kv_cache *kv, int seq, int from, int to) {
    kv_seq *s = kv_get_seq(kv, seq);
    if (!kv_ops_ranked(kv->ops)) return; /* no ranking to put them at the bottom of */
    for (int p = from < 0 ? 0 : from; p < to && p < s->len; p++) {
        s->n_stale += !s->stale[p];
        s->stale[p] = 1;
    }
}

int kv_seq_copy_prefix(kv_cache *kv, int src, int dst, int n, char *err, size_t errlen) {
    return kv_seq_share_prefix(kv, src, dst, n, err, errlen);
}

/* ---- appends ---- */

int kv_append(kv_cache *kv, int seq, int pos, int is_prompt, char *err, size_t errlen) {
    kv_seq *s = kv_get_seq(kv, seq);
    TKV_ASSERT(!s->idle); /* kept for a take-over, never extended itself */
    if (pos != s->len) return tkv_errf(err, errlen, "kv: append at position %d, sequence %d holds %d", pos, seq, s->len);
    if (pos >= s->n_ctx) return tkv_errf(err, errlen, "kv: sequence %d is full (%d positions)", seq, s->n_ctx);
    if (is_prompt && kv->mode == KV_B_SHARED) {
        /* a prompt longer than the sequence declared: its reservation must grow first */
        int need = kv_reserve_need(kv, s->n_ctx, s->n_prompt + 1);
        if (need > s->reserve) {
            if (kv->reserved - s->reserve + need > kv->shared_tokens)
                return tkv_errf(err, errlen,
                                "kv: prompt token %d does not fit in T0: %d prompt tokens + sinks %d + window %d need %d "
                                "tokens, and the hbm budget of %lld tokens has %lld left beside the other live sequences",
                                pos, s->n_prompt + 1, kv->o.sinks, kv->window, need, (long long)kv->shared_tokens,
                                (long long)(kv->shared_tokens - (kv->reserved - s->reserve)));
            kv->reserved += need - s->reserve;
            s->reserve = need;
        }
    }
    if (!is_prompt && pos > 0 && s->prompt[pos - 1]) kv_policy_step(kv, seq); /* the end of a prompt */
    s->prompt[pos] = (uint8_t)(is_prompt != 0);
    s->n_prompt += s->prompt[pos]; /* counted now: the budget below must see the new token */
    int32_t slot;
    if (!kv->ops->tiered) {
        slot = kv_slot_alloc(kv, BE_T0);
        if (slot == BE_SLOT_NONE) {
            s->n_prompt -= s->prompt[pos];
            s->prompt[pos] = 0;
            return tkv_errf(err, errlen, "kv: T0 is full (%lld tokens)", (long long)kv->tp[BE_T0].cap_slots);
        }
        s->t0_held++;
    } else {
        slot = kv_t0_slot_for_new(kv, s, err, errlen);
        if (slot == BE_SLOT_NONE) {
            s->n_prompt -= s->prompt[pos];
            s->prompt[pos] = 0;
            return -1;
        }
    }
    s->ref[pos] = slot;
    s->att[pos] = slot;
    s->lossy[pos] = 0;
    s->stale[pos] = 0;
    s->score[pos] = 0;
    kv_set_keep(kv, s, pos, 1);
    for (int g = 0; g < kv->o.n_head_kv; g++) {
        size_t i = (size_t)g * s->n_ctx + pos;
        if (s->head_score) s->head_score[i] = 0;
        if (s->prefill_score) s->prefill_score[i] = 0;
    }
    s->len++;
    s->ntok[BE_T0]++;
    kv_note_t0_peak(kv, s);
    kv->tables_gen++;
    return 0;
}

int32_t kv_new_slot(const kv_cache *kv, int seq, int pos) {
    const kv_seq *s = kv_get_seq(kv, seq);
    TKV_ASSERT(pos >= 0 && pos < s->len && s->ref[pos] != BE_SLOT_NONE);
    return s->ref[pos];
}

void kv_put(kv_cache *kv, int seq, int layer, int pos, const float *k, const float *v) {
    int32_t r = kv_new_slot(kv, seq, pos);
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer && BE_SLOT_TIER(r) <= BE_T1);
    kv_fence(kv, layer); /* the slot may have been taken from a demotion in flight */
    kv->be->ops->kv_write(kv->be, &kv->pools, layer, &r, 1, k, v);
    kv_seq *s = &kv->seq[seq];
    if (layer == kv->o.n_layer - 1 && pos >= s->fresh_from) s->fresh_from = pos + 1; /* written in order */
}

const be_kv_pools *kv_pools(const kv_cache *kv) { return &kv->pools; }

/* ---- the end of a forward call ---- */

void kv_batch_end(kv_cache *kv, const int *seqs, const uint8_t *is_prompt, int n) {
    int due[4096], n_due = 0, decoded = 0;
    for (int t = 0; t < n; t++) {
        kv_seq *s = kv_get_seq(kv, seqs[t]);
        s->fresh_from = s->len; /* every layer of the new tokens is written */
        if (kv->o.unpin_prompt && kv->mode != KV_B_SHARED) kv_trim_t0(kv, s);
    }
    if (!kv->ops->tiered) return;
    for (int t = 0; t < n; t++) {
        if (is_prompt && is_prompt[t]) continue;
        int dup = 0;
        for (int u = 0; u < t && !dup; u++) dup = seqs[u] == seqs[t] && !(is_prompt && is_prompt[u]);
        if (dup) continue;
        kv_seq *s = kv_get_seq(kv, seqs[t]);
        decoded = 1;
        s->n_decode++;
        s->steps_since++;
        s->t0_share_sum += (double)s->ntok[BE_T0] / (double)s->len;
        s->t0_share_n++;
        if (kv->batch.active && kv->xfer && xfer_finished(kv->xfer)) kv_complete_batch(kv);
        kv_policy_step(kv, seqs[t]);
        if (!kv_ops_ranked(kv->ops) || kv->mode == KV_B_SHARED) continue;
        if (s->steps_since >= kv->o.delta) {
            s->steps_since = 0;
            TKV_ASSERT(n_due < (int)(sizeof due / sizeof due[0]));
            due[n_due++] = seqs[t];
        } else if (kv->mode == KV_B_RATIO) {
            int raised;
            kv_t0_budget(kv, s, s->len, &raised);
            s->c.budget_raised += raised;
        }
    }
    if (!kv_ops_ranked(kv->ops)) return;
    if (kv->mode == KV_B_SHARED) {
        if (decoded && ++kv->steps_since >= kv->o.delta) {
            kv->steps_since = 0;
            kv_retier(kv, NULL, 0);
        }
        return;
    }
    if (n_due) kv_retier(kv, due, n_due);
}

void kv_step_end(kv_cache *kv, int seq) { kv_batch_end(kv, &seq, NULL, 1); }

void kv_sync(kv_cache *kv) { kv_complete_batch(kv); }

int kv_token_tier(const kv_cache *kv, int seq, int pos) {
    const kv_seq *s = kv_get_seq(kv, seq);
    TKV_ASSERT(pos >= 0 && pos < s->len);
    return kv_ref_tier(s->ref[pos]);
}

void kv_set_retier_callback(kv_cache *kv, kv_retier_fn fn, void *ctx) {
    kv->cb = fn;
    kv->cb_ctx = ctx;
}

const kv_retier_record *kv_retier_log(const kv_cache *kv, int *n) {
    *n = kv->log_n;
    return kv->log;
}
