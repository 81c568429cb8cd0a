/* session.c — tkv_session: sequences that come and go on one KV cache (one set of tier pools, one T0
 * budget) and one forward, and the prefill/decode calls of include/tierkv.h. Owns the per-call index arrays (sized at open), so prefill
 * and decode allocate nothing; validates every id and position before the forward runs. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"
#include "kv/kv_rec.h"

void tkv_kv_params_default(tkv_kv_params *p) {
    kv_options o;
    kv_options_default(&o);
    memset(p, 0, sizeof *p);
    p->policy = (tkv_policy)o.policy;
    p->t0_ratio = o.t0_ratio;
    p->t2_ratio = o.t2_ratio;
    p->evict_ratio = o.evict_ratio;
    p->delta = o.delta;
    p->sinks = o.sinks;
    p->window = o.window;
    p->f16 = o.f16;
}

int engine_kv_options_checked(const tkv_kv_params *p, const char *backend, kv_options *o, char *err, size_t errlen) {
    engine_kv_options(p, o);
    o->t2_fmt = be_kv_t2_default(backend);
    if (p->t2_codec && be_kv_t2_parse(p->t2_codec, &o->t2_fmt))
        return tkv_errf(err, errlen, "kv: unknown T2 codec '%s' (%s)", p->t2_codec, tkv_t2_codec_names());
    return 0;
}

void engine_kv_options(const tkv_kv_params *p, kv_options *o) {
    kv_options_default(o);
    o->policy = (kv_policy_kind)p->policy;
    o->t0_ratio = p->t0_ratio;
    o->t0_budget_bytes = p->t0_budget_bytes;
    o->t0_tokens = p->t0_tokens;
    o->protect_prompt = p->protect_prompt;
    o->unpin_prompt = p->unpin_prompt;
    o->t2_ratio = p->t2_ratio;
    o->evict_ratio = p->evict_ratio;
    o->delta = p->delta;
    o->sinks = p->sinks;
    o->window = p->window;
    o->staged = p->staged;
    o->stage_t2 = p->stage_t2;
    o->sync_transfers = p->sync_transfers;
    o->host_scores = p->host_scores;
    o->f16 = p->f16;
}

void tkv_session_params_default(tkv_session_params *p) {
    memset(p, 0, sizeof *p);
    p->max_seqs = 16;
    p->max_ctx = 4096;
    p->max_batch = 0; /* the backend's (tkv_session_open) */
    tkv_kv_params_default(&p->kv);
}

kv_cache *engine_kv(tkv_session *s) { return s->kv; }

int tkv_session_open(tkv_model *m, const tkv_session_params *p, tkv_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (!m->m) return tkv_errf(err, errlen, "the model was opened for its vocabulary only");
    if (p->max_ctx < 1 || p->max_ctx > (1 << 24))
        return tkv_errf(err, errlen, "context %d out of range 1..%d", p->max_ctx, 1 << 24);
    if (p->max_seqs < 1 || p->max_seqs > 4096) return tkv_errf(err, errlen, "sequences %d out of range 1..4096", p->max_seqs);
    if (p->max_batch < 0 || p->max_batch > 4096)
        return tkv_errf(err, errlen, "batch %d out of range 1..4096 (0: the backend's)", p->max_batch);
    tkv_session *s = tkv_xcalloc(1, sizeof *s);
    s->model = m;
    s->p = *p;
    /* a GPU's matmuls of many tokens run as GEMMs that read the weights once a call: larger
     * prefill chunks read them fewer times (on the CPU, 64 is where it stops paying) */
    if (!s->p.max_batch) s->p.max_batch = m->be->ops->unified ? TKV_BATCH_HOST : TKV_BATCH_DEVICE;
    if (s->p.max_batch < p->max_seqs) s->p.max_batch = p->max_seqs;
    const model_config *c = &m->m->cfg;
    kv_options ko;
    if (engine_kv_options_checked(&p->kv, m->p.backend, &ko, err, errlen)) { free(s); return TKV_ERR; }
    ko.n_layer = c->n_layer;
    ko.n_head = c->n_head;
    ko.n_head_kv = c->n_head_kv;
    ko.head_dim = c->head_dim;
    ko.n_seq = p->max_seqs;
    ko.n_ctx = p->max_ctx;
    ko.k_center = m->m->k_center;
    s->kv = kv_init(&ko, m->be, err, errlen);
    if (!s->kv) { free(s); return TKV_ERR; }
    be_backend *host = NULL;
    if (p->kv.split) {
        if (m->be->ops->unified) host = m->be;
        else {
            be_params hp = {.name = "cpu", .n_threads = m->p.n_threads, .kernels = NULL};
            if (be_open(&hp, &s->host, err, errlen)) { tkv_session_close(s); return TKV_ERR; }
            host = s->host;
        }
    }
    fwd_options fo = {.max_batch = s->p.max_batch, .n_ctx = p->max_ctx, .split = p->kv.split,
                      .split_decode = p->kv.split && p->kv.staged};
    s->fw = fwd_init(m->m, s->kv, m->be, host, &fo, err, errlen);
    if (!s->fw) { tkv_session_close(s); return TKV_ERR; }
    size_t nb = (size_t)s->p.max_batch;
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
    be_close(s->host);
    free(s->tok); free(s->seq); free(s->pos); free(s->prompt); free(s->want);
    free(s);
}

static int live(const tkv_session *s, int seq) { return kv_seq_live(s->kv, seq); }

