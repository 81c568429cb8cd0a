/* kv_codec.c — int8 per-head codec for T2 (grouping and error bound in kv_codec.h). */
#include "backend/cpu/kv_codec.h"

#include <math.h>

void kv_q8_encode(const float *x, int n, int8_t *q, float *scale) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (!(amax > 0.0f) || !isfinite(amax)) { /* zeros (or garbage): store zeros, never NaN scales */
        for (int i = 0; i < n; i++) q[i] = 0;
        *scale = 0.0f;
        return;
    }
    float s = amax / 127.0f, inv = 127.0f / amax;
    for (int i = 0; i < n; i++) {
        long r = lrintf(x[i] * inv);
        q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    *scale = s;
}

void kv_q8_decode(const int8_t *q, int n, float scale, float *x) {
    for (int i = 0; i < n; i++) x[i] = (float)q[i] * scale;
}

void kv_q8_encode_row(const float *x, int n_head_kv, int head_dim, int8_t *q, float *scales) {
    for (int g = 0; g < n_head_kv; g++)
        kv_q8_encode(x + (long)g * head_dim, head_dim, q + (long)g * head_dim, &scales[g]);
}

void kv_q8_decode_row(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *x) {
    for (int g = 0; g < n_head_kv; g++)
        kv_q8_decode(q + (long)g * head_dim, head_dim, scales[g], x + (long)g * head_dim);
}
