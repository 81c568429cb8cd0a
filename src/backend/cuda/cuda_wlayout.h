/* cuda_wlayout.h — the device layouts of weight matrices in the CUDA backend, and the decoder of
 * one "unit" of a row: the elements one lane of a warp turns into f32 from one 16-byte load (two or
 * three smaller loads for Q6_K). Shared, word for word, by the host (C: the repack at prepare time
 * and the tests that run without a GPU) and the device (the matmul and embed kernels), so the
 * tests here check the very element mapping the kernels use.
 *
 * Layouts (FORMATS.md 2.3-2.5 give the file blocks). A prepared matrix is up to three arrays, each
 * n_out rows of a fixed stride, each 16-byte aligned per row (rows are whole blocks, n_in a
 * multiple of 32, or of 256 for K-quants):
 *   F32, F16, BF16  a: the file's rows
 *   Q8_0            a: int8 quants [n_in]            b: f32 scale per 32-block
 *   Q4_0            a: nibbles [n_in/2] (16 B/block) b: f32 scale per block
 *   Q5_0            a: nibbles [n_in/2]              b: {f32 d, u32 qh} per block (8 B)
 *   Q4_K            a: qs [128 B per 256]            b: the block's 16 header bytes (d, dmin, scales)
 *   Q6_K            a: ql then qh [192 B per 256]    b: int8 scales [16 per 256]   c: f32 d per 256
 * f16 scale fields become f32 (exact); no other value changes, so a unit's decoded elements are bit
 * for bit the generic CPU dequantisation (products in the order FORMATS.md states, never fused:
 * CW_MUL/CW_SUB keep nvcc from contracting them into an fma).
 *
 * Units: unit u of a row holds cw_unit(t) elements in cw_nspan(t) spans of consecutive elements;
 * span s starts at element cw_span_base(t, u, s). Lane l of a warp reads units l, l + 32, ...
 * Invariants: decoders read only unit u's bytes (and its block's scale fields); loops have constant
 * trip counts, so register arrays stay in registers once unrolled. Not here: the dot product, the
 * x tiling (cuda_matmul.cu). */
#ifndef TKV_CUDA_WLAYOUT_H
#define TKV_CUDA_WLAYOUT_H
#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include "base/half.h" /* the host pass's conversions (the device pass uses the intrinsics) */
#ifdef __CUDACC__
#include <cuda_fp16.h>
#define CW_FN static __host__ __device__ __forceinline__
#else
#define CW_FN static inline
#endif
#ifdef __CUDA_ARCH__ /* the device pass only: the host compiler does not know the pragma */
#define CW_UNROLL _Pragma("unroll")
#else
#define CW_UNROLL
#endif

/* ggml ids of the types the CUDA backend runs (FORMATS.md 2.1) */
enum { CW_T_F32 = 0, CW_T_F16 = 1, CW_T_Q4_0 = 2, CW_T_Q5_0 = 6, CW_T_Q8_0 = 8, CW_T_Q4_K = 12, CW_T_Q6_K = 14,
       CW_T_BF16 = 30 };
/* be_mat.type of a prepared matrix: CW_TYPE_TAG | ggml type (no ggml id has this bit) */
#define CW_TYPE_TAG 0x40000000u

typedef struct {
    uint32_t type;          /* ggml type of the file (CW_T_*) */
    int64_t n_in, n_out;
    const uint8_t *a, *b, *c; /* the arrays above (device pointers on the device, host ones in tests) */
    int64_t sa, sb, sc;     /* bytes per row of each array */
} cw_mat;

CW_FN int cw_supported(uint32_t t) {
    return t == CW_T_F32 || t == CW_T_F16 || t == CW_T_BF16 || t == CW_T_Q8_0 || t == CW_T_Q4_0 || t == CW_T_Q5_0 ||
           t == CW_T_Q4_K || t == CW_T_Q6_K;
}
/* elements per unit, spans per unit */
CW_FN int cw_unit(uint32_t t) { return t == CW_T_F32 ? 4 : (t == CW_T_F16 || t == CW_T_BF16) ? 8 : t == CW_T_Q8_0 ? 16 : 32; }
CW_FN int cw_nspan(uint32_t t) { return t == CW_T_Q6_K ? 4 : (t == CW_T_Q4_0 || t == CW_T_Q5_0 || t == CW_T_Q4_K) ? 2 : 1; }
/* elements per file block (n_in must be a multiple) */
CW_FN int cw_block(uint32_t t) { return (t == CW_T_Q4_K || t == CW_T_Q6_K) ? 256 : 32; }

