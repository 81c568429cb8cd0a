/* kv_pool.c — the mechanism under the hierarchy: one pool of slots per tier (T0, T1, T2, and the
 * layer-less STAGE scratch), shared by every sequence of the cache. A pool grows by whole chunks of
 * 1 << KV_CHUNK_SHIFT slots taken from the backend (device memory for T0 and STAGE, pinned host
 * memory for T1 and T2); a shared T0 budget is allocated whole at init and never grows.
 * Slots are handed out lowest id first from a free stack (deterministic); each slot counts its
 * holders (sequences), so a prompt prefix can be held once by several sequences.
 * STAGE hands out no slots: it mirrors the tiers read through it (kv_stage_slot), chunk for chunk,
 * and grows with them: a chunk of STAGE for each chunk of T1 or T2 it mirrors, in the order they
 * were added (kv->stage_chunk, kv->stage_src).
 * Knows nothing about scores, budgets or policies. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/meminfo.h"
#include "kv/kv_pool.h"

/* The pool layout of each tier: element format, memory, layer dimension. */
static void tier_layout(const kv_cache *kv, int t, be_kv_fmt *fmt, be_mem *mem, int *layers) {
    be_kv_fmt exact = kv->o.f16 ? BE_KV_F16 : BE_KV_F32;
    switch (t) {
    case BE_T0: *fmt = exact, *mem = BE_MEM_DEVICE, *layers = kv->o.n_layer; break;
    case BE_T1: *fmt = exact, *mem = BE_MEM_PINNED, *layers = kv->o.n_layer; break;
    case BE_T2: *fmt = kv->o.t2_fmt, *mem = BE_MEM_PINNED, *layers = kv->o.n_layer; break; /* a GPU quantises into it */
    default: /* STAGE: one layer at a time on the CPU (copies are synchronous); off it two, so that the
              * copies of layer l+1 can run while layer l's attention reads its own (the backend
              * orders the writes of layer slot l % 2 after the reads of the layer before) */
        *fmt = exact, *mem = BE_MEM_DEVICE, *layers = kv->be->ops->unified ? 1 : KV_STAGE_LAYERS;
        break;
    }
}

static size_t chunk_bytes(const be_kv_pool *p) { return ((size_t)1 << p->chunk_shift) * (size_t)p->layers * p->record_bytes; }

int kv_stage_mirrors(const kv_cache *kv, int t) {
    return (t == BE_T2 && kv->t2_staged) || (t == BE_T1 && kv->o.staged && kv->ops->uses_t1);
}

static int grow(kv_cache *kv, int t, char *err, size_t errlen);

/* A STAGE chunk for chunk c of tier t (T1 or T2), the next one: the two tiers' mirrors take STAGE
 * chunks in the order the tiers grew, so STAGE holds as many chunks as the tiers it mirrors. */
static int stage_follow(kv_cache *kv, int t, int c, char *err, size_t errlen) {
    if (grow(kv, BE_STAGE, err, errlen)) return -1;
    int32_t k = (int32_t)kv->pools.pool[BE_STAGE].n_chunks - 1;
    kv->stage_chunk[t - BE_T1][c] = k;
    kv->stage_src[k] = BE_SLOT(t, c << KV_CHUNK_SHIFT);
    return 0;
}

/* Adds one chunk to pool t (and STAGE's mirror of it); -1 with a message when the chunk array is
 * full or memory is out, the pools then as they were (no slot without its mirror). */
static int grow(kv_cache *kv, int t, char *err, size_t errlen) {
    be_kv_pool *bp = &kv->pools.pool[t];
    kv_tpool *p = &kv->tp[t];
    if (bp->n_chunks >= p->cap_chunks)
        return tkv_errf(err, errlen, "kv: T%d pool is at its %d chunks (%lld slots)", t, p->cap_chunks,
                        (long long)p->cap_chunks << KV_CHUNK_SHIFT);
    size_t bytes = chunk_bytes(bp);
    void *c = kv->be->ops->alloc(kv->be, bytes, bp->mem, err, errlen);
    if (!c) return -1;
    bp->chunks[bp->n_chunks++] = c;
    if (kv_stage_mirrors(kv, t) && stage_follow(kv, t, bp->n_chunks - 1, err, errlen)) {
        bp->chunks[--bp->n_chunks] = NULL;
        kv->be->ops->free(kv->be, c, bp->mem);
        return -1;
    }
    int per = 1 << KV_CHUNK_SHIFT, base = p->n_slots;
    int32_t *nf = realloc(p->free, (size_t)(p->n_slots + per) * sizeof *nf);
    uint16_t *nh = realloc(p->holders, (size_t)(p->n_slots + per) * sizeof *nh);
    TKV_ASSERT(nf && nh);
    p->free = nf;
    p->holders = nh;
    memset(p->holders + base, 0, (size_t)per * sizeof *nh);
    /* new slots go under the free ones left (there are none when we grow), lowest on top */
    memmove(p->free + per, p->free, (size_t)p->n_free * sizeof *nf);
    for (int i = 0; i < per; i++) p->free[i] = base + per - 1 - i;
    p->n_free += per;
    p->n_slots += per;
    return 0;
}

