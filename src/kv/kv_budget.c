/* kv_budget.c — budgets and protection: which tokens must stay in T0 (the prompt, the first `sinks`
 * positions, the last `window`), how many T0 places each sequence or the whole cache has, what a new
 * sequence must reserve to be admitted, and the checks of the options behind every message a user
 * sees about budgets. kv_plan (tierkv plan) runs the same rules without a cache.
 *
 * The T0 budget, given once:
 *   - t0_ratio r (KV_B_RATIO): floor(r * len) of each sequence's current length;
 *   - t0_tokens N (KV_B_SEQ): N per sequence;
 *   - t0_budget_bytes B (KV_B_SHARED): B / token bytes for all live sequences together, ranked
 *     across them (kv_plan.c); a sequence is admitted only while the reservations of the live ones
 *     (prompt + sinks + window each; the whole context for policy full) fit in it.
 * Per-sequence budgets are raised to the protected tokens when below (counted in budget_raised).
 * The baselines take the budget as their method's token budget per (layer, kv head) row; a byte
 * budget gives each sequence slot an equal share (their methods know no cross-sequence budget). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_budget.h"
#include "kv/kv_pool.h"

void kv_options_default(kv_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = KV_POLICY_FULL;
    o->t0_ratio = o->t2_ratio = o->evict_ratio = -1.0;
    o->delta = 64;
    o->sinks = 4;
    o->window = 64;
    o->f16 = 1; /* llama.cpp's default cache type; f32 on request */
    o->t2_fmt = BE_KV_Q8_HEAD;
}

static int64_t elem_bytes(const kv_options *o) { return o->f16 ? (int64_t)sizeof(uint16_t) : (int64_t)sizeof(float); }

static int64_t token_bytes_of(const kv_options *o, int tier) {
    if (tier == 3) return 0;
    be_kv_fmt f = tier == 2 ? o->t2_fmt : o->f16 ? BE_KV_F16 : BE_KV_F32;
    return (int64_t)o->n_layer * (int64_t)be_kv_record_bytes(f, o->n_head_kv, o->head_dim);
}

int64_t kv_token_bytes(const kv_cache *kv, int tier) { return token_bytes_of(&kv->o, tier); }

int64_t kv_row_bytes(const kv_cache *kv) { return 2 * (int64_t)kv->o.head_dim * elem_bytes(&kv->o); }

int kv_ratio_tokens(double r, int len) { return r > 0 ? (int)floor(r * len + 1e-9) : 0; }

/* ---- protection ---- */

int kv_is_protected(const kv_cache *kv, const kv_seq *s, int pos, int len) {
    if (s->idle) return 0;
    return (s->prompt[pos] && !kv->o.unpin_prompt) || pos < kv->o.sinks || pos >= len - kv->window;
}

/* The T0 places s needs at length len: protected positions, and with an unpinned prompt the prompt
 * tokens of the forward call under way (not written yet, so they cannot move; kv_trim_t0 gives the
 * places back once they are). */
int kv_prot_count(const kv_cache *kv, const kv_seq *s, int len) {
    if (s->idle) return 0;
    const uint8_t *pinned = kv->o.unpin_prompt ? NULL : s->prompt; /* prompt positions counted below */
    int n = pinned ? s->n_prompt : 0, sink_end = kv->o.sinks < len ? kv->o.sinks : len;
    for (int i = 0; i < sink_end; i++) n += !pinned || !pinned[i];
    int w0 = len - kv->window;
    if (w0 < sink_end) w0 = sink_end;
    for (int i = w0; i < len; i++) n += !pinned || !pinned[i];
    for (int i = s->fresh_from > sink_end ? s->fresh_from : sink_end; !pinned && i < w0 && i < s->len; i++) n += s->prompt[i];
    return n;
}

/* An unpinned prompt is reserved as a pinned one: its prefill chunks sit in T0 until written. */
int kv_reserve_need(const kv_cache *kv, int n_ctx, int n_prompt) {
    if (!kv->ops->tiered) return n_ctx; /* full: every token stays */
    int64_t need = (int64_t)n_prompt + (kv->o.sinks > n_prompt ? kv->o.sinks - n_prompt : 0) + kv->window;
    return need < n_ctx ? (int)need : n_ctx;
}

/* ---- budgets ---- */

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* T1's and T2's slots a sequence of n_ctx positions may hold */
static int host_tier_bound(const kv_policy_ops *ops, const kv_options *o, int t, int n_ctx) {
    if (t == BE_T1) return ops->uses_t1 ? n_ctx : 0;
    /* T2 takes its share at each re-tiering (hierarchy) or all but T0 and the evicted (quant) */
    return !ops->uses_t2 ? 0 : ops->t2_ratio_ok ? imin(n_ctx, kv_ratio_tokens(o->t2_ratio, n_ctx) + 1) : n_ctx;
}

