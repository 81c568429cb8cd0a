/* kv_plan.c — the planner: scores and budgets into target tiers, target tiers into one batch of moves
 * for the transfer engine. Every tier change goes through it: a re-tiering's batch, the demotion
 * that makes room for a new token when T0 is at its budget and a baseline's evictions (a batch of
 * their own, run at once), so slots that moves read are freed in one place (retire_batch), after
 * the copies are fenced. The policy (who goes where) is kv_policy.c's; slots are kv_pool.c's.
 *
 * A re-tiering of the per-sequence modes plans each due sequence alone, as the policy says, with its
 * own budget. In the shared mode every live sequence is planned at once: the T0 room left after the
 * protected tokens of all (shared prefix slots counted once) and the headroom is split over their
 * candidates by normalised score (kv_policy_share_t0), then each sequence fills T1, T2 and the
 * eviction tail from its own ranking as usual.
 *
 * Headroom: new tokens enter T0 between re-tierings, so a re-tiering fills T0 only to budget -
 * headroom: delta tokens per sequence for an absolute budget (delta for each live one in the shared
 * mode), ceil(delta * (1 - t0_ratio)) + 1 for a ratio (the budget grows by t0_ratio per token),
 * never below the protected tokens. If a new token still would overflow T0 (prompt tokens, rounding),
 * the lowest-scored unprotected T0 token is demoted at once (stats.sync_demotions): the
 * sequence's own in the per-sequence modes, the lowest normalised score of all in the shared one.
 *
 * Moves: only tokens whose tier changes move. Destination slots are allocated here; a T0 slot given
 * up by a demoted (or evicted) token is handed straight to a promoted one (the same sequence's in
 * the per-sequence modes, any in the shared one), so T0 never counts both; other source slots are
 * freed when the batch is done. Demotions come first in the batch, so within a layer a recycled slot
 * is read before it is overwritten. A new token may take a T0 slot whose demotion is in flight: its
 * write waits on the layer's fence (kv_layer_begin), as attention does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "kv/kv_plan.h"
#include "kv/kv_scores.h"

static void grow_moves(be_move **a, int *cap, int need) {
    if (need <= *cap) return;
    int c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    be_move *p = realloc(*a, (size_t)c * sizeof *p);
    TKV_ASSERT(p);
    *a = p;
    *cap = c;
}

static void push_deferred(kv_batch *b, int32_t ref, int seq) {
    if (b->n_deferred == b->cap_deferred) {
        int c = b->cap_deferred ? 2 * b->cap_deferred : 256;
        kv_deferred *p = realloc(b->deferred, (size_t)c * sizeof *p);
        TKV_ASSERT(p);
        b->deferred = p;
        b->cap_deferred = c;
    }
    b->deferred[b->n_deferred++] = (kv_deferred){ref, (int16_t)seq};
}

static void push_recycle(kv_batch *b, int32_t ref, int seq) {
    if (b->n_recycle == b->cap_recycle) {
        int c = b->cap_recycle ? 2 * b->cap_recycle : 256;
        int32_t *p = realloc(b->recycle, (size_t)c * sizeof *p);
        int16_t *q = realloc(b->recycle_seq, (size_t)c * sizeof *q);
        TKV_ASSERT(p && q);
        b->recycle = p;
        b->recycle_seq = q;
        b->cap_recycle = c;
    }
    b->recycle_seq[b->n_recycle] = (int16_t)seq;
    b->recycle[b->n_recycle++] = ref;
}

/* What the batch gave back to the pools once it completes: recycled slots nobody took. */
static void defer_recycled(kv_cache *kv, int only_seq) {
    kv_batch *b = &kv->batch;
    for (int k = b->n_recycle - 1; k >= 0; k--) {
        if (only_seq >= 0 && b->recycle_seq[k] != only_seq) continue;
        push_deferred(b, b->recycle[k], b->recycle_seq[k]);
        b->recycle[k] = b->recycle[b->n_recycle - 1];
        b->recycle_seq[k] = b->recycle_seq[b->n_recycle - 1];
        b->n_recycle--;
    }
}

/* ---- fences and completion ---- */

void kv_fence(kv_cache *kv, int layer) {
    if (!kv->batch.active) return;
    if (kv->xfer) kv->retired.fence_wait_seconds += xfer_wait_layer(kv->xfer, layer);
    kv->be->ops->copy_wait(kv->be, layer);
}