CW_FN int64_t cw_span_base(uint32_t t, int64_t u, int s) {
    switch (t) {
    case CW_T_Q4_0: case CW_T_Q5_0: return 32 * u + 16 * s;
    case CW_T_Q4_K: return 256 * (u >> 3) + 64 * ((u & 7) >> 1) + 16 * (u & 1) + 32 * s;
    case CW_T_Q6_K: return 256 * (u >> 3) + 128 * ((u & 7) >> 2) + 8 * (u & 3) + 32 * s;
    default: return (int64_t)cw_unit(t) * u;
    }
}

/* ---- loads and conversions (device: vector loads through the read-only path) ---- */

typedef struct { uint32_t x, y, z, w; } cw_u4;
typedef struct { uint32_t x, y; } cw_u2;

CW_FN cw_u4 cw_ld16(const uint8_t *p) {
    cw_u4 r;
#ifdef __CUDA_ARCH__
    uint4 v = __ldg((const uint4 *)p);
    r.x = v.x, r.y = v.y, r.z = v.z, r.w = v.w;
#else
    memcpy(&r, p, 16);
#endif
    return r;
}
CW_FN cw_u2 cw_ld8(const uint8_t *p) {
    cw_u2 r;
#ifdef __CUDA_ARCH__
    uint2 v = __ldg((const uint2 *)p);
    r.x = v.x, r.y = v.y;
#else
    memcpy(&r, p, 8);
#endif
    return r;
}
CW_FN uint32_t cw_ld4(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return __ldg((const uint32_t *)p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
CW_FN float cw_ldf(const uint8_t *p) {
    uint32_t u = cw_ld4(p);
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
CW_FN float cw_f16(uint32_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)h));
#else
    return tkv_f16_to_f32((uint16_t)h);
#endif
}
CW_FN float cw_bf16(uint32_t h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(h << 16);
#else
    return tkv_bf16_to_f32((uint16_t)h);
#endif
}
CW_FN float cw_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
/* products and differences rounded one at a time, as the CPU reference does them */
CW_FN float cw_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
CW_FN float cw_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
CW_FN uint32_t cw_byte(const uint32_t *w, int k) { return (w[k >> 2] >> (8 * (k & 3))) & 0xffu; }

/* Q4_K/Q5_K 6-bit scale and min of sub-block j from the 12 scale bytes s (FORMATS.md 2.5) */
CW_FN void cw_k4_scale_min(const uint32_t *hw, int j, float *sc, float *m) {
    /* hw: the 16 header bytes as words; scale byte i is header byte 4 + i */
    if (j < 4) {
        *sc = (float)(cw_byte(hw, 4 + j) & 63u);
        *m = (float)(cw_byte(hw, 8 + j) & 63u);
    } else {
        uint32_t lo = cw_byte(hw, 4 + j + 4), hi_sc = cw_byte(hw, 4 + j - 4), hi_m = cw_byte(hw, 4 + j);
        *sc = (float)((lo & 0x0fu) | ((hi_sc >> 6) << 4));
        *m = (float)((lo >> 4) | ((hi_m >> 6) << 4));
    }
}

/* ---- the decoders: v[cw_unit(t)] in span order ---- */

CW_FN void cw_unit_f32(const cw_mat *m, int64_t row, int64_t u, float *v) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    v[0] = cw_bits(q.x), v[1] = cw_bits(q.y), v[2] = cw_bits(q.z), v[3] = cw_bits(q.w);
}
CW_FN void cw_unit_16(const cw_mat *m, int64_t row, int64_t u, float *v, int bf) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    uint32_t w[4] = {q.x, q.y, q.z, q.w};
CW_UNROLL
    for (int k = 0; k < 8; k++) {
        uint32_t h = (w[k >> 1] >> (16 * (k & 1))) & 0xffffu;
        v[k] = bf ? cw_bf16(h) : cw_f16(h);
    }
}
CW_FN void cw_unit_q8_0(const cw_mat *m, int64_t row, int64_t u, float *v) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    float d = cw_ldf(m->b + row * m->sb + 4 * (u >> 1));
    uint32_t w[4] = {q.x, q.y, q.z, q.w};
