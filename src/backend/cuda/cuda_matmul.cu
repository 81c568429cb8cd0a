/* cuda_matmul.cu — weights on the device and the products that read them: prepare_weight (the file's
 * blocks rewritten once into the layouts of cuda_wlayout.h and copied to the device),
 * prepare_vector, matmul and embed.
 *
 * The matmul is written for decode, where it is bound by the bytes of the weights: each weight
 * byte is read once from HBM with 16-byte coalesced loads. The quantised types (Q8_0, Q4_0, Q5_0,
 * Q4_K, Q6_K), when the caller gives the scratch that matmul_scratch asks for, run integer dot
 * products against the activation rounded to Q8_0 blocks (cuda_mmq.cu: the CPU backend's numerics
 * for Q8_0, Q4_0 and Q5_0; the CPU rounds x to Q8_K blocks of 256 for the K-quants). F32, F16,
 * BF16, and the quantised types without scratch, are dequantised in registers (bit for bit the
 * CPU's dequantisation) and multiplied in f32 with f32 activations (no activation rounding: the CPU
 * backend's results differ from these by its F16/BF16/Q8 rounding of x, FORMATS.md 2.7). Calls of
 * many tokens go to cuBLAS where it loaded (cuda_gemm.cu). A warp owns R rows;
 * lane l reads units l, l + 32, ... of them, so a warp's load
 * is 512 contiguous bytes per row. The activation rows (up to MM_NT tokens) are staged in shared
 * memory in tiles of kt elements, padded by 4 floats every 64 so the 16-byte reads of the lanes of
 * a quarter warp fall in distinct banks (exactly for F16/BF16/F32/Q4_K, 2-way for Q8_0/Q6_K); R rows
 * share every x read. For one token of BF16/F16 weights x is read directly through L1 instead (no
 * tile, no barrier: 0.80x the staged kernel's time on an H200; for Q8_0 it was 1.16x, so the other
 * types keep the tile); TIERKV_CUDA_GEMV overrides the choice (docs/CUDA.md). Dot products sum per
 * lane in unit order and then across the warp by a fixed butterfly: the same inputs give the same
 * bits on every call (no atomics), which the tiering's
 * exactness tests need. Batches of more than MM_NT tokens run as several launches (prefill is not
 * what this kernel is for: it reads the weights once per MM_NT tokens).
 * Bound at batch 1 (7B, bf16): 15 GB of weights per token; at 4.8 TB/s 3.1 ms. Measured on an H200
 * (bench/gpu-ab.sh): 3.0-3.6 TB/s on the 7B's large BF16 matrices, 0.6 TB/s on k/v (launch-bound);
 * Q8_0 through this float kernel 1.9 TB/s (docs/CUDA.md has the integer kernel's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mm.h"
extern "C" {
#include "base/err.h"
#include "base/workers.h"
}
extern "C" {
#include "gguf/gguf.h"
}

#define MM_SMEM_BYTES 24576  /* x tile budget per block (more blocks per SM than a larger tile) */
#define MM_STAGE_BYTES ((size_t)32 << 20) /* one piece of a weight's upload (two pinned pieces in flight) */

/* ---- prepare ---- */

/* One upload piece, filled on the host threads: each takes a range of its rows (cw_stage_rows). */
typedef struct {
    uint32_t t;
    const uint8_t *file; /* the piece's first row in the file */
    int64_t n_in, nr;
    uint8_t *stage;
} up_piece;

static void up_fill(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const up_piece *u = (const up_piece *)ctx;
    cw_stage_rows(u->t, u->file, u->n_in, u->nr, u->stage, i0, i1);
}

/* The two pinned pieces and their events, made at the first weight and kept to close; 0 where the
 * pinned memory cannot be had (the pieces then go through pageable memory, copied synchronously). */
static int up_ready(cu_backend *B) {
    if (B->up_buf[0]) return 1;
    if (B->up_failed) return 0;
    for (int k = 0; k < 2; k++)
        if (cudaHostAlloc((void **)&B->up_buf[k], MM_STAGE_BYTES, cudaHostAllocPortable) != cudaSuccess) {
            (void)cudaGetLastError();
            if (k) CUDA_CHECK(cudaFreeHost(B->up_buf[0]));
            B->up_buf[0] = B->up_buf[1] = NULL;
            B->up_failed = 1;
            return 0;
        }
    for (int k = 0; k < 2; k++) CUDA_CHECK(cudaEventCreateWithFlags(&B->up_ev[k], cudaEventDisableTiming));
    return 1;
}

