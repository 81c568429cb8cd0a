/* stats.c (engine) — statistics of a session through the public API (per live sequence since it
 * opened, or the session: live sequences plus the counters of closed ones), their printing, and the
 * capacity plan of `tierkv plan`. Reads the KV module's counters; changes nothing. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"

static void to_public(const kv_stats *k, tkv_stats *o) {
    memset(o, 0, sizeof *o);
    for (int t = 0; t < 4; t++) o->tokens[t] = k->tokens[t], o->bytes[t] = k->bytes[t];
    o->peak_t0_bytes = k->peak_t0_bytes;
    o->t0_budget_bytes = k->t0_budget_bytes;
    o->budget_raised = k->budget_raised;
    o->bytes_moved_down = k->bytes_moved_down;
    o->bytes_moved_up = k->bytes_moved_up;
    o->bytes_moved_host = k->bytes_moved_host;
    o->bytes_staged = k->bytes_staged;
    o->tokens_evicted = k->tokens_evicted;
    o->evicted_equiv = k->evicted_equiv;
    o->retiers = k->retiers;
    o->sync_demotions = k->sync_demotions;
    o->move_seconds = k->move_seconds;
    o->retier_seconds = k->retier_seconds;
    o->fence_wait_seconds = k->fence_wait_seconds;
    o->held_bytes = k->held_bytes;
    o->peak_held_bytes = k->peak_held_bytes;
    o->limit_bytes = k->limit_bytes;
}

int tkv_stats_get(const tkv_session *s, int seq, tkv_stats *out, char *err, size_t errlen) {
    kv_stats k;
    if (seq >= 0) {
        if (seq >= s->p.max_seqs || !s->seqs[seq].open) return tkv_errf(err, errlen, "sequence %d is not open", seq);
        kv_get_stats(s->kv, seq, &k);
        const kv_stats *b = &s->seqs[seq].base;
#define D(f) k.f -= b->f
        D(budget_raised); D(bytes_moved_down); D(bytes_moved_up); D(bytes_moved_host); D(bytes_staged);
        D(tokens_evicted); D(retiers); D(sync_demotions); D(move_seconds); D(retier_seconds); D(fence_wait_seconds);
#undef D
        to_public(&k, out);
        out->live_seqs = 1;
        return 0;
    }
    kv_get_stats(s->kv, -1, &k);
    const kv_stats *c = &s->closed;
#define A(f) k.f += c->f
    A(budget_raised); A(bytes_moved_down); A(bytes_moved_up); A(bytes_moved_host); A(bytes_staged);
    A(tokens_evicted); A(retiers); A(sync_demotions); A(move_seconds); A(retier_seconds); A(fence_wait_seconds);
#undef A
    to_public(&k, out);
    out->live_seqs = s->n_open;
    return 0;
}

void tkv_sync(tkv_session *s) { kv_sync(s->kv); }

void tkv_stats_print(FILE *f, const tkv_session *s, int seq) { kv_stats_print(f, s->kv, seq); }

void tkv_retier_log_print(FILE *f, const tkv_session *s) { kv_retier_log_print(f, s->kv); }

int tkv_stats_write_json(FILE *f, const tkv_session *s) {
    kv_stats_write_json(f, s->kv);
    return ferror(f) || fflush(f) ? -1 : 0;
}

int64_t tkv_token_bytes(const tkv_session *s, int tier) { return kv_token_bytes(s->kv, tier); }

/* ---- plan ---- */

int tkv_plan(const tkv_shape *sh, const tkv_kv_params *kv, int batch, int ctx, int prompt, tkv_plan_result *out,
             char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (sh->n_layer < 1 || sh->n_head_kv < 1 || sh->head_dim < 1)
        return tkv_errf(err, errlen, "plan: bad shape (layers %d, kv heads %d, head dim %d)", sh->n_layer, sh->n_head_kv,
                        sh->head_dim);
    if (batch < 1 || ctx < 1 || prompt < 0 || prompt > ctx)
        return tkv_errf(err, errlen, "plan: batch %d, context %d, prompt %d out of range", batch, ctx, prompt);
    double r0 = kv->hbm_ratio, r2 = kv->t2_ratio > 0 ? kv->t2_ratio : 0, r3 = kv->evict_ratio > 0 ? kv->evict_ratio : 0;
    if (r0 >= 0 && kv->hbm_budget_bytes) return tkv_errf(err, errlen, "plan: give --hbm-ratio or --hbm-budget, not both");
    if ((r0 > 0 ? r0 : 0) + r2 + r3 > 1.0 + 1e-9) return tkv_errf(err, errlen, "plan: budgets add up to more than the length");
    int elem = kv->f16 ? 2 : 4;
    double kvb = 2.0 * sh->n_layer * sh->n_head_kv * sh->head_dim * elem;
    double t2b = 2.0 * sh->n_layer * sh->n_head_kv * (sh->head_dim + 4.0);
    double n = (double)ctx, prot = fmin(n, (double)prompt + kv->sinks + (kv->window > 1 ? kv->window : 1));
    double t0, t1 = 0, t2 = 0, t3 = 0;
    if (kv->policy == TKV_POLICY_FULL || (r0 < 0 && !kv->hbm_budget_bytes)) {
        t0 = n;
    } else {
        t0 = kv->hbm_budget_bytes ? floor((double)kv->hbm_budget_bytes / (double)batch / kvb) : floor(r0 * n + 1e-9);
        if (t0 < prot) {
            if (kv->hbm_budget_bytes)
                return tkv_errf(err, errlen, "plan: the budget holds %.0f tokens per sequence, fewer than the %.0f protected", t0, prot);
            out->t0_raised = 1;
            t0 = prot;
        }
        t0 = fmin(t0, n);
        double rest = n - t0;
        t3 = fmin(rest, floor(r3 * n + 1e-9));
        if (kv->policy == TKV_POLICY_EVICT) t3 = rest;
        else if (kv->policy == TKV_POLICY_QUANT) t2 = rest - t3;
        else t2 = fmin(rest - t3, floor(r2 * n + 1e-9)), t1 = rest - t2 - t3;
    }
    out->token_bytes[0] = out->token_bytes[1] = (int64_t)kvb;
    out->token_bytes[2] = (int64_t)t2b;
    out->t0_tokens = (int64_t)t0, out->t1_tokens = (int64_t)t1, out->t2_tokens = (int64_t)t2, out->t3_tokens = (int64_t)t3;
    out->t0_bytes_total = (int64_t)(t0 * kvb) * batch;
    out->protected_tokens = (int64_t)prot;
    return 0;
}
