/* policy_evict.c — evict: the hierarchy's scores and budgets, and what does not fit in T0 is
 * evicted (the cliff the paper starts from). */
#include "kv/kv_policy.h"

const kv_policy_ops kv_policy_evict = {
    .kind = KV_POLICY_EVICT, .name = "evict", .tiered = 1, .overflow_tier = KV_T3, .select = kv_select_ranked,
};
