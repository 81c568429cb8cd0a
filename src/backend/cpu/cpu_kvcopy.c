/* cpu_kvcopy.c — the KV record ops of the CPU backend: new tokens' rows written into their slots,
 * rows read back as f32, and the move lists of the transfer engine (one layer at a time), converting
 * between record formats: F32/F16 exactly (fp16 rows widen exactly; f32 -> f16 rounds to nearest
 * even, once, as llama.cpp's f16 cache), to and from the T2 formats through f32 with the codecs of
 * codec/kvq.h (Q8_HEAD with kvq_q8h_*, on its split record; the centred ones encode K - centre and
 * add the centre back after decoding: backend.h).
 * A record is K then V (each kv_dim values), and for Q8_HEAD their per-head scales after both.
 * copy_moves may run on the transfer thread: it reads pool chunk arrays that never move. */
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#include "base/half.h"
#include "codec/kvq.h"

#define MAX_DIM 8192 /* kv_dim at most (checked by the KV module's options) */

/* The centre row a K row of layer `layer` is stored against: NULL for V rows, formats that are not
 * centred and caches without a centre. */
static const float *centre_of(const be_kv_pools *p, be_kv_fmt fmt, int which, int layer) {
    if (which || !p->k_center || !be_kv_fmt_centred(fmt)) return NULL;
    return p->k_center + (size_t)layer * (size_t)p->n_head_kv * (size_t)p->head_dim;
}

/* Row `which` (0 K, 1 V) of a record as f32 into buf; the T2 decodes with AVX2 where the backend
 * runs AVX2 or better (the same bits, kvq.h); c: the centre to add back (centre_of). */
static void rec_get(cpu_isa isa, be_kv_fmt fmt, const uint8_t *rec, int which, int n_head_kv, int head_dim,
                    const float *c, float *buf) {
    size_t kd = (size_t)n_head_kv * (size_t)head_dim;
    int kc, vc;
    switch (fmt) {
    case BE_KV_F32: memcpy(buf, rec + (size_t)which * kd * 4, kd * 4); break;
    case BE_KV_F16: tkv_f16_row_to_f32((const uint16_t *)(const void *)(rec + (size_t)which * kd * 2), buf, kd); break;
    case BE_KV_Q8B:
    case BE_KV_Q8BH:
    case BE_KV_Q4BH:
    case BE_KV_Q8BHC:
    case BE_KV_Q4BHC:
        TKV_ASSERT(be_kv_fmt_codecs(fmt, &kc, &vc));
        (isa >= CPU_ISA_AVX2 ? kvq_decode_row_avx2 : kvq_decode_row)(
            (kvq_codec)(which ? vc : kc), rec + (which ? be_kv_k_record_bytes(fmt, n_head_kv, head_dim) : 0), n_head_kv,
            head_dim, buf);
        for (size_t i = 0; c && i < kd; i++) buf[i] += c[i];
        break;
    default: {
        float sc[1024];
        TKV_ASSERT(n_head_kv <= 1024);
        memcpy(sc, rec + 2 * kd + (size_t)which * n_head_kv * 4, (size_t)n_head_kv * 4);
        (isa >= CPU_ISA_AVX2 ? kvq_q8h_decode_avx2 : kvq_q8h_decode)((const int8_t *)(rec + (size_t)which * kd), sc,
                                                                         n_head_kv, head_dim, buf);
    }
    }
}

/* x into row `which` of a record; c: the centre subtracted first (centre_of). */
static void rec_put(const cpu_f32_ops *ops, be_kv_fmt fmt, uint8_t *rec, int which, int n_head_kv, int head_dim,
                    const float *c, const float *x) {
    size_t kd = (size_t)n_head_kv * (size_t)head_dim;
    int kc, vc;
    float r[MAX_DIM];
    switch (fmt) {
    case BE_KV_F32: memcpy(rec + (size_t)which * kd * 4, x, kd * 4); break;
    case BE_KV_F16: ops->f32_to_f16(x, (uint16_t *)(void *)(rec + (size_t)which * kd * 2), (int64_t)kd); break;
    case BE_KV_Q8B:
    case BE_KV_Q8BH:
    case BE_KV_Q4BH:
    case BE_KV_Q8BHC:
    case BE_KV_Q4BHC:
        TKV_ASSERT(be_kv_fmt_codecs(fmt, &kc, &vc) && kd <= MAX_DIM);
        if (c) {
            for (size_t i = 0; i < kd; i++) r[i] = x[i] - c[i];
            x = r;
        }
        kvq_encode_row((kvq_codec)(which ? vc : kc), x, n_head_kv, head_dim,
                       rec + (which ? be_kv_k_record_bytes(fmt, n_head_kv, head_dim) : 0));
        break;
    default: {
        float sc[1024];
        TKV_ASSERT(n_head_kv <= 1024);
        kvq_q8h_encode(x, n_head_kv, head_dim, (int8_t *)(rec + (size_t)which * kd), sc);
        memcpy(rec + 2 * kd + (size_t)which * n_head_kv * 4, sc, (size_t)n_head_kv * 4);
    }
    }
}

static be_kv_fmt fmt_of(const be_kv_pools *p, int32_t ref) { return p->pool[BE_SLOT_TIER(ref)].fmt; }

void cpu_be_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                     const float *v) {
    const cpu_f32_ops *ops = ((cpu_be *)(void *)b)->f32;
    size_t kd = (size_t)p->n_head_kv * (size_t)p->head_dim;
    for (int i = 0; i < n; i++) {
        uint8_t *rec = be_kv_record(p, slots[i], layer);
        be_kv_fmt f = fmt_of(p, slots[i]);
        rec_put(ops, f, rec, 0, p->n_head_kv, p->head_dim, centre_of(p, f, 0, layer), k + (size_t)i * kd);
        rec_put(ops, f, rec, 1, p->n_head_kv, p->head_dim, NULL, v + (size_t)i * kd);
    }
}

void cpu_be_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v) {
    cpu_isa isa = ((cpu_be *)(void *)b)->isa;
    size_t kd = (size_t)p->n_head_kv * (size_t)p->head_dim;
    for (int i = 0; i < n; i++) {
        const uint8_t *rec = be_kv_record(p, slots[i], layer);
        be_kv_fmt f = fmt_of(p, slots[i]);
        rec_get(isa, f, rec, 0, p->n_head_kv, p->head_dim, centre_of(p, f, 0, layer), k + (size_t)i * kd);
        if (v) rec_get(isa, f, rec, 1, p->n_head_kv, p->head_dim, NULL, v + (size_t)i * kd);
    }
}

void cpu_be_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer) {
    const cpu_be *c = (const cpu_be *)(const void *)b;
    float buf[MAX_DIM];
    TKV_ASSERT((size_t)p->n_head_kv * (size_t)p->head_dim <= MAX_DIM);
    for (int i = 0; i < n; i++) {
        const be_move *m = &moves[i];
        be_kv_fmt fs = fmt_of(p, m->src), fd = fmt_of(p, m->dst);
        const uint8_t *src = be_kv_record(p, m->src, layer);
        uint8_t *dst = be_kv_record(p, m->dst, layer);
        if (fs == fd) {
            memcpy(dst, src, p->pool[BE_SLOT_TIER(m->src)].record_bytes);
            continue;
        }
        for (int w = 0; w < 2; w++) {
            rec_get(c->isa, fs, src, w, p->n_head_kv, p->head_dim, centre_of(p, fs, w, layer), buf);
            rec_put(c->f32, fd, dst, w, p->n_head_kv, p->head_dim, centre_of(p, fd, w, layer), buf);
        }
    }
}
