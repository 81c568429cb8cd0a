/* split.c — split attention over two backends: T0 and STAGE (and T2 where the backend reads it in
 * place) where the backend computes, T1 on the host backend where its rows lie, the two partial
 * results merged by log-sum-exp on the backend. Only the queries (to the host) and the host's
 * partial result (to the backend) cross between the two, never a T1 row. Generic over backends: it
 * calls their ops and nothing else.
 *
 * On a backend that is not host memory (not `unified`) the queries are read back first (the one wait
 * for the device), then the backend's part is queued and the host computes T1's while it runs (a
 * GPU's attention returns at once); the host's o, m, l and weights go up in one upload, and the
 * backend merges the two parts and sums their weights into a->mass, where the caller reads them
 * like the backend's own attention's (the forward: once at the end of its call). Where the backend
 * has expand_cols, the host's weights go up compacted: only its T1 positions' columns (the rest are
 * exactly 0) and their indices, spread out again on the backend into the full rows the merge takes,
 * so the bits are those of the whole upload. On a unified backend (the CPU) both parts are host
 * memory, run one after the other, and nothing is copied. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"

struct be_split {
    be_backend *be, *host;
    int max_tok, n_head, head_dim, max_pos;
    /* Each part packed for the call's n_tok rows: o [n_tok][n_head][head_dim], m and l [n_tok][n_head]
     * each, then (the host's part) its weights [n_tok][n_head][mass_stride], so that one copy moves
     * it. dpack0: the backend's part (o, m, l; its weights go to the caller's a->mass), backend
     * memory. hpack: the host's part, pinned. */
    float *dpack0, *hpack;
    void *host_scratch;
    /* not unified only: */
    float *q_host;  /* pinned: the queries read back */
    float *dpack1;  /* the host's part uploaded, packed as hpack, in the backend's memory */
    /* compacted weights (be has expand_cols): hpack's weights become [n_tok][n_head][n_cols max]
     * followed by the columns [n_tok][n_cols max] (int32), spread out into dmass1 on the backend */
    float *dmass1;  /* [max_tok][n_head][max_pos] backend memory */
    int32_t *cols;  /* [max_tok][max_pos] host: each token's T1 positions */
    int *n_cols;    /* [max_tok] */
    uint64_t cols_gen; /* the tables_gen cols were found for (every layer of a step has the same), 0: none */
    uint64_t read_bytes, reads; /* read back since be_split_new */
    uint64_t sent_bytes;        /* uploaded since be_split_new */
};

static size_t mass_elems(int max_tok, int n_head, int max_pos) { return (size_t)max_tok * n_head * (size_t)max_pos; }

/* 1: the host's weights go up compacted (a backend that is not host memory and spreads them out) */
static int compacts(const be_backend *be) { return !be->ops->unified && be->ops->expand_cols; }

uint64_t be_split_host_bytes(const be_backend *be, const be_backend *host, int max_tok, int n_head, int head_dim,
                             int max_pos) {
    size_t nq = (size_t)max_tok * n_head * head_dim, nh = (size_t)max_tok * n_head, A = mass_elems(max_tok, n_head, max_pos);
    uint64_t b = (uint64_t)(nq + 2 * nh + A) * 4 + host->ops->attention_scratch(host, max_tok, max_pos, n_head, head_dim);
    b += be->ops->unified ? (uint64_t)(nq + 2 * nh) * 4 : (uint64_t)nq * 4;
    if (compacts(be)) b += (uint64_t)max_tok * (size_t)max_pos * 8 + (uint64_t)max_tok * sizeof(int);
    return b;
}

void be_split_free(be_split *sp) {
    if (!sp) return;
    const be_ops *op = sp->be->ops;
    if (sp->hpack) op->free(sp->be, sp->hpack, BE_MEM_PINNED);
    if (sp->q_host) op->free(sp->be, sp->q_host, BE_MEM_PINNED);
    if (sp->dpack0) op->free(sp->be, sp->dpack0, BE_MEM_DEVICE);
    if (sp->dpack1) op->free(sp->be, sp->dpack1, BE_MEM_DEVICE);
    if (sp->dmass1) op->free(sp->be, sp->dmass1, BE_MEM_DEVICE);
    free(sp->host_scratch), free(sp->cols), free(sp->n_cols);
    free(sp);
}

