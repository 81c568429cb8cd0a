/* kvq_rot.c — the rotation of the rotated T2 codecs (kvq.h): R = H D / sqrt(n) on one head.
 * Owns the sign table and the fast Walsh-Hadamard transform (in place, Sylvester order: stage
 * len = 1, 2, 4, ... pairs (j, j + len), a + b then a - b). The AVX2 decode repeats these exact
 * operations in the same order, so both give the same bits. */
#include <math.h>

#include "codec/kvq.h"
#include "base/err.h"

/* kvq_signs[w] = output w (w = 0, 1, ...) of splitmix64 seeded with KVQ_SIGN_SEED (test kvq_signs). */
const uint64_t kvq_signs[KVQ_ROT_MAX / 64] = {
    0x970ff7fc1e1fd1e6ull,
    0xa9e9a260671cf642ull,
    0x0906aa974e9f529dull,
    0x22ae55e55815a5edull,
};

static void fwht(float *x, int n) {
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
}

/* 0 - x rather than -x: the same value, but zeros stay +0 (a zero head decodes to +0). */
static void flip(float *x, int n) {
    for (int i = 0; i < n; i++)
        if ((kvq_signs[i >> 6] >> (i & 63)) & 1) x[i] = 0.0f - x[i];
}

static float inv_sqrt(int n) { return (float)(1.0 / sqrt((double)n)); }

void kvq_rotate(float *x, int n) {
    TKV_ASSERT(n >= 1 && n <= KVQ_ROT_MAX && (n & (n - 1)) == 0);
    flip(x, n);
    fwht(x, n);
    float c = inv_sqrt(n);
    for (int i = 0; i < n; i++) x[i] *= c;
}

void kvq_unrotate(float *x, int n) {
    TKV_ASSERT(n >= 1 && n <= KVQ_ROT_MAX && (n & (n - 1)) == 0);
    fwht(x, n);
    float c = inv_sqrt(n);
    for (int i = 0; i < n; i++) x[i] *= c;
    flip(x, n);
}
