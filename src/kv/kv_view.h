/* kv_view.h — what attention reads: slot tables, keep masks, stage slots (kv_view.c) */
#ifndef TKV_KV_VIEW_H
#define TKV_KV_VIEW_H
#include "kv/kv_pool.h"

/* Position pos of s moved (ref changed): its attention entry and stage slot follow. */
void kv_att_update(kv_cache *kv, kv_seq *s, int pos);
/* Releases s's stage slot of pos, if any. */
void kv_att_release(kv_cache *kv, kv_seq *s, int pos);

/* Sets the keep mask of position pos for every layer and kv head (head-wise policies only). */
void kv_set_keep(const kv_cache *kv, kv_seq *s, int pos, uint8_t v);

#endif
