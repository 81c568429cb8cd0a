/* cpu_attention.c — attention over slot tables on the CPU. Each sequence's table is turned into one K
 * and one V row pointer per position (the "page table walk": base of the slot's chunk + its place in
 * the layer), then every (token, kv head) pair runs the op table's kernels over positions 0..n-1 in
 * order: scores (8 key rows per query load), softmax (masked positions exactly 0), the weighted V
 * sum. Where a row lives never changes the arithmetic, so T0 and T1 give the full cache's bits.
 *
 * T2 rows are read where they lie (the KV module stages none for this backend: be_ops.attn_t2_fmts).
 * A position in T2 gets a record pointer instead of row pointers; a token whose table holds one runs
 * the T2 kernels beside the exact ones: its group's queries rotated once (q . k = (R q) . (R k) for
 * the rotated key codecs) and dotted with the key centre once (centred formats: q . k = q . c +
 * q . (k - c)), the T2 scores written over the exact kernel's -inf, then one weighted sum over the
 * positions in order that reads f16/f32 rows and T2 value heads alike. A token without a T2
 * position runs exactly the kernels it always did.
 *
 * Split form (be_attn.tiers / part): only the positions of the given tiers are read and the result
 * is left unnormalised (weights e^(s - m), their sum l, the weighted sum o); attention_merge combines
 * such parts by log-sum-exp. It is the CPU half of the GPU's split path, and the reference it is
 * tested against (equal to one pass within float rounding, not bit for bit). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#include "codec/kvq.h"

typedef struct {
    const be_attn *a;
    const cpu_f32_ops *f32;
    const void *const *const *rows; /* [n_tok] the token's K pointer array; its V array follows at + max_pos,
                                       its T2 record array at + 2 max_pos */
    const int *has_t2;   /* [n_tok] 1: the token's table holds a T2 position */
    float *att;          /* [n_tok][n_head][att_stride] */
    size_t att_stride;
    float *qx;           /* [n_tok][n_head][head_dim] the queries as the T2 keys are read (rotated) */
    float *qc;           /* [n_tok][n_head] their dots with the key centre */
    be_kv_fmt t2_fmt;
    const float *centre; /* [kv_dim] the layer's key centre (centred T2 formats), or NULL */
    int max_pos;
    int f16;
} att_job;

static size_t rows_bytes(int n_tok, int max_pos) { return (size_t)n_tok * 3 * (size_t)max_pos * sizeof(void *); }

/* The weights' row stride: a multiple of 16 floats, so that every head's row starts on a cache line
 * (unaligned rows split a vector access across two lines in the scores, softmax and weighted sum). */
static size_t att_stride_of(int max_pos) { return ((size_t)max_pos + 15) & ~(size_t)15; }

static size_t up64(size_t x) { return (x + 63) & ~(size_t)63; }

/* Scratch, in order, each part on a cache line: the row pointers, the per-token pointers and T2
 * flags, the rotated queries and their centre dots, the weights. */
typedef struct {
    size_t rows, toks, qx, qc, att, total;
} att_layout;

static att_layout layout_of(int n_tok, int max_pos, int n_head, int head_dim) {
    att_layout L;
    L.rows = 0;
    L.toks = up64(rows_bytes(n_tok, max_pos));
    L.qx = up64(L.toks + (size_t)n_tok * (sizeof(void *) + sizeof(int)));
    L.qc = up64(L.qx + (size_t)n_tok * n_head * head_dim * sizeof(float));
    L.att = up64(L.qc + (size_t)n_tok * n_head * sizeof(float));
    L.total = L.att + (size_t)n_tok * n_head * att_stride_of(max_pos) * sizeof(float);
    return L;
}

size_t cpu_be_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim) {
    (void)b;
    return layout_of(n_tok, max_pos, n_head, head_dim).total + 64;
}

/* Where head g's K (which 0) or V (1) lies in a record of T2 format fmt, from the record's base. */
static void t2_head(be_kv_fmt fmt, int n_head_kv, int hd, int which, int g, kvq_head *h) {
    if (fmt == BE_KV_Q8_HEAD) { /* int8 K, int8 V, f32 scales K[n_head_kv], V[n_head_kv] (backend.h) */
        size_t kd = (size_t)n_head_kv * hd;
        h->bits = 8, h->per_head = 1, h->rot = 0;
        h->q_off = (size_t)which * kd + (size_t)g * hd;
        h->s_off = 2 * kd + ((size_t)which * n_head_kv + (size_t)g) * 4;
        return;
    }
    int kc, vc;
    TKV_ASSERT(be_kv_fmt_codecs(fmt, &kc, &vc));
    kvq_head_at((kvq_codec)(which ? vc : kc), n_head_kv, hd, g, h);
    if (which) {
        size_t kb = be_kv_k_record_bytes(fmt, n_head_kv, hd);
        h->q_off += kb, h->s_off += kb;
    }
}

