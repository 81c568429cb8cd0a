/* test_kernels.c — the CPU kernels against hand-computed values and the generic reference.
 * kernels_hand_*: generic quantizers and dequantizers reproduce values worked out by hand
 *   (FORMATS.md 2.4–2.5, 2.7), including ties to even.
 * kernels_dequant / kernels_quantize_act: every ISA this CPU has is bit-exact with generic.
 * kernels_vec_dot: every (type, ISA, row length) agrees with generic within a float-summation
 *   bound, generic agrees with dequant·dequant, and every vec_dot_tile shape (1..5 weight rows x
 *   1..8 activation rows) equals vec_dot bit for bit and writes nothing else.
 * kernels_matmul: 1, 3, 17 tokens on 1 and 2 threads: identical bits across thread counts, each
 *   output equal to that ISA's vec_dot, and close to a naive dequant·f32 product. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_impl.h"
#include "base/err.h"
#include "base/half.h"
#include "t.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rndf(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; } /* [-1, 1) */

static const uint32_t all_types[] = {CPU_T_F32, CPU_T_F16, CPU_T_BF16, CPU_T_Q4_0, CPU_T_Q4_1, CPU_T_Q5_0,
                                     CPU_T_Q5_1, CPU_T_Q8_0, CPU_T_Q4_K, CPU_T_Q5_K, CPU_T_Q6_K, CPU_T_Q4_KX, CPU_T_Q6_KX,
                                     CPU_T_Q5_0X, CPU_T_Q8_0X};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

static int isa_available(cpu_isa isa) { return isa <= cpu_detect_isa(); }

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Random weight row of n elements: random bytes, then finite small f16 scale fields; the reordered
 * 32-block types are random rows of their file type, repacked. */
static void rand_weights(uint32_t type, uint8_t *w, int64_t n) {
    if (type == CPU_T_Q5_0X || type == CPU_T_Q8_0X) {
        uint32_t file = type == CPU_T_Q5_0X ? CPU_T_Q5_0 : CPU_T_Q8_0;
        rand_weights(file, w, n);
        cpu_repack_rows(file, w, n, 1);
        return;
    }
    size_t bytes = cpu_weight_row_size(type, n);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    int64_t blck = cpu_type_blck(type);
    size_t bs = bytes / (size_t)(n / blck);
    for (int64_t b = 0; b < n / blck; b++) {
        uint8_t *p = w + (size_t)b * bs;
        switch (type) {
        case CPU_T_F32: { float f = rndf(); memcpy(p, &f, 4); break; }
        case CPU_T_F16: put16(p, tkv_f32_to_f16(rndf())); break;
        case CPU_T_BF16: put16(p, tkv_f32_to_bf16(rndf())); break;
        case CPU_T_Q4_0: case CPU_T_Q5_0: case CPU_T_Q8_0: put16(p, tkv_f32_to_f16(rndf() * 0.01f)); break;
        case CPU_T_Q4_1: case CPU_T_Q5_1: case CPU_T_Q4_K: case CPU_T_Q5_K: case CPU_T_Q4_KX:
            put16(p, tkv_f32_to_f16(rndf() * 0.01f));
            put16(p + 2, tkv_f32_to_f16(rndf() * 0.01f));
            break;
        case CPU_T_Q6_K: case CPU_T_Q6_KX: put16(p + 208, tkv_f32_to_f16(rndf() * 0.01f)); break;
        }
    }
}

/* Activations: mostly small, some outliers, a few exact zeros and a zero block now and then. */
static void rand_acts(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = rnd() % 64;
        x[i] = r == 0 ? rndf() * 20.0f : r == 1 ? 0.0f : rndf();
    }
    if (n >= 64 && rnd() % 4 == 0) memset(x + 32, 0, 32 * sizeof(float));
}

/* Activation row -> f32 (the values the dot product actually sees). */
static void act_dequant(uint32_t act_type, const void *a, float *y, int64_t n) {
    const uint8_t *p = a;
    for (int64_t i = 0; i < n; i++) {
        switch (act_type) {
        case CPU_T_F32: memcpy(&y[i], p + 4 * i, 4); break;
        case CPU_T_F16: y[i] = tkv_f16_to_f32(tkv_rd16(p + 2 * i)); break;
        case CPU_T_BF16: y[i] = tkv_bf16_to_f32(tkv_rd16(p + 2 * i)); break;
        case CPU_T_Q8_0: { const cpu_block_q8_0 *b = (const cpu_block_q8_0 *)a + i / 32; y[i] = tkv_f16_to_f32(b->d) * b->qs[i % 32]; break; }
        case CPU_T_Q8_1: { const cpu_block_q8_1 *b = (const cpu_block_q8_1 *)a + i / 32; y[i] = tkv_f16_to_f32(b->d) * b->qs[i % 32]; break; }
        case CPU_T_Q8_K: { const cpu_block_q8_K *b = (const cpu_block_q8_K *)a + i / 256; y[i] = b->d * b->qs[i % 256]; break; }
        case CPU_T_Q8_KX: { /* element 32s + j sits at word 8*(j/4) + s (repack.c) */
            const cpu_block_q8_KX *b = (const cpu_block_q8_KX *)a + i / 256;
            int e = (int)(i % 256), s = e / 32, j = e % 32;
            y[i] = b->d * b->qs[32 * (j / 4) + 4 * s + j % 4];
            break;
        }
        case CPU_T_Q8_0XA: { /* element 32j + k of a group sits at vector k/8, byte 8j + k%8 (repack32.c) */
            const cpu_block_q8_0XA *b = (const cpu_block_q8_0XA *)a + i / 128;
            int e = (int)(i % 128), j = e / 32, k = e % 32;
            y[i] = b->d[2 * j] * b->qs[32 * (k / 8) + 8 * j + k % 8];
            break;
        }
        case CPU_T_Q8_KX6: { /* element 16s + j sits at 2-byte word 16*(j/2) + s */
            const cpu_block_q8_KX6 *b = (const cpu_block_q8_KX6 *)a + i / 256;
            int e = (int)(i % 256), s = e / 16, j = e % 16;
            y[i] = b->d * b->qs[32 * (j / 2) + 2 * s + j % 2];
            break;
        }
        }
    }
}

/* Per-element magnitude of the terms a dot product adds: |x| for single-term types; for types with
 * a min (x = d*sc*q - dmin*m or d*q + m) the two parts' magnitudes added, by dequantizing a copy
 * whose scale signs make both parts positive. */
