/* baselines_rkv.c — R-KV (Cai et al., 2025): importance from the observation window's attention,
 * redundancy from key cosine similarity, compression to the budget at fixed decode intervals.
 * Constants and formulas follow the authors' code (Zefan-Cai/R-KV: rkv/compression/r1_kv.py,
 * rkv/utils.py cal_similarity/compute_attention_scores, rkv/modeling.py, run_math.py); the
 * differences are listed in docs/BASELINES.md. Selection works on the head's held positions in
 * position order: that list is what the authors' cache holds (apart from its ordering).
 * Per-call cost O(m^2 * head_dim) for m held positions (the pairwise similarities), O(n) scratch. */
#include "kv/baselines.h"

#include <math.h>
#include <string.h>

#include "base/err.h"

void kv_bl_rkv_opts_default(kv_bl_rkv_opts *o) {
    o->window = 8;          /* R1KV window_size=8; README alpha = 8 */
    o->kernel = 7;          /* R1KV kernel_size=7 (max_pool1d, padding 3) */
    o->lambda = 0.1;        /* README lambda = 0.1 (code default mix_lambda = 0.07) */
    o->sim_threshold = 0.5; /* cal_similarity threshold=0.5 */
    o->interval = 128;      /* run_math.py divide_length=128, divide_method step_length */
    o->gqa = KV_BL_GQA_MAX; /* compute_attention_scores pooling="max" */
}

int kv_bl_rkv_opts_check(const kv_bl_rkv_opts *o, char *err, size_t errlen) {
    if (o->window < 1) return tkv_errf(err, errlen, "rkv: window %d must be >= 1", o->window);
    if (o->kernel < 1 || (o->kernel & 1) == 0)
        return tkv_errf(err, errlen, "rkv: kernel %d must be odd and >= 1", o->kernel);
    if (!(o->lambda >= 0 && o->lambda <= 1))
        return tkv_errf(err, errlen, "rkv: lambda %g must lie in [0, 1]", o->lambda);
    if (o->interval < o->window)
        return tkv_errf(err, errlen, "rkv: interval %d must be >= window %d", o->interval,
                        o->window);
    return 0;
}

int kv_bl_rkv_due(const kv_bl_rkv_opts *o, int n, int n_prompt) {
    if (n == n_prompt) return 1;
    /* Decode points whose window would overlap the prompt-end window are skipped so that each
     * query observes for at most one compression (see docs/BASELINES.md). */
    return n > n_prompt && (n - 1) % o->interval == 0 && n - n_prompt >= o->window;
}

int kv_bl_rkv_window_end(const kv_bl_rkv_opts *o, int q_pos, int n_prompt) {
    for (int c = q_pos + 1; c <= q_pos + o->window; c++)
        if (kv_bl_rkv_due(o, c, n_prompt)) return c;
    return 0;
}

void kv_bl_rkv_observe(const kv_bl_rkv_opts *o, float *imp, const float *att, int att_stride,
                       int group, int n_obs, const uint8_t *held) {
    TKV_ASSERT(group >= 1 && group <= KV_BL_MAX_GROUP);
    /* Per q head, renormalise over the held non-window keys: the authors' softmax runs over
     * attn_weights[..., :-window] only, and restricting a softmax to a subset and renormalising
     * is the softmax over that subset. */
    float inv[KV_BL_MAX_GROUP];
    for (int h = 0; h < group; h++) {
        const float *row = att + (size_t)h * (size_t)att_stride;
        double s = 0;
        for (int j = 0; j < n_obs; j++)
            if (!held || held[j]) s += row[j];
        inv[h] = s > 0 ? (float)(1.0 / s) : 0.0f;
    }
    float scale = 1.0f / (float)o->window; /* mean over the window's queries */
    for (int j = 0; j < n_obs; j++) {
        if (held && !held[j]) continue;
        float v = att[j] * inv[0];
        for (int h = 1; h < group; h++) {
            float w = att[(size_t)h * (size_t)att_stride + (size_t)j] * inv[h];
            if (o->gqa == KV_BL_GQA_MAX) {
                if (w > v) v = w;
            } else {
                v += w;
            }
        }
        if (o->gqa != KV_BL_GQA_MAX) v /= (float)group;
        imp[j] += v * scale;
    }
}

/* Scratch layout, n positions: idx, last (int); a, pooled, norm, lastval, fin (float); colsum
 * (double); pairs. */
size_t kv_bl_rkv_scratch_bytes(int n) {
    size_t m = n > 0 ? (size_t)n : 1;
    return m * (2 * sizeof(int) + 5 * sizeof(float) + sizeof(double) + kv_bl_pair_bytes()) + 64;
}

static void *take(char **p, size_t bytes) {
    uintptr_t u = ((uintptr_t)*p + 7u) & ~(uintptr_t)7u;
    *p = (char *)(u + bytes);
    return (void *)u;
}

static double dot(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* red[i], i < m: softmax over the held list of the column means of the key cosine matrix after
 * the authors' "retain the most recent near-duplicate" zeroing (rkv/utils.py cal_similarity with
 * retain_direction="last"). Symmetric, so one pass over i < j pairs: column sums equal row sums,
 * and each row's last match only grows as j grows. */