void kv_fence_all(kv_cache *kv) {
    for (int l = 0; l < kv->o.n_layer; l++) kv->be->ops->copy_wait(kv->be, l);
}

void kv_settle(kv_cache *kv) {
    kv_complete_batch(kv);
    kv_fence_all(kv);
    kv_host_sync(kv);
}

/* Frees the batch's source slots and files its records. The one place where slots that moves read
 * are freed: every layer's copies are fenced first, so the compute queue cannot write a freed slot
 * (a new token's row) before the copy that reads it has run (on a GPU the copies run on their own
 * stream; the transfer thread having submitted them says nothing about their end). */
static void retire_batch(kv_cache *kv, double move_seconds) {
    kv_batch *b = &kv->batch;
    if (b->n_moves > 0) kv_fence_all(kv);
    for (int i = 0; i < b->n_deferred; i++) {
        const kv_deferred *d = &b->deferred[i];
        if (BE_SLOT_TIER(d->ref) == BE_T0 && kv->seq[d->seq].live) kv->seq[d->seq].t0_held--;
        kv_slot_drop(kv, d->ref);
    }
    for (int i = 0; i < b->n_seqs; i++) {
        kv_seq *s = &kv->seq[b->seqs[i]];
        if (!s->live || !s->in_batch) continue;
        s->in_batch = 0;
        s->rec.move_seconds = move_seconds;
        s->c.move_seconds += move_seconds;
        if (kv->log_n < KV_RETIER_LOG_MAX) kv->log[kv->log_n++] = s->rec;
        if (kv->cb) kv->cb(kv->cb_ctx, &s->rec);
    }
    b->n_deferred = b->n_moves = b->n_rest = b->n_recycle = b->n_seqs = 0;
    b->active = 0;
}

void kv_complete_batch(kv_cache *kv) {
    kv_batch *b = &kv->batch;
    if (!b->active) return;
    double secs = 0;
    if (kv->xfer && b->n_moves > 0) {
        kv->retired.fence_wait_seconds += xfer_wait_layer(kv->xfer, kv->o.n_layer - 1);
        secs = xfer_batch_seconds(kv->xfer);
    }
    retire_batch(kv, secs);
}

/* Runs the batch: on the transfer thread, or here layer by layer. */
static void start_batch(kv_cache *kv) {
    kv_batch *b = &kv->batch;
    if (b->n_rest > 0) {
        grow_moves(&b->moves, &b->cap_moves, b->n_moves + b->n_rest);
        memcpy(b->moves + b->n_moves, b->rest, (size_t)b->n_rest * sizeof *b->moves);
        b->n_moves += b->n_rest;
    }
    b->n_rest = 0;
    b->active = 1;
    kv->tables_gen++;
    /* the batch reads T0 rows the last call's kv_write queued and writes slots its attention read:
     * on a copy queue of its own it must come after them (a prompt's chunk need not have waited) */
    if (b->n_moves > 0 && kv->be->ops->copy_after_compute) kv->be->ops->copy_after_compute(kv->be);
    if (kv->xfer && b->n_moves > 0) {
        xfer_submit(kv->xfer);
        return;
    }
    double m0 = tkv_now_s();
    for (int l = 0; l < kv->o.n_layer && b->n_moves > 0; l++)
        kv->be->ops->copy_moves(kv->be, &kv->pools, b->moves, b->n_moves, l);
    retire_batch(kv, b->n_moves > 0 ? tkv_now_s() - m0 : 0.0);
}

/* ---- tier bookkeeping of one position ---- */

void kv_place(kv_cache *kv, kv_seq *s, int pos, int32_t ref) {
    int from = kv_ref_tier(s->ref[pos]), to = kv_ref_tier(ref);
    s->ntok[from]--;
    s->ntok[to]++;
    s->ref[pos] = ref;
    if (to == BE_T2) s->lossy[pos] = 1;
    if (to == 3) kv_set_keep(kv, s, pos, 0);
    kv_att_update(kv, s, pos);
}

/* ---- a position leaving T0 ---- */

/* Position pos of s leaves T0 for tier `to` (T1, T2 or T3) in the batch being planned: its T0 slot
 * goes to the recycle list (a promotion takes it, else it is freed when the batch completes), a slot
 * of the lower tier is allocated and the copy queued. Counts go to r. */
