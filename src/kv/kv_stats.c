/* kv_stats.c — statistics: per-sequence and total counters, JSON for scripts, a table for people,
 * and the re-tiering log. Reads kv_state.h; changes nothing. */
#include <string.h>

#include "base/json.h"
#include "base/meminfo.h"
#include "kv/kv_budget.h"
#include "kv/kv_pool.h"

/* Adds s to o; *steps += its decode steps (what t0_share_mean averages over). */
static void add_seq(const kv_cache *kv, const kv_seq *s, kv_stats *o, int64_t *steps) {
    for (int t = 0; t < 4; t++) {
        o->tokens[t] += s->ntok[t];
        o->bytes[t] += s->ntok[t] * kv_token_bytes(kv, t);
    }
    o->peak_t0_bytes += s->c.peak_t0_bytes;
    if (!kv->ops->own_budget) {
        int64_t b = (int64_t)kv_t0_budget(kv, s, s->len, NULL) * kv_token_bytes(kv, 0);
        o->t0_budget_bytes += b;
        o->limit_bytes += b;
        for (int t = 0; t < 3; t++) o->held_bytes += s->ntok[t] * kv_token_bytes(kv, t);
        o->evicted_equiv += (double)s->ntok[KV_T3];
    } else { /* baselines: per (layer, kv head) row, see kv.h */
        int64_t rows_per_token = (int64_t)kv->o.n_layer * kv->o.n_head_kv, new_tokens = s->len - s->bl_len;
        int64_t held_rows = s->bl_held_rows + new_tokens * rows_per_token;
        o->held_bytes += held_rows * kv_row_bytes(kv);
        if (s->bl_len > 0) o->evicted_equiv += (double)((int64_t)s->len * rows_per_token - held_rows) / (double)rows_per_token;
        o->peak_held_bytes += s->c.peak_held_bytes;
        int fresh = s->bl_len == 0; /* before the prompt end: the method holds everything */
        o->t0_budget_bytes += (int64_t)(fresh ? s->len : s->bl_budget) * kv_token_bytes(kv, 0);
        o->limit_bytes += (int64_t)(fresh ? s->len : s->bl_limit + new_tokens) * kv_token_bytes(kv, 0);
    }
    for (int p = 0; p < s->len; p++) o->shared_tokens += s->ref[p] != BE_SLOT_NONE && kv_slot_holders(kv, s->ref[p]) > 1;
    o->budget_raised += s->c.budget_raised;
    o->bytes_moved_down += s->c.bytes_moved_down;
    o->bytes_moved_up += s->c.bytes_moved_up;
    o->bytes_staged += s->c.bytes_staged;
    o->tokens_evicted += s->c.tokens_evicted;
    o->retiers += s->c.retiers;
    o->move_seconds += s->c.move_seconds;
    o->retier_seconds += s->c.retier_seconds;
    o->sync_demotions += s->c.sync_demotions;
    o->bytes_moved_host += s->c.bytes_moved_host;
    o->live_seqs++;
    o->t0_share_mean += s->t0_share_sum; /* a sum here; kv_get_stats divides */
    *steps += s->t0_share_n;
}

void kv_get_stats(const kv_cache *kv, int seq, kv_stats *out) {
    memset(out, 0, sizeof *out);
    int64_t steps = 0;
    if (seq >= 0) {
        add_seq(kv, kv_get_seq(kv, seq), out, &steps);
        out->t0_share_mean = steps ? out->t0_share_mean / (double)steps : 0;
        return;
    }
    for (int q = 0; q < kv->o.n_seq; q++)
        if (kv->seq[q].live) add_seq(kv, &kv->seq[q], out, &steps);
    /* the cache as a whole: what removed sequences did, and T0 as it is in memory (a prefix held by
     * several sequences counts once), with its one peak */
    const kv_stats *r = &kv->retired;
    out->budget_raised += r->budget_raised;
    out->bytes_moved_down += r->bytes_moved_down;
    out->bytes_moved_up += r->bytes_moved_up;
    out->bytes_moved_host += r->bytes_moved_host;
    out->bytes_staged += r->bytes_staged;
    out->tokens_evicted += r->tokens_evicted;
    out->retiers += r->retiers;
    out->sync_demotions += r->sync_demotions;
    out->move_seconds += r->move_seconds;
    out->retier_seconds += r->retier_seconds;
    out->fence_wait_seconds = r->fence_wait_seconds;
    out->copy_stall_seconds = kv->be->ops->copy_stall_seconds ? kv->be->ops->copy_stall_seconds(kv->be) : 0;
    int64_t tb0 = kv_token_bytes(kv, 0);
    const kv_tpool *p0 = &kv->tp[BE_T0];
    int64_t held_once = 0, saved = 0;
    for (int i = 0; i < p0->n_slots; i++) {
        held_once += p0->holders[i] > 0;
        saved += p0->holders[i] > 1 ? p0->holders[i] - 1 : 0;
    }
    if (!kv->ops->own_budget) out->bytes[0] = held_once * tb0;
    out->shared_bytes_saved = saved * tb0;
    out->peak_t0_bytes = p0->peak * tb0;
    if (kv->mode == KV_B_SHARED && kv_ops_ranked(kv->ops)) out->t0_budget_bytes = out->limit_bytes = kv->shared_tokens * tb0;
    out->t0_share_mean = steps ? out->t0_share_mean / (double)steps : 0;
}