be_split *be_split_new(be_backend *be, be_backend *host, int max_tok, int n_head, int head_dim, int max_pos, char *err,
                       size_t errlen) {
    if (!host) {
        tkv_errf(err, errlen, "split attention needs a host backend for T1");
        return NULL;
    }
    be_split *sp = tkv_xcalloc(1, sizeof *sp);
    sp->be = be, sp->host = host, sp->max_tok = max_tok, sp->n_head = n_head, sp->head_dim = head_dim;
    sp->max_pos = max_pos;
    const be_ops *op = be->ops;
    size_t nq = (size_t)max_tok * n_head * head_dim, nh = (size_t)max_tok * n_head, A = mass_elems(max_tok, n_head, max_pos);
    sp->host_scratch = tkv_xmalloc(host->ops->attention_scratch(host, max_tok, max_pos, n_head, head_dim));
    size_t C = compacts(be) ? (size_t)max_tok * max_pos : 0; /* the compacted columns' indices */
    int ok = (sp->dpack0 = op->alloc(be, (nq + 2 * nh) * 4, BE_MEM_DEVICE, err, errlen)) &&
             (sp->hpack = op->alloc(be, (nq + 2 * nh + A + C) * 4, BE_MEM_PINNED, err, errlen));
    if (ok && !op->unified)
        ok = (sp->q_host = op->alloc(be, nq * 4, BE_MEM_PINNED, err, errlen)) &&
             (sp->dpack1 = op->alloc(be, (nq + 2 * nh + A + C) * 4, BE_MEM_DEVICE, err, errlen));
    if (ok && C) {
        ok = (sp->dmass1 = op->alloc(be, A * 4, BE_MEM_DEVICE, err, errlen)) != NULL;
        sp->cols = tkv_xmalloc(C * sizeof *sp->cols);
        sp->n_cols = tkv_xmalloc((size_t)max_tok * sizeof *sp->n_cols);
    }
    if (!ok) {
        be_split_free(sp);
        return NULL;
    }
    return sp;
}

/* dst <- n bytes of backend memory src, through the backend's read (which may return dst itself) */
static void read_into(be_split *sp, void *dst, const void *src, size_t n) {
    be_backend *be = sp->be;
    sp->read_bytes += n, sp->reads++;
    const void *r = be->ops->read(be, src, n, dst);
    if (r != dst) memcpy(dst, r, n);
}

/* A part's o, m and l packed in buf for n_tok rows: o [nq], then m and l [nh] each, then its weights */
static be_attn_part packed(float *buf, size_t nq, size_t nh, float *mass) {
    return (be_attn_part){buf, buf + nq, buf + nq + nh, mass};
}

typedef struct {
    float *dst;
    const float *add;
    size_t row;
} sum_job;

/* rows [r0, r1) of dst += add */
static void sum_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const sum_job *J = ctx;
    for (size_t i = (size_t)r0 * J->row, e = (size_t)r1 * J->row; i < e; i++) J->dst[i] += J->add[i];
}

/* The host's weights [nt][H][stride] in w compacted in place to [nt][H][nc] with nc the most T1
 * positions of a token (the columns the host part read; every other one is exactly 0), each token's
 * columns after them as int32 [nt][nc]; returns nc. The columns are found once per tables_gen. In
 * place is safe: row i's k-th value moves from i * stride + col (col >= k) to i * nc + k, never
 * past a value still to be read. */
static int compact_weights(be_split *sp, const be_attn *a, float *w) {
    int nt = a->n_tok, H = a->n_head, nc = 0;
    if (!a->tables_gen || a->tables_gen != sp->cols_gen) /* other tables: find their columns */
        for (int t = 0; t < nt; t++) {
            int32_t *c = sp->cols + (size_t)t * a->mass_stride;
            int n = 0;
            for (int j = 0; j < a->n_pos[t]; j++) {
                int32_t r = a->slots[t][j];
                if (r != BE_SLOT_NONE && BE_SLOT_TIER(r) == BE_T1) c[n++] = j;
            }
            sp->n_cols[t] = n;
        }
    sp->cols_gen = a->tables_gen;
    for (int t = 0; t < nt; t++) nc = sp->n_cols[t] > nc ? sp->n_cols[t] : nc;
    for (int t = 0; t < nt; t++) {
        const int32_t *c = sp->cols + (size_t)t * a->mass_stride;
        for (int h = 0; h < H; h++) {
            size_t row = (size_t)t * H + h;
            const float *src = w + row * a->mass_stride;
            float *dst = w + row * nc;
            for (int k = 0; k < sp->n_cols[t]; k++) dst[k] = src[c[k]];
            for (int k = sp->n_cols[t]; k < nc; k++) dst[k] = 0.0f;
        }
    }
    int32_t *cw = (int32_t *)(void *)(w + (size_t)nt * H * nc);
    for (int t = 0; t < nt; t++) {
        memcpy(cw + (size_t)t * nc, sp->cols + (size_t)t * a->mass_stride, (size_t)sp->n_cols[t] * sizeof *cw);
        for (int k = sp->n_cols[t]; k < nc; k++) cw[(size_t)t * nc + k] = 0;
    }
    return nc;
}

