/* t_engine.c — see t_engine.h. */
#include "t_engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"

struct te_engine {
    tkv_model *m;
    tkv_session *s;
    te_options o;
    int *seq; /* [n_seq] session sequence ids */
};

void te_options_default(te_options *o) {
    memset(o, 0, sizeof *o);
    o->n_threads = 2;
    o->n_ctx = 4096;
    o->n_seq = 1;
    o->max_batch = 64;
    o->isa = -1;
    kv_options_default(&o->kv);
}

static void to_params(const kv_options *k, tkv_kv_params *p) {
    tkv_kv_params_default(p);
    p->policy = (tkv_policy)k->policy;
    p->t0_ratio = k->t0_ratio;
    p->t0_budget_bytes = k->t0_budget_bytes;
    p->t2_ratio = k->t2_ratio;
    p->evict_ratio = k->evict_ratio;
    p->delta = k->delta;
    p->sinks = k->sinks;
    p->window = k->window;
    p->staged = k->staged;
    p->stage_t2 = k->stage_t2;
    p->sync_transfers = k->sync_transfers;
    p->host_scores = k->host_scores;
    p->f16 = k->f16;
    p->t2_codec = be_kv_t2_name(k->t2_fmt);
    p->t0_tokens = k->t0_tokens;
    p->protect_prompt = k->protect_prompt;
    p->unpin_prompt = k->unpin_prompt;
}

int te_open(const char *path, const te_options *o, te_engine **out, char *err, size_t errlen) {
    static const char *isa[] = {"generic", "avx2", "avx512"};
    *out = NULL;
    te_engine *e = tkv_xcalloc(1, sizeof *e);
    e->o = *o;
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = o->n_threads;
    mp.kernels = o->isa >= 0 && o->isa <= 2 ? isa[o->isa] : NULL;
    mp.mmap_weights = o->mmap_weights;
    mp.keep_layout = o->keep_layout;
    mp.backend = o->backend;
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = o->n_seq;
    sp.max_ctx = o->n_ctx;
    sp.max_batch = o->max_batch;
    to_params(&o->kv, &sp.kv);
    sp.kv.split = o->split;
    e->seq = tkv_xcalloc((size_t)(o->n_seq > 0 ? o->n_seq : 1), sizeof(int));
    if (tkv_model_open(path, &mp, &e->m, err, errlen) || tkv_session_open(e->m, &sp, &e->s, err, errlen)) {
        te_close(e);
        return -1;
    }
    for (int i = 0; i < o->n_seq; i++)
        if (tkv_seq_open(e->s, o->n_ctx, 0, &e->seq[i], err, errlen)) {
            te_close(e);
            return -1;
        }
    *out = e;
    return 0;
}

void te_close(te_engine *e) {
    if (!e) return;
    tkv_session_close(e->s);
    tkv_model_close(e->m);
    free(e->seq);
    free(e);
}

int te_n_vocab(const te_engine *e) {
    tkv_model_info i;
    tkv_model_get_info(e->m, &i);
    return i.n_vocab;
}

static int id_of(const te_engine *e, int seq) { return seq >= 0 && seq < e->o.n_seq ? e->seq[seq] : -1 - seq; }

int te_prefill(te_engine *e, int seq, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return tkv_prefill(e->s, id_of(e, seq), tokens, n, logits, all_logits, err, errlen);
}

int te_decode(te_engine *e, const int *seqs, const int32_t *tokens, int n, float *logits, char *err, size_t errlen) {
    int ids[256];
    if (n < 0 || n > 256) return tkv_errf(err, errlen, "te_decode: at most 256 sequences");
    for (int i = 0; i < n; i++) ids[i] = id_of(e, seqs[i]);
    return tkv_decode(e->s, ids, tokens, n, logits, err, errlen);
}

void te_seq_reset(te_engine *e, int seq) {
    char err[256];
    tkv_seq_close(e->s, e->seq[seq]);
    TKV_ASSERT(tkv_seq_open(e->s, e->o.n_ctx, 0, &e->seq[seq], err, sizeof err) == 0);
}

kv_cache *te_kv(te_engine *e) { return engine_kv(e->s); }
const model *te_model(const te_engine *e) { return e->m->m; }
tkv_session *te_session(te_engine *e) { return e->s; }
