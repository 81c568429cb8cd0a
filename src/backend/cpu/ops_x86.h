/* ops_x86.h — the SIMD kernel bodies, included once by ops_avx2.c and once by ops_avx512.c, which
 * set CPU_X86_NAME (avx2 / avx512) and their own compiler flags. The kernels work on 256-bit vectors;
 * where AVX512_VNNI is available (__AVX512VNNI__) the integer multiply-accumulate steps become
 * single VNNI instructions (vpdpbusd, vpdpwssd). Those give the same integers as the AVX2 sequences
 * (no i16 pair sum here can saturate: |u8*s8 + u8*s8| <= 2*128*127 < 2^15), so both variants
 * produce the same bits, and the AVX2 build, testable on any x86-64 with AVX2, covers the logic.
 *
 * Every dot product is written once as an R x C tile kernel (always inlined with constant R, C) that
 * unpacks each of R weight blocks once and runs it against C activation rows; vec_dot is the 1 x 1
 * instance. Per output the float operations are the same sequence whatever the tile is, so every
 * vec_dot_tile output equals vec_dot bit for bit. Integer block sums are exact; only the order of
 * f32 additions differs from ops_generic.c.
 *
 * Activation quantizers reproduce ops_generic.c bit for bit: the same f32 products, rounding to
 * nearest even (vroundps), the same max rules. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/ops_impl.h"
#include "base/half.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define X86_CAT3(a, b, c) a##b##c
#define X86_FN3(a, b, c) X86_CAT3(a, b, c)
#define FN(name) X86_FN3(cpu_, CPU_X86_NAME, _##name)
#define INLINE static inline __attribute__((always_inline))

/* ---- helpers ---- */

INLINE float hsum128_ps(__m128 a) {
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

INLINE float hsum_ps(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

INLINE int hsum_i32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

INLINE float f16v(const uint8_t *p) { return _cvtsh_ss(tkv_rd16(p)); }

/* An empty asm that claims to change v: the compiler must keep v as one value in a register here.
 * Without it gcc re-associates the long chains of integer sums in the tile kernels into trees
 * whose partial sums no longer fit in 16 registers (measured: half the loop became spills). */
#define KEEP(v) __asm__("" : "+x"(v))

/* acc + Σ of 4 adjacent u8*s8 products per i32 lane */
INLINE __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#ifdef __AVX512VNNI__
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + Σ of 2 adjacent i16*i16 products per i32 lane */
INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#ifdef __AVX512VNNI__
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set (byte j <- bit j). */
INLINE __m256i bits_to_bytes(uint32_t bits) {
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                    _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high nibbles (16..31). */
INLINE __m256i nibbles32(const uint8_t *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* 4 vectors of 8 i32 (values in i8 range) -> 32 bytes in element order. */
INLINE __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i v = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

INLINE __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

INLINE float hmax_ps(__m256 v) {
    __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_max_ps(a, _mm_movehl_ps(a, a));
    a = _mm_max_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* ---- activation quantizers ---- */

void FN(quant_q8_0)(const float *x, void *y, int64_t n) {
    cpu_block_q8_0 *b = y;
    for (int64_t i = 0; i < n / CPU_QK; i++, x += CPU_QK) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        float amax = hmax_ps(_mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)), _mm256_max_ps(abs_ps(v2), abs_ps(v3))));
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, vid), RNE));
        __m256i q1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, vid), RNE));
        __m256i q2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, vid), RNE));
        __m256i q3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, vid), RNE));
        _mm256_storeu_si256((__m256i *)b[i].qs, pack_i32x32(q0, q1, q2, q3));
        b[i].d = tkv_f32_to_f16(d);
    }
}

void FN(quant_q8_K)(const float *x, void *y, int64_t n) {
    cpu_block_q8_K *b = y;
    for (int64_t i = 0; i < n / CPU_QKK; i++, x += CPU_QKK) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < CPU_QKK; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
        float amax = hmax_ps(m);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* the first element whose |x| is the max gives the signed max */
        int first = 0;
        for (int j = 0; j < CPU_QKK; j += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (mask) { first = j + __builtin_ctz((unsigned)mask); break; }
        }
        float iscale = -127.0f / x[first];
        __m256 vs = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int j = 0; j < CPU_QKK; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(lim, _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs), RNE)));
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), pack_i32x32(q[0], q[1], q[2], q[3]));
            b[i].bsums[j / 16] = (int16_t)hsum_i32(_mm256_add_epi32(q[0], q[1]));
            b[i].bsums[j / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q[2], q[3]));
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- tile kernel scaffolding ---- */

/* A tile kernel `t##_tile(n, s, ss, w, ws, a, st, R, C)` (always inlined with constant R, C) computes
 * s[k*ss + r] = dot(weight row w + r*ws, activation row a + k*st) for r < R, k < C. Inside a block it
 * unpacks each weight row once for the C tokens and reads each activation block once for the R rows;
 * the R*C integer block sums stay in registers. The float steps of every output (one fmadd per block
 * into its own 8-lane accumulator, then one horizontal sum) are the same sequence whatever R and C
 * are, so every tile output equals vec_dot (the 1x1 tile) bit for bit. */
#define TR_MAX 2
#define TC_MAX 8
#define UNROLL _Pragma("GCC unroll 8")

