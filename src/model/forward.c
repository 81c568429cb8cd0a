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
 * hierarchy relies on). Per layer the KV cache hands the attention one table (kv_attn_table) and takes
 * its weights back in one call (kv_attn_mass). With the split option the attention is the backend's
 * split form (be_split_attention: T0 and STAGE on the backend, T1 on the host backend where its rows
 * lie, merged by log-sum-exp); with split_decode only for decode steps (the KV cache then reads
 * T1 in place for them, KV_T1_IN_PLACE, and stages it for the other calls).
 *
 * Memory: on a backend that is not host memory (not `unified`), everything read back to the host
 * (attention weights, logits) lands in host buffers the backend allocated BE_MEM_PINNED at init, so
 * each read is one DMA into page-locked memory (a pageable destination would make it a staged,
 * synchronous copy). Each read also waits for the device, so the attention weights of every layer
 * are kept on the device and read once at the end of the call (where they fit DEFER_MAX_BYTES; a
 * decode step then waits twice, for them and the logits, instead of once per layer), and handed to
 * the KV cache in the order the layers ran: the same additions in the same order. Where the KV
 * cache updates its scores on the backend (kv_scores_on_device: the ranked policies, off the CPU)
 * the weights stay there: a decode step then waits once, for the logits. On a unified backend (the
 * CPU) nothing is read back: the forward reads backend memory in place. */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/meminfo.h"
#include "model/route.h"

#define ATT_SUB 16 /* query tokens per attention sub-batch (bounds the weights buffer) */
/* Off the CPU, the most device (and pinned) memory that holds a whole call's attention weights, every
 * layer's, so that they come back in one read at the end of the call instead of one per layer (a
 * decode step of a 7B at depth 32768: 103 MB); a call whose weights do not fit reads per layer. */
#define DEFER_MAX_BYTES ((size_t)256 << 20)

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
    /* not unified: a call's weights of every layer (att_all, device) read back once at its
     * end into att_all_host (pinned), then handed to the KV cache in layer order (pend) */
    float *att_all, *att_all_host;
    size_t att_all_floats;
    struct pend { int layer, t0, nt, stride; size_t off; } *pend; /* [cap_pend], allocated at init */
    int n_pend, cap_pend;
    size_t pend_used;   /* floats of att_all used by this call */
    int deferring;      /* this call's weights go to att_all */
    void *mm_scratch, *att_scratch;
    /* expert FFN (cfg.n_expert): router logits [max_batch x n_expert] (and their pinned host copy),
     * each expert's input rows [max_batch x n_embd], the experts' outputs [max_batch * k x n_embd] */
    float *rlogits, *rlogits_host, *xe, *ye;
    int *route_rows;   /* [max_batch * k] host: row of ye holding token t's j-th expert output */
    float *route_w;    /* [max_batch * k] host: its weight */
    int32_t *route_sel; /* [max_batch * k] host: the expert */
    /* experts routed on the backend (be_ops.route), for calls of up to dev_route tokens (0: never) */
    int dev_route;
    int32_t *sel_dev;  /* [dev_route * k] backend: the experts of token t's pairs t*k.. */
    float *w_dev;      /* [dev_route * k] backend: their weights */
    int *exp_tok;      /* [max_batch * k] host: tokens grouped by expert */
    int *exp_n;        /* [n_expert + 1] host: counts, then offsets */
    uint64_t expert_read; /* bytes of expert matrices read since init */
    uint64_t read_back;   /* bytes read back from a backend that is not host memory, since init */
    uint64_t read_calls;  /* and the reads (each waits for the device) */
    be_split *split; /* the split form's buffers (opt.split) */
    /* per call, host */
    int32_t *slots;  /* [max_batch] the new tokens' slots */
    int *useq;       /* [max_batch] distinct sequences of the call */
    double att_seconds;
};

static void *balloc(fwd *f, size_t bytes, char *err, size_t errlen) {
    return f->op->alloc(f->be, bytes, BE_MEM_DEVICE, err, errlen);
}
/* host memory the backend reads into (pinned) */
static void *palloc(fwd *f, size_t bytes, char *err, size_t errlen) {
    return f->op->alloc(f->be, bytes, BE_MEM_PINNED, err, errlen);
}

/* Where the backend can route experts (be_ops.route), every call does, decode steps and prompt
 * chunks alike, up to this many pairs (a token's k experts each; matmul_sel's bound): nothing is
 * read back inside a call, and the backend groups a chunk's pairs by expert (docs/CUDA.md). */
