/* forward.c — one readable forward pass over a batch (see model.h for the graph, forward.h for
 * the contract). Shapes are noted as [rows x cols] with one row per batch token.
 *
 * Numerics follow llama.cpp's CPU path where it matters for agreement with its logits: matrix
 * products quantise activations like ggml (backend/cpu), RMSNorm sums squares in double, RoPE
 * angles are an f32 running product, softmax sums in double.
 *
 * Attention visits the positions of a sequence in their original order through the KV view, so the
 * result does not depend on which tier holds a token (the exactness the hierarchy relies on). */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "base/err.h"
#include "base/clock.h"

#define ATT_SUB 16 /* query tokens per attention sub-batch (bounds the weights buffer) */

struct fwd {
    const model *m;
    kv_cache *kv;
    tkv_pool *pool;
    fwd_options opt;
    const cpu_f32_ops *f32;
    /* activations, [max_batch x width] */
    float *x;        /* residual stream, n_embd */
    float *h;        /* normed input, n_embd */
    float *q;        /* n_head*hd */
    float *k, *v;    /* n_head_kv*hd */
    float *o;        /* attention output, n_head*hd */
    float *gate, *up;/* n_ff */
    float *tmp;      /* n_embd: projection outputs before the residual add */
    float *rope_cs;  /* [max_batch x hd]: cos, sin interleaved per pair */
    float *att;      /* [ATT_SUB x n_head x n_ctx] attention weights */
    kv_view *views;  /* [n_seq] */
    uint8_t *seq_seen; /* [n_seq] */
    void *mm_scratch;
    float *logit_rows; /* [max_batch x n_embd] gathered rows for the output projection */
    double att_seconds;
};

fwd *fwd_init(const model *m, kv_cache *kv, tkv_pool *pool, const fwd_options *o, char *err, size_t errlen) {
    const model_config *c = &m->cfg;
    if (o->max_batch < 1 || o->max_batch > 4096) {
        tkv_errf(err, errlen, "forward: batch size %d out of range 1..4096", o->max_batch);
        return NULL;
    }
    if (o->n_ctx < 1 || o->n_seq < 1) {
        tkv_errf(err, errlen, "forward: context %d and sequences %d must be positive", o->n_ctx, o->n_seq);
        return NULL;
    }
    fwd *f = tkv_xcalloc(1, sizeof *f);
    f->m = m;
    f->kv = kv;
    f->pool = pool;
    f->opt = *o;
    f->f32 = cpu_f32_ops_for(o->isa);
    size_t B = (size_t)o->max_batch, E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
    size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff;
    f->x = tkv_xaligned(64, B * E * 4);
    f->h = tkv_xaligned(64, B * E * 4);
    f->tmp = tkv_xaligned(64, B * E * 4);
    f->q = tkv_xaligned(64, B * Q * 4);
    f->o = tkv_xaligned(64, B * Q * 4);
    f->k = tkv_xaligned(64, B * KV * 4);
    f->v = tkv_xaligned(64, B * KV * 4);
    f->gate = tkv_xaligned(64, B * F * 4);
    f->up = tkv_xaligned(64, B * F * 4);
    f->rope_cs = tkv_xaligned(64, B * (size_t)c->head_dim * 4);
    f->att = tkv_xaligned(64, (size_t)ATT_SUB * (size_t)c->n_head * (size_t)o->n_ctx * 4);
    f->views = tkv_xcalloc((size_t)o->n_seq, sizeof(kv_view));
    f->seq_seen = tkv_xcalloc((size_t)o->n_seq, 1);
    f->logit_rows = tkv_xaligned(64, B * E * 4);
    /* scratch for the largest activation conversion of any job: the fused q/k/v and gate/up jobs
     * convert up to once per part, wo, wdown and the output matrix once */
    size_t s = cpu_matmul_scratch_size(m->output.type, m->output.n_in, (int64_t)B), t;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        cpu_mm_out qkv[3] = {{.type = L->wq.type}, {.type = L->wk.type}, {.type = L->wv.type}};
        cpu_mm_out gu[2] = {{.type = L->wgate.type}, {.type = L->wup.type}};
        if ((t = cpu_matmul_multi_scratch_size(qkv, 3, E, (int64_t)B)) > s) s = t;
        if ((t = cpu_matmul_multi_scratch_size(gu, 2, E, (int64_t)B)) > s) s = t;
        if ((t = cpu_matmul_scratch_size(L->wo.type, L->wo.n_in, (int64_t)B)) > s) s = t;
        if ((t = cpu_matmul_scratch_size(L->wdown.type, L->wdown.n_in, (int64_t)B)) > s) s = t;
    }
    f->mm_scratch = tkv_xaligned(64, s);
    return f;
}

