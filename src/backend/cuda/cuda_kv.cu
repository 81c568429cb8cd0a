/* cuda_kv.cu — the KV records on the GPU: kv_write and kv_read on the compute stream, copy_moves on
 * the copy stream, copy_wait joining them.
 *
 * Where each conversion runs (the cheapest place for the bytes, PCIe being the narrow link):
 *   same format, long contiguous runs      cudaMemcpyAsync on the copy stream (the copy engines)
 *   same format, scattered records          a copy kernel on the copy stream (one warp per record;
 *                                           reading or writing pinned memory in place over PCIe)
 *   F32 <-> F16                             that kernel, exact both ways on the values the cache holds
 *   -> Q8_HEAD (T0 -> T2 demotion)          that kernel quantises on the GPU and writes only the int8
 *                                           record into pinned host memory (half of F16's PCIe bytes)
 *   Q8_HEAD -> F16/F32 (T2 -> STAGE/T0)     that kernel reads the int8 record over PCIe and
 *                                           dequantises on the GPU
 *   pinned -> pinned (T1 -> T2)             the same kernel: both sides cross PCIe, but the move stays
 *                                           ordered in the copy stream with every other move
 * The codec is kv_codec.c's, bit for bit (one f32 scale per kv head, amax / 127, round to nearest
 * even, clamp to +-127; zeros or non-finite groups encode as zeros with scale 0).
 *
 * Ordering: copy_moves(layer) records layer_ev[layer] on the copy stream after its work;
 * copy_wait(layer) makes the compute stream wait for it. Writes into the STAGE pool first wait for
 * stage_ev[layer % layers], which attention records after reading that STAGE layer (the double
 * buffer's write-after-read). Within a call, a move that overwrites another's source runs in a
 * later phase (cuda_plan.h). Completion on the host: a copy is done once `read` returns after a
 * copy_wait for its layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"

#define KV_WARPS 4
#define CU_DMA_MIN ((size_t)128 << 10) /* a run at least this long goes to the copy engine */

struct kv_geom {
    int kv_dim, n_head_kv, hd;
};

/* element e (0..kv_dim) of part (0 K, 1 V) of a record */
__device__ __forceinline__ float kv_get(const uint8_t *rec, int fmt, const kv_geom &g, int part, int e) {
    switch (fmt) {
    case BE_KV_F32: return ((const float *)rec)[part * g.kv_dim + e];
    case BE_KV_F16: return __half2float(((const __half *)rec)[part * g.kv_dim + e]);
    default: {
        float s = ((const float *)(rec + 2 * g.kv_dim))[part * g.n_head_kv + e / g.hd];
        return __fmul_rn((float)((const int8_t *)rec)[part * g.kv_dim + e], s);
    }
    }
}

/* One warp encodes head h of part `part` into rec from get(i), i < hd (the warp's lanes). */
template <typename Get>
__device__ __forceinline__ void kv_put_head(uint8_t *rec, int fmt, const kv_geom &g, int part, int h, Get get) {
    const int lane = threadIdx.x & 31, e0 = h * g.hd;
    if (fmt == BE_KV_F32) {
        for (int i = lane; i < g.hd; i += 32) ((float *)rec)[part * g.kv_dim + e0 + i] = get(i);
    } else if (fmt == BE_KV_F16) {
        for (int i = lane; i < g.hd; i += 32) ((__half *)rec)[part * g.kv_dim + e0 + i] = __float2half_rn(get(i));
    } else {
        float amax = 0.0f;
        for (int i = lane; i < g.hd; i += 32) amax = fmaxf(amax, fabsf(get(i)));
        amax = cu_warp_max(amax);
        int8_t *q = (int8_t *)rec + part * g.kv_dim + e0;
        float *sc = (float *)(rec + 2 * g.kv_dim) + part * g.n_head_kv + h;
        if (!(amax > 0.0f) || !isfinite(amax)) {
            for (int i = lane; i < g.hd; i += 32) q[i] = 0;
            if (lane == 0) *sc = 0.0f;
            return;
        }
        float s = __fdiv_rn(amax, 127.0f), inv = __fdiv_rn(127.0f, amax);
        for (int i = lane; i < g.hd; i += 32) {
            int r = __float2int_rn(__fmul_rn(get(i), inv));
            q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
        }
        if (lane == 0) *sc = s;
    }
}

/* ---- kv_write ---- */

struct kv_dst {
    uint64_t rec;
    int32_t fmt, pad;
};

__global__ void kv_write_kernel(const kv_dst *d, kv_geom g, const float *k, const float *v) {
    const int i = blockIdx.x, warp = threadIdx.x >> 5;
    uint8_t *rec = (uint8_t *)d[i].rec;
    const int fmt = d[i].fmt;
    for (int ph = warp; ph < 2 * g.n_head_kv; ph += KV_WARPS) {
        int part = ph / g.n_head_kv, h = ph % g.n_head_kv;
        const float *row = (part ? v : k) + (int64_t)i * g.kv_dim + h * g.hd;
        kv_put_head(rec, fmt, g, part, h, [&](int e) { return row[e]; });
    }
}