#define MOE_DEV_PAIRS BE_SEL_MAX_PAIRS

/* every layer's experts of one type per matrix (a GGUF's expert tensor is one type; odd files
 * aside) */
static int experts_uniform(const model *m) {
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        for (int e = 1; e < m->cfg.n_expert; e++)
            if (L->egate[e].type != L->egate[0].type || L->eup[e].type != L->eup[0].type ||
                L->edown[e].type != L->edown[0].type)
                return 0;
    }
    return 1;
}

/* Bytes of the matmul scratch: the largest activation conversion of any job (the fused q/k/v and
 * gate/up jobs convert up to once per part, wo, wdown and the output matrix once) for B tokens, and
 * for P expert pairs (matmul_sel) where the experts are routed on the backend (P > 0). */
static size_t mm_scratch_bytes(const model *m, be_backend *be, int64_t B, int64_t P) {
    const model_config *c = &m->cfg;
    const be_ops *op = be->ops;
    be_mm_out out1 = {&m->output, NULL, 0, NULL};
    size_t s = op->matmul_scratch(be, &out1, 1, m->output.n_in, B), t;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        be_mm_out qkv[3] = {{&L->wq, NULL, 0, NULL}, {&L->wk, NULL, 0, NULL}, {&L->wv, NULL, 0, NULL}};
        be_mm_out gu[2] = {{&L->wgate, NULL, 0, NULL}, {&L->wup, NULL, 0, NULL}};
        be_mm_out wo = {&L->wo, NULL, 0, NULL}, wd = {&L->wdown, NULL, 0, NULL};
        if ((t = op->matmul_scratch(be, qkv, 3, (int64_t)c->n_embd, B)) > s) s = t;
        if ((t = op->matmul_scratch(be, gu, 2, (int64_t)c->n_embd, B)) > s) s = t;
        if ((t = op->matmul_scratch(be, &wo, 1, L->wo.n_in, B)) > s) s = t;
        if ((t = op->matmul_scratch(be, &wd, 1, L->wdown.n_in, B)) > s) s = t;
        if (!c->n_expert) continue;
        be_mm_out r = {&L->router, NULL, 0, NULL}, egu[2] = {{&L->egate[0], NULL, 0, NULL}, {&L->eup[0], NULL, 0, NULL}};
        be_mm_out ed = {&L->edown[0], NULL, 0, NULL};
        if ((t = op->matmul_scratch(be, &r, 1, (int64_t)c->n_embd, B)) > s) s = t;
        for (int e = 0; e < c->n_expert; e++) { /* types may differ between experts only in odd files */
            egu[0].w = &L->egate[e], egu[1].w = &L->eup[e], ed.w = &L->edown[e];
            if ((t = op->matmul_scratch(be, egu, 2, (int64_t)c->n_embd, B)) > s) s = t;
            if ((t = op->matmul_scratch(be, &ed, 1, (int64_t)c->n_ff_exp, B)) > s) s = t;
        }
        /* pairs (matmul_sel): where P > 0 every expert of a matrix is one type, so the last stands for all */
        if (P && (t = op->matmul_scratch(be, egu, 2, (int64_t)c->n_embd, P)) > s) s = t;
        if (P && (t = op->matmul_scratch(be, &ed, 1, (int64_t)c->n_ff_exp, P)) > s) s = t;
    }
    return s;
}

/* Sizes and allocates every buffer of f (f->m, be, host, opt set); refused before anything is
 * allocated when the host memory they take is not available (the CPU backend's buffers, and the
 * host copies of any backend's). -1 with a message; what was allocated is fwd_free's. */
