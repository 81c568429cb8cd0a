/* repack.c — Q4_KX: the Q4_K super-block with its 128 nibble bytes reordered for batched matmul,
 * and Q8_KX, the activation block that goes with it; the generic (reference) kernels of both; and
 * cpu_repack_type / cpu_repack_rows for every reordered layout (the 32-block ones, Q5_0X and
 * Q8_0X, are in repack32.c).
 *
 * Why: on AVX2 without VNNI every 32 products of a Q4_K dot take a maddubs (u8*s8 pairs to i16)
 * and a madd (i16 pairs times the sub-block scale to i32), and both are integer multiplies that
 * x86 cores of this class issue on one port. If the i16 lanes of a vector always hold the same
 * sub-block, the maddubs results of a whole super-block can be added as i16 first (16 products of
 * at most 15*127 per lane: 30480 < 32767, no overflow) and scaled by one madd: 9 multiplies per
 * 256 products instead of 16. The file's order puts a sub-block's 32 values in one vector, so the
 * bytes are moved once, at load (cpu_repack_rows), not on every use.
 *
 * Layout (FORMATS.md 2.5 for Q4_K): d, dmin and the 12 scale bytes are unchanged (bytes 0..15).
 * Q4_K nibble byte 16 + 32c + l holds element l of sub-block 2c (low nibble) and 2c+1 (high).
 * Q4_KX nibble byte 16 + 32u + 4s + b holds element 8u + b of sub-block s (low nibble) and element
 * 8u + 4 + b (high), for u < 4, s < 8, b < 4. So the low nibbles of bytes 32u.. and the high ones
 * form vectors v_t (t = 2u, 2u+1) with v_t[4s + b] = element 4t + b of sub-block s: each 4-byte
 * group (two i16 lanes after maddubs) is always sub-block s.
 * Q8_KX is Q8_K with qs in the matching order, qs'[32t + 4s + b] = qs[32s + 4t + b] (a transpose of
 * 8 x 8 four-byte words); d and bsums are Q8_K's (bsums over the original order), and 8 floats
 * more, ms[s] = d * (sum of sub-block s). The generic dot uses the integer bsums, as Q4_K's does;
 * the AVX2 tile takes the mins term as one f32 multiply-add of (dmin * m_s) by ms per block and
 * token, instead of an integer madd, a conversion and a multiply-add (13% faster alone: the three
 * share the ports of the maddubs).
 * The integers every dot computes are those of Q4_K, and the generic dot below does the same f32
 * steps as the Q4_K one, so generic Q4_KX and Q4_K give the same bits (tested).
 *
 * Q6_KX does the same for Q6_K, whose 16 sub-blocks of 16 have one i16 lane each: v_t[2s + b] =
 * element 2t + b of sub-block s (t < 8, s < 16, b < 2). Values reach 63, so on their own only two
 * maddubs results add as i16 (4 products of at most 63*127: 32004) before the madd; with the offset
 * 32 taken off as i16 (Q8_KX6's c, below) four do: 10 multiplies per 256 products instead of 16.
 * Bytes 0..127: low nibbles of chunk u (32 bytes) are v_2u's low 4 bits, high nibbles v_2u+1's;
 * bytes 128..191: bits 2k, 2k+1 of chunk c are v_4c+k's top 2 bits; the 16 scales and d stay at
 * 192..209. Q8_KX6: d and qs'[32t + 2s + b] = qs[16s + 2t + b] (no bsums: the Q6_K dot never uses
 * them), and c[h][s] = 32 * (elements 8h..8h+7 of sub-block s): the AVX2 tile subtracts them as
 * i16 so that four maddubs (of q, 0..63) add before a madd instead of two, with no offset madd.
 * Both activation blocks put their vectors first and take 352 bytes (ops_impl.h), so that no
 * vector a tile loads straddles two cache lines. */
#include <string.h>

#include "backend/cpu/ops_impl.h"
#include "base/err.h"
#include "base/half.h"

/* the 8 x 8 transpose of 4-byte words: word 8s + t <-> word 8t + s (its own inverse) */
static void transpose_words(const int8_t *in, int8_t *out) {
    for (int s = 0; s < 8; s++)
        for (int t = 0; t < 8; t++) memcpy(out + 32 * t + 4 * s, in + 32 * s + 4 * t, 4);
}