static void term_magnitude(uint32_t type, const uint8_t *w, float *y, int64_t n, uint8_t *tmp) {
    size_t bytes = cpu_weight_row_size(type, n);
    memcpy(tmp, w, bytes);
    int64_t blck = cpu_type_blck(type);
    size_t bs = bytes / (size_t)(n / blck);
    for (int64_t b = 0; b < n / blck; b++) {
        uint8_t *p = tmp + (size_t)b * bs;
        if (type == CPU_T_Q4_K || type == CPU_T_Q5_K || type == CPU_T_Q4_KX) { p[1] &= 0x7f; p[3] |= 0x80; }
        if (type == CPU_T_Q4_1 || type == CPU_T_Q5_1) { p[1] &= 0x7f; p[3] &= 0x7f; }
    }
    cpu_ops_for(type, CPU_ISA_GENERIC)->dequant_row(tmp, y, n);
    for (int64_t i = 0; i < n; i++) y[i] = fabsf(y[i]);
}

TEST(kernels_hand_quantize) {
    float x[256];
    cpu_block_q8_0 q0;
    cpu_block_q8_1 q1;
    cpu_block_q8_K qk;
    /* amax = 127 gives d = 1, id = 1: q is x rounded half to even */
    const float in[8] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, 1.5f, -126.4f};
    const int8_t want[8] = {127, 2, 4, -2, -4, 0, 2, -126};
    for (int i = 0; i < 32; i++) x[i] = i < 8 ? in[i] : 0.0f;
    cpu_ops_for(CPU_T_Q8_0, CPU_ISA_GENERIC)->quantize_act(x, &q0, 32);
    CHECK(q0.d == 0x3c00);
    for (int i = 0; i < 8; i++) CHECKF(q0.qs[i] == want[i], "q8_0 x=%g q=%d want %d", in[i], q0.qs[i], want[i]);
    cpu_ops_for(CPU_T_Q4_1, CPU_ISA_GENERIC)->quantize_act(x, &q1, 32);
    CHECK(q1.d == 0x3c00 && q1.s == tkv_f32_to_f16(127 + 2 + 4 - 2 - 4 + 0 + 2 - 126));
    /* amax 63.5: d = 0.5, id = 2: 1.25 -> 2.5 -> 2, 1.75 -> 3.5 -> 4 */
    for (int i = 0; i < 32; i++) x[i] = 0;
    x[0] = 63.5f; x[1] = 1.25f; x[2] = 1.75f;
    cpu_ops_for(CPU_T_Q8_0, CPU_ISA_GENERIC)->quantize_act(x, &q0, 32);
    CHECK(q0.d == 0x3800 && q0.qs[0] == 127 && q0.qs[1] == 2 && q0.qs[2] == 4);
    for (int i = 0; i < 32; i++) x[i] = 0;
    cpu_ops_for(CPU_T_Q8_0, CPU_ISA_GENERIC)->quantize_act(x, &q0, 32);
    CHECK(q0.d == 0 && q0.qs[0] == 0 && q0.qs[31] == 0);

    /* Q8_K: signed max, first on ties. -127 at 5 before +127 at 9: iscale = 1, d = 1. */
    for (int i = 0; i < 256; i++) x[i] = 0.0f;
    x[5] = -127.0f; x[9] = 127.0f; x[20] = 2.5f; x[21] = 3.5f; x[22] = -2.5f; x[300 % 256] = 1.5f;
    cpu_ops_for(CPU_T_Q4_K, CPU_ISA_GENERIC)->quantize_act(x, &qk, 256);
    CHECK(qk.d == 1.0f && qk.qs[5] == -127 && qk.qs[9] == 127 && qk.qs[20] == 2 && qk.qs[21] == 4 && qk.qs[22] == -2);
    CHECK(qk.qs[44] == 2 && qk.bsums[0] == 0 && qk.bsums[1] == 4 && qk.bsums[2] == 2);
    /* now +127 first: iscale = -1, d = -1, every q negated */
    x[5] = 127.0f; x[9] = -127.0f;
    cpu_ops_for(CPU_T_Q6_K, CPU_ISA_GENERIC)->quantize_act(x, &qk, 256);
    CHECK(qk.d == -1.0f && qk.qs[5] == -127 && qk.qs[9] == 127 && qk.qs[20] == -2 && qk.qs[21] == -4);
    CHECK(qk.bsums[1] == -4);
    /* x = 0.5 * max: iscale*x = -63.5 -> -64 (even) */
    x[9] = 63.5f;
    cpu_ops_for(CPU_T_Q6_K, CPU_ISA_GENERIC)->quantize_act(x, &qk, 256);
    CHECK(qk.qs[9] == -64);
    /* f16 / bf16 rounding: 1 + 2^-11 is a tie in f16 (to even: 1.0), 1 + 3*2^-11 rounds up */
    float h[2] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
    uint16_t o[2];
    cpu_ops_for(CPU_T_F16, CPU_ISA_GENERIC)->quantize_act(h, o, 2);
    CHECK(o[0] == 0x3c00 && o[1] == 0x3c02);
    h[0] = 1.0f + 0x1p-8f; h[1] = 1.0f + 3 * 0x1p-8f;
    cpu_ops_for(CPU_T_BF16, CPU_ISA_GENERIC)->quantize_act(h, o, 2);
    CHECK(o[0] == 0x3f80 && o[1] == 0x3f82);
}

