/* baselines_common.c — what the baselines share: budget from a ratio, 1-D pooling along positions,
 * the GQA group combine, and the top-k with the one tie rule (score desc, then position asc).
 * Pure functions of their arguments; no allocation (top-k selects in the caller's scratch). */
#include "kv/baselines.h"

#include <math.h>

#include "base/err.h"

int kv_bl_budget_from_ratio(double ratio, int n) {
    if (n <= 0 || !(ratio > 0)) return 0; /* also NaN */
    if (ratio >= 1.0) return n;
    double b = floor(ratio * (double)n + 1e-9);
    if (b < 0) return 0;
    if (b > n) return n;
    return (int)b;
}

void kv_bl_pool1d(const float *in, int m, int kernel, kv_bl_pool kind, float *out) {
    TKV_ASSERT(kernel >= 1 && (kernel & 1) == 1);
    int r = kernel / 2;
    for (int j = 0; j < m; j++) {
        int lo = j - r < 0 ? 0 : j - r;
        int hi = j + r >= m ? m - 1 : j + r;
        if (kind == KV_BL_POOL_MAX) {
            float v = in[lo];
            for (int i = lo + 1; i <= hi; i++)
                if (in[i] > v || isnan(v)) v = in[i];
            out[j] = v;
        } else {
            /* torch avg_pool1d with count_include_pad=True: padding counts as 0, divide by kernel */
            double s = 0;
            for (int i = lo; i <= hi; i++) s += in[i];
            out[j] = (float)(s / kernel);
        }
    }
}

float kv_bl_gqa_combine(const float *x, int stride, int group, int j, kv_bl_gqa gqa) {
    TKV_ASSERT(group >= 1);
    if (gqa == KV_BL_GQA_MAX) {
        float v = x[j];
        for (int h = 1; h < group; h++) {
            float w = x[(size_t)h * (size_t)stride + (size_t)j];
            if (w > v) v = w;
        }
        return v;
    }
    double s = 0;
    for (int h = 0; h < group; h++) s += x[(size_t)h * (size_t)stride + (size_t)j];
    return (float)(s / group);
}

typedef struct {
    float s;
    int pos;
} bl_pair;

size_t kv_bl_pair_bytes(void) { return sizeof(bl_pair); }

/* x ranks before y: higher score, then lower position; NaN below every number. A total order
 * (positions are distinct), so any correct selection gives the same set. */
static int pair_before(const bl_pair *x, const bl_pair *y) {
    int xn = isnan(x->s), yn = isnan(y->s);
    if (xn != yn) return yn;
    if (!xn && x->s != y->s) return x->s > y->s;
    return x->pos < y->pos;
}

/* Max-heap (best at the root) sift-down over p[0..n). */
static void sift_down(bl_pair *p, int i, int n) {
    for (;;) {
        int b = i, l = 2 * i + 1, r = l + 1;
        if (l < n && pair_before(&p[l], &p[b])) b = l;
        if (r < n && pair_before(&p[r], &p[b])) b = r;
        if (b == i) return;
        bl_pair t = p[i];
        p[i] = p[b];
        p[b] = t;
        i = b;
    }
}

/* A heap select in the caller's scratch, O(m + k log m): no qsort, whose glibc implementation
 * mallocs above 1 KiB, and these run inside decode steps (R-KV compressions, H2O). */
void kv_bl_keep_topk(const float *score, const int *pos, int m, int k, uint8_t *keep, void *pairs) {
    if (k <= 0 || m <= 0) return;
    if (k >= m) {
        for (int i = 0; i < m; i++) keep[pos[i]] = 1;
        return;
    }
    bl_pair *p = pairs;
    for (int i = 0; i < m; i++) {
        p[i].s = score[i];
        p[i].pos = pos[i];
    }
    for (int i = m / 2 - 1; i >= 0; i--) sift_down(p, i, m);
    for (int n = m, i = 0; i < k; i++) {
        keep[p[0].pos] = 1;
        p[0] = p[--n];
        sift_down(p, 0, n);
    }
}