CW_UNROLL
    for (int k = 0; k < 16; k++) v[k] = cw_mul(d, (float)(int8_t)cw_byte(w, k));
}
CW_FN void cw_unit_q4_0(const cw_mat *m, int64_t row, int64_t u, float *v) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    float d = cw_ldf(m->b + row * m->sb + 4 * u);
    uint32_t w[4] = {q.x, q.y, q.z, q.w};
CW_UNROLL
    for (int k = 0; k < 16; k++) {
        uint32_t b = cw_byte(w, k);
        v[k] = cw_mul(d, (float)((int)(b & 15u) - 8));
        v[16 + k] = cw_mul(d, (float)((int)(b >> 4) - 8));
    }
}
CW_FN void cw_unit_q5_0(const cw_mat *m, int64_t row, int64_t u, float *v) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    cw_u2 dh = cw_ld8(m->b + row * m->sb + 8 * u);
    float d = cw_bits(dh.x);
    uint32_t qh = dh.y, w[4] = {q.x, q.y, q.z, q.w};
CW_UNROLL
    for (int k = 0; k < 16; k++) {
        uint32_t b = cw_byte(w, k);
        int lo = (int)((b & 15u) | (((qh >> k) & 1u) << 4)), hi = (int)((b >> 4) | (((qh >> (k + 16)) & 1u) << 4));
        v[k] = cw_mul(d, (float)(lo - 16));
        v[16 + k] = cw_mul(d, (float)(hi - 16));
    }
}
CW_FN void cw_unit_q4_k(const cw_mat *m, int64_t row, int64_t u, float *v) {
    cw_u4 q = cw_ld16(m->a + row * m->sa + 16 * u);
    cw_u4 h = cw_ld16(m->b + row * m->sb + 16 * (u >> 3));
    uint32_t hw[4] = {h.x, h.y, h.z, h.w}, w[4] = {q.x, q.y, q.z, q.w};
    float d = cw_f16(h.x & 0xffffu), dmin = cw_f16(h.x >> 16);
    int c = (int)((u & 7) >> 1);
    float sc0, m0, sc1, m1;
    cw_k4_scale_min(hw, 2 * c, &sc0, &m0);
    cw_k4_scale_min(hw, 2 * c + 1, &sc1, &m1);
    float d0 = cw_mul(d, sc0), o0 = cw_mul(dmin, m0), d1 = cw_mul(d, sc1), o1 = cw_mul(dmin, m1);
CW_UNROLL
    for (int k = 0; k < 16; k++) {
        uint32_t b = cw_byte(w, k);
        v[k] = cw_sub(cw_mul(d0, (float)(b & 15u)), o0);
        v[16 + k] = cw_sub(cw_mul(d1, (float)(b >> 4)), o1);
    }
}
/* The bytes of unit u of a Q6_K row: 8 of ql for spans 0/2 (l0w) and 1/3 (l1w), 8 of qh (hw), and
 * each span's scale d * sc (ds) */
typedef struct {
    uint32_t l0w[2], l1w[2], hw[2];
    float ds[4];
} cw_q6k_unit;
CW_FN cw_q6k_unit cw_q6k_load(const cw_mat *m, int64_t row, int64_t u) {
    int64_t sb = u >> 3;
    int i = (int)(u & 7), h = i >> 2, l0 = 8 * (i & 3);
    const uint8_t *base = m->a + row * m->sa + 192 * sb;
    cw_u2 L0 = cw_ld8(base + 64 * h + l0), L1 = cw_ld8(base + 64 * h + 32 + l0), H = cw_ld8(base + 128 + 32 * h + l0);
    cw_u4 S = cw_ld16(m->b + row * m->sb + 16 * sb);
    float d = cw_ldf(m->c + row * m->sc + 4 * sb);
    uint32_t sw[4] = {S.x, S.y, S.z, S.w};
    cw_q6k_unit r;
    r.l0w[0] = L0.x, r.l0w[1] = L0.y, r.l1w[0] = L1.x, r.l1w[1] = L1.y, r.hw[0] = H.x, r.hw[1] = H.y;
CW_UNROLL
    for (int s = 0; s < 4; s++) r.ds[s] = cw_mul(d, (float)(int8_t)cw_byte(sw, 8 * h + 2 * s + (l0 >> 4)));
    return r;
}
CW_FN void cw_unit_q6_k(const cw_mat *m, int64_t row, int64_t u, float *v) {
    const cw_q6k_unit q = cw_q6k_load(m, row, u);
    const float *ds = q.ds;
CW_UNROLL
    for (int k = 0; k < 8; k++) {
        uint32_t a0 = cw_byte(q.l0w, k), a1 = cw_byte(q.l1w, k), hh = cw_byte(q.hw, k);
        int q0 = (int)((a0 & 15u) | ((hh & 3u) << 4)), q1 = (int)((a1 & 15u) | (((hh >> 2) & 3u) << 4));
        int q2 = (int)((a0 >> 4) | (((hh >> 4) & 3u) << 4)), q3 = (int)((a1 >> 4) | (((hh >> 6) & 3u) << 4));
        v[k] = cw_mul(ds[0], (float)(q0 - 32));
        v[8 + k] = cw_mul(ds[1], (float)(q1 - 32));
        v[16 + k] = cw_mul(ds[2], (float)(q2 - 32));
        v[24 + k] = cw_mul(ds[3], (float)(q3 - 32));
    }
}

