/* policy_hierarchy.c — hierarchy (the paper's): the ranked candidates fill T0, then T1 (exact, host
 * memory), then T2 (int8 or 4-bit) up to its share; only the tail past the eviction share is
 * evicted. An unpinned prompt waits in T1. */
#include "kv/kv_policy.h"

/* T2 takes its budget; T1 absorbs whatever the T2 and eviction budgets do not take */
static void hierarchy_host_caps(int rest, int b2, int room3, int out[2]) {
    out[1] = b2 > 0 ? b2 : 0;
    int t1 = rest - out[1] - (room3 > 0 ? room3 : 0);
    out[0] = t1 > 0 ? t1 : 0;
}

const kv_policy_ops kv_policy_hierarchy = {
    .kind = KV_POLICY_HIERARCHY, .name = "hierarchy", .tiered = 1, .overflow_tier = KV_T1, .uses_t1 = 1,
    .uses_t2 = 1, .t2_ratio_ok = 1, .evict_ratio_ok = 1, .unpin_ok = 1, .host_caps = hierarchy_host_caps,
    .select = kv_select_ranked,
};