/* vec_dot and vec_dot_tile of a type: R x C tiles, then the leftover rows and tokens one at a time. */
#define X86_DOT_TILE(t, R, C)                                                                                   \
    void FN(dot_##t)(int64_t n, float *s, const void *w, const void *a) { t##_tile(n, s, 0, w, 0, a, 0, 1, 1); } \
    void FN(dottile_##t)(int64_t n, float *s, size_t ss, const void *w, size_t ws, int nr, const void *a,         \
                         size_t st, int nx) {                                                                     \
        const uint8_t *wp = w, *ap = a;                                                                           \
        int r = 0;                                                                                                \
        for (; r + R <= nr; r += R) {                                                                             \
            int k = 0;                                                                                            \
            for (; k + C <= nx; k += C) t##_tile(n, s + k * ss + r, ss, wp + r * ws, ws, ap + k * st, st, R, C);  \
            for (; k < nx; k++) t##_tile(n, s + k * ss + r, ss, wp + r * ws, ws, ap + k * st, st, R, 1);          \
        }                                                                                                         \
        for (; r < nr; r++) {                                                                                     \
            int k = 0;                                                                                            \
            for (; k + C <= nx; k += C) t##_tile(n, s + k * ss + r, ss, wp + r * ws, ws, ap + k * st, st, 1, C);  \
            for (; k < nx; k++) t##_tile(n, s + k * ss + r, ss, wp + r * ws, ws, ap + k * st, st, 1, 1);          \
        }                                                                                                         \
    }

/* ---- 32-block weights against Q8_0: d_w*d_a*Σ q_w q_a with q_w signed bytes ---- */

/* lane k (0..3) of each 128-bit half of v, in all 8 lanes (v holds the same 4 floats in both halves) */
INLINE __m256 lane_bcast4(__m256 v, int k) {
    return k == 0 ? _mm256_shuffle_ps(v, v, 0x00)
         : k == 1 ? _mm256_shuffle_ps(v, v, 0x55)
         : k == 2 ? _mm256_shuffle_ps(v, v, 0xaa)
                  : _mm256_shuffle_ps(v, v, 0xff);
}

/* signed w bytes · signed a bytes as |w| (u8) · sign(a, w) (s8); |-128| = 128 still fits u8.
 * The scale of each product is the f32 product dw*da whatever the tile: for C > 1 tokens the C
 * activation scales are converted and multiplied by dw as one 4-lane vector (the same IEEE
 * products as the scalar path of the 1 x 1 tile, so tiles still equal vec_dot bit for bit). */
#define Q8_0_KERNEL(t, BS, UNPACK, R, C)                                                                          \
    INLINE __m256i t##_unpack(const uint8_t *w) { return UNPACK; }                                                \
    INLINE void t##_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, \
                         int nr, int nc) {                                                                        \
        __m256 acc[TR_MAX][TC_MAX];                                                                               \
        UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) acc[r][k] = _mm256_setzero_ps();  \
        for (int64_t i = 0; i < n / CPU_QK; i++) {                                                                \
            float dw[TR_MAX];                                                                                     \
            __m256i wq[TR_MAX], aw[TR_MAX];                                                                       \
            UNROLL for (int r = 0; r < nr; r++) {                                                                 \
                const uint8_t *wb = w + r * ws + (size_t)i * BS;                                                  \
                dw[r] = f16v(wb);                                                                                 \
                wq[r] = t##_unpack(wb);                                                                           \
                aw[r] = _mm256_abs_epi8(wq[r]);                                                                   \
            }                                                                                                     \
            __m256 dv[TR_MAX]; /* nc > 1: the nc products dw[r]*da_k, in lanes k and 4 + k */                   \
            if (nc > 1) {                                                                                         \
                uint64_t dbits = 0;                                                                               \
                UNROLL for (int k = 0; k < nc; k++)                                                               \
                    dbits |= (uint64_t)((const cpu_block_q8_0 *)(a + (size_t)k * st) + i)->d << (16 * k);        \
                __m128 da4 = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)dbits));                                   \
                UNROLL for (int r = 0; r < nr; r++) {                                                             \
                    __m128 p = _mm_mul_ps(_mm_set1_ps(dw[r]), da4);                                               \
                    dv[r] = _mm256_set_m128(p, p);                                                                \
                }                                                                                                 \
            }                                                                                                     \
            UNROLL for (int k = 0; k < nc; k++) {                                                                 \
                const cpu_block_q8_0 *y = (const cpu_block_q8_0 *)(a + (size_t)k * st) + i;                      \
                __m256i ya = _mm256_loadu_si256((const __m256i *)y->qs);                                          \
                float da = nc > 1 ? 0.0f : _cvtsh_ss(y->d);                                                       \
                UNROLL for (int r = 0; r < nr; r++) {                                                             \
                    __m256i is = dot_u8s8(_mm256_setzero_si256(), aw[r], _mm256_sign_epi8(ya, wq[r]));            \
                    __m256 sc = nc > 1 ? lane_bcast4(dv[r], k) : _mm256_set1_ps(dw[r] * da);                      \
                    acc[r][k] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(is), acc[r][k]);                           \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]); \
    }                                                                                                             \
    X86_DOT_TILE(t, R, C)

Q8_0_KERNEL(q8_0, CPU_BS_Q8_0, _mm256_loadu_si256((const __m256i *)(w + 2)), 1, 4)
Q8_0_KERNEL(q4_0, CPU_BS_Q4_0, _mm256_sub_epi8(nibbles32(w + 2), _mm256_set1_epi8(8)), 1, 4)
/* q = nibble | bit<<4, minus 16: as a byte, nibble - 16 is nibble | 0xF0, so OR 0xF0 where the bit is clear */
Q8_0_KERNEL(q5_0, CPU_BS_Q5_0,
            _mm256_or_si256(nibbles32(w + 6), _mm256_andnot_si256(bits_to_bytes(tkv_rd32(w + 2)), _mm256_set1_epi8((char)0xF0))),
            1, 4)

/* ---- Q4_K / Q5_K against Q8_K ---- */

/* 8 six-bit scales (sc) and mins (m) of a Q4_K/Q5_K block as bytes, from the 12 packed bytes. */
INLINE void k4_scales(const uint8_t *p, uint64_t *sc, uint64_t *m) {
    uint32_t u0 = tkv_rd32(p), u1 = tkv_rd32(p + 4), u2 = tkv_rd32(p + 8);
    uint32_t sc_lo = u0 & 0x3f3f3f3f, m_lo = u1 & 0x3f3f3f3f;
    uint32_t sc_hi = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4);
    *sc = sc_lo | (uint64_t)sc_hi << 32;
    *m = m_lo | (uint64_t)m_hi << 32;
}

/* shuffle mask broadcasting i16 word j of each 128-bit lane */
INLINE __m256i word_bcast(int j) { return _mm256_set1_epi16((short)((2 * j) | ((2 * j + 1) << 8))); }

/* Per block: isum = Σ_s sc_s Σ q_w q_a in 8 i32 lanes, mins m_s * (bsum pairs) in 4; the float
 * steps are acc += (d*d_a) * isum (8 lanes) and macc += (dmin*d_a) * mins (4 lanes). */
