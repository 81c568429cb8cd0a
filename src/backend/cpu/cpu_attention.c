/* cpu_attention.c — attention over slot tables on the CPU. Each sequence's table is turned into one
 * K and one V row pointer per position (the "page table walk": base of the slot's chunk + its place
 * in the layer). A token's positions are cut into chunks of ATT_CHUNK; for each chunk its records
 * are read whole (so the memory streams; where they lie spread out, as the hierarchy's T0 and T1
 * slots do, the next chunk's are also asked into L2 while this one computes), then every kv head
 * runs the op table's kernels over the chunk's positions in order: scores (register tiles of heads
 * x positions), the unnormalised softmax (its max m and sum l; masked positions exactly 0), the
 * weighted V sum. The chunks' parts merge by log-sum-exp in chunk order. Work is split by (token,
 * chunk) while there are few tokens, so one decoding sequence uses every thread, and by token
 * above; the chunks are fixed by position, so the bits never depend on the split, the batch or the
 * thread count (prefill and decode agree). Where a row lives never changes the arithmetic, so T0
 * and T1 give the full cache's bits.
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

/* Positions per chunk. Each (token, chunk) is one unnormalised softmax part; the parts of a token
 * merge by log-sum-exp in chunk order. The chunks are fixed by position (never by thread count or
 * batch), so a token's output has the same bits in prefill and decode, on any number of threads. */
#define ATT_CHUNK 128

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
    size_t rec_bytes[2]; /* bytes of an exact record and of a T2 record */
    int n_chunks;        /* chunks of the longest token */
    float *pm, *pl, *po; /* parts: [slot][n_head] max and sum, [slot][n_head][head_dim] weighted sums;
                            slot = t * n_chunks + c (by chunk) or tid * n_chunks + c (by token) */
} att_job;

static int n_chunks_of(int n) { return (n + ATT_CHUNK - 1) / ATT_CHUNK; }

/* by chunk (items are (token, chunk) pairs, then a merge pass) while there are fewer than two
 * tokens per thread; by token (one item per token, its chunks and merge in one task) above */
static int by_chunk(int n_tok, int threads) { return n_tok < 2 * threads; }

static size_t rows_bytes(int n_tok, int max_pos) { return (size_t)n_tok * 3 * (size_t)max_pos * sizeof(void *); }

/* The weights' row stride: a multiple of 16 floats, so that every head's row starts on a cache line
 * (unaligned rows split a vector access across two lines in the scores, softmax and weighted sum). */
static size_t att_stride_of(int max_pos) { return ((size_t)max_pos + 15) & ~(size_t)15; }

static size_t up64(size_t x) { return (x + 63) & ~(size_t)63; }

/* Scratch, in order, each part on a cache line: the row pointers, the per-token pointers and T2
 * flags, the rotated queries and their centre dots, the weights, the parts (max, sum, weighted sum). */
typedef struct {
    size_t rows, toks, qx, qc, att, pm, pl, po, total;
} att_layout;

static att_layout layout_of(int n_tok, int threads, int max_pos, int n_head, int head_dim) {
    size_t slots = (size_t)(by_chunk(n_tok, threads) ? n_tok : threads) * (size_t)n_chunks_of(max_pos);
    att_layout L;
    L.rows = 0;
    L.toks = up64(rows_bytes(n_tok, max_pos));
    L.qx = up64(L.toks + (size_t)n_tok * (sizeof(void *) + sizeof(int)));
    L.qc = up64(L.qx + (size_t)n_tok * n_head * head_dim * sizeof(float));
    L.att = up64(L.qc + (size_t)n_tok * n_head * sizeof(float));
    L.pm = up64(L.att + (size_t)n_tok * n_head * att_stride_of(max_pos) * sizeof(float));
    L.pl = up64(L.pm + slots * n_head * sizeof(float));
    L.po = up64(L.pl + slots * n_head * sizeof(float));
    L.total = L.po + slots * n_head * head_dim * sizeof(float);
    return L;
}

static int threads_of(const be_backend *b) { return workers_threads(((const cpu_be *)(const void *)b)->workers); }