void fwd_free(fwd *f) {
    if (!f) return;
    free(f->x); free(f->h); free(f->tmp); free(f->q); free(f->o); free(f->k); free(f->v);
    free(f->gate); free(f->up); free(f->rope_cs); free(f->att); free(f->views); free(f->seq_seen);
    free(f->mm_scratch); free(f->logit_rows);
    free(f);
}

double fwd_attention_seconds(const fwd *f) { return f->att_seconds; }

static void matmul(fwd *f, const model_mat *w, const float *x, int n, float *y) {
    cpu_matmul(f->pool, f->opt.isa, w->type, w->data, w->n_in, w->n_out, x, n, y, w->n_out, f->mm_scratch);
}

/* y_k = x · W_kᵀ for two or three matrices that read the same x, as one job */
static void matmul_fused(fwd *f, const model_mat *const *w, float *const *y, int k, const float *x, int n) {
    cpu_mm_out o[3];
    for (int i = 0; i < k; i++)
        o[i] = (cpu_mm_out){.type = w[i]->type, .w = w[i]->data, .n_out = w[i]->n_out, .y = y[i], .y_stride = w[i]->n_out};
    cpu_matmul_multi(f->pool, f->opt.isa, o, k, w[0]->n_in, x, n, f->mm_scratch);
}

/* y = rmsnorm(x) * w, row by row; sum of squares in double as llama.cpp does */
static void rmsnorm(float *y, const float *x, const float *w, int n_rows, int n, float eps) {
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float mean = (float)(ss / n);
        float scale = 1.0f / sqrtf(mean + eps);
        for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

static void add_bias(float *y, const float *b, int n_rows, int n) {
    if (!b) return;
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] += b[i];
}

/* cos/sin of every rotated pair for each token's position: theta_0 = p, theta_{i+1} = theta_i * s */
static void rope_tables(fwd *f, const int *pos, int n) {
    const model_config *c = &f->m->cfg;
    int half = c->head_dim / 2;
    float s = powf(c->rope_base, -2.0f / (float)c->head_dim);
    for (int t = 0; t < n; t++) {
        float theta = (float)pos[t];
        float *cs = f->rope_cs + (size_t)t * c->head_dim;
        for (int i = 0; i < half; i++) {
            float th = theta * c->rope_scale;
            cs[2 * i] = cosf(th);
            cs[2 * i + 1] = sinf(th);
            theta *= s;
        }
    }
}

static void rope_apply(const fwd *f, float *x, int n_rows, int n_heads) {
    const model_config *c = &f->m->cfg;
    int hd = c->head_dim, half = hd / 2;
    for (int t = 0; t < n_rows; t++) {
        const float *cs = f->rope_cs + (size_t)t * hd;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            for (int i = 0; i < half; i++) {
                int a = c->rope_neox ? i : 2 * i, b = c->rope_neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b], co = cs[2 * i], si = cs[2 * i + 1];
                v[a] = x0 * co - x1 * si;
                v[b] = x0 * si + x1 * co;
            }
        }
    }
}

