/* kv_store.c — slot storage of one tier (see kv_store.h). */
#include "kv/kv_store.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_codec.h"

void store_init(kv_store *st, int kind, int n_slots, int n_layer, int n_head_kv, int head_dim) {
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->n_slots = n_slots;
    st->n_layer = n_layer;
    st->n_head_kv = n_head_kv;
    st->head_dim = head_dim;
    st->kv_dim = n_head_kv * head_dim;
    size_t rows = (size_t)n_layer * (size_t)n_slots * 2;
    if (kind == KV_STORE_F32) {
        st->token_bytes = (int64_t)n_layer * 2 * st->kv_dim * (int64_t)sizeof(float);
        /* not zeroed: a slot is always written before it is read, and untouched pages stay uncommitted */
        if (n_slots > 0) st->f32 = tkv_xmalloc(rows * st->kv_dim * sizeof(float));
    } else {
        st->token_bytes = (int64_t)n_layer * 2 * (st->kv_dim + n_head_kv * (int64_t)sizeof(float));
        if (n_slots > 0) {
            st->q8 = tkv_xmalloc(rows * st->kv_dim);
            st->scales = tkv_xmalloc(rows * n_head_kv * sizeof(float));
        }
    }
    st->free_stack = tkv_xmalloc((size_t)(n_slots > 0 ? n_slots : 1) * sizeof(int32_t));
    for (int i = 0; i < n_slots; i++) st->free_stack[i] = n_slots - 1 - i; /* slot 0 on top */
    st->n_free = n_slots;
}

void store_free(kv_store *st) {
    free(st->f32);
    free(st->q8);
    free(st->scales);
    free(st->free_stack);
    memset(st, 0, sizeof *st);
}

int store_alloc(kv_store *st) {
    if (st->n_free == 0) return -1;
    return st->free_stack[--st->n_free];
}

void store_release(kv_store *st, int slot) {
    TKV_ASSERT(slot >= 0 && slot < st->n_slots && st->n_free < st->n_slots);
    st->free_stack[st->n_free++] = slot;
}

int64_t store_copy_layer(const kv_store *src, int src_slot, kv_store *dst, int dst_slot, int layer) {
    int64_t layer_bytes = src->token_bytes / src->n_layer;
    for (int w = 0; w < 2; w++) {
        if (src->kind == KV_STORE_F32 && dst->kind == KV_STORE_F32) {
            memcpy(store_row(dst, layer, dst_slot, w), store_row(src, layer, src_slot, w),
                   (size_t)src->kv_dim * sizeof(float));
        } else if (src->kind == KV_STORE_F32) {
            kv_q8_encode_row(store_row(src, layer, src_slot, w), src->n_head_kv, src->head_dim,
                             store_qrow(dst, layer, dst_slot, w), store_scales(dst, layer, dst_slot, w));
        } else if (dst->kind == KV_STORE_F32) {
            kv_q8_decode_row(store_qrow(src, layer, src_slot, w), store_scales(src, layer, src_slot, w),
                             src->n_head_kv, src->head_dim, store_row(dst, layer, dst_slot, w));
        } else {
            memcpy(store_qrow(dst, layer, dst_slot, w), store_qrow(src, layer, src_slot, w), (size_t)src->kv_dim);
            memcpy(store_scales(dst, layer, dst_slot, w), store_scales(src, layer, src_slot, w),
                   (size_t)src->n_head_kv * sizeof(float));
        }
    }
    return layer_bytes;
}

void store_read_layer(const kv_store *st, int slot, int layer, float *k, float *v) {
    if (st->kind == KV_STORE_F32) {
        memcpy(k, store_row(st, layer, slot, 0), (size_t)st->kv_dim * sizeof(float));
        memcpy(v, store_row(st, layer, slot, 1), (size_t)st->kv_dim * sizeof(float));
    } else {
        kv_q8_decode_row(store_qrow(st, layer, slot, 0), store_scales(st, layer, slot, 0), st->n_head_kv, st->head_dim, k);
        kv_q8_decode_row(store_qrow(st, layer, slot, 1), store_scales(st, layer, slot, 1), st->n_head_kv, st->head_dim, v);
    }
}