static int alloc_buffers(fwd *f, char *err, size_t errlen) {
    const model_config *c = &f->m->cfg;
    const fwd_options *o = &f->opt;
    size_t B = (size_t)o->max_batch, E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
    size_t KV = (size_t)c->n_head_kv * c->head_dim, A = (size_t)ATT_SUB * c->n_head * (size_t)o->n_ctx;
    size_t F = (size_t)(c->n_expert ? c->n_ff_exp : c->n_ff), X = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
    /* experts routed on the backend for calls of up to MOE_DEV_PAIRS / k tokens, where it can (every
     * expert of a layer's array of one type: a backend's table of them holds one layout) */
    size_t P = 0; /* such a call's pairs at most */
    if (X && f->op->route && f->op->matmul_sel && f->op->combine_pairs && experts_uniform(f->m)) {
        int most = MOE_DEV_PAIRS / (int)K;
        f->dev_route = o->max_batch < most ? o->max_batch : most;
        P = (size_t)f->dev_route * K;
    }
    size_t GB = P > B ? P : B; /* rows of gate and up: a token's, or a pair's */
    size_t s = mm_scratch_bytes(f->m, f->be, (int64_t)B, (int64_t)P);
    size_t as = f->op->attention_scratch(f->be, ATT_SUB, o->n_ctx, c->n_head, c->head_dim);
    uint64_t need = ((uint64_t)B * (4 * E + 2 * Q + 2 * KV) + 2 * GB * F) * 4 + (uint64_t)A * 4 + s + as, host_need = 0;
    if (X) need += (uint64_t)B * (X + E + K * E) * 4 + P * 8;
    /* weights come back (not unified) unless the KV cache takes them where they lie */
    int weights_back = !f->op->unified && !kv_scores_on_device(f->kv);
    if (!f->op->unified) host_need = (uint64_t)B * c->n_vocab * 4 + (uint64_t)B * X * 4;
    if (weights_back) {
        size_t all = (size_t)c->n_layer * A * 4;
        f->att_all_floats = (all < DEFER_MAX_BYTES ? all : DEFER_MAX_BYTES) / 4;
        need += (uint64_t)f->att_all_floats * 4, host_need += (uint64_t)A * 4 + (uint64_t)f->att_all_floats * 4;
    }
    if (o->split) host_need += be_split_host_bytes(f->be, f->host, ATT_SUB, c->n_head, c->head_dim, o->n_ctx);
    uint64_t avail = tkv_mem_available(), host_total = host_need + (f->op->unified ? need : 0);
    if (host_total > avail)
        return tkv_errf(err, errlen,
                        "forward: the buffers for a batch of %d and a context of %d need %.1f MiB of memory, %.1f MiB "
                        "available (a smaller context or batch needs less)",
                        o->max_batch, o->n_ctx, tkv_mib(host_total), tkv_mib(avail));
    int ok = (f->x = balloc(f, B * E * 4, err, errlen)) && (f->h = balloc(f, B * E * 4, err, errlen)) &&
             (f->tmp = balloc(f, B * E * 4, err, errlen)) && (f->q = balloc(f, B * Q * 4, err, errlen)) &&
             (f->o = balloc(f, B * Q * 4, err, errlen)) && (f->k = balloc(f, B * KV * 4, err, errlen)) &&
             (f->v = balloc(f, B * KV * 4, err, errlen)) && (f->gate = balloc(f, GB * F * 4, err, errlen)) &&
             (f->up = balloc(f, GB * F * 4, err, errlen)) && (f->logit_rows = balloc(f, B * E * 4, err, errlen)) &&
             (f->att = balloc(f, A * 4, err, errlen)) && (f->mm_scratch = balloc(f, s, err, errlen)) &&
             (f->att_scratch = balloc(f, as, err, errlen)) &&
             (f->op->unified || (f->logits = balloc(f, B * (size_t)c->n_vocab * 4, err, errlen)));
    if (ok && !f->op->unified) ok = (f->logits_host = palloc(f, B * (size_t)c->n_vocab * 4, err, errlen)) != NULL;
    if (ok && weights_back) ok = (f->att_host = palloc(f, A * 4, err, errlen)) != NULL;
    if (ok && f->att_all_floats) {
        ok = (f->att_all = balloc(f, f->att_all_floats * 4, err, errlen)) &&
             (f->att_all_host = palloc(f, f->att_all_floats * 4, err, errlen));
        f->cap_pend = c->n_layer * (int)((B + ATT_SUB - 1) / ATT_SUB); /* a layer's sub-batches, every layer */
        f->pend = tkv_xcalloc((size_t)f->cap_pend, sizeof *f->pend);
    }
    if (ok && X) {
        ok = (f->rlogits = balloc(f, B * X * 4, err, errlen)) && (f->xe = balloc(f, B * E * 4, err, errlen)) &&
             (f->ye = balloc(f, B * K * E * 4, err, errlen)) &&
             (f->op->unified || (f->rlogits_host = palloc(f, B * X * 4, err, errlen)));
        f->route_rows = tkv_xcalloc(B * K, sizeof *f->route_rows);
        f->route_w = tkv_xcalloc(B * K, sizeof *f->route_w);
        f->route_sel = tkv_xcalloc(B * K, sizeof *f->route_sel);
        f->exp_tok = tkv_xcalloc(B * K, sizeof *f->exp_tok);
        f->exp_n = tkv_xcalloc(X + 1, sizeof *f->exp_n);
    }
    if (ok && P)
        ok = (f->sel_dev = balloc(f, P * 4, err, errlen)) && (f->w_dev = balloc(f, P * 4, err, errlen));
    if (ok && o->split)
        ok = (f->split = be_split_new(f->be, f->host, ATT_SUB, c->n_head, c->head_dim, o->n_ctx, err, errlen)) != NULL;
    f->slots = tkv_xcalloc(B, sizeof *f->slots);
    f->useq = tkv_xcalloc(B, sizeof *f->useq);
    return ok ? 0 : -1;
}

