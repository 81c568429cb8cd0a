/* policy_sink.c — sink: attention sinks and the recent window only (StreamingLLM's cache without
 * its budget rule). T0 holds exactly the protected tokens (the prompt, the first --sinks and the
 * last --window positions); a token leaving the window is evicted at once (the overflow on append),
 * so no T0 budget applies. Built from the ranked machinery: with no room beyond the protected
 * tokens and no host tiers every candidate is evicted. The demonstration that a policy is one
 * table: this file and one registry line. */
#include "kv/kv_policy.h"

const kv_policy_ops kv_policy_sink = {
    .kind = KV_POLICY_SINK, .name = "sink", .tiered = 1, .fixed_t0 = 1, .overflow_tier = KV_T3,
    .select = kv_select_ranked,
};