int kv_pools_init(kv_cache *kv, char *err, size_t errlen) {
    const kv_options *o = &kv->o;
    kv->pools.n_layer = o->n_layer;
    kv->pools.n_head_kv = o->n_head_kv;
    kv->pools.head_dim = o->head_dim;
    kv->pools.k_center = o->k_center;
    int64_t per = (int64_t)1 << KV_CHUNK_SHIFT;
    int64_t all = (int64_t)o->n_seq * o->n_ctx; /* the most tokens any pool can ever hold */
    for (int t = 0; t < BE_N_POOLS; t++) {
        be_kv_pool *bp = &kv->pools.pool[t];
        kv_tpool *p = &kv->tp[t];
        memset(p, 0, sizeof *p);
        p->tier = t;
        p->cap_slots = INT64_MAX;
        tier_layout(kv, t, &bp->fmt, &bp->mem, &bp->layers);
        bp->chunk_shift = KV_CHUNK_SHIFT;
        bp->record_bytes = be_kv_record_bytes(bp->fmt, o->n_head_kv, o->head_dim);
        int used = t == BE_T0 || (t == BE_T1 && kv->ops->uses_t1) || (t == BE_T2 && kv->ops->uses_t2);
        int64_t slots = !used ? 0 : t == BE_T0 && kv->mode == KV_B_SHARED && kv->shared_tokens < all ? kv->shared_tokens : all;
        if (t == BE_T0 && kv->mode == KV_B_SHARED) p->cap_slots = kv->shared_tokens;
        int64_t chunks = (slots + per - 1) / per;
        if (t == BE_STAGE) /* the mirror of the others at their caps (set above: STAGE comes last) */
            chunks = (kv_stage_mirrors(kv, BE_T1) ? kv->tp[BE_T1].cap_chunks : 0) +
                     (kv_stage_mirrors(kv, BE_T2) ? kv->tp[BE_T2].cap_chunks : 0);
        if (chunks > (1 << 22)) chunks = 1 << 22;
        p->cap_chunks = (int)chunks;
        bp->chunks = tkv_xcalloc((size_t)(chunks > 0 ? chunks : 1), sizeof(void *));
        if (t == BE_T1 || t == BE_T2) {
            kv->stage_chunk[t - BE_T1] = tkv_xmalloc((size_t)(chunks > 0 ? chunks : 1) * sizeof(int32_t));
            for (int64_t c = 0; c < chunks; c++) kv->stage_chunk[t - BE_T1][c] = -1;
        }
        if (t == BE_STAGE) kv->stage_src = tkv_xcalloc((size_t)(chunks > 0 ? chunks : 1), sizeof(int32_t));
    }
    if (kv->mode == KV_B_SHARED) /* the hard budget is allocated once, whole (no more than can ever be used) */
        while (kv->tp[BE_T0].n_slots < kv->shared_tokens && kv->tp[BE_T0].n_slots < all)
            if (grow(kv, BE_T0, err, errlen)) return -1;
    return 0;
}

int kv_pools_reserve(kv_cache *kv, char *err, size_t errlen) {
    int64_t per = (int64_t)1 << KV_CHUNK_SHIFT;
    for (int t = 0; t < BE_STAGE; t++) { /* STAGE grows with the tiers it mirrors */
        kv_tpool *p = &kv->tp[t];
        int64_t want = p->reserved < p->cap_slots ? p->reserved : p->cap_slots;
        if (want > (int64_t)p->cap_chunks * per) want = (int64_t)p->cap_chunks * per;
        while (p->n_slots < want)
            if (grow(kv, t, err, errlen)) return -1;
    }
    return 0;
}