fwd *fwd_init(const model *m, kv_cache *kv, be_backend *be, be_backend *host, const fwd_options *o, char *err,
              size_t errlen) {
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
    if (alloc_buffers(f, err, errlen)) {
        fwd_free(f);
        return NULL;
    }
    for (int l = 0; f->dev_route && l < m->cfg.n_layer; l++) { /* the backend's expert tables, before any step */
        const model_layer *L = &m->layers[l];
        be_mm_out gu[2] = {{&L->egate[0], NULL, 0, NULL}, {&L->eup[0], NULL, 0, NULL}};
        be_mm_out d = {&L->edown[0], NULL, 0, NULL};
        f->op->matmul_sel(be, gu, 2, m->cfg.n_expert, m->cfg.n_embd, NULL, 1, NULL, 0, NULL);
        f->op->matmul_sel(be, &d, 1, m->cfg.n_expert, m->cfg.n_ff_exp, NULL, 1, NULL, 0, NULL);
    }
    return f;
}

void fwd_free(fwd *f) {
    if (!f) return;
    void *dev[] = {f->x, f->h, f->tmp, f->q, f->o, f->k, f->v, f->gate, f->up, f->logit_rows, f->logits, f->att,
                   f->mm_scratch, f->att_scratch, f->rlogits, f->xe, f->ye, f->att_all, f->sel_dev, f->w_dev};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) f->op->free(f->be, dev[i], BE_MEM_DEVICE);
    void *pinned[] = {f->att_host, f->logits_host, f->rlogits_host, f->att_all_host};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i]) f->op->free(f->be, pinned[i], BE_MEM_PINNED);
    be_split_free(f->split);
    free(f->slots); free(f->useq); free(f->pend);
    free(f->route_rows); free(f->route_w); free(f->route_sel); free(f->exp_tok); free(f->exp_n);
    free(f);
}

double fwd_attention_seconds(const fwd *f) { return f->att_seconds; }

uint64_t fwd_read_back_bytes(const fwd *f, uint64_t *reads) {
    if (reads) *reads = f->read_calls + (f->split ? be_split_reads(f->split) : 0);
    return f->read_back + (f->split ? be_split_read_bytes(f->split) : 0);
}

uint64_t fwd_split_sent_bytes(const fwd *f) { return f->split ? be_split_sent_bytes(f->split) : 0; }

/* backend memory into host memory through the backend's read (counted where it is a copy) */
static const void *read_back(fwd *f, const void *src, size_t bytes, void *host_tmp) {
    if (!f->op->unified) f->read_back += bytes, f->read_calls++;
    return f->op->read(f->be, src, bytes, host_tmp);
}

uint64_t fwd_expert_bytes(const fwd *f) { return f->expert_read; }

static void matmul(fwd *f, const model_mat *w, const float *x, int n, float *y, int64_t y_stride) {
    be_mm_out o = {w, y, y_stride, NULL};
    f->op->matmul(f->be, &o, 1, w->n_in, x, n, f->mm_scratch);
}

/* y_k = x · W_kᵀ (+ bias_k) for two or three matrices that read the same x, as one job; the biases
 * (bias NULL: none, or an entry NULL) added by the matmul where the backend does, else here */
static void matmul_fused(fwd *f, const model_mat *const *w, float *const *y, int k, const float *x, int n,
                         const float *const *bias) {
    be_mm_out o[3];
    for (int i = 0; i < k; i++) o[i] = (be_mm_out){w[i], y[i], w[i]->n_out, bias ? bias[i] : NULL};
    f->op->matmul(f->be, o, k, w[0]->n_in, x, n, f->mm_scratch);
    if (bias && !f->op->matmul_bias)
        for (int i = 0; i < k; i++) f->op->add_bias(f->be, y[i], bias[i], n, (int)w[i]->n_out);
}