static void plan_demotion(kv_cache *kv, kv_seq *s, int pos, int to, kv_retier_record *r) {
    kv_batch *b = &kv->batch;
    TKV_ASSERT(kv_ref_tier(s->ref[pos]) == BE_T0 && to > BE_T0 && to <= 3);
    push_recycle(b, s->ref[pos], (int)(s - kv->seq));
    if (to == 3) {
        kv_place(kv, s, pos, BE_SLOT_NONE);
        r->evicted++;
        return;
    }
    int32_t dst = kv_slot_alloc(kv, to);
    TKV_ASSERT(dst != BE_SLOT_NONE);
    grow_moves(&b->moves, &b->cap_moves, b->n_moves + 1);
    b->moves[b->n_moves++] = (be_move){s->ref[pos], dst};
    kv_place(kv, s, pos, dst);
    r->moves++;
    r->bytes_down += kv_token_bytes(kv, BE_T0);
}

/* Tier changes made between re-tierings (room in T0 for a new token, a baseline's evictions): the n
 * positions pos[] of s leave T0 for `to` as a batch of their own, planned and run to its end like a
 * re-tiering's, so their slots are freed in the same place, after the copies that read them. No
 * batch may be in flight. Counts go to r. */
static void demote_now(kv_cache *kv, kv_seq *s, const int32_t *pos, int n, int to, kv_retier_record *r) {
    TKV_ASSERT(!kv->batch.active);
    for (int i = 0; i < n; i++) plan_demotion(kv, s, pos[i], to, r);
    defer_recycled(kv, (int)(s - kv->seq));
    start_batch(kv);
    kv_complete_batch(kv);
}

/* Moves token pos of s out of T0 now, to the policy's overflow tier (a sync demotion). */
static void demote_sync(kv_cache *kv, kv_seq *s, int pos) {
    kv_retier_record r = {0};
    int32_t p = pos;
    demote_now(kv, s, &p, 1, kv->ops->overflow_tier, &r);
    s->c.tokens_evicted += r.evicted;
    s->c.bytes_moved_down += r.bytes_down;
    s->c.sync_demotions++;
}

void kv_evict_now(kv_cache *kv, kv_seq *s, const int32_t *pos, int n) {
    kv_retier_record r = {0};
    demote_now(kv, s, pos, n, 3, &r);
    s->c.tokens_evicted += r.evicted;
}

/* The scores as ranked: stale positions below every other (their order among themselves kept). The
 * host's scores current first (kv_scores_host), as for every reader here. */
static const double *rank_of(kv_cache *kv, kv_seq *s) {
    kv_scores_host(kv, s);
    if (!s->n_stale) return s->score;
    if (!s->rank) s->rank = tkv_xmalloc((size_t)s->n_ctx * sizeof *s->rank);
    for (int i = 0; i < s->len; i++) s->rank[i] = s->stale[i] ? s->score[i] - 1e12 : s->score[i];
    return s->rank;
}

static double norm_of(kv_cache *kv, kv_seq *s) {
    kv_scores_host(kv, s);
    double sum = 0;
    for (int i = 0; i < s->len; i++) sum += s->score[i];
    return sum > 0 ? (double)s->len / sum : 0.0;
}

/* The lowest-scored unprotected, unshared T0 token of s that is already written (ties: the earlier
 * position goes); -1 if none. */
static int pick_victim(kv_cache *kv, kv_seq *s, int new_len, double *best_score) {
    int best = -1;
    const double *r = rank_of(kv, s);
    for (int i = 0; i < s->fresh_from && i < s->len; i++) {
        if (kv_ref_tier(s->ref[i]) != BE_T0 || kv_is_protected(kv, s, i, new_len) || kv_slot_holders(kv, s->ref[i]) > 1) continue;
        if (best < 0 || r[i] < r[best]) best = i;
    }
    if (best >= 0 && best_score) *best_score = s->score[best];
    return best;
}