void cu_upload_close(cu_backend *B) {
    for (int k = 0; k < 2 && B->up_buf[0]; k++) {
        CUDA_CHECK(cudaFreeHost(B->up_buf[k]));
        CUDA_CHECK(cudaEventDestroy(B->up_ev[k]));
    }
    B->up_buf[0] = B->up_buf[1] = NULL;
}

/* Device memory for a weight of total bytes: carved from the arena's chunk (a new chunk when it is
 * full) where the weight is small, else (or where no chunk can be had) an allocation of its own,
 * which *own says; NULL with *e where not even that can be had. */
static uint8_t *weight_mem(cu_backend *B, size_t total, int *own, cudaError_t *e) {
    *own = 0;
    if (total <= CU_WARENA_OWN) {
        size_t at = B->warena ? cu_arena_take(&B->warena_used, CU_WARENA_BYTES, total, 256) : SIZE_MAX;
        if (at != SIZE_MAX) return B->warena + at;
        uint8_t *c = NULL;
        if (cudaMalloc((void **)&c, CU_WARENA_BYTES) == cudaSuccess) {
            cu_own(B, c);
            B->warena = c, B->warena_used = 0;
            return c + cu_arena_take(&B->warena_used, CU_WARENA_BYTES, total, 256);
        }
        (void)cudaGetLastError(); /* nearly full: an allocation of the weight's own size may still fit */
    }
    uint8_t *dev = NULL;
    *e = cudaMalloc((void **)&dev, total);
    if (*e != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    *own = 1;
    return dev;
}

int cu_prepare_weight(be_backend *b, be_mat *m, int role, char *err, size_t errlen) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    cu_graph_break(B); /* it waits on events and copies from pageable memory: never inside a capture */
    (void)role; /* embed and matmul read the same layout */
    if (m->type & CW_TYPE_TAG) return 0;
    uint32_t t = m->type;
    if (!cw_supported(t))
        return tkv_errf(err, errlen, "weight type %s (ggml type %u) is not supported by the CUDA backend "
                        "(it runs F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K)", ggml_type_name(t), t);
    size_t off[3];
    int64_t st[3];
    size_t total = cw_layout(t, m->n_in, m->n_out, off, st);
    if (!total)
        return tkv_errf(err, errlen, "CUDA backend: a %s matrix with rows of %lld elements (needs a multiple of %d)",
                        ggml_type_name(t), (long long)m->n_in, cw_block(t) > 32 ? cw_block(t) : 32);
    int own_mem;
    cudaError_t e = cudaSuccess;
    uint8_t *dev = weight_mem(B, total, &own_mem, &e);
    if (!dev)
        return tkv_errf(err, errlen, "CUDA: cannot allocate %zu bytes for a weight: %s", total, cudaGetErrorString(e));
    cw_mat *cm = (cw_mat *)calloc(1, sizeof *cm);
    CU_REQUIRE(cm, "out of host memory");
    size_t file_row = (size_t)ggml_row_bytes(t, m->n_in);
    const uint8_t *file = (const uint8_t *)m->data;
    /* Rows in pieces: the host threads rewrite a piece into a pinned buffer (the file's rows for
     * the float types) while the other buffer's copies run on the compute stream, which orders
     * them before any op that reads the weight. Without pinned memory, one pageable piece at a
     * time, copied synchronously. */
    size_t row_bytes = (size_t)(st[0] + st[1] + st[2]);
    int64_t rows = (int64_t)(MM_STAGE_BYTES / row_bytes);
    int pinned = rows >= 1 && up_ready(B);
    uint8_t *own = NULL;
    if (rows < 1) rows = 1;
    if (!pinned && !(own = (uint8_t *)malloc((size_t)rows * row_bytes))) {
        if (own_mem) cudaFree(dev); /* (arena bytes stay taken: the chunk is freed at close) */
        free(cm);
        return tkv_errf(err, errlen, "out of host memory staging a weight");
    }
    for (int64_t r0 = 0; r0 < m->n_out; r0 += rows) {
        int64_t nr = m->n_out - r0 < rows ? m->n_out - r0 : rows;
        int k = B->up_next;
        uint8_t *stage = own;
        if (pinned) {
            B->up_next ^= 1;
            CUDA_CHECK(cudaEventSynchronize(B->up_ev[k])); /* the copies that last read this buffer */
            stage = B->up_buf[k];
        }
        up_piece u = {t, file + (size_t)r0 * file_row, m->n_in, nr, stage};
        workers_for(B->workers, nr, up_fill, &u);
        const uint8_t *src = stage;
        for (int a = 0; a < 3; a++) {
            size_t n = (size_t)nr * (size_t)st[a];
            if (!n) continue;
            uint8_t *dst = dev + off[a] + (size_t)r0 * (size_t)st[a];
            /* pageable: the call returns once the source is staged, so `own` may be reused */
            CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, B->compute));
            src += n;
        }
        if (pinned) CUDA_CHECK(cudaEventRecord(B->up_ev[k], B->compute));
    }
    free(own);
    cm->type = t;
    cm->n_in = m->n_in;
    cm->n_out = m->n_out;
    cm->a = dev + off[0], cm->b = dev + off[1], cm->c = dev + off[2];
    cm->sa = st[0], cm->sb = st[1], cm->sc = st[2];
    if (own_mem) cu_own(B, dev);
    cu_own(B, cm);
    m->data = cm;
    m->type = CW_TYPE_TAG | t;
    return 0;
}

