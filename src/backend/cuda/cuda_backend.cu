/* cuda_backend.cu — the CUDA backend's handle: open/close, the op table, memory (alloc, free,
 * upload, read), the pinned staging rings and the device copies of the KV pools' chunk tables.
 * Owns the two streams and every event. Invariants: cuda_internal.h. Does not hold kernels (the
 * other .cu files do) or any policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
extern "C" {
#include "base/clock.h"
#include "base/err.h"
#include "base/workers.h"
}

void cu_fatal(const char *what, const char *msg, const char *file, int line) {
    fprintf(stderr, "tierkv: CUDA backend: %s:%d: %s: %s\n", file, line, what, msg);
    abort();
}

void cu_bind(cu_backend *B) {
    static thread_local int bound = -1;
    if (bound != B->device) {
        CUDA_CHECK(cudaSetDevice(B->device));
        bound = B->device;
    }
}

void cu_own(cu_backend *B, void *p) {
    if (B->n_owned == B->cap_owned) {
        B->cap_owned = B->cap_owned ? 2 * B->cap_owned : 256;
        B->owned = (void **)realloc(B->owned, (size_t)B->cap_owned * sizeof(void *));
        CU_REQUIRE(B->owned, "out of host memory");
    }
    B->owned[B->n_owned++] = p;
}

void cu_require_device_readable(const void *p, const char *what) {
    cudaPointerAttributes at;
    CUDA_CHECK(cudaPointerGetAttributes(&at, p));
    if (at.type != cudaMemoryTypeDevice && at.type != cudaMemoryTypeHost && at.type != cudaMemoryTypeManaged)
        cu_fatal(what, "pageable host memory: the device cannot read it (allocate it with BE_MEM_PINNED or BE_MEM_DEVICE)",
                 __FILE__, __LINE__);
}

/* the host's wait since t0 added to a counter of host_wait_seconds */
static void add_wait(int64_t *ns, double t0) { __atomic_fetch_add(ns, (int64_t)((tkv_now_s() - t0) * 1e9), __ATOMIC_RELAXED); }

/* ---- rings ---- */

static void ring_init(cu_ring *r, size_t bytes, cudaStream_t s) {
    cu_ring_init(&r->pos, bytes, CU_RING_SEGS);
    CUDA_CHECK(cudaHostAlloc((void **)&r->host, r->pos.cap, cudaHostAllocPortable));
    CUDA_CHECK(cudaMalloc((void **)&r->dev, r->pos.cap));
    for (int k = 0; k < CU_RING_SEGS; k++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&r->ev[k], cudaEventDisableTiming));
        r->recorded[k] = 0;
    }
    r->stream = s;
    r->capture = NULL;
    r->wait_ns = 0;
}

static void ring_free(cu_ring *r) {
    if (!r->host) return;
    for (int k = 0; k < CU_RING_SEGS; k++) CUDA_CHECK(cudaEventDestroy(r->ev[k]));
    CUDA_CHECK(cudaFreeHost(r->host));
    CUDA_CHECK(cudaFree(r->dev));
    r->host = NULL;
}

uint8_t *cu_ring_reserve(cu_ring *r, size_t bytes, size_t align, uint8_t **dev) {
    int left, entered;
    size_t at = cu_ring_take(&r->pos, bytes, align, &left, &entered);
    if ((left >= 0 || entered >= 0) && r->capture) cu_graph_break(r->capture); /* events outside captures */
    if (left >= 0) {
        CUDA_CHECK(cudaEventRecord(r->ev[left], r->stream));
        r->recorded[left] = 1;
    }
    if (entered >= 0 && r->recorded[entered]) {
        double t0 = tkv_now_s();
        CUDA_CHECK(cudaEventSynchronize(r->ev[entered]));
        add_wait(&r->wait_ns, t0);
    }
    if (dev) *dev = r->dev + at;
    return r->host + at;
}

const void *cu_ring_put(cu_ring *r, const void *src, size_t bytes) {
    uint8_t *dev;
    uint8_t *h = cu_ring_reserve(r, bytes ? bytes : 1, 16, &dev);
    if (bytes) {
        memcpy(h, src, bytes);
        CUDA_CHECK(cudaMemcpyAsync(dev, h, bytes, cudaMemcpyHostToDevice, r->stream));
    }
    return dev;
}

