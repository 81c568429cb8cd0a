/* ops_x86.h — the SIMD kernel bodies, included once by ops_avx2.c and once by ops_avx512.c, which
 * set CPU_X86_NAME (avx2 / avx512) and their own compiler flags. The kernels work on 256-bit vectors;
 * where AVX512_VNNI is available (__AVX512VNNI__) the integer multiply-accumulate steps become
 * single VNNI instructions (vpdpbusd, vpdpwssd). Those give the same integers as the AVX2 sequences
 * (no i16 pair sum here can saturate: |u8*s8 + u8*s8| <= 2*128*127 < 2^15), so both variants
 * produce the same bits, and the AVX2 build, testable on any x86-64 with AVX2, covers the logic.
 *
 * Every dot product is written once as an nx-row kernel (always inlined with a constant nx) that
 * unpacks a weight block once and runs it against nx activation rows; vec_dot is the nx = 1
 * instance. Per activation row the float operations are the same sequence whatever nx is, so
 * vec_dot_nx equals vec_dot bit for bit. Integer block sums are exact; only the order of f32
 * additions differs from ops_generic.c.
 *
 * Activation quantizers reproduce ops_generic.c bit for bit: the same f32 products, rounding to
 * nearest even (vroundps), the same max rules. */
#include <immintrin.h>
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

/* ---- nx-row kernel scaffolding ---- */

#define NX_MAX 4
/* vec_dot and vec_dot_nx of a type from one kernel `t##_nx(n, s, w, a, stride, nx)`. */
#define X86_DOT_PAIR(t)                                                                                     \
    void FN(dot_##t)(int64_t n, float *s, const void *w, const void *a) { t##_nx(n, s, w, a, 0, 1); }       \
    void FN(dotnx_##t)(int64_t n, float *s, const void *w, const void *a, size_t st, int nx) {              \
        const uint8_t *ap = a;                                                                              \
        for (; nx >= 4; nx -= 4, s += 4, ap += 4 * st) t##_nx(n, s, w, ap, st, 4);                          \
        if (nx == 3) t##_nx(n, s, w, ap, st, 3);                                                            \
        else if (nx == 2) t##_nx(n, s, w, ap, st, 2);                                                       \
        else if (nx == 1) t##_nx(n, s, w, ap, st, 1);                                                       \
    }

/* ---- 32-block weights against Q8_0: d_w*d_a*Σ q_w q_a with q_w signed bytes ---- */

/* signed w bytes · signed a bytes as |w| (u8) · sign(a, w) (s8); |-128| = 128 still fits u8 */
#define Q8_0_KERNEL(t, BS, UNPACK)                                                                     \
    INLINE void t##_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx) {  \
        __m256 acc[NX_MAX];                                                                            \
        for (int k = 0; k < nx; k++) acc[k] = _mm256_setzero_ps();                                     \
        for (int64_t i = 0; i < n / CPU_QK; i++, w += BS) {                                            \
            float dw = f16v(w);                                                                        \
            __m256i wq = UNPACK;                                                                       \
            __m256i aw = _mm256_abs_epi8(wq);                                                          \
            for (int k = 0; k < nx; k++) {                                                             \
                const cpu_block_q8_0 *y = (const cpu_block_q8_0 *)(a + (size_t)k * st) + i;           \
                __m256i sa = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), wq);         \
                __m256i is = dot_u8s8(_mm256_setzero_si256(), aw, sa);                                 \
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * _cvtsh_ss(y->d)), _mm256_cvtepi32_ps(is), acc[k]); \
            }                                                                                          \
        }                                                                                              \
        for (int k = 0; k < nx; k++) s[k] = hsum_ps(acc[k]);                                           \
    }                                                                                                  \
    X86_DOT_PAIR(t)

Q8_0_KERNEL(q8_0, CPU_BS_Q8_0, _mm256_loadu_si256((const __m256i *)(w + 2)))
Q8_0_KERNEL(q4_0, CPU_BS_Q4_0, _mm256_sub_epi8(nibbles32(w + 2), _mm256_set1_epi8(8)))
/* q = nibble | bit<<4, minus 16: as a byte, nibble - 16 is nibble | 0xF0, so OR 0xF0 where the bit is clear */
Q8_0_KERNEL(q5_0, CPU_BS_Q5_0,
            _mm256_or_si256(nibbles32(w + 6), _mm256_andnot_si256(bits_to_bytes(tkv_rd32(w + 2)), _mm256_set1_epi8((char)0xF0))))

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

