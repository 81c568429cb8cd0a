/* kv_pool.h — slots: the pools of each tier, who holds what (kv_pool.c) */
#ifndef TKV_KV_POOL_H
#define TKV_KV_POOL_H
#include "kv/kv_state.h"

int kv_pools_init(kv_cache *kv, char *err, size_t errlen);
/* Admission by memory: the host bytes a sequence of n_ctx positions may take at its full length
 * (its K/V rows in the costliest tier it can use, and its per-position metadata) in *bytes; -1 with
 * the numbers when that, with what the live sequences may still take beyond the chunks already
 * allocated, exceeds the memory available (tkv_mem_available). */
int kv_pools_admit(const kv_cache *kv, int n_ctx, int64_t *bytes, char *err, size_t errlen);
void kv_pools_free(kv_cache *kv);
/* Grows every pool to the slots its live sequences may need at their full lengths (tp[t].reserved),
 * so that no step allocates: before a sequence's first step. -1 with a message when memory is out. */
int kv_pools_reserve(kv_cache *kv, char *err, size_t errlen);
/* A fresh slot of tier t for sequence seq (holders 1), growing the pool by a chunk when needed;
 * BE_SLOT_NONE when the tier is at its cap. Aborts (with a message) when memory runs out. */
int32_t kv_slot_alloc(kv_cache *kv, int tier);
/* One more holder of a slot (a shared prefix). */
void kv_slot_hold(kv_cache *kv, int32_t ref);
/* One holder fewer; the slot returns to its pool's free list at zero. Returns the holders left. */
int kv_slot_drop(kv_cache *kv, int32_t ref);
int kv_slot_holders(const kv_cache *kv, int32_t ref);
/* 1 when tier t (T1 or T2) is read through STAGE: STAGE then mirrors its chunks (kv_stage_slot). */
int kv_stage_mirrors(const kv_cache *kv, int t);
/* Records the T0 peak after any change of its use. */
void kv_pool_note_peak(kv_cache *kv, int tier);

#endif