TEST(kernels_hand_dequant) {
    uint8_t b[256] = {0};
    float y[256];
    /* Q4_0: d = 0.5, qs[0] = 0x1f: x0 = 0.5*(15-8), x16 = 0.5*(1-8) */
    put16(b, 0x3800); b[2] = 0x1f;
    cpu_ops_for(CPU_T_Q4_0, CPU_ISA_GENERIC)->dequant_row(b, y, 32);
    CHECK(y[0] == 3.5f && y[16] == -3.5f && y[1] == -4.0f);
    /* Q4_1: d = 2, m = -1: x0 = 2*15 - 1, x16 = 2*1 - 1 */
    memset(b, 0, sizeof b); put16(b, 0x4000); put16(b + 2, 0xbc00); b[4] = 0x1f;
    cpu_ops_for(CPU_T_Q4_1, CPU_ISA_GENERIC)->dequant_row(b, y, 32);
    CHECK(y[0] == 29.0f && y[16] == 1.0f && y[1] == -1.0f);
    /* Q5_0: d = 2, qh bit 0 set, qs[0] = 0x03: x0 = 2*(19-16); x16 = 2*(0-16); qh bit 17 -> x17 = 2*(16-16) */
    memset(b, 0, sizeof b); put16(b, 0x4000); b[2] = 0x01; b[4] = 0x02; b[6] = 0x03;
    cpu_ops_for(CPU_T_Q5_0, CPU_ISA_GENERIC)->dequant_row(b, y, 32);
    CHECK(y[0] == 6.0f && y[16] == -32.0f && y[17] == 0.0f);
    /* Q5_1: d = 1, m = 0.5, qh bit 31, qs[15] = 0xf0: x31 = 31 + 0.5 */
    memset(b, 0, sizeof b); put16(b, 0x3c00); put16(b + 2, 0x3800); b[7] = 0x80; b[8 + 15] = 0xf0;
    cpu_ops_for(CPU_T_Q5_1, CPU_ISA_GENERIC)->dequant_row(b, y, 32);
    CHECK(y[31] == 31.5f && y[15] == 0.5f);
    /* Q8_0: d = -0.25, qs[3] = -7 */
    memset(b, 0, sizeof b); put16(b, 0xb400); b[2 + 3] = (uint8_t)(int8_t)-7;
    cpu_ops_for(CPU_T_Q8_0, CPU_ISA_GENERIC)->dequant_row(b, y, 32);
    CHECK(y[3] == 1.75f && y[4] == 0.0f);
    /* Q4_K: d = 1, dmin = 0.5; sc0 = 3, m0 = 2, sc1 = 4, m1 = 1; sc4 = 1|32 = 33, m4 = 5|16 = 21 */
    memset(b, 0, sizeof b); put16(b, 0x3c00); put16(b + 2, 0x3800);
    uint8_t *s = b + 4;
    s[0] = 3 | (2 << 6); s[1] = 4; s[4] = 2 | (1 << 6); s[5] = 1; s[8] = 0x51;
    b[16 + 0] = 0x97;  /* e0 = low 7 (sub 0), e32 = high 9 (sub 1) */
    b[16 + 64] = 0x0a; /* e128 = low 10 (sub 4) */
    cpu_ops_for(CPU_T_Q4_K, CPU_ISA_GENERIC)->dequant_row(b, y, 256);
    CHECK(y[0] == 3 * 7 - 1.0f && y[32] == 4 * 9 - 0.5f && y[128] == 33 * 10 - 10.5f && y[160] == 0.0f);
    /* Q5_K: d = 1, dmin = 0, sc1 = 2: e32 = high nibble of qs[0] (3) | bit 1 of qh[0] -> 19 */
    memset(b, 0, sizeof b); put16(b, 0x3c00); b[4 + 1] = 2; b[16] = 0x02; b[48] = 0x30;
    cpu_ops_for(CPU_T_Q5_K, CPU_ISA_GENERIC)->dequant_row(b, y, 256);
    CHECK(y[32] == 38.0f && y[0] == 0.0f);
    /* Q6_K: d = 0.25, scales[0] = -3, scales[6] = 2; e0: ql 5 | qh 2<<4 = 37; e96: ql[32]>>4 = 12 | 3<<4 = 60 */
    memset(b, 0, sizeof b); put16(b + 208, 0x3400); b[192] = (uint8_t)(int8_t)-3; b[192 + 6] = 2;
    b[0] = 0x05; b[32] = 0xc0; b[128] = 2 | (3 << 6);
    cpu_ops_for(CPU_T_Q6_K, CPU_ISA_GENERIC)->dequant_row(b, y, 256);
    CHECK(y[0] == -3.75f && y[96] == 14.0f && y[1] == (0.25f * -3) * -32);
}

static const int64_t lens32[] = {32, 64, 96, 224, 352, 896};
static const int64_t lens256[] = {256, 512, 768, 1792, 2816};
static const int64_t lensf[] = {1, 7, 33, 96, 255, 896, 2816};
static const int64_t lens128[] = {128, 384, 896, 2816};

static void lengths(uint32_t type, const int64_t **l, int *nl) {
    int64_t blck = cpu_type_blck(type);
    if (blck == 256) { *l = lens256; *nl = 5; }
    else if (blck == 32) { *l = lens32; *nl = 6; }
    else if (blck == 128) { *l = lens128; *nl = 4; }
    else { *l = lensf; *nl = 7; }
}

#define MAXN 2816

TEST(kernels_dequant) {
    _Alignas(64) static uint8_t w[MAXN * 4];
    static float y0[MAXN], y1[MAXN];
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = all_types[ti];
        const int64_t *l; int nl;
        lengths(t, &l, &nl);
        for (int isa = 1; isa <= 2; isa++) {
            if (!isa_available((cpu_isa)isa)) continue;
            for (int li = 0; li < nl; li++) {
                rand_weights(t, w, l[li]);
                cpu_ops_for(t, CPU_ISA_GENERIC)->dequant_row(w, y0, l[li]);
                cpu_ops_for(t, (cpu_isa)isa)->dequant_row(w, y1, l[li]);
                CHECKF(memcmp(y0, y1, (size_t)l[li] * 4) == 0, "type %u isa %d n %lld", t, isa, (long long)l[li]);
            }
        }
    }
}

TEST(kernels_quantize_act) {
    static float x[MAXN];
    _Alignas(64) static uint8_t a0[MAXN * 4], a1[MAXN * 4];
    int tested = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = all_types[ti];
        const int64_t *l; int nl;
        lengths(t, &l, &nl);
        for (int isa = 1; isa <= 2; isa++) {
            if (!isa_available((cpu_isa)isa)) continue;
            tested++;
            for (int li = 0; li < nl; li++)
                for (int rep = 0; rep < 4; rep++) {
                    rand_acts(x, l[li]);
                    if (rep == 3) /* exact ties for the quantizers: halves of an integer grid */
                        for (int64_t i = 0; i < l[li]; i++) x[i] = (float)((int)(rnd() % 255) - 127) * 0.5f;
                    size_t sz = cpu_act_row_size(t, l[li]);
                    cpu_ops_for(t, CPU_ISA_GENERIC)->quantize_act(x, a0, l[li]);
                    cpu_ops_for(t, (cpu_isa)isa)->quantize_act(x, a1, l[li]);
                    CHECKF(memcmp(a0, a1, sz) == 0, "type %u isa %d n %lld rep %d", t, isa, (long long)l[li], rep);
                }
        }
    }
    if (!tested) SKIP("no SIMD variant on this CPU");
}

/* Tolerance between two f32 summation orders of the same exact block terms: each side adds at most
 * n/32 + 16 rounded terms in sequence (blocks or lanes, then a log-depth reduction), each rounding
 * at most u = 2^-24 of the running magnitude <= bound; two sides, and a factor 2 of slack. */
static double sum_tol(int64_t n, double bound) { return 4.0 * ((double)n / 32 + 16) * 0x1p-24 * bound + 1e-30; }

#define NR_T 5 /* weight rows in the tile checks */

