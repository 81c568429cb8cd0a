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
 *   a side in pageable host memory          (a T2 the KV module put in BE_MEM_HOST) bounced through the
 *                                           pinned move ring by the CPU: sources gathered before the
 *                                           kernel, destinations scattered after it, synchronously
 * The codec is src/codec's q8h (kvq_q8h_encode), bit for bit (one f32 scale per kv head, amax / 127, round to nearest
 * even, clamp to +-127; zeros or non-finite groups encode as zeros with scale 0).
 *
 * Ordering: copy_moves(layer) records layer_ev[layer] on the copy stream after its work;
 * copy_wait(layer) makes the compute stream wait for it. Writes into the STAGE pool first wait for
 * stage_ev[layer % layers], which attention records after reading that STAGE layer (the double
 * buffer's write-after-read). copy_wait also times the compute stream's stall there (two timing
 * events around the wait, collected without waiting: copy_stall_seconds). Within a call the moves mean what they mean on the CPU (list order):
 * they run as groups one after another, and inside a group a move that overwrites another's source
 * runs in a later phase (cuda_plan.h). Completion on the host: a copy is done once `read` returns after a
 * copy_wait for its layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"
#include "base/half.h"

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
        int nan = 0; /* fmaxf drops a NaN, where the host's amax becomes one and the head zeros */
        for (int i = lane; i < g.hd; i += 32) {
            const float x = get(i);
            amax = fmaxf(amax, fabsf(x));
            nan |= isnan(x);
        }
        amax = cu_warp_max(amax);
        nan = __any_sync(0xffffffffu, nan);
        int8_t *q = (int8_t *)rec + part * g.kv_dim + e0;
        float *sc = (float *)(rec + 2 * g.kv_dim) + part * g.n_head_kv + h;
        /* kvq.c's q8h_encode: zeros and a scale of 0 for a head of zeros, a NaN or inf, or an amax
         * so small that 127 / amax overflows */
        if (nan || !(amax > 0.0f) || !isfinite(amax) || !isfinite(__fdiv_rn(127.0f, amax))) {
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

/* row i of k and v into the record of slots[i] at layer (its address found on the device, as
 * attention finds it: the slots are the same for every layer of a step) */
__global__ void kv_write_kernel(const int32_t *slots, const cu_pools_view pv, int layer, kv_geom g, const float *k,
                                const float *v) {
    const int i = blockIdx.x, warp = threadIdx.x >> 5;
    const int32_t r = slots[i];
    const cu_pool_view &q = pv.p[BE_SLOT_TIER(r)];
    uint8_t *rec = (uint8_t *)cu_rec(q, r, layer);
    const int fmt = q.fmt;
    for (int ph = warp; ph < 2 * g.n_head_kv; ph += KV_WARPS) {
        int part = ph / g.n_head_kv, h = ph % g.n_head_kv;
        const float *row = (part ? v : k) + (int64_t)i * g.kv_dim + h * g.hd;
        kv_put_head(rec, fmt, g, part, h, [&](int e) { return row[e]; });
    }
}

static int is_host(const be_kv_pools *p, int tier) { return p->pool[tier].mem == BE_MEM_HOST; }
static size_t up16(size_t x) { return (x + 15) & ~(size_t)15; }

static kv_geom geom_of(const be_kv_pools *p) { return kv_geom{p->n_head_kv * p->head_dim, p->n_head_kv, p->head_dim}; }

void cu_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                 const float *v) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    for (int i = 0; i < n; i++)
        CU_REQUIRE(p->pool[BE_SLOT_TIER(slots[i])].mem != BE_MEM_HOST,
                   "kv_write: a pool in pageable host memory (new rows go to T0 or T1)");
    cu_pools_view pv;
    cu_pools_sync(B, p, &pv);
    const int32_t *sd = cu_kept_put(B, &B->slots, slots, n); /* every layer of a step writes the same */
    kv_write_kernel<<<n, KV_WARPS * 32, 0, B->compute>>>(sd, pv, layer, geom_of(p), k, v);
    CU_LAUNCHED();
}