uint64_t be_split_read_bytes(const be_split *sp) { return sp->read_bytes; }
uint64_t be_split_reads(const be_split *sp) { return sp->reads; }
uint64_t be_split_sent_bytes(const be_split *sp) { return sp->sent_bytes; }

void be_split_attention(be_split *sp, const be_attn *a, void *scratch) {
    be_backend *be = sp->be, *host = sp->host;
    int nt = a->n_tok, H = a->n_head, uni = be->ops->unified;
    TKV_ASSERT(nt >= 1 && nt <= sp->max_tok && H == sp->n_head && a->head_dim == sp->head_dim &&
               a->mass_stride <= sp->max_pos);
    size_t nq = (size_t)nt * H * a->head_dim, nh = (size_t)nt * H, nw = nh * (size_t)a->mass_stride;
    int heads = a->mass_mode == BE_MASS_HEADS ? H : 0;
    TKV_ASSERT(a->mass_mode == BE_MASS_NONE || heads);
    /* d0: the backend's part, its weights in a->mass; h1: the host's, as the host writes it; d1: where
     * the backend reads it (h1 itself on a unified backend) */
    be_attn_part d0 = packed(sp->dpack0, nq, nh, heads ? a->mass : NULL);
    be_attn_part h1 = packed(sp->hpack, nq, nh, heads ? sp->hpack + nq + 2 * nh : NULL);
    be_attn_part d1 = uni ? h1 : packed(sp->dpack1, nq, nh, heads ? sp->dpack1 + nq + 2 * nh : NULL);
    be_attn a1 = *a;
    a1.tiers = 1u << BE_T1;
    a1.mass = h1.mass;
    a1.part = &h1;
    a1.tables_gen = 0;
    /* The queries come back first: the read waits for the compute queue (RoPE, this layer's KV write
     * and copy fence), so the backend's part, queued next, runs while the host computes T1's. */
    if (!uni) {
        read_into(sp, sp->q_host, a->q, nq * 4);
        a1.q = sp->q_host;
    }
    be_attn a0 = *a;
    a0.tiers = (1u << BE_T0) | (1u << BE_STAGE) | (1u << BE_T2); /* T2 is in a table only where be reads it in place */
    a0.part = &d0;
    be->ops->attention(be, &a0, scratch);
    host->ops->attention(host, &a1, sp->host_scratch);
    int nc = -1; /* the compacted weights' columns, -1: sent whole */
    if (!uni) { /* queued behind the backend's part; hpack is next written after the next call's read of q */
        if (heads && sp->dmass1) nc = compact_weights(sp, a, h1.mass);
        size_t up = (nq + 2 * nh + (!heads ? 0 : nc >= 0 ? (nh + (size_t)nt) * nc : nw)) * 4;
        sp->sent_bytes += up;
        if (be->ops->upload_pinned) be->ops->upload_pinned(be, sp->dpack1, sp->hpack, up);
        else be->ops->upload(be, sp->dpack1, sp->hpack, up);
    }
    if (nc >= 0) { /* the weights spread out again into full rows: the whole upload's bits */
        const float *w = sp->dpack1 + nq + 2 * nh;
        be->ops->expand_cols(be, sp->dmass1, a->mass_stride, w, (const int32_t *)(const void *)(w + nh * nc), nc, sp->n_cols,
                             nt, H);
        d1.mass = sp->dmass1;
    }
    be_attn_part parts[2] = {d0, d1};
    be->ops->attention_merge(be, a->o, parts, 2, nt, H, a->head_dim, heads, a->mass_stride, a->n_pos);
    if (!heads) return;
    /* the parts' weights sit on disjoint positions: their sum is the whole softmax */
    if (!uni) {
        be->ops->add(be, a->mass, d1.mass, (int64_t)nw);
        return;
    }
    sum_job J = {a->mass, d1.mass, (size_t)a->mass_stride};
    if (host->ops->host_for) host->ops->host_for(host, (int64_t)nh, sum_rows, &J);
    else sum_rows(&J, 0, (int64_t)nh, 0);
}
