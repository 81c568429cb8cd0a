/* kv_view.c — what attention reads. Each sequence keeps a slot table `att` beside its true locations
 * `ref`: they agree except for positions read through STAGE (T2 always, dequantised there; T1 too
 * with --staged, the data path a GPU needs), which own one stage slot each for as long as they stay
 * in such a tier. Before a layer's attention kv_layer_begin fences the layer and copies that layer's
 * rows of every staged position of the batch into their stage slots (the STAGE pool is layer-less).
 * kv_view_layer builds host row pointers from the same tables, for tests and host readers; the
 * baselines read f32 keys through the backend's kv_read. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_internal.h"

static int staged_tier(const kv_cache *kv, int32_t ref) {
    if (ref == BE_SLOT_NONE) return 0;
    int t = BE_SLOT_TIER(ref);
    return t == BE_T2 || (t == BE_T1 && kv->o.staged);
}

void kv_att_release(kv_cache *kv, kv_seq *s, int pos) {
    int32_t a = s->att[pos];
    if (a != BE_SLOT_NONE && BE_SLOT_TIER(a) == BE_STAGE) kv_slot_drop(kv, a);
    s->att[pos] = BE_SLOT_NONE;
}

void kv_att_update(kv_cache *kv, kv_seq *s, int pos) {
    int32_t r = s->ref[pos], a = s->att[pos];
    int has_stage = a != BE_SLOT_NONE && BE_SLOT_TIER(a) == BE_STAGE;
    if (staged_tier(kv, r)) {
        if (!has_stage) {
            s->att[pos] = kv_slot_alloc(kv, BE_STAGE);
            TKV_ASSERT(s->att[pos] != BE_SLOT_NONE);
        }
        return;
    }
    if (has_stage) kv_slot_drop(kv, a);
    s->att[pos] = r;
}

const int32_t *kv_attn_slots(const kv_cache *kv, int seq) { return kv_get_seq(kv, seq)->att; }

int kv_keep_stride(const kv_cache *kv) { return kv->o.n_ctx; }

const uint8_t *kv_attn_keep(const kv_cache *kv, int seq, int layer) {
    const kv_seq *s = kv_get_seq(kv, seq);
    return s->keep_used ? s->keep + (size_t)layer * kv->o.n_head_kv * (size_t)kv_keep_stride(kv) : NULL;
}

/* Copies layer `layer` of every staged position of s into its stage slot (appended to the list). */
static int collect_stage(kv_cache *kv, kv_seq *s, int n) {
    for (int p = 0; p < s->len; p++) {
        int32_t a = s->att[p];
        if (a == BE_SLOT_NONE || BE_SLOT_TIER(a) != BE_STAGE) continue;
        if (n == kv->cap_stage_moves) {
            int c = n ? 2 * n : 256;
            be_move *m = realloc(kv->stage_moves, (size_t)c * sizeof *m);
            TKV_ASSERT(m);
            kv->stage_moves = m;
            kv->cap_stage_moves = c;
        }
        kv->stage_moves[n++] = (be_move){s->ref[p], a};
        s->c.bytes_staged += kv->stage_bytes_layer;
    }
    return n;
}

static void run_stage(kv_cache *kv, int n, int layer) {
    if (n > 0) kv->be->ops->copy_moves(kv->be, &kv->pools, kv->stage_moves, n, layer);
    if (n > 0 || kv->batch.active) kv->be->ops->copy_wait(kv->be, layer);
}

void kv_layer_begin(kv_cache *kv, const int *seqs, int n_seqs, int layer) {
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer);
    if (kv->batch.active && kv->xfer) kv->retired.fence_wait_seconds += xfer_wait_layer(kv->xfer, layer);
    int n = 0;
    if (kv->tp[BE_STAGE].n_slots > 0)
        for (int i = 0; i < n_seqs; i++) {
            int dup = 0;
            for (int j = 0; j < i && !dup; j++) dup = seqs[j] == seqs[i];
            if (!dup) n = collect_stage(kv, kv_get_seq(kv, seqs[i]), n);
        }
    run_stage(kv, n, layer);
}

void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out) {
    kv_seq *s = kv_get_seq(kv, seq);
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer);
    kv_layer_begin(kv, &seq, 1, layer);
    size_t kb = (size_t)kv->kv_dim * (kv->o.f16 ? 2 : 4);
    for (int p = 0; p < s->len; p++) {
        int32_t a = s->att[p];
        const char *k = NULL, *v = NULL;
        if (a != BE_SLOT_NONE) {
            TKV_ASSERT(kv->pools.pool[BE_SLOT_TIER(a)].mem != BE_MEM_DEVICE || kv->be->ops->unified);
            k = be_kv_record(&kv->pools, a, layer);
            v = k + kb;
        }
        if (kv->o.f16) s->hk[p] = (const uint16_t *)(const void *)k, s->hv[p] = (const uint16_t *)(const void *)v;
        else s->vk[p] = (const float *)(const void *)k, s->vv[p] = (const float *)(const void *)v;
    }
    memset(out, 0, sizeof *out);
    if (kv->o.f16) out->k16 = s->hk, out->v16 = s->hv;
    else out->k = s->vk, out->v = s->vv;
    out->keep = kv_attn_keep(kv, seq, layer);
    out->keep_stride = out->keep ? kv_keep_stride(kv) : 0;
    out->n = s->len;
}
