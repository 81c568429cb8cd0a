/* kv.c — the KV cache behind kv.h. This first version implements policy `full` only: every token of
 * every sequence lives in one preallocated store (n_ctx slots per sequence), nothing moves. The
 * hierarchy (T0..T3, scoring, re-tiering, transfers) replaces this file behind the same interface. */
#include "kv/kv.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

struct kv_cache {
    kv_options o;
    int kv_dim;          /* n_head_kv * head_dim floats per row */
    float *data;         /* [seq][layer][pos][2][kv_dim] */
    int *len;            /* [seq] positions held */
    const float **vk;    /* [seq][n_ctx] view pointers (K) */
    const float **vv;    /* [seq][n_ctx] view pointers (V) */
};

static const char *policy_names[KV_POLICY_COUNT] = {"full", "hierarchy", "evict", "quant",
                                                    "streaming", "h2o", "rkv", "snapkv"};

const char *kv_policy_name(kv_policy_kind p) {
    return (p >= 0 && p < KV_POLICY_COUNT) ? policy_names[p] : "?";
}

int kv_policy_parse(const char *name, kv_policy_kind *out) {
    for (int i = 0; i < KV_POLICY_COUNT; i++)
        if (name && strcmp(name, policy_names[i]) == 0) { *out = (kv_policy_kind)i; return 0; }
    return -1;
}

void kv_options_default(kv_options *o) {
    memset(o, 0, sizeof *o);
    o->policy = KV_POLICY_FULL;
    o->hbm_ratio = o->t2_ratio = o->evict_ratio = -1.0;
    o->delta = 64;
    o->sinks = 4;
    o->window = 64;
}

static float *row(const kv_cache *kv, int seq, int layer, int pos, int which) {
    size_t i = (((size_t)seq * kv->o.n_layer + layer) * kv->o.n_ctx + pos) * 2 + which;
    return kv->data + i * kv->kv_dim;
}

kv_cache *kv_init(const kv_options *o, char *err, size_t errlen) {
    if (o->n_layer <= 0 || o->n_head_kv <= 0 || o->head_dim <= 0 || o->n_seq <= 0 || o->n_ctx <= 0) {
        tkv_errf(err, errlen, "kv: bad shape (layers %d, kv heads %d, head dim %d, seqs %d, ctx %d)",
                 o->n_layer, o->n_head_kv, o->head_dim, o->n_seq, o->n_ctx);
        return NULL;
    }
    if (o->policy != KV_POLICY_FULL) {
        tkv_errf(err, errlen, "kv: policy %s is not implemented yet", kv_policy_name(o->policy));
        return NULL;
    }
    kv_cache *kv = tkv_xcalloc(1, sizeof *kv);
    kv->o = *o;
    kv->kv_dim = o->n_head_kv * o->head_dim;
    kv->data = tkv_xmalloc((size_t)o->n_seq * o->n_layer * o->n_ctx * 2 * kv->kv_dim * sizeof(float));
    kv->len = tkv_xcalloc((size_t)o->n_seq, sizeof(int));
    kv->vk = tkv_xcalloc((size_t)o->n_seq * o->n_ctx, sizeof(float *));
    kv->vv = tkv_xcalloc((size_t)o->n_seq * o->n_ctx, sizeof(float *));
    return kv;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    free(kv->data); free(kv->len); free(kv->vk); free(kv->vv);
    free(kv);
}

void kv_seq_reset(kv_cache *kv, int seq) { TKV_ASSERT(seq >= 0 && seq < kv->o.n_seq); kv->len[seq] = 0; }
int kv_seq_len(const kv_cache *kv, int seq) { TKV_ASSERT(seq >= 0 && seq < kv->o.n_seq); return kv->len[seq]; }

int kv_append(kv_cache *kv, int seq, int pos, int is_prompt, char *err, size_t errlen) {
    (void)is_prompt;
    TKV_ASSERT(seq >= 0 && seq < kv->o.n_seq);
    if (pos != kv->len[seq]) return tkv_errf(err, errlen, "kv: append at position %d, sequence %d holds %d", pos, seq, kv->len[seq]);
    if (pos >= kv->o.n_ctx) return tkv_errf(err, errlen, "kv: sequence %d is full (%d positions)", seq, kv->o.n_ctx);
    kv->len[seq]++;
    return 0;
}

float *kv_k_row(kv_cache *kv, int seq, int layer, int pos) {
    TKV_ASSERT(pos >= 0 && pos < kv->len[seq] && layer >= 0 && layer < kv->o.n_layer);
    return row(kv, seq, layer, pos, 0);
}
float *kv_v_row(kv_cache *kv, int seq, int layer, int pos) {
    TKV_ASSERT(pos >= 0 && pos < kv->len[seq] && layer >= 0 && layer < kv->o.n_layer);
    return row(kv, seq, layer, pos, 1);
}

void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out) {
    TKV_ASSERT(seq >= 0 && seq < kv->o.n_seq && layer >= 0 && layer < kv->o.n_layer);
    const float **k = kv->vk + (size_t)seq * kv->o.n_ctx, **v = kv->vv + (size_t)seq * kv->o.n_ctx;
    for (int p = 0; p < kv->len[seq]; p++) { k[p] = row(kv, seq, layer, p, 0); v[p] = row(kv, seq, layer, p, 1); }
    out->k = k; out->v = v; out->keep = NULL; out->keep_stride = 0; out->n = kv->len[seq];
}

void kv_observe(kv_cache *kv, int seq, int layer, int q_pos, const float *att, int att_stride) {
    (void)kv; (void)seq; (void)layer; (void)q_pos; (void)att; (void)att_stride;
}

void kv_step_end(kv_cache *kv, int seq) { (void)kv; (void)seq; }

void kv_get_stats(const kv_cache *kv, int seq, kv_stats *out) {
    memset(out, 0, sizeof *out);
    int64_t tb = (int64_t)kv->o.n_layer * 2 * kv->kv_dim * (int64_t)sizeof(float);
    for (int s = 0; s < kv->o.n_seq; s++) {
        if (seq >= 0 && s != seq) continue;
        out->tokens[0] += kv->len[s];
        out->bytes[0] += kv->len[s] * tb;
        out->t0_budget_bytes += (int64_t)kv->o.n_ctx * tb;
    }
    out->peak_t0_bytes = out->bytes[0];
}