INLINE void k45_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                     int nc, int has_qh) {
    __m256 acc[TR_MAX][TC_MAX];
    __m128 macc[TR_MAX][TC_MAX];
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) {
        acc[r][k] = _mm256_setzero_ps();
        macc[r][k] = _mm_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t bs = has_qh ? CPU_BS_Q5_K : CPU_BS_Q4_K;
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
        __m256i scales[TR_MAX], isum[TR_MAX][TC_MAX];
        uint64_t mn[TR_MAX];
        UNROLL for (int r = 0; r < nr; r++) {
            uint64_t sc;
            k4_scales(w + r * ws + (size_t)i * bs + 4, &sc, &mn[r]);
            scales[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            UNROLL for (int k = 0; k < nc; k++) isum[r][k] = _mm256_setzero_si256();
        }
        UNROLL for (int c = 0; c < 8; c++) { /* 32 elements of sub-block c: low (even c) or high nibbles */
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *wb = w + r * ws + (size_t)i * bs;
                __m256i raw = _mm256_loadu_si256((const __m256i *)(wb + (has_qh ? 48 : 16) + 32 * (c / 2)));
                __m256i q = _mm256_and_si256(c & 1 ? _mm256_srli_epi16(raw, 4) : raw, m4);
                if (has_qh) {
                    __m256i bit = _mm256_set1_epi8((char)(1 << c));
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(wb + 16));
                    q = _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(0x10)));
                }
                __m256i sv = _mm256_shuffle_epi8(scales[r], word_bcast(c));
                UNROLL for (int k = 0; k < nc; k++) {
                    const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
                    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c)));
                    isum[r][k] = madd_acc(isum[r][k], p, sv);
                }
            }
            UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) KEEP(isum[r][k]);
        }
        UNROLL for (int r = 0; r < nr; r++) {
            const uint8_t *wb = w + r * ws + (size_t)i * bs;
            float d = f16v(wb), dmin = f16v(wb + 2);
            __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn[r]));
            UNROLL for (int k = 0; k < nc; k++) {
                const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
                __m128i bsp = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)(y->bsums + 8)));
                __m128i mp = _mm_madd_epi16(mins, bsp);
                acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(isum[r][k]), acc[r][k]);
                macc[r][k] = _mm_fmadd_ps(_mm_set1_ps(dmin * y->d), _mm_cvtepi32_ps(mp), macc[r][k]);
            }
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]) - hsum128_ps(macc[r][k]);
}

INLINE void q4_K_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr, int nc) {
    k45_tile(n, s, ss, w, ws, a, st, nr, nc, 0);
}
INLINE void q5_K_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr, int nc) {
    k45_tile(n, s, ss, w, ws, a, st, nr, nc, 1);
}
X86_DOT_TILE(q4_K, 1, 4)
X86_DOT_TILE(q5_K, 1, 4)

/* ---- Q4_KX against Q8_KX (repack.c): i16 lanes that always hold one sub-block ---- */

/* Per block and token: s16 = Σ_t maddubs(v_t, a_t) over the 8 vectors of the block, so i16 lane
 * pair (2s, 2s+1) holds sub-block s only (each lane 16 products, |sum| <= 16*15*127 < 2^15: exact).
 * One madd by [sc_s, sc_s] gives i32 lane s = sc_s * dot_s; acc += (d*d_a)*isum, then the mins:
 * acc -= (dmin*m_s) * ms_s, where ms_s = d_a * (sum of the activations of sub-block s) is in the
 * Q8_KX block. 8 lanes. */
INLINE __m256i dup_bytes_i16(uint64_t v) { /* 8 bytes -> 16 i16 lanes [v0, v0, v1, v1, ...] */
    __m128i x = _mm_cvtsi64_si128((long long)v);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(x, x));
}

INLINE void q4_KX_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                       int nc) {
    __m256 acc[TR_MAX][TC_MAX];
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) acc[r][k] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
        __m256i s16[TR_MAX][TC_MAX];
        uint64_t sc[TR_MAX], mn[TR_MAX];
        UNROLL for (int r = 0; r < nr; r++) {
            k4_scales(w + r * ws + (size_t)i * CPU_BS_Q4_KX + 4, &sc[r], &mn[r]);
            UNROLL for (int k = 0; k < nc; k++) s16[r][k] = _mm256_setzero_si256();
        }
        UNROLL for (int u = 0; u < 4; u++) {
            UNROLL for (int r = 0; r < nr; r++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(w + r * ws + (size_t)i * CPU_BS_Q4_KX + 16 + 32 * u));
                __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                UNROLL for (int k = 0; k < nc; k++) {
                    const cpu_block_q8_KX *y = (const cpu_block_q8_KX *)(a + (size_t)k * st) + i;
                    __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y->qs + 64 * u)));
                    __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y->qs + 64 * u + 32)));
                    s16[r][k] = _mm256_add_epi16(s16[r][k], _mm256_add_epi16(p0, p1));
                }
            }
            UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) KEEP(s16[r][k]);
        }
        UNROLL for (int r = 0; r < nr; r++) {
            const uint8_t *wb = w + r * ws + (size_t)i * CPU_BS_Q4_KX;
            float d = f16v(wb), dmin = f16v(wb + 2);
            __m256i scv = dup_bytes_i16(sc[r]);
            __m256 mf = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn[r]))));
            UNROLL for (int k = 0; k < nc; k++) {
                const cpu_block_q8_KX *y = (const cpu_block_q8_KX *)(a + (size_t)k * st) + i;
                __m256i isum = _mm256_madd_epi16(s16[r][k], scv);
                acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(isum), acc[r][k]);
                acc[r][k] = _mm256_fnmadd_ps(mf, _mm256_loadu_ps(y->ms), acc[r][k]);
            }
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]);
}
X86_DOT_TILE(q4_KX, 1, 8)

/* ---- Q6_KX against Q8_KX6 (repack.c): i16 lane s always holds sub-block s ---- */

/* v_t of a Q6_KX block: 4 low bits from a nibble of chunk t/2, 2 high bits from chunk t/4 */
INLINE __m256i q6x_unpack(const uint8_t *b, int t) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i L = _mm256_loadu_si256((const __m256i *)(b + 32 * (t / 2)));
    __m256i H = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * (t / 4)));
    __m256i lo = _mm256_and_si256(t & 1 ? _mm256_srli_epi16(L, 4) : L, m4);
    int k = t & 3;
    __m256i hi = k == 0 ? _mm256_slli_epi16(H, 4) : k == 1 ? _mm256_slli_epi16(H, 2) : k == 2 ? H : _mm256_srli_epi16(H, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
}

/* Per block and token, for each half h of the 8 vectors: four maddubs minus the activation's
 * c[h] (32 * the sum of the 8 activations each lane covers), so i16 lane s holds Σ (q - 32) * a over
 * 8 products of sub-block s, |.| <= 8*32*127 < 2^15. With c taken off first, every partial sum is
 * Σ (q - 32) * a over the products added so far minus 32 * a over the rest: within the same bound,
 * so no i16 step overflows (a maddubs lane is at most 2*63*127 and does not saturate).
 * Then one madd by the 16 scales per half: 10 multiplies per 256 products (8 + 2), no offset madd;
 * acc += (d*d_a) * isum, 8 lanes. */