const float *cu_prepare_vector(be_backend *b, const float *host, int64_t n, char *err, size_t errlen) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    float *d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, (size_t)(n > 0 ? n : 1) * sizeof(float));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        tkv_errf(err, errlen, "CUDA: cannot allocate a vector of %lld floats: %s", (long long)n, cudaGetErrorString(e));
        return NULL;
    }
    /* on the compute stream (a blocking copy on the legacy stream is not ordered before its ops) */
    cu_graph_break(B);
    if (n > 0) CUDA_CHECK(cudaMemcpyAsync(d, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, B->compute));
    cu_own(B, d);
    return d;
}

/* the larger of the integer kernels' scratch and cuBLAS's (a call of fewer tokens than n_tok may run
 * either) */
size_t cu_matmul_scratch(const be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok) {
    size_t s = 0;
    for (int i = 0; i < n_outs; i++)
        if (cu_mmq_type(cu_type_of(outs[i].w))) s = cu_mmq_scratch(n_in, n_tok);
    /* the float kernels need none: every row's dot product is one warp's */
    size_t g = cu_gemm_scratch(cu_ofc(b), outs, n_outs, n_in, n_tok);
    return g > s ? g : s;
}

/* ---- the kernel ---- */

/* padded shared-memory index of tile element k */
__device__ __forceinline__ int mm_pad(int k) { return k + 4 * (k >> 6); }

/* rows per warp by default: two when x reads would otherwise outweigh the weight bytes (4..6-bit
 * types, or several tokens) */
template <int T, int NT>
__host__ __device__ constexpr int mm_rows() {
    return (NT >= 2 || mm_unit<T>() == 32) ? 2 : 1;
}

/* R rows per warp; XG: x read from global memory through L1 (one token) instead of staged in shared
 * memory tiles */