/* K and V row pointers of positions 0..n-1 of a table for one layer; NULL where evicted, outside the
 * tiers asked for, or in T2 (whose record base goes to t2[j] instead). Returns 1 if any is in T2. */
static int resolve(const be_attn *a, const int32_t *table, int n, const void **k, const void **v, const void **t2,
                   size_t kbytes) {
    int any = 0;
    for (int j = 0; j < n; j++) {
        int32_t r = table[j];
        k[j] = v[j] = t2[j] = NULL;
        if (r == BE_SLOT_NONE || (a->tiers && !(a->tiers & (1u << BE_SLOT_TIER(r))))) continue;
        const char *rec = be_kv_record(a->pools, r, a->layer);
        if (BE_SLOT_TIER(r) == BE_T2) {
            t2[j] = rec;
            any = 1;
            continue;
        }
        k[j] = rec;
        v[j] = rec + kbytes;
    }
    return any;
}

/* The unnormalised form of one softmax row: e^(s - m) in place, m and l out. */
static void part_row(float *a, int n, float *m_out, float *l_out) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        if (a[j] > mx) mx = a[j];
    if (mx == -INFINITY) {
        for (int j = 0; j < n; j++) a[j] = 0.0f;
        *m_out = -INFINITY;
        *l_out = 0.0f;
        return;
    }
    double sum = 0;
    for (int j = 0; j < n; j++) {
        float e = a[j] == -INFINITY ? 0.0f : expf(a[j] - mx);
        a[j] = e;
        sum += e;
    }
    *m_out = mx;
    *l_out = (float)sum;
}

/* The group's queries as the T2 keys are read: rotated for the rotated key codecs, and their dots
 * with the centre (double sums, rounded once) for the centred ones. */
static void t2_queries(const att_job *J, const float *q, int group, int g, const kvq_head *kh, float *qx, float *qc) {
    int hd = J->a->head_dim;
    for (int hh = 0; hh < group; hh++) {
        const float *qh = q + (size_t)hh * hd;
        float *x = qx + (size_t)hh * hd;
        memcpy(x, qh, (size_t)hd * sizeof(float));
        if (kh->rot) kvq_rotate(x, hd);
        if (J->centre) {
            const float *c = J->centre + (size_t)g * hd;
            double sum = 0;
            for (int d = 0; d < hd; d++) sum += (double)qh[d] * c[d];
            qc[hh] = (float)sum;
        }
    }
}

/* One (token, kv head) pair: the `group` query heads that share the kv head. */
static void attention_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    att_job *J = ctx;
    const be_attn *a = J->a;
    int hd = a->head_dim, n_kv = a->n_head_kv, group = a->n_head / n_kv;
    for (int64_t item = i0; item < i1; item++) {
        int t = (int)(item / n_kv), g = (int)(item % n_kv), n = a->n_pos[t];
        const uint8_t *keep = a->keep && a->keep[t] ? a->keep[t] + (size_t)g * a->keep_stride : NULL;
        size_t h0 = (size_t)g * group;
        const float *q = a->q + ((size_t)t * a->n_head + h0) * hd;
        float *att = J->att + ((size_t)t * a->n_head + h0) * J->att_stride;
        float *o = (a->part ? a->part->o : a->o) + ((size_t)t * a->n_head + h0) * hd;
        const void *const *kr = J->rows[t], *const *vr = kr + J->max_pos;
        const uint8_t *const *tr = (const uint8_t *const *)(kr + 2 * (size_t)J->max_pos);
        int t2 = J->has_t2[t];
        kvq_head kh, vh;
        if (J->f16)
            J->f32->attn_scores_f16(q, group, hd, (const uint16_t *const *)kr, (size_t)g * hd, keep, n, a->scale, att, J->att_stride);
        else
            J->f32->attn_scores(q, group, hd, (const float *const *)kr, (size_t)g * hd, keep, n, a->scale, att, J->att_stride);
        if (t2) { /* the T2 positions' scores over the exact kernel's -inf */
            float *qx = J->qx + ((size_t)t * a->n_head + h0) * hd, *qc = J->centre ? J->qc + (size_t)t * a->n_head + h0 : NULL;
            t2_head(J->t2_fmt, n_kv, hd, 0, g, &kh);
            t2_head(J->t2_fmt, n_kv, hd, 1, g, &vh);
            t2_queries(J, q, group, g, &kh, qx, qc);
            J->f32->attn_scores_t2(kh.rot ? qx : q, group, hd, tr, &kh, qc, keep, n, a->scale, att, J->att_stride);
        }
        for (int hh = 0; hh < group; hh++) {
            float *row = att + (size_t)hh * J->att_stride;
            if (a->part) {
                size_t i = (size_t)t * a->n_head + h0 + hh;
                part_row(row, n, &a->part->m[i], &a->part->l[i]);
            } else {
                J->f32->softmax(row, n);
            }
        }
        if (t2)
            J->f32->attn_wsum_t2(att, J->att_stride, group, hd, vr, J->f16, (size_t)g * hd, tr, &vh, n, o);
        else if (J->f16)
            J->f32->attn_wsum_f16(att, J->att_stride, group, hd, (const uint16_t *const *)vr, (size_t)g * hd, n, o);
        else
            J->f32->attn_wsum(att, J->att_stride, group, hd, (const float *const *)vr, (size_t)g * hd, n, o);
    }
}