INLINE void q6_KX_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                       int nc) {
    __m256 acc[TR_MAX][TC_MAX];
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) acc[r][k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
        __m256i isum[TR_MAX][TC_MAX];
        UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) isum[r][k] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *wb = w + r * ws + (size_t)i * CPU_BS_Q6_KX;
                __m256i v[4];
                UNROLL for (int t = 0; t < 4; t++) v[t] = q6x_unpack(wb, 4 * h + t);
                __m256i scv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wb + 192)));
                UNROLL for (int k = 0; k < nc; k++) {
                    const cpu_block_q8_KX6 *y = (const cpu_block_q8_KX6 *)(a + (size_t)k * st) + i;
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(v[0], _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h))),
                                                 _mm256_loadu_si256((const __m256i *)y->c[h]));
                    UNROLL for (int t = 1; t < 4; t++)
                        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(v[t], _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * t))));
                    isum[r][k] = madd_acc(isum[r][k], p, scv);
                }
            }
            UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) KEEP(isum[r][k]);
        }
        UNROLL for (int k = 0; k < nc; k++) {
            const cpu_block_q8_KX6 *y = (const cpu_block_q8_KX6 *)(a + (size_t)k * st) + i;
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *wb = w + r * ws + (size_t)i * CPU_BS_Q6_KX;
                acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(f16v(wb + 208) * y->d), _mm256_cvtepi32_ps(isum[r][k]), acc[r][k]);
            }
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]);
}
X86_DOT_TILE(q6_KX, 1, 8)

void FN(quant_q8_KX6)(const float *x, void *y, int64_t n) { cpu_quant_q8_KX6_with(FN(quant_q8_K), x, y, n); }
void FN(quant_q8_KX)(const float *x, void *y, int64_t n) { cpu_quant_q8_KX_with(FN(quant_q8_K), x, y, n); }

/* ---- Q5_0X / Q8_0X against Q8_0XA (repack32.c): i32 lanes 2j, 2j+1 always hold block j ---- */

/* Q8_0 of 4 blocks, then vector m = qword m of each block's 32 quants (a 4 x 4 qword transpose);
 * c = 16 * the per-lane sums (maddubs by 1, then madd by 16); the same bytes as ops_generic.c. */
void FN(quant_q8_0XA)(const float *x, void *y, int64_t n) {
    cpu_block_q8_0 b[4];
    cpu_block_q8_0XA *g = y;
    for (int64_t i = 0; i < n / CPU_QKX; i++, g++) {
        FN(quant_q8_0)(x + i * CPU_QKX, b, CPU_QKX);
        __m256i B[4], V[4], s16 = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            B[j] = _mm256_loadu_si256((const __m256i *)b[j].qs);
            g->d[2 * j] = g->d[2 * j + 1] = _cvtsh_ss(b[j].d);
        }
        __m256i t0 = _mm256_unpacklo_epi64(B[0], B[1]), t1 = _mm256_unpackhi_epi64(B[0], B[1]);
        __m256i t2 = _mm256_unpacklo_epi64(B[2], B[3]), t3 = _mm256_unpackhi_epi64(B[2], B[3]);
        V[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
        V[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
        V[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
        V[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
        for (int m = 0; m < 4; m++) {
            _mm256_storeu_si256((__m256i *)(g->qs + 32 * m), V[m]);
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_set1_epi8(1), V[m]));
        }
        _mm256_storeu_si256((__m256i *)g->c, _mm256_madd_epi16(s16, _mm256_set1_epi16(16)));
    }
}

/* the 4 f16 block scales of a group -> 8 lanes [d0, d0, d1, d1, d2, d2, d3, d3] */
INLINE __m256 x4_scales(const uint8_t *g) {
    __m128 d = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)g));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

/* the 16 fifth-bit bytes of a Q5_0X group as 32: the low half as stored (vector m's bit m), the
 * high half shifted down by 4 (bit 4 + m to bit m), so vector m's bit is bit m in every byte */
INLINE __m256i q5x_bits(const uint8_t *g) {
    __m128i h = _mm_loadu_si128((const __m128i *)(g + 8));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(h), _mm_srli_epi16(h, 4), 1);
}

/* vector m of a Q5_0X group, u = nibble | fifth bit << 4 (0..31), from q5x_bits; the 16-bit
 * shifts move bits across bytes only into positions the masks drop */
INLINE __m256i q5x_unpack(const uint8_t *g, __m256i hb, int m) {
    __m256i nb = _mm256_loadu_si256((const __m256i *)(g + 24 + 32 * (m / 2)));
    __m256i lo = _mm256_and_si256(m & 1 ? _mm256_srli_epi16(nb, 4) : nb, _mm256_set1_epi8(0x0F));
    __m256i hi = _mm256_and_si256(_mm256_slli_epi16(hb, 4 - m), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(lo, hi);
}

/* acc += (d_w * d_a) * isum over 8 lanes, isum = block j's integers in lanes 2j, 2j+1 */
INLINE __m256 x4_fma(__m256 acc, __m256 dw, const cpu_block_q8_0XA *y, __m256i isum) {
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(y->d)), _mm256_cvtepi32_ps(isum), acc);
}

/* Per group and token, to i32 lanes 2j, 2j+1 holding block j's integers:
 * Q5_0X (q5): s16 = Σ_m maddubs(u_m, a_m), i16 lanes of 8 products of at most 31*127 (31496 < 2^15:
 * exact); one madd by 1, minus the activation's 16 * Σa per lane, gives Σ (u-16)*a. With VNNI the
 * four vpdpbusd give the same i32 lanes directly.
 * Q8_0X: Σ_m |w_m| . sign(a_m, w_m) to i32 lanes (dot_u8s8; pairs at most 2*128*127 < 2^15: exact). */
