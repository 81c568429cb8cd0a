/* forward.c — one readable forward pass over a batch (see model.h for the graph, forward.h for the
 * contract), every operation an op of the backend (backend/backend.h). Shapes are noted as
 * [rows x cols] with one row per batch token; activations live in the backend's memory.
 *
 * Numerics follow llama.cpp's CPU path where it matters for agreement with its logits: matrix
 * products quantise activations like ggml, RMSNorm sums squares in double, RoPE angles are an f32
 * running product, softmax sums in double (the CPU backend's ops).
 *
 * Attention reads each sequence's slot table from the KV cache and visits positions in their
 * original order, so the result does not depend on which tier holds a token (the exactness the
 * hierarchy relies on). With the split option it runs in two parts, merged by log-sum-exp: T0 and
 * STAGE on the backend, T1 on the host backend where its rows lie.
 *
 * Memory: on a backend that is not host memory (not `unified`), everything read back to the host
 * (attention weights, the split's partial results and queries, logits) lands in host buffers the
 * backend allocated BE_MEM_PINNED at init, so each read is one DMA into page-locked memory (a
 * pageable destination would make it a staged, synchronous copy). On a unified backend (the CPU)
 * nothing is read back: the forward reads backend memory in place. */
#include "model/forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/meminfo.h"

#define ATT_SUB 16 /* query tokens per attention sub-batch (bounds the weights buffer) */

struct fwd {
    const model *m;
    kv_cache *kv;
    be_backend *be, *host;
    const be_ops *op;
    fwd_options opt;
    /* activations in backend memory, [max_batch x width] */
    float *x;        /* residual stream, n_embd */
    float *h;        /* normed input, n_embd */
    float *q;        /* n_head*hd */
    float *k, *v;    /* n_head_kv*hd */
    float *o;        /* attention output, n_head*hd */
    float *gate, *up;/* n_ff */
    float *tmp;      /* n_embd: projection outputs before the residual add */
    float *logit_rows; /* [max_batch x n_embd] rows gathered for the output projection */
    float *logits;   /* [max_batch x n_vocab] (not unified backends: read back into logits_host) */
    float *logits_host; /* [max_batch x n_vocab] pinned: where logits land before the caller's buffer */
    float *att;      /* [ATT_SUB x n_head x n_ctx] attention weights for the policy */
    float *att_host; /* pinned host copy of att (not unified backends) */
    void *mm_scratch, *att_scratch;
    /* split attention: the host part's buffers. Part 0 (the backend's, read back) and q_host / o_host
     * (not unified backends only) are the backend's pinned memory; att1 and part 1 (written by the
     * host backend) plain host memory */
    float *q_host, *o_host, *att1, *part_m[2], *part_l[2], *part_o[2];
    float *dpart_m, *dpart_l; /* the backend's part's m and l, in its memory (not unified) */
    void *att1_scratch;
    /* per call, host */
    int32_t *slots;  /* [max_batch] the new tokens' slots */
    int *useq;       /* [max_batch] distinct sequences of the call */
    const int32_t **tables;
    const uint8_t **keeps;
    int *n_pos;
    /* the tables_gen of the last attention call and what it stood for (tables_gen_for) */
    uint64_t tables_gen, gen_kv;
    int gen_t0, gen_layer;
    double att_seconds;
};

static void *balloc(fwd *f, size_t bytes, char *err, size_t errlen) {
    return f->op->alloc(f->be, bytes, BE_MEM_DEVICE, err, errlen);
}
/* host memory the backend reads into (pinned) */
static void *palloc(fwd *f, size_t bytes, char *err, size_t errlen) {
    return f->op->alloc(f->be, bytes, BE_MEM_PINNED, err, errlen);
}

