/* cuda_moe.cu — an expert FFN routed on the device (be_ops.route, matmul_sel; combine_pairs is
 * cuda_dense.cu's): the router's logits stay where they are, so a Qwen3 MoE decode step waits for
 * the device once (its logits), not once a layer, and can be one CUDA graph.
 *
 * route: one warp a token. The max and the selection are exact in any order; the softmax's sum and
 * the weights' sum are lane 0's, in expert order, in double (moe_route's additions, so the same
 * bits wherever the device's expf gives the host's; CUDA's expf is within 2 ulp of it).
 * matmul_sel: the matmul kernels with one grid row a pair (cuda_mm.h, mm_sel), each block
 * reading its pair's expert from a device array of the layer's cw_mat; each row's sum is the one
 * the same kernel computes for one token with that expert (the host path's ops: a pass for one
 * token, or several, gives every row the same bits). Where the pairs are many against the experts
 * (a prompt's chunk), group_kernel first sorts them by expert into tiles of up to MM_NT pairs, and a
 * grid row is a tile: each expert's weights are read once a tile instead of once a pair, and every
 * row keeps its bits. The arrays and the grouping's buffer are made once, before the steps (the
 * forward's call with no pair), since an upload or allocation may not run inside a captured step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mm.h"
extern "C" {
#include "base/err.h"
}

#define RT_MAX 1024 /* experts at most (the loader's bound; Qwen3-30B-A3B: 128, 8 a token) */
#define SEL_MAX_PAIRS BE_SEL_MAX_PAIRS /* a call's pairs at most (a grid's rows: 65535) */
/* the most tiles n pairs of X experts need: sum over experts of ceil(c_e / MM_NT) */
#define SEL_TILES(n, X) (((n) + MM_NT - 1) / MM_NT + ((X) < (n) ? (X) : (n)))
#define SEL_TILE_CAP SEL_TILES(SEL_MAX_PAIRS, RT_MAX) /* each tile array's length in the buffer */
/* pairs grouped by expert where they are at least this many a expert on average */
#define SEL_GROUP_PER_EXPERT 2

int cu_route_choice(int *host, char *err, size_t errlen) {
    return cu_env_switch("TIERKV_CUDA_ROUTE", "device", "host", host, err, errlen);
}

/* ---- route ---- */

/* Block t (one warp): token t's logits [X] -> sel[t*k..], w[t*k..]. p: X floats of shared memory. */
__global__ void route_kernel(const float *logits, int X, int k, int32_t *sel, float *w) {
    extern __shared__ float p[];
    __shared__ float inv_s;
    __shared__ float wk[RT_MAX];
    __shared__ unsigned char taken[RT_MAX];
    const int t = blockIdx.x, lane = threadIdx.x;
    const float *lg = logits + (int64_t)t * X;
    float mx = lg[0];
    for (int e = lane; e < X; e += 32) mx = lg[e] > mx ? lg[e] : mx;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = v > mx ? v : mx;
    }
    for (int e = lane; e < X; e += 32) p[e] = expf(__fsub_rn(lg[e], mx)), taken[e] = 0;
    __syncthreads();
    if (lane == 0) {
        double sum = 0;
        for (int e = 0; e < X; e++) sum = __dadd_rn(sum, (double)p[e]);
        inv_s = (float)(1.0 / sum);
    }
    __syncthreads();
    const float inv = inv_s;
    for (int e = lane; e < X; e += 32) p[e] = __fmul_rn(p[e], inv);
    __syncthreads();
    /* the j-th: the largest p not yet taken, the lower index among equal ones; some expert even where
     * the logits held a NaN (moe_route's first one not taken, then any larger) */
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f;
        for (int e = lane; e < X; e += 32)
            if (!taken[e] && (best < 0 || p[e] > bv)) best = e, bv = p[e];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const int ob = __shfl_xor_sync(0xffffffffu, best, o);
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) best = ob, bv = ov;
        }
        if (lane == 0) {
            sel[(int64_t)t * k + j] = best;
            wk[j] = bv;
            taken[best] = 1;
        }
        __syncthreads();
    }
    if (lane == 0) {
        double ws = 0;
        for (int j = 0; j < k; j++) ws = __dadd_rn(ws, (double)wk[j]);
        const float wsf = (float)ws;
        for (int j = 0; j < k; j++) w[(int64_t)t * k + j] = __fdiv_rn(wk[j], wsf);
    }
}