INLINE void x4_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                    int nc, int q5) {
    const size_t bs = q5 ? CPU_BS_Q5_0X : CPU_BS_Q8_0X;
    __m256 acc[TR_MAX][TC_MAX];
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) acc[r][k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CPU_QKX; i++) {
        __m256i sum[TR_MAX][TC_MAX];
        UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) sum[r][k] = _mm256_setzero_si256();
        UNROLL for (int m = 0; m < 4; m++) {
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *g = w + r * ws + (size_t)i * bs;
                __m256i wq = q5 ? q5x_unpack(g, q5x_bits(g), m) : _mm256_loadu_si256((const __m256i *)(g + 8 + 32 * m));
                __m256i aw = q5 ? wq : _mm256_abs_epi8(wq);
                UNROLL for (int k = 0; k < nc; k++) {
                    const cpu_block_q8_0XA *y = (const cpu_block_q8_0XA *)(a + (size_t)k * st) + i;
                    __m256i av = _mm256_loadu_si256((const __m256i *)(y->qs + 32 * m));
                    if (!q5) sum[r][k] = dot_u8s8(sum[r][k], aw, _mm256_sign_epi8(av, wq));
#ifdef __AVX512VNNI__
                    else sum[r][k] = _mm256_dpbusd_epi32(sum[r][k], aw, av);
#else
                    else sum[r][k] = _mm256_add_epi16(sum[r][k], _mm256_maddubs_epi16(aw, av));
#endif
                }
            }
            UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) KEEP(sum[r][k]);
        }
        UNROLL for (int r = 0; r < nr; r++) {
            __m256 dw = x4_scales(w + r * ws + (size_t)i * bs);
            UNROLL for (int k = 0; k < nc; k++) {
                const cpu_block_q8_0XA *y = (const cpu_block_q8_0XA *)(a + (size_t)k * st) + i;
                __m256i s32 = sum[r][k];
#ifndef __AVX512VNNI__
                if (q5) s32 = _mm256_madd_epi16(s32, _mm256_set1_epi16(1));
#endif
                if (q5) s32 = _mm256_sub_epi32(s32, _mm256_loadu_si256((const __m256i *)y->c));
                acc[r][k] = x4_fma(acc[r][k], dw, y, s32);
            }
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]);
}
INLINE void q5_0X_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                       int nc) {
    x4_tile(n, s, ss, w, ws, a, st, nr, nc, 1);
}
INLINE void q8_0X_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr,
                       int nc) {
    x4_tile(n, s, ss, w, ws, a, st, nr, nc, 0);
}
X86_DOT_TILE(q5_0X, 1, 4)
X86_DOT_TILE(q8_0X, 1, 4)

/* ---- Q6_K against Q8_K: Σ sc_s Σ q*a  -  32 Σ sc_s bsums[s], with q = 0..63 unsigned ---- */

/* the 32 six-bit values j (0..3) of half h: low or high nibbles of ql, two bits of qh */
INLINE __m256i q6_unpack(const uint8_t *b, int h, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256i L = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (j & 1)));
    __m256i H = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
    __m256i lo = _mm256_and_si256(j < 2 ? L : _mm256_srli_epi16(L, 4), m4);
    __m256i hi = j == 0 ? _mm256_slli_epi16(H, 4) : j == 1 ? _mm256_slli_epi16(H, 2) : j == 2 ? H : _mm256_srli_epi16(H, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
}

INLINE void q6_K_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, int nr, int nc) {
    __m256 acc[TR_MAX][TC_MAX];
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) acc[r][k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / CPU_QKK; i++) {
        __m256i isum[TR_MAX][TC_MAX];
        UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) isum[r][k] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) UNROLL for (int j = 0; j < 4; j++) {
            /* 32 elements = sub-blocks sb (first 16) and sb+1: i16 scale vector [sc_sb x8 | sc_sb+1 x8] */
            long long sb = 8 * h + 2 * j;
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *wb = w + r * ws + (size_t)i * CPU_BS_Q6_K;
                __m256i q = q6_unpack(wb, h, j);
                __m128i sc8 = _mm_loadu_si128((const __m128i *)(wb + 192));
                __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_set_epi64x((sb + 1) * 0x0101010101010101LL, sb * 0x0101010101010101LL)));
                UNROLL for (int k = 0; k < nc; k++) {
                    const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
                    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * j)));
                    isum[r][k] = madd_acc(isum[r][k], p, scv);
                }
            }
            UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) KEEP(isum[r][k]);
        }
        UNROLL for (int k = 0; k < nc; k++) {
            const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
            __m256i bsums = _mm256_loadu_si256((const __m256i *)y->bsums);
            UNROLL for (int r = 0; r < nr; r++) {
                const uint8_t *wb = w + r * ws + (size_t)i * CPU_BS_Q6_K;
                __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wb + 192))), bsums);
                __m256i is = _mm256_sub_epi32(isum[r][k], _mm256_slli_epi32(off, 5));
                acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(f16v(wb + 208) * y->d), _mm256_cvtepi32_ps(is), acc[r][k]);
            }
        }
    }
    UNROLL for (int r = 0; r < nr; r++) UNROLL for (int k = 0; k < nc; k++) s[k * ss + r] = hsum_ps(acc[r][k]);
}
X86_DOT_TILE(q6_K, 1, 4)

/* ---- F32 / F16 / BF16: f32 lanes, two accumulators of 8, scalar tail ---- */

#define FLOAT_KERNEL(t, ESZ, LOAD8, LOAD1)                                                                        \
    INLINE void t##_tile(int64_t n, float *s, size_t ss, const uint8_t *w, size_t ws, const uint8_t *a, size_t st, \
                         int nr, int nc) {                                                                        \
        (void)ws;                                                                                                 \
        (void)nr; /* always 1: float rows are long and read once per token group */                               \
        __m256 acc0[TC_MAX], acc1[TC_MAX];                                                                        \
        UNROLL for (int k = 0; k < nc; k++) acc0[k] = acc1[k] = _mm256_setzero_ps();                              \
        int64_t i = 0;                                                                                            \
        for (; i + 16 <= n; i += 16) {                                                                            \
            __m256 w0 = LOAD8(w + ESZ * i), w1 = LOAD8(w + ESZ * (i + 8));                                        \
            UNROLL for (int k = 0; k < nc; k++) {                                                                 \
                const uint8_t *ak = a + (size_t)k * st;                                                           \
                acc0[k] = _mm256_fmadd_ps(w0, LOAD8(ak + ESZ * i), acc0[k]);                                      \
                acc1[k] = _mm256_fmadd_ps(w1, LOAD8(ak + ESZ * (i + 8)), acc1[k]);                                \
            }                                                                                                     \
        }                                                                                                         \
        for (int k = 0; k < nc; k++) {                                                                            \
            const uint8_t *ak = a + (size_t)k * st;                                                               \
            float tail = 0.0f;                                                                                    \
            for (int64_t j = i; j < n; j++) tail += LOAD1(w + ESZ * j) * LOAD1(ak + ESZ * j);                     \
            s[k * ss] = hsum_ps(_mm256_add_ps(acc0[k], acc1[k])) + tail;                                          \
        }                                                                                                         \
    }                                                                                                             \
    X86_DOT_TILE(t, 1, 4)