fwd *fwd_init(const model *m, kv_cache *kv, be_backend *be, be_backend *host, const fwd_options *o, char *err,
              size_t errlen) {
    const model_config *c = &m->cfg;
    if (o->max_batch < 1 || o->max_batch > 4096) {
        tkv_errf(err, errlen, "forward: batch size %d out of range 1..4096", o->max_batch);
        return NULL;
    }
    if (o->n_ctx < 1) {
        tkv_errf(err, errlen, "forward: context %d must be positive", o->n_ctx);
        return NULL;
    }
    if (o->split && !host) {
        tkv_errf(err, errlen, "forward: split attention needs a host backend for T1");
        return NULL;
    }
    fwd *f = tkv_xcalloc(1, sizeof *f);
    f->m = m;
    f->kv = kv;
    f->be = be;
    f->host = host;
    f->op = be->ops;
    f->opt = *o;
    size_t B = (size_t)o->max_batch, E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
    size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff, A = (size_t)ATT_SUB * c->n_head * (size_t)o->n_ctx;
    /* scratch for the largest activation conversion of any job: the fused q/k/v and gate/up jobs
     * convert up to once per part, wo, wdown and the output matrix once */
    be_mm_out out1 = {&m->output, NULL, 0};
    size_t s = f->op->matmul_scratch(be, &out1, 1, m->output.n_in, (int64_t)B), t;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        be_mm_out qkv[3] = {{&L->wq, NULL, 0}, {&L->wk, NULL, 0}, {&L->wv, NULL, 0}};
        be_mm_out gu[2] = {{&L->wgate, NULL, 0}, {&L->wup, NULL, 0}};
        be_mm_out wo = {&L->wo, NULL, 0}, wd = {&L->wdown, NULL, 0};
        if ((t = f->op->matmul_scratch(be, qkv, 3, (int64_t)E, (int64_t)B)) > s) s = t;
        if ((t = f->op->matmul_scratch(be, gu, 2, (int64_t)E, (int64_t)B)) > s) s = t;
        if ((t = f->op->matmul_scratch(be, &wo, 1, L->wo.n_in, (int64_t)B)) > s) s = t;
        if ((t = f->op->matmul_scratch(be, &wd, 1, L->wdown.n_in, (int64_t)B)) > s) s = t;
    }
    size_t as = f->op->attention_scratch(be, ATT_SUB, o->n_ctx, c->n_head, c->head_dim);
    /* refused before anything is allocated when the buffers cannot fit (host memory: the CPU
     * backend's, and the host copies of any backend's) */
    uint64_t need = (uint64_t)B * (4 * E + 2 * Q + 2 * KV + 2 * F) * 4 + (uint64_t)A * 4 + s + as, host_need = 0;
    if (!f->op->unified) host_need = (uint64_t)A * 4 + (uint64_t)B * c->n_vocab * 4;
    if (o->split) host_need += (uint64_t)A * 4 + (uint64_t)ATT_SUB * (Q * 6 + c->n_head * 4) * 4 +
                               host->ops->attention_scratch(host, ATT_SUB, o->n_ctx, c->n_head, c->head_dim);
    uint64_t avail = tkv_mem_available(), host_total = host_need + (f->op->unified ? need : 0);
    if (host_total > avail) {
        tkv_errf(err, errlen,
                 "forward: the buffers for a batch of %d and a context of %d need %.1f MiB of memory, %.1f MiB available "
                 "(a smaller context or batch needs less)",
                 o->max_batch, o->n_ctx, tkv_mib(host_total), tkv_mib(avail));
        free(f);
        return NULL;
    }
    int ok = (f->x = balloc(f, B * E * 4, err, errlen)) && (f->h = balloc(f, B * E * 4, err, errlen)) &&
             (f->tmp = balloc(f, B * E * 4, err, errlen)) && (f->q = balloc(f, B * Q * 4, err, errlen)) &&
             (f->o = balloc(f, B * Q * 4, err, errlen)) && (f->k = balloc(f, B * KV * 4, err, errlen)) &&
             (f->v = balloc(f, B * KV * 4, err, errlen)) && (f->gate = balloc(f, B * F * 4, err, errlen)) &&
             (f->up = balloc(f, B * F * 4, err, errlen)) && (f->logit_rows = balloc(f, B * E * 4, err, errlen)) &&
             (f->att = balloc(f, A * 4, err, errlen)) && (f->mm_scratch = balloc(f, s, err, errlen)) &&
             (f->att_scratch = balloc(f, as, err, errlen)) &&
             (f->op->unified || (f->logits = balloc(f, B * (size_t)c->n_vocab * 4, err, errlen)));
    if (!ok) {
        fwd_free(f);
        return NULL;
    }
    if (!f->op->unified &&
        (!(f->att_host = palloc(f, A * 4, err, errlen)) ||
         !(f->logits_host = palloc(f, B * (size_t)c->n_vocab * 4, err, errlen)))) {
        fwd_free(f);
        return NULL;
    }
    if (o->split) {
        size_t nq = (size_t)ATT_SUB * Q, nh = (size_t)ATT_SUB * c->n_head;
        f->att1 = tkv_xmalloc(A * 4);
        f->part_m[1] = tkv_xmalloc(nh * 4);
        f->part_l[1] = tkv_xmalloc(nh * 4);
        f->part_o[1] = tkv_xmalloc(nq * 4);
        f->att1_scratch = tkv_xmalloc(host->ops->attention_scratch(host, ATT_SUB, o->n_ctx, c->n_head, c->head_dim));
        ok = (f->part_m[0] = palloc(f, nh * 4, err, errlen)) && (f->part_l[0] = palloc(f, nh * 4, err, errlen)) &&
             (f->part_o[0] = palloc(f, nq * 4, err, errlen));
        if (ok && !f->op->unified)
            ok = (f->q_host = palloc(f, nq * 4, err, errlen)) && (f->o_host = palloc(f, nq * 4, err, errlen)) &&
                 (f->dpart_m = balloc(f, nh * 4, err, errlen)) && (f->dpart_l = balloc(f, nh * 4, err, errlen));
        if (!ok) {
            fwd_free(f);
            return NULL;
        }
    }
    f->slots = tkv_xcalloc(B, sizeof *f->slots);
    f->useq = tkv_xcalloc(B, sizeof *f->useq);
    f->tables = tkv_xcalloc(ATT_SUB, sizeof *f->tables);
    f->keeps = tkv_xcalloc(ATT_SUB, sizeof *f->keeps);
    f->n_pos = tkv_xcalloc(ATT_SUB, sizeof *f->n_pos);
    return f;
}

