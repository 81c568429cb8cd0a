/* kv_codec.h — the int8 codec of tier T2. Pure functions of pointers and sizes.
 *
 * Grouping: one f32 scale per (token, layer, K or V, kv head), i.e. per head_dim values (64 or 128).
 * Why per head: a group is exactly the vector one attention dot product (or one weighted V sum) reads,
 * so a scale never mixes heads whose magnitudes differ by 10x (Qwen2 K heads do); the scale costs
 * 4/head_dim of the row (3-6%). Finer groups (32) would cut the error on outlier channels only a
 * little, because K outliers are per channel across tokens, not per token, and cost twice the scales.
 *
 * Symmetric, round to nearest: scale = amax / 127, q = round(x / scale) clamped to [-127, 127].
 * Error bound: |x - q * scale| <= amax / 254 per element (half a step), plus f32 rounding of the
 * product (< amax * 2^-22). A group of zeros encodes as scale 0 and decodes to exact zeros. */
#ifndef TKV_KV_CODEC_H
#define TKV_KV_CODEC_H
#include <stdint.h>

/* n values of one group. */
void kv_q8_encode(const float *x, int n, int8_t *q, float *scale);
void kv_q8_decode(const int8_t *q, int n, float scale, float *x);

/* One row of n_head_kv groups of head_dim values: scales[g] for group g. */
void kv_q8_encode_row(const float *x, int n_head_kv, int head_dim, int8_t *q, float *scales);
void kv_q8_decode_row(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *x);
/* The same decode with AVX2 (kv_codec_avx2.c; only where the CPU has AVX2): the same bits. */
void kv_q8_decode_row_avx2(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *x);

#endif