/* The weights' row stride for one attention call: its longest table rounded up to 16 floats (rows
 * on cache lines), not the context, so that a backend that is not host memory reads back what the
 * call wrote (at depth 2048 of a 32768 context, a sixteenth) */
static int mass_stride(const int *n_pos, int n, int n_ctx) {
    int top = 1;
    for (int t = 0; t < n; t++) top = n_pos[t] > top ? n_pos[t] : top;
    top = (top + 15) & ~15;
    return top < n_ctx ? top : n_ctx;
}

static void attention(fwd *f, int layer, const int *seq, const int *pos, int n, int split) {
    const model_config *c = &f->m->cfg;
    double t_start = tkv_now_s();
    size_t Q = (size_t)c->n_head * c->head_dim;
    for (int t0 = 0; t0 < n; t0 += ATT_SUB) {
        int nt = n - t0 < ATT_SUB ? n - t0 : ATT_SUB;
        be_attn a = {
            .n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
            .scale = 1.0f / sqrtf((float)c->head_dim), .q = f->q + (size_t)t0 * Q, .o = f->o + (size_t)t0 * Q,
            .mass = f->att, /* mass_stride: below, from the tables */
        };
        kv_attn_table(f->kv, layer, seq + t0, pos + t0, nt, split ? KV_T1_IN_PLACE : KV_T1_AS_OPENED, &a);
        a.mass_stride = mass_stride(a.n_pos, nt, f->opt.n_ctx);
        size_t floats = (size_t)nt * c->n_head * a.mass_stride;
        int on_device = a.mass_mode && kv_scores_on_device(f->kv); /* the scores updated where the weights lie */
        int defer = f->deferring && a.mass_mode && !on_device;
        if (defer) { /* into this call's buffer of every layer's weights, handed over at its end */
            TKV_ASSERT(f->pend_used + floats <= f->att_all_floats && f->n_pend < f->cap_pend);
            f->pend[f->n_pend++] = (struct pend){layer, t0, nt, a.mass_stride, f->pend_used};
            a.mass = f->att_all + f->pend_used;
            f->pend_used += floats;
        }
        if (split) be_split_attention(f->split, &a, f->att_scratch);
        else f->op->attention(f->be, &a, f->att_scratch);
        if (on_device) kv_attn_mass_device(f->kv, layer, seq + t0, pos + t0, nt, a.mass, a.mass_stride);
        else if (a.mass_mode && !defer)
            kv_attn_mass(f->kv, layer, seq + t0, pos + t0, nt, read_back(f, f->att, floats * 4, f->att_host), a.mass_stride);
    }
    f->att_seconds += tkv_now_s() - t_start;
}

/* The call's deferred weights: one read, then every layer's to the KV cache in the order the layers
 * ran (the same additions in the same order as one call per layer). */
static void flush_weights(fwd *f, const int *seq, const int *pos) {
    if (!f->n_pend) return;
    const float *w = read_back(f, f->att_all, f->pend_used * 4, f->att_all_host);
    for (int i = 0; i < f->n_pend; i++) {
        const struct pend *p = &f->pend[i];
        kv_attn_mass(f->kv, p->layer, seq + p->t0, pos + p->t0, p->nt, w + p->off, p->stride);
    }
    f->n_pend = 0, f->pend_used = 0;
}

/* The residual add and the next RMSNorm: x += d, then h = rmsnorm(x) * w; one op where the backend
 * has it (a launch fewer on a GPU), else the two: the same ops in the same order either way. */
static void add_norm(fwd *f, const float *d, const float *w, int n) {
    const model_config *c = &f->m->cfg;
    if (f->op->add_rmsnorm) {
        f->op->add_rmsnorm(f->be, f->x, d, f->h, w, n, c->n_embd, c->rms_eps);
        return;
    }
    f->op->add(f->be, f->x, d, (int64_t)n * c->n_embd);
    f->op->rmsnorm(f->be, f->h, f->x, w, n, c->n_embd, c->rms_eps);
}

