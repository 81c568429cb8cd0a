/* repack32.c — Q5_0X and Q8_0X: Q5_0 and Q8_0 rows reordered in groups of four 32-blocks for
 * batched matmul, Q8_0XA, the activation group that goes with both, and their generic (reference)
 * kernels.
 *
 * Why: on AVX2 without VNNI every 32 products of a Q5_0 or Q8_0 dot take a maddubs and a madd,
 * integer multiplies that cores of this class issue on one port, and each block's sum then needs
 * its own convert and fmadd. If the lanes of a vector always hold the same block, the integer sums
 * of four blocks come out of one madd already in their own i32 lanes, and one convert and one
 * fmadd with a vector of four block scales finish all four. For Q5_0 the quants are kept unsigned
 * (u = w + 16, 0..31), so four maddubs add as i16 before the madd (8 products of at most 31*127
 * per lane: 31496 < 32767): 5 multiplies per 128 products instead of 8. The offset's 16 * Σa is
 * precomputed per lane with the activations. Q8_0 values need the full i16 range for one maddubs,
 * so its gain is the shared convert and fmadd, not fewer multiplies.
 *
 * Vector m (m < 4, 32 bytes) of a group holds elements 8m..8m+7 of each block j < 4 in bytes
 * 8j..8j+7, so i32 lane l (bytes 4l..4l+3) always belongs to block l/2.
 * Q8_0X group (136 bytes, the 4 Q8_0 blocks' size): the 4 f16 scales, then vectors 0..3 (signed).
 * Q5_0X group (88 bytes, the 4 Q5_0 blocks' size): the 4 f16 scales; 16 bytes of fifth bits, byte
 * p bit m = vector m byte p, bit 4 + m = vector m byte 16 + p; 64 bytes of nibbles, byte 32h + p
 * low = vector 2h byte p, high = vector 2h + 1 byte p.
 * Q8_0XA group (192 bytes): Q8_0's quants in the same vector order, the f32 value of each block's
 * f16 scale in lanes 2j and 2j + 1, and per i32 lane 16 * the sum of the quants it covers.
 * Rows must hold whole groups (n a multiple of 128); cpu_repack_type says so.
 * The integers of every block are those of Q5_0 / Q8_0, and the generic dots do the f32 steps of
 * ops_generic.c's, so generic Q5_0X and Q5_0 (Q8_0X and Q8_0) give the same bits (tested). */
#include <string.h>

#include "backend/cpu/ops_impl.h"
#include "base/half.h"

/* byte of the group's 128-byte vector area holding element e (0..127) */
static int x4_pos(int e) {
    int j = e / 32, k = e % 32;
    return 32 * (k / 8) + 8 * j + k % 8;
}

/* 5-bit quant (0..31) at vector byte q (0..127) of a Q5_0X group */
static int q5x_u(const uint8_t *g, int q) {
    int m = q / 32, p = q % 32;
    uint8_t nb = g[24 + 32 * (m / 2) + p];
    int lo = m & 1 ? nb >> 4 : nb & 0x0F;
    int hi = (g[8 + p % 16] >> (p < 16 ? m : 4 + m)) & 1;
    return lo | hi << 4;
}

void cpu_repack_q5_0_group(uint8_t *g) {
    uint8_t u[CPU_QKX], out[CPU_BS_Q5_0X]; /* u: the 5-bit quants in vector order */
    for (int j = 0; j < 4; j++) {
        const uint8_t *b = g + j * CPU_BS_Q5_0;
        memcpy(out + 2 * j, b, 2);
        uint32_t qh = tkv_rd32(b + 2);
        for (int e = 0; e < 32; e++) /* element e = 8m + i sits at vector m, byte 8j + i */
            u[32 * (e / 8) + 8 * j + e % 8] = (uint8_t)((e < 16 ? b[6 + e] & 0x0F : b[6 + e - 16] >> 4) | ((qh >> e) & 1) << 4);
    }
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 32; p++) out[24 + 32 * h + p] = (uint8_t)((u[64 * h + p] & 0x0F) | (u[64 * h + 32 + p] & 0x0F) << 4);
    for (int p = 0; p < 16; p++) {
        unsigned v = 0;
        for (int m = 0; m < 4; m++) v |= (unsigned)(u[32 * m + p] >> 4) << m | (unsigned)(u[32 * m + 16 + p] >> 4) << (4 + m);
        out[8 + p] = (uint8_t)v;
    }
    memcpy(g, out, sizeof out);
}

