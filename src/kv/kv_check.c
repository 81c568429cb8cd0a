/* kv_check.c — the consistency checker behind kv_check (for tests and debugging): recomputes every
 * invariant of kv_state.h from scratch. All of it is this thread's metadata (the engine only
 * copies row bytes), so it does not wait for in-flight moves. Not used in decode. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_budget.h"
#include "kv/kv_pool.h"
#include "kv/kv_view.h"

/* The baselines: every (layer, kv head) row within the limit of the policy's last step (plus the
 * tokens appended since, held by every row until the next step), evicted tokens held by no row,
 * resident tokens by at least one. */
static int check_baseline(const kv_cache *kv, int q, char *err, size_t errlen) {
    const kv_seq *s = &kv->seq[q];
    int limit = s->bl_len == 0 ? s->len : s->bl_limit + (s->len - s->bl_len);
    if (!s->keep) {
        int held = s->len - (int)s->ntok[KV_T3];
        if (held > limit) return tkv_errf(err, errlen, "seq %d: %s holds %d tokens, its limit is %d", q, kv->ops->name, held, limit);
        return 0;
    }
    size_t nc = (size_t)kv_keep_stride(kv);
    int rows = kv->o.n_layer * kv->o.n_head_kv;
    for (int r = 0; r < rows; r++) {
        const uint8_t *k = s->keep + (size_t)r * nc;
        int held = 0;
        for (int p = 0; p < s->len; p++) {
            held += k[p] != 0;
            if (k[p] && s->ref[p] == BE_SLOT_NONE)
                return tkv_errf(err, errlen, "seq %d: evicted position %d still held by layer %d kv head %d", q, p,
                                r / kv->o.n_head_kv, r % kv->o.n_head_kv);
        }
        if (held > limit)
            return tkv_errf(err, errlen, "seq %d: %s: layer %d kv head %d holds %d tokens, its limit is %d", q, kv->ops->name,
                            r / kv->o.n_head_kv, r % kv->o.n_head_kv, held, limit);
    }
    for (int p = 0; p < s->len; p++) {
        if (s->ref[p] == BE_SLOT_NONE) continue;
        int any = 0;
        for (int r = 0; r < rows && !any; r++) any = s->keep[(size_t)r * nc + p] != 0;
        if (!any) return tkv_errf(err, errlen, "seq %d: position %d is held by no (layer, kv head) but keeps its slot", q, p);
    }
    return 0;
}

static int check_seq(const kv_cache *kv, int q, int32_t *count[BE_N_POOLS], char *err, size_t errlen) {
    const kv_seq *s = &kv->seq[q];
    int64_t cnt[4] = {0, 0, 0, 0};
    int nprompt = 0, t0_deferred = 0;
    for (int p = 0; p < s->len; p++) {
        int32_t r = s->ref[p], a = s->att[p];
        int t = kv_ref_tier(r);
        cnt[t]++;
        nprompt += s->prompt[p];
        if (r != BE_SLOT_NONE) {
            if (t == BE_STAGE || BE_SLOT_IDX(r) >= kv->tp[t].n_slots)
                return tkv_errf(err, errlen, "seq %d: position %d has a bad slot (tier %d, slot %d)", q, p, t, BE_SLOT_IDX(r));
            count[t][BE_SLOT_IDX(r)]++;
        }
        if (kv_stage_mirrors(kv, t)) {
            if (a != kv_stage_slot(kv, r) || BE_SLOT_IDX(a) >= kv->tp[BE_STAGE].n_slots)
                return tkv_errf(err, errlen, "seq %d: position %d in T%d is not read through its stage slot", q, p, t);
        } else if (a != r) {
            return tkv_errf(err, errlen, "seq %d: position %d is read from a place it is not", q, p);
        }
        if (kv_ops_ranked(kv->ops) && kv_is_protected(kv, s, p, s->len) && t != KV_T0)
            return tkv_errf(err, errlen, "seq %d: protected position %d is in T%d", q, p, t);
        if (kv->o.unpin_prompt && s->prompt[p] && t != KV_T0 && t != KV_T1)
            return tkv_errf(err, errlen, "seq %d: unpinned prompt position %d is in T%d", q, p, t);
    }
    for (int t = 0; t < 4; t++)
        if (cnt[t] != s->ntok[t])
            return tkv_errf(err, errlen, "seq %d: T%d holds %lld tokens, counted %lld", q, t, (long long)cnt[t], (long long)s->ntok[t]);
    if (nprompt != s->n_prompt) return tkv_errf(err, errlen, "seq %d: %d prompt tokens, counted %d", q, nprompt, s->n_prompt);
    for (int i = 0; kv->batch.active && i < kv->batch.n_deferred; i++)
        t0_deferred += kv->batch.deferred[i].seq == q && BE_SLOT_TIER(kv->batch.deferred[i].ref) == BE_T0;
    if (s->t0_held != s->ntok[KV_T0] + t0_deferred)
        return tkv_errf(err, errlen, "seq %d: holds %d T0 slots, counted %lld tokens + %d deferred", q, s->t0_held,
                        (long long)s->ntok[KV_T0], t0_deferred);
    if (kv->ops->own_budget) return check_baseline(kv, q, err, errlen);
    if (kv->mode != KV_B_SHARED) {
        int budget = kv_t0_budget(kv, s, s->len, NULL);
        if (s->t0_held > budget) return tkv_errf(err, errlen, "seq %d: T0 uses %d slots, budget %d tokens", q, s->t0_held, budget);
    }
    int64_t t0_bytes = (int64_t)s->t0_held * kv_token_bytes(kv, KV_T0);
    if (t0_bytes > s->c.peak_t0_bytes && s->len > 0)
        return tkv_errf(err, errlen, "seq %d: T0 bytes %lld above the recorded peak", q, (long long)t0_bytes);
    return 0;
}

