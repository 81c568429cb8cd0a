/* cuda_internal.h — internal to the .cu files of src/backend/cuda: the backend's state, the check macro, the
 * pinned staging rings, and the ops each .cu file implements (cuda_backend.cu assembles them into
 * the be_ops table). Nothing outside src/backend/cuda includes this header; it is CUDA C++.
 *
 * Invariants. Every CUDA call goes through CUDA_CHECK (a device error aborts with file:line: it is
 * never bad input) and every launch is followed by CU_LAUNCHED(). Device and pinned memory are
 * allocated in cuda_backend_open and prepare_*, never by an op: the ops reach host arguments
 * through the rings, whose segments an event guards, so a decode step allocates nothing. One
 * compute stream runs every op in call order; the copy stream runs copy_moves; the per-layer events
 * join them. */
#ifndef TKV_CUDA_INTERNAL_H
#define TKV_CUDA_INTERNAL_H
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_plan.h"
#include "backend/cuda/cuda_wlayout.h"

[[noreturn]] void cu_fatal(const char *what, const char *msg, const char *file, int line);
#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) cu_fatal(#call, cudaGetErrorString(e_), __FILE__, __LINE__);   \
    } while (0)
#define CU_LAUNCHED() CUDA_CHECK(cudaGetLastError())
/* a broken invariant of the CUDA backend (a caller breaking backend.h's contract) */
#define CU_REQUIRE(c, msg) ((c) ? (void)0 : cu_fatal(#c, msg, __FILE__, __LINE__))

/* ---- sizes chosen at open (docs/CUDA.md) ---- */
#define CU_RING_SEGS 4
#define CU_ARG_RING_BYTES ((size_t)64 << 20)  /* compute stream: arguments, slot tables */
#define CU_MOVE_RING_BYTES ((size_t)16 << 20) /* copy stream: move descriptors */
#define CU_BOUNCE_BYTES ((size_t)8 << 20)     /* kv_read: pinned landing area */
#define CU_MAX_LAYER_EVENTS 1024              /* copy events (one per layer) */
#define CU_MAX_STAGE_LAYERS 4                 /* layer dimension of the STAGE pool */
#define CU_CHUNK_CACHES 4                     /* distinct be_kv_pools whose chunk tables stay on the device */
#define CU_MAX_CHUNKS 65536                   /* chunks per pool in those tables */
#define CU_MAX_PARTS 4                        /* attention_merge */
#define CU_STALL_PAIRS 512                    /* timing event pairs around copy_wait's stream waits */
#define CU_POS_CAP 4096                       /* rope's positions and kv_write's slots kept on the device */
#define CU_GRAPH_EXECS 4                      /* executable graphs kept, one per call shape (cuda_graph.cu) */
#define CU_GRAPH_MAX_TOK 8                    /* calls of up to this many tokens are captured */

/* A pinned ring with a device twin: the host writes at an offset, the stream copies the bytes to the
 * twin at the same offset, and kernels read the twin. One event per segment (cuda_plan.h). */
struct cu_ring {
    cu_ring_pos pos;
    uint8_t *host; /* pinned */
    uint8_t *dev;  /* device, same size */
    cudaEvent_t ev[CU_RING_SEGS];
    int recorded[CU_RING_SEGS];
    cudaStream_t stream;
    struct cu_backend *capture; /* the backend whose graph capture this stream may be in (the argument
                                   ring's); NULL: never captured */
    int64_t wait_ns;            /* the host blocked on a segment's event (host_wait_seconds) */
};
/* cudaStreamSynchronize(s), the time it blocked added to B's host_wait_seconds */
void cu_sync(struct cu_backend *B, cudaStream_t s);
/* host pointer of a fresh reservation; *dev the twin's address of the same bytes */
uint8_t *cu_ring_reserve(cu_ring *r, size_t bytes, size_t align, uint8_t **dev);
/* bytes (<= one segment) copied into the ring and queued to its twin: returns the twin's pointer */
const void *cu_ring_put(cu_ring *r, const void *src, size_t bytes);
/* any number of bytes to a device destination through the ring, in pieces */
void cu_ring_upload(cu_ring *r, void *dev_dst, const void *src, size_t bytes);
/* A small host array kept on the device between calls (rope's positions, kv_write's slots): the
 * device copy of src (n ints), uploaded through the ring only when it differs from the last one
 * (the copy queued after every reader of the old one); past CU_POS_CAP, a ring copy of its own. */