void cu_ring_upload(cu_ring *r, void *dev_dst, const void *src, size_t bytes) {
    size_t piece = r->pos.seg / 2;
    for (size_t at = 0; at < bytes; at += piece) {
        size_t nb = bytes - at < piece ? bytes - at : piece;
        uint8_t *h = cu_ring_reserve(r, nb, 16, NULL);
        memcpy(h, (const uint8_t *)src + at, nb);
        CUDA_CHECK(cudaMemcpyAsync((uint8_t *)dev_dst + at, h, nb, cudaMemcpyHostToDevice, r->stream));
    }
}

const int32_t *cu_kept_put(cu_backend *B, cu_kept *k, const int32_t *src, int n) {
    const size_t bytes = (size_t)n * sizeof(int32_t);
    if (n > CU_POS_CAP) return (const int32_t *)cu_ring_put(&B->arg, src, bytes);
    if (n != k->n || memcmp(src, k->host, bytes)) {
        cu_ring_upload(&B->arg, k->dev, src, bytes);
        memcpy(k->host, src, bytes);
        k->n = n;
    }
    return k->dev;
}

static void kept_init(cu_kept *k) {
    CUDA_CHECK(cudaMalloc((void **)&k->dev, CU_POS_CAP * sizeof(int32_t)));
    k->host = (int32_t *)malloc(CU_POS_CAP * sizeof(int32_t));
    CU_REQUIRE(k->host, "out of host memory");
    k->n = 0;
}

static void kept_free(cu_kept *k) {
    if (k->dev) CUDA_CHECK(cudaFree(k->dev));
    free(k->host);
}

/* ---- chunk tables ---- */

void cu_pools_sync(cu_backend *B, const be_kv_pools *p, cu_pools_view *v) {
    cu_chunk_cache *c = NULL;
    for (int k = 0; k < CU_CHUNK_CACHES; k++)
        if (B->cc[k].key == p) c = &B->cc[k];
    if (!c) { /* the least recently used entry; its device tables are rewritten in stream order */
        c = &B->cc[0];
        for (int k = 1; k < CU_CHUNK_CACHES; k++)
            if (B->cc[k].last_use < c->last_use) c = &B->cc[k];
        c->key = p;
        for (int i = 0; i < BE_N_POOLS; i++) c->n[i] = -1;
    }
    c->last_use = ++B->cc_clock;
    for (int i = 0; i < BE_N_POOLS; i++) {
        const be_kv_pool *q = &p->pool[i];
        CU_REQUIRE(q->n_chunks >= 0 && q->n_chunks <= CU_MAX_CHUNKS, "a KV pool has more chunks than CU_MAX_CHUNKS");
        if (q->n_chunks != c->n[i] || (q->n_chunks && memcmp(c->host[i], q->chunks, (size_t)q->n_chunks * sizeof(void *)))) {
            if (q->n_chunks) {
                memcpy(c->host[i], q->chunks, (size_t)q->n_chunks * sizeof(void *));
                cu_ring_upload(&B->arg, c->dev[i], q->chunks, (size_t)q->n_chunks * sizeof(void *));
            }
            c->n[i] = q->n_chunks;
        }
        v->p[i].chunks = (const uint8_t *const *)c->dev[i];
        v->p[i].rec = (int64_t)q->record_bytes;
        v->p[i].fmt = (int)q->fmt;
        v->p[i].layers = q->layers > 0 ? q->layers : 1;
        v->p[i].shift = q->chunk_shift;
    }
    v->n_head_kv = p->n_head_kv;
    v->head_dim = p->head_dim;
}

/* ---- memory ops ---- */

