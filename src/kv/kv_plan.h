/* kv_plan.h — the planner: every tier change, as batches of moves (kv_plan.c) */
#ifndef TKV_KV_PLAN_H
#define TKV_KV_PLAN_H
#include "kv/kv_budget.h"
#include "kv/kv_view.h"

/* Position pos of s now lives at ref (BE_SLOT_NONE: evicted): tier counts, lossy flag, stage slot
 * and keep masks follow. The old slot is the caller's to release or defer. */
void kv_place(kv_cache *kv, kv_seq *s, int pos, int32_t ref);
/* Re-tiers the sequences seqs[0..n) (all live ones in the shared mode) into one batch and starts it. */
void kv_retier(kv_cache *kv, const int *seqs, int n);
/* Re-tiers one sequence now, into a batch of its own: an idle one out of T0 (kv_seq_idle), a live one
 * to its budget and protection (all live ones in the shared mode: one ranking for all). */
void kv_retier_one(kv_cache *kv, kv_seq *s);
/* An idle sequence's T1 rows go to T2 (the policy's codec) through one batch of moves, waited for:
 * the rows it holds while no one attends them, halved or quartered. The count moved (0: not idle, or
 * no T2 in this cache). */
int kv_idle_to_t2(kv_cache *kv, kv_seq *s);
/* Evicts the n positions pos[] of s (all in T0) now, as a batch of their own (a baseline's step). */
void kv_evict_now(kv_cache *kv, kv_seq *s, const int32_t *pos, int n);
/* Waits for the batch in flight and frees its source slots. */
void kv_complete_batch(kv_cache *kv);
/* Finds a T0 slot for the token being appended to s at position s->len (prompt flag already set). */
int32_t kv_t0_slot_for_new(kv_cache *kv, kv_seq *s, char *err, size_t errlen);
/* Orders the compute queue after every copy submitted so far, on every layer (before slots that
 * copies read are freed). */
void kv_fence_all(kv_cache *kv);
/* The per-layer fence: waits until the batch in flight has finished layer `layer`. */
void kv_fence(kv_cache *kv, int layer);
/* The batch in flight completed, and the host waits until the device has run every copy: before the
 * host itself reads or writes host-pool records (a fence orders only the device's later work). */
void kv_settle(kv_cache *kv);

/* Demotes s's lowest-scored unprotected T0 tokens (sync) until s is within its own T0 budget: at the
 * end of a forward call, for an unpinned prompt whose chunk T0 held while it was being written. */
void kv_trim_t0(kv_cache *kv, kv_seq *s);

#endif