typedef struct {
    fwd *f;
    const int *seq, *pos;
    int t0;     /* first token of the sub-batch */
    int layer;
} att_job;

/* One (token, kv head) pair: the `group` query heads that share the kv head. Scores, softmax and
 * the weighted sum of V run over positions 0..p of the view in order. */
static void attention_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    att_job *J = ctx;
    fwd *f = J->f;
    const model_config *c = &f->m->cfg;
    int hd = c->head_dim, n_kv = c->n_head_kv, group = c->n_head / n_kv, n_ctx = f->opt.n_ctx;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t item = i0; item < i1; item++) {
        int tl = (int)(item / n_kv), g = (int)(item % n_kv), t = J->t0 + tl;
        const kv_view *vw = &f->views[J->seq[t]];
        int p = J->pos[t];
        const uint8_t *keep = vw->keep ? vw->keep + (size_t)g * vw->keep_stride : NULL;
        size_t h0 = (size_t)g * group;
        const float *q = f->q + ((size_t)t * c->n_head + h0) * hd;
        float *att = f->att + ((size_t)tl * c->n_head + h0) * n_ctx;
        float *o = f->o + ((size_t)t * c->n_head + h0) * hd;
        if (vw->k16) {
            f->f32->attn_scores_f16(q, group, hd, vw->k16, (size_t)g * hd, keep, p + 1, scale, att, (size_t)n_ctx);
            for (int hh = 0; hh < group; hh++) f->f32->softmax(att + (size_t)hh * n_ctx, p + 1);
            f->f32->attn_wsum_f16(att, (size_t)n_ctx, group, hd, vw->v16, (size_t)g * hd, p + 1, o);
        } else {
            f->f32->attn_scores(q, group, hd, vw->k, (size_t)g * hd, keep, p + 1, scale, att, (size_t)n_ctx);
            for (int hh = 0; hh < group; hh++) f->f32->softmax(att + (size_t)hh * n_ctx, p + 1);
            f->f32->attn_wsum(att, (size_t)n_ctx, group, hd, vw->v, (size_t)g * hd, p + 1, o);
        }
    }
}

static void attention(fwd *f, int layer, const int *seq, const int *pos, int n) {
    const model_config *c = &f->m->cfg;
    double t_start = tkv_now_s();
    memset(f->seq_seen, 0, (size_t)f->opt.n_seq);
    for (int t = 0; t < n; t++) {
        if (f->seq_seen[seq[t]]) continue;
        f->seq_seen[seq[t]] = 1;
        kv_view_layer(f->kv, seq[t], layer, &f->views[seq[t]]);
    }
    for (int t0 = 0; t0 < n; t0 += ATT_SUB) {
        int nt = n - t0 < ATT_SUB ? n - t0 : ATT_SUB;
        att_job J = {f, seq, pos, t0, layer};
        pool_for(f->pool, (int64_t)nt * c->n_head_kv, attention_task, &J);
        for (int tl = 0; tl < nt; tl++)
            kv_observe(f->kv, seq[t0 + tl], layer, pos[t0 + tl], f->att + (size_t)tl * c->n_head * f->opt.n_ctx, f->opt.n_ctx);
    }
    f->att_seconds += tkv_now_s() - t_start;
}

typedef struct { float *gate; const float *up; const cpu_f32_ops *f32; } swiglu_job;

/* gate[i] = silu(gate[i]) * up[i]; split over the pool (the exp dominates at prefill sizes) */
static void swiglu_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    swiglu_job *J = ctx;
    J->f32->swiglu(J->gate + i0, J->up + i0, i1 - i0);
}