TEST(kernels_vec_dot) {
    _Alignas(64) static float x[8][MAXN], wabs[MAXN], wd[MAXN], ad[MAXN];
    _Alignas(64) static uint8_t wr[NR_T][MAXN * 4], tmp[MAXN * 4], a[8][MAXN * 4];
    uint8_t *w = wr[0];
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = all_types[ti];
        const cpu_type_ops *g = cpu_ops_for(t, CPU_ISA_GENERIC);
        REQUIRE(g != NULL);
        const int64_t *l; int nl;
        lengths(t, &l, &nl);
        for (int li = 0; li < nl; li++)
            for (int rep = 0; rep < 3; rep++) {
                int64_t n = l[li];
                for (int r = 0; r < NR_T; r++) rand_weights(t, wr[r], n);
                term_magnitude(t, w, wabs, n, tmp);
                g->dequant_row(w, wd, n);
                for (int k = 0; k < 8; k++) {
                    rand_acts(x[k], n);
                    g->quantize_act(x[k], a[k], n);
                }
                act_dequant(g->act_type, a[0], ad, n);
                double bound = 0, ref = 0, extra = 0;
                for (int64_t i = 0; i < n; i++) {
                    bound += (double)fabsf(ad[i]) * wabs[i];
                    ref += (double)ad[i] * wd[i];
                }
                if (g->act_type == CPU_T_Q8_1) /* m*s uses s = f16(d*Σq) with the unrounded d: 2^-10 of it */
                    for (int64_t b = 0; b < n / 32; b++) {
                        const cpu_block_q8_1 *ab = (const cpu_block_q8_1 *)a[0] + b;
                        extra += fabs(tkv_f16_to_f32(tkv_rd16(w + b * (t == CPU_T_Q4_1 ? 20 : 24) + 2)) * tkv_f16_to_f32(ab->s)) * 0x1p-10;
                    }
                float s0;
                g->vec_dot(n, &s0, w, a[0]);
                CHECKF(fabs(s0 - ref) <= sum_tol(n, bound) + extra, "generic vs dequant: type %u n %lld: %.9g vs %.9g (bound %g)",
                       t, (long long)n, s0, ref, bound);
                for (int isa = 0; isa <= 2; isa++) {
                    if (!isa_available((cpu_isa)isa)) continue;
                    const cpu_type_ops *o = cpu_ops_for(t, (cpu_isa)isa);
                    float s1, snx[8 * (NR_T + 1)];
                    o->vec_dot(n, &s1, w, a[0]);
                    CHECKF(fabs(s1 - s0) <= sum_tol(n, bound), "type %u isa %d n %lld: %.9g vs generic %.9g (bound %g)", t, isa,
                           (long long)n, s1, s0, bound);
                    /* every tile shape (including ones the matmul never asks for) against vec_dot,
                     * bit for bit; the gaps between outputs must stay untouched */
                    float ref1[NR_T][8];
                    for (int r = 0; r < NR_T; r++)
                        for (int k = 0; k < 8; k++) o->vec_dot(n, &ref1[r][k], wr[r], a[k]);
                    for (int nr = 1; nr <= NR_T; nr++)
                        for (int nx = 1; nx <= 8; nx++) {
                            for (int i = 0; i < 8 * (NR_T + 1); i++) snx[i] = -7.0f;
                            o->vec_dot_tile(n, snx, NR_T + 1, wr[0], sizeof wr[0], nr, a[0], sizeof a[0], nx);
                            for (int k = 0; k < 8; k++)
                                for (int r = 0; r <= NR_T; r++) {
                                    float got = snx[k * (NR_T + 1) + r];
                                    if (k < nx && r < nr)
                                        CHECKF(memcmp(&ref1[r][k], &got, 4) == 0, "tile: type %u isa %d n %lld %dx%d r %d k %d: %.9g vs %.9g",
                                               t, isa, (long long)n, nr, nx, r, k, got, ref1[r][k]);
                                    else
                                        CHECKF(got == -7.0f, "tile wrote outside: type %u isa %d %dx%d r %d k %d", t, isa, nr, nx, r, k);
                                }
                        }
                }
            }
    }
}

/* Q4_K / Q6_K / Q5_0 / Q8_0 rows repacked into Q4_KX / Q6_KX / Q5_0X / Q8_0X (repack.c,
 * repack32.c) give the generic results of the file's layout bit for bit: the same dequantised
 * values, the same dot products against the matching activations. */
TEST(kernels_repack) {
    _Alignas(64) static uint8_t w[MAXN * 4], wx[MAXN * 4], a[MAXN * 4], ax[MAXN * 4];
    static float x[MAXN], y0[MAXN], y1[MAXN];
    CHECK(cpu_repack_type(CPU_T_Q4_K, 256) == CPU_T_Q4_KX && cpu_repack_type(CPU_T_Q6_K, 256) == CPU_T_Q6_KX);
    CHECK(cpu_repack_type(CPU_T_Q5_0, 896) == CPU_T_Q5_0X && cpu_repack_type(CPU_T_Q8_0, 128) == CPU_T_Q8_0X);
    CHECK(cpu_repack_type(CPU_T_Q5_0, 96) == 0 && cpu_repack_type(CPU_T_Q8_0, 2816 + 32) == 0); /* no whole groups */
    CHECK(cpu_repack_type(CPU_T_Q5_K, 256) == 0 && cpu_repack_type(CPU_T_Q4_0, 256) == 0 && cpu_repack_type(CPU_T_Q4_KX, 256) == 0);
    const uint32_t from[4] = {CPU_T_Q4_K, CPU_T_Q6_K, CPU_T_Q5_0, CPU_T_Q8_0};
    for (int ti = 0; ti < 4; ti++) {
        uint32_t t = from[ti];
        const int64_t *lens = ti < 2 ? lens256 : lens128;
        int nl = ti < 2 ? 5 : 4;
        for (int li = 0; li < nl; li++)
            for (int rep = 0; rep < 3; rep++) {
                int64_t n = lens[li], rows = 3;
                uint32_t tx = cpu_repack_type(t, n);
                REQUIRE(tx != 0);
                CHECK(cpu_weight_row_size(tx, n) == cpu_weight_row_size(t, n));
                const cpu_type_ops *g = cpu_ops_for(t, CPU_ISA_GENERIC), *gx = cpu_ops_for(tx, CPU_ISA_GENERIC);
                REQUIRE(g && gx);
                size_t row = cpu_weight_row_size(t, n);
                REQUIRE(row * (size_t)rows <= sizeof w);
                for (int r = 0; r < rows; r++) rand_weights(t, w + r * row, n);
                memcpy(wx, w, row * (size_t)rows);
                cpu_repack_rows(t, wx, n, rows);
                CHECK(memcmp(w, wx, row * (size_t)rows) != 0);
                rand_acts(x, n);
                g->quantize_act(x, a, n);
                gx->quantize_act(x, ax, n);
                for (int r = 0; r < rows; r++) {
                    g->dequant_row(w + r * row, y0, n);
                    gx->dequant_row(wx + r * row, y1, n);
                    CHECKF(memcmp(y0, y1, (size_t)n * 4) == 0, "dequant type %u n %lld row %d", t, (long long)n, r);
                    float s0, s1;
                    g->vec_dot(n, &s0, w + r * row, a);
                    gx->vec_dot(n, &s1, wx + r * row, ax);
                    CHECKF(memcmp(&s0, &s1, 4) == 0, "dot type %u n %lld row %d: %.9g vs %.9g", t, (long long)n, r, s1, s0);
                }
            }
    }
}