/* ---- the integer decoders (cuda_mmq.cu's products against an activation rounded to int8) ----
 * Unit u of a Q4_0, Q5_0, Q4_K or Q6_K row as small integers: q[] holds cw_unit(t) signed bytes in
 * span order, four a word (little-endian, as dp4a reads them), and element k of span s is
 * cw_sub(cw_mul(sc[s], q_k), off[s]): bit for bit the float decoder's value (off is 0 but for Q4_K's
 * mins, and x - 0 is x). Each span's SL elements sit in one 32-block of the row. */

/* byte-wise a - b for bytes of a and b below 0x80 (no borrow crosses a byte): signed bytes */
CW_FN uint32_t cw_bsub(uint32_t a, uint32_t b) { return ((a | 0x80808080u) - b) ^ 0x80808080u; }
/* bit 4 of each byte from the low 4 bits of x (Q5_0's fifth bits) */
CW_FN uint32_t cw_bit4s(uint32_t x) { return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25); }

CW_FN void cw_iunit_q4_0(const cw_mat *m, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    cw_u4 v = cw_ld16(m->a + row * m->sa + 16 * u);
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
    sc[0] = sc[1] = cw_ldf(m->b + row * m->sb + 4 * u), off[0] = off[1] = 0.0f;
CW_UNROLL
    for (int i = 0; i < 4; i++) {
        q[i] = cw_bsub(w[i] & 0x0f0f0f0fu, 0x08080808u);
        q[4 + i] = cw_bsub((w[i] >> 4) & 0x0f0f0f0fu, 0x08080808u);
    }
}
CW_FN void cw_iunit_q5_0(const cw_mat *m, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    cw_u4 v = cw_ld16(m->a + row * m->sa + 16 * u);
    cw_u2 dh = cw_ld8(m->b + row * m->sb + 8 * u);
    uint32_t w[4] = {v.x, v.y, v.z, v.w}, qh = dh.y;
    sc[0] = sc[1] = cw_bits(dh.x), off[0] = off[1] = 0.0f;
CW_UNROLL
    for (int i = 0; i < 4; i++) {
        q[i] = cw_bsub((w[i] & 0x0f0f0f0fu) | cw_bit4s(qh >> (4 * i)), 0x10101010u);
        q[4 + i] = cw_bsub(((w[i] >> 4) & 0x0f0f0f0fu) | cw_bit4s(qh >> (16 + 4 * i)), 0x10101010u);
    }
}
CW_FN void cw_iunit_q4_k(const cw_mat *m, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    cw_u4 v = cw_ld16(m->a + row * m->sa + 16 * u);
    cw_u4 h = cw_ld16(m->b + row * m->sb + 16 * (u >> 3));
    uint32_t hw[4] = {h.x, h.y, h.z, h.w}, w[4] = {v.x, v.y, v.z, v.w};
    float d = cw_f16(h.x & 0xffffu), dmin = cw_f16(h.x >> 16), s0, m0, s1, m1;
    int c = (int)((u & 7) >> 1);
    cw_k4_scale_min(hw, 2 * c, &s0, &m0);
    cw_k4_scale_min(hw, 2 * c + 1, &s1, &m1);
    sc[0] = cw_mul(d, s0), off[0] = cw_mul(dmin, m0), sc[1] = cw_mul(d, s1), off[1] = cw_mul(dmin, m1);
CW_UNROLL
    for (int i = 0; i < 4; i++) q[i] = w[i] & 0x0f0f0f0fu, q[4 + i] = (w[i] >> 4) & 0x0f0f0f0fu;
}
CW_FN void cw_iunit_q6_k(const cw_mat *m, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    const cw_q6k_unit w = cw_q6k_load(m, row, u);
CW_UNROLL
    for (int s = 0; s < 4; s++) sc[s] = w.ds[s], off[s] = 0.0f;
CW_UNROLL
    for (int j = 0; j < 2; j++) {
        uint32_t a0 = w.l0w[j], a1 = w.l1w[j], hh = w.hw[j];
        q[j] = cw_bsub((a0 & 0x0f0f0f0fu) | ((hh & 0x03030303u) << 4), 0x20202020u);
        q[2 + j] = cw_bsub((a1 & 0x0f0f0f0fu) | (((hh >> 2) & 0x03030303u) << 4), 0x20202020u);
        q[4 + j] = cw_bsub(((a0 >> 4) & 0x0f0f0f0fu) | (((hh >> 4) & 0x03030303u) << 4), 0x20202020u);
        q[6 + j] = cw_bsub(((a1 >> 4) & 0x0f0f0f0fu) | (((hh >> 6) & 0x03030303u) << 4), 0x20202020u);
    }
}
/* 1 for the types with an integer decoder */
CW_FN int cw_has_iunit(uint32_t t) { return t == CW_T_Q4_0 || t == CW_T_Q5_0 || t == CW_T_Q4_K || t == CW_T_Q6_K; }
/* any of them (host code and tests; the kernels call the typed ones) */
CW_FN void cw_iunit_any(const cw_mat *m, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    switch (m->type) {
    case CW_T_Q4_0: cw_iunit_q4_0(m, row, u, q, sc, off); break;
    case CW_T_Q5_0: cw_iunit_q5_0(m, row, u, q, sc, off); break;
    case CW_T_Q4_K: cw_iunit_q4_k(m, row, u, q, sc, off); break;
    case CW_T_Q6_K: cw_iunit_q6_k(m, row, u, q, sc, off); break;
    default: break;
    }
}