template <int T, int NT, int R, bool XG, int SEL>
__global__ void __launch_bounds__(MM_WARPS * 32) mm_kernel(const mm_args a, const mm_sel es) {
    constexpr int U = mm_unit<T>(), NS = mm_nspan<T>(), SL = U / NS;
    static_assert(!XG || NT == 1, "x from global memory: one token");
    if (mm_idle<SEL>(es)) return; /* the whole block */
    extern __shared__ float4 xs4[];
    float *xs = (float *)xs4;
    cw_mat w;
    float *y;
    int64_t y_stride;
    int block0;
    const float *bias;
    mm_pick_out<SEL>(a, es, w, y, y_stride, block0, bias);
    const int tile_nt = mm_tile_nt<SEL>(es);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)((int)blockIdx.x - block0) * MM_WARPS + warp) * R;
    const int xstride = mm_pad(a.kt); /* kt is a multiple of 64: the padded row length */
    const int64_t x0 = mm_x_row<SEL>(es) * a.n_in; /* (0 but in MM_PAIR's kernels) */
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;

    for (int64_t k0 = 0; k0 < a.n_in; k0 += a.kt) {
        const int klen = (int)(a.n_in - k0 < a.kt ? a.n_in - k0 : a.kt);
        if constexpr (!XG) {
            __syncthreads(); /* the previous tile is no longer read */
            for (int t = 0; t < mm_nt<SEL>(a, tile_nt); t++) {
                const float *xr;
                if constexpr (SEL == MM_TILE) xr = a.x + mm_tile_pair(es, t) / es.x_div * a.n_in;
                else xr = a.x + x0 + (int64_t)t * a.n_in;
                const float4 *src = (const float4 *)(xr + k0);
                for (int k = 4 * (int)threadIdx.x; k < klen; k += 4 * MM_WARPS * 32)
                    *(float4 *)&xs[t * xstride + mm_pad(k)] = __ldg(src + k / 4);
            }
            __syncthreads();
        }
        const int64_t u0 = k0 / U, u1 = (k0 + klen) / U;
#pragma unroll 2
        for (int64_t u = u0 + lane; u < u1; u += 32) {
            float v[R][U];
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (row0 + r < w.n_out) mm_decode<T>(w, row0 + r, u, v[r]);
                else
#pragma unroll
                    for (int k = 0; k < U; k++) v[r][k] = 0.0f;
            }
#pragma unroll
            for (int s = 0; s < NS; s++) {
                const int base = (int)(cw_span_base(T, u, s) - k0);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= mm_nt<SEL>(a, tile_nt)) break;
#pragma unroll
                    for (int k4 = 0; k4 < SL / 4; k4++) {
                        float4 xv;
                        if constexpr (XG) xv = __ldg((const float4 *)(a.x + x0 + k0 + base + 4 * k4));
                        else xv = *(const float4 *)&xs[t * xstride + mm_pad(base + 4 * k4)];
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            const float *vv = &v[r][s * SL + 4 * k4];
                            acc[r][t] += vv[0] * xv.x + vv[1] * xv.y + vv[2] * xv.z + vv[3] * xv.w;
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = cu_warp_sum(acc[r][t]);
            if (lane == 0 && t < mm_nt<SEL>(a, tile_nt) && row0 + r < w.n_out) {
                int64_t yr = t;
                if constexpr (SEL == MM_TILE) yr = mm_tile_pair(es, t);
                y[yr * y_stride + row0 + r] = mm_biased(s, bias, row0 + r);
            }
        }
}

template <int T, int NT, int R, bool XG>
static void mm_launch(cu_backend *B, mm_args &a, int n_blocks, const mm_sel *s) {
    size_t smem = XG ? 0 : (size_t)NT * (size_t)(a.kt + a.kt / 16) * sizeof(float);
    if constexpr (NT == 1)
        if (s) { /* matmul_sel: a grid row a pair */
            mm_kernel<T, 1, R, XG, MM_PAIR><<<mm_grid(*s, n_blocks), MM_WARPS * 32, smem, B->compute>>>(a, *s);
            CU_LAUNCHED();
            return;
        }
    if constexpr (NT == MM_NT && !XG)
        if (s) { /* matmul_sel: a grid row a tile */
            mm_kernel<T, NT, R, XG, MM_TILE><<<mm_grid(*s, n_blocks), MM_WARPS * 32, smem, B->compute>>>(a, *s);
            CU_LAUNCHED();
            return;
        }
    mm_kernel<T, NT, R, XG, MM_PLAIN><<<n_blocks, MM_WARPS * 32, smem, B->compute>>>(a, mm_sel{});
    CU_LAUNCHED();
}

/* one token: x read directly for the 16-bit types, staged for the rest (measured on an H200:
 * docs/CUDA.md), unless TIERKV_CUDA_GEMV chose */