/* ---- kv_read: records -> f32 rows in the pinned bounce buffer -> the caller's host rows ---- */

__global__ void kv_read_kernel(const kv_dst *d, kv_geom g, float *k, float *v) {
    const int i = blockIdx.x;
    const uint8_t *rec = (const uint8_t *)d[i].rec;
    if (!rec) return; /* in pageable host memory: decoded on the host */
    for (int e = threadIdx.x; e < g.kv_dim; e += blockDim.x) {
        k[(int64_t)i * g.kv_dim + e] = kv_get(rec, d[i].fmt, g, 0, e);
        if (v) v[(int64_t)i * g.kv_dim + e] = kv_get(rec, d[i].fmt, g, 1, e);
    }
}

/* the host's decoding of a record in pageable host memory (the same arithmetic as kv_get) */
static void host_decode(const uint8_t *rec, int fmt, const kv_geom &g, float *k, float *v) {
    for (int part = 0; part < 2; part++) {
        float *x = part ? v : k;
        if (!x) continue;
        for (int e = 0; e < g.kv_dim; e++) {
            if (fmt == BE_KV_F32) memcpy(&x[e], rec + 4 * ((size_t)part * g.kv_dim + e), 4);
            else if (fmt == BE_KV_F16) x[e] = tkv_f16_to_f32(tkv_rd16(rec + 2 * ((size_t)part * g.kv_dim + e)));
            else {
                float sc;
                memcpy(&sc, rec + 2 * (size_t)g.kv_dim + 4 * ((size_t)part * g.n_head_kv + e / g.hd), 4);
                x[e] = (float)((const int8_t *)rec)[(size_t)part * g.kv_dim + e] * sc;
            }
        }
    }
}

void cu_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    kv_geom g = geom_of(p);
    size_t row = (size_t)g.kv_dim * sizeof(float);
    int per = (int)(CU_BOUNCE_BYTES / (2 * row));
    CU_REQUIRE(per >= 1, "kv_read: a record larger than the bounce buffer");
    cu_graph_break(B); /* it waits for the stream */
    for (int i0 = 0; i0 < n; i0 += per) {
        int m = n - i0 < per ? n - i0 : per;
        uint8_t *dev;
        kv_dst *d = (kv_dst *)cu_ring_reserve(&B->arg, (size_t)m * sizeof(kv_dst), 16, &dev);
        for (int i = 0; i < m; i++) {
            const be_kv_pool *q = &p->pool[BE_SLOT_TIER(slots[i0 + i])];
            d[i].rec = q->mem == BE_MEM_HOST ? 0 : (uint64_t)(uintptr_t)be_kv_record(p, slots[i0 + i], layer);
            d[i].fmt = (int32_t)q->fmt;
        }
        CUDA_CHECK(cudaMemcpyAsync(dev, d, (size_t)m * sizeof(kv_dst), cudaMemcpyHostToDevice, B->compute));
        float *bk = B->bounce, *bv = v ? B->bounce + (size_t)m * g.kv_dim : NULL;
        kv_read_kernel<<<m, 128, 0, B->compute>>>((const kv_dst *)dev, g, bk, bv);
        CU_LAUNCHED();
        cu_sync(B, B->compute);
        memcpy(k + (size_t)i0 * g.kv_dim, bk, (size_t)m * row);
        if (v) memcpy(v + (size_t)i0 * g.kv_dim, bv, (size_t)m * row);
        /* records in pageable host memory: the kernel skipped them; decoded here */
        for (int i = 0; i < m; i++) {
            int32_t r = slots[i0 + i];
            if (!is_host(p, BE_SLOT_TIER(r))) continue;
            const uint8_t *rec = (const uint8_t *)be_kv_record(p, r, layer);
            host_decode(rec, p->pool[BE_SLOT_TIER(r)].fmt, g, k + (size_t)(i0 + i) * g.kv_dim,
                        v ? v + (size_t)(i0 + i) * g.kv_dim : NULL);
        }
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
    free(B->move_phase);
    free(B->move_starts);
    free(B->run_starts);
    B->move_ws = (uint64_t *)malloc(CU_MOVE_WS_WORDS(cap) * sizeof(uint64_t));
    B->runs = (cu_move_run *)malloc((size_t)cap * sizeof(cu_move_run));
    B->move_phase = (uint8_t *)malloc((size_t)cap);
    B->move_starts = (int *)malloc(((size_t)cap + 1) * sizeof(int));
    B->run_starts = (int *)malloc(((size_t)cap + 1) * sizeof(int));
    CU_REQUIRE(B->move_ws && B->runs && B->move_phase && B->move_starts && B->run_starts, "out of host memory");
    B->move_cap = cap;
}