void cpu_be_attention(be_backend *b, const be_attn *a, void *scratch) {
    cpu_be *c = (cpu_be *)(void *)b;
    int max_pos = 0;
    for (int t = 0; t < a->n_tok; t++)
        if (a->n_pos[t] > max_pos) max_pos = a->n_pos[t];
    be_kv_fmt fmt = a->pools->pool[BE_T0].fmt, t2_fmt = a->pools->pool[BE_T2].fmt;
    TKV_ASSERT(fmt == BE_KV_F16 || fmt == BE_KV_F32);
    size_t kbytes = (size_t)a->n_head_kv * a->head_dim * (fmt == BE_KV_F16 ? 2 : 4);
    att_layout L = layout_of(a->n_tok, max_pos, a->n_head, a->head_dim);
    char *sp = (char *)(void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const void **ptrs = (const void **)(void *)(sp + L.rows);
    const void ***rows = (const void ***)(void *)(sp + L.toks);
    int *has_t2 = (int *)(void *)(sp + L.toks + (size_t)a->n_tok * sizeof(void *));
    /* one walk per run of tokens that share a table (a prefill chunk), up to the longest */
    for (int t = 0; t < a->n_tok;) {
        int u = t + 1, n = a->n_pos[t];
        while (u < a->n_tok && a->slots[u] == a->slots[t]) n = a->n_pos[u] > n ? a->n_pos[u] : n, u++;
        const void **k = ptrs + (size_t)t * 3 * max_pos, **v = k + max_pos, **t2 = v + max_pos;
        int any = resolve(a, a->slots[t], n, k, v, t2, kbytes);
        TKV_ASSERT(!any || t2_fmt >= BE_KV_Q8_HEAD); /* T2 holds one of the T2 formats */
        for (int i = t; i < u; i++) rows[i] = k, has_t2[i] = any;
        t = u;
    }
    att_job J = {a, c->f32, (const void *const *const *)rows, has_t2, NULL, 0, (float *)(void *)(sp + L.qx),
                 (float *)(void *)(sp + L.qc), t2_fmt, NULL, max_pos, fmt == BE_KV_F16};
    if (a->pools->k_center && be_kv_fmt_centred(t2_fmt))
        J.centre = a->pools->k_center + (size_t)a->layer * a->n_head_kv * a->head_dim;
    if (a->mass_mode == BE_MASS_HEADS) {
        J.att = a->mass;
        J.att_stride = (size_t)a->mass_stride;
    } else {
        J.att = (float *)(void *)(sp + L.att);
        J.att_stride = att_stride_of(max_pos);
    }
    TKV_ASSERT(!a->part || a->mass_mode != BE_MASS_SUM); /* unnormalised parts cannot be summed over heads */
    workers_for(c->workers, (int64_t)a->n_tok * a->n_head_kv, attention_task, &J);
    if (a->mass_mode == BE_MASS_SUM)
        for (int t = 0; t < a->n_tok; t++) {
            float *m = a->mass + (size_t)t * a->mass_stride;
            const float *w = J.att + (size_t)t * a->n_head * J.att_stride;
            for (int j = 0; j < a->n_pos[t]; j++) {
                double s = 0;
                for (int h = 0; h < a->n_head; h++) s += w[(size_t)h * J.att_stride + j];
                m[j] = (float)s;
            }
        }
}

void cpu_be_attention_merge(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                            int head_dim, int mass_heads, int mass_stride, const int *n_pos) {
    (void)b;
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            size_t i = (size_t)t * n_head + h;
            float M = -INFINITY;
            for (int k = 0; k < n_parts; k++)
                if (parts[k].m[i] > M) M = parts[k].m[i];
            float *out = o + i * head_dim;
            memset(out, 0, (size_t)head_dim * sizeof(float));
            if (M == -INFINITY) continue; /* every position of every part was masked */
            double L = 0;
            for (int k = 0; k < n_parts; k++)
                if (parts[k].l[i] > 0) L += exp((double)parts[k].m[i] - M) * parts[k].l[i];
            for (int k = 0; k < n_parts; k++) {
                if (!(parts[k].l[i] > 0)) continue;
                float w = (float)(exp((double)parts[k].m[i] - M) / L);
                const float *ok = parts[k].o + i * head_dim;
                for (int d = 0; d < head_dim; d++) out[d] += w * ok[d];
                if (parts[k].mass && h < mass_heads) {
                    float *mr = parts[k].mass + ((size_t)t * mass_heads + h) * mass_stride;
                    for (int j = 0; j < n_pos[t]; j++) mr[j] *= w;
                }
            }
        }
}
