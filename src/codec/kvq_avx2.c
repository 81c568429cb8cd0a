/* kvq_avx2.c — the T2 decode with AVX2 (the Makefile builds *_avx2.c with -mavx2 -mfma -mf16c).
 * Equal to kvq_decode_row bit for bit: every output is the same f32 operations on the same
 * operands (an int -> f32 conversion, one multiply by the block scale; for the rotation the same
 * butterflies a + b / a - b per stage, the same 1/sqrt(n) multiply, the same 0 - x flips). No FMA
 * (-std=c11 keeps mul and add apart). Called only where cpu_detect_isa() >= CPU_ISA_AVX2. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "base/half.h"
#include "codec/kvq_impl.h"

static inline __m256 cvt8(__m128i b8) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8)); }

static void q8_block(const int8_t *q, float d, float *y) {
    __m256 vd = _mm256_set1_ps(d);
    __m256i b = _mm256_loadu_si256((const __m256i *)q);
    __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
    _mm256_storeu_ps(y + 0, _mm256_mul_ps(cvt8(lo), vd));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(cvt8(_mm_srli_si128(lo, 8)), vd));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(cvt8(hi), vd));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(cvt8(_mm_srli_si128(hi, 8)), vd));
}

/* Nibble bytes p[16]: element j < 16 low nibble of p[j], j + 16 high nibble; levels minus 8. */
static void q4_block(const uint8_t *p, float d, float *y) {
    __m256 vd = _mm256_set1_ps(d);
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    __m128i lo = _mm_sub_epi8(_mm_and_si128(b, m), eight);
    __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m), eight);
    _mm256_storeu_ps(y + 0, _mm256_mul_ps(cvt8(lo), vd));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(cvt8(_mm_srli_si128(lo, 8)), vd));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(cvt8(hi), vd));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(cvt8(_mm_srli_si128(hi, 8)), vd));
}

/* One butterfly stage inside each 8-lane vector: lanes with bit `len` clear get a + b, the others
 * a - b, where a is the lane with that bit clear (blend mask `odd`). */
#define STAGE_IN(v, sw, odd) _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), odd)

static void fwht(float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        v = STAGE_IN(v, _mm256_permute_ps(v, 0xb1), 0xaa);            /* len 1: pairs (0,1) ... */
        v = STAGE_IN(v, _mm256_permute_ps(v, 0x4e), 0xcc);            /* len 2: (0,2) (1,3) ... */
        v = STAGE_IN(v, _mm256_permute2f128_ps(v, v, 0x01), 0xf0);    /* len 4: halves */
        _mm256_storeu_ps(x + i, v);
    }
    for (int len = 8; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + len);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + len, _mm256_sub_ps(a, b));
            }
}

/* x <- D H x / sqrt(n), as kvq_unrotate (n a power of two, 8 <= n <= KVQ_ROT_MAX). */
static void unrotate(float *x, int n) {
    fwht(x, n);
    __m256 c = _mm256_set1_ps((float)(1.0 / sqrt((double)n))), zero = _mm256_setzero_ps();
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), c);
        int signs = (int)((kvq_signs[i >> 6] >> (i & 63)) & 0xff);
        __m256i sel = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(signs), bit), bit);
        _mm256_storeu_ps(x + i, _mm256_blendv_ps(v, _mm256_sub_ps(zero, v), _mm256_castsi256_ps(sel)));
    }
}

/* Each output is the same single f32 operation as kvq.c's, (float)q * scale: the same bits. */
void kvq_q8h_decode_avx2(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *y) {
    for (int g = 0; g < n_head_kv; g++) {
        const int8_t *qg = q + (size_t)g * head_dim;
        float *yg = y + (size_t)g * head_dim;
        __m256 s = _mm256_set1_ps(scales[g]);
        int i = 0;
        for (; i + 8 <= head_dim; i += 8) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(qg + i));
            _mm256_storeu_ps(yg + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s));
        }
        for (; i < head_dim; i++) yg[i] = (float)qg[i] * scales[g];
    }
}

void kvq_decode_row_avx2(kvq_codec c, const void *rec, int n_head_kv, int head_dim, float *y) {
    TKV_ASSERT(kvq_supported(c, head_dim, NULL, 0) && n_head_kv >= 1);
    const kvq_info *in = &kvq_infos[c];
    const uint8_t *r = rec;
    size_t n = (size_t)n_head_kv * (size_t)head_dim;
    if (in->kind == KVQ_K_Q8H) { /* a head at a time: here each scale follows the row */
        for (int g = 0; g < n_head_kv; g++) {
            float sc;
            memcpy(&sc, r + n + 4 * (size_t)g, 4);
            kvq_q8h_decode_avx2((const int8_t *)r + (size_t)g * head_dim, &sc, 1, head_dim, y + (size_t)g * head_dim);
        }
        return;
    }
    for (size_t e = 0; e < n; e += KVQ_BLOCK) {
        uint16_t d16;
        if (in->kind == KVQ_K_Q8B) {
            memcpy(&d16, r + n + 2 * (e / KVQ_BLOCK), 2);
            q8_block((const int8_t *)r + e, tkv_bf16_to_f32(d16), y + e);
        } else {
            memcpy(&d16, r + n / 2 + 2 * (e / KVQ_BLOCK), 2);
            q4_block(r + e / 2, tkv_bf16_to_f32(d16), y + e);
        }
    }
    if (in->rot)
        for (int g = 0; g < n_head_kv; g++) unrotate(y + (size_t)g * head_dim, head_dim);
}
