/* cpu_attention.c — attention over slot tables on the CPU. Each sequence's table is turned into one K
 * and one V row pointer per position (the "page table walk": base of the slot's chunk + its place in
 * the layer), then every (token, kv head) pair runs the op table's kernels over positions 0..n-1 in
 * order: scores (8 key rows per query load), softmax (masked positions exactly 0), the weighted V
 * sum. Where a row lives never changes the arithmetic, so T0 and T1 give the full cache's bits.
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

typedef struct {
    const be_attn *a;
    const cpu_f32_ops *f32;
    const void *const *const *rows; /* [n_tok] the token's K pointer array; its V array follows at + max_pos */
    float *att;         /* [n_tok][n_head][att_stride] */
    size_t att_stride;
    int max_pos;
    int f16;
} att_job;

static size_t rows_bytes(int n_tok, int max_pos) { return (size_t)n_tok * 2 * (size_t)max_pos * sizeof(void *); }

/* The weights' row stride: a multiple of 16 floats, so that every head's row starts on a cache line
 * (unaligned rows split a vector access across two lines in the scores, softmax and weighted sum). */
static size_t att_stride_of(int max_pos) { return ((size_t)max_pos + 15) & ~(size_t)15; }

size_t cpu_be_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim) {
    (void)b, (void)head_dim;
    return rows_bytes(n_tok, max_pos) + (size_t)n_tok * sizeof(void *) + (size_t)n_tok * n_head * att_stride_of(max_pos) * sizeof(float) + 128;
}

/* K and V row pointers of positions 0..n-1 of a table for one layer; NULL where evicted or outside
 * the tiers asked for. */
static void resolve(const be_attn *a, const int32_t *table, int n, const void **k, const void **v, size_t kbytes) {
    for (int j = 0; j < n; j++) {
        int32_t r = table[j];
        if (r == BE_SLOT_NONE || (a->tiers && !(a->tiers & (1u << BE_SLOT_TIER(r))))) {
            k[j] = v[j] = NULL;
            continue;
        }
        const char *rec = be_kv_record(a->pools, r, a->layer);
        k[j] = rec;
        v[j] = rec + kbytes;
    }
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
        if (J->f16)
            J->f32->attn_scores_f16(q, group, hd, (const uint16_t *const *)kr, (size_t)g * hd, keep, n, a->scale, att, J->att_stride);
        else
            J->f32->attn_scores(q, group, hd, (const float *const *)kr, (size_t)g * hd, keep, n, a->scale, att, J->att_stride);
        for (int hh = 0; hh < group; hh++) {
            float *row = att + (size_t)hh * J->att_stride;
            if (a->part) {
                size_t i = (size_t)t * a->n_head + h0 + hh;
                part_row(row, n, &a->part->m[i], &a->part->l[i]);
            } else {
                J->f32->softmax(row, n);
            }
        }
        if (J->f16)
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
    be_kv_fmt fmt = a->pools->pool[BE_T0].fmt;
    TKV_ASSERT(fmt == BE_KV_F16 || fmt == BE_KV_F32);
    size_t kbytes = (size_t)a->n_head_kv * a->head_dim * (fmt == BE_KV_F16 ? 2 : 4);
    char *sp = (char *)scratch;
    const void **ptrs = (const void **)(void *)sp;
    const void ***rows = (const void ***)(void *)(sp + rows_bytes(a->n_tok, max_pos));
    uintptr_t att_at = (uintptr_t)((char *)rows + (size_t)a->n_tok * sizeof(void *));
    float *att_scratch = (float *)(void *)(sp + (((att_at + 63) & ~(uintptr_t)63) - (uintptr_t)sp));
    /* one walk per run of tokens that share a table (a prefill chunk), up to the longest */
    for (int t = 0; t < a->n_tok;) {
        int u = t + 1, n = a->n_pos[t];
        while (u < a->n_tok && a->slots[u] == a->slots[t]) n = a->n_pos[u] > n ? a->n_pos[u] : n, u++;
        const void **k = ptrs + (size_t)t * 2 * max_pos, **v = k + max_pos;
        resolve(a, a->slots[t], n, k, v, kbytes);
        for (int i = t; i < u; i++) rows[i] = k;
        t = u;
    }
    att_job J = {a, c->f32, (const void *const *const *)rows, NULL, 0, max_pos, fmt == BE_KV_F16};
    if (a->mass_mode == BE_MASS_HEADS) {
        J.att = a->mass;
        J.att_stride = (size_t)a->mass_stride;
    } else {
        J.att = att_scratch;
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