struct cu_kept {
    int32_t *dev, *host; /* CU_POS_CAP each: the device copy and its host mirror */
    int n;
};

/* Device copies of the chunk pointer tables of one be_kv_pools (refreshed when a pool grows). */
struct cu_chunk_cache {
    const be_kv_pools *key;
    int n[BE_N_POOLS];
    void **host[BE_N_POOLS]; /* host mirror: what the device copy holds */
    void **dev[BE_N_POOLS];  /* [CU_MAX_CHUNKS] */
    uint64_t last_use;
};

/* What a kernel needs to find the record of (tier, slot, layer). */
struct cu_pool_view {
    const uint8_t *const *chunks; /* device table of chunk bases */
    int64_t rec;                  /* record bytes */
    int fmt, layers, shift;
};
struct cu_pools_view {
    cu_pool_view p[BE_N_POOLS];
    int n_head_kv, head_dim;
};

/* The graphs of bracketed calls (cuda_graph.cu): an executable graph per call shape. */
struct cu_graph_exec {
    cudaGraphExec_t exec; /* NULL: a free slot */
    int n_tok;
    size_t nodes;
    uint64_t last_use;
};
struct cu_graphs {
    int on;        /* TIERKV_CUDA_GRAPH */
    int capturing; /* the compute stream is being captured */
    int n_tok;     /* the captured call's tokens */
    cu_graph_exec ex[CU_GRAPH_EXECS];
    uint64_t clock;
    cuda_graph_stats st;
};

/* matmul_sel's table of a layer's experts (cuda_moe.cu): the host array it was made from (its address,
 * its first and last matrices' device descriptions, which a new model's array at a reused address
 * would not share) and the device copy of the array's cw_mat */
typedef struct {
    const be_mat *key;
    const void *first, *last;
    int n;
    cw_mat *dev;
} cu_etab;

struct cu_backend {
    be_backend base; /* first: what the engine holds */
    be_ops ops;      /* what base.ops points at: the table, or the profile's, less what TIERKV_CUDA_ROUTE=host drops */
    int device;
    cudaDeviceProp prop;
    char desc[384];
    cudaStream_t compute, copy;
    int gemv_direct, gemv_rows; /* the one-token matmul (TIERKV_CUDA_GEMV): -1/0 the type's choice */
    struct cu_blas *blas;       /* many-token matmuls through cuBLAS (cuda_gemm.cu); NULL: not in use */
    int gemm_from;              /* TIERKV_CUDA_GEMM: -1 auto, 0 off, else tokens from which it runs */
    char blas_why[160];         /* what runs them, or why cuBLAS does not */
    struct cu_prof *prof;       /* TIERKV_CUDA_PROFILE=1: the ops' device times (cuda_prof.cu); else NULL */
    cu_graphs graph;            /* bracketed calls as CUDA graphs (cuda_graph.cu) */
    /* rope's positions and kv_write's slots: every layer of a step (q and k) uses the same ones, so
     * they go up once a step instead of once or twice a layer */
    cu_kept pos, slots;
    cudaEvent_t layer_ev[CU_MAX_LAYER_EVENTS];           /* copy stream, recorded by copy_moves */
    cudaEvent_t stage_ev[CU_MAX_STAGE_LAYERS];           /* compute stream, recorded by attention after
                                                            reading STAGE layer k */
    cudaEvent_t order_ev;                                /* compute stream, recorded by copy_after_compute */
    cu_ring arg;                                         /* compute stream */
    cu_ring mv;                                          /* copy stream */
    pthread_mutex_t mv_lock;                             /* copy_moves may come from any thread */
    float *bounce;                                       /* pinned, CU_BOUNCE_BYTES */
    /* prepare_weight's upload: two pinned pieces (cuda_matmul.cu), each reused once the event
     * after its copies has passed; up_failed: no pinned memory for them (pageable, synchronous) */
    uint8_t *up_buf[2];
    cudaEvent_t up_ev[2];
    int up_next, up_failed;
    /* copy stalls: a pair of timing events on the compute stream around each copy_wait's stream
     * wait, a ring of CU_STALL_PAIRS reused; pairs [stall_done, stall_next) are recorded and not yet
     * collected (counters, mod CU_STALL_PAIRS); collected pairs add their elapsed time */
    cudaEvent_t stall_ev[CU_STALL_PAIRS][2];
    uint64_t stall_next, stall_done;
    uint64_t stall_untimed;                              /* waits left untimed: every pair still pending */
    double stall_seconds;
    pthread_mutex_t stall_lock;                          /* the stats may be read from another thread */
    int64_t host_wait_ns;                                /* cu_sync: the host blocked on the device */
    cu_chunk_cache cc[CU_CHUNK_CACHES];
    uint64_t cc_clock;
    /* attention: whether the tables of (stage_gen, stage_pools) read a STAGE slot (cuda_attn.cu) */
    uint64_t stage_gen;
    const be_kv_pools *stage_pools;
    bool stage_read;
    /* attention: the device image of the last call's tables */
    uint64_t tables_gen;
    const void *tables_scratch;
    size_t tables_bytes;
    /* host workspaces of the planners: grown (host memory only) when a call is larger than any before */
    uint64_t *move_ws;    /* CU_MOVE_WS_WORDS(move_cap) */
    cu_move_run *runs;
    uint8_t *move_phase;  /* [move_cap] */
    int *move_starts;     /* [move_cap + 1] */
    int *run_starts;      /* [move_cap + 1] */
    int move_cap;
    cu_group_cache gcache;  /* the last lists' groups and runs (under mv_lock) */
    cu_tok_info *tok;
    cu_piece *pieces;
    const void **uptr;
    int *ulen, *uoff;
    int tok_cap, piece_cap;
    /* host threads for the host work between ops (be_ops.host_for: the KV cache's score update) */
    struct tkv_workers *workers;
    /* the weights' arena (cuda_plan.h): the chunk small weights are carved from, and its bytes taken */
    uint8_t *warena;
    size_t warena_used;
    /* matmul_sel's expert tables, made before the steps that use them (cuda_moe.cu) */
    cu_etab *etab;
    int etab_n, etab_cap, etab_hint;
    int32_t *sel_plan; /* and the pairs grouped by expert (owned), made with the first table */
    /* memory prepare_* made, freed at close */
    void **owned;
    int n_owned, cap_owned;
};

