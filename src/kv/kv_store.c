/* kv_store.c — slot storage of one tier (see kv_store.h). */
#include "kv/kv_store.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/half.h"
#include "kv/kv_codec.h"

int64_t store_kind_token_bytes(int kind, int n_layer, int n_head_kv, int head_dim) {
    int64_t kv_dim = (int64_t)n_head_kv * head_dim;
    if (kind == KV_STORE_Q8) return (int64_t)n_layer * 2 * (kv_dim + n_head_kv * (int64_t)sizeof(float));
    return (int64_t)n_layer * 2 * kv_dim * (kind == KV_STORE_F16 ? (int64_t)sizeof(uint16_t) : (int64_t)sizeof(float));
}

void store_init(kv_store *st, int kind, int n_slots, int n_layer, int n_head_kv, int head_dim) {
    memset(st, 0, sizeof *st);
    st->kind = kind;
    st->n_slots = n_slots;
    st->n_layer = n_layer;
    st->n_head_kv = n_head_kv;
    st->head_dim = head_dim;
    st->kv_dim = n_head_kv * head_dim;
    TKV_ASSERT(st->kv_dim <= KV_STORE_MAX_DIM);
    size_t rows = (size_t)n_layer * (size_t)n_slots * 2;
    /* rows are not zeroed: a slot is always written before it is read, and untouched pages stay
     * uncommitted */
    st->token_bytes = store_kind_token_bytes(kind, n_layer, n_head_kv, head_dim);
    if (kind == KV_STORE_F32) {
        if (n_slots > 0) st->f32 = tkv_xmalloc(rows * st->kv_dim * sizeof(float));
    } else if (kind == KV_STORE_F16) {
        if (n_slots > 0) st->f16 = tkv_xmalloc(rows * st->kv_dim * sizeof(uint16_t));
    } else {
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
    free(st->f16);
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

/* one row (K or V) of a slot as f32, into buf (or a pointer to the F32 row itself) */
static const float *row_f32(const kv_store *st, int layer, int slot, int which, float *buf) {
    switch (st->kind) {
    case KV_STORE_F32: return store_row(st, layer, slot, which);
    case KV_STORE_F16: tkv_f16_row_to_f32(store_hrow(st, layer, slot, which), buf, (size_t)st->kv_dim); return buf;
    default:
        kv_q8_decode_row(store_qrow(st, layer, slot, which), store_scales(st, layer, slot, which), st->n_head_kv,
                         st->head_dim, buf);
        return buf;
    }
}

/* one f32 row into a slot of any kind */
static void put_row(kv_store *st, int layer, int slot, int which, const float *x) {
    switch (st->kind) {
    case KV_STORE_F32: memcpy(store_row(st, layer, slot, which), x, (size_t)st->kv_dim * sizeof(float)); break;
    case KV_STORE_F16: tkv_f32_row_to_f16(x, store_hrow(st, layer, slot, which), (size_t)st->kv_dim); break;
    default:
        kv_q8_encode_row(x, st->n_head_kv, st->head_dim, store_qrow(st, layer, slot, which),
                         store_scales(st, layer, slot, which));
    }
}

int64_t store_copy_layer(const kv_store *src, int src_slot, kv_store *dst, int dst_slot, int layer) {
    int64_t layer_bytes = src->token_bytes / src->n_layer;
    float buf[KV_STORE_MAX_DIM];
    for (int w = 0; w < 2; w++) {
        if (src->kind == dst->kind && src->kind == KV_STORE_F16) {
            memcpy(store_hrow(dst, layer, dst_slot, w), store_hrow(src, layer, src_slot, w),
                   (size_t)src->kv_dim * sizeof(uint16_t));
        } else if (src->kind == dst->kind && src->kind == KV_STORE_Q8) {
            memcpy(store_qrow(dst, layer, dst_slot, w), store_qrow(src, layer, src_slot, w), (size_t)src->kv_dim);
            memcpy(store_scales(dst, layer, dst_slot, w), store_scales(src, layer, src_slot, w),
                   (size_t)src->n_head_kv * sizeof(float));
        } else { /* F32 -> F32 is a copy through row_f32's pointer; the rest convert through f32 */
            put_row(dst, layer, dst_slot, w, row_f32(src, layer, src_slot, w, buf));
        }
    }
    return layer_bytes;
}

void store_read_layer(const kv_store *st, int slot, int layer, float *k, float *v) {
    const float *a = row_f32(st, layer, slot, 0, k), *b = row_f32(st, layer, slot, 1, v);
    if (a != k) memcpy(k, a, (size_t)st->kv_dim * sizeof(float));
    if (b != v) memcpy(v, b, (size_t)st->kv_dim * sizeof(float));
}

void store_read_layer_f16(const kv_store *st, int slot, int layer, uint16_t *k, uint16_t *v) {
    if (st->kind == KV_STORE_F16) {
        memcpy(k, store_hrow(st, layer, slot, 0), (size_t)st->kv_dim * sizeof(uint16_t));
        memcpy(v, store_hrow(st, layer, slot, 1), (size_t)st->kv_dim * sizeof(uint16_t));
        return;
    }
    float buf[KV_STORE_MAX_DIM];
    tkv_f32_row_to_f16(row_f32(st, layer, slot, 0, buf), k, (size_t)st->kv_dim);
    tkv_f32_row_to_f16(row_f32(st, layer, slot, 1, buf), v, (size_t)st->kv_dim);
}

void store_write_layer(kv_store *st, int slot, int layer, const float *k, const float *v) {
    TKV_ASSERT(st->kind == KV_STORE_F32 || st->kind == KV_STORE_F16);
    put_row(st, layer, slot, 0, k);
    put_row(st, layer, slot, 1, v);
}