void kv_stats_json(struct json_out *o, const kv_stats *s) {
    json_out_obj_begin(o);
    json_out_key(o, "tokens");
    json_out_arr_begin(o);
    for (int t = 0; t < 4; t++) json_out_int(o, s->tokens[t]);
    json_out_arr_end(o);
    json_out_key(o, "bytes");
    json_out_arr_begin(o);
    for (int t = 0; t < 4; t++) json_out_int(o, s->bytes[t]);
    json_out_arr_end(o);
    /* the keys in their order; each an integer (i) or a number (d) */
    const struct { const char *key; const int64_t *i; const double *d; } f[] = {
        {"peak_t0_bytes", &s->peak_t0_bytes, NULL},   {"t0_budget_bytes", &s->t0_budget_bytes, NULL},
        {"budget_raised", &s->budget_raised, NULL},   {"bytes_moved_down", &s->bytes_moved_down, NULL},
        {"bytes_moved_up", &s->bytes_moved_up, NULL}, {"bytes_moved_host", &s->bytes_moved_host, NULL},
        {"bytes_staged", &s->bytes_staged, NULL},     {"tokens_evicted", &s->tokens_evicted, NULL},
        {"retiers", &s->retiers, NULL},               {"evicted_equiv", NULL, &s->evicted_equiv},
        {"sync_demotions", &s->sync_demotions, NULL}, {"held_bytes", &s->held_bytes, NULL},
        {"peak_held_bytes", &s->peak_held_bytes, NULL}, {"limit_bytes", &s->limit_bytes, NULL},
        {"move_seconds", NULL, &s->move_seconds},     {"retier_seconds", NULL, &s->retier_seconds},
        {"fence_wait_seconds", NULL, &s->fence_wait_seconds}, {"copy_stall_seconds", NULL, &s->copy_stall_seconds},
        {"shared_tokens", &s->shared_tokens, NULL},   {"shared_bytes_saved", &s->shared_bytes_saved, NULL},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        json_out_key(o, f[k].key);
        if (f[k].i) json_out_int(o, *f[k].i);
        else json_out_num(o, *f[k].d);
    }
    json_out_key(o, "live_seqs"), json_out_int(o, s->live_seqs);
    json_out_key(o, "t0_share_mean"), json_out_num(o, s->t0_share_mean);
    json_out_obj_end(o);
}

void kv_stats_write_json(FILE *f, const kv_cache *kv) {
    struct json_out o;
    json_out_init(&o);
    kv_stats st;
    kv_get_stats(kv, -1, &st);
    json_out_obj_begin(&o);
    json_out_key(&o, "policy"), json_out_str(&o, kv_policy_name(kv->o.policy));
    json_out_key(&o, "staged"), json_out_int(&o, kv->o.staged);
    json_out_key(&o, "sync_transfers"), json_out_int(&o, kv->o.sync_transfers);
    json_out_key(&o, "total"), kv_stats_json(&o, &st);
    json_out_key(&o, "seqs");
    json_out_arr_begin(&o);
    for (int q = 0; q < kv->o.n_seq; q++) {
        if (!kv->seq[q].live) continue;
        kv_get_stats(kv, q, &st);
        kv_stats_json(&o, &st);
    }
    json_out_arr_end(&o);
    json_out_obj_end(&o);
    fprintf(f, "%s\n", o.b.p);
    json_out_free(&o);
}