int fwd_run(fwd *f, const int32_t *tokens, const int *seq, const int *pos, const uint8_t *is_prompt,
            const uint8_t *want, int n, float *logits, char *err, size_t errlen) {
    const model *m = f->m;
    const model_config *c = &m->cfg;
    int E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim, F = c->n_ff;
    if (n < 1 || n > f->opt.max_batch) return tkv_errf(err, errlen, "forward: batch of %d tokens (1..%d allowed)", n, f->opt.max_batch);
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return tkv_errf(err, errlen, "forward: token id %d out of range 0..%d", tokens[t], c->n_vocab - 1);
        if (seq[t] < 0 || seq[t] >= f->opt.n_seq) return tkv_errf(err, errlen, "forward: sequence %d out of range", seq[t]);
        if (pos[t] < 0 || pos[t] >= f->opt.n_ctx)
            return tkv_errf(err, errlen, "forward: position %d exceeds the context size %d", pos[t], f->opt.n_ctx);
    }
    /* reserve cache positions first so a full cache fails before any work */
    for (int t = 0; t < n; t++)
        if (kv_append(f->kv, seq[t], pos[t], is_prompt ? is_prompt[t] : 0, err, errlen)) return -1;

    /* x [n x E] = embeddings */
    const cpu_type_ops *eops = cpu_ops_for(m->tok_embd.type, f->opt.isa);
    size_t erow = cpu_weight_row_size(m->tok_embd.type, E);
    for (int t = 0; t < n; t++)
        eops->dequant_row((const uint8_t *)m->tok_embd.data + (size_t)tokens[t] * erow, f->x + (size_t)t * E, E);
    rope_tables(f, pos, n);

    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        rmsnorm(f->h, f->x, L->attn_norm, n, E, c->rms_eps);
        matmul_fused(f, (const model_mat *const[]){&L->wq, &L->wk, &L->wv}, (float *const[]){f->q, f->k, f->v}, 3, f->h, n);
        add_bias(f->q, L->bq, n, Q);
        add_bias(f->k, L->bk, n, KV);
        add_bias(f->v, L->bv, n, KV);
        rope_apply(f, f->q, n, c->n_head);
        rope_apply(f, f->k, n, c->n_head_kv);
        for (int t = 0; t < n; t++) kv_put(f->kv, seq[t], l, pos[t], f->k + (size_t)t * KV, f->v + (size_t)t * KV);
        attention(f, l, seq, pos, n);
        matmul(f, &L->wo, f->o, n, f->tmp);
        add_bias(f->tmp, L->bo, n, E);
        for (size_t i = 0; i < (size_t)n * E; i++) f->x[i] += f->tmp[i];

        rmsnorm(f->h, f->x, L->ffn_norm, n, E, c->rms_eps);
        matmul_fused(f, (const model_mat *const[]){&L->wgate, &L->wup}, (float *const[]){f->gate, f->up}, 2, f->h, n);
        swiglu_job sj = {f->gate, f->up, f->f32};
        pool_for_grain(f->pool, (int64_t)n * F, 1024, swiglu_task, &sj);
        matmul(f, &L->wdown, f->gate, n, f->tmp);
        for (size_t i = 0; i < (size_t)n * E; i++) f->x[i] += f->tmp[i];
    }

    /* logits only for the rows asked for */
    int nr = 0;
    for (int t = 0; t < n; t++) {
        if (want ? !want[t] : t != n - 1) continue;
        memcpy(f->logit_rows + (size_t)nr * E, f->x + (size_t)t * E, (size_t)E * sizeof(float));
        nr++;
    }
    if (nr > 0) {
        rmsnorm(f->h, f->logit_rows, m->output_norm, nr, E, c->rms_eps);
        matmul(f, &m->output, f->h, nr, logits);
    }

    /* end of a decode step for each sequence that decoded here */
    memset(f->seq_seen, 0, (size_t)f->opt.n_seq);
    for (int t = 0; t < n; t++) {
        if ((is_prompt && is_prompt[t]) || f->seq_seen[seq[t]]) continue;
        f->seq_seen[seq[t]] = 1;
        kv_step_end(f->kv, seq[t]);
    }
    return 0;
}