static inline cu_backend *cu_of(be_backend *b) { return (cu_backend *)b; }
static inline const cu_backend *cu_ofc(const be_backend *b) { return (const cu_backend *)b; }
/* the device copy of a kept array (cu_kept) holding src's n ints */
const int32_t *cu_kept_put(cu_backend *B, cu_kept *k, const int32_t *src, int n);
/* makes the backend's device current on the calling thread (the transfer thread too) */
void cu_bind(cu_backend *B);
void cu_own(cu_backend *B, void *p);
/* the chunk tables of p on the device, refreshed if a pool grew (compute stream) */
void cu_pools_sync(cu_backend *B, const be_kv_pools *p, cu_pools_view *v);
/* adds the elapsed time of every recorded stall pair the device has completed (never waits) */
void cu_stall_collect(cu_backend *B);
void cu_stall_collect_locked(cu_backend *B); /* with stall_lock held */
/* aborts unless p is device or pinned memory (what a kernel can read) */
void cu_require_device_readable(const void *p, const char *what);

/* ---- the ops, by file ---- */
/* cuda_matmul.cu */
int cu_prepare_weight(be_backend *b, be_mat *m, int role, char *err, size_t errlen);
const float *cu_prepare_vector(be_backend *b, const float *host, int64_t n, char *err, size_t errlen);
size_t cu_matmul_scratch(const be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok);
void cu_matmul(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
               void *scratch);
void cu_embed(be_backend *b, const be_mat *emb, const int32_t *tokens, int n, float *x);
void cu_upload_close(cu_backend *B); /* frees prepare_weight's pinned pieces (after a device sync) */
/* cuda_gemm.cu */
int cu_gemm_choice(int *from, char *err, size_t errlen); /* TIERKV_CUDA_GEMM, read before the device */
/* loads cuBLAS and makes its handle on the compute stream; where that fails the kernels run
 * (blas_why says why), unless TIERKV_CUDA_GEMM asked for it by number: then -1 with a message */
