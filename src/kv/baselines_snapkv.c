/* baselines_snapkv.c — SnapKV (Li et al., 2024): the prompt's last `window` queries vote for the
 * earlier prompt positions; pooled votes pick the top budget - window, the window stays.
 * Constants follow FasterDecoding/SnapKV (snapkv/monkeypatch/snapkv_utils.py SnapKVCluster,
 * experiments/LongBench/config/ablation_c{1024,2048,4096}_w32_k7_maxpool.json). Runs once per (layer, kv head) at the end
 * of the prompt; decode tokens are never evicted by this method. */
#include "kv/baselines.h"

#include <string.h>

#include "base/err.h"

void kv_bl_snapkv_opts_default(kv_bl_snapkv_opts *o) {
    o->window = 32;          /* init_snapkv window_size = 32; LongBench configs w32 */
    o->kernel = 7;           /* LongBench configs k7 (init_snapkv default: 5) */
    o->pool = KV_BL_POOL_MAX; /* LongBench configs maxpool (init_snapkv default: avgpool) */
    o->gqa = KV_BL_GQA_MAX;  /* our choice: the original repeats K/V and selects per q head */
}

int kv_bl_snapkv_opts_check(const kv_bl_snapkv_opts *o, char *err, size_t errlen) {
    if (o->window < 1) return tkv_errf(err, errlen, "snapkv: window %d must be >= 1", o->window);
    if (o->kernel < 1 || (o->kernel & 1) == 0)
        return tkv_errf(err, errlen, "snapkv: kernel %d must be odd and >= 1", o->kernel);
    return 0;
}

void kv_bl_snapkv_observe(float *acc, int acc_stride, const float *att, int att_stride, int group,
                          int n_prefix) {
    /* sum over the window's queries of the causal softmax, per q head (attn_weights_sum) */
    for (int h = 0; h < group; h++) {
        float *dst = acc + (size_t)h * (size_t)acc_stride;
        const float *src = att + (size_t)h * (size_t)att_stride;
        for (int j = 0; j < n_prefix; j++) dst[j] += src[j];
    }
}

size_t kv_bl_snapkv_scratch_bytes(int n) {
    size_t m = n > 0 ? (size_t)n : 1;
    return m * (2 * sizeof(float) + sizeof(int) + kv_bl_pair_bytes()) + 64;
}

int kv_bl_snapkv_select(const kv_bl_snapkv_opts *o, int n, int budget, const float *acc,
                        int acc_stride, int group, uint8_t *keep, void *scratch,
                        size_t scratch_bytes, char *err, size_t errlen) {
    if (kv_bl_snapkv_opts_check(o, err, errlen)) return -1;
    if (n < 0 || group < 1) return tkv_errf(err, errlen, "snapkv: bad shape n=%d group=%d", n, group);
    if (n <= budget) { /* q_len < max_capacity_prompt: no compression; == keeps all */
        memset(keep, 1, (size_t)n);
        return 0;
    }
    if (budget <= o->window)
        return tkv_errf(err, errlen, "snapkv: budget %d must exceed the window %d", budget,
                        o->window);
    if (scratch_bytes < kv_bl_snapkv_scratch_bytes(n))
        return tkv_errf(err, errlen, "snapkv: scratch of %zu bytes, need %zu", scratch_bytes,
                        kv_bl_snapkv_scratch_bytes(n));
    int np = n - o->window;
    float *comb = scratch;
    float *pooled = comb + n;
    int *pos = (int *)(pooled + n);
    void *pairs = pos + n + (n & 1); /* 8-byte aligned for the pairs */
    for (int j = 0; j < np; j++) {
        comb[j] = kv_bl_gqa_combine(acc, acc_stride, group, j, o->gqa);
        pos[j] = j;
    }
    kv_bl_pool1d(comb, np, o->kernel, o->pool, pooled);
    memset(keep, 0, (size_t)n);
    for (int j = np; j < n; j++) keep[j] = 1; /* the observation window */
    kv_bl_keep_topk(pooled, pos, np, budget - o->window, keep, pairs);
    return 0;
}