INLINE __m256 ld_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
INLINE float ld1_f32(const uint8_t *p) { float f; memcpy(&f, p, 4); return f; }
INLINE __m256 ld_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE float ld1_f16(const uint8_t *p) { return _cvtsh_ss(tkv_rd16(p)); }
INLINE __m256 ld_bf16(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
INLINE float ld1_bf16(const uint8_t *p) { return tkv_bf16_to_f32(tkv_rd16(p)); }

FLOAT_KERNEL(f32, 4, ld_f32, ld1_f32)
FLOAT_KERNEL(f16, 2, ld_f16, ld1_f16)
FLOAT_KERNEL(bf16, 2, ld_bf16, ld1_bf16)

/* ---- f32 helpers ---- */

float FN(dot_f32v)(const float *x, const float *y, int64_t n) {
    float s;
    f32_tile(n, &s, 0, (const uint8_t *)x, 0, (const uint8_t *)y, 0, 1, 1);
    return s;
}

void FN(axpy_f32)(float *y, float a, const float *x, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

void FN(scale_f32)(float *y, float a, int64_t n) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

/* ---- attention (see ops.h): one accumulator per head, 8-wide chunks of d in order ---- */

/* Eight dot-product accumulators -> the vector of their eight sums, each summed in exactly the
 * order hsum_ps uses ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), so a position's score has the same bits
 * whether it was computed in a block of eight or alone. */
INLINE __m256 hsum8_ps(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
#define FOLD(x, y) _mm256_permute_ps(_mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31)), 0xD8)
    __m256 c01 = FOLD(a0, a1), c23 = FOLD(a2, a3), c45 = FOLD(a4, a5), c67 = FOLD(a6, a7);
#undef FOLD
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(c01, c23), _mm256_hadd_ps(c45, c67));
    return _mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Row access for f32 rows (F16 = 0) and fp16 rows (F16 = 1, widened exactly by vcvtph2ps); F16 is a
 * constant in every always-inlined body below, so each variant compiles to its own loop. */
INLINE const void *row_at(const void *const *rows, int j, size_t off, int F16) {
    return F16 ? (const void *)((const uint16_t *)rows[j] + off) : (const void *)((const float *)rows[j] + off);
}
INLINE __m256 ld8(const void *row, int d, int F16) {
    return F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)))
               : _mm256_loadu_ps((const float *)row + d);
}

/* T2 keys are decoded into a stack block of f32 rows when the head dim fits */
#define ATTN_WIDE_HD 256

/* Positions per score tile: (heads <= 6) x SC_P accumulators, SC_P key vectors and a query vector
 * fit the register file (32 vector registers with AVX-512VL, 16 with AVX2). */
#ifdef __AVX512VL__
#define SC_P 4
#else
#define SC_P 2
#endif

/* Scores of P positions (key rows k[0..P), fp16 when F16) for H query heads q[0..H) (H <= 6, P <=
 * SC_P, both constants): one accumulator per (head, position) over a shared d loop, so each key
 * element is loaded and widened once for the H heads and each query element once for the P
 * positions. Each accumulator sums over d in order of 8-wide chunks and is reduced in hsum_ps's
 * order (hsum8_ps), so a score has the same bits whatever tile it was computed in. Head h's score of
 * position p goes to att[h * stride + idx[p]], (sum + qc[h]) * scale when qc is not NULL. */
INLINE void scores_tile(const float *q, int H, int P, int hd, const void *const *k, const int *idx, float *att,
                        size_t stride, const float *qc, float scale, int F16) {
    __m256 acc[6][SC_P];
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int p = 0; p < P; p++) acc[h][p] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        __m256 kv[SC_P];
        UNROLL for (int p = 0; p < P; p++) kv[p] = ld8(k[p], d, F16);
        UNROLL for (int h = 0; h < H; h++) {
            __m256 qv = _mm256_loadu_ps(q + (size_t)h * hd + d);
            UNROLL for (int p = 0; p < P; p++) acc[h][p] = _mm256_fmadd_ps(qv, kv[p], acc[h][p]);
        }
    }
    float sums[6 * SC_P + 8];
    __m256 z = _mm256_setzero_ps();
#define ACC(i) ((i) < H * P ? acc[(i) / P][(i) % P] : z)
    UNROLL for (int i = 0; i < H * P; i += 8)
        _mm256_storeu_ps(sums + i, hsum8_ps(ACC(i), ACC(i + 1), ACC(i + 2), ACC(i + 3), ACC(i + 4), ACC(i + 5), ACC(i + 6), ACC(i + 7)));
#undef ACC
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int p = 0; p < P; p++) {
        float sc = sums[h * P + p];
        att[(size_t)h * stride + idx[p]] = (qc ? sc + qc[h] : sc) * scale;
    }
}

/* Tiles of P positions for H heads (constants), then the leftover positions alone */
INLINE void scores_heads(const float *q, int H, int hd, const void *const *k, const int *idx, int ni, float *att,
                         size_t stride, const float *qc, float scale, int F16) {
    int i = 0;
    for (; i + SC_P <= ni; i += SC_P) scores_tile(q, H, SC_P, hd, k + i, idx + i, att, stride, qc, scale, F16);
    for (; i < ni; i++) scores_tile(q, H, 1, hd, k + i, idx + i, att, stride, qc, scale, F16);
}

/* The scores of ni gathered positions for every head of the group, in sub-groups of at most 6 heads
 * (as even as possible) */
