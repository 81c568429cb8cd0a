/* policy_quant.c — quant: what does not fit in T0 goes to T2 (no T1), only the tail past the
 * eviction share is evicted. */
#include "kv/kv_policy.h"

/* no T1: T2 takes all but the eviction tail */
static void quant_host_caps(int rest, int b2, int room3, int out[2]) {
    (void)b2;
    int t2 = rest - (room3 > 0 ? room3 : 0);
    out[0] = 0;
    out[1] = t2 > 0 ? t2 : 0;
}

const kv_policy_ops kv_policy_quant = {
    .kind = KV_POLICY_QUANT, .name = "quant", .tiered = 1, .overflow_tier = KV_T2, .uses_t2 = 1,
    .evict_ratio_ok = 1, .host_caps = quant_host_caps, .select = kv_select_ranked,
};