int kv_tier_bound(const kv_cache *kv, int t, int n_ctx, int n_prompt) {
    const kv_policy_ops *ops = kv->ops;
    switch (t) {
    case BE_T0:
        if (kv->mode == KV_B_SHARED) return 0;
        /* fixed T0: the protected tokens, + the token appended before its overflow is evicted */
        if (ops->fixed_t0) return imin(n_ctx, kv_reserve_need(kv, n_ctx, n_prompt) + 1);
        if (!kv_ops_ranked(ops) || kv->mode == KV_B_NONE) return n_ctx;
        /* the budget at full length (+1 for its rounding), raised to the protected tokens */
        return imin(n_ctx, imax(kv->mode == KV_B_SEQ ? kv->seq_tokens : kv_ratio_tokens(kv->o.t0_ratio, n_ctx) + 1,
                                kv_reserve_need(kv, n_ctx, n_prompt)));
    case BE_T1:
    case BE_T2: return host_tier_bound(ops, &kv->o, t, n_ctx);
    default: return 0; /* STAGE: no slots of its own; it mirrors T1 and T2 and grows with them (kv_pool.c) */
    }
}

int kv_idle_t0(const kv_cache *kv, const kv_seq *s) {
    int n = 0;
    for (int i = 0; i < s->len; i++)
        n += s->ref[i] != BE_SLOT_NONE && BE_SLOT_TIER(s->ref[i]) == BE_T0 && kv_slot_holders(kv, s->ref[i]) > 1;
    return n;
}

int kv_t0_budget(const kv_cache *kv, const kv_seq *s, int len, int *raised) {
    if (raised) *raised = 0;
    if (!kv_ops_ranked(kv->ops)) return s->n_ctx; /* full, or a policy with its own budget */
    if (s->idle) return kv_idle_t0(kv, s);
    if (kv->mode == KV_B_SHARED) return (int)(kv->shared_tokens < INT32_MAX ? kv->shared_tokens : INT32_MAX);
    if (kv->ops->fixed_t0) return kv_prot_count(kv, s, len); /* the protected tokens, not a raised budget */
    int b = kv->mode == KV_B_SEQ ? kv->seq_tokens : kv->o.t0_ratio >= 0 ? (int)floor(kv->o.t0_ratio * len + 1e-9) : 0;
    int p = kv_prot_count(kv, s, len);
    if (b < p) {
        if (raised) *raised = 1;
        b = p;
    }
    return b;
}

int kv_bl_budget(const kv_cache *kv, int len) {
    if (kv->mode == KV_B_SEQ) return kv->seq_tokens;
    if (kv->o.t0_ratio >= 0) return kv_ratio_tokens(kv->o.t0_ratio, len);
    return len;
}

/* ---- option checks ---- */

static int check_ratio(const char *name, double r, char *err, size_t errlen) {
    if (isnan(r) || r > 1.0)
        return tkv_errf(err, errlen, "kv: %s %g is not a share of the length: it must lie in [0, 1]", name, r);
    return 0;
}