/* vector m of a group is qword m of each block's 32 quants */
void cpu_repack_q8_0_group(uint8_t *g) {
    uint8_t out[CPU_BS_Q8_0X];
    for (int j = 0; j < 4; j++) {
        memcpy(out + 2 * j, g + j * CPU_BS_Q8_0, 2);
        for (int m = 0; m < 4; m++) memcpy(out + 8 + 32 * m + 8 * j, g + j * CPU_BS_Q8_0 + 2 + 8 * m, 8);
    }
    memcpy(g, out, sizeof out);
}

/* 4 Q8_0 blocks -> one Q8_0XA group */
static void q8_0XA_from_q8_0(const cpu_block_q8_0 *b, cpu_block_q8_0XA *y) {
    memset(y->c, 0, sizeof y->c);
    for (int j = 0; j < 4; j++) {
        y->d[2 * j] = y->d[2 * j + 1] = tkv_f16_to_f32(b[j].d);
        for (int k = 0; k < 32; k++) {
            int q = x4_pos(32 * j + k);
            y->qs[q] = b[j].qs[k];
            y->c[(q % 32) / 4] += 16 * b[j].qs[k];
        }
    }
}

void cpu_gen_quant_q8_0XA(const float *x, void *y, int64_t n) {
    cpu_block_q8_0 b[4];
    for (int64_t i = 0; i < n / CPU_QKX; i++) {
        cpu_gen_quant_q8_0(x + i * CPU_QKX, b, CPU_QKX);
        q8_0XA_from_q8_0(b, (cpu_block_q8_0XA *)y + i);
    }
}

/* signed quant at vector byte q of a group: Q5_0X (u - 16) or Q8_0X */
static int x4_w(const uint8_t *g, int q, int q5) { return q5 ? q5x_u(g, q) - 16 : (int8_t)g[8 + q]; }

static void dequant_x4(const uint8_t *g, float *y, int64_t n, int q5) {
    for (int64_t i = 0; i < n / CPU_QKX; i++, g += q5 ? CPU_BS_Q5_0X : CPU_BS_Q8_0X, y += CPU_QKX)
        for (int e = 0; e < CPU_QKX; e++) y[e] = tkv_f16_to_f32(tkv_rd16(g + 2 * (e / 32))) * (float)x4_w(g, x4_pos(e), q5);
}

/* the f32 steps of the Q5_0 / Q8_0 references: sum += (d_w * d_a) * isum, block by block */
static void dot_x4(int64_t n, float *s, const uint8_t *g, const cpu_block_q8_0XA *y, int q5) {
    float sum = 0;
    for (int64_t i = 0; i < n / CPU_QKX; i++, g += q5 ? CPU_BS_Q5_0X : CPU_BS_Q8_0X)
        for (int j = 0; j < 4; j++) {
            int isum = 0;
            for (int k = 0; k < 32; k++) {
                int q = x4_pos(32 * j + k);
                isum += x4_w(g, q, q5) * y[i].qs[q];
            }
            sum += (tkv_f16_to_f32(tkv_rd16(g + 2 * j)) * y[i].d[2 * j]) * (float)isum;
        }
    *s = sum;
}

void cpu_gen_dequant_q5_0X(const void *w, float *y, int64_t n) { dequant_x4(w, y, n, 1); }
void cpu_gen_dequant_q8_0X(const void *w, float *y, int64_t n) { dequant_x4(w, y, n, 0); }
void cpu_gen_dot_q5_0X(int64_t n, float *s, const void *w, const void *a) { dot_x4(n, s, w, a, 1); }
void cpu_gen_dot_q8_0X(int64_t n, float *s, const void *w, const void *a) { dot_x4(n, s, w, a, 0); }

CPU_GEN_NX(q5_0X)
CPU_GEN_NX(q8_0X)