void fwd_free(fwd *f) {
    if (!f) return;
    void *dev[] = {f->x, f->h, f->tmp, f->q, f->o, f->k, f->v, f->gate, f->up, f->logit_rows, f->logits, f->att,
                   f->mm_scratch, f->att_scratch, f->dpart_m, f->dpart_l};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) f->op->free(f->be, dev[i], BE_MEM_DEVICE);
    void *pinned[] = {f->att_host, f->logits_host, f->q_host, f->o_host, f->part_m[0], f->part_l[0], f->part_o[0]};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i]) f->op->free(f->be, pinned[i], BE_MEM_PINNED);
    free(f->att1); free(f->att1_scratch);
    free(f->part_m[1]), free(f->part_l[1]), free(f->part_o[1]);
    free(f->slots); free(f->useq); free(f->tables); free(f->keeps); free(f->n_pos);
    free(f);
}

double fwd_attention_seconds(const fwd *f) { return f->att_seconds; }

static void matmul(fwd *f, const model_mat *w, const float *x, int n, float *y, int64_t y_stride) {
    be_mm_out o = {w, y, y_stride};
    f->op->matmul(f->be, &o, 1, w->n_in, x, n, f->mm_scratch);
}

/* y_k = x · W_kᵀ for two or three matrices that read the same x, as one job */
static void matmul_fused(fwd *f, const model_mat *const *w, float *const *y, int k, const float *x, int n) {
    be_mm_out o[3];
    for (int i = 0; i < k; i++) o[i] = (be_mm_out){w[i], y[i], w[i]->n_out};
    f->op->matmul(f->be, o, k, w[0]->n_in, x, n, f->mm_scratch);
}

/* The split form of one sub-batch: T0 and STAGE on the backend, T1 on the host backend, merged
 * on the host; the policy sees the merged weights (the parts read disjoint positions). On a backend
 * that is not host memory its part is written into backend buffers (o, dpart_m/l, att) and read
 * over; only queries and partial results cross, never a T1 row. */