/* Every slot of every pool: free exactly when no one holds it, held by as many as reference it. */
static int check_pools(const kv_cache *kv, int32_t *count[BE_N_POOLS], char *err, size_t errlen) {
    for (int i = 0; kv->batch.active && i < kv->batch.n_deferred; i++) {
        int32_t r = kv->batch.deferred[i].ref;
        count[BE_SLOT_TIER(r)][BE_SLOT_IDX(r)]++;
    }
    for (int t = 0; t < BE_N_POOLS; t++) {
        const kv_tpool *p = &kv->tp[t];
        uint8_t *isfree = calloc((size_t)(p->n_slots > 0 ? p->n_slots : 1), 1);
        if (!isfree) return tkv_errf(err, errlen, "kv_check: out of memory");
        int rc = 0;
        for (int i = 0; i < p->n_free && !rc; i++) {
            int sl = p->free[i];
            if (sl < 0 || sl >= p->n_slots || isfree[sl]++) rc = tkv_errf(err, errlen, "T%d: free slot %d bad or listed twice", t, sl);
        }
        for (int sl = 0; sl < p->n_slots && !rc; sl++) {
            if (isfree[sl] && (p->holders[sl] || count[t][sl]))
                rc = tkv_errf(err, errlen, "T%d: slot %d is free but held (%d holders, %d references)", t, sl, p->holders[sl],
                              count[t][sl]);
            else if (!isfree[sl] && p->holders[sl] != count[t][sl])
                rc = tkv_errf(err, errlen, "T%d: slot %d has %d holders but %d references%s", t, sl, p->holders[sl], count[t][sl],
                              count[t][sl] ? "" : " (leaked)");
        }
        free(isfree);
        if (rc) return rc;
        if (kv_tpool_in_use(p) > p->cap_slots)
            return tkv_errf(err, errlen, "T%d: %lld slots in use, above its budget of %lld", t, (long long)kv_tpool_in_use(p),
                            (long long)p->cap_slots);
        if (kv_tpool_in_use(p) > p->peak) return tkv_errf(err, errlen, "T%d: use above the recorded peak", t);
    }
    if (kv->mode == KV_B_SHARED && kv->reserved > kv->shared_tokens)
        return tkv_errf(err, errlen, "T0: %lld tokens reserved, above the budget of %lld", (long long)kv->reserved,
                        (long long)kv->shared_tokens);
    return 0;
}

/* STAGE mirrors the chunks of the tiers read through it, one STAGE chunk each and no more, and each
 * STAGE chunk names the chunk it mirrors. */
static int check_stage(const kv_cache *kv, char *err, size_t errlen) {
    int mirrored = 0, n_stage = kv->pools.pool[BE_STAGE].n_chunks;
    for (int t = BE_T1; t <= BE_T2; t++) {
        int m = kv_stage_mirrors(kv, t);
        for (int c = 0; c < kv->pools.pool[t].n_chunks; c++) {
            int32_t k = kv->stage_chunk[t - BE_T1][c];
            if (!m && k != -1) return tkv_errf(err, errlen, "T%d chunk %d has a STAGE mirror, but T%d is not staged", t, c, t);
            if (m && (k < 0 || k >= n_stage || kv->stage_src[k] != BE_SLOT(t, c << KV_CHUNK_SHIFT)))
                return tkv_errf(err, errlen, "T%d chunk %d: its STAGE mirror %d does not mirror it", t, c, k);
        }
        mirrored += m ? kv->pools.pool[t].n_chunks : 0;
    }
    if (n_stage != mirrored)
        return tkv_errf(err, errlen, "STAGE holds %d chunks for the %d chunks it mirrors", n_stage, mirrored);
    return 0;
}

int kv_check(const kv_cache *kv, char *err, size_t errlen) {
    int32_t *count[BE_N_POOLS];
    for (int t = 0; t < BE_N_POOLS; t++) count[t] = calloc((size_t)(kv->tp[t].n_slots > 0 ? kv->tp[t].n_slots : 1), sizeof(int32_t));
    int rc = 0;
    for (int t = 0; t < BE_N_POOLS; t++)
        if (!count[t]) rc = tkv_errf(err, errlen, "kv_check: out of memory");
    for (int q = 0; q < kv->o.n_seq && rc == 0; q++)
        if (kv->seq[q].live) rc = check_seq(kv, q, count, err, errlen);
    if (!rc) rc = check_pools(kv, count, err, errlen);
    if (!rc) rc = check_stage(kv, err, errlen);
    for (int t = 0; t < BE_N_POOLS; t++) free(count[t]);
    return rc;
}