/* Q6_KX at the edges of its i16 sums (ops_x86.h): every quant 63 (each maddubs lane 2*63*127, four of
 * them add to the partial sums after the offset came off) or 0 (the offset alone, -8*32*127), against
 * activations of +-127; every ISA within a relative 1e-5 of the generic dot. */
TEST(kernels_q6_KX_extremes) {
    enum { N = 512 };
    _Alignas(64) static uint8_t w[2 * CPU_BS_Q6_K], a[N * 2];
    static float x[N];
    const uint8_t fill[3] = {0xFF, 0x00, 0xA5}; /* q = 63, q = 0, a mix */
    for (int f = 0; f < 3; f++)
        for (int sign = 0; sign < 2; sign++) {
            for (int b = 0; b < N / CPU_QKK; b++) {
                uint8_t *p = w + b * CPU_BS_Q6_K;
                memset(p, fill[f], 192);
                memset(p + 192, f == 2 ? 0x80 : 127, 16); /* scales -128 or 127 */
                put16(p + 208, tkv_f32_to_f16(0.01f));
            }
            cpu_repack_rows(CPU_T_Q6_K, w, N, 1);
            /* Q8_K maps the first element of the largest magnitude to -127: all equal gives -127
             * everywhere; the first one opposite to the rest gives the rest +127 */
            for (int i = 0; i < N; i++) x[i] = sign && i % 256 == 0 ? -1.0f : 1.0f;
            const cpu_type_ops *g = cpu_ops_for(CPU_T_Q6_KX, CPU_ISA_GENERIC);
            g->quantize_act(x, a, N);
            float s0;
            g->vec_dot(N, &s0, w, a);
            CHECK(fabsf(s0) > 1.0f);
            for (int isa = 1; isa <= 2; isa++) {
                if (!isa_available((cpu_isa)isa)) continue;
                const cpu_type_ops *o = cpu_ops_for(CPU_T_Q6_KX, (cpu_isa)isa);
                float s1;
                o->quantize_act(x, a, N);
                o->vec_dot(N, &s1, w, a);
                CHECKF(fabsf(s1 - s0) <= 1e-5f * fabsf(s0), "fill %02x sign %d isa %d: %.9g vs %.9g", fill[f], sign, isa, s1, s0);
            }
        }
}

TEST(kernels_f32_ops) {
    static float a[MAXN], b[MAXN], y0[MAXN], y1[MAXN];
    for (int isa = 1; isa <= 2; isa++) {
        if (!isa_available((cpu_isa)isa)) continue;
        const cpu_f32_ops *g = cpu_f32_ops_for(CPU_ISA_GENERIC), *o = cpu_f32_ops_for((cpu_isa)isa);
        for (int li = 0; li < 7; li++) {
            int64_t n = lensf[li];
            double bound = 0;
            for (int64_t i = 0; i < n; i++) { a[i] = rndf(); b[i] = rndf(); bound += fabs((double)a[i] * b[i]); }
            float d0 = g->dot_f32(a, b, n), d1 = o->dot_f32(a, b, n), d2 = o->dot_f32(a, b, n);
            CHECKF(fabs(d0 - d1) <= sum_tol(n, bound) * 2, "dot isa %d n %lld: %g vs %g", isa, (long long)n, d1, d0);
            CHECK(memcmp(&d1, &d2, 4) == 0);
            memcpy(y0, b, (size_t)n * 4); memcpy(y1, b, (size_t)n * 4);
            g->axpy_f32(y0, 0.37f, a, n); o->axpy_f32(y1, 0.37f, a, n);
            /* fma or not: one rounding apart at most per element */
            for (int64_t i = 0; i < n; i++) CHECKF(fabsf(y0[i] - y1[i]) <= 0x1p-23f * (fabsf(b[i]) + fabsf(0.37f * a[i])), "axpy %lld", (long long)i);
            memcpy(y0, b, (size_t)n * 4); memcpy(y1, b, (size_t)n * 4);
            g->scale_f32(y0, -1.7f, n); o->scale_f32(y1, -1.7f, n);
            CHECK(memcmp(y0, y1, (size_t)n * 4) == 0);
            /* swiglu: gates over -100..100 (both signs of the exp's range, the cutoff near -87,
             * zeros of both signs), within 4 ulp of the generic expf-based value */
            for (int64_t i = 0; i < n; i++) {
                a[i] = i % 17 == 3 ? 0.0f : i % 17 == 5 ? -0.0f : rndf() * (i % 3 == 0 ? 100.0f : 6.0f);
                y0[i] = y1[i] = a[i];
            }
            g->swiglu(y0, b, n); o->swiglu(y1, b, n);
            for (int64_t i = 0; i < n; i++)
                CHECKF(fabsf(y0[i] - y1[i]) <= 4 * 0x1p-23f * fabsf(y0[i]) + 1e-30f, "swiglu isa %d z %g: %g vs %g", isa, a[i], y1[i], y0[i]);
        }
    }
}