static void attention_split(fwd *f, be_attn *a, int nt) {
    const model_config *c = &f->m->cfg;
    size_t Q = (size_t)c->n_head * c->head_dim, nw = (size_t)nt * c->n_head * (size_t)f->opt.n_ctx;
    size_t nh = (size_t)nt * c->n_head;
    int heads = a->mass_mode == BE_MASS_HEADS ? c->n_head : 0, uni = f->op->unified;
    be_attn_part p0 = {f->part_o[0], f->part_m[0], f->part_l[0], heads ? (uni ? f->att : f->att_host) : NULL};
    be_attn_part p1 = {f->part_o[1], f->part_m[1], f->part_l[1], heads ? f->att1 : NULL};
    be_attn_part d0 = uni ? p0 : (be_attn_part){a->o, f->dpart_m, f->dpart_l, heads ? f->att : NULL};
    be_attn a0 = *a;
    a0.tiers = (1u << BE_T0) | (1u << BE_STAGE);
    a0.part = &d0;
    f->op->attention(f->be, &a0, f->att_scratch);
    if (!uni) {
        const void *r;
        if ((r = f->op->read(f->be, d0.o, nt * Q * 4, p0.o)) != p0.o) memcpy(p0.o, r, nt * Q * 4);
        if ((r = f->op->read(f->be, d0.m, nh * 4, p0.m)) != p0.m) memcpy(p0.m, r, nh * 4);
        if ((r = f->op->read(f->be, d0.l, nh * 4, p0.l)) != p0.l) memcpy(p0.l, r, nh * 4);
        if (heads && (r = f->op->read(f->be, f->att, nw * 4, f->att_host)) != f->att_host) memcpy(f->att_host, r, nw * 4);
    }
    be_attn a1 = *a;
    if (!uni) {
        const void *r = f->op->read(f->be, a->q, nt * Q * 4, f->q_host);
        if (r != f->q_host) memcpy(f->q_host, r, nt * Q * 4);
        a1.q = f->q_host;
    }
    a1.tiers = 1u << BE_T1;
    a1.mass = f->att1;
    a1.part = &p1;
    a1.tables_gen = 0;
    f->host->ops->attention(f->host, &a1, f->att1_scratch);
    be_attn_part parts[2] = {p0, p1};
    float *o = uni ? a->o : f->o_host;
    f->host->ops->attention_merge(f->host, o, parts, 2, nt, c->n_head, c->head_dim, heads, f->opt.n_ctx, a->n_pos);
    if (!uni) f->op->upload(f->be, a->o, o, nt * Q * 4);
    if (heads) { /* the parts' weights sit on disjoint positions: their sum is the whole softmax */
        float *w0 = p0.mass;
        for (size_t i = 0; i < nw; i++) w0[i] += f->att1[i];
    }
}

/* The tables_gen of one attention call (backend.h: equal values promise equal slot tables, lengths
 * and keep masks). Tables change with the KV module's generation and the sub-batch; keep masks also
 * per layer, so with masks each layer gets its own value. Values are unique in the process: forward
 * objects sharing a backend never hand it one another's value. */
static uint64_t tables_gen_for(fwd *f, int layer, int t0, int nt) {
    static _Atomic uint64_t next = 1;
    int masks = 0;
    for (int i = 0; i < nt; i++) masks |= f->keeps[i] != NULL;
    uint64_t kg = kv_tables_gen(f->kv);
    int kl = masks ? layer : -1;
    if (!f->tables_gen || kg != f->gen_kv || t0 != f->gen_t0 || kl != f->gen_layer) {
        f->tables_gen = atomic_fetch_add(&next, 1);
        f->gen_kv = kg, f->gen_t0 = t0, f->gen_layer = kl;
    }
    return f->tables_gen;
}

static void attention(fwd *f, int layer, const int *seq, const int *pos, int n) {
    const model_config *c = &f->m->cfg;
    double t_start = tkv_now_s();
    size_t Q = (size_t)c->n_head * c->head_dim, A = (size_t)c->n_head * (size_t)f->opt.n_ctx;
    int mass = kv_mass_mode(f->kv);
    for (int t0 = 0; t0 < n; t0 += ATT_SUB) {
        int nt = n - t0 < ATT_SUB ? n - t0 : ATT_SUB;
        for (int i = 0; i < nt; i++) {
            f->tables[i] = kv_attn_slots(f->kv, seq[t0 + i]);
            f->keeps[i] = kv_attn_keep(f->kv, seq[t0 + i], layer);
            f->n_pos[i] = pos[t0 + i] + 1;
        }
        be_attn a = {
            .n_tok = nt, .layer = layer, .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
            .scale = 1.0f / sqrtf((float)c->head_dim), .q = f->q + (size_t)t0 * Q, .o = f->o + (size_t)t0 * Q,
            .pools = kv_pools(f->kv), .slots = f->tables, .n_pos = f->n_pos, .keep = f->keeps,
            .keep_stride = kv_keep_stride(f->kv), .mass_mode = mass, .mass = f->att, .mass_stride = f->opt.n_ctx,
            .tables_gen = tables_gen_for(f, layer, t0, nt),
        };
        const float *w = f->att;
        if (f->opt.split) {
            attention_split(f, &a, nt);
            if (!f->op->unified) w = f->att_host;
        } else {
            f->op->attention(f->be, &a, f->att_scratch);
            if (mass) w = f->op->read(f->be, f->att, (size_t)nt * A * 4, f->att_host);
        }
        if (!mass) continue;
        for (int tl = 0; tl < nt; tl++)
            kv_observe(f->kv, seq[t0 + tl], layer, pos[t0 + tl], w + (size_t)tl * A, f->opt.n_ctx);
    }
    f->att_seconds += tkv_now_s() - t_start;
}

