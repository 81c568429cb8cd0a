/* ops_impl.h — internal to src/backend/cpu: block layouts (FORMATS.md 2.4–2.5, 2.7), the kernel
 * symbols of every ISA variant, and small helpers they share. The dispatch tables in cpu_detect.c
 * are the only place that maps (type, isa) to these functions; nothing outside backend/cpu includes
 * this header.
 *
 * Weight blocks are read through byte offsets (they come from a file, only 2-byte aligned).
 * Activation blocks are produced and consumed by this code only, so they are plain structs whose
 * sizes are checked against the ggml sizes below. */
#ifndef TKV_CPU_OPS_IMPL_H
#define TKV_CPU_OPS_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/ops.h"

/* ggml type ids and block geometry (FORMATS.md 2.1), local so the kernels do not depend on the
 * gguf module. */
enum {
    CPU_T_F32 = 0, CPU_T_F16 = 1, CPU_T_Q4_0 = 2, CPU_T_Q4_1 = 3, CPU_T_Q5_0 = 6, CPU_T_Q5_1 = 7,
    CPU_T_Q8_0 = 8, CPU_T_Q8_1 = 9, CPU_T_Q4_K = 12, CPU_T_Q5_K = 13, CPU_T_Q6_K = 14, CPU_T_Q8_K = 15,
    CPU_T_BF16 = 30,
    /* tierkv's own layouts (repack.c), never in a file: ids above any ggml type */
    CPU_T_Q4_KX = 1012, CPU_T_Q6_KX = 1014, CPU_T_Q8_KX = 1015, CPU_T_Q8_KX6 = 1016,
    CPU_T_Q5_0X = 1006, CPU_T_Q8_0X = 1008, CPU_T_Q8_0XA = 1017, /* repack32.c */
};
#define CPU_QK 32   /* elements per 32-block */
#define CPU_QKK 256 /* elements per K super-block */
#define CPU_QKX 128 /* elements per Q5_0X / Q8_0X group (four 32-blocks) */
enum {
    CPU_BS_Q4_0 = 18, CPU_BS_Q4_1 = 20, CPU_BS_Q5_0 = 22, CPU_BS_Q5_1 = 24, CPU_BS_Q8_0 = 34,
    CPU_BS_Q8_1 = 36, CPU_BS_Q4_K = 144, CPU_BS_Q5_K = 176, CPU_BS_Q6_K = 210, CPU_BS_Q8_K = 292,
    CPU_BS_Q4_KX = 144, CPU_BS_Q6_KX = 210, CPU_BS_Q5_0X = 4 * CPU_BS_Q5_0, CPU_BS_Q8_0X = 4 * CPU_BS_Q8_0,
    CPU_BS_Q8_0XA = 192, CPU_BS_Q8_KX = 352, CPU_BS_Q8_KX6 = 352,
};

typedef struct {
    uint16_t d;     /* f16 scale */
    int8_t qs[32];
} cpu_block_q8_0;
typedef struct {
    uint16_t d;     /* f16 scale */
    uint16_t s;     /* f16 of d * sum(qs), d unrounded */
    int8_t qs[32];
} cpu_block_q8_1;
typedef struct {
    float d;            /* f32 scale, not rounded */
    int8_t qs[256];
    int16_t bsums[16];  /* sums of 16 consecutive qs */
} cpu_block_q8_K;
/* Q8_K activations for Q4_KX weights (repack.c): qs in the Q4_KX vector order; bsums as Q8_K's;
 * ms[s] = d * (bsums[2s] + bsums[2s+1]), sub-block s's sum as f32, for the AVX2 tile's mins term.
 * qs and ms come first and the block is 11 * 32 bytes, so in a 64-byte aligned row every 32-byte
 * vector the tiles load lies inside one cache line (with d first, half of them straddled two). */
typedef struct {
    int8_t qs[256];
    float ms[8];
    float d;
    int16_t bsums[16];
    uint8_t pad[28];
} cpu_block_q8_KX;
/* Q8_K activations for Q6_KX weights (repack.c): qs in the Q6_KX vector order; no bsums (no Q6_KX
 * kernel reads them); c[h][s] = 32 * the sum of elements 8h..8h+7 of 16-element sub-block s
 * (|.| <= 32512), the offset of Q6_K's q - 32 for the 8 products the AVX2 tile adds per i16 lane.
 * Laid out like Q8_KX: the vectors first, 11 * 32 bytes. */