TEST(kernels_matmul) {
    enum { NOUT = 37, NTOK = 17 };
    tkv_workers *ws[2] = {workers_init(1), workers_init(2)};
    /* no pause after workers_init: a job posted before the worker thread runs must still be taken
     * (this once hung; see workers.c) */
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = all_types[ti];
        int64_t n_in = cpu_type_blck(t) == 256 ? 768 : cpu_type_blck(t) == 32 || cpu_type_blck(t) == 128 ? 896 : 200;
        size_t row = cpu_weight_row_size(t, n_in);
        uint8_t *w = malloc(row * NOUT);
        float *x = malloc(sizeof(float) * (size_t)n_in * NTOK), *wd = malloc(sizeof(float) * (size_t)n_in * NOUT);
        float *amax = malloc(sizeof(float) * (size_t)n_in * NTOK);
        float *y[2];
        size_t ss = cpu_matmul_scratch_size(t, n_in, NTOK);
        void *scratch = malloc(ss);
        uint8_t *arow = malloc(cpu_act_row_size(t, n_in));
        for (int r = 0; r < NOUT; r++) {
            rand_weights(t, w + r * row, n_in);
            cpu_ops_for(t, CPU_ISA_GENERIC)->dequant_row(w + r * row, wd + (size_t)r * n_in, n_in);
        }
        /* amax[i]: max |x| of the activation block holding element i (0 for unquantized types) */
        uint32_t at = cpu_ops_for(t, CPU_ISA_GENERIC)->act_type;
        int64_t ab = at == CPU_T_Q8_K || at == CPU_T_Q8_KX || at == CPU_T_Q8_KX6 ? 256 : at == CPU_T_Q8_0 || at == CPU_T_Q8_1 || at == CPU_T_Q8_0XA ? 32 : 0;
        for (int k = 0; k < NTOK; k++) {
            rand_acts(x + k * n_in, n_in);
            for (int64_t b0 = 0; ab && b0 < n_in; b0 += ab) {
                float m = 0;
                for (int64_t j = b0; j < b0 + ab; j++) m = fmaxf(m, fabsf(x[k * n_in + j]));
                for (int64_t j = b0; j < b0 + ab; j++) amax[k * n_in + j] = m;
            }
            if (!ab) memset(amax + k * n_in, 0, sizeof(float) * (size_t)n_in);
        }
        const int64_t y_stride = NOUT + 3;
        for (int p = 0; p < 2; p++) y[p] = malloc(sizeof(float) * y_stride * NTOK);
        const int toks[3] = {1, 3, 17};
        for (int isa = 0; isa <= 2; isa++) {
            if (!isa_available((cpu_isa)isa)) continue;
            const cpu_type_ops *o = cpu_ops_for(t, (cpu_isa)isa);
            for (int tk = 0; tk < 3; tk++) {
                int nt = toks[tk];
                for (int p = 0; p < 2; p++) {
                    for (int64_t i = 0; i < y_stride * NTOK; i++) y[p][i] = -12345.0f;
                    cpu_matmul(ws[p], (cpu_isa)isa, t, w, n_in, NOUT, x, nt, y[p], y_stride, scratch);
                }
                CHECKF(memcmp(y[0], y[1], sizeof(float) * y_stride * nt) == 0, "threads differ: type %u isa %d ntok %d", t, isa, nt);
                for (int k = 0; k < nt; k++) {
                    o->quantize_act(x + k * n_in, arow, n_in);
                    CHECK(y[0][k * y_stride + NOUT] == -12345.0f);
                    for (int r = 0; r < NOUT; r++) {
                        float s;
                        o->vec_dot(n_in, &s, w + r * row, arow);
                        CHECKF(memcmp(&s, &y[0][k * y_stride + r], 4) == 0, "matmul != vec_dot: type %u isa %d tok %d row %d", t, isa, k, r);
                        /* naive f32. The activation rounding errors are independent, each at most
                         * h_i = half a step (amax/254 for Q8, 2^-9 |x| for bf16, 2^-12 |x| for f16):
                         * 6 standard deviations of their sum, plus the systematic f16 rounding of the
                         * activation scales (2^-11 relative, taken as 2^-10 of Σ|w x|). */
                        const float *xk = x + k * n_in, *wr = wd + (size_t)r * n_in;
                        double ref = 0, var = 0, sys = 0;
                        double rel = at == CPU_T_BF16 ? 0x1p-9 : at == CPU_T_F16 ? 0x1p-12 : 0;
                        for (int64_t i = 0; i < n_in; i++) {
                            ref += (double)wr[i] * xk[i];
                            double h = ab ? amax[k * n_in + i] / 254 : fabsf(xk[i]) * rel;
                            var += (double)wr[i] * wr[i] * h * h / 3;
                            sys += fabs((double)wr[i] * xk[i]);
                        }
                        double tol = 6 * sqrt(var) + sys * 0x1p-10 + 1e-5;
                        CHECKF(fabs(s - ref) <= tol, "matmul vs naive: type %u isa %d tok %d row %d: %g vs %g (tol %g)", t, isa, k, r, s, ref, tol);
                    }
                }
            }
        }
        free(w); free(x); free(wd); free(amax); free(scratch); free(arow); free(y[0]); free(y[1]);
    }
    workers_free(ws[0]);
    workers_free(ws[1]);
}

/* Tables complete and consistent across ISAs; detection agrees with what the kernel reports. */
/* Fused matmuls (q/k/v, gate/up): several matrices of different types (sharing an activation format
 * or not, row counts not multiples of the grain) against the same X give exactly what separate
 * cpu_matmul calls give, for one token and for batches, with 1 and 3 threads. */
TEST(kernels_matmul_multi) {
    enum { NIN = 512, NTOK = 6, MAXO = 70 };
    const uint32_t types[4] = {CPU_T_Q5_0, CPU_T_Q4_K, CPU_T_Q8_0, CPU_T_Q4_KX};
    const int64_t nout[4] = {70, 9, 33, 17};
    static float x[NTOK * NIN], ya[4][NTOK * MAXO], yb[4][NTOK * MAXO];
    static uint8_t w[4][MAXO * NIN * 2];
    cpu_mm_out o[4];
    for (int k = 0; k < 4; k++) {
        rand_weights(types[k], w[k], nout[k] * NIN);
        o[k] = (cpu_mm_out){.type = types[k], .w = w[k], .n_out = nout[k], .y = yb[k], .y_stride = MAXO};
    }
    rand_acts(x, NTOK * NIN);
    size_t ss = cpu_matmul_multi_scratch_size(o, 4, NIN, NTOK);
    void *scratch = tkv_xaligned(64, ss);
    for (int th = 1; th <= 3; th += 2) {
        tkv_workers *workers = workers_init(th);
        for (int isa = CPU_ISA_GENERIC; isa <= CPU_ISA_AVX512; isa++) {
            if (!isa_available((cpu_isa)isa)) continue;
            const int ntoks[] = {1, 2, 6};
            for (int ti = 0; ti < 3; ti++) {
                int nt = ntoks[ti];
                for (int k = 0; k < 4; k++)
                    cpu_matmul(workers, (cpu_isa)isa, types[k], w[k], NIN, nout[k], x, nt, ya[k], MAXO, scratch);
                for (int np = 2; np <= 4; np++) {
                    memset(yb, 0, sizeof yb);
                    cpu_matmul_multi(workers, (cpu_isa)isa, o, np, NIN, x, nt, scratch);
                    for (int k = 0; k < np; k++)
                        for (int t = 0; t < nt; t++)
                            CHECKF(memcmp(ya[k] + t * MAXO, yb[k] + t * MAXO, (size_t)nout[k] * sizeof(float)) == 0,
                                   "isa %d threads %d ntok %d parts %d part %d token %d", isa, th, nt, np, k, t);
                }
            }
        }
        workers_free(workers);
    }
    free(scratch);
}