int kv_validate(const kv_options *o, const kv_policy_ops *ops, int *mode, int *seq_tokens, int64_t *shared_tokens,
                char *err, size_t errlen) {
    *mode = KV_B_NONE;
    *seq_tokens = 0;
    *shared_tokens = 0;
    if (o->n_layer <= 0 || o->n_head <= 0 || o->n_head_kv <= 0 || o->head_dim <= 0 || o->n_seq <= 0 || o->n_ctx <= 0)
        return tkv_errf(err, errlen, "kv: bad shape (layers %d, heads %d, kv heads %d, head dim %d, seqs %d, ctx %d)",
                        o->n_layer, o->n_head, o->n_head_kv, o->head_dim, o->n_seq, o->n_ctx);
    if (o->n_head % o->n_head_kv)
        return tkv_errf(err, errlen, "kv: %d heads are not a multiple of %d kv heads", o->n_head, o->n_head_kv);
    if (o->n_seq > 4096 || o->n_ctx > (1 << 24))
        return tkv_errf(err, errlen, "kv: %d sequences of %d positions: at most 4096 of 16777216", o->n_seq, o->n_ctx);
    if ((int64_t)o->n_head_kv * o->head_dim > 8192)
        return tkv_errf(err, errlen, "kv: kv dimension %d x %d above 8192", o->n_head_kv, o->head_dim);
    if (!ops) return tkv_errf(err, errlen, "kv: unknown policy %d", (int)o->policy);
    if (o->unpin_prompt && !ops->unpin_ok)
        return tkv_errf(err, errlen,
                        "kv: policy %s cannot unpin the prompt: an unpinned prompt waits in T1, which it does not use "
                        "(policy hierarchy does)", ops->name);
    if (o->t2_fmt == BE_KV_F16 || o->t2_fmt == BE_KV_F32 || be_kv_record_bytes(o->t2_fmt, 1, o->head_dim) == 0)
        return tkv_errf(err, errlen, "kv: T2 format %d is not a T2 codec", (int)o->t2_fmt);
    char cerr[160];
    if (ops->uses_t2 && !be_kv_fmt_supported(o->t2_fmt, o->head_dim, cerr, sizeof cerr))
        return tkv_errf(err, errlen, "kv: T2 codec %s: %s", be_kv_t2_name(o->t2_fmt), cerr);
    int64_t tb = token_bytes_of(o, 0);
    int given = (o->t0_ratio >= 0) + (o->t0_budget_bytes > 0) + (o->t0_tokens > 0);
    if (o->t0_tokens < 0) return tkv_errf(err, errlen, "kv: a T0 budget of %d tokens", o->t0_tokens);
    if (!ops->tiered) { /* full: ratios do not apply; a byte budget caps T0 and admission */
        if (o->t0_budget_bytes > 0) {
            *mode = KV_B_SHARED;
            *shared_tokens = (int64_t)(o->t0_budget_bytes / (uint64_t)tb);
            if (*shared_tokens < 1)
                return tkv_errf(err, errlen, "kv: hbm budget %llu bytes holds no token of %lld bytes",
                                (unsigned long long)o->t0_budget_bytes, (long long)tb);
        }
        return 0;
    }
    if (!ops->select && !ops->hooks)
        return tkv_errf(err, errlen, "kv: policy %s is not wired to its selection functions yet (src/kv/baselines.h)", ops->name);
    if (o->delta < 1) return tkv_errf(err, errlen, "kv: delta %d: re-tiering needs delta >= 1 decode steps", o->delta);
    if (o->sinks < 0 || o->window < 0)
        return tkv_errf(err, errlen, "kv: sinks %d and window %d must be >= 0", o->sinks, o->window);
    if (check_ratio("hbm ratio", o->t0_ratio, err, errlen) || check_ratio("t2 ratio", o->t2_ratio, err, errlen) ||
        check_ratio("evict ratio", o->evict_ratio, err, errlen))
        return -1;
    if (given > 1)
        return tkv_errf(err, errlen, "kv: give the T0 budget once: a ratio (%g), bytes (%llu) or tokens per sequence (%d), not both",
                        o->t0_ratio, (unsigned long long)o->t0_budget_bytes, o->t0_tokens);
    int baseline = ops->own_budget;
    if (ops->fixed_t0 && given)
        return tkv_errf(err, errlen, "kv: policy %s holds the protected tokens only (prompt, sinks, window): a T0 budget "
                        "does not apply", ops->name);
    if (!baseline && !given && !ops->fixed_t0)
        return tkv_errf(err, errlen, "kv: policy %s needs a T0 budget (hbm ratio, hbm budget bytes or T0 tokens)", ops->name);
    if (o->protect_prompt && !baseline)
        return tkv_errf(err, errlen, "kv: policy %s protects the prompt always; --protect-prompt is for the baselines", ops->name);
    if (o->t2_ratio >= 0 && !ops->t2_ratio_ok)
        return tkv_errf(err, errlen, "kv: policy %s has no T2 share to set (t2 ratio %g); use policy hierarchy",
                        ops->name, o->t2_ratio);
    if (o->evict_ratio >= 0 && !ops->evict_ratio_ok)
        return tkv_errf(err, errlen, "kv: policy %s decides eviction itself; an evict ratio (%g) does not apply",
                        ops->name, o->evict_ratio);
    double sum = (o->t0_ratio > 0 ? o->t0_ratio : 0) + (o->t2_ratio > 0 ? o->t2_ratio : 0) +
                 (o->evict_ratio > 0 ? o->evict_ratio : 0);
    if (sum > 1.0 + 1e-9)
        return tkv_errf(err, errlen, "kv: budgets do not add up: hbm %g + t2 %g + evict %g = %g of the length (> 1)",
                        o->t0_ratio > 0 ? o->t0_ratio : 0, o->t2_ratio > 0 ? o->t2_ratio : 0,
                        o->evict_ratio > 0 ? o->evict_ratio : 0, sum);
    int window = o->window > 1 ? o->window : 1;
    if (o->t0_ratio >= 0) *mode = KV_B_RATIO;
    if (o->t0_tokens > 0) {
        *mode = KV_B_SEQ;
        *seq_tokens = o->t0_tokens;
    }
    if (o->t0_budget_bytes > 0) {
        uint64_t tokens = o->t0_budget_bytes / (uint64_t)tb;
        if (baseline) { /* the methods' per-sequence budgets: an equal share of the bytes per slot */
            uint64_t per = tokens / (uint64_t)o->n_seq;
            if (per < 1)
                return tkv_errf(err, errlen, "kv: hbm budget %llu bytes / %d sequences holds no token of %lld bytes",
                                (unsigned long long)o->t0_budget_bytes, o->n_seq, (long long)tb);
            *mode = KV_B_SEQ;
            *seq_tokens = per > (uint64_t)o->n_ctx ? o->n_ctx : (int)per;
        } else {
            int need = o->sinks + window;
            if (tokens < (uint64_t)need)
                return tkv_errf(err, errlen,
                                "kv: hbm budget %llu bytes = %llu tokens of %lld bytes each, fewer than the %d protected "
                                "sinks + window tokens of one sequence (needs %lld bytes)",
                                (unsigned long long)o->t0_budget_bytes, (unsigned long long)tokens, (long long)tb, need,
                                (long long)need * tb);
            *mode = KV_B_SHARED;
            *shared_tokens = tokens > (uint64_t)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)tokens;
        }
    }
    return 0;
}