static void redundancy(const kv_bl_rkv_opts *o, int m, const int *idx, const float *const *k_rows,
                       int k_offset, int head_dim, float *norm, int *last, float *lastval,
                       double *colsum, float *red) {
    for (int i = 0; i < m; i++) {
        const float *ki = k_rows[idx[i]] + k_offset;
        norm[i] = (float)(sqrt(dot(ki, ki, head_dim)) + 1e-8); /* k / (||k|| + 1e-8) */
        last[i] = 0;   /* no near-duplicate: torch.max over all-zero indices gives column 0 */
        lastval[i] = 0;
        colsum[i] = 0;
    }
    for (int i = 0; i < m; i++) {
        const float *ki = k_rows[idx[i]] + k_offset;
        for (int j = i + 1; j < m; j++) {
            const float *kj = k_rows[idx[j]] + k_offset;
            float c = (float)(dot(ki, kj, head_dim) / ((double)norm[i] * norm[j]));
            colsum[i] += c;
            colsum[j] += c;
            if (i == 0) lastval[j] = c; /* S[j][0], zeroed if row j finds no later match */
            if (c > o->sim_threshold) {
                if (j > last[i]) { last[i] = j; lastval[i] = c; }
                if (i > last[j]) { last[j] = i; lastval[j] = c; }
            }
        }
    }
    for (int i = 0; i < m; i++) colsum[last[i]] -= lastval[i]; /* S[i][last[i]] = 0 */
    double mx = -INFINITY;
    for (int j = 0; j < m; j++) {
        colsum[j] /= m; /* .mean(dim=1): over rows */
        if (colsum[j] > mx) mx = colsum[j];
    }
    double z = 0;
    for (int j = 0; j < m; j++) z += exp(colsum[j] - mx);
    for (int j = 0; j < m; j++) red[j] = (float)(exp(colsum[j] - mx) / z);
}

int kv_bl_rkv_select(const kv_bl_rkv_opts *o, int n, int budget, const float *imp,
                     const float *const *k_rows, int k_offset, int head_dim, const uint8_t *held,
                     uint8_t *keep, void *scratch, size_t scratch_bytes, char *err, size_t errlen) {
    if (kv_bl_rkv_opts_check(o, err, errlen)) return -1;
    if (n < 0 || head_dim < 1) return tkv_errf(err, errlen, "rkv: bad shape n=%d head_dim=%d", n, head_dim);
    if (scratch_bytes < kv_bl_rkv_scratch_bytes(n))
        return tkv_errf(err, errlen, "rkv: scratch of %zu bytes, need %zu", scratch_bytes,
                        kv_bl_rkv_scratch_bytes(n));
    char *p = scratch;
    int *idx = take(&p, (size_t)n * sizeof(int));
    int m = 0;
    for (int j = 0; j < n; j++)
        if (!held || held[j]) idx[m++] = j;
    if (m <= budget) { /* r1_kv.py: kv_cache_len < budget returns the cache; == keeps all */
        for (int j = 0; j < n; j++) keep[j] = (uint8_t)(!held || held[j]);
        return 0;
    }
    if (budget <= o->window)
        return tkv_errf(err, errlen, "rkv: budget %d must exceed the window %d", budget, o->window);
    int w = o->window, c = m - w;
    if (n < w || idx[c] != n - w)
        return tkv_errf(err, errlen, "rkv: the window (positions %d..%d) must be held", n - w, n - 1);
    for (int i = 0; i < c; i++)
        if (!k_rows[idx[i]]) return tkv_errf(err, errlen, "rkv: held position %d has no K row", idx[i]);
    int *last = take(&p, (size_t)n * sizeof(int));
    float *a = take(&p, (size_t)n * sizeof(float));
    float *pooled = take(&p, (size_t)n * sizeof(float));
    float *norm = take(&p, (size_t)n * sizeof(float));
    float *lastval = take(&p, (size_t)n * sizeof(float));
    float *fin = take(&p, (size_t)n * sizeof(float));
    double *colsum = take(&p, (size_t)n * sizeof(double));
    void *pairs = take(&p, (size_t)n * kv_bl_pair_bytes());

    /* importance: pooled along the held non-window list (the authors pool their cache rows) */
    for (int i = 0; i < c; i++) a[i] = imp[idx[i]];
    kv_bl_pool1d(a, c, o->kernel, KV_BL_POOL_MAX, pooled);

    if (o->lambda < 1) { /* lambda == 1: importance only (decode-time SnapKV), skip O(m^2 d) */
        for (int i = c; i < m; i++)
            if (!k_rows[idx[i]]) return tkv_errf(err, errlen, "rkv: held position %d has no K row", idx[i]);
        redundancy(o, m, idx, k_rows, k_offset, head_dim, norm, last, lastval, colsum, a);
        for (int i = 0; i < c; i++)
            fin[i] = (float)(o->lambda * pooled[i] - (1 - o->lambda) * a[i]);
    } else {
        for (int i = 0; i < c; i++) fin[i] = pooled[i];
    }
    memset(keep, 0, (size_t)n);
    for (int i = c; i < m; i++) keep[idx[i]] = 1; /* the observation window */
    kv_bl_keep_topk(fin, idx, c, budget - w, keep, pairs);
    return 0;
}