static void *cu_alloc(be_backend *b, size_t bytes, be_mem mem, char *err, size_t errlen) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    void *p = NULL;
    cudaError_t e = cudaSuccess;
    if (bytes == 0) bytes = 1;
    switch (mem) {
    case BE_MEM_DEVICE: e = cudaMalloc(&p, bytes); break;
    case BE_MEM_PINNED: e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped); break;
    case BE_MEM_HOST:
        p = malloc(bytes);
        if (!p) tkv_errf(err, errlen, "out of host memory (%zu bytes)", bytes);
        return p;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        tkv_errf(err, errlen, "CUDA: cannot allocate %zu bytes of %s memory: %s", bytes,
                 mem == BE_MEM_DEVICE ? "device" : "pinned host", cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cu_free(be_backend *b, void *p, be_mem mem) {
    if (!p) return;
    cu_bind(cu_of(b));
    /* captured work not yet launched may read it: cudaFree waits for the device, not for a capture */
    if (mem != BE_MEM_HOST) cu_graph_break(cu_of(b));
    /* attention's kept table image lies in a scratch: a new scratch at the same address is not it */
    if (p == cu_of(b)->tables_scratch) cu_of(b)->tables_scratch = NULL;
    if (mem == BE_MEM_DEVICE) CUDA_CHECK(cudaFree(p)); /* waits for the device */
    else if (mem == BE_MEM_PINNED) CUDA_CHECK(cudaFreeHost(p));
    else free(p);
}

void cu_sync(cu_backend *B, cudaStream_t s) {
    double t0 = tkv_now_s();
    CUDA_CHECK(cudaStreamSynchronize(s));
    add_wait(&B->host_wait_ns, t0);
}

/* the forward's waits: the syncs above and the argument ring's (the move ring's are the transfer
 * thread's) */
static double cu_host_wait_seconds(be_backend *b) {
    cu_backend *B = cu_of(b);
    return (double)(__atomic_load_n(&B->host_wait_ns, __ATOMIC_RELAXED) + __atomic_load_n(&B->arg.wait_ns, __ATOMIC_RELAXED)) *
           1e-9;
}

/* Small uploads go through the ring (the source may change as soon as we return); large ones, which
 * only happen outside decode, are copied and waited for. */
static void cu_upload(be_backend *b, void *dst, const void *src, size_t bytes) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (bytes <= B->arg.pos.seg / 4) {
        cu_ring_upload(&B->arg, dst, src, bytes);
        return;
    }
    cu_graph_break(B);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, B->compute));
    cu_sync(B, B->compute);
}

/* From pinned memory: one DMA queued on the compute stream, no host copy and no wait (the caller keeps
 * src unchanged until its next read: backend.h). Any other source goes the way of cu_upload. */
static void cu_upload_pinned(be_backend *b, void *dst, const void *src, size_t bytes) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    cudaPointerAttributes at;
    CUDA_CHECK(cudaPointerGetAttributes(&at, src));
    if (at.type != cudaMemoryTypeHost) {
        cu_upload(b, dst, src, bytes);
        return;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, B->compute));
}

/* Device memory lands in host_tmp by one DMA when host_tmp is pinned (the forward's read buffers
 * are: BE_MEM_PINNED); a pageable host_tmp, which would make the runtime stage the copy itself, is
 * filled through the pinned bounce buffer, a piece at a time. */
static const void *cu_read(be_backend *b, const void *src, size_t bytes, void *host_tmp) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    cu_graph_break(B);
    cudaPointerAttributes at;
    CUDA_CHECK(cudaPointerGetAttributes(&at, src));
    if (at.type == cudaMemoryTypeDevice) {
        cudaPointerAttributes dt;
        CUDA_CHECK(cudaPointerGetAttributes(&dt, host_tmp));
        if (dt.type == cudaMemoryTypeHost) {
            CUDA_CHECK(cudaMemcpyAsync(host_tmp, src, bytes, cudaMemcpyDeviceToHost, B->compute));
            cu_sync(B, B->compute);
            cu_stall_collect(B);
            return host_tmp;
        }
        for (size_t off = 0; off < bytes; off += CU_BOUNCE_BYTES) {
            size_t nb = bytes - off < CU_BOUNCE_BYTES ? bytes - off : CU_BOUNCE_BYTES;
            CUDA_CHECK(cudaMemcpyAsync(B->bounce, (const uint8_t *)src + off, nb, cudaMemcpyDeviceToHost, B->compute));
            cu_sync(B, B->compute);
            memcpy((uint8_t *)host_tmp + off, B->bounce, nb);
        }
        cu_stall_collect(B);
        return host_tmp;
    }
    cu_sync(B, B->compute); /* pinned or host: readable once the queue is done */
    cu_stall_collect(B);
    return src;
}