int32_t kv_t0_slot_for_new(kv_cache *kv, kv_seq *s, char *err, size_t errlen) {
    kv_tpool *t0 = &kv->tp[BE_T0];
    int new_len = s->len + 1, q = (int)(s - kv->seq), shared = kv->mode == KV_B_SHARED;
    for (;;) {
        /* a T0 slot whose demotion is in flight: in use already, so the budget is unchanged */
        for (int i = kv->batch.n_deferred - 1; i >= 0 && kv->batch.active; i--) {
            kv_deferred *d = &kv->batch.deferred[i];
            if (BE_SLOT_TIER(d->ref) != BE_T0 || (!shared && d->seq != q) || kv_slot_holders(kv, d->ref) != 1) continue;
            int32_t ref = d->ref;
            if (kv->seq[d->seq].live) kv->seq[d->seq].t0_held--;
            *d = kv->batch.deferred[--kv->batch.n_deferred];
            s->t0_held++;
            return ref;
        }
        int fits = shared ? kv_tpool_in_use(t0) < t0->cap_slots : s->t0_held + 1 <= kv_t0_budget(kv, s, new_len, NULL);
        if (fits) {
            int32_t r = kv_slot_alloc(kv, BE_T0);
            if (r != BE_SLOT_NONE) {
                s->t0_held++;
                return r;
            }
        }
        if (kv->batch.active) {
            kv_complete_batch(kv);
            continue;
        }
        kv_seq *vs = s;
        int v = pick_victim(kv, s, new_len, NULL);
        if (shared) { /* the lowest normalised score among every live sequence */
            double best = INFINITY;
            v = -1;
            for (int k = 0; k < kv->o.n_seq; k++) {
                kv_seq *o = &kv->seq[k];
                double sc;
                if (!o->live) continue;
                int p = pick_victim(kv, o, o == s ? new_len : o->len, &sc);
                if (p < 0) continue;
                double n = sc * norm_of(kv, o);
                if (v < 0 || n < best) best = n, v = p, vs = o;
            }
        }
        if (v < 0)
            return tkv_errf(err, errlen,
                            "kv: T0 budget of %d tokens is full of protected or unwritten tokens at position %d "
                            "(%d prompt tokens, sinks %d, window %d)",
                            kv_t0_budget(kv, s, new_len, NULL), s->len, s->n_prompt, kv->o.sinks, kv->window), BE_SLOT_NONE;
        demote_sync(kv, vs, v);
    }
}

void kv_trim_t0(kv_cache *kv, kv_seq *s) {
    while (s->t0_held > kv_t0_budget(kv, s, s->len, NULL)) {
        if (kv->batch.active) { /* slots given up by the batch in flight still count */
            kv_complete_batch(kv);
            continue;
        }
        int v = pick_victim(kv, s, s->len, NULL);
        if (v < 0) return;
        demote_sync(kv, s, v);
    }
}

/* ---- re-tiering ---- */

/* Marks s's protected positions (shared slots too: they never move) in s->prot; returns the count. */
static int mark_protected(const kv_cache *kv, kv_seq *s) {
    int n = 0;
    for (int i = 0; i < s->len; i++) {
        int p = kv_is_protected(kv, s, i, s->len) ||
                (s->ref[i] != BE_SLOT_NONE && kv_slot_holders(kv, s->ref[i]) > 1 && kv_ref_tier(s->ref[i]) == BE_T0);
        s->prot[i] = (uint8_t)p;
        n += p;
    }
    return n;
}

/* The target tier of every position of s (select), given its T0 room for unprotected tokens. */
static void select_targets(kv_cache *kv, kv_seq *s, int nprot, int room0) {
    int len = s->len, evicted = (int)s->ntok[3];
    int n_cand = len - nprot - evicted;
    kv_select_in in = {
        .n = len, .score = rank_of(kv, s), .prot = s->prot, .exact = kv->o.unpin_prompt ? s->prompt : NULL,
        .head_score = s->head_score, .prefill_score = s->prefill_score,
        .n_head_kv = kv->o.n_head_kv, .stride = s->n_ctx,
        .order = s->order, .scratch = s->scratch,
    };
    for (int i = 0; i < len; i++) s->cur[i] = (uint8_t)kv_ref_tier(s->ref[i]);
    in.tier = s->cur;
    int room3 = kv_ratio_tokens(kv->o.evict_ratio, len) - evicted;
    kv_policy_caps(kv->ops, n_cand, room0, kv_ratio_tokens(kv->o.t2_ratio, len), room3 < 0 ? 0 : room3, in.cap);
    kv_select_out out = {.target = s->target, .keep = s->keep, .keep_used = s->keep_used};
    kv->ops->select(&in, &out);
    s->keep_used = out.keep_used;
}

/* Pass 1: tokens leaving T0. Their T0 slots go to the recycle list. */
static void plan_demotions(kv_cache *kv, kv_seq *s) {
    for (int i = 0; i < s->len; i++) {
        int from = kv_ref_tier(s->ref[i]), to = s->target[i];
        TKV_ASSERT(to <= 3 && (from != 3 || to == 3) && (!s->prot[i] || to == BE_T0));
        if (from == BE_T0 && to != BE_T0) plan_demotion(kv, s, i, to, &s->rec);
    }
}

