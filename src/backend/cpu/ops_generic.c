/* ops_generic.c — the plain C reference for every CPU op (FORMATS.md 2.3–2.5, 2.7).
 * Owns: exact dequantisation of each weight type, llama.cpp's x86 activation quantizers (Q8_0,
 * Q8_1, Q8_K) and f16/bf16 activation rounding, and each (weight, activation) dot product.
 * Invariants: integer partial sums are exact (int32 is ample for every block); per-block float
 * terms are accumulated in f32 in block order, f16/bf16/f32 element products in double. The SIMD
 * variants are tested against this file and differ only in float summation order.
 * Not here: anything ISA-specific, dispatch (cpu_detect.c), threading (matmul.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/ops_impl.h"
#include "base/half.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* formulas are evaluated as written: no fused multiply-add */
#endif

#define F16(p) tkv_f16_to_f32(tkv_rd16(p))

/* ---- activation conversion ---- */

void cpu_gen_quant_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void cpu_gen_quant_f16(const float *x, void *y, int64_t n) {
    uint16_t *o = y;
    for (int64_t i = 0; i < n; i++) o[i] = tkv_f32_to_f16(x[i]);
}

void cpu_gen_quant_bf16(const float *x, void *y, int64_t n) {
    uint16_t *o = y;
    for (int64_t i = 0; i < n; i++) o[i] = tkv_f32_to_bf16(x[i]);
}

/* x86 build of llama.cpp: id = 127/amax (not 1/d), ties to even. Returns the sum of q. */
static int quant_block_q8(const float *x, int8_t *q, float *d_out) {
    float amax = 0.0f;
    for (int j = 0; j < CPU_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < CPU_QK; j++) {
        q[j] = (int8_t)cpu_round_even(x[j] * id);
        sum += q[j];
    }
    *d_out = d;
    return sum;
}

void cpu_gen_quant_q8_0(const float *x, void *y, int64_t n) {
    cpu_block_q8_0 *b = y;
    for (int64_t i = 0; i < n / CPU_QK; i++) {
        float d;
        quant_block_q8(x + i * CPU_QK, b[i].qs, &d);
        b[i].d = tkv_f32_to_f16(d);
    }
}

void cpu_gen_quant_q8_1(const float *x, void *y, int64_t n) {
    cpu_block_q8_1 *b = y;
    for (int64_t i = 0; i < n / CPU_QK; i++) {
        float d;
        int sum = quant_block_q8(x + i * CPU_QK, b[i].qs, &d);
        b[i].d = tkv_f32_to_f16(d);
        b[i].s = tkv_f32_to_f16(d * (float)sum);
    }
}

/* Signed max (first on ties), iscale = -127/max, q = min(127, rne(iscale*x)), d = 1/iscale. */
void cpu_gen_quant_q8_K(const float *x, void *y, int64_t n) {
    cpu_block_q8_K *b = y;
    for (int64_t i = 0; i < n / CPU_QKK; i++, x += CPU_QKK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < CPU_QKK; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < CPU_QKK; j++) {
            int v = cpu_round_even(iscale * x[j]);
            b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b[i].qs[16 * k + j];
            b[i].bsums[k] = (int16_t)s;
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- dequantisation (bit-exact: one f32 expression per element, as FORMATS.md writes it) ---- */

void cpu_gen_dequant_f32(const void *w, float *y, int64_t n) { memcpy(y, w, (size_t)n * sizeof(float)); }

void cpu_gen_dequant_f16(const void *w, float *y, int64_t n) {
    const uint8_t *p = w;
    for (int64_t i = 0; i < n; i++) y[i] = F16(p + 2 * i);
}

void cpu_gen_dequant_bf16(const void *w, float *y, int64_t n) {
    const uint8_t *p = w;
    for (int64_t i = 0; i < n; i++) y[i] = tkv_bf16_to_f32(tkv_rd16(p + 2 * i));
}

/* 5th bits of Q5_0/Q5_1 element j of a 32-block, from the little-endian u32 qh. */
#define QH_BIT(qh, j) ((int)(((qh) >> (j)) & 1) << 4)

void cpu_gen_dequant_q4_0(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q4_0, y += CPU_QK) {
        float d = F16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((qs[j] & 0x0F) - 8);
            y[j + 16] = d * (float)((qs[j] >> 4) - 8);
        }
    }
}