/* Any type (host code and tests; the kernels call the typed decoders directly). */
CW_FN void cw_unit_any(const cw_mat *m, int64_t row, int64_t u, float *v) {
    switch (m->type) {
    case CW_T_F32: cw_unit_f32(m, row, u, v); break;
    case CW_T_F16: cw_unit_16(m, row, u, v, 0); break;
    case CW_T_BF16: cw_unit_16(m, row, u, v, 1); break;
    case CW_T_Q8_0: cw_unit_q8_0(m, row, u, v); break;
    case CW_T_Q4_0: cw_unit_q4_0(m, row, u, v); break;
    case CW_T_Q5_0: cw_unit_q5_0(m, row, u, v); break;
    case CW_T_Q4_K: cw_unit_q4_k(m, row, u, v); break;
    case CW_T_Q6_K: cw_unit_q6_k(m, row, u, v); break;
    default: break;
    }
}

/* ---- host side (cuda_wlayout.c) ---- */
#ifdef __cplusplus
extern "C" {
#endif
/* Geometry of the layout of an n_out x n_in matrix of type t in one buffer: the arrays start at
 * off[0..2] (256-byte aligned), rows of stride[0..2] bytes; returns the total bytes (0 if t or n_in
 * is not supported: n_in must be a multiple of the type's block and of 32). */
size_t cw_layout(uint32_t t, int64_t n_in, int64_t n_out, size_t off[3], int64_t stride[3]);
/* Rewrites n_rows file rows (the file's blocks, contiguous) into the three arrays at a, b, c (row
 * strides as cw_layout gives; b and c unused by types without them). */
void cw_repack_rows(uint32_t t, const uint8_t *file, int64_t n_in, int64_t n_rows, uint8_t *a, uint8_t *b, uint8_t *c);
/* One host thread's share of an upload piece: rows [i0, i1) of a piece of nr rows whose first file
 * row is at file, rewritten into stage, which holds the piece's three arrays one after the other
 * (nr rows of stride[0] bytes, then nr of stride[1], then nr of stride[2]), as they go to the device.
 * Threads given disjoint ranges of [0, nr) fill what one call over [0, nr) fills. */
void cw_stage_rows(uint32_t t, const uint8_t *file, int64_t n_in, int64_t nr, uint8_t *stage, int64_t i0, int64_t i1);
#ifdef __cplusplus
}
#endif

#endif