int cu_gemm_open(cu_backend *B, int from, char *err, size_t errlen);
void cu_gemm_close(cu_backend *B);
int cu_gemm_from(const cu_backend *B, uint32_t type); /* tokens from which a type goes to cuBLAS; 0: never */
/* scratch bytes of a call of these outputs, prepared or not (0: it runs the kernels) */
size_t cu_gemm_scratch(const cu_backend *B, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok);
/* the call through cuBLAS where it goes there and scratch is given: false, nothing queued, otherwise */
bool cu_gemm_run(cu_backend *B, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                 void *scratch);
/* An environment switch: unset, empty or `off` gives 0, `on` 1; anything else is refused, naming the
 * variable and the two words (cuda_backend.cu) */
int cu_env_switch(const char *name, const char *off, const char *on, int *out, char *err, size_t errlen);
/* cuda_prof.cu */
int cu_prof_choice(int *on, char *err, size_t errlen); /* TIERKV_CUDA_PROFILE */
be_ops cu_prof_ops(const be_ops *real);                /* the table of wrappers that time real's ops */
void cu_prof_open(cu_backend *B, const be_ops *real);
void cu_prof_close(cu_backend *B);                     /* prints the times (stderr), frees */
/* cuda_graph.cu */
int cu_graph_choice(int *on, char *err, size_t errlen); /* TIERKV_CUDA_GRAPH */
void cu_graph_step_begin(be_backend *b, int n_tok);
void cu_graph_step_end(be_backend *b);
/* an op that must wait, or queue what a capture must not hold: ends a capture early (what it holds
 * is launched; the rest of the call runs op by op); nothing when not capturing. The capture flag is
 * not locked: only the forward's thread may call it (the transfer thread's copy_moves never does) */
void cu_graph_break(cu_backend *B);
void cu_graph_close(cu_backend *B);
/* cuda_dense.cu */
void cu_rmsnorm(be_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps);
void cu_add_bias(be_backend *b, float *y, const float *bias, int rows, int n);
void cu_add(be_backend *b, float *y, const float *x, int64_t n);
void cu_add_rmsnorm(be_backend *b, float *x, const float *d, float *y, const float *w, int rows, int n, float eps);
void cu_rope(be_backend *b, float *x, int n_rows, int n_heads, int head_dim, const int *pos, float base, float scale,
             int neox);
void cu_swiglu(be_backend *b, float *gate, const float *up, int64_t n);
void cu_gather_rows(be_backend *b, float *dst, const float *src, const int *rows, int n, int width);
void cu_combine_rows(be_backend *b, float *y, const float *src, const int *rows, const float *w, int n, int k,
                     int width);
void cu_combine_pairs(be_backend *b, float *y, const float *src, const float *w, int n, int k, int width);
void cu_expand_cols(be_backend *b, float *dst, int dst_stride, const float *src, const int32_t *cols, int src_stride,
                    const int *n_cols, int n_tok, int rows);
void cu_score_add(be_backend *b, double *const *score, const int *n_pos, int n_tok, const float *mass, int n_head,
                  int stride, double w);
/* cuda_moe.cu: an expert FFN routed on the device */
void cu_route(be_backend *b, const float *logits, int n, int n_expert, int k, int32_t *sel, float *w);
void cu_matmul_sel(be_backend *b, const be_mm_out *outs, int n_outs, int n_expert, int64_t n_in, const float *x,
                   int x_div, const int32_t *sel, int n_pairs, void *scratch);
int cu_route_choice(int *host, char *err, size_t errlen); /* TIERKV_CUDA_ROUTE: device (0) or host (1) */
void cu_etab_close(cu_backend *B);
/* cuda_kv.cu */
void cu_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                 const float *v);
void cu_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v);
void cu_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer);
void cu_copy_wait(be_backend *b, int layer);
void cu_copy_after_compute(be_backend *b);
void cu_host_sync(be_backend *b);
double cu_copy_stall_seconds(be_backend *b);
/* cuda_attn.cu */
size_t cu_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim);
void cu_attention(be_backend *b, const be_attn *a, void *scratch);
void cu_attention_merge(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                        int head_dim, int mass_heads, int mass_stride, const int *n_pos);

/* ---- device helpers shared by the kernels ---- */
#ifdef __CUDACC__
__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* address of the record of reference r at layer l */
__device__ __forceinline__ const uint8_t *cu_rec(const cu_pool_view &q, int32_t r, int layer) {
    uint32_t s = (uint32_t)r & 0x3fffffffu, per = 1u << q.shift;
    const uint8_t *base = q.chunks[s >> q.shift];
    return base + ((int64_t)(layer % q.layers) * per + (s & (per - 1))) * q.rec;
}
#endif

#endif