INLINE void scores_group(const float *q, int group, int hd, const void *const *k, const int *idx, int ni, float *att,
                         size_t stride, const float *qc, float scale, int F16) {
    int nsub = (group + 5) / 6;
    for (int s = 0, h0 = 0; s < nsub; s++) {
        int hp = (group - h0) / (nsub - s);
        const float *qs = q + (size_t)h0 * hd, *qcs = qc ? qc + h0 : NULL;
        float *as = att + (size_t)h0 * stride;
        switch (hp) {
        case 1: scores_heads(qs, 1, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        case 2: scores_heads(qs, 2, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        case 3: scores_heads(qs, 3, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        case 4: scores_heads(qs, 4, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        case 5: scores_heads(qs, 5, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        default: scores_heads(qs, 6, hd, k, idx, ni, as, stride, qcs, scale, F16); break;
        }
        h0 += hp;
    }
}

/* Positions are taken eight present ones at a time, consecutive or not (a T0 position between T2 or
 * evicted ones still shares its query loads); a score has the same bits either way. */
INLINE void attn_scores_body(const float *q, int group, int hd, const void *const *rows, size_t off,
                             const uint8_t *keep, int n, float scale, float *att, size_t stride, int F16) {
    for (int j = 0; j < n;) {
        int idx[8], ni = 0;
        const void *k[8];
        for (; j < n && ni < 8; j++) {
            if (!rows[j] || (keep && !keep[j])) {
                for (int h = 0; h < group; h++) att[(size_t)h * stride + j] = -INFINITY;
                continue;
            }
            k[ni] = row_at(rows, j, off, F16);
            idx[ni++] = j;
        }
        scores_group(q, group, hd, k, idx, ni, att, stride, NULL, scale, F16);
    }
}

void FN(attn_scores)(const float *q, int group, int hd, const float *const *rows, size_t off,
                     const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    if (hd % 8) {
        cpu_gen_attn_scores(q, group, hd, rows, off, keep, n, scale, att, stride);
        return;
    }
    attn_scores_body(q, group, hd, (const void *const *)rows, off, keep, n, scale, att, stride, 0);
}

void FN(attn_scores_f16)(const float *q, int group, int hd, const uint16_t *const *rows, size_t off,
                         const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    if (hd % 8) {
        cpu_gen_attn_scores_f16(q, group, hd, rows, off, keep, n, scale, att, stride);
        return;
    }
    attn_scores_body(q, group, hd, (const void *const *)rows, off, keep, n, scale, att, stride, 1);
}

/* ---- T2 rows where they lie (kvq_head) ---- */

/* The scale of element d's block (or of the head) */
INLINE __m256 t2_scale(const uint8_t *rec, const kvq_head *kh, int d) {
    float s;
    if (kh->per_head) memcpy(&s, rec + kh->s_off, 4);
    else s = tkv_bf16_to_f32(tkv_rd16(rec + kh->s_off + 2 * (size_t)(d / 32)));
    return _mm256_set1_ps(s);
}

/* elements d..d+15 (d % 16 == 0) of a T2 head into y[0], y[1], each level times its scale, from one
 * 16-byte load and one scale: levels widened to f32 (exact), times the scale (q8h's f32 scale rounds
 * once, as the generic product). 4-bit levels with a bf16 block scale: fma(nibble, s, -8 s) is
 * (nibble - 8) s exactly (a 4-bit integer times an 8-bit significand, and -8 s, are exact; so is
 * their sum): the generic product's bits in one operation. */
INLINE void t2_ld16(const uint8_t *rec, const kvq_head *kh, int d, __m256 y[2]) {
    __m256 s = t2_scale(rec, kh, d);
    if (kh->bits == 8) {
        const uint8_t *p = rec + kh->q_off + (size_t)d;
        y[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p))), s);
        y[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8)))), s);
        return;
    }
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(rec + kh->q_off + (size_t)(d / 32) * 16));
    if (d % 32) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(15));
    __m256 l0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), l1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
    if (kh->per_head) { /* not a layout any codec writes today; kept exact by the plain order */
        __m256 e = _mm256_set1_ps(8.0f);
        y[0] = _mm256_mul_ps(_mm256_sub_ps(l0, e), s), y[1] = _mm256_mul_ps(_mm256_sub_ps(l1, e), s);
        return;
    }
    __m256 off = _mm256_mul_ps(s, _mm256_set1_ps(-8.0f));
    y[0] = _mm256_fmadd_ps(l0, s, off), y[1] = _mm256_fmadd_ps(l1, s, off);
}

/* Eight T2 keys are decoded once into a stack block (exact f32 values) for all heads of the group,
 * then scored as eight f32 rows. */
void FN(attn_scores_t2)(const float *q, int group, int hd, const uint8_t *const *recs, const kvq_head *kh,
                        const float *qc, const uint8_t *keep, int n, float scale, float *att, size_t stride) {
    if (hd % 16 || hd > ATTN_WIDE_HD) {
        cpu_gen_attn_scores_t2(q, group, hd, recs, kh, qc, keep, n, scale, att, stride);
        return;
    }
    _Alignas(32) float wide[8 * ATTN_WIDE_HD];
    for (int j = 0; j < n;) {
        int idx[8], ni = 0;
        const void *k[8];
        for (; j < n && ni < 8; j++) {
            if (!recs[j]) continue;
            if (keep && !keep[j]) {
                for (int h = 0; h < group; h++) att[(size_t)h * stride + j] = -INFINITY;
                continue;
            }
            float *w = wide + ni * hd;
            for (int d = 0; d < hd; d += 16) {
                __m256 y[2];
                t2_ld16(recs[j], kh, d, y);
                _mm256_store_ps(w + d, y[0]);
                _mm256_store_ps(w + d + 8, y[1]);
            }
            k[ni] = w;
            idx[ni++] = j;
        }
        scores_group(q, group, hd, k, idx, ni, att, stride, qc, scale, 0);
    }
}

/* Output vectors per wsum block: HP (<= 6) x WS_V accumulators, WS_V value vectors and a weight fit
 * the register file (32 with AVX-512VL, 16 with AVX2). */
#ifdef __AVX512VL__
#define WS_V 4
#else
#define WS_V 2
#endif

/* wsum for heads h0..h0+HP-1 (HP <= 6, constant) over NV * 8 output columns (NV <= WS_V, constant)
 * from dc and the positions idx[0..ni) of one chunk: each V row slice is loaded once for all HP
 * heads, so a group's V is read once per block of columns instead of once per head. The sums
 * continue from `out` (or start at 0 for the first chunk), so per output the FMA chain over j is the
 * one of a head-by-head loop: a head whose weight is 0 still gets fma(0, v, acc), which leaves acc
 * unchanged (v is finite and acc never -0); positions whose weights are all 0 for these heads are
 * not in idx (their rows may be absent). */
INLINE void wsum_block(const float *att, size_t stride, int h0, int HP, int NV, int hd, const void *const *rows,
                       size_t off, const uint8_t *const *recs, const kvq_head *vh, const int *idx, int ni, int first,
                       int dc, float *out, int F16) {
    __m256 acc[6][WS_V];
    UNROLL for (int h = 0; h < HP; h++) {
        float *o = out + (size_t)(h0 + h) * hd + dc;
        UNROLL for (int v = 0; v < NV; v++) acc[h][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(o + 8 * v);
    }
    const float *w = att + (size_t)h0 * stride;
    for (int t = 0; t < ni; t++) {
        int j = idx[t];
        __m256 vv[WS_V];
        if (recs && !rows[j]) { /* a T2 value head (recs is NULL, a constant, for the plain kernels) */
            UNROLL for (int v = 0; v < NV; v += 2) t2_ld16(recs[j], vh, dc + 8 * v, vv + v);
        } else {
            const void *r = row_at(rows, j, off + (size_t)dc, F16);
            UNROLL for (int v = 0; v < NV; v++) vv[v] = ld8(r, 8 * v, F16);
        }
        UNROLL for (int h = 0; h < HP; h++) {
            __m256 vw = _mm256_set1_ps(w[(size_t)h * stride + j]);
            UNROLL for (int v = 0; v < NV; v++) acc[h][v] = _mm256_fmadd_ps(vw, vv[v], acc[h][v]);
        }
    }
    UNROLL for (int h = 0; h < HP; h++) {
        float *o = out + (size_t)(h0 + h) * hd + dc;
        UNROLL for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + 8 * v, acc[h][v]);
    }
}