TEST(kernels_tables) {
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int isa = 0; isa <= 2; isa++) {
            const cpu_type_ops *o = cpu_ops_for(all_types[ti], (cpu_isa)isa), *g = cpu_ops_for(all_types[ti], CPU_ISA_GENERIC);
            REQUIRE(o != NULL);
            CHECK(o->type == all_types[ti] && o->act_type == g->act_type);
            CHECK(o->quantize_act && o->vec_dot && o->vec_dot_tile && o->dequant_row);
        }
    CHECK(cpu_ops_for(10 /* Q2_K */, CPU_ISA_GENERIC) == NULL && cpu_ops_for(15 /* Q8_K */, CPU_ISA_AVX2) == NULL);
    CHECK(cpu_act_row_size(CPU_T_Q4_K, 512) == 2 * 292 && cpu_act_row_size(CPU_T_Q5_1, 64) == 72 && cpu_act_row_size(CPU_T_BF16, 3) == 6);
    for (int isa = 0; isa <= 2; isa++) {
        const cpu_f32_ops *f = cpu_f32_ops_for((cpu_isa)isa);
        CHECK(f && f->dot_f32 && f->axpy_f32 && f->scale_f32);
    }
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) SKIP("no /proc/cpuinfo");
    static char line[8192];
    int has_avx2 = 0, has_512 = 0;
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, "flags", 5)) {
            has_avx2 = strstr(line, " avx2") && strstr(line, " fma") && strstr(line, " f16c");
            has_512 = has_avx2 && strstr(line, " avx512f") && strstr(line, " avx512bw") && strstr(line, " avx512vl") &&
                      strstr(line, " avx512dq") && strstr(line, " avx512_vnni");
            break;
        }
    fclose(fp);
    cpu_isa want = has_512 ? CPU_ISA_AVX512 : has_avx2 ? CPU_ISA_AVX2 : CPU_ISA_GENERIC;
    CHECKF(cpu_detect_isa() == want, "detected %s, /proc/cpuinfo says %s", cpu_isa_name(cpu_detect_isa()), cpu_isa_name(want));
    if (cpu_detect_isa() < CPU_ISA_AVX512) fprintf(stderr, "    (kernels: this CPU runs %s; AVX-512 kernels not exercised)\n", cpu_isa_name(cpu_detect_isa()));
}

/* Many pools used at once after creation: a job posted before a worker starts must run. */
static void count_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    int *hits = ctx;
    for (int64_t i = i0; i < i1; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
}

TEST(pool_first_job_after_init) {
    for (int rep = 0; rep < 50; rep++) {
        tkv_workers *p = workers_init(2 + rep % 3);
        int hits[64] = {0};
        workers_for(p, 64, count_task, hits);
        for (int i = 0; i < 64; i++) CHECK(hits[i] == 1);
        workers_free(p);
    }
}

/* The attention kernels of each ISA against the plain ones: scores within float rounding of the
 * reference dot products (and exactly -inf where a row is missing or masked), weighted sums within
 * rounding of the reference (FMA vs separate multiply-add), for several head dims and groups. */
TEST(kernels_attention) {
    enum { N = 67, MAXG = 13, MAXHD = 128 };
    static float q[MAXG * MAXHD], kv[N][2 * MAXHD], att_ref[MAXG * N], att[MAXG * N], out_ref[MAXG * MAXHD], out[MAXG * MAXHD],
        out1[MAXHD];
    const float *rows[N];
    uint8_t keep[N];
    const int hds[] = {64, 128, 40, 48}, groups[] = {1, 2, 4, 6, 7, 13};
    for (int isa = CPU_ISA_AVX2; isa <= CPU_ISA_AVX512; isa++) {
        if (!isa_available((cpu_isa)isa)) continue;
        const cpu_f32_ops *fast = cpu_f32_ops_for((cpu_isa)isa), *ref = cpu_f32_ops_for(CPU_ISA_GENERIC);
        for (int hi = 0; hi < 4; hi++)
            for (int gi = 0; gi < 6; gi++) {
                int hd = hds[hi], group = groups[gi];
                rand_acts(q, MAXG * MAXHD);
                for (int j = 0; j < N; j++) {
                    rand_acts(kv[j], 2 * MAXHD);
                    rows[j] = j % 11 == 5 ? NULL : kv[j];
                    keep[j] = j % 13 != 7;
                }
                size_t off = (size_t)(gi % 2) * hd; /* second kv head of the row */
                ref->attn_scores(q, group, hd, rows, off, keep, N, 0.125f, att_ref, N);
                fast->attn_scores(q, group, hd, rows, off, keep, N, 0.125f, att, N);
                for (int i = 0; i < group * N; i++) {
                    int j = i % N;
                    if (!rows[j] || !keep[j]) { CHECK(att[i] == -INFINITY && att_ref[i] == -INFINITY); continue; }
                    double mag = 0;
                    for (int d = 0; d < hd; d++) mag += fabs(q[(i / N) * hd + d] * rows[j][off + d]) * 0.125;
                    CHECKF(fabs(att[i] - att_ref[i]) <= 4 * hd * 6e-8 * mag + 1e-30, "scores isa %d hd %d g %d", isa, hd, group);
                }
                /* weights: a softmax-like row with zeros where masked, and some zeros in single heads */
                for (int i = 0; i < group * N; i++)
                    att[i] = att_ref[i] == -INFINITY || i % 19 == 4 ? 0.0f : (float)((i * 37 % 101) + 1) / 5000.0f;
                ref->attn_wsum(att, N, group, hd, rows, off, N, out_ref);
                fast->attn_wsum(att, N, group, hd, rows, off, N, out);
                for (int h = 0; h < group; h++)
                    for (int d = 0; d < hd; d++) {
                        double mag = 0;
                        for (int j = 0; j < N; j++)
                            if (att[h * N + j] != 0) mag += fabs(att[h * N + j] * rows[j][off + d]);
                        CHECKF(fabs(out[h * hd + d] - out_ref[h * hd + d]) <= 2 * N * 6e-8 * mag + 1e-30, "wsum isa %d hd %d g %d", isa, hd, group);
                    }
                /* each head's sum is the same bits whatever group it is computed in */
                for (int h = 0; h < group; h++) {
                    fast->attn_wsum(att + (size_t)h * N, N, 1, hd, rows, off, N, out1);
                    CHECKF(memcmp(out1, out + (size_t)h * hd, (size_t)hd * sizeof(float)) == 0, "wsum group isa %d hd %d g %d h %d", isa, hd, group, h);
                }
            }
    }
}

/* The fp16-row attention kernels of every ISA (generic included) against the same ISA's f32 kernels
 * on the widened rows: bit for bit, for head dims that take the vector paths and ones that fall back,
 * with missing rows, masks, and weights that are 0 for some heads. */
