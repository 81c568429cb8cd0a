/* split.c — split attention over two backends: T0 and STAGE (and T2 where the backend reads it in
 * place) where the backend computes, T1 on the host backend where its rows lie, the two partial
 * results merged by log-sum-exp on the host. Only the queries and the partial results cross between
 * the two, never a T1 row. Generic over backends:
 * it calls their ops and nothing else.
 *
 * On a backend that is not host memory (not `unified`) the queries are read back first, then the
 * backend's part is queued and the host computes T1's while it runs (a GPU's attention returns at
 * once); the backend's o, m and l come back packed in one read (its weights in a second), and the
 * merged output is uploaded. On a unified backend (the CPU) both parts are host memory, run one
 * after the other, and nothing is copied. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"

struct be_split {
    be_backend *be, *host;
    int max_tok, n_head, head_dim, max_pos;
    /* part 0, the backend's: o, m and l packed ([n_tok][n_head][head_dim], then [n_tok][n_head] twice,
     * for the call's n_tok) in pinned memory, so that one read brings them back; part 1 (the host's),
     * att1 plain host memory */
    float *pack;
    float *part_m1, *part_l1, *part_o1;
    float *att1;           /* [max_tok][n_head][max_pos] the host part's weights */
    void *host_scratch;
    /* not unified only: */
    float *q_host, *o_host; /* pinned */
    float *att_host;        /* pinned: the backend part's weights, then the merged ones */
    float *dpack;           /* the backend's part, packed as `pack`, in its memory */
    uint64_t read_bytes, reads; /* read back since be_split_new */
};

static size_t mass_elems(int max_tok, int n_head, int max_pos) { return (size_t)max_tok * n_head * (size_t)max_pos; }

uint64_t be_split_host_bytes(const be_backend *be, const be_backend *host, int max_tok, int n_head, int head_dim,
                             int max_pos) {
    size_t nq = (size_t)max_tok * n_head * head_dim, nh = (size_t)max_tok * n_head, A = mass_elems(max_tok, n_head, max_pos);
    uint64_t b = (uint64_t)A * 4 + (uint64_t)(2 * nq + 4 * nh) * 4 +
                 host->ops->attention_scratch(host, max_tok, max_pos, n_head, head_dim);
    if (!be->ops->unified) b += (uint64_t)A * 4 + (uint64_t)2 * nq * 4;
    return b;
}

void be_split_free(be_split *sp) {
    if (!sp) return;
    const be_ops *op = sp->be->ops;
    void *pinned[] = {sp->pack, sp->q_host, sp->o_host, sp->att_host};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i]) op->free(sp->be, pinned[i], BE_MEM_PINNED);
    if (sp->dpack) op->free(sp->be, sp->dpack, BE_MEM_DEVICE);
    free(sp->part_m1), free(sp->part_l1), free(sp->part_o1);
    free(sp->att1), free(sp->host_scratch);
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
    sp->att1 = tkv_xmalloc(A * 4);
    sp->part_m1 = tkv_xmalloc(nh * 4);
    sp->part_l1 = tkv_xmalloc(nh * 4);
    sp->part_o1 = tkv_xmalloc(nq * 4);
    sp->host_scratch = tkv_xmalloc(host->ops->attention_scratch(host, max_tok, max_pos, n_head, head_dim));
    int ok = (sp->pack = op->alloc(be, (nq + 2 * nh) * 4, BE_MEM_PINNED, err, errlen)) != NULL;
    if (ok && !op->unified)
        ok = (sp->q_host = op->alloc(be, nq * 4, BE_MEM_PINNED, err, errlen)) &&
             (sp->o_host = op->alloc(be, nq * 4, BE_MEM_PINNED, err, errlen)) &&
             (sp->att_host = op->alloc(be, A * 4, BE_MEM_PINNED, err, errlen)) &&
             (sp->dpack = op->alloc(be, (nq + 2 * nh) * 4, BE_MEM_DEVICE, err, errlen));
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

/* A part's o, m and l packed in buf for n_tok rows: o [nq], then m and l [nh] each */
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

uint64_t be_split_read_bytes(const be_split *sp) { return sp->read_bytes; }
uint64_t be_split_reads(const be_split *sp) { return sp->reads; }

const float *be_split_attention(be_split *sp, const be_attn *a, void *scratch) {
    be_backend *be = sp->be, *host = sp->host;
    int nt = a->n_tok, H = a->n_head, uni = be->ops->unified;
    TKV_ASSERT(nt >= 1 && nt <= sp->max_tok && H == sp->n_head && a->head_dim == sp->head_dim &&
               a->mass_stride <= sp->max_pos);
    size_t nq = (size_t)nt * H * a->head_dim, nh = (size_t)nt * H, nw = nh * (size_t)a->mass_stride;
    int heads = a->mass_mode == BE_MASS_HEADS ? H : 0;
    TKV_ASSERT(a->mass_mode == BE_MASS_NONE || heads);
    /* p0: the backend's part as the host reads it; d0: where the backend writes it */
    be_attn_part p0 = packed(sp->pack, nq, nh, heads ? (uni ? a->mass : sp->att_host) : NULL);
    be_attn_part d0 = uni ? p0 : packed(sp->dpack, nq, nh, heads ? a->mass : NULL);
    be_attn_part p1 = {sp->part_o1, sp->part_m1, sp->part_l1, heads ? sp->att1 : NULL};
    be_attn a1 = *a;
    a1.tiers = 1u << BE_T1;
    a1.mass = sp->att1;
    a1.part = &p1;
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
    if (!uni) { /* then the backend's part, in one read (and its weights) */
        read_into(sp, sp->pack, sp->dpack, (nq + 2 * nh) * 4);
        if (heads) read_into(sp, sp->att_host, a->mass, nw * 4);
    }
    be_attn_part parts[2] = {p0, p1};
    float *o = uni ? a->o : sp->o_host;
    host->ops->attention_merge(host, o, parts, 2, nt, H, a->head_dim, heads, a->mass_stride, a->n_pos);
    if (!uni) be->ops->upload(be, a->o, o, nq * 4);
    if (!heads) return NULL;
    /* the parts' weights sit on disjoint positions: their sum is the whole softmax */
    sum_job J = {p0.mass, sp->att1, (size_t)a->mass_stride};
    if (host->ops->host_for) host->ops->host_for(host, (int64_t)nh, sum_rows, &J);
    else sum_rows(&J, 0, (int64_t)nh, 0);
    return p0.mass;
}