static const char *cu_describe(const be_backend *b) { return cu_ofc(b)->desc; }

static void cu_close(be_backend *b) {
    cu_backend *B = cu_of(b);
    if (!B) return;
    cu_bind(B);
    cu_graph_close(B);
    CUDA_CHECK(cudaDeviceSynchronize());
    workers_free(B->workers);
    cu_upload_close(B);
    cu_etab_close(B);
    cu_prof_close(B);
    cu_gemm_close(B);
    for (int i = 0; i < B->n_owned; i++) {
        /* owned entries: device buffers, and the host descriptors (cw_mat) of prepared weights,
         * told apart by the pointer's kind */
        cudaPointerAttributes at;
        CUDA_CHECK(cudaPointerGetAttributes(&at, B->owned[i]));
        if (at.type == cudaMemoryTypeDevice) CUDA_CHECK(cudaFree(B->owned[i]));
        else free(B->owned[i]);
    }
    free(B->owned);
    for (int k = 0; k < CU_CHUNK_CACHES; k++)
        for (int i = 0; i < BE_N_POOLS; i++) {
            free(B->cc[k].host[i]);
            if (B->cc[k].dev[i]) CUDA_CHECK(cudaFree(B->cc[k].dev[i]));
        }
    ring_free(&B->arg);
    ring_free(&B->mv);
    if (B->bounce) CUDA_CHECK(cudaFreeHost(B->bounce));
    kept_free(&B->pos), kept_free(&B->slots);
    for (int k = 0; k < CU_MAX_LAYER_EVENTS; k++) CUDA_CHECK(cudaEventDestroy(B->layer_ev[k]));
    for (int k = 0; k < CU_MAX_STAGE_LAYERS; k++) CUDA_CHECK(cudaEventDestroy(B->stage_ev[k]));
    CUDA_CHECK(cudaEventDestroy(B->order_ev));
    for (int k = 0; k < CU_STALL_PAIRS; k++)
        for (int j = 0; j < 2; j++) CUDA_CHECK(cudaEventDestroy(B->stall_ev[k][j]));
    pthread_mutex_destroy(&B->stall_lock);
    CUDA_CHECK(cudaStreamDestroy(B->compute));
    CUDA_CHECK(cudaStreamDestroy(B->copy));
    pthread_mutex_destroy(&B->mv_lock);
    free(B->move_ws);
    cu_group_cache_free(&B->gcache);
    free(B->runs);
    free(B->move_phase);
    free(B->move_starts);
    free(B->run_starts);
    free(B->tok);
    free(B->pieces);
    free(B->uptr);
    free(B->ulen);
    free(B->uoff);
    free(B);
}

/* Host work between ops on the backend's host threads (-t): the KV cache's score update, which a
 * decode step at depth 8192 of a 7B makes 6.4 million double additions of (28 layers x 28 heads x
 * 8192 positions), one thread's work without this. */
static void cu_host_for(be_backend *b, int64_t n, void (*fn)(void *ctx, int64_t i0, int64_t i1, int tid), void *ctx) {
    workers_for(cu_of(b)->workers, n, fn, ctx);
}

/* Filled field by field (not positionally), so fields the seam gains later stay zero unless this
 * backend sets them (e.g. a "unified memory" flag: 0 here, the GPU's memory is not the host's). */