size_t cpu_be_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim) {
    /* the by-chunk parts of any smaller call fit: n_tok * chunks < 2 * threads * chunks */
    int th = threads_of(b);
    size_t a = layout_of(n_tok, th, max_pos, n_head, head_dim).total;
    if (n_tok > 2 * th - 1) {
        size_t s = layout_of(2 * th - 1, th, max_pos, n_head, head_dim).total;
        a = s > a ? s : a;
    }
    return a + 64;
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

/* Token t's queries as the T2 keys are read, every kv head: rotated for the rotated key codecs, and
 * their dots with the centre (double sums, rounded once) for the centred ones. */
static void t2_queries(const att_job *J, int t) {
    const be_attn *a = J->a;
    int hd = a->head_dim;
    kvq_head kh;
    for (int h = 0; h < a->n_head; h++) {
        int g = h / (a->n_head / a->n_head_kv);
        const float *qh = a->q + ((size_t)t * a->n_head + h) * hd;
        float *x = J->qx + ((size_t)t * a->n_head + h) * hd;
        t2_head(J->t2_fmt, a->n_head_kv, hd, 0, g, &kh);
        memcpy(x, qh, (size_t)hd * sizeof(float));
        if (kh.rot) kvq_rotate(x, hd);
        if (J->centre) {
            const float *c = J->centre + (size_t)g * hd;
            double sum = 0;
            for (int d = 0; d < hd; d++) sum += (double)qh[d] * c[d];
            J->qc[(size_t)t * a->n_head + h] = (float)sum;
        }
    }
}

/* Position j's record (an exact one, a T2 one, or NULL where it is not read) and its bytes */
static inline const uint8_t *record_of(const att_job *J, const void *const *kr, const uint8_t *const *tr, int j,
                                       size_t *bytes) {
    *bytes = J->rec_bytes[kr[j] == NULL];
    return kr[j] ? (const uint8_t *)kr[j] : tr[j];
}

/* Reads the chunk's records whole, in position order, before the kernels run. The kernels read a
 * head's few lines of each record and then the next head's, a pattern the hardware prefetchers do
 * not follow: alone they wait on memory for every record (one thread, 1.5B shapes at depth 8192:
 * 111 ns per position and kv head; with this pass first 79, of which 54 is the kernels' own work
 * on cached rows). Returns 1 when more than an eighth of the records do not follow the one before
 * in memory. */
static int touch_chunk(const att_job *J, const void *const *kr, const uint8_t *const *tr, int len) {
    unsigned sink = 0;
    int jumps = 0;
    const uint8_t *next = NULL;
    for (int j = 0; j < len; j++) {
        size_t bytes;
        const uint8_t *p = record_of(J, kr, tr, j, &bytes);
        if (!p) continue;
        for (size_t b = 0; b < bytes; b += 64) sink += *(const volatile uint8_t *)(p + b);
        sink += *(const volatile uint8_t *)(p + bytes - 1);
        jumps += p != next;
        next = p + bytes;
    }
    __asm__ volatile("" : : "r"(sink));
    return jumps > len / 8; /* records spread out, not one stream */
}

/* One line into L2. An asm statement: gcc deletes a loop of __builtin_prefetch (or _mm_prefetch)
 * once it is inlined here, as a loop without effects. */
static inline void prefetch_l2(const uint8_t *p) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 0, 2);
#endif
}

/* Asks for the next chunk's records (at most ATT_CHUNK of them) into L2 while this chunk computes,
 * when this chunk's records were spread out (touch_chunk): the thread that takes a token's chunk
 * usually takes its next one too (workers hand out runs of items; by token, all of them). Records in
 * address order stream without it; records spread over pools (the hierarchy's T0 and T1 slots, in
 * the order re-tiering freed them) do not. */
static void prefetch_chunk(const att_job *J, const void *const *kr, const uint8_t *const *tr, int len) {
    if (len > ATT_CHUNK) len = ATT_CHUNK;
    for (int j = 0; j < len; j++) {
        size_t bytes;
        const uint8_t *p = record_of(J, kr, tr, j, &bytes);
        if (!p) continue;
        for (size_t b = 0; b < bytes; b += 64) prefetch_l2(p + b);
    }
}

/* Chunk c of token t, every kv head: the scores of its positions, their unnormalised softmax per
 * query head (max and sum to the part's slot), the weighted V sum into the slot. The chunk's records
 * are read for the first kv head and are in cache for the others. */