template <int T>
static bool mm_direct1(const cu_backend *B) {
    return B->gemv_direct >= 0 ? B->gemv_direct != 0 : (T == CW_T_BF16 || T == CW_T_F16);
}

template <int T>
static void mm_launch1(cu_backend *B, mm_args &a, int n_blocks, int rows, const mm_sel *s) {
    if (mm_direct1<T>(B))
        rows == 2 ? mm_launch<T, 1, 2, true>(B, a, n_blocks, s) : mm_launch<T, 1, 1, true>(B, a, n_blocks, s);
    else
        rows == 2 ? mm_launch<T, 1, 2, false>(B, a, n_blocks, s) : mm_launch<T, 1, 1, false>(B, a, n_blocks, s);
}

template <int T>
static void mm_type(cu_backend *B, mm_args &a, const mm_sel *s) {
    int nt_max = a.nt <= 1 ? 1 : a.nt <= 2 ? 2 : a.nt <= 4 ? 4 : 8;
    int rows = nt_max == 1 && B->gemv_rows ? B->gemv_rows : nt_max == 1 ? mm_rows<T, 1>() : 2;
    int rows_per_block = MM_WARPS * rows;
    const int blocks = mm_blocks(a, rows_per_block);
    /* the x tile: as much of the row as the budget holds, in whole warp steps (32 units: every lane
     * busy) and multiples of 256 (a K-quant unit's spans stay inside one tile) */
    const int64_t step = 32 * mm_unit<T>() > 256 ? 32 * mm_unit<T>() : 256;
    int64_t per = (int64_t)(MM_SMEM_BYTES / sizeof(float)) * 16 / 17 / nt_max;
    int64_t kt = per / step * step;
    if (kt < step) kt = step;
    int64_t whole = (a.n_in + step - 1) / step * step;
    a.kt = (int)((nt_max == 1 && mm_direct1<T>(B)) || whole < kt ? whole : kt);
    switch (nt_max) {
    case 1: mm_launch1<T>(B, a, blocks, rows, s); break;
    case 2: mm_launch<T, 2, 2, false>(B, a, blocks, NULL); break;
    case 4: mm_launch<T, 4, 2, false>(B, a, blocks, NULL); break;
    default: mm_launch<T, 8, 2, false>(B, a, blocks, s); break; /* (s: MM_TILE's) */
    }
}

void cu_mm_dispatch(cu_backend *B, uint32_t t, mm_args &a, const mm_sel *s) {
    CU_REQUIRE(!s || (s->order ? a.nt == MM_NT : a.nt == 1), "matmul_sel: one token a pair, or tiles of MM_NT");
    switch (t) {
    case CW_T_F32: mm_type<CW_T_F32>(B, a, s); break;
    case CW_T_F16: mm_type<CW_T_F16>(B, a, s); break;
    case CW_T_BF16: mm_type<CW_T_BF16>(B, a, s); break;
    case CW_T_Q8_0: mm_type<CW_T_Q8_0>(B, a, s); break;
    case CW_T_Q4_0: mm_type<CW_T_Q4_0>(B, a, s); break;
    case CW_T_Q5_0: mm_type<CW_T_Q5_0>(B, a, s); break;
    case CW_T_Q4_K: mm_type<CW_T_Q4_K>(B, a, s); break;
    case CW_T_Q6_K: mm_type<CW_T_Q6_K>(B, a, s); break;
    default: CU_REQUIRE(0, "unprepared weight type");
    }
}