typedef struct {
    int8_t qs[256];
    int16_t c[2][16];
    float d;
    uint8_t pad[28];
} cpu_block_q8_KX6;
/* Q8_0 activations for Q5_0X / Q8_0X weights, four blocks in the vector order of repack32.c */
typedef struct {
    float d[8];       /* i32 lane l: the f16 scale of block l/2, as f32 */
    int32_t c[8];     /* i32 lane l: 16 * the sum of the qs it covers (Q5_0X's offset) */
    int8_t qs[128];   /* vector m, byte 8j + b: element 8m + b of block j */
} cpu_block_q8_0XA;
_Static_assert(sizeof(cpu_block_q8_0XA) == CPU_BS_Q8_0XA, "q8_0XA layout");
_Static_assert(sizeof(cpu_block_q8_0) == CPU_BS_Q8_0, "q8_0 layout");
_Static_assert(sizeof(cpu_block_q8_1) == CPU_BS_Q8_1, "q8_1 layout");
_Static_assert(sizeof(cpu_block_q8_K) == CPU_BS_Q8_K, "q8_K layout");
_Static_assert(sizeof(cpu_block_q8_KX) == CPU_BS_Q8_KX, "q8_KX layout");
_Static_assert(sizeof(cpu_block_q8_KX6) == CPU_BS_Q8_KX6, "q8_KX6 layout");

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (FORMATS.md 2.5). */
static inline void cpu_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q6_K 6-bit quant (0..63) of element e (0..255) of block b (FORMATS.md 2.5). */
static inline int cpu_q6k_q(const uint8_t *b, int e) {
    int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t *L = b + 64 * h, *H = b + 128 + 32 * h;
    int lo = (quarter & 1) ? L[l + 32] : L[l];
    lo = (quarter & 2) ? lo >> 4 : lo & 0x0F;
    return lo | (((H[l] >> (2 * quarter)) & 3) << 4);
}

/* Round to nearest, ties to even, for |v| < 2^22: the magic-number trick llama.cpp's Q8_K
 * quantizer uses; identical to nearbyintf under the default rounding mode. */
static inline int cpu_round_even(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    __builtin_memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}


typedef void (*cpu_quant_fn)(const float *x, void *y, int64_t n);
typedef void (*cpu_dot_fn)(int64_t n, float *s, const void *w, const void *a);
typedef void (*cpu_dottile_fn)(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                               const void *a, size_t a_stride, int nx);
typedef void (*cpu_deq_fn)(const void *w, float *y, int64_t n);

#define CPU_DECL_QUANT(isa, t) void cpu_##isa##_quant_##t(const float *x, void *y, int64_t n);
#define CPU_DECL_DEQ(isa, t) void cpu_##isa##_dequant_##t(const void *w, float *y, int64_t n);
#define CPU_DECL_DOT(isa, t)                                                                   \
    void cpu_##isa##_dot_##t(int64_t n, float *s, const void *w, const void *a);               \
    void cpu_##isa##_dottile_##t(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr, \
                                 const void *a, size_t a_stride, int nx);
#define CPU_DECL_F32(isa)                                                    \
    float cpu_##isa##_dot_f32v(const float *a, const float *b, int64_t n);   \
    void cpu_##isa##_axpy_f32(float *y, float a, const float *x, int64_t n); \
    void cpu_##isa##_scale_f32(float *y, float a, int64_t n);                                      \
    void cpu_##isa##_swiglu(float *gate, const float *up, int64_t n);                              \
    void cpu_##isa##_attn_scores(const float *q, int group, int hd, const float *const *rows, size_t off, \
                                 const uint8_t *keep, int n, float scale, float *att, size_t stride);     \
    void cpu_##isa##_attn_wsum(const float *att, size_t stride, int group, int hd, const float *const *rows, \
                               size_t off, int n, float *out);                                  \
    void cpu_##isa##_softmax_part(float *a, int n, float *m, float *l);                          \
    void cpu_##isa##_attn_scores_f16(const float *q, int group, int hd, const uint16_t *const *rows, size_t off, \
                                     const uint8_t *keep, int n, float scale, float *att, size_t stride); \
    void cpu_##isa##_attn_wsum_f16(const float *att, size_t stride, int group, int hd, const uint16_t *const *rows, \
                                   size_t off, int n, float *out);                              \
    void cpu_##isa##_attn_scores_t2(const float *q, int group, int hd, const uint8_t *const *recs, const kvq_head *kh, \
                                    const float *qc, const uint8_t *keep, int n, float scale, float *att, size_t stride); \
    void cpu_##isa##_attn_wsum_t2(const float *att, size_t stride, int group, int hd, const void *const *rows, int f16, \
                                  size_t off, const uint8_t *const *recs, const kvq_head *vh, int n, float *out); \
    void cpu_##isa##_f32_to_f16(const float *x, uint16_t *y, int64_t n);

/* vec_dot_tile: the reference is vec_dot per (weight row, activation row), so equality holds by
 * construction. */