/* ring bytes one record of run u takes: its descriptor, and a bounce area for a side in pageable
 * host memory */
static size_t rec_need(const be_kv_pools *p, const cu_move_run *u) {
    return sizeof(mv_desc) + (is_host(p, u->src_tier) ? up16(u->src_bytes) : 0) + (is_host(p, u->dst_tier) ? up16(u->dst_bytes) : 0);
}

/* Runs [r0, r1) of one phase through the copy kernel, in batches that fit one ring segment:
 * [descriptors][bounce areas]. A source in pageable host memory (which the GPU cannot read) is
 * gathered by the CPU into the batch's bounce area and goes up with the descriptors; a destination
 * there is written by the kernel into the device twin of its bounce area, copied down, and
 * scattered by the CPU once the copy stream is done (this batch is then synchronous: the CPU must
 * see the bytes before the call returns). */
static void launch_runs(cu_backend *B, const be_kv_pools *p, const cu_move_run *runs, int r0, int r1, kv_geom g) {
    const size_t seg = B->mv.pos.seg;
    int r = r0;
    uint32_t in_run = 0;
    while (r < r1) {
        /* how many records fit */
        size_t cnt = 0, bounce = 0;
        int qr = r;
        uint32_t qi = in_run;
        while (qr < r1) {
            size_t need = rec_need(p, &runs[qr]);
            if (sizeof(mv_desc) * (cnt + 1) + bounce + (need - sizeof(mv_desc)) > seg) break;
            bounce += need - sizeof(mv_desc);
            cnt++;
            if (++qi == runs[qr].n) qr++, qi = 0;
        }
        CU_REQUIRE(cnt > 0, "copy_moves: a record larger than a move-ring segment");
        size_t dbytes = up16(cnt * sizeof(mv_desc)), total = dbytes + bounce;
        uint8_t *dev;
        uint8_t *host = cu_ring_reserve(&B->mv, total, 256, &dev);
        mv_desc *d = (mv_desc *)host;
        size_t at = dbytes;
        int any_host_dst = 0;
        qr = r, qi = in_run;
        for (size_t k = 0; k < cnt; k++) {
            const cu_move_run *u = &runs[qr];
            uint64_t src = u->src + (uint64_t)qi * u->src_bytes, dst = u->dst + (uint64_t)qi * u->dst_bytes;
            if (is_host(p, u->src_tier)) {
                memcpy(host + at, (const void *)(uintptr_t)src, u->src_bytes);
                src = (uint64_t)(uintptr_t)(dev + at);
                at += up16(u->src_bytes);
            }
            if (is_host(p, u->dst_tier)) {
                dst = (uint64_t)(uintptr_t)(dev + at);
                at += up16(u->dst_bytes);
                any_host_dst = 1;
            }
            d[k].src = src, d[k].dst = dst;
            d[k].sf = u->src_fmt, d[k].df = u->dst_fmt;
            d[k].bytes = (int32_t)u->src_bytes;
            d[k].pad = 0;
            if (++qi == u->n) qr++, qi = 0;
        }
        CUDA_CHECK(cudaMemcpyAsync(dev, host, total, cudaMemcpyHostToDevice, B->copy));
        kv_move_kernel<<<(unsigned)((cnt + KV_WARPS - 1) / KV_WARPS), KV_WARPS * 32, 0, B->copy>>>((const mv_desc *)dev,
                                                                                               (int)cnt, g);
        CU_LAUNCHED();
        if (any_host_dst) {
            CUDA_CHECK(cudaMemcpyAsync(host + dbytes, dev + dbytes, bounce, cudaMemcpyDeviceToHost, B->copy));
            CUDA_CHECK(cudaStreamSynchronize(B->copy));
            at = dbytes;
            qr = r, qi = in_run;
            for (size_t k = 0; k < cnt; k++) {
                const cu_move_run *u = &runs[qr];
                if (is_host(p, u->src_tier)) at += up16(u->src_bytes);
                if (is_host(p, u->dst_tier)) {
                    memcpy((void *)(uintptr_t)(u->dst + (uint64_t)qi * u->dst_bytes), host + at, u->dst_bytes);
                    at += up16(u->dst_bytes);
                }
                if (++qi == u->n) qr++, qi = 0;
            }
        }
        r = qr, in_run = qi;
    }
}

