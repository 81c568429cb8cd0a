/* kv_budget.h — budgets and protection (kv_budget.c) */
#ifndef TKV_KV_BUDGET_H
#define TKV_KV_BUDGET_H
#include "kv/kv_state.h"

int kv_validate(const kv_options *o, const kv_policy_ops *ops, int *mode, int *seq_tokens, int64_t *shared_tokens,
                char *err, size_t errlen);
/* T0 budget in tokens of sequence s at length len (raised to the protected tokens, *raised set). */
int kv_t0_budget(const kv_cache *kv, const kv_seq *s, int len, int *raised);
/* An idle sequence's T0 budget: the T0 slots it shares with another sequence (a prompt prefix: they
 * never move); the rest of its rows leave T0 (kv_seq_idle). */
int kv_idle_t0(const kv_cache *kv, const kv_seq *s);
/* Number of protected positions at length len. */
int kv_prot_count(const kv_cache *kv, const kv_seq *s, int len);
int kv_is_protected(const kv_cache *kv, const kv_seq *s, int pos, int len);
/* T0 tokens a sequence of n_ctx positions with an n_prompt-token prompt must be able to hold. */
int kv_reserve_need(const kv_cache *kv, int n_ctx, int n_prompt);
/* The most slots of pool t (BE_T0..BE_STAGE) one sequence of n_ctx positions with an n_prompt-token
 * prompt may hold: what kv_pools_reserve reserves for it (0: it never uses the pool; a shared T0 is
 * allocated whole at init and counts 0 here). A bound that proves short only means a later growth. */
int kv_tier_bound(const kv_cache *kv, int t, int n_ctx, int n_prompt);
/* The baselines' budget in tokens at length len. */
int kv_bl_budget(const kv_cache *kv, int len);
/* Bytes of one (layer, kv head) row of one token: K and V, f32 or fp16. */
int64_t kv_row_bytes(const kv_cache *kv);
int kv_ratio_tokens(double r, int len);

#endif