#define CPU_GEN_NX(t)                                                                                          \
    void cpu_gen_dottile_##t(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr, \
                             const void *a, size_t a_stride, int nx) {                                     \
        for (int k = 0; k < nx; k++)                                                                       \
            for (int r = 0; r < nr; r++)                                                                   \
                cpu_gen_dot_##t(n, s + (size_t)k * s_stride + r, (const uint8_t *)w + (size_t)r * w_stride, \
                                (const uint8_t *)a + (size_t)k * a_stride);                                \
    }
/* generic: everything */
CPU_DECL_QUANT(gen, f32) CPU_DECL_QUANT(gen, f16) CPU_DECL_QUANT(gen, bf16)
CPU_DECL_QUANT(gen, q8_0) CPU_DECL_QUANT(gen, q8_1) CPU_DECL_QUANT(gen, q8_K)
CPU_DECL_DEQ(gen, f32) CPU_DECL_DEQ(gen, f16) CPU_DECL_DEQ(gen, bf16) CPU_DECL_DEQ(gen, q4_0)
CPU_DECL_DEQ(gen, q4_1) CPU_DECL_DEQ(gen, q5_0) CPU_DECL_DEQ(gen, q5_1) CPU_DECL_DEQ(gen, q8_0)
CPU_DECL_DEQ(gen, q4_K) CPU_DECL_DEQ(gen, q5_K) CPU_DECL_DEQ(gen, q6_K)
CPU_DECL_DOT(gen, f32) CPU_DECL_DOT(gen, f16) CPU_DECL_DOT(gen, bf16) CPU_DECL_DOT(gen, q4_0)
CPU_DECL_DOT(gen, q4_1) CPU_DECL_DOT(gen, q5_0) CPU_DECL_DOT(gen, q5_1) CPU_DECL_DOT(gen, q8_0)
CPU_DECL_DOT(gen, q4_K) CPU_DECL_DOT(gen, q5_K) CPU_DECL_DOT(gen, q6_K)
CPU_DECL_F32(gen)
/* repack.c: Q4_KX weights against Q8_KX activations */
CPU_DECL_QUANT(gen, q8_KX) CPU_DECL_DEQ(gen, q4_KX) CPU_DECL_DOT(gen, q4_KX)
CPU_DECL_QUANT(gen, q8_KX6) CPU_DECL_DEQ(gen, q6_KX) CPU_DECL_DOT(gen, q6_KX)
/* repack32.c: Q5_0X / Q8_0X weights against Q8_0XA activations */
CPU_DECL_QUANT(gen, q8_0XA) CPU_DECL_DEQ(gen, q5_0X) CPU_DECL_DOT(gen, q5_0X)
CPU_DECL_DEQ(gen, q8_0X) CPU_DECL_DOT(gen, q8_0X)
void cpu_repack_q5_0_group(uint8_t *g); /* 4 Q5_0 blocks -> 1 Q5_0X group, in place */
void cpu_repack_q8_0_group(uint8_t *g); /* 4 Q8_0 blocks -> 1 Q8_0X group, in place */
/* a row of Q8_KX / Q8_KX6: each 256 values quantized to Q8_K by q8_K (the ISA's quantizer), then
 * reordered and given their sums */
void cpu_quant_q8_KX_with(cpu_quant_fn q8_K, const float *x, void *y, int64_t n);
void cpu_quant_q8_KX6_with(cpu_quant_fn q8_K, const float *x, void *y, int64_t n);

/* AVX2 and AVX-512: the hot paths; the tables fall back to gen for the rest. */
#define CPU_DECL_FAST(isa)                                                                   \
    CPU_DECL_QUANT(isa, q8_0) CPU_DECL_QUANT(isa, q8_K)                                      \
    CPU_DECL_DOT(isa, f32) CPU_DECL_DOT(isa, f16) CPU_DECL_DOT(isa, bf16)                    \
    CPU_DECL_DOT(isa, q4_0) CPU_DECL_DOT(isa, q5_0) CPU_DECL_DOT(isa, q8_0)                  \
    CPU_DECL_DOT(isa, q4_K) CPU_DECL_DOT(isa, q5_K) CPU_DECL_DOT(isa, q6_K)                  \
    CPU_DECL_QUANT(isa, q8_KX) CPU_DECL_DOT(isa, q4_KX)                                      \
    CPU_DECL_QUANT(isa, q8_KX6) CPU_DECL_DOT(isa, q6_KX)                                     \
    CPU_DECL_QUANT(isa, q8_0XA) CPU_DECL_DOT(isa, q5_0X) CPU_DECL_DOT(isa, q8_0X)            \
    CPU_DECL_F32(isa)
CPU_DECL_FAST(avx2)
CPU_DECL_FAST(avx512)

#endif