/* The columns of one sub-group of HP heads: blocks of WS_V vectors, then of 2 (hd % 16 == 0) */
INLINE void wsum_cols(const float *att, size_t stride, int h0, int HP, int hd, const void *const *rows, size_t off,
                      const uint8_t *const *recs, const kvq_head *vh, const int *idx, int ni, int first, float *out,
                      int F16) {
    int dc = 0;
    for (; dc + 8 * WS_V <= hd; dc += 8 * WS_V)
        wsum_block(att, stride, h0, HP, WS_V, hd, rows, off, recs, vh, idx, ni, first, dc, out, F16);
    for (; dc < hd; dc += 16)
        wsum_block(att, stride, h0, HP, 2, hd, rows, off, recs, vh, idx, ni, first, dc, out, F16);
}

/* positions per chunk: the list of positions with a nonzero weight is built once per chunk and
 * sub-group of heads, not once per block of columns */
#define WSUM_CHUNK 64

INLINE void attn_wsum_body(const float *att, size_t stride, int group, int hd, const void *const *rows, size_t off,
                           const uint8_t *const *recs, const kvq_head *vh, int n, float *out, int F16) {
    int nsub = (group + 5) / 6; /* sub-groups of at most 6 heads, as even as possible */
    for (int s = 0, h0 = 0; s < nsub; s++) {
        int hp = (group - h0) / (nsub - s);
        for (int j0 = 0; j0 == 0 || j0 < n; j0 += WSUM_CHUNK) {
            int idx[WSUM_CHUNK], ni = 0, j1 = n - j0 < WSUM_CHUNK ? n : j0 + WSUM_CHUNK;
            for (int j = j0; j < j1; j++) {
                int any = 0;
                for (int h = 0; h < hp; h++) any |= att[(size_t)(h0 + h) * stride + j] != 0.0f;
                if (any) idx[ni++] = j;
            }
            int first = j0 == 0;
            switch (hp) {
            case 1: wsum_cols(att, stride, h0, 1, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            case 2: wsum_cols(att, stride, h0, 2, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            case 3: wsum_cols(att, stride, h0, 3, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            case 4: wsum_cols(att, stride, h0, 4, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            case 5: wsum_cols(att, stride, h0, 5, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            default: wsum_cols(att, stride, h0, 6, hd, rows, off, recs, vh, idx, ni, first, out, F16); break;
            }
        }
        h0 += hp;
    }
}

void FN(attn_wsum)(const float *att, size_t stride, int group, int hd, const float *const *rows, size_t off,
                   int n, float *out) {
    if (hd % 16) {
        cpu_gen_attn_wsum(att, stride, group, hd, rows, off, n, out);
        return;
    }
    attn_wsum_body(att, stride, group, hd, (const void *const *)rows, off, NULL, NULL, n, out, 0);
}

void FN(attn_wsum_f16)(const float *att, size_t stride, int group, int hd, const uint16_t *const *rows, size_t off,
                       int n, float *out) {
    if (hd % 16) {
        cpu_gen_attn_wsum_f16(att, stride, group, hd, rows, off, n, out);
        return;
    }
    attn_wsum_body(att, stride, group, hd, (const void *const *)rows, off, NULL, NULL, n, out, 1);
}

void FN(attn_wsum_t2)(const float *att, size_t stride, int group, int hd, const void *const *rows, int f16,
                      size_t off, const uint8_t *const *recs, const kvq_head *vh, int n, float *out) {
    if (hd % 16) {
        cpu_gen_attn_wsum_t2(att, stride, group, hd, rows, f16, off, recs, vh, n, out);
        return;
    }
    if (f16) attn_wsum_body(att, stride, group, hd, rows, off, recs, vh, n, out, 1);
    else attn_wsum_body(att, stride, group, hd, rows, off, recs, vh, n, out, 0);
}

/* vcvtps2ph with round to nearest even is IEEE's conversion, subnormals included (MXCSR's DAZ is
 * never set here); NaNs come out quieted with their top payload bits, as half.h writes them. */
void FN(f32_to_f16)(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = tkv_f32_to_f16(x[i]);
}

/* exp(x) for x <= 0 (softmax arguments): x = k ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
 * polynomial (relative error about 2e-7), 2^k through the exponent bits; below -87 it returns 0. */
INLINE __m256 exp_neg_ps(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* silu(z) = z / (1 + e^-z) with t = e^-|z| <= 1 (no overflow): z / (1 + t) for z >= 0,
 * z * t / (1 + t) below; the tail by the generic op */
void FN(swiglu)(float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 z = _mm256_loadu_ps(gate + i);
        __m256 t = exp_neg_ps(_mm256_or_ps(z, _mm256_set1_ps(-0.0f)));
        __m256 num = _mm256_blendv_ps(z, _mm256_mul_ps(z, t), z); /* sign bit of z picks z * t */
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(one, t)), _mm256_loadu_ps(up + i)));
    }
    cpu_gen_swiglu(gate + i, up + i, n - i);
}

/* the largest of a[0..n) (-INFINITY for an empty or all-masked row) */
INLINE float max_row(const float *a, int n) {
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(a + j));
    float mx = hmax_ps(vmx);
    for (; j < n; j++) if (a[j] > mx) mx = a[j];
    return mx;
}

/* a[j] = e^(a[j] - mx) in place (-inf - mx = -inf falls below exp_neg_ps's cutoff and gives exactly
 * 0), returning their sum: 8 float lanes, then the lanes and the tail in double */
INLINE double exp_row(float *a, int n, float mx) {
    __m256 vm = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp_neg_ps(_mm256_sub_ps(_mm256_loadu_ps(a + j), vm));
        _mm256_storeu_ps(a + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    double sum = hsum_ps(vs);
    for (; j < n; j++) {
        float e = a[j] == -INFINITY ? 0.0f : expf(a[j] - mx);
        a[j] = e;
        sum += e;
    }
    return sum;
}

void FN(softmax_part)(float *a, int n, float *m, float *l) {
    float mx = max_row(a, n);
    *m = mx;
    if (mx == -INFINITY) {
        memset(a, 0, (size_t)n * sizeof(float));
        *l = 0.0f;
        return;
    }
    *l = (float)exp_row(a, n, mx);
}