/* The runs of one group, phase by phase: the long plain runs to the copy engines, the rest, in
 * order, to the kernel. */
static void run_group(cu_backend *B, const be_kv_pools *p, const cu_move_run *runs, int n_runs, kv_geom g) {
    for (int r0 = 0; r0 < n_runs;) {
        int r1 = r0;
        while (r1 < n_runs && runs[r1].phase == runs[r0].phase) r1++;
        int k0 = r0;
        for (int r = r0; r <= r1; r++) {
            const cu_move_run *u = &runs[r];
            int dma = r < r1 && u->same && !is_host(p, u->src_tier) && !is_host(p, u->dst_tier) &&
                      (size_t)u->n * u->src_bytes >= CU_DMA_MIN;
            if (r < r1 && !dma) continue;
            if (k0 < r) launch_runs(B, p, runs, k0, r, g);
            if (dma)
                CUDA_CHECK(cudaMemcpyAsync((void *)(uintptr_t)u->dst, (const void *)(uintptr_t)u->src,
                                           (size_t)u->n * u->src_bytes, cudaMemcpyDefault, B->copy));
            k0 = r + 1;
        }
        r0 = r1;
    }
}

/* Any move list, with the CPU backend's meaning (list order): its groups (cuda_plan.h) one after
 * another on the copy stream, which runs them in that order. The KV module's batches are one group. */
void cu_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(layer >= 0 && layer < CU_MAX_LAYER_EVENTS, "copy_moves: layer beyond CU_MAX_LAYER_EVENTS");
    if (n <= 0) return;
    pthread_mutex_lock(&B->mv_lock);
    grow_move_ws(B, n);
    int to_stage = 0;
    for (int i = 0; i < n; i++) to_stage |= BE_SLOT_TIER(moves[i].dst) == BE_STAGE;
    /* staging sends the same list for every layer of a step: planned once a step (cuda_plan.h) */
    int n_groups = cu_plan_moves_cached(&B->gcache, p, moves, n, layer, B->move_phase, B->move_starts, B->runs,
                                        B->run_starts, B->move_ws);
    if (to_stage) {
        /* staging comes from the forward's thread and never while it captures: an attention captured
         * records no STAGE event, so a copy into STAGE would wait on an older reader's */
        CU_REQUIRE(!B->graph.capturing, "copy_moves: rows staged while a step is captured");
        int ls = p->pool[BE_STAGE].layers;
        CU_REQUIRE(ls >= 1 && ls <= CU_MAX_STAGE_LAYERS, "copy_moves: STAGE pool with too many layers");
        CUDA_CHECK(cudaStreamWaitEvent(B->copy, B->stage_ev[layer % ls], 0));
    }
    kv_geom g = geom_of(p);
    for (int k = 0; k < n_groups; k++) run_group(B, p, B->runs + B->run_starts[k], B->run_starts[k + 1] - B->run_starts[k], g);
    CUDA_CHECK(cudaEventRecord(B->layer_ev[layer], B->copy));
    pthread_mutex_unlock(&B->mv_lock);
}

