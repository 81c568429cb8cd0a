/* kv_view.h — what attention reads: slot tables, keep masks, stage slots (kv_view.c) */
#ifndef TKV_KV_VIEW_H
#define TKV_KV_VIEW_H
#include "kv/kv_pool.h"

/* Position pos of s moved (ref changed): its attention entry follows (its stage slot, if read
 * through STAGE). */
void kv_att_update(kv_cache *kv, kv_seq *s, int pos);
/* The STAGE slot that mirrors ref, a T1 or T2 slot read through STAGE (kv_pool.c grows STAGE to
 * hold every such slot's mirror). */
int32_t kv_stage_slot(const kv_cache *kv, int32_t ref);

/* Sets the keep mask of position pos for every layer and kv head (head-wise policies only). */
void kv_set_keep(const kv_cache *kv, kv_seq *s, int pos, uint8_t v);

#endif
