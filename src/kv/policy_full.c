/* policy_full.c — full: every token in T0, nothing moves, no scores: the reference every other
 * policy is measured against. */
#include "kv/kv_policy.h"

const kv_policy_ops kv_policy_full = {.kind = KV_POLICY_FULL, .name = "full", .overflow_tier = KV_T0};