/* Pass 2: every other change. Promotions take recycled T0 slots first (own ones unless `any`). */
static void plan_rest(kv_cache *kv, kv_seq *s, int any) {
    kv_batch *b = &kv->batch;
    int q = (int)(s - kv->seq);
    for (int i = 0; i < s->len; i++) {
        int from = kv_ref_tier(s->ref[i]), to = s->target[i];
        if (from == to || from == BE_T0) continue;
        int64_t fb = kv_token_bytes(kv, from);
        push_deferred(b, s->ref[i], q);
        if (to == 3) {
            kv_place(kv, s, i, BE_SLOT_NONE);
            s->rec.evicted++;
            continue;
        }
        int32_t dst = BE_SLOT_NONE;
        if (to == BE_T0) {
            for (int k = b->n_recycle - 1; k >= 0 && dst == BE_SLOT_NONE; k--) {
                if (!any && b->recycle_seq[k] != q) continue;
                dst = b->recycle[k];
                int giver = b->recycle_seq[k];
                b->recycle[k] = b->recycle[b->n_recycle - 1];
                b->recycle_seq[k] = b->recycle_seq[b->n_recycle - 1];
                b->n_recycle--;
                kv->seq[giver].t0_held--;
            }
            if (dst == BE_SLOT_NONE) dst = kv_slot_alloc(kv, BE_T0);
            s->t0_held++;
            s->rec.bytes_up += fb;
        } else {
            dst = kv_slot_alloc(kv, to);
            s->rec.bytes_host += fb;
        }
        TKV_ASSERT(dst != BE_SLOT_NONE);
        grow_moves(&b->rest, &b->cap_rest, b->n_rest + 1);
        b->rest[b->n_rest++] = (be_move){s->ref[i], dst};
        kv_place(kv, s, i, dst);
        s->rec.moves++;
    }
}

static void begin_record(kv_cache *kv, kv_seq *s) {
    memset(&s->rec, 0, sizeof s->rec);
    s->rec.seq = (int)(s - kv->seq);
    s->rec.len = s->len;
    s->rec.step = s->n_decode;
    s->in_batch = 1;
    kv->batch.seqs[kv->batch.n_seqs++] = s->rec.seq;
}

static void end_record(kv_cache *kv, kv_seq *s, double plan_seconds, int raised) {
    kv_retier_record *r = &s->rec;
    memcpy(r->tokens, s->ntok, sizeof r->tokens);
    r->plan_seconds = plan_seconds;
    s->c.bytes_moved_down += r->bytes_down;
    s->c.bytes_moved_up += r->bytes_up;
    s->c.bytes_moved_host += r->bytes_host;
    s->c.tokens_evicted += r->evicted;
    s->c.retiers++;
    s->c.retier_seconds += r->plan_seconds;
    s->c.budget_raised += raised;
    kv_note_t0_peak(kv, s);
}

/* One sequence with its own budget (KV_B_RATIO, KV_B_SEQ). */
static void retier_own(kv_cache *kv, kv_seq *s) {
    double t0 = tkv_now_s();
    begin_record(kv, s);
    int raised = 0, len = s->len;
    int budget = kv_t0_budget(kv, s, len, &raised);
    int nprot = mark_protected(kv, s);
    /* room for the next delta tokens beyond what the budget grows by then (floor(r * len) grows by
     * r per token, +1 for the rounding); at r = 1 it grows by exactly one per token and needs none:
     * a whole budget must keep every token (evict at 100% evicted one at its second re-tiering) */
    double r = kv->o.t0_ratio > 0 ? kv->o.t0_ratio : 0;
    int headroom = kv->mode == KV_B_SEQ ? kv->o.delta : r >= 1.0 ? 0 : (int)ceil(kv->o.delta * (1.0 - r)) + 1;
    int b0 = budget - headroom < nprot ? nprot : budget - headroom;
    select_targets(kv, s, nprot, b0 - nprot);
    plan_demotions(kv, s);
    plan_rest(kv, s, 0);
    defer_recycled(kv, (int)(s - kv->seq));
    end_record(kv, s, tkv_now_s() - t0, raised);
}

/* An idle sequence (kv_seq_idle): no T0 room at all, so every row it does not share leaves T0 for the
 * tiers the policy ranks it into (hierarchy: T1, and its T2 and evicted shares as at any re-tiering). */
