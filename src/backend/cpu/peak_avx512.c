/* peak_avx512.c — the int8 loop of peak.h with vpdpbusd on 256-bit vectors (AVX-512 VNNI flags). */
#include <immintrin.h>

#include "backend/cpu/peak.h"

/* 12 chains: more than latency (5) x throughput (2 per cycle) of the instruction. Every chain has
 * operands of its own, made opaque to the compiler each round, so that no two chains are the same
 * computation (they would be merged) and no product leaves the loop. */
uint64_t cpu_i8_loop_avx512(uint64_t iters, int32_t *sink) {
    __m256i b = _mm256_set1_epi8(-5), a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3),
            a3 = _mm256_set1_epi8(4), a4 = _mm256_set1_epi8(5), a5 = _mm256_set1_epi8(6);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
            c9 = c0, c10 = c0, c11 = c0;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(b));
        c0 = _mm256_dpbusd_epi32(c0, a0, b), c1 = _mm256_dpbusd_epi32(c1, a1, b);
        c2 = _mm256_dpbusd_epi32(c2, a2, b), c3 = _mm256_dpbusd_epi32(c3, a3, b);
        c4 = _mm256_dpbusd_epi32(c4, a4, b), c5 = _mm256_dpbusd_epi32(c5, a5, b);
        c6 = _mm256_dpbusd_epi32(c6, b, a0), c7 = _mm256_dpbusd_epi32(c7, b, a1);
        c8 = _mm256_dpbusd_epi32(c8, b, a2), c9 = _mm256_dpbusd_epi32(c9, b, a3);
        c10 = _mm256_dpbusd_epi32(c10, b, a4), c11 = _mm256_dpbusd_epi32(c11, b, a5);
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
    *sink = (int32_t)((uint32_t)*sink + (uint32_t)_mm256_extract_epi32(s, 0)); /* wraps, as the lanes do */
    return iters * 12 * 32;
}