int kv_pools_admit(const kv_cache *kv, int n_ctx, int64_t *bytes, char *err, size_t errlen) {
    const kv_options *o = &kv->o;
    const kv_policy_ops *ops = kv->ops;
    int64_t n = n_ctx, token = 0, held = 0;
    for (int t = BE_T0; t <= BE_T2; t++) { /* tiers in host memory: all on a unified backend, else T1 and T2 */
        const be_kv_pool *bp = &kv->pools.pool[t];
        if (kv->tp[t].cap_chunks == 0 || !kv_host_pool(kv, t)) continue;
        int64_t tb = (int64_t)bp->layers * (int64_t)bp->record_bytes;
        if (tb > token) token = tb;
        /* the chunks that growing on demand would have made by now (the peak in use, in whole chunks):
         * what kv_pools_reserve adds beyond them is address space the live sequences have not touched */
        const kv_tpool *p = &kv->tp[t];
        int64_t per = (int64_t)1 << KV_CHUNK_SHIFT, used = (p->peak + per - 1) / per;
        if (t == BE_T0 && kv->mode == KV_B_SHARED) used = bp->n_chunks; /* allocated whole at init */
        held += (used < bp->n_chunks ? used : bp->n_chunks) * (int64_t)chunk_bytes(bp);
    }
    int64_t meta = n * 64; /* ref, att, score, flags, order, row pointers */
    if (ops->head_scores) meta += n * o->n_head_kv * 4;
    if (ops->prefill_scores) meta += n * o->n_head_kv * 4;
    if (ops->head_masks) meta += (int64_t)kv_keep_stride(kv) * o->n_head_kv * o->n_layer;
    if (ops->hooks) meta += n * ((int64_t)kv->kv_dim * 4 + 8);
    *bytes = n * token + meta;
    int64_t more = kv->committed + *bytes - held; /* beyond the chunks already there */
    uint64_t avail = tkv_mem_available();
    if (more <= 0 || (uint64_t)more <= avail) return 0;
    int64_t others = kv->committed > held ? kv->committed - held : 0;
    char live[128] = "";
    if (kv->n_live > 0)
        snprintf(live, sizeof live, ", and the %d live sequences may take %.1f MiB more", kv->n_live, tkv_mib((double)others));
    return tkv_errf(err, errlen, "kv: a sequence of %d positions may need %.1f MiB of host memory at its full length%s; %.1f MiB available",
                    n_ctx, tkv_mib((double)*bytes), live, tkv_mib(avail));
}

void kv_pools_free(kv_cache *kv) {
    for (int t = 0; t < BE_N_POOLS; t++) {
        be_kv_pool *bp = &kv->pools.pool[t];
        for (int c = 0; c < bp->n_chunks; c++) kv->be->ops->free(kv->be, bp->chunks[c], bp->mem);
        free(bp->chunks);
        free(kv->tp[t].free);
        free(kv->tp[t].holders);
        memset(bp, 0, sizeof *bp);
        memset(&kv->tp[t], 0, sizeof kv->tp[t]);
    }
    free(kv->stage_chunk[0]), free(kv->stage_chunk[1]), free(kv->stage_src);
    kv->stage_chunk[0] = kv->stage_chunk[1] = kv->stage_src = NULL;
}

void kv_pool_note_peak(kv_cache *kv, int tier) {
    kv_tpool *p = &kv->tp[tier];
    int64_t u = kv_tpool_in_use(p);
    if (u > p->peak) p->peak = u;
}

int32_t kv_slot_alloc(kv_cache *kv, int tier) {
    kv_tpool *p = &kv->tp[tier];
    if (kv_tpool_in_use(p) >= p->cap_slots) return BE_SLOT_NONE;
    if (p->n_free == 0) {
        char err[256];
        if (grow(kv, tier, err, sizeof err)) {
            /* pools are sized for every admitted sequence at its full length: running out here means
             * the machine's memory did, which admission could not foresee */
            fprintf(stderr, "tierkv: %s\n", err);
            TKV_ASSERT(!"kv: a tier pool could not grow");
        }
    }
    int32_t s = p->free[--p->n_free];
    p->holders[s] = 1;
    kv_pool_note_peak(kv, tier);
    return BE_SLOT(tier, s);
}

void kv_slot_hold(kv_cache *kv, int32_t ref) {
    kv_tpool *p = &kv->tp[BE_SLOT_TIER(ref)];
    int32_t s = BE_SLOT_IDX(ref);
    TKV_ASSERT(s < p->n_slots && p->holders[s] > 0 && p->holders[s] < UINT16_MAX);
    p->holders[s]++;
}

int kv_slot_drop(kv_cache *kv, int32_t ref) {
    kv_tpool *p = &kv->tp[BE_SLOT_TIER(ref)];
    int32_t s = BE_SLOT_IDX(ref);
    TKV_ASSERT(ref != BE_SLOT_NONE && s < p->n_slots && p->holders[s] > 0);
    if (--p->holders[s] > 0) return p->holders[s];
    TKV_ASSERT(p->n_free < p->n_slots);
    p->free[p->n_free++] = s;
    return 0;
}

int kv_slot_holders(const kv_cache *kv, int32_t ref) {
    const kv_tpool *p = &kv->tp[BE_SLOT_TIER(ref)];
    int32_t s = BE_SLOT_IDX(ref);
    return s < p->n_slots ? p->holders[s] : 0;
}