static void retier_idle(kv_cache *kv, kv_seq *s) {
    double t0 = tkv_now_s();
    begin_record(kv, s);
    int nprot = mark_protected(kv, s);
    select_targets(kv, s, nprot, 0);
    plan_demotions(kv, s);
    plan_rest(kv, s, 0);
    defer_recycled(kv, (int)(s - kv->seq));
    end_record(kv, s, tkv_now_s() - t0, 0);
}

int kv_idle_to_t2(kv_cache *kv, kv_seq *s) {
    if (!s->idle || !kv->ops->uses_t2 || !kv->tp[BE_T2].cap_chunks) return 0;
    kv_complete_batch(kv);
    double t0 = tkv_now_s();
    int n = 0;
    for (int i = 0; i < s->len; i++) {
        int t = kv_ref_tier(s->ref[i]);
        s->target[i] = (uint8_t)(t == BE_T1 ? BE_T2 : t); /* what it shares stays in T0 */
        n += t == BE_T1;
    }
    if (!n) return 0;
    begin_record(kv, s);
    plan_rest(kv, s, 0);
    end_record(kv, s, tkv_now_s() - t0, 0);
    start_batch(kv);
    kv_complete_batch(kv);
    return n;
}

/* Every live sequence under one budget (KV_B_SHARED); idle ones hold no T0 and take no part. */
static void retier_shared(kv_cache *kv) {
    double t0 = tkv_now_s();
    kv_tpool *p0 = &kv->tp[BE_T0];
    if (kv->cap_mark < p0->n_slots) {
        free(kv->mark);
        kv->mark = tkv_xmalloc((size_t)p0->n_slots);
        kv->cap_mark = p0->n_slots;
    }
    memset(kv->mark, 0, (size_t)p0->n_slots);
    int64_t prot_phys = 0;
    int n = 0;
    for (int q = 0; q < kv->o.n_seq; q++) {
        kv_seq *s = &kv->seq[q];
        if (!s->live || s->idle) continue;
        begin_record(kv, s);
        mark_protected(kv, s);
        int m = 0;
        for (int i = 0; i < s->len; i++) {
            if (s->prot[i]) {
                int32_t r = s->ref[i];
                if (kv_ref_tier(r) == BE_T0 && !kv->mark[BE_SLOT_IDX(r)]++) prot_phys++;
            } else if (kv_ref_tier(s->ref[i]) != 3) {
                s->order[m++] = i;
            }
        }
        kv_scores_host(kv, s);
        kv_rank(s->score, s->order, m, s->scratch);
        kv->share[n] = (kv_share_seq){s->score, s->order, m, norm_of(kv, s)};
        n++;
    }
    int64_t headroom = (int64_t)kv->o.delta * n;
    int64_t room = kv->shared_tokens - headroom - prot_phys;
    void *scratch = tkv_xmalloc((size_t)(n > 0 ? n : 1) * kv_share_scratch_item());
    kv_policy_share_t0(kv->share, n, room > 0 ? (room > INT32_MAX ? INT32_MAX : (int)room) : 0, kv->share_room, scratch);
    free(scratch);
    int k = 0;
    for (int q = 0; q < kv->o.n_seq; q++) {
        kv_seq *s = &kv->seq[q];
        if (!s->live || s->idle) continue;
        int nprot = 0;
        for (int i = 0; i < s->len; i++) nprot += s->prot[i];
        select_targets(kv, s, nprot, kv->share_room[k++]);
        plan_demotions(kv, s);
    }
    for (int q = 0; q < kv->o.n_seq; q++)
        if (kv->seq[q].live && !kv->seq[q].idle) plan_rest(kv, &kv->seq[q], 1);
    defer_recycled(kv, -1);
    double each = n > 0 ? (tkv_now_s() - t0) / n : 0; /* one plan for all: each its share */
    for (int q = 0; q < kv->o.n_seq; q++)
        if (kv->seq[q].live && !kv->seq[q].idle) end_record(kv, &kv->seq[q], each, 0);
}

void kv_retier(kv_cache *kv, const int *seqs, int n) {
    kv_complete_batch(kv);
    if (kv->mode == KV_B_SHARED) retier_shared(kv);
    else
        for (int i = 0; i < n; i++) retier_own(kv, kv_get_seq(kv, seqs[i]));
    start_batch(kv);
}

void kv_retier_one(kv_cache *kv, kv_seq *s) {
    kv_complete_batch(kv);
    if (s->idle) retier_idle(kv, s);
    else if (kv->mode == KV_B_SHARED) retier_shared(kv);
    else retier_own(kv, s);
    start_batch(kv);
}