static void chunk_part(const att_job *J, int t, int c, size_t slot) {
    const be_attn *a = J->a;
    int hd = a->head_dim, n_kv = a->n_head_kv, group = a->n_head / n_kv, n = a->n_pos[t];
    int c0 = c * ATT_CHUNK, len = n - c0 < ATT_CHUNK ? n - c0 : ATT_CHUNK;
    float *pm = J->pm + slot * a->n_head, *pl = J->pl + slot * a->n_head, *po = J->po + slot * a->n_head * hd;
    if (len <= 0) { /* beyond this token's positions: an empty part */
        for (int h = 0; h < a->n_head; h++) pm[h] = -INFINITY, pl[h] = 0.0f;
        return;
    }
    const void *const *kr = J->rows[t] + c0, *const *vr = J->rows[t] + J->max_pos + c0;
    const uint8_t *const *tr = (const uint8_t *const *)(J->rows[t] + 2 * (size_t)J->max_pos + c0);
    int t2 = J->has_t2[t];
    if (touch_chunk(J, kr, tr, len) && c + 1 < n_chunks_of(n))
        prefetch_chunk(J, kr + ATT_CHUNK, tr + ATT_CHUNK, n - c0 - ATT_CHUNK);
    for (int g = 0; g < n_kv; g++) {
        const uint8_t *keep = a->keep && a->keep[t] ? a->keep[t] + (size_t)g * a->keep_stride + c0 : NULL;
        size_t h0 = (size_t)g * group, off = (size_t)g * hd;
        const float *q = a->q + ((size_t)t * a->n_head + h0) * hd;
        float *att = J->att + ((size_t)t * a->n_head + h0) * J->att_stride + c0;
        if (J->f16)
            J->f32->attn_scores_f16(q, group, hd, (const uint16_t *const *)kr, off, keep, len, a->scale, att, J->att_stride);
        else
            J->f32->attn_scores(q, group, hd, (const float *const *)kr, off, keep, len, a->scale, att, J->att_stride);
        kvq_head kh, vh;
        if (t2) { /* the T2 positions' scores over the exact kernel's -inf */
            const float *qx = J->qx + ((size_t)t * a->n_head + h0) * hd, *qc = J->centre ? J->qc + (size_t)t * a->n_head + h0 : NULL;
            t2_head(J->t2_fmt, n_kv, hd, 0, g, &kh);
            t2_head(J->t2_fmt, n_kv, hd, 1, g, &vh);
            J->f32->attn_scores_t2(kh.rot ? qx : q, group, hd, tr, &kh, qc, keep, len, a->scale, att, J->att_stride);
        }
        for (int hh = 0; hh < group; hh++)
            J->f32->softmax_part(att + (size_t)hh * J->att_stride, len, &pm[h0 + hh], &pl[h0 + hh]);
        float *o = po + h0 * hd;
        if (t2)
            J->f32->attn_wsum_t2(att, J->att_stride, group, hd, vr, J->f16, off, tr, &vh, len, o);
        else if (J->f16)
            J->f32->attn_wsum_f16(att, J->att_stride, group, hd, (const uint16_t *const *)vr, off, len, o);
        else
            J->f32->attn_wsum(att, J->att_stride, group, hd, (const float *const *)vr, off, len, o);
    }
}

/* Query head h of token t from its chunks' parts (slots slot0 + c), in chunk order: M the largest
 * max, L = sum_c e^(m_c - M) l_c, the output sum_c s_c o_c with s_c = e^(m_c - M) / L (or, for a
 * split part, e^(m_c - M) with M and L written out), and, where the policy reads them, the chunk's
 * weights scaled by s_c. */
static void merge_head(const att_job *J, int t, int h, size_t slot0) {
    const be_attn *a = J->a;
    int hd = a->head_dim, nch = n_chunks_of(a->n_pos[t]);
    size_t nh = (size_t)a->n_head, i = (size_t)t * nh + h;
    float *out = (a->part ? a->part->o : a->o) + i * hd, *w = J->att + i * J->att_stride;
    float M = -INFINITY;
    for (int c = 0; c < nch; c++)
        if (J->pm[(slot0 + c) * nh + h] > M) M = J->pm[(slot0 + c) * nh + h];
    double L = 0;
    if (M != -INFINITY)
        for (int c = 0; c < nch; c++) {
            float l = J->pl[(slot0 + c) * nh + h];
            if (l > 0) L += (double)expf(J->pm[(slot0 + c) * nh + h] - M) * l;
        }
    if (a->part) a->part->m[i] = M, a->part->l[i] = (float)L;
    memset(out, 0, (size_t)hd * sizeof(float));
    if (!(L > 0)) return; /* every position masked: the weights are all 0 already */
    for (int c = 0; c < nch; c++) {
        float l = J->pl[(slot0 + c) * nh + h];
        if (!(l > 0)) continue;
        float e = expf(J->pm[(slot0 + c) * nh + h] - M), s = a->part ? e : (float)(e / L);
        const float *oc = J->po + ((slot0 + c) * nh + h) * hd;
        for (int d = 0; d < hd; d++) out[d] += s * oc[d];
        if (a->mass_mode != BE_MASS_NONE && s != 1.0f) {
            int c0 = c * ATT_CHUNK, len = a->n_pos[t] - c0 < ATT_CHUNK ? a->n_pos[t] - c0 : ATT_CHUNK;
            J->f32->scale_f32(w + c0, s, len);
        }
    }
}

/* By token: item t, its chunks in order into this thread's slots, then its merge. */
static void token_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    att_job *J = ctx;
    for (int64_t t = i0; t < i1; t++) {
        size_t slot0 = (size_t)tid * J->n_chunks;
        if (J->has_t2[t]) t2_queries(J, (int)t);
        for (int c = 0; c < n_chunks_of(J->a->n_pos[t]); c++) chunk_part(J, (int)t, c, slot0 + c);
        for (int h = 0; h < J->a->n_head; h++) merge_head(J, (int)t, h, slot0);
    }
}

