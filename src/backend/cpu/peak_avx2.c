/* peak_avx2.c — the int8 loop of peak.h with vpmaddubsw, vpmaddwd and vpaddd (AVX2 flags). */
#include <immintrin.h>

#include "backend/cpu/peak.h"

/* 8 chains, each with an operand of its own made opaque every round (see peak_avx512.c) */
uint64_t cpu_i8_loop_avx2(uint64_t iters, int32_t *sink) {
    __m256i b = _mm256_set1_epi8(-5), a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3),
            a3 = _mm256_set1_epi8(4), a4 = _mm256_set1_epi8(5), a5 = _mm256_set1_epi8(6), a6 = _mm256_set1_epi8(7),
            a7 = _mm256_set1_epi8(8);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
#define STEP(c, a) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones))
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(b));
        STEP(c0, a0), STEP(c1, a1), STEP(c2, a2), STEP(c3, a3), STEP(c4, a4), STEP(c5, a5), STEP(c6, a6), STEP(c7, a7);
    }
#undef STEP
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    *sink = (int32_t)((uint32_t)*sink + (uint32_t)_mm256_extract_epi32(s, 0)); /* wraps, as the lanes do */
    return iters * 8 * 32;
}