static be_ops cu_ops_table(void) {
    be_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.kv_fmts = 1u << BE_KV_F32 | 1u << BE_KV_F16 | 1u << BE_KV_Q8_HEAD; /* cuda_kv.cu's record codecs */
    o.matmul_bias = 1; /* the biases in the products' last store (cuda_matmul.cu, cuda_mmq.cu, cuda_gemm.cu) */
    o.close = cu_close;
    o.describe = cu_describe;
    o.alloc = cu_alloc;
    o.free = cu_free;
    o.upload = cu_upload;
    o.read = cu_read;
    o.host_for = cu_host_for;
    o.upload_pinned = cu_upload_pinned;
    o.prepare_weight = cu_prepare_weight;
    o.prepare_vector = cu_prepare_vector;
    o.matmul_scratch = cu_matmul_scratch;
    o.embed = cu_embed;
    o.matmul = cu_matmul;
    o.rmsnorm = cu_rmsnorm;
    o.add_bias = cu_add_bias;
    o.add = cu_add;
    o.add_rmsnorm = cu_add_rmsnorm;
    o.rope = cu_rope;
    o.swiglu = cu_swiglu;
    o.gather_rows = cu_gather_rows;
    o.combine_rows = cu_combine_rows;
    o.route = cu_route;
    o.matmul_sel = cu_matmul_sel;
    o.combine_pairs = cu_combine_pairs;
    o.expand_cols = cu_expand_cols;
    o.kv_write = cu_kv_write;
    o.kv_read = cu_kv_read;
    o.copy_moves = cu_copy_moves;
    o.copy_wait = cu_copy_wait;
    o.copy_after_compute = cu_copy_after_compute;
    o.host_sync = cu_host_sync;
    o.copy_stall_seconds = cu_copy_stall_seconds;
    o.host_wait_seconds = cu_host_wait_seconds;
    o.attention_scratch = cu_attention_scratch;
    o.attention = cu_attention;
    o.attention_merge = cu_attention_merge;
    o.score_add = cu_score_add;
    o.step_begin = cu_graph_step_begin;
    o.step_end = cu_graph_step_end;
    return o;
}
static const be_ops CU_OPS = cu_ops_table();
static const be_ops CU_OPS_PROF = cu_prof_ops(&CU_OPS); /* TIERKV_CUDA_PROFILE=1 */

int cu_env_switch(const char *name, const char *off, const char *on, int *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    *out = 0;
    if (!v || !*v || !strcmp(v, off)) return 0;
    if (!strcmp(v, on)) return *out = 1, 0;
    return tkv_errf(err, errlen, "%s='%.40s': expected %s or %s", name, v, on, off);
}

/* TIERKV_CUDA_GEMV: the one-token matmul for every weight type, "tile" (x staged in shared memory)
 * or "direct" (x read through L1), each optionally ",1" or ",2" rows per warp. Unset: direct for
 * BF16/F16, tile for the rest, the type's rows (*direct -1, *rows 0). */
static int gemv_choice(int *direct, int *rows, char *err, size_t errlen) {
    const char *v = getenv("TIERKV_CUDA_GEMV");
    *direct = -1, *rows = 0;
    if (!v || !*v) return 0;
    size_t n = strcspn(v, ",");
    if (n == 4 && !strncmp(v, "tile", 4)) *direct = 0;
    else if (n == 6 && !strncmp(v, "direct", 6)) *direct = 1;
    else n = 0;
    if (n && v[n] == ',' && (v[n + 1] == '1' || v[n + 1] == '2') && !v[n + 2]) *rows = v[n + 1] - '0';
    else if (n && v[n]) n = 0;
    if (!n) return tkv_errf(err, errlen, "TIERKV_CUDA_GEMV='%.40s': expected tile or direct, optionally ,1 or ,2", v);
    return 0;
}

