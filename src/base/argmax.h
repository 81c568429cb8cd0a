/* argmax.h — the index of the largest of n floats: the first one on ties, NaNs never chosen unless
 * x[0] is NaN (then 0), exactly what the plain loop `if (x[i] > x[b]) b = i` returns. Greedy
 * decoding calls it once per token over the whole vocabulary (152k logits), where the plain loop's
 * chain of dependent compares cost 4% of a batched eval; eight independent running maxima and a
 * second pass for the first index give the same answer without that chain (tested against the
 * plain loop). */
#ifndef TKV_BASE_ARGMAX_H
#define TKV_BASE_ARGMAX_H

static inline int tkv_argmax_f32(const float *x, int n) {
    if (n <= 0 || x[0] != x[0]) return 0;
    float m[8];
    for (int l = 0; l < 8; l++) m[l] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float best = m[0];
    for (int l = 1; l < 8; l++) best = m[l] > best ? m[l] : best;
    for (i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

#endif
