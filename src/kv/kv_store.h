/* kv_store.h — one tier's storage for one sequence: a preallocated array of token slots and a free
 * stack, with exact byte accounting. A slot holds one token for every layer. Layout is per layer
 * ([layer][slot][K|V][kv_dim]) so that one layer's rows are contiguous, like a per-layer page table.
 * Kinds: F32 or F16 (T0 and T1: the rows the forward wrote, bit for bit, or rounded once to fp16 when
 * the cache's element type is f16, llama.cpp's default) and Q8 (T2: int8 rows plus one f32 scale per
 * kv head, see kv_codec.h). The store knows nothing about scores or policies; it never
 * allocates after store_init. */
#ifndef TKV_KV_STORE_H
#define TKV_KV_STORE_H
#include <stddef.h>
#include <stdint.h>

enum { KV_STORE_F32 = 0, KV_STORE_Q8 = 1, KV_STORE_F16 = 2 };

/* Largest kv_dim (n_head_kv * head_dim) the conversions between kinds support (stack buffers). */
#define KV_STORE_MAX_DIM 8192

typedef struct {
    int kind;            /* KV_STORE_F32, KV_STORE_F16 or KV_STORE_Q8 */
    int n_slots;         /* capacity in tokens (0: tier unused) */
    int n_layer, n_head_kv, head_dim, kv_dim;
    float *f32;          /* F32: [layer][slot][2][kv_dim] */
    uint16_t *f16;       /* F16: [layer][slot][2][kv_dim] (IEEE half bits) */
    int8_t *q8;          /* Q8:  [layer][slot][2][kv_dim] */
    float *scales;       /* Q8:  [layer][slot][2][n_head_kv] */
    int32_t *free_stack; /* [n_slots] free slot ids; top at n_free-1 */
    int n_free;
    int64_t token_bytes; /* bytes one token occupies in this tier (all layers, K and V, scales) */
} kv_store;

void store_init(kv_store *st, int kind, int n_slots, int n_layer, int n_head_kv, int head_dim);
/* Bytes one token takes in a store of this kind (the token_bytes store_init sets). */
int64_t store_kind_token_bytes(int kind, int n_layer, int n_head_kv, int head_dim);
void store_free(kv_store *st);
/* Slot id or -1 when full. Lowest ids are handed out first (deterministic). */
int store_alloc(kv_store *st);
void store_release(kv_store *st, int slot);
static inline int store_in_use(const kv_store *st) { return st->n_slots - st->n_free; }

static inline float *store_row(const kv_store *st, int layer, int slot, int which) {
    return st->f32 + (((size_t)layer * st->n_slots + slot) * 2 + which) * st->kv_dim;
}
static inline uint16_t *store_hrow(const kv_store *st, int layer, int slot, int which) {
    return st->f16 + (((size_t)layer * st->n_slots + slot) * 2 + which) * st->kv_dim;
}
/* The row of an F32 or F16 store, whichever its kind. */
static inline const void *store_any_row(const kv_store *st, int layer, int slot, int which) {
    return st->kind == KV_STORE_F16 ? (const void *)store_hrow(st, layer, slot, which)
                                    : (const void *)store_row(st, layer, slot, which);
}
static inline int8_t *store_qrow(const kv_store *st, int layer, int slot, int which) {
    return st->q8 + (((size_t)layer * st->n_slots + slot) * 2 + which) * st->kv_dim;
}
static inline float *store_scales(const kv_store *st, int layer, int slot, int which) {
    return st->scales + (((size_t)layer * st->n_slots + slot) * 2 + which) * st->n_head_kv;
}

/* Copies (and converts between kinds as needed: F16 <-> Q8 goes through f32) one layer of one token from src slot to dst slot.
 * Returns the bytes read from the source. */
int64_t store_copy_layer(const kv_store *src, int src_slot, kv_store *dst, int dst_slot, int layer);
/* Writes one layer's K and V of a slot as f32 into k and v (a copy for F32, exact widening for F16,
 * dequantised for Q8). */
void store_read_layer(const kv_store *st, int slot, int layer, float *k, float *v);
/* The same as fp16 bits (F16: a copy; F32: rounded to nearest even; Q8: dequantised, then rounded). */
void store_read_layer_f16(const kv_store *st, int slot, int layer, uint16_t *k, uint16_t *v);
/* Stores f32 K and V rows of one layer into a slot of an F32 or F16 store (F16: rounded to nearest
 * even, the same rounding as llama.cpp's f16 cache). */
void store_write_layer(kv_store *st, int slot, int layer, const float *k, const float *v);

#endif