void cu_matmul(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
               void *scratch) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(n_outs >= 1 && n_outs <= BE_MM_MAX_OUTS, "matmul: 1..BE_MM_MAX_OUTS outputs");
    CU_REQUIRE(((uintptr_t)x & 15) == 0, "matmul: x must be 16-byte aligned");
    if (cu_gemm_run(B, outs, n_outs, n_in, x, n_tok, scratch)) return; /* many tokens: cuBLAS */
    /* the activation rounded once for every integer product of this call */
    const int8_t *qx = NULL;
    const float *dx = NULL;
    for (int i = 0; scratch && i < n_outs && !qx; i++)
        if (cu_mmq_type(cu_mat_of(outs[i].w)->type)) cu_mmq_quantize(B, x, n_in, n_tok, scratch, &qx, &dx);
    for (int64_t t0 = 0; t0 < n_tok; t0 += MM_NT) {
        int nt = (int)(n_tok - t0 < MM_NT ? n_tok - t0 : MM_NT);
        int done[BE_MM_MAX_OUTS] = {0};
        /* one launch per weight type among the outputs (q, k, v of a K-quant mix may differ) */
        for (int i = 0; i < n_outs; i++) {
            if (done[i]) continue;
            uint32_t t = cu_mat_of(outs[i].w)->type;
            mm_args a;
            memset(&a, 0, sizeof a);
            a.x = x + t0 * n_in;
            a.n_in = n_in;
            a.nt = nt;
            for (int j = i; j < n_outs; j++) {
                const cw_mat *w = cu_mat_of(outs[j].w);
                if (done[j] || w->type != t) continue;
                CU_REQUIRE(w->n_in == n_in, "matmul: a matrix's n_in differs from the activation's");
                a.o[a.n_o].w = *w;
                a.o[a.n_o].y = outs[j].y + t0 * outs[j].y_stride;
                a.o[a.n_o].y_stride = outs[j].y_stride;
                a.o[a.n_o].bias = outs[j].bias;
                a.n_o++;
                done[j] = 1;
            }
            if (qx && cu_mmq_type(t)) cu_mmq_launch(B, a, qx + t0 * n_in, dx + t0 * (n_in / 32), NULL);
            else cu_mm_dispatch(B, t, a, NULL);
        }
    }
}

/* ---- embed: rows of the (prepared) embedding dequantised into x ---- */

template <int T>
__global__ void embed_kernel(const cw_mat w, const int32_t *tokens, float *x) {
    constexpr int U = mm_unit<T>(), NS = mm_nspan<T>(), SL = U / NS;
    const int t = blockIdx.y;
    const int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= w.n_in / U) return;
    float v[U];
    int64_t row = tokens[t];
    mm_decode<T>(w, row, u, v);
    float *xr = x + (int64_t)t * w.n_in;
#pragma unroll
    for (int s = 0; s < NS; s++) {
        int64_t base = cw_span_base(T, u, s);
#pragma unroll
        for (int k = 0; k < SL; k++) xr[base + k] = v[s * SL + k];
    }
}

template <int T>
static void embed_launch(cu_backend *B, const cw_mat &w, const int32_t *tok_dev, int n, float *x) {
    int64_t units = w.n_in / mm_unit<T>();
    dim3 grid((unsigned)((units + 127) / 128), (unsigned)n);
    embed_kernel<T><<<grid, 128, 0, B->compute>>>(w, tok_dev, x);
    CU_LAUNCHED();
}

void cu_embed(be_backend *b, const be_mat *emb, const int32_t *tokens, int n, float *x) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    const cw_mat *w = cu_mat_of(emb);
    for (int i = 0; i < n; i++) CU_REQUIRE(tokens[i] >= 0 && tokens[i] < w->n_out, "embed: token id out of range");
    const int32_t *td = (const int32_t *)cu_ring_put(&B->arg, tokens, (size_t)n * sizeof(int32_t));
    switch (w->type) {
    case CW_T_F32: embed_launch<CW_T_F32>(B, *w, td, n, x); break;
    case CW_T_F16: embed_launch<CW_T_F16>(B, *w, td, n, x); break;
    case CW_T_BF16: embed_launch<CW_T_BF16>(B, *w, td, n, x); break;
    case CW_T_Q8_0: embed_launch<CW_T_Q8_0>(B, *w, td, n, x); break;
    case CW_T_Q4_0: embed_launch<CW_T_Q4_0>(B, *w, td, n, x); break;
    case CW_T_Q5_0: embed_launch<CW_T_Q5_0>(B, *w, td, n, x); break;
    case CW_T_Q4_K: embed_launch<CW_T_Q4_K>(B, *w, td, n, x); break;
    case CW_T_Q6_K: embed_launch<CW_T_Q6_K>(B, *w, td, n, x); break;
    default: CU_REQUIRE(0, "unprepared embedding type");
    }
}
