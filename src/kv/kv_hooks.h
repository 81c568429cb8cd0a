/* kv_hooks.h — the own-budget policies' hooks run on the cache (kv_baselines.c) */
#ifndef TKV_KV_HOOKS_H
#define TKV_KV_HOOKS_H
#include "kv/kv_plan.h"

/* Runs the policy's step hook on sequence seq (every kv_step_end, and once at the end of the
 * prompt): its keep masks change and the tokens it evicts leave through the planner. */
void kv_policy_step(kv_cache *kv, int seq);

#endif