/* a row quantized to Q8_K one block at a time by q8_K (the ISA's quantizer), each block then
 * rewritten by conv into an activation block of bs bytes */
typedef void (*q8_K_conv_fn)(const cpu_block_q8_K *in, void *out);
static void quant_via_q8_K(cpu_quant_fn q8_K, q8_K_conv_fn conv, size_t bs, const float *x, void *y, int64_t n) {
    cpu_block_q8_K b;
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
        q8_K(x + i * CPU_QKK, &b, CPU_QKK);
        conv(&b, (uint8_t *)y + (size_t)i * bs);
    }
}

static void q8_KX_from_q8_K(const cpu_block_q8_K *in, void *vout) {
    cpu_block_q8_KX *out = vout;
    out->d = in->d;
    memset(out->pad, 0, sizeof out->pad);
    transpose_words(in->qs, out->qs);
    memcpy(out->bsums, in->bsums, sizeof out->bsums);
    for (int s = 0; s < 8; s++) out->ms[s] = in->d * (float)(in->bsums[2 * s] + in->bsums[2 * s + 1]);
}

void cpu_quant_q8_KX_with(cpu_quant_fn q8_K, const float *x, void *y, int64_t n) {
    quant_via_q8_K(q8_K, q8_KX_from_q8_K, CPU_BS_Q8_KX, x, y, n);
}

void cpu_gen_quant_q8_KX(const float *x, void *y, int64_t n) { cpu_quant_q8_KX_with(cpu_gen_quant_q8_K, x, y, n); }

/* nibble of element e (0..255) of a Q4_KX block's 128 nibble bytes */
static int q4kx_q(const uint8_t *qs, int e) {
    int s = e / 32, j = e % 32, u = j / 8, h = (j / 4) & 1, b = j % 4;
    uint8_t v = qs[32 * u + 4 * s + b];
    return h ? v >> 4 : v & 0x0F;
}

/* one block's nibbles, Q4_K order -> Q4_KX order */
static void repack_q4_K_block(uint8_t *blk) {
    uint8_t *qs = blk + 16, out[128] = {0};
    for (int s = 0; s < 8; s++)
        for (int j = 0; j < 32; j++) {
            int c = s / 2, q = s & 1 ? qs[32 * c + j] >> 4 : qs[32 * c + j] & 0x0F;
            int u = j / 8, h = (j / 4) & 1, b = j % 4;
            out[32 * u + 4 * s + b] |= (uint8_t)(q << (4 * h));
        }
    memcpy(qs, out, sizeof out);
}

/* 6-bit value of element e of a Q6_KX block */
static int q6kx_q(const uint8_t *b, int e) {
    int s = e / 16, j = e % 16, t = j / 2, p = 2 * s + j % 2;
    int lo = (b[32 * (t / 2) + p] >> (4 * (t & 1))) & 0x0F;
    int hi = (b[128 + 32 * (t / 4) + p] >> (2 * (t & 3))) & 3;
    return lo | hi << 4;
}

static void repack_q6_K_block(uint8_t *blk) {
    uint8_t out[192] = {0};
    for (int e = 0; e < CPU_QKK; e++) {
        int q = cpu_q6k_q(blk, e), s = e / 16, j = e % 16, t = j / 2, p = 2 * s + j % 2;
        out[32 * (t / 2) + p] |= (uint8_t)((q & 0x0F) << (4 * (t & 1)));
        out[128 + 32 * (t / 4) + p] |= (uint8_t)((q >> 4) << (2 * (t & 3)));
    }
    memcpy(blk, out, sizeof out);
}

static void q8_KX6_from_q8_K(const cpu_block_q8_K *in, void *vout) {
    cpu_block_q8_KX6 *out = vout;
    out->d = in->d;
    memset(out->pad, 0, sizeof out->pad);
    for (int s = 0; s < 16; s++) {
        for (int t = 0; t < 8; t++) memcpy(out->qs + 32 * t + 2 * s, in->qs + 16 * s + 2 * t, 2);
        for (int h = 0; h < 2; h++) {
            int sum = 0;
            for (int e = 8 * h; e < 8 * h + 8; e++) sum += in->qs[16 * s + e];
            out->c[h][s] = (int16_t)(32 * sum);
        }
    }
}

void cpu_quant_q8_KX6_with(cpu_quant_fn q8_K, const float *x, void *y, int64_t n) {
    quant_via_q8_K(q8_K, q8_KX6_from_q8_K, CPU_BS_Q8_KX6, x, y, n);
}