/* The copy stream waits for what the compute stream holds now: an event recorded there (outside any
 * capture: the copy stream cannot wait on a captured one), waited on by the copy stream before the
 * moves submitted after this call. Under mv_lock, so the wait lands between the copy stream's lists
 * and not inside one a transfer thread is queuing. */
void cu_copy_after_compute(be_backend *b) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    cu_graph_break(B);
    pthread_mutex_lock(&B->mv_lock);
    CUDA_CHECK(cudaEventRecord(B->order_ev, B->compute));
    CUDA_CHECK(cudaStreamWaitEvent(B->copy, B->order_ev, 0));
    pthread_mutex_unlock(&B->mv_lock);
}

/* The host waits for both streams: every copy submitted so far (by any thread) and every compute op
 * has run, so the host may touch host-pool records the copies wrote or read. */
void cu_host_sync(be_backend *b) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    cu_graph_break(B);
    cu_sync(B, B->compute);
    cu_sync(B, B->copy);
    cu_stall_collect(B);
}

/* The stream wait, between two timing events on the compute stream: the time between them is the
 * time the compute stream stood still for the copy stream (about 0 when the copy had finished). The
 * pair's time is collected later (cu_stall_collect); a full ring first collects what completed, and
 * if nothing did this wait goes untimed rather than waiting on the device. */
void cu_copy_wait(be_backend *b, int layer) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(layer >= 0 && layer < CU_MAX_LAYER_EVENTS, "copy_wait: layer beyond CU_MAX_LAYER_EVENTS");
    cu_graph_break(B); /* the copy stream's event was recorded outside the capture */
    pthread_mutex_lock(&B->stall_lock);
    if (B->stall_next - B->stall_done == CU_STALL_PAIRS) cu_stall_collect_locked(B);
    cudaEvent_t *ev = NULL;
    if (B->stall_next - B->stall_done < CU_STALL_PAIRS) ev = B->stall_ev[B->stall_next++ % CU_STALL_PAIRS];
    else B->stall_untimed++;
    if (ev) CUDA_CHECK(cudaEventRecord(ev[0], B->compute));
    CUDA_CHECK(cudaStreamWaitEvent(B->compute, B->layer_ev[layer], 0));
    if (ev) CUDA_CHECK(cudaEventRecord(ev[1], B->compute));
    pthread_mutex_unlock(&B->stall_lock);
}

void cu_stall_collect_locked(cu_backend *B) {
    while (B->stall_done < B->stall_next) {
        cudaEvent_t *ev = B->stall_ev[B->stall_done % CU_STALL_PAIRS];
        cudaError_t e = cudaEventQuery(ev[1]);
        if (e == cudaErrorNotReady) {
            (void)cudaGetLastError(); /* "not yet" is an answer, not an error to keep */
            return;
        }
        CUDA_CHECK(e);
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        B->stall_seconds += (double)ms * 1e-3;
        B->stall_done++;
    }
}

void cu_stall_collect(cu_backend *B) {
    pthread_mutex_lock(&B->stall_lock);
    cu_stall_collect_locked(B);
    pthread_mutex_unlock(&B->stall_lock);
}

double cu_copy_stall_seconds(be_backend *b) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    pthread_mutex_lock(&B->stall_lock);
    cu_stall_collect_locked(B);
    double s = B->stall_seconds;
    pthread_mutex_unlock(&B->stall_lock);
    return s;
}