/* The expert FFN of a call of n <= dev_route tokens, routed on the backend: pair p = t*k + j is
 * token t's j-th expert; gate and up hold a row a pair, swiglu'd in place, ye the pairs' down
 * products, and tmp their weighted sums. No result comes back to the host: a step stays one
 * submission. The bytes counted are each pair's expert's (a backend that groups a chunk's pairs by
 * expert reads each expert fewer times). */
static void expert_ffn_pairs(fwd *f, const model_layer *L, int n) {
    const model_config *c = &f->m->cfg;
    be_backend *be = f->be;
    const be_ops *op = f->op;
    int X = c->n_expert, K = c->n_expert_used, E = c->n_embd, FE = c->n_ff_exp, np = n * K;
    op->route(be, f->rlogits, n, X, K, f->sel_dev, f->w_dev);
    be_mm_out gu[2] = {{&L->egate[0], f->gate, FE, NULL}, {&L->eup[0], f->up, FE, NULL}};
    op->matmul_sel(be, gu, 2, X, E, f->h, K, f->sel_dev, np, f->mm_scratch);
    op->swiglu(be, f->gate, f->up, (int64_t)np * FE);
    be_mm_out d = {&L->edown[0], f->ye, E, NULL};
    op->matmul_sel(be, &d, 1, X, FE, f->gate, 1, f->sel_dev, np, f->mm_scratch);
    op->combine_pairs(be, f->tmp, f->ye, f->w_dev, n, K, E);
    f->expert_read += (uint64_t)np * L->expert_bytes;
}

/* The expert FFN of layer L on the normed rows f->h: tmp = sum_j w_j expert_j(h) (the caller adds
 * it). Tokens are grouped by expert so that each expert's matrices are read once for all the tokens
 * routed to it. */
static void expert_ffn(fwd *f, const model_layer *L, int n) {
    const model_config *c = &f->m->cfg;
    be_backend *be = f->be;
    const be_ops *op = f->op;
    int X = c->n_expert, K = c->n_expert_used, E = c->n_embd, FE = c->n_ff_exp;
    matmul(f, &L->router, f->h, n, f->rlogits, X);
    if (n <= f->dev_route) { /* nothing waits: the experts chosen and read where the logits lie */
        expert_ffn_pairs(f, L, n);
        return;
    }
    moe_route(read_back(f, f->rlogits, (size_t)n * X * sizeof(float), f->rlogits_host), n, X, K, f->route_sel,
              f->route_w);
    int *cnt = f->exp_n;
    memset(cnt, 0, (size_t)(X + 1) * sizeof *cnt);
    for (int i = 0; i < n * K; i++) cnt[f->route_sel[i] + 1]++;
    for (int e = 0; e < X; e++) cnt[e + 1] += cnt[e]; /* cnt[e]: the first row of expert e */
    for (int i = 0; i < n * K; i++) { /* token order within each expert */
        int e = f->route_sel[i];
        f->route_rows[i] = cnt[e];
        f->exp_tok[cnt[e]++] = i / K;
    }
    for (int e = X; e > 0; e--) cnt[e] = cnt[e - 1]; /* back to offsets */
    cnt[0] = 0;
    for (int e = 0; e < X; e++) {
        int ne = cnt[e + 1] - cnt[e];
        if (!ne) continue;
        op->gather_rows(be, f->xe, f->h, f->exp_tok + cnt[e], ne, E);
        matmul_fused(f, (const model_mat *const[]){&L->egate[e], &L->eup[e]}, (float *const[]){f->gate, f->up}, 2, f->xe, ne, NULL);
        op->swiglu(be, f->gate, f->up, (int64_t)ne * FE);
        matmul(f, &L->edown[e], f->gate, ne, f->ye + (size_t)cnt[e] * E, E);
        f->expert_read += L->expert_bytes;
    }
    op->combine_rows(be, f->tmp, f->ye, f->route_rows, f->route_w, n, K, E);
}