int fwd_run(fwd *f, const int32_t *tokens, const int *seq, const int *pos, const uint8_t *is_prompt,
            const uint8_t *want, int n, float *logits, char *err, size_t errlen) {
    const model *m = f->m;
    const model_config *c = &m->cfg;
    be_backend *be = f->be;
    const be_ops *op = f->op;
    int E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim, F = c->n_ff;
    if (n < 1 || n > f->opt.max_batch) return tkv_errf(err, errlen, "forward: batch of %d tokens (1..%d allowed)", n, f->opt.max_batch);
    int nu = 0;
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= c->n_vocab)
            return tkv_errf(err, errlen, "forward: token id %d out of range 0..%d", tokens[t], c->n_vocab - 1);
        if (!kv_seq_live(f->kv, seq[t])) return tkv_errf(err, errlen, "forward: sequence %d is not live", seq[t]);
        if (pos[t] < 0 || pos[t] >= f->opt.n_ctx)
            return tkv_errf(err, errlen, "forward: position %d exceeds the context size %d", pos[t], f->opt.n_ctx);
        int dup = 0;
        for (int u = 0; u < nu && !dup; u++) dup = f->useq[u] == seq[t];
        if (!dup) f->useq[nu++] = seq[t];
    }
    /* reserve cache positions first so a full cache fails before any work */
    for (int t = 0; t < n; t++)
        if (kv_append(f->kv, seq[t], pos[t], is_prompt ? is_prompt[t] : 0, err, errlen)) return -1;
    for (int t = 0; t < n; t++) f->slots[t] = kv_new_slot(f->kv, seq[t], pos[t]);

    op->embed(be, &m->tok_embd, tokens, n, f->x); /* x [n x E] */

    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        op->rmsnorm(be, f->h, f->x, L->attn_norm, n, E, c->rms_eps);
        matmul_fused(f, (const model_mat *const[]){&L->wq, &L->wk, &L->wv}, (float *const[]){f->q, f->k, f->v}, 3, f->h, n);
        op->add_bias(be, f->q, L->bq, n, Q);
        op->add_bias(be, f->k, L->bk, n, KV);
        op->add_bias(be, f->v, L->bv, n, KV);
        op->rope(be, f->q, n, c->n_head, c->head_dim, pos, c->rope_base, c->rope_scale, c->rope_neox);
        op->rope(be, f->k, n, c->n_head_kv, c->head_dim, pos, c->rope_base, c->rope_scale, c->rope_neox);
        kv_layer_begin(f->kv, f->useq, nu, l); /* fence this layer's moves, stage T1/T2 rows */
        op->kv_write(be, kv_pools(f->kv), l, f->slots, n, f->k, f->v); /* K after RoPE */
        attention(f, l, seq, pos, n);
        matmul(f, &L->wo, f->o, n, f->tmp, E);
        op->add_bias(be, f->tmp, L->bo, n, E);
        op->add(be, f->x, f->tmp, (int64_t)n * E);

        op->rmsnorm(be, f->h, f->x, L->ffn_norm, n, E, c->rms_eps);
        matmul_fused(f, (const model_mat *const[]){&L->wgate, &L->wup}, (float *const[]){f->gate, f->up}, 2, f->h, n);
        op->swiglu(be, f->gate, f->up, (int64_t)n * F);
        matmul(f, &L->wdown, f->gate, n, f->tmp, E);
        op->add(be, f->x, f->tmp, (int64_t)n * E);
    }

    /* logits only for the rows asked for */
    int nr = 0;
    for (int t = 0; t < n; t++)
        if (want ? want[t] : t == n - 1) f->useq[nr++] = t; /* (useq is free again: reused as the row list) */
    if (nr > 0) {
        op->gather_rows(be, f->logit_rows, f->x, f->useq, nr, E);
        op->rmsnorm(be, f->h, f->logit_rows, m->output_norm, nr, E, c->rms_eps);
        size_t bytes = (size_t)nr * c->n_vocab * sizeof(float);
        if (op->unified) {
            matmul(f, &m->output, f->h, nr, logits, c->n_vocab);
        } else {
            matmul(f, &m->output, f->h, nr, f->logits, c->n_vocab);
            memcpy(logits, op->read(be, f->logits, bytes, f->logits_host), bytes); /* DMA into pinned memory */
        }
    }
    kv_batch_end(f->kv, seq, is_prompt, n); /* a decode step ends for each sequence that decoded */
    return 0;
}