extern "C" int cuda_backend_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    int gemv_direct, gemv_rows, gemm_from, prof, graphs, route_host;
    if (gemv_choice(&gemv_direct, &gemv_rows, err, errlen)) return -1; /* the message is in err */
    if (cu_gemm_choice(&gemm_from, err, errlen) || cu_prof_choice(&prof, err, errlen) ||
        cu_graph_choice(&graphs, err, errlen) || cu_route_choice(&route_host, err, errlen))
        return -1;
    int dev = p ? p->device : 0, n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return tkv_errf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
    if (dev < 0 || dev >= n) return tkv_errf(err, errlen, "CUDA: device %d asked for, %d present", dev, n);
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) return tkv_errf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
    if (prop.major < 9)
        return tkv_errf(err, errlen, "CUDA: %s is sm_%d%d; this build has code for sm_90 (Hopper) and newer only", prop.name,
                        prop.major, prop.minor);
    if (!prop.unifiedAddressing || !prop.canMapHostMemory)
        return tkv_errf(err, errlen, "CUDA: %s lacks unified addressing or mapped pinned memory", prop.name);
    if ((e = cudaSetDevice(dev)) != cudaSuccess) return tkv_errf(err, errlen, "CUDA: %s", cudaGetErrorString(e));
    if ((e = cudaFree(0)) != cudaSuccess) return tkv_errf(err, errlen, "CUDA: cannot create a context: %s", cudaGetErrorString(e));

    cu_backend *B = (cu_backend *)calloc(1, sizeof *B);
    if (!B) return tkv_errf(err, errlen, "out of host memory");
    B->ops = CU_OPS;
    B->base.ops = &B->ops;
    B->device = dev;
    B->prop = prop;
    B->gemv_direct = gemv_direct, B->gemv_rows = gemv_rows;
    B->workers = workers_init(p && p->n_threads > 0 ? p->n_threads : 1); /* (as the CPU backend's: never NULL) */
    cu_bind(B);
    /* from here on a failure is a device fault, not an environment the user can fix: the check
     * macro aborts */
    CUDA_CHECK(cudaStreamCreateWithFlags(&B->compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&B->copy, cudaStreamNonBlocking));
    for (int k = 0; k < CU_MAX_LAYER_EVENTS; k++) CUDA_CHECK(cudaEventCreateWithFlags(&B->layer_ev[k], cudaEventDisableTiming));
    for (int k = 0; k < CU_MAX_STAGE_LAYERS; k++) CUDA_CHECK(cudaEventCreateWithFlags(&B->stage_ev[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&B->order_ev, cudaEventDisableTiming));
    ring_init(&B->arg, CU_ARG_RING_BYTES, B->compute);
    B->arg.capture = B;
    ring_init(&B->mv, CU_MOVE_RING_BYTES, B->copy);
    pthread_mutex_init(&B->mv_lock, NULL);
    pthread_mutex_init(&B->stall_lock, NULL);
    for (int k = 0; k < CU_STALL_PAIRS; k++)
        for (int j = 0; j < 2; j++) CUDA_CHECK(cudaEventCreate(&B->stall_ev[k][j])); /* timing events */
    CUDA_CHECK(cudaHostAlloc((void **)&B->bounce, CU_BOUNCE_BYTES, cudaHostAllocPortable | cudaHostAllocMapped));
    kept_init(&B->pos), kept_init(&B->slots);
    for (int k = 0; k < CU_CHUNK_CACHES; k++)
        for (int i = 0; i < BE_N_POOLS; i++) {
            B->cc[k].host[i] = (void **)calloc(CU_MAX_CHUNKS, sizeof(void *));
            CU_REQUIRE(B->cc[k].host[i], "out of host memory");
            CUDA_CHECK(cudaMalloc((void **)&B->cc[k].dev[i], CU_MAX_CHUNKS * sizeof(void *)));
            B->cc[k].n[i] = -1;
        }
    if (cu_gemm_open(B, gemm_from, err, errlen)) {
        cu_close(&B->base);
        return -1;
    }
    if (prof) {
        cu_prof_open(B, &CU_OPS);
        B->ops = CU_OPS_PROF;
    }
    if (route_host) /* the forward then reads the router's logits back and routes on the host */
        B->ops.route = NULL, B->ops.matmul_sel = NULL, B->ops.combine_pairs = NULL;
    B->graph.on = graphs && !prof; /* the profile's timing events cannot be captured */
    char rows[16] = "";
    if (gemv_rows) snprintf(rows, sizeof rows, ",%d", gemv_rows);
    snprintf(B->desc, sizeof B->desc,
             "sm_%d%d (%.100s, %d SMs, %.0f GiB; gemv %s%s; gemm %s; graphs %s; experts routed on the %s)", prop.major,
             prop.minor, prop.name, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             gemv_direct < 0 ? "per type" : gemv_direct ? "direct" : "tile", rows, B->blas_why,
             B->graph.on ? "on" : "off", route_host ? "host" : "device");
    if (prof) snprintf(B->desc + strlen(B->desc), sizeof B->desc - strlen(B->desc), " [profiled]");
    *out = &B->base;
    return 0;
}