/* By chunk: item t * n_chunks + c. */
static void chunk_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    att_job *J = ctx;
    for (int64_t item = i0; item < i1; item++) {
        int t = (int)(item / J->n_chunks), c = (int)(item % J->n_chunks);
        if (c < n_chunks_of(J->a->n_pos[t])) chunk_part(J, t, c, (size_t)item);
    }
}

/* The merge after chunk_task: item t * n_head + h. */
static void merge_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    att_job *J = ctx;
    for (int64_t item = i0; item < i1; item++) {
        int t = (int)(item / J->a->n_head), h = (int)(item % J->a->n_head);
        merge_head(J, t, h, (size_t)t * J->n_chunks);
    }
}

void cpu_be_attention(be_backend *b, const be_attn *a, void *scratch) {
    cpu_be *c = (cpu_be *)(void *)b;
    int max_pos = 0, threads = threads_of(b);
    for (int t = 0; t < a->n_tok; t++)
        if (a->n_pos[t] > max_pos) max_pos = a->n_pos[t];
    be_kv_fmt fmt = a->pools->pool[BE_T0].fmt, t2_fmt = a->pools->pool[BE_T2].fmt;
    TKV_ASSERT(fmt == BE_KV_F16 || fmt == BE_KV_F32);
    size_t kbytes = (size_t)a->n_head_kv * a->head_dim * (fmt == BE_KV_F16 ? 2 : 4);
    att_layout L = layout_of(a->n_tok, threads, max_pos, a->n_head, a->head_dim);
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
                 (float *)(void *)(sp + L.qc), t2_fmt, NULL, max_pos, fmt == BE_KV_F16,
                 {a->pools->pool[BE_T0].record_bytes, a->pools->pool[BE_T2].record_bytes}, n_chunks_of(max_pos),
                 (float *)(void *)(sp + L.pm), (float *)(void *)(sp + L.pl), (float *)(void *)(sp + L.po)};
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
    if (by_chunk(a->n_tok, threads)) {
        for (int t = 0; t < a->n_tok; t++)
            if (has_t2[t]) t2_queries(&J, t);
        workers_for(c->workers, (int64_t)a->n_tok * J.n_chunks, chunk_task, &J);
        workers_for(c->workers, (int64_t)a->n_tok * a->n_head, merge_task, &J);
    } else {
        workers_for(c->workers, a->n_tok, token_task, &J);
    }
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

typedef struct {
    float *o;
    const be_attn_part *parts;
    int n_parts, n_head, head_dim, mass_heads, mass_stride;
    const int *n_pos;
} merge_job;

/* Items t * n_head + h: each writes its own output row and rescales its own weight rows. */
static void merge_parts_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const merge_job *J = ctx;
    const be_attn_part *parts = J->parts;
    int hd = J->head_dim;
    for (int64_t i = i0; i < i1; i++) {
        int t = (int)(i / J->n_head), h = (int)(i % J->n_head);
        float M = -INFINITY;
        for (int k = 0; k < J->n_parts; k++)
            if (parts[k].m[i] > M) M = parts[k].m[i];
        float *out = J->o + (size_t)i * hd;
        memset(out, 0, (size_t)hd * sizeof(float));
        if (M == -INFINITY) continue; /* every position of every part was masked */
        double L = 0;
        for (int k = 0; k < J->n_parts; k++)
            if (parts[k].l[i] > 0) L += exp((double)parts[k].m[i] - M) * parts[k].l[i];
        for (int k = 0; k < J->n_parts; k++) {
            if (!(parts[k].l[i] > 0)) continue;
            float w = (float)(exp((double)parts[k].m[i] - M) / L);
            const float *ok = parts[k].o + (size_t)i * hd;
            for (int d = 0; d < hd; d++) out[d] += w * ok[d];
            if (parts[k].mass && h < J->mass_heads) {
                float *mr = parts[k].mass + ((size_t)t * J->mass_heads + h) * J->mass_stride;
                for (int j = 0; j < J->n_pos[t]; j++) mr[j] *= w;
            }
        }
    }
}

/* Over the backend's threads by (token, head): a decoding token's heads' weight rows (up to its
 * whole context, per part) are rescaled at once instead of one after another. */
void cpu_be_attention_merge(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                            int head_dim, int mass_heads, int mass_stride, const int *n_pos) {
    merge_job J = {o, parts, n_parts, n_head, head_dim, mass_heads, mass_stride, n_pos};
    workers_for(((cpu_be *)(void *)b)->workers, (int64_t)n_tok * n_head, merge_parts_task, &J);
}