void kv_stats_print(FILE *f, const kv_cache *kv, int seq) {
    kv_stats s;
    kv_get_stats(kv, seq, &s);
    const char *names[4] = {kv->o.f16 ? "T0 fast (f16)" : "T0 fast (f32)", kv->o.f16 ? "T1 host (f16)" : "T1 host (f32)",
                            kv->o.t2_fmt == BE_KV_Q4BH || kv->o.t2_fmt == BE_KV_Q4BHC ? "T2 host (int4)" : "T2 host (int8)", "T3 evicted"};
    fprintf(f, "kv %s%s: policy %s, %s transfers%s, T2 codec %s\n", seq < 0 ? "total" : "sequence ", seq < 0 ? "" : "",
            kv_policy_name(kv->o.policy), kv->o.sync_transfers ? "sync" : "async", kv->o.staged ? ", staged T1" : "",
            be_kv_t2_name(kv->o.t2_fmt));
    if (seq >= 0) fprintf(f, "  (sequence %d)\n", seq);
    for (int t = 0; t < 4; t++) fprintf(f, "  %-15s %8lld tokens %10.2f MiB\n", names[t], (long long)s.tokens[t], tkv_mib(s.bytes[t]));
    fprintf(f, "  T0 budget %.2f MiB (peak %.2f MiB, raised to protected %lld steps)\n", tkv_mib(s.t0_budget_bytes),
            tkv_mib(s.peak_t0_bytes), (long long)s.budget_raised);
    fprintf(f, "  %lld re-tierings: down %.2f MiB, up %.2f MiB, host %.2f MiB, %lld sync demotions, %lld evicted\n",
            (long long)s.retiers, tkv_mib(s.bytes_moved_down), tkv_mib(s.bytes_moved_up), tkv_mib(s.bytes_moved_host),
            (long long)s.sync_demotions, (long long)s.tokens_evicted);
    if (kv->ops->own_budget)
        fprintf(f, "  %s holds %.2f MiB per (layer, kv head) row (peak after a step %.2f MiB); its rule allows %.2f MiB "
                "now (budget + %s)\n", kv_policy_name(kv->o.policy), tkv_mib(s.held_bytes), tkv_mib(s.peak_held_bytes),
                tkv_mib(s.limit_bytes), kv->ops->limit_rule);
    if (kv->ops->own_budget)
        fprintf(f, "  %.1f positions dropped per (layer, kv head) row on average (T3 counts only those no row holds)\n",
                s.evicted_equiv);
    if (s.shared_tokens)
        fprintf(f, "  shared prompt prefix: %lld positions held once, %.2f MiB of T0 saved\n", (long long)s.shared_tokens,
                tkv_mib(s.shared_bytes_saved));
    fprintf(f, "  staged %.2f MiB; time: plan %.3f s, moves %.3f s, fence waits %.3f s\n", tkv_mib(s.bytes_staged),
            s.retier_seconds, s.move_seconds, s.fence_wait_seconds);
    if (seq < 0 && kv->be->ops->copy_stall_seconds) /* a backend with a copy queue of its own */
        fprintf(f, "  device stalled for copies at the fences %.3f s\n", s.copy_stall_seconds);
}

void kv_retier_log_print(FILE *f, const kv_cache *kv) {
    fprintf(f, "%4s %6s %6s %7s %7s %7s %7s %9s %9s %9s %6s %9s %9s\n", "seq", "step", "len", "T0", "T1", "T2", "T3",
            "down KiB", "up KiB", "host KiB", "moves", "plan ms", "move ms");
    for (int i = 0; i < kv->log_n; i++) {
        const kv_retier_record *r = &kv->log[i];
        fprintf(f, "%4d %6lld %6d %7lld %7lld %7lld %7lld %9.1f %9.1f %9.1f %6d %9.3f %9.3f\n", r->seq, (long long)r->step,
                r->len, (long long)r->tokens[0], (long long)r->tokens[1], (long long)r->tokens[2], (long long)r->tokens[3],
                r->bytes_down / 1024.0, r->bytes_up / 1024.0, r->bytes_host / 1024.0, r->moves, r->plan_seconds * 1e3,
                r->move_seconds * 1e3);
    }
}