void cpu_gen_dequant_q4_1(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q4_1, y += CPU_QK) {
        float d = F16(b), m = F16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(qs[j] & 0x0F) + m;
            y[j + 16] = d * (float)(qs[j] >> 4) + m;
        }
    }
}

void cpu_gen_dequant_q5_0(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q5_0, y += CPU_QK) {
        float d = F16(b);
        uint32_t qh = tkv_rd32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(((qs[j] & 0x0F) | QH_BIT(qh, j)) - 16);
            y[j + 16] = d * (float)(((qs[j] >> 4) | QH_BIT(qh, j + 16)) - 16);
        }
    }
}

void cpu_gen_dequant_q5_1(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q5_1, y += CPU_QK) {
        float d = F16(b), m = F16(b + 2);
        uint32_t qh = tkv_rd32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((qs[j] & 0x0F) | QH_BIT(qh, j)) + m;
            y[j + 16] = d * (float)((qs[j] >> 4) | QH_BIT(qh, j + 16)) + m;
        }
    }
}

void cpu_gen_dequant_q8_0(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q8_0, y += CPU_QK) {
        float d = F16(b);
        for (int j = 0; j < CPU_QK; j++) y[j] = d * (float)(int8_t)b[2 + j];
    }
}

/* Q4_K and Q5_K share everything but the 5th bit (qh == NULL for Q4_K). */
static void dequant_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y) {
    float d = F16(b), dmin = F16(b + 2);
    for (int c = 0; c < 4; c++) {
        for (int h = 0; h < 2; h++) {
            uint8_t sc, m;
            cpu_k4_scale_min(b + 4, 2 * c + h, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = h ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0F;
                if (qh) q |= ((qh[l] >> (2 * c + h)) & 1) << 4;
                y[64 * c + 32 * h + l] = d1 * (float)q - m1;
            }
        }
    }
}

void cpu_gen_dequant_q4_K(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q4_K, y += CPU_QKK) dequant_k45(b, NULL, b + 16, y);
}

void cpu_gen_dequant_q5_K(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q5_K, y += CPU_QKK) dequant_k45(b, b + 16, b + 48, y);
}

void cpu_gen_dequant_q6_K(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q6_K, y += CPU_QKK) {
        float d = F16(b + 208);
        for (int e = 0; e < CPU_QKK; e++) y[e] = (d * (float)(int8_t)b[192 + e / 16]) * (float)(cpu_q6k_q(b, e) - 32);
    }
}

/* ---- dot products ---- */