void cu_route(be_backend *b, const float *logits, int n, int n_expert, int k, int32_t *sel, float *w) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(n_expert >= 1 && n_expert <= RT_MAX && k >= 1 && k <= n_expert, "route: 1..1024 experts, k of them");
    if (n <= 0) return;
    route_kernel<<<n, 32, (size_t)n_expert * sizeof(float), B->compute>>>(logits, n_expert, k, sel, w);
    CU_LAUNCHED();
}

/* ---- the experts' tables ---- */

/* the device array of the n prepared matrices at m (made on a first call, before any step) */
static const cw_mat *etab_of(cu_backend *B, const be_mat *m, int n) {
    const void *first = m[0].data, *last = m[n - 1].data;
    for (int c = 0; c < B->etab_n; c++) { /* from the hint on: the layers come in order */
        cu_etab *e = &B->etab[(B->etab_hint + c) % B->etab_n];
        if (e->key == m && e->n == n && e->first == first && e->last == last) {
            B->etab_hint = (int)(e - B->etab + 1) % B->etab_n;
            return e->dev;
        }
    }
    cu_graph_break(B); /* a pageable upload: never inside a capture */
    cw_mat *host = (cw_mat *)malloc((size_t)n * sizeof *host);
    CU_REQUIRE(host, "out of host memory");
    for (int i = 0; i < n; i++) {
        const cw_mat *w = cu_mat_of(&m[i]);
        CU_REQUIRE(w->type == cu_mat_of(&m[0])->type && w->n_in == m[0].n_in && w->n_out == m[0].n_out,
                   "matmul_sel: experts of one type and shape");
        host[i] = *w;
    }
    cw_mat *dev = NULL;
    CUDA_CHECK(cudaMalloc((void **)&dev, (size_t)n * sizeof *dev));
    cu_own(B, dev); /* freed at close with the weights */
    CUDA_CHECK(cudaMemcpyAsync(dev, host, (size_t)n * sizeof *dev, cudaMemcpyHostToDevice, B->compute));
    CUDA_CHECK(cudaStreamSynchronize(B->compute)); /* host is freed below */
    free(host);
    if (B->etab_n == B->etab_cap) {
        int cap = B->etab_cap ? 2 * B->etab_cap : 64;
        cu_etab *g = (cu_etab *)realloc(B->etab, (size_t)cap * sizeof *g);
        CU_REQUIRE(g, "out of host memory");
        B->etab = g, B->etab_cap = cap;
    }
    B->etab[B->etab_n++] = cu_etab{m, first, last, n, dev};
    return dev;
}

void cu_etab_close(cu_backend *B) {
    free(B->etab); /* (the device arrays are owned: cu_own) */
    B->etab = NULL, B->etab_n = B->etab_cap = 0;
}

/* ---- the pairs grouped by expert ---- */

/* One block: the pairs' counts by expert, each expert's first place in order[] and first tile (in
 * expert order, by one thread: X <= 1024), the tiles (expert, first place, pairs; -1 past the last
 * one used), then each pair's place. The order within an expert is the atomics' (any order gives
 * each row the same sums). Shared memory: 3 X + 1 ints. */
__global__ void group_kernel(const int32_t *sel, int n, int X, int n_tiles, int32_t *order, int32_t *tile_e,
                             int32_t *tile_p0, int32_t *tile_n) {
    extern __shared__ int gs[];
    int *cnt = gs, *place = gs + X, *first = gs + 2 * X; /* first: X + 1 */
    const int tid = threadIdx.x, nth = blockDim.x;
    for (int e = tid; e < X; e += nth) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < n; p += nth) atomicAdd(&cnt[sel[p]], 1);
    __syncthreads();
    if (tid == 0) {
        int at = 0, tile = 0;
        for (int e = 0; e < X; e++) {
            place[e] = at, first[e] = tile;
            at += cnt[e], tile += (cnt[e] + MM_NT - 1) / MM_NT;
        }
        first[X] = tile;
    }
    __syncthreads();
    for (int e = tid; e < X; e += nth)
        for (int i = 0; i * MM_NT < cnt[e]; i++) {
            const int t = first[e] + i, left = cnt[e] - i * MM_NT;
            tile_e[t] = e, tile_p0[t] = place[e] + i * MM_NT, tile_n[t] = left < MM_NT ? left : MM_NT;
        }
    for (int t = first[X] + tid; t < n_tiles; t += nth) tile_e[t] = -1;
    __syncthreads(); /* place[] is read above and taken below */
    for (int p = tid; p < n; p += nth) order[atomicAdd(&place[sel[p]], 1)] = p;
}