int tkv_seq_open(tkv_session *s, int n_ctx, int n_prompt, int *seq, char *err, size_t errlen) {
    *seq = -1;
    if (n_ctx < 1 || n_ctx > s->p.max_ctx)
        return tkv_errf(err, errlen, "a context of %d positions does not fit the session's %d", n_ctx, s->p.max_ctx);
    int rc = kv_seq_add(s->kv, n_ctx, n_prompt, seq, err, errlen);
    return rc == -2 ? TKV_EFULL : rc ? TKV_ERR : 0;
}

void tkv_seq_close(tkv_session *s, int seq) {
    if (live(s, seq)) kv_seq_remove(s->kv, seq);
}

int tkv_seq_len(const tkv_session *s, int seq) { return live(s, seq) ? kv_seq_len(s->kv, seq) : -1; }

int tkv_seq_share_prefix(tkv_session *s, int src, int dst, int n, char *err, size_t errlen) {
    return kv_seq_share_prefix(s->kv, src, dst, n, err, errlen) ? TKV_ERR : 0;
}

int tkv_seq_take(tkv_session *s, int src, int dst, int n, char *err, size_t errlen) {
    return kv_seq_take(s->kv, src, dst, n, err, errlen) ? TKV_ERR : 0;
}

void tkv_seq_idle(tkv_session *s, int seq) {
    if (live(s, seq)) kv_seq_idle(s->kv, seq);
}

int tkv_seq_idle_compress(tkv_session *s, int seq) { return live(s, seq) ? kv_seq_idle_compress(s->kv, seq) : 0; }

void tkv_seq_set_stale(tkv_session *s, int seq, int from, int to) {
    if (live(s, seq)) kv_seq_set_stale(s->kv, seq, from, to);
}

int tkv_seq_save(tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt, void **out, size_t *len, char *err,
                 size_t errlen) {
    return tkv_seq_save_note(s, seq, tokens, n, salt, NULL, 0, out, len, err, errlen);
}

int tkv_record_note(const void *bytes, size_t len, const void **note, size_t *note_len, char *err, size_t errlen) {
    *note = NULL, *note_len = 0;
    kv_rec r;
    if (kv_rec_parse(bytes, len, &r, err, errlen)) return TKV_ERR;
    *note = r.note, *note_len = r.note_len;
    return 0;
}

int tkv_seq_save_note(tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt, const void *note,
                      size_t note_len, void **out, size_t *len, char *err, size_t errlen) {
    *out = NULL, *len = 0;
    if (!live(s, seq) || n != kv_seq_len(s->kv, seq))
        return tkv_errf(err, errlen, "save: sequence %d is not open or does not hold %d positions", seq, n);
    tkv_buf b = {0};
    if (kv_seq_export(s->kv, seq, tokens, s->model->ident, salt, note, note_len, &b, err, errlen)) {
        tkv_buf_free(&b);
        return TKV_ERR;
    }
    *out = b.p, *len = b.n;
    return 0;
}

static int model_of(const tkv_model *m, uint64_t ident, char *err, size_t errlen) {
    if (ident != m->ident)
        return tkv_errf(err, errlen, "record: made with another model (identity %016llx, this one %016llx)",
                        (unsigned long long)ident, (unsigned long long)m->ident);
    return 0;
}

int tkv_seq_load(tkv_session *s, int seq, const void *bytes, size_t len, char *err, size_t errlen) {
    if (!live(s, seq)) return tkv_errf(err, errlen, "load: sequence %d is not open", seq);
    kv_rec r;
    if (kv_rec_parse(bytes, len, &r, err, errlen) || model_of(s->model, r.model, err, errlen)) return TKV_ERR;
    int V = tok_n_vocab(s->model->vocab);
    for (uint32_t i = 0; i < r.n; i++)
        if (kv_rec_token(&r, i) < 0 || kv_rec_token(&r, i) >= V)
            return tkv_errf(err, errlen, "record: token %d at %u is out of the vocabulary", kv_rec_token(&r, i), i);
    return kv_seq_import(s->kv, seq, &r, err, errlen) ? TKV_ERR : 0;
}

size_t tkv_record_need(const void *bytes, size_t len) {
    kv_rec r;
    if (len < KV_REC_HEAD || kv_rec_parse_head(bytes, len, &r, NULL, 0)) return KV_REC_HEAD;
    return kv_rec_tokens_end(&r);
}

int tkv_record_peek(const tkv_model *m, const void *bytes, size_t len, uint64_t *salt, int32_t **tokens, int *n, char *err,
                    size_t errlen) {
    *tokens = NULL, *n = 0;
    kv_rec r;
    if (kv_rec_parse_head(bytes, len, &r, err, errlen) || model_of(m, r.model, err, errlen)) return TKV_ERR;
    if (!r.tokens) return tkv_errf(err, errlen, "record: %zu bytes do not hold its %u tokens", len, r.n);
    *tokens = tkv_xmalloc((size_t)r.n * sizeof(int32_t));
    for (uint32_t i = 0; i < r.n; i++) (*tokens)[i] = kv_rec_token(&r, i);
    *salt = r.salt;
    *n = (int)r.n;
    return 0;
}

int tkv_prefill(tkv_session *s, int seq, const int32_t *tokens, int n, float *logits, int all_logits, char *err,
                size_t errlen) {
    return tkv_prefill_ex(s, seq, tokens, n, 0, logits, all_logits, err, errlen);
}

int tkv_prefill_ex(tkv_session *s, int seq, const int32_t *tokens, int n, int flags, float *logits, int all_logits,
                   char *err, size_t errlen) {
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
            s->prompt[t] = !(flags & TKV_PREFILL_GENERATED);
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