static kv_geom geom_of(const be_kv_pools *p) { return kv_geom{p->n_head_kv * p->head_dim, p->n_head_kv, p->head_dim}; }

void cu_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                 const float *v) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    uint8_t *dev;
    kv_dst *d = (kv_dst *)cu_ring_reserve(&B->arg, (size_t)n * sizeof(kv_dst), 16, &dev);
    for (int i = 0; i < n; i++) {
        const be_kv_pool *q = &p->pool[BE_SLOT_TIER(slots[i])];
        CU_REQUIRE(q->mem != BE_MEM_HOST, "kv_write: a pool in pageable host memory");
        d[i].rec = (uint64_t)(uintptr_t)be_kv_record(p, slots[i], layer);
        d[i].fmt = (int32_t)q->fmt;
        d[i].pad = 0;
    }
    CUDA_CHECK(cudaMemcpyAsync(dev, d, (size_t)n * sizeof(kv_dst), cudaMemcpyHostToDevice, B->compute));
    kv_write_kernel<<<n, KV_WARPS * 32, 0, B->compute>>>((const kv_dst *)dev, geom_of(p), k, v);
    CU_LAUNCHED();
}

/* ---- kv_read: records -> f32 rows in the pinned bounce buffer -> the caller's host rows ---- */

__global__ void kv_read_kernel(const kv_dst *d, kv_geom g, float *k, float *v) {
    const int i = blockIdx.x;
    const uint8_t *rec = (const uint8_t *)d[i].rec;
    for (int e = threadIdx.x; e < g.kv_dim; e += blockDim.x) {
        k[(int64_t)i * g.kv_dim + e] = kv_get(rec, d[i].fmt, g, 0, e);
        if (v) v[(int64_t)i * g.kv_dim + e] = kv_get(rec, d[i].fmt, g, 1, e);
    }
}

void cu_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    kv_geom g = geom_of(p);
    size_t row = (size_t)g.kv_dim * sizeof(float);
    int per = (int)(CU_BOUNCE_BYTES / (2 * row));
    CU_REQUIRE(per >= 1, "kv_read: a record larger than the bounce buffer");
    for (int i0 = 0; i0 < n; i0 += per) {
        int m = n - i0 < per ? n - i0 : per;
        uint8_t *dev;
        kv_dst *d = (kv_dst *)cu_ring_reserve(&B->arg, (size_t)m * sizeof(kv_dst), 16, &dev);
        for (int i = 0; i < m; i++) {
            const be_kv_pool *q = &p->pool[BE_SLOT_TIER(slots[i0 + i])];
            d[i].rec = (uint64_t)(uintptr_t)be_kv_record(p, slots[i0 + i], layer);
            d[i].fmt = (int32_t)q->fmt;
        }
        CUDA_CHECK(cudaMemcpyAsync(dev, d, (size_t)m * sizeof(kv_dst), cudaMemcpyHostToDevice, B->compute));
        float *bk = B->bounce, *bv = v ? B->bounce + (size_t)m * g.kv_dim : NULL;
        kv_read_kernel<<<m, 128, 0, B->compute>>>((const kv_dst *)dev, g, bk, bv);
        CU_LAUNCHED();
        CUDA_CHECK(cudaStreamSynchronize(B->compute));
        memcpy(k + (size_t)i0 * g.kv_dim, bk, (size_t)m * row);
        if (v) memcpy(v + (size_t)i0 * g.kv_dim, bv, (size_t)m * row);
    }
}

/* ---- copy_moves ---- */

struct mv_desc {
    uint64_t src, dst;
    int32_t sf, df; /* formats */
    int32_t bytes;  /* record bytes when sf == df */
    int32_t pad;
};

__global__ void kv_move_kernel(const mv_desc *d, int n, kv_geom g) {
    const int i = blockIdx.x * KV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (i >= n) return;
    const mv_desc m = d[i];
    const uint8_t *src = (const uint8_t *)m.src;
    uint8_t *dst = (uint8_t *)m.dst;
    if (m.sf == m.df) {
        if (((m.src | m.dst | (uint64_t)m.bytes) & 15) == 0) {
            for (int k = lane; k < m.bytes / 16; k += 32) ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
        } else {
            for (int k = lane; k < m.bytes / 4; k += 32) ((uint32_t *)dst)[k] = ((const uint32_t *)src)[k];
        }
        return;
    }
    for (int ph = 0; ph < 2 * g.n_head_kv; ph++) {
        int part = ph / g.n_head_kv, h = ph % g.n_head_kv;
        kv_put_head(dst, m.df, g, part, h, [&](int e) { return kv_get(src, m.sf, g, part, h * g.hd + e); });
    }
}