/* the grouping's device buffer (order, then the tiles' experts, first places and counts), made with
 * the first table: for SEL_MAX_PAIRS pairs of RT_MAX experts */
static int32_t *plan_of(cu_backend *B) {
    if (!B->sel_plan) {
        cu_graph_break(B);
        const size_t ints = SEL_MAX_PAIRS + 3 * (size_t)SEL_TILE_CAP;
        CUDA_CHECK(cudaMalloc((void **)&B->sel_plan, ints * sizeof(int32_t)));
        cu_own(B, B->sel_plan);
    }
    return B->sel_plan;
}

/* s's tiles for n pairs of X experts (sel on the device): the grid's rows become tiles */
static void group_pairs(cu_backend *B, mm_sel &s, const int32_t *sel, int n, int X) {
    CU_REQUIRE(B->sel_plan, "matmul_sel: grouping before the experts' tables were prepared (a call with no pair)");
    const int n_tiles = SEL_TILES(n, X);
    int32_t *order = B->sel_plan, *te = order + SEL_MAX_PAIRS, *tp = te + SEL_TILE_CAP, *tn = tp + SEL_TILE_CAP;
    group_kernel<<<1, 256, (size_t)(3 * X + 1) * sizeof(int), B->compute>>>(sel, n, X, n_tiles, order, te, tp, tn);
    CU_LAUNCHED();
    s.order = order, s.tile_e = te, s.tile_p0 = tp, s.tile_n = tn;
    s.n_pairs = n_tiles;
}

/* ---- matmul_sel ---- */

void cu_matmul_sel(be_backend *b, const be_mm_out *outs, int n_outs, int n_expert, int64_t n_in, const float *x,
                   int x_div, const int32_t *sel, int n_pairs, void *scratch) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    CU_REQUIRE(n_outs >= 1 && n_outs <= BE_MM_MAX_OUTS && n_expert >= 1 && n_expert <= RT_MAX && x_div >= 1 &&
                   n_pairs >= 0 && n_pairs <= SEL_MAX_PAIRS,
               "matmul_sel: 1..BE_MM_MAX_OUTS outputs, 1..1024 experts, x_div >= 1, 0..65535 pairs");
    mm_args a;
    mm_sel s;
    memset(&a, 0, sizeof a);
    memset(&s, 0, sizeof s);
    for (int i = 0; i < n_outs; i++) {
        CU_REQUIRE(!outs[i].bias, "matmul_sel: no bias");
        s.etab[i] = etab_of(B, outs[i].w, n_expert);
        a.o[i].w = *cu_mat_of(outs[i].w);
        a.o[i].y = outs[i].y;
        a.o[i].y_stride = outs[i].y_stride;
        CU_REQUIRE(a.o[i].w.type == a.o[0].w.type && a.o[i].w.n_in == n_in,
                   "matmul_sel: outputs of one type reading rows of n_in");
    }
    if (!n_pairs) {
        plan_of(B);
        return;
    }
    CU_REQUIRE(((uintptr_t)x & 15) == 0, "matmul_sel: x must be 16-byte aligned");
    a.n_o = n_outs;
    a.x = x;
    a.n_in = n_in;
    a.nt = 1;
    s.sel = sel;
    s.x_div = x_div;
    s.n_pairs = n_pairs;
    if (n_pairs > MM_NT && n_pairs >= SEL_GROUP_PER_EXPERT * n_expert) { /* tiles of one expert's pairs */
        group_pairs(B, s, sel, n_pairs, n_expert);
        a.nt = MM_NT;
    }
    const uint32_t t = a.o[0].w.type;
    if (scratch && cu_mmq_type(t)) { /* x's rows rounded once for every pair */
        const int8_t *qx;
        const float *dx;
        cu_mmq_quantize(B, x, n_in, (n_pairs - 1) / x_div + 1, scratch, &qx, &dx);
        cu_mmq_launch(B, a, qx, dx, &s);
    } else {
        cu_mm_dispatch(B, t, a, &s);
    }
}