INLINE void k45_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx, int has_qh) {
    __m256 acc[NX_MAX];
    __m128 macc[NX_MAX]; /* dmin*d_a * m_s*(bsum pairs), 4 lanes, reduced once at the end */
    for (int k = 0; k < nx; k++) { acc[k] = _mm256_setzero_ps(); macc[k] = _mm_setzero_ps(); }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t bs = has_qh ? CPU_BS_Q5_K : CPU_BS_Q4_K;
    for (int64_t i = 0; i < n / CPU_QKK; i++, w += bs) {
        float d = f16v(w), dmin = f16v(w + 2);
        uint64_t sc, mn;
        k4_scales(w + 4, &sc, &mn);
        __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
        const uint8_t *qs = w + (has_qh ? 48 : 16);
        __m256i qh = has_qh ? _mm256_loadu_si256((const __m256i *)(w + 16)) : _mm256_setzero_si256();
        __m256i isum[NX_MAX];
        for (int k = 0; k < nx; k++) isum[k] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (has_qh) {
                const __m256i b16 = _mm256_set1_epi8(0x10);
                __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), b16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), b16));
            }
            __m256i s_lo = _mm256_shuffle_epi8(scales, word_bcast(2 * c));
            __m256i s_hi = _mm256_shuffle_epi8(scales, word_bcast(2 * c + 1));
            for (int k = 0; k < nx; k++) {
                const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
                __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c)));
                __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c + 32)));
                isum[k] = madd_acc(madd_acc(isum[k], p_lo, s_lo), p_hi, s_hi);
            }
        }
        for (int k = 0; k < nx; k++) {
            const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
            __m128i bsp = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y->bsums), _mm_loadu_si128((const __m128i *)(y->bsums + 8)));
            __m128i mp = _mm_madd_epi16(mins, bsp);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
            macc[k] = _mm_fmadd_ps(_mm_set1_ps(dmin * y->d), _mm_cvtepi32_ps(mp), macc[k]);
        }
    }
    for (int k = 0; k < nx; k++) s[k] = hsum_ps(acc[k]) - hsum128_ps(macc[k]);
}

INLINE void q4_K_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx) { k45_nx(n, s, w, a, st, nx, 0); }
INLINE void q5_K_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx) { k45_nx(n, s, w, a, st, nx, 1); }
X86_DOT_PAIR(q4_K)
X86_DOT_PAIR(q5_K)

/* ---- Q6_K against Q8_K: Σ sc_s Σ q*a  -  32 Σ sc_s bsums[s], with q = 0..63 unsigned ---- */

INLINE void q6_K_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx) {
    __m256 acc[NX_MAX];
    for (int k = 0; k < nx; k++) acc[k] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / CPU_QKK; i++, w += CPU_BS_Q6_K) {
        float d = f16v(w + 208);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + 192));
        __m256i isum[NX_MAX];
        for (int k = 0; k < nx; k++) isum[k] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qhp = w + 128 + 32 * h;
            __m256i L0 = _mm256_loadu_si256((const __m256i *)ql), L1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i H = _mm256_loadu_si256((const __m256i *)qhp);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
            for (int j = 0; j < 4; j++) {
                /* 32 elements = sub-blocks sb (first 16) and sb+1: i16 scale vector [sc_sb x8 | sc_sb+1 x8] */
                long long sb = 8 * h + 2 * j;
                __m256i scv = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_set_epi64x((sb + 1) * 0x0101010101010101LL, sb * 0x0101010101010101LL)));
                for (int k = 0; k < nx; k++) {
                    const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
                    __m256i p = _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)(y->qs + 128 * h + 32 * j)));
                    isum[k] = madd_acc(isum[k], p, scv);
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        for (int k = 0; k < nx; k++) {
            const cpu_block_q8_K *y = (const cpu_block_q8_K *)(a + (size_t)k * st) + i;
            __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
            __m256i is = _mm256_sub_epi32(isum[k], _mm256_slli_epi32(off, 5));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(is), acc[k]);
        }
    }
    for (int k = 0; k < nx; k++) s[k] = hsum_ps(acc[k]);
}
X86_DOT_PAIR(q6_K)

/* ---- F32 / F16 / BF16: f32 lanes, two accumulators of 8, scalar tail ---- */

#define FLOAT_KERNEL(t, ESZ, LOAD8, LOAD1)                                                            \
    INLINE void t##_nx(int64_t n, float *s, const uint8_t *w, const uint8_t *a, size_t st, int nx) { \
        __m256 acc0[NX_MAX], acc1[NX_MAX];                                                            \
        for (int k = 0; k < nx; k++) acc0[k] = acc1[k] = _mm256_setzero_ps();                         \
        int64_t i = 0;                                                                                \
        for (; i + 16 <= n; i += 16) {                                                                \
            __m256 w0 = LOAD8(w + ESZ * i), w1 = LOAD8(w + ESZ * (i + 8));                            \
            for (int k = 0; k < nx; k++) {                                                            \
                const uint8_t *ak = a + (size_t)k * st;                                               \
                acc0[k] = _mm256_fmadd_ps(w0, LOAD8(ak + ESZ * i), acc0[k]);                          \
                acc1[k] = _mm256_fmadd_ps(w1, LOAD8(ak + ESZ * (i + 8)), acc1[k]);                    \
            }                                                                                         \
        }                                                                                             \
        for (int k = 0; k < nx; k++) {                                                                \
            const uint8_t *ak = a + (size_t)k * st;                                                   \
            float tail = 0.0f;                                                                        \
            for (int64_t j = i; j < n; j++) tail += LOAD1(w + ESZ * j) * LOAD1(ak + ESZ * j);         \
            s[k] = hsum_ps(_mm256_add_ps(acc0[k], acc1[k])) + tail;                                   \
        }                                                                                             \
    }                                                                                                 \
    X86_DOT_PAIR(t)

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
    f32_nx(n, &s, (const uint8_t *)x, (const uint8_t *)y, 0, 1);
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
