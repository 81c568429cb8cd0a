/* engine.c — the session behind include/tierkv.h: model + KV hierarchy + forward + thread pool.
 * Owns the per-call index arrays (sized at open), so prefill and decode allocate nothing. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "base/err.h"
#include "model/forward.h"
#include "model/model.h"
#include "tierkv.h"

struct tkv_engine {
    model *m;
    kv_cache *kv;
    fwd *fw;
    tkv_pool *pool;
    tkv_options o;
    cpu_isa isa;
    int32_t *tok;   /* [max(max_batch, n_seq)] */
    int *seq, *pos;
    uint8_t *prompt, *want;
};

void tkv_options_default(tkv_options *o) {
    memset(o, 0, sizeof *o);
    o->n_threads = 2;
    o->n_ctx = 4096;
    o->n_seq = 1;
    o->max_batch = 64;
    o->isa = -1;
    kv_options_default(&o->kv);
}

int tkv_engine_open(const char *path, const tkv_options *o, tkv_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (o->n_threads < 1 || o->n_threads > 256) return tkv_errf(err, errlen, "threads must be 1..256 (got %d)", o->n_threads);
    if (o->n_ctx < 1 || o->n_seq < 1 || o->n_seq > 4096) return tkv_errf(err, errlen, "context %d / sequences %d out of range", o->n_ctx, o->n_seq);
    if (o->isa > (int)cpu_detect_isa())
        return tkv_errf(err, errlen, "kernel variant %s is not supported by this CPU (best: %s)",
                        cpu_isa_name((cpu_isa)o->isa), cpu_isa_name(cpu_detect_isa()));
    tkv_engine *e = tkv_xcalloc(1, sizeof *e);
    e->o = *o;
    e->isa = o->isa < 0 ? cpu_detect_isa() : (cpu_isa)o->isa;
    if (model_open(path, o->mmap_weights, !o->keep_layout, &e->m, err, errlen)) { free(e); return -1; }
    kv_options ko = o->kv;
    ko.n_layer = e->m->cfg.n_layer;
    ko.n_head = e->m->cfg.n_head;
    ko.n_head_kv = e->m->cfg.n_head_kv;
    ko.head_dim = e->m->cfg.head_dim;
    ko.n_seq = o->n_seq;
    ko.n_ctx = o->n_ctx;
    e->kv = kv_init(&ko, err, errlen);
    if (!e->kv) { tkv_engine_close(e); return -1; }
    e->pool = pool_init(o->n_threads);
    fwd_options fo = {.max_batch = o->max_batch > o->n_seq ? o->max_batch : o->n_seq, .n_ctx = o->n_ctx, .n_seq = o->n_seq, .isa = e->isa};
    e->fw = fwd_init(e->m, e->kv, e->pool, &fo, err, errlen);
    if (!e->fw) { tkv_engine_close(e); return -1; }
    size_t nb = (size_t)fo.max_batch;
    e->tok = tkv_xcalloc(nb, sizeof(int32_t));
    e->seq = tkv_xcalloc(nb, sizeof(int));
    e->pos = tkv_xcalloc(nb, sizeof(int));
    e->prompt = tkv_xcalloc(nb, 1);
    e->want = tkv_xcalloc(nb, 1);
    e->o.max_batch = fo.max_batch;
    *out = e;
    return 0;
}

void tkv_engine_close(tkv_engine *e) {
    if (!e) return;
    fwd_free(e->fw);
    pool_free(e->pool);
    kv_free(e->kv);
    model_close(e->m);
    free(e->tok); free(e->seq); free(e->pos); free(e->prompt); free(e->want);
    free(e);
}

int tkv_n_vocab(const tkv_engine *e) { return e->m->cfg.n_vocab; }
const char *tkv_isa_name(const tkv_engine *e) { return cpu_isa_name(e->isa); }
const struct model *tkv_model_of(const tkv_engine *e) { return e->m; }
kv_cache *tkv_kv_of(tkv_engine *e) { return e->kv; }
int tkv_seq_len(const tkv_engine *e, int seq) { return kv_seq_len(e->kv, seq); }
void tkv_seq_reset(tkv_engine *e, int seq) { kv_seq_reset(e->kv, seq); }

int tkv_prefill(tkv_engine *e, int seq, const int32_t *tokens, int n, float *logits, int all_logits,
                char *err, size_t errlen) {
    if (seq < 0 || seq >= e->o.n_seq) return tkv_errf(err, errlen, "sequence %d out of range 0..%d", seq, e->o.n_seq - 1);
    if (n < 1) return tkv_errf(err, errlen, "empty prompt");
    int base = kv_seq_len(e->kv, seq);
    if (base + n > e->o.n_ctx) return tkv_errf(err, errlen, "prompt of %d tokens does not fit: context %d, %d used", n, e->o.n_ctx, base);
    int V = e->m->cfg.n_vocab;
    for (int i0 = 0; i0 < n; i0 += e->o.max_batch) {
        int nb = n - i0 < e->o.max_batch ? n - i0 : e->o.max_batch;
        int last_chunk = i0 + nb == n;
        for (int t = 0; t < nb; t++) {
            e->tok[t] = tokens[i0 + t];
            e->seq[t] = seq;
            e->pos[t] = base + i0 + t;
            e->prompt[t] = 1;
            e->want[t] = logits && (all_logits || (last_chunk && t == nb - 1));
        }
        float *dst = logits ? (all_logits ? logits + (size_t)i0 * V : logits) : NULL;
        if (fwd_run(e->fw, e->tok, e->seq, e->pos, e->prompt, e->want, nb, dst, err, errlen)) return -1;
    }
    return 0;
}

int tkv_decode(tkv_engine *e, const int *seqs, const int32_t *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n < 1 || n > e->o.max_batch) return tkv_errf(err, errlen, "decode batch of %d (1..%d allowed)", n, e->o.max_batch);
    for (int t = 0; t < n; t++) {
        if (seqs[t] < 0 || seqs[t] >= e->o.n_seq) return tkv_errf(err, errlen, "sequence %d out of range", seqs[t]);
        for (int u = 0; u < t; u++)
            if (seqs[u] == seqs[t]) return tkv_errf(err, errlen, "sequence %d appears twice in one decode step", seqs[t]);
        e->tok[t] = tokens[t];
        e->seq[t] = seqs[t];
        e->pos[t] = kv_seq_len(e->kv, seqs[t]);
        e->prompt[t] = 0;
        e->want[t] = 1;
    }
    return fwd_run(e->fw, e->tok, e->seq, e->pos, e->prompt, e->want, n, logits, err, errlen);
}