void cpu_gen_quant_q8_KX6(const float *x, void *y, int64_t n) { cpu_quant_q8_KX6_with(cpu_gen_quant_q8_K, x, y, n); }

void cpu_gen_dequant_q6_KX(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q6_KX, y += CPU_QKK) {
        float d = tkv_f16_to_f32(tkv_rd16(b + 208));
        for (int e = 0; e < CPU_QKK; e++) y[e] = (d * (float)(int8_t)b[192 + e / 16]) * (float)(q6kx_q(b, e) - 32);
    }
}

/* the integers and f32 steps of the Q6_K reference */
void cpu_gen_dot_q6_KX(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_KX6 *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q6_KX) {
        int isum = 0;
        for (int sub = 0; sub < 16; sub++) {
            int ss = 0;
            for (int j = 0; j < 16; j++) ss += (q6kx_q(b, 16 * sub + j) - 32) * y[i].qs[32 * (j / 2) + 2 * sub + j % 2];
            isum += (int8_t)b[192 + sub] * ss;
        }
        sum += (tkv_f16_to_f32(tkv_rd16(b + 208)) * y[i].d) * (float)isum;
    }
    *s = sum;
}

CPU_GEN_NX(q6_KX)

uint32_t cpu_repack_type(uint32_t type, int64_t n) {
    switch (type) {
    case CPU_T_Q4_K: return CPU_T_Q4_KX;
    case CPU_T_Q6_K: return CPU_T_Q6_KX;
    case CPU_T_Q5_0: return n % CPU_QKX == 0 ? CPU_T_Q5_0X : 0; /* repack32.c */
    case CPU_T_Q8_0: return n % CPU_QKX == 0 ? CPU_T_Q8_0X : 0;
    default: return 0;
    }
}

void cpu_repack_rows(uint32_t type, void *w, int64_t n, int64_t n_rows) {
    uint8_t *p = w;
    uint32_t rt = cpu_repack_type(type, n);
    TKV_ASSERT(rt != 0);
    int64_t group = cpu_type_blck(rt); /* elements per reordered block or group */
    size_t gbytes = cpu_weight_row_size(type, group);
    for (int64_t i = 0; i < n_rows * (n / group); i++, p += gbytes) {
        if (type == CPU_T_Q4_K) repack_q4_K_block(p);
        else if (type == CPU_T_Q6_K) repack_q6_K_block(p);
        else if (type == CPU_T_Q5_0) cpu_repack_q5_0_group(p);
        else cpu_repack_q8_0_group(p);
    }
}

void cpu_gen_dequant_q4_KX(const void *w, float *y, int64_t n) {
    const uint8_t *b = w;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q4_KX, y += CPU_QKK) {
        float d = tkv_f16_to_f32(tkv_rd16(b)), dmin = tkv_f16_to_f32(tkv_rd16(b + 2));
        for (int s = 0; s < 8; s++) {
            uint8_t sc, m;
            cpu_k4_scale_min(b + 4, s, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int j = 0; j < 32; j++) y[32 * s + j] = d1 * (float)q4kx_q(b + 16, 32 * s + j) - m1;
        }
    }
}

/* the f32 steps of the Q4_K reference: sum += (d*d_a)*isum - (dmin*d_a)*msum per block */
void cpu_gen_dot_q4_KX(int64_t n, float *s, const void *w, const void *a) {
    const uint8_t *b = w;
    const cpu_block_q8_KX *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QKK; i++, b += CPU_BS_Q4_KX) {
        int isum = 0, msum = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            cpu_k4_scale_min(b + 4, sb, &sc, &m);
            int ss = 0;
            for (int j = 0; j < 32; j++) { /* element 32sb + j sits at qs' word 8*(j/4) + sb */
                int e = 32 * sb + j;
                ss += q4kx_q(b + 16, e) * y[i].qs[32 * (j / 4) + 4 * sb + j % 4];
            }
            isum += sc * ss;
            msum += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        sum += (tkv_f16_to_f32(tkv_rd16(b)) * y[i].d) * (float)isum - (tkv_f16_to_f32(tkv_rd16(b + 2)) * y[i].d) * (float)msum;
    }
    *s = sum;
}

CPU_GEN_NX(q4_KX)