int fwd_run(fwd *f, const int32_t *tokens, const int *seq, const int *pos, const uint8_t *is_prompt,
            const uint8_t *want, int n, float *logits, char *err, size_t errlen) {
    const model *m = f->m;
    const model_config *c = &m->cfg;
    be_backend *be = f->be;
    const be_ops *op = f->op;
    int E = c->n_embd, F = c->n_ff;
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

    /* a call's weights of every layer come back at its end when they fit (below: flush_weights) */
    int top = 1;
    for (int t = 0; t < n; t++) top = pos[t] + 1 > top ? pos[t] + 1 : top;
    size_t per_layer = (size_t)n * c->n_head * (size_t)mass_stride(&top, 1, f->opt.n_ctx);
    f->deferring = f->att_all_floats && (size_t)c->n_layer * per_layer <= f->att_all_floats;
    f->n_pend = 0, f->pend_used = 0;

    /* split attention for this call: always with split, or for decode steps (one token of each
     * sequence: as many sequences as tokens) with split_decode */
    int split = f->split && (!f->opt.split_decode || nu == n);

    /* the call's ops bracketed for the backend (a GPU may launch them as one graph) where nothing in
     * it waits for the device: no split attention (it reads q back), no expert routing on the host
     * (it reads the router's logits back), no copy fence (kv_step_may_wait); reads of the weights of
     * a call whose buffer does not hold them all still wait, and the backend then submits what it has */
    int bracket = op->step_begin && !split && (!c->n_expert || n <= f->dev_route) &&
                  !kv_step_may_wait(f->kv, f->useq, nu, KV_T1_AS_OPENED);
    if (bracket) op->step_begin(be, n);
    op->embed(be, &m->tok_embd, tokens, n, f->x); /* x [n x E] */

    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        if (l == 0) op->rmsnorm(be, f->h, f->x, L->attn_norm, n, E, c->rms_eps); /* later: the previous layer's add_norm */
        matmul_fused(f, (const model_mat *const[]){&L->wq, &L->wk, &L->wv}, (float *const[]){f->q, f->k, f->v}, 3, f->h, n,
                     (const float *const[]){L->bq, L->bk, L->bv});
        if (L->q_norm) { /* per head, in place */
            op->rmsnorm(be, f->q, f->q, L->q_norm, n * c->n_head, c->head_dim, c->rms_eps);
            op->rmsnorm(be, f->k, f->k, L->k_norm, n * c->n_head_kv, c->head_dim, c->rms_eps);
        }
        op->rope(be, f->q, n, c->n_head, c->head_dim, pos, c->rope_base, c->rope_scale, c->rope_neox);
        op->rope(be, f->k, n, c->n_head_kv, c->head_dim, pos, c->rope_base, c->rope_scale, c->rope_neox);
        kv_layer_begin(f->kv, f->useq, nu, l, split ? KV_T1_IN_PLACE : KV_T1_AS_OPENED); /* fence, stage rows */
        op->kv_write(be, kv_pools(f->kv), l, f->slots, n, f->k, f->v); /* K after RoPE */
        attention(f, l, seq, pos, n, split);
        matmul(f, &L->wo, f->o, n, f->tmp, E);
        op->add_bias(be, f->tmp, L->bo, n, E);
        add_norm(f, f->tmp, L->ffn_norm, n);
        if (c->n_expert) { /* tmp: the FFN's output */
            expert_ffn(f, L, n);
        } else {
            matmul_fused(f, (const model_mat *const[]){&L->wgate, &L->wup}, (float *const[]){f->gate, f->up}, 2, f->h, n,
                         NULL);
            op->swiglu(be, f->gate, f->up, (int64_t)n * F);
            matmul(f, &L->wdown, f->gate, n, f->tmp, E);
        }
        if (l + 1 < c->n_layer) add_norm(f, f->tmp, m->layers[l + 1].attn_norm, n);
        else op->add(be, f->x, f->tmp, (int64_t)n * E);
    }

    /* logits only for the rows asked for */
    int nr = 0;
    for (int t = 0; t < n; t++)
        if (want ? want[t] : t == n - 1) f->useq[nr++] = t; /* (useq is free again: reused as the row list) */
    if (nr > 0) {
        op->gather_rows(be, f->logit_rows, f->x, f->useq, nr, E);
        op->rmsnorm(be, f->h, f->logit_rows, m->output_norm, nr, E, c->rms_eps);
        matmul(f, &m->output, f->h, nr, op->unified ? logits : f->logits, c->n_vocab);
    }
    if (bracket) op->step_end(be); /* before the reads */
    if (nr > 0 && !op->unified) {
        size_t bytes = (size_t)nr * c->n_vocab * sizeof(float);
        flush_weights(f, seq, pos); /* waits for the whole call, the logits' product included */
        memcpy(logits, read_back(f, f->logits, bytes, f->logits_host), bytes); /* DMA into pinned memory */
    }
    flush_weights(f, seq, pos);
    kv_batch_end(f->kv, seq, is_prompt, n); /* a decode step ends for each sequence that decoded */
    return 0;
}