static void grow_move_ws(cu_backend *B, int n) {
    if (n <= B->move_cap) return;
    int cap = B->move_cap ? B->move_cap : 1024;
    while (cap < n) cap *= 2;
    free(B->move_ws);
    free(B->runs);
    B->move_ws = (uint64_t *)malloc((size_t)cap * 3 * sizeof(uint64_t));
    B->runs = (cu_move_run *)malloc((size_t)cap * sizeof(cu_move_run));
    CU_REQUIRE(B->move_ws && B->runs, "out of host memory");
    B->move_cap = cap;
}

/* the kernel's descriptors of runs [r0, r1), streamed through the move ring in launches */
static void launch_runs(cu_backend *B, const cu_move_run *runs, int r0, int r1, kv_geom g) {
    const size_t per_launch = B->mv.pos.seg / sizeof(mv_desc);
    int r = r0;
    uint32_t in_run = 0; /* records of runs[r] already described */
    while (r < r1) {
        size_t cnt = 0;
        for (int q = r; q < r1 && cnt < per_launch; q++) cnt += runs[q].n - (q == r ? in_run : 0);
        if (cnt > per_launch) cnt = per_launch;
        if (!cnt) break;
        uint8_t *dev;
        mv_desc *d = (mv_desc *)cu_ring_reserve(&B->mv, cnt * sizeof(mv_desc), 16, &dev);
        size_t k = 0;
        while (k < cnt) {
            const cu_move_run *u = &runs[r];
            for (; in_run < u->n && k < cnt; in_run++, k++) {
                d[k].src = u->src + (uint64_t)in_run * u->src_bytes;
                d[k].dst = u->dst + (uint64_t)in_run * u->dst_bytes;
                d[k].sf = u->src_fmt, d[k].df = u->dst_fmt;
                d[k].bytes = (int32_t)u->src_bytes;
                d[k].pad = 0;
            }
            if (in_run == u->n) r++, in_run = 0;
        }
        CUDA_CHECK(cudaMemcpyAsync(dev, d, cnt * sizeof(mv_desc), cudaMemcpyHostToDevice, B->copy));
        kv_move_kernel<<<(unsigned)((cnt + KV_WARPS - 1) / KV_WARPS), KV_WARPS * 32, 0, B->copy>>>((const mv_desc *)dev,
                                                                                               (int)cnt, g);
        CU_LAUNCHED();
    }
}

void cu_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(layer >= 0 && layer < CU_MAX_LAYER_EVENTS, "copy_moves: layer beyond CU_MAX_LAYER_EVENTS");
    if (n <= 0) return;
    pthread_mutex_lock(&B->mv_lock);
    grow_move_ws(B, n);
    int to_stage = 0;
    for (int i = 0; i < n; i++) {
        CU_REQUIRE(p->pool[BE_SLOT_TIER(moves[i].src)].mem != BE_MEM_HOST && p->pool[BE_SLOT_TIER(moves[i].dst)].mem != BE_MEM_HOST,
                   "copy_moves: a pool in pageable host memory");
        to_stage |= BE_SLOT_TIER(moves[i].dst) == BE_STAGE;
    }
    int n_runs = cu_plan_moves(p, moves, n, layer, B->runs, B->move_ws);
    CU_REQUIRE(n_runs >= 0, "copy_moves: the moves of one layer form a cycle (a swap cannot run in place)");
    if (to_stage) {
        int ls = p->pool[BE_STAGE].layers;
        CU_REQUIRE(ls >= 1 && ls <= CU_MAX_STAGE_LAYERS, "copy_moves: STAGE pool with too many layers");
        CUDA_CHECK(cudaStreamWaitEvent(B->copy, B->stage_ev[layer % ls], 0));
    }
    kv_geom g = geom_of(p);
    for (int r0 = 0; r0 < n_runs;) {
        int r1 = r0;
        while (r1 < n_runs && B->runs[r1].phase == B->runs[r0].phase) r1++;
        /* the long plain runs to the copy engines; the rest, in order, to the kernel */
        int k0 = r0;
        for (int r = r0; r <= r1; r++) {
            int dma = r < r1 && B->runs[r].same && (size_t)B->runs[r].n * B->runs[r].src_bytes >= CU_DMA_MIN;
            if (r < r1 && !dma) continue;
            if (k0 < r) launch_runs(B, B->runs, k0, r, g);
            if (dma)
                CUDA_CHECK(cudaMemcpyAsync((void *)(uintptr_t)B->runs[r].dst, (const void *)(uintptr_t)B->runs[r].src,
                                           (size_t)B->runs[r].n * B->runs[r].src_bytes, cudaMemcpyDefault, B->copy));
            k0 = r + 1;
        }
        r0 = r1;
    }
    CUDA_CHECK(cudaEventRecord(B->layer_ev[layer], B->copy));
    pthread_mutex_unlock(&B->mv_lock);
}

void cu_copy_wait(be_backend *b, int layer) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(layer >= 0 && layer < CU_MAX_LAYER_EVENTS, "copy_wait: layer beyond CU_MAX_LAYER_EVENTS");
    CUDA_CHECK(cudaStreamWaitEvent(B->compute, B->layer_ev[layer], 0));
}
