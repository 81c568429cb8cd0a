/* session.c — tkv_session: sequences that come and go on one KV cache and one forward, and the
 * prefill/decode calls of include/tierkv.h. Owns the per-call index arrays (sized at open), so prefill
 * and decode allocate nothing; validates every id and position before the forward runs. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"

void tkv_kv_params_default(tkv_kv_params *p) {
    kv_options o;
    kv_options_default(&o);
    memset(p, 0, sizeof *p);
    p->policy = (tkv_policy)o.policy;
    p->hbm_ratio = o.hbm_ratio;
    p->t2_ratio = o.t2_ratio;
    p->evict_ratio = o.evict_ratio;
    p->delta = o.delta;
    p->sinks = o.sinks;
    p->window = o.window;
    p->f16 = o.f16;
}

void engine_kv_options(const tkv_kv_params *p, kv_options *o) {
    kv_options_default(o);
    o->policy = (kv_policy_kind)p->policy;
    o->hbm_ratio = p->hbm_ratio;
    o->hbm_budget_bytes = p->hbm_budget_bytes;
    o->t2_ratio = p->t2_ratio;
    o->evict_ratio = p->evict_ratio;
    o->delta = p->delta;
    o->sinks = p->sinks;
    o->window = p->window;
    o->staged = p->staged;
    o->sync_transfers = p->sync_transfers;
    o->f16 = p->f16;
}

void tkv_session_params_default(tkv_session_params *p) {
    memset(p, 0, sizeof *p);
    p->max_seqs = 16;
    p->max_ctx = 4096;
    p->max_batch = 64;
    tkv_kv_params_default(&p->kv);
}

kv_cache *engine_kv(tkv_session *s) { return s->kv; }

int tkv_session_open(tkv_model *m, const tkv_session_params *p, tkv_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->max_ctx < 1 || p->max_ctx > (1 << 24))
        return tkv_errf(err, errlen, "context %d out of range 1..%d", p->max_ctx, 1 << 24);
    if (p->max_seqs < 1 || p->max_seqs > 4096) return tkv_errf(err, errlen, "sequences %d out of range 1..4096", p->max_seqs);
    if (p->max_batch < 1 || p->max_batch > 4096) return tkv_errf(err, errlen, "batch %d out of range 1..4096", p->max_batch);
    if (!m->m) return tkv_errf(err, errlen, "the model was opened for its vocabulary only");
    if (p->kv.t0_tokens || p->kv.protect_prompt)
        return tkv_errf(err, errlen, "kv: per-sequence token budgets and prompt protection for the baselines are not built yet");
    tkv_session *s = tkv_xcalloc(1, sizeof *s);
    s->model = m;
    s->p = *p;
    if (s->p.max_batch < p->max_seqs) s->p.max_batch = p->max_seqs;
    const model_config *c = &m->m->cfg;
    kv_options ko;
    engine_kv_options(&p->kv, &ko);
    ko.n_layer = c->n_layer;
    ko.n_head = c->n_head;
    ko.n_head_kv = c->n_head_kv;
    ko.head_dim = c->head_dim;
    ko.n_seq = p->max_seqs;
    ko.n_ctx = p->max_ctx;
    s->kv = kv_init(&ko, err, errlen);
    if (!s->kv) { free(s); return TKV_ERR; }
    fwd_options fo = {.max_batch = s->p.max_batch, .n_ctx = p->max_ctx, .n_seq = p->max_seqs, .isa = m->isa};
    s->fw = fwd_init(m->m, s->kv, m->pool, &fo, err, errlen);
    if (!s->fw) { tkv_session_close(s); return TKV_ERR; }
    size_t nb = (size_t)s->p.max_batch;
    s->seqs = tkv_xcalloc((size_t)p->max_seqs, sizeof *s->seqs);
    s->tok = tkv_xcalloc(nb, sizeof(int32_t));
    s->seq = tkv_xcalloc(nb, sizeof(int));
    s->pos = tkv_xcalloc(nb, sizeof(int));
    s->prompt = tkv_xcalloc(nb, 1);
    s->want = tkv_xcalloc(nb, 1);
    *out = s;
    return 0;
}

void tkv_session_close(tkv_session *s) {
    if (!s) return;
    fwd_free(s->fw);
    kv_free(s->kv);
    free(s->seqs);
    free(s->tok); free(s->seq); free(s->pos); free(s->prompt); free(s->want);
    free(s);
}

static int live(const tkv_session *s, int seq) { return seq >= 0 && seq < s->p.max_seqs && s->seqs[seq].open; }

int tkv_seq_open(tkv_session *s, int n_ctx, int n_prompt, int *seq, char *err, size_t errlen) {
    *seq = -1;
    if (n_ctx < 1 || n_ctx > s->p.max_ctx)
        return tkv_errf(err, errlen, "a context of %d positions does not fit the session's %d", n_ctx, s->p.max_ctx);
    if (n_prompt < 0 || n_prompt > n_ctx)
        return tkv_errf(err, errlen, "a prompt of %d tokens does not fit a context of %d", n_prompt, n_ctx);
    for (int q = 0; q < s->p.max_seqs; q++) {
        if (s->seqs[q].open) continue;
        kv_seq_reset(s->kv, q);
        s->seqs[q].open = 1;
        kv_get_stats(s->kv, q, &s->seqs[q].base);
        s->n_open++;
        *seq = q;
        return 0;
    }
    tkv_errf(err, errlen, "all %d sequences of the session are live", s->p.max_seqs);
    return TKV_EFULL;
}

static void add_counters(kv_stats *to, const kv_stats *a, const kv_stats *minus) {
#define D(f) to->f += a->f - (minus ? minus->f : 0)
    D(budget_raised); D(bytes_moved_down); D(bytes_moved_up); D(bytes_moved_host); D(bytes_staged);
    D(tokens_evicted); D(retiers); D(sync_demotions); D(move_seconds); D(retier_seconds); D(fence_wait_seconds);
#undef D
}

void tkv_seq_close(tkv_session *s, int seq) {
    if (!live(s, seq)) return;
    kv_sync(s->kv);
    kv_stats st;
    kv_get_stats(s->kv, seq, &st);
    add_counters(&s->closed, &st, &s->seqs[seq].base);
    kv_seq_reset(s->kv, seq);
    s->seqs[seq].open = 0;
    s->n_open--;
}

int tkv_seq_len(const tkv_session *s, int seq) { return live(s, seq) ? kv_seq_len(s->kv, seq) : -1; }

int tkv_seq_share_prefix(tkv_session *s, int src, int dst, int n, char *err, size_t errlen) {
    if (!live(s, src) || !live(s, dst)) return tkv_errf(err, errlen, "sequence %d or %d is not open", src, dst);
    return kv_seq_copy_prefix(s->kv, src, dst, n, err, errlen) ? TKV_ERR : 0;
}

int tkv_prefill(tkv_session *s, int seq, const int32_t *tokens, int n, float *logits, int all_logits, char *err,
                size_t errlen) {
    if (!live(s, seq)) return tkv_errf(err, errlen, "sequence %d is not open", seq);
    if (n < 1) return tkv_errf(err, errlen, "empty prompt");
    int base = kv_seq_len(s->kv, seq);
    if (base + n > s->p.max_ctx)
        return tkv_errf(err, errlen, "prompt of %d tokens does not fit: context %d, %d used", n, s->p.max_ctx, base);
    int V = s->model->m->cfg.n_vocab, B = s->p.max_batch;
    for (int i0 = 0; i0 < n; i0 += B) {
        int nb = n - i0 < B ? n - i0 : B;
        int last_chunk = i0 + nb == n;
        for (int t = 0; t < nb; t++) {
            s->tok[t] = tokens[i0 + t];
            s->seq[t] = seq;
            s->pos[t] = base + i0 + t;
            s->prompt[t] = 1;
            s->want[t] = logits && (all_logits || (last_chunk && t == nb - 1));
        }
        float *dst = logits ? (all_logits ? logits + (size_t)i0 * V : logits) : NULL;
        if (fwd_run(s->fw, s->tok, s->seq, s->pos, s->prompt, s->want, nb, dst, err, errlen)) return TKV_ERR;
    }
    return 0;
}

int tkv_decode(tkv_session *s, const int *seqs, const int32_t *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n < 1 || n > s->p.max_batch) return tkv_errf(err, errlen, "decode batch of %d (1..%d allowed)", n, s->p.max_batch);
    for (int t = 0; t < n; t++) {
        if (!live(s, seqs[t])) return tkv_errf(err, errlen, "sequence %d is not open", seqs[t]);
        for (int u = 0; u < t; u++)
            if (seqs[u] == seqs[t]) return tkv_errf(err, errlen, "sequence %d appears twice in one decode step", seqs[t]);
        s->tok[t] = tokens[t];
        s->seq[t] = seqs[t];
        s->pos[t] = kv_seq_len(s->kv, seqs[t]);
        s->prompt[t] = 0;
        s->want[t] = 1;
    }
    return fwd_run(s->fw, s->tok, s->seq, s->pos, s->prompt, s->want, n, logits, err, errlen) ? TKV_ERR : 0;
}