void cpu_gen_dot_f32(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

/* f16/bf16 products are exact in f32 (11x11 and 8x8 significand bits). */
void cpu_gen_dot_f16(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(F16(x + 2 * i) * F16(y + 2 * i));
    *s = (float)sum;
}

void cpu_gen_dot_bf16(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(tkv_bf16_to_f32(tkv_rd16(x + 2 * i)) * tkv_bf16_to_f32(tkv_rd16(y + 2 * i)));
    *s = (float)sum;
}

void cpu_gen_dot_q4_0(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q4_0) {
        const uint8_t *qs = b + 2;
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ((qs[j] & 0x0F) - 8) * y[i].qs[j] + ((qs[j] >> 4) - 8) * y[i].qs[j + 16];
        sum += (F16(b) * tkv_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

void cpu_gen_dot_q4_1(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q4_1) {
        const uint8_t *qs = b + 4;
        int isum = 0;
        for (int j = 0; j < 16; j++) isum += (qs[j] & 0x0F) * y[i].qs[j] + (qs[j] >> 4) * y[i].qs[j + 16];
        sum += (F16(b) * tkv_f16_to_f32(y[i].d)) * (float)isum + F16(b + 2) * tkv_f16_to_f32(y[i].s);
    }
    *s = sum;
}

void cpu_gen_dot_q5_0(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q5_0) {
        uint32_t qh = tkv_rd32(b + 2);
        const uint8_t *qs = b + 6;
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += (((qs[j] & 0x0F) | QH_BIT(qh, j)) - 16) * y[i].qs[j] +
                    (((qs[j] >> 4) | QH_BIT(qh, j + 16)) - 16) * y[i].qs[j + 16];
        sum += (F16(b) * tkv_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

void cpu_gen_dot_q5_1(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_1 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q5_1) {
        uint32_t qh = tkv_rd32(b + 4);
        const uint8_t *qs = b + 8;
        int isum = 0;
        for (int j = 0; j < 16; j++)
            isum += ((qs[j] & 0x0F) | QH_BIT(qh, j)) * y[i].qs[j] + ((qs[j] >> 4) | QH_BIT(qh, j + 16)) * y[i].qs[j + 16];
        sum += (F16(b) * tkv_f16_to_f32(y[i].d)) * (float)isum + F16(b + 2) * tkv_f16_to_f32(y[i].s);
    }
    *s = sum;
}

void cpu_gen_dot_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_0 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QK; i++, b += CPU_BS_Q8_0) {
        int isum = 0;
        for (int j = 0; j < CPU_QK; j++) isum += (int8_t)b[2 + j] * y[i].qs[j];
        sum += (F16(b) * tkv_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

/* Q4_K/Q5_K: d*d_a*Σ_s sc_s Σ q_w q_a  -  dmin*d_a*Σ_s m_s (bsums[2s] + bsums[2s+1]). */
static void dot_k45(int64_t n, float *s, const uint8_t *b, const cpu_block_q8_K *y, int has_qh) {
    size_t bs = has_qh ? CPU_BS_Q5_K : CPU_BS_Q4_K;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += bs) {
        const uint8_t *qh = has_qh ? b + 16 : NULL, *qs = b + (has_qh ? 48 : 16);
        int isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            for (int h = 0; h < 2; h++) {
                uint8_t sc, m;
                int sub = 2 * c + h, ss = 0;
                cpu_k4_scale_min(b + 4, sub, &sc, &m);
                for (int l = 0; l < 32; l++) {
                    int q = h ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0F;
                    if (qh) q |= ((qh[l] >> sub) & 1) << 4;
                    ss += q * y[i].qs[32 * sub + l];
                }
                isum += sc * ss;
                msum += m * (y[i].bsums[2 * sub] + y[i].bsums[2 * sub + 1]);
            }
        }
        sum += (F16(b) * y[i].d) * (float)isum - (F16(b + 2) * y[i].d) * (float)msum;
    }
    *s = sum;
}

void cpu_gen_dot_q4_K(int64_t n, float *s, const void *w, const void *a) { dot_k45(n, s, w, a, 0); }
void cpu_gen_dot_q5_K(int64_t n, float *s, const void *w, const void *a) { dot_k45(n, s, w, a, 1); }

void cpu_gen_dot_q6_K(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_K *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q6_K) {
        int isum = 0;
        for (int sub = 0; sub < 16; sub++) {
            int ss = 0;
            for (int e = 16 * sub; e < 16 * sub + 16; e++) ss += (cpu_q6k_q(b, e) - 32) * y[i].qs[e];
            isum += (int8_t)b[192 + sub] * ss;
        }
        sum += (F16(b + 208) * y[i].d) * (float)isum;
    }
    *s = sum;
}

CPU_GEN_NX(f32) CPU_GEN_NX(f16) CPU_GEN_NX(bf16) CPU_GEN_NX(q4_0) CPU_GEN_NX(q4_1) CPU_GEN_NX(q5_0) CPU_GEN_NX(q5_1) CPU_GEN_NX(q8_0)
CPU_GEN_NX(q4_K) CPU_GEN_NX(q5_K) CPU_GEN_NX(q6_K)

/* ---- f32 helpers ---- */

float cpu_gen_dot_f32v(const float *a, const float *b, int64_t n) {
    float sum = 0;
    for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

void cpu_gen_axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void cpu_gen_scale_f32(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

void cpu_gen_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void cpu_gen_attn_scores(const float *q, int group, int hd, const float *const *rows, size_t off,
                         const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    for (int j = 0; j < n; j++) {
        const float *k = rows[j];
        for (int h = 0; h < group; h++)
            att[(size_t)h * stride + j] = !k || (keep && !keep[j]) ? -INFINITY : cpu_gen_dot_f32v(q + (size_t)h * hd, k + off, hd) * scale;
    }
}

void cpu_gen_attn_wsum(const float *att, size_t stride, int group, int hd, const float *const *rows, size_t off,
                       int n, float *out) {
    memset(out, 0, (size_t)group * hd * sizeof(float));
    for (int h = 0; h < group; h++)
        for (int j = 0; j < n; j++) {
            float w = att[(size_t)h * stride + j];
            if (w != 0.0f) cpu_gen_axpy_f32(out + (size_t)h * hd, w, rows[j] + off, hd);
        }
}

/* fp16 rows: the same operations on the widened values (dot_f32v's and axpy_f32's loops) */
void cpu_gen_attn_scores_f16(const float *q, int group, int hd, const uint16_t *const *rows, size_t off,
                             const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    for (int j = 0; j < n; j++) {
        const uint16_t *k = rows[j];
        for (int h = 0; h < group; h++) {
            if (!k || (keep && !keep[j])) {
                att[(size_t)h * stride + j] = -INFINITY;
                continue;
            }
            const float *qh = q + (size_t)h * hd;
            float sum = 0;
            for (int d = 0; d < hd; d++) sum += qh[d] * tkv_f16_to_f32(k[off + d]);
            att[(size_t)h * stride + j] = sum * scale;
        }
    }
}

void cpu_gen_attn_wsum_f16(const float *att, size_t stride, int group, int hd, const uint16_t *const *rows, size_t off,
                           int n, float *out) {
    memset(out, 0, (size_t)group * hd * sizeof(float));
    for (int h = 0; h < group; h++)
        for (int j = 0; j < n; j++) {
            float w = att[(size_t)h * stride + j];
            if (w == 0.0f) continue;
            float *o = out + (size_t)h * hd;
            for (int d = 0; d < hd; d++) o[d] += w * tkv_f16_to_f32(rows[j][off + d]);
        }
}

/* T2 rows in place: element i of head kh in record rec, level times scale (kvq.h's kvq_head) */
static float t2_elem(const uint8_t *rec, const kvq_head *kh, int i) {
    int lv;
    if (kh->bits == 8) lv = ((const int8_t *)(rec + kh->q_off))[i];
    else {
        uint8_t b = rec[kh->q_off + (size_t)(i / 32) * 16 + (size_t)(i % 16)];
        lv = (i % 32 < 16 ? b & 15 : b >> 4) - 8;
    }
    float d;
    if (kh->per_head) memcpy(&d, rec + kh->s_off, 4);
    else d = tkv_bf16_to_f32(tkv_rd16(rec + kh->s_off + 2 * (size_t)(i / 32)));
    return (float)lv * d;
}

void cpu_gen_attn_scores_t2(const float *q, int group, int hd, const uint8_t *const *recs, const kvq_head *kh,
                            const float *qc, const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    for (int j = 0; j < n; j++) {
        if (!recs[j]) continue;
        for (int h = 0; h < group; h++) {
            if (keep && !keep[j]) {
                att[(size_t)h * stride + j] = -INFINITY;
                continue;
            }
            const float *qh = q + (size_t)h * hd;
            float sum = 0;
            for (int d = 0; d < hd; d++) sum += qh[d] * t2_elem(recs[j], kh, d);
            att[(size_t)h * stride + j] = (sum + (qc ? qc[h] : 0.0f)) * scale;
        }
    }
}

void cpu_gen_attn_wsum_t2(const float *att, size_t stride, int group, int hd, const void *const *rows, int f16,
                          size_t off, const uint8_t *const *recs, const kvq_head *vh, int n, float *out) {
    memset(out, 0, (size_t)group * hd * sizeof(float));
    for (int h = 0; h < group; h++)
        for (int j = 0; j < n; j++) {
            float w = att[(size_t)h * stride + j];
            if (w == 0.0f) continue;
            float *o = out + (size_t)h * hd;
            if (rows[j] && f16)
                for (int d = 0; d < hd; d++) o[d] += w * tkv_f16_to_f32(((const uint16_t *)rows[j])[off + d]);
            else if (rows[j])
                cpu_gen_axpy_f32(o, w, (const float *)rows[j] + off, hd);
            else if (recs[j])
                for (int d = 0; d < hd; d++) o[d] += w * t2_elem(recs[j], vh, d);
        }
}

void cpu_gen_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tkv_f32_to_f16(x[i]);
}

void cpu_gen_softmax_part(float *a, int n, float *m, float *l) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        if (a[j] > mx) mx = a[j];
    double sum = 0;
    for (int j = 0; j < n; j++) {
        float e = a[j] == -INFINITY ? 0.0f : expf(a[j] - mx);
        a[j] = e;
        sum += e;
    }
    *m = mx;
    *l = (float)sum;
}

