/* kv_codec_avx2.c — kv_q8_decode_row with AVX2 (built with -mavx2 -mfma -mf16c; call only where the
 * backend runs AVX2 or better). Each output is the same single f32 operation as kv_codec.c's,
 * (float)q * scale, so the bits are equal (tests/test_kvq.c compares them). */
#include <immintrin.h>

#include "backend/cpu/kv_codec.h"

void kv_q8_decode_row_avx2(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *x) {
    for (int g = 0; g < n_head_kv; g++) {
        const int8_t *qg = q + (long)g * head_dim;
        float *xg = x + (long)g * head_dim;
        __m256 s = _mm256_set1_ps(scales[g]);
        int i = 0;
        for (; i + 8 <= head_dim; i += 8) {
            __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(qg + i));
            _mm256_storeu_ps(xg + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s));
        }
        for (; i < head_dim; i++) xg[i] = (float)qg[i] * scales[g];
    }
}