/* ---- the plan without a cache ---- */

int kv_plan(const kv_options *o, int batch, int ctx, int prompt, kv_plan_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    kv_options v = *o;
    v.n_seq = batch;
    v.n_ctx = ctx;
    if (batch < 1 || ctx < 1 || prompt < 0 || prompt > ctx)
        return tkv_errf(err, errlen, "plan: batch %d, context %d, prompt %d out of range", batch, ctx, prompt);
    const kv_policy_ops *ops = kv_policy_ops_of(o->policy);
    int mode, seq_tokens;
    int64_t shared;
    if (kv_validate(&v, ops, &mode, &seq_tokens, &shared, err, errlen)) return -1;
    for (int t = 0; t < 3; t++) out->token_bytes[t] = token_bytes_of(&v, t);
    /* a cache-less sequence at its full length: the rules of kv_t0_budget and kv_prot_count */
    int window = o->window > 1 ? o->window : 1, pinned = o->unpin_prompt ? 0 : prompt;
    int64_t n = ctx, prot = pinned + (o->sinks > pinned ? (o->sinks < ctx ? o->sinks : ctx) - pinned : 0) +
                            (window < ctx - pinned ? window : ctx - pinned);
    if (prot > n) prot = n;
    out->protected_tokens = prot;
    int64_t t0 = n;
    if (kv_ops_ranked(ops)) {
        if (mode == KV_B_RATIO) t0 = (int64_t)floor(o->t0_ratio * (double)n + 1e-9);
        else if (mode == KV_B_SEQ) t0 = seq_tokens;
        else if (ops->fixed_t0) t0 = 0; /* raised to the protected tokens below */
        else if (mode == KV_B_SHARED) {
            t0 = shared / batch;
            if (t0 < prot)
                return tkv_errf(err, errlen, "plan: the budget holds %lld tokens per sequence, fewer than the %lld protected",
                                (long long)t0, (long long)prot);
        }
        if (t0 < prot) out->raised = 1, t0 = prot;
        if (t0 > n) t0 = n;
        int64_t rest = n - t0, t3 = kv_ratio_tokens(o->evict_ratio, ctx), t2 = 0, t1 = 0;
        /* an unpinned prompt is never T2 nor evicted: only the unprotected generated tokens are */
        int64_t lossy_max = o->unpin_prompt ? n - prot - (prompt - (o->sinks < prompt ? o->sinks : prompt)) : rest;
        if (lossy_max > rest) lossy_max = rest;
        if (lossy_max < 0) lossy_max = 0;
        if (t3 > lossy_max) t3 = lossy_max;
        /* the policy's split of what misses T0, as at each re-tiering (kv_policy_caps) */
        int64_t b2 = kv_ratio_tokens(o->t2_ratio, ctx);
        if (b2 > lossy_max - t3) b2 = lossy_max - t3;
        int cap[3];
        kv_policy_caps(ops, (int)rest, 0, (int)b2, (int)t3, cap);
        t1 = cap[1], t2 = cap[2], t3 = rest - t1 - t2;
        out->t1 = t1, out->t2 = t2, out->t3 = t3;
    }
    out->t0 = t0;
    out->t0_bytes_total = t0 * out->token_bytes[0] * batch;
    /* STAGE on a GPU (kv_pool.c): KV_STAGE_LAYERS layers of a chunk for each chunk of T1 (staged) and
     * T2 (which a GPU reads through STAGE), the tiers reserved at every sequence's bound */
    int64_t per = (int64_t)1 << KV_CHUNK_SHIFT, chunks = 0;
    for (int t = BE_T1; t <= BE_T2; t++)
        if (t == BE_T2 || v.staged)
            chunks += ((int64_t)batch * host_tier_bound(ops, &v, t, ctx) + per - 1) / per;
    out->stage_bytes_total = chunks * per * KV_STAGE_LAYERS * out->token_bytes[0] / v.n_layer;
    return 0;
}