TEST(kernels_attention_f16) {
    enum { N = 75, MAXG = 7, MAXHD = 128 };
    static float q[MAXG * MAXHD], kvf[N][2 * MAXHD], att16[MAXG * N], att32[MAXG * N], o16[MAXG * MAXHD], o32[MAXG * MAXHD];
    static uint16_t kvh[N][2 * MAXHD];
    const float *rows[N];
    const uint16_t *hrows[N];
    uint8_t keep[N];
    const int hds[] = {64, 128, 40, 24}, groups[] = {1, 2, 6, 7};
    for (int isa = CPU_ISA_GENERIC; isa <= CPU_ISA_AVX512; isa++) {
        if (!isa_available((cpu_isa)isa)) continue;
        const cpu_f32_ops *ops = cpu_f32_ops_for((cpu_isa)isa);
        for (int hi = 0; hi < 4; hi++)
            for (int gi = 0; gi < 4; gi++) {
                int hd = hds[hi], group = groups[gi];
                rand_acts(q, MAXG * MAXHD);
                for (int j = 0; j < N; j++) {
                    rand_acts(kvf[j], 2 * MAXHD);
                    for (int d = 0; d < 2 * MAXHD; d++) {
                        kvh[j][d] = tkv_f32_to_f16(kvf[j][d] * 8.0f);
                        kvf[j][d] = tkv_f16_to_f32(kvh[j][d]);
                    }
                    int gone = j % 11 == 5;
                    rows[j] = gone ? NULL : kvf[j];
                    hrows[j] = gone ? NULL : kvh[j];
                    keep[j] = j % 13 != 7;
                }
                size_t off = (size_t)(gi % 2) * hd;
                const uint8_t *kp = hi % 2 ? keep : NULL;
                ops->attn_scores(q, group, hd, rows, off, kp, N, 0.125f, att32, N);
                ops->attn_scores_f16(q, group, hd, hrows, off, kp, N, 0.125f, att16, N);
                CHECKF(memcmp(att16, att32, sizeof(float) * (size_t)group * N) == 0, "scores isa %d hd %d g %d", isa, hd, group);
                for (int i = 0; i < group * N; i++)
                    att32[i] = att32[i] == -INFINITY || i % 17 == 3 ? 0.0f : (float)((i * 29 % 97) + 1) / 4000.0f;
                ops->attn_wsum(att32, N, group, hd, rows, off, N, o32);
                ops->attn_wsum_f16(att32, N, group, hd, hrows, off, N, o16);
                CHECKF(memcmp(o16, o32, sizeof(float) * (size_t)group * hd) == 0, "wsum isa %d hd %d g %d", isa, hd, group);
            }
    }
}

/* The unnormalised softmax of each ISA against the plain one: the same max (exact), every e^(a - m)
 * within the vector exp's error, masked entries exactly 0, the sum within the same relative error;
 * an all-masked row gives m = -inf, l = 0 and zeros. */
TEST(kernels_softmax_part) {
    enum { N = 1031 };
    static float a[N], b[N];
    for (int isa = CPU_ISA_AVX2; isa <= CPU_ISA_AVX512; isa++) {
        if (!isa_available((cpu_isa)isa)) continue;
        const cpu_f32_ops *fast = cpu_f32_ops_for((cpu_isa)isa), *ref = cpu_f32_ops_for(CPU_ISA_GENERIC);
        const int lens[] = {1, 7, 8, 9, 64, 128, 1031};
        for (int li = 0; li < 7; li++) {
            int n = lens[li];
            for (int j = 0; j < n; j++) a[j] = b[j] = j % 17 == 3 ? -INFINITY : rndf() * 30.0f;
            float ma, la, mb, lb;
            ref->softmax_part(a, n, &ma, &la);
            fast->softmax_part(b, n, &mb, &lb);
            CHECKF(ma == mb, "isa %d n %d: max %g vs %g", isa, n, ma, mb);
            CHECKF(fabsf(la - lb) <= 1e-6f * la, "isa %d n %d: sum %g vs %g", isa, n, la, lb);
            for (int j = 0; j < n; j++) {
                if (j % 17 == 3) CHECK(a[j] == 0.0f && b[j] == 0.0f);
                else CHECKF(fabsf(a[j] - b[j]) <= 1e-6f * a[j] + 1e-30f, "isa %d n %d j %d: %g vs %g", isa, n, j, a[j], b[j]);
            }
        }
        for (int j = 0; j < 20; j++) b[j] = -INFINITY;
        float m, l;
        fast->softmax_part(b, 20, &m, &l);
        CHECK(isinf(m) && m < 0 && l == 0.0f);
        for (int j = 0; j < 20; j++) CHECK(b[j] == 0.0f);
    }
}

/* The f16 rows a KV record is written with: each ISA's f32_to_f16 gives half.h's bits for every
 * input (all 2^32 were compared once by hand; here the edges and a million random patterns), over
 * lengths that leave a tail after the vector part. */
TEST(kernels_f32_to_f16_rows) {
    enum { N = 1 << 20 };
    static float x[N];
    static uint16_t want[N], got[N + 1];
    const uint32_t edge[] = {0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu,
                             0x33000000u, 0x33000001u, 0x337fffffu, 0x387fe000u, 0x387ff000u, 0x38800000u,
                             0x477fefffu, 0x477ff000u, 0x3f801000u, 0x3f803000u, 0x00000001u, 0x3f7fffffu};
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        if (i < (int)(sizeof edge / sizeof edge[0])) u = edge[i];
        else s ^= s << 13, s ^= s >> 17, s ^= s << 5, u = s;
        memcpy(&x[i], &u, 4);
        want[i] = tkv_f32_to_f16(x[i]);
    }
    CHECK(want[0] == 0 && want[1] == 0x8000 && want[2] == 0x7c00 && want[4] == 0x7e00 && want[5] == 0x7e00 &&
          want[6] == 0xffff && want[7] == 0 && want[8] == 1 && want[13] == 0x7bff && want[14] == 0x7c00 &&
          want[15] == 0x3c00 && want[16] == 0x3c02);
    for (int isa = CPU_ISA_GENERIC; isa <= CPU_ISA_AVX512; isa++) {
        if (!isa_available((cpu_isa)isa)) continue;
        const cpu_f32_ops *ops = cpu_f32_ops_for((cpu_isa)isa);
        const int64_t lens[] = {N, 7, 9, 31};
        for (int li = 0; li < 4; li++) {
            memset(got, 0xa5, sizeof got);
            ops->f32_to_f16(x + li, got, lens[li]);
            CHECKF(!memcmp(got, want + li, (size_t)lens[li] * 2), "%s, %lld values", cpu_isa_name((cpu_isa)isa),
                   (long long)lens[li]);
            CHECK(got[lens[li]] == 0xa5a5); /* nothing written past n */
        }
    }
}
