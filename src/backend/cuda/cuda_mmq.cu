/* cuda_mmq.cu — matrix products with integer dot products: the activation is rounded once per call
 * to Q8_0 blocks (32 values, an f16-rounded scale; FORMATS.md 2.7, the same rounding as the CPU
 * backend's quantize_act) and each Q8_0 weight row is multiplied with __dp4a, four int8 products
 * per instruction, as llama.cpp's CPU and CUDA backends do for this type.
 *
 * Why: converting every weight byte to f32 (the float kernel of cuda_matmul.cu) costs one
 * conversion and one multiply-add per weight, which on an H200 held Q8_0 at about half the
 * bandwidth of BF16; with integers a weight costs a quarter of a dp4a and the activation read per
 * weight byte falls from 4 bytes of f32 to 1. Numerics: per block d_w * d_x * Σ q_w q_x, the block's
 * integer sum exact (the two lanes of a block add their halves as integers), so the results are the
 * CPU backend's up to the order of the f32 sums over blocks.
 * Layout: lane l of a warp reads 16-byte units l, l + 32, ... of its rows (the two lanes of a
 * 32-block are neighbours, a warp's load is 512 contiguous bytes of a row) and the same units of
 * the rounded activation through L1; the even lane of each pair accumulates. A warp owns R rows;
 * every lane runs the same number of steps (the pair's shuffle needs the whole warp). Sums in a
 * fixed order: the same inputs give the same bits on every call. */
#include <cuda_fp16.h>

#include "backend/cuda/cuda_mm.h"

bool cu_mmq_type(uint32_t t) { return t == CW_T_Q8_0 || cw_has_iunit(t); }

static size_t qx_bytes(int64_t n_in, int64_t n_tok) { return ((size_t)(n_in * n_tok) + 255) & ~(size_t)255; }

size_t cu_mmq_scratch(int64_t n_in, int64_t n_tok) {
    return qx_bytes(n_in, n_tok) + (size_t)(n_in / 32 * n_tok) * sizeof(float);
}

/* one warp per block of 32 values: amax, d = amax / 127, id = 127 / amax, q = rne(x * id) */
__global__ void q8_quant_kernel(const float *__restrict__ x, int8_t *__restrict__ qx, float *__restrict__ dx,
                                int64_t n_blocks) {
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (blk >= n_blocks) return; /* the whole warp */
    const float v = x[blk * 32 + lane];
    const float amax = cu_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    qx[blk * 32 + lane] = (int8_t)__float2int_rn(v * id);
    if (lane == 0) dx[blk] = __half2float(__float2half_rn(d));
}

void cu_mmq_quantize(cu_backend *B, const float *x, int64_t n_in, int64_t n_tok, void *scratch, const int8_t **qx,
                     const float **dx) {
    CU_REQUIRE(n_in % 32 == 0, "mmq: rows of a multiple of 32 values");
    CU_REQUIRE(((uintptr_t)scratch & 255) == 0, "mmq: scratch must be 256-byte aligned");
    int8_t *q = (int8_t *)scratch;
    float *d = (float *)((uint8_t *)scratch + qx_bytes(n_in, n_tok));
    const int64_t n_blocks = n_in / 32 * n_tok;
    if (n_blocks > 0) {
        q8_quant_kernel<<<(unsigned)((n_blocks + 7) / 8), 256, 0, B->compute>>>(x, q, d, n_blocks);
        CU_LAUNCHED();
    }
    *qx = q, *dx = d;
}

/* The block's part of a launch: its output (w, y, its stride and bias), its R rows (past the matrix:
 * the last row, computed and not stored) and each token's rounded x; the sums start at 0. The
 * kernels return first where the block is idle (mm_idle). */
template <int NT, int R, int SEL>
struct mmq_part {
    cw_mat w;
    float *y;
    int64_t y_stride, row0, row[R];
    const float *bias;
    const int8_t *xr[NT];
    const float *xs[NT];
    float acc[R][NT];
    __device__ __forceinline__ mmq_part(const mm_args &a, const mm_sel &s, int tile_nt, const int8_t *qx,
                                        const float *dx) {
        int block0;
        mm_pick_out<SEL>(a, s, w, y, y_stride, block0, bias);
        row0 = ((int64_t)((int)blockIdx.x - block0) * MM_WARPS + (threadIdx.x >> 5)) * R;
#pragma unroll
        for (int r = 0; r < R; r++) row[r] = row0 + r < w.n_out ? row0 + r : w.n_out - 1;
        const int64_t x0 = mm_x_row<SEL>(s);
        const int nt = mm_nt<SEL>(a, tile_nt);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            int64_t tt;
            if constexpr (SEL == MM_TILE) tt = mm_tile_pair(s, t < nt ? t : nt - 1) / s.x_div;
            else tt = x0 + (t < a.nt ? t : a.nt - 1);
            xr[t] = qx + tt * a.n_in, xs[t] = dx + tt * (a.n_in / 32);
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    }
    /* each row's sum over the warp, stored by lane 0 (with its bias) for the block's nt tokens */
    __device__ __forceinline__ void store(const mm_sel &s, int nt) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float v = cu_warp_sum(acc[r][t]);
                if ((threadIdx.x & 31) == 0 && t < nt && row0 + r < w.n_out) {
                    int64_t yr = t;
                    if constexpr (SEL == MM_TILE) yr = mm_tile_pair(s, t);
                    y[yr * y_stride + row0 + r] = mm_biased(v, bias, row0 + r);
                }
            }
    }
};

/* one 16-byte unit u of R rows against NT tokens; CHECK: u may lie past the row (the last step) */
template <int NT, int R, bool CHECK>
__device__ __forceinline__ void mmq8_unit(float (&acc)[R][NT], const cw_mat &w, const int64_t (&row)[R],
                                          const int8_t *const (&xr)[NT], const float *const (&xs)[NT], int64_t u,
                                          int64_t n_u, int lane) {
    const bool in = !CHECK || u < n_u;
    int4 xq[NT];
    float xd[NT];
    cw_u4 q[R];
    float d[R];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        xq[t] = make_int4(0, 0, 0, 0), xd[t] = 0.0f;
        if (in) xq[t] = __ldg((const int4 *)xr[t] + u), xd[t] = __ldg(xs[t] + (u >> 1));
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        q[r] = cw_u4{0, 0, 0, 0}, d[r] = 0.0f;
        if (in) q[r] = cw_ld16(w.a + row[r] * w.sa + 16 * u), d[r] = cw_ldf(w.b + row[r] * w.sb + 4 * (u >> 1));
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            int s = __dp4a((int)q[r].x, xq[t].x, 0);
            s = __dp4a((int)q[r].y, xq[t].y, s);
            s = __dp4a((int)q[r].z, xq[t].z, s);
            s = __dp4a((int)q[r].w, xq[t].w, s);
            s += __shfl_xor_sync(0xffffffffu, s, 1); /* the block's other half */
            if (!(lane & 1)) acc[r][t] += (d[r] * xd[t]) * (float)s;
        }
}

/* Rows past the matrix and token slots past the block's tokens read the last row or token (no
 * branch in the loop) and are not stored. */
template <int NT, int R, int SEL>
__global__ void __launch_bounds__(MM_WARPS * 32)
    mmq8_kernel(const mm_args a, const int8_t *__restrict__ qx, const float *__restrict__ dx, const mm_sel es) {
    if (mm_idle<SEL>(es)) return; /* the whole block */
    const int tile_nt = mm_tile_nt<SEL>(es);
    mmq_part<NT, R, SEL> p(a, es, tile_nt, qx, dx);
    const int lane = threadIdx.x & 31;
    const int64_t n_u = a.n_in / 16;

    int64_t u0 = 0;
#pragma unroll 4
    for (; u0 + 32 <= n_u; u0 += 32) mmq8_unit<NT, R, false>(p.acc, p.w, p.row, p.xr, p.xs, u0 + lane, n_u, lane);
    if (u0 < n_u) mmq8_unit<NT, R, true>(p.acc, p.w, p.row, p.xr, p.xs, u0 + lane, n_u, lane);
    p.store(es, mm_nt<SEL>(a, tile_nt));
}

/* ---- Q4_0, Q5_0, Q4_K, Q6_K: the integer decoders of cuda_wlayout.h ----
 * Lane l takes whole units l, l + 32, ... (16 bytes of quants, 32 elements; no pairing of lanes):
 * per span of SL elements, si = sum q_w q_x by dp4a, and the span adds d_x * (sc * si - off * sum
 * q_x), i.e. d_x * sum (sc q_w - off) q_x: the exactly dequantised weights against the rounded x. */
template <int T>
__device__ __forceinline__ void mmq_iunit(const cw_mat &w, int64_t row, int64_t u, uint32_t *q, float *sc, float *off) {
    if constexpr (T == CW_T_Q4_0) cw_iunit_q4_0(&w, row, u, q, sc, off);
    else if constexpr (T == CW_T_Q5_0) cw_iunit_q5_0(&w, row, u, q, sc, off);
    else if constexpr (T == CW_T_Q4_K) cw_iunit_q4_k(&w, row, u, q, sc, off);
    else cw_iunit_q6_k(&w, row, u, q, sc, off);
}

template <int T, int NT, int R, int SEL>
__global__ void __launch_bounds__(MM_WARPS * 32)
    mmqk_kernel(const mm_args a, const int8_t *__restrict__ qx, const float *__restrict__ dx, const mm_sel es) {
    constexpr int U = mm_unit<T>(), NS = mm_nspan<T>(), SW = U / NS / 4; /* words of a span */
    constexpr bool OFF = T == CW_T_Q4_K;                                  /* the only type with mins */
    static_assert(SW == 2 || SW == 4, "spans of 8 or 16 elements");
    if (mm_idle<SEL>(es)) return; /* the whole block */
    const int tile_nt = mm_tile_nt<SEL>(es);
    mmq_part<NT, R, SEL> p(a, es, tile_nt, qx, dx);
    const int64_t n_u = a.n_in / U;

#pragma unroll 1
    for (int64_t u = threadIdx.x & 31; u < n_u; u += 32) {
        uint32_t q[R][U / 4];
        float sc[R][NS], off[R][NS];
#pragma unroll
        for (int r = 0; r < R; r++) mmq_iunit<T>(p.w, p.row[r], u, q[r], sc[r], off[r]);
#pragma unroll
        for (int s = 0; s < NS; s++) {
            const int64_t base = cw_span_base(T, u, s);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                uint32_t xw[SW];
                if constexpr (SW == 4) {
                    const int4 v = __ldg((const int4 *)(p.xr[t] + base));
                    xw[0] = (uint32_t)v.x, xw[1] = (uint32_t)v.y, xw[2] = (uint32_t)v.z, xw[3] = (uint32_t)v.w;
                } else {
                    const int2 v = __ldg((const int2 *)(p.xr[t] + base));
                    xw[0] = (uint32_t)v.x, xw[1] = (uint32_t)v.y;
                }
                const float xd = __ldg(p.xs[t] + (base >> 5));
                int xsum = 0;
                if constexpr (OFF)
#pragma unroll
                    for (int i = 0; i < SW; i++) xsum = __dp4a((int)xw[i], 0x01010101, xsum);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    int si = 0;
#pragma unroll
                    for (int i = 0; i < SW; i++) si = __dp4a((int)q[r][s * SW + i], (int)xw[i], si);
                    float v = sc[r][s] * (float)si;
                    if constexpr (OFF) v -= off[r][s] * (float)xsum;
                    p.acc[r][t] += xd * v;
                }
            }
        }
    }
    p.store(es, mm_nt<SEL>(a, tile_nt));
}

template <int T, int NT, int R>
static void mmq_go(cu_backend *B, mm_args &a, const int8_t *qx, const float *dx, const mm_sel *s) {
    const int blocks = mm_blocks(a, MM_WARPS * R);
    if constexpr (NT == 1 || NT == MM_NT)
        if (s) { /* matmul_sel: a grid row a pair (one token), or a tile (MM_NT) */
            constexpr int SEL = NT == 1 ? MM_PAIR : MM_TILE;
            const dim3 g = mm_grid(*s, blocks);
            if constexpr (T == CW_T_Q8_0) mmq8_kernel<NT, R, SEL><<<g, MM_WARPS * 32, 0, B->compute>>>(a, qx, dx, *s);
            else mmqk_kernel<T, NT, R, SEL><<<g, MM_WARPS * 32, 0, B->compute>>>(a, qx, dx, *s);
            CU_LAUNCHED();
            return;
        }
    const mm_sel none = {};
    if constexpr (T == CW_T_Q8_0)
        mmq8_kernel<NT, R, MM_PLAIN><<<blocks, MM_WARPS * 32, 0, B->compute>>>(a, qx, dx, none);
    else mmqk_kernel<T, NT, R, MM_PLAIN><<<blocks, MM_WARPS * 32, 0, B->compute>>>(a, qx, dx, none);
    CU_LAUNCHED();
}

/* one row per warp for one token (more warps in flight; TIERKV_CUDA_GEMV's ",2" asks for two), two
 * for several tokens (each weight unit read once for all of them) */
template <int T>
static void mmq_type(cu_backend *B, mm_args &a, const int8_t *qx, const float *dx, const mm_sel *s) {
    if (a.nt == 1) {
        if (B->gemv_rows == 2) mmq_go<T, 1, 2>(B, a, qx, dx, s);
        else mmq_go<T, 1, 1>(B, a, qx, dx, s);
    } else if (a.nt <= 2) mmq_go<T, 2, 2>(B, a, qx, dx, NULL);
    else if (a.nt <= 4) mmq_go<T, 4, 2>(B, a, qx, dx, NULL);
    else mmq_go<T, 8, 2>(B, a, qx, dx, s); /* (s: MM_TILE's, a.nt MM_NT) */
}

void cu_mmq_launch(cu_backend *B, mm_args &a, const int8_t *qx, const float *dx, const mm_sel *s) {
    CU_REQUIRE(a.nt >= 1 && a.nt <= MM_NT && (!s || a.nt == (s->order ? MM_NT : 1)),
               "mmq: 1..MM_NT tokens per launch, one a pair or tiles of MM_NT");
    switch (a.o[0].w.type) { /* one type a launch */
    case CW_T_Q8_0: mmq_type<CW_T_Q8_0>(B, a, qx, dx, s); break;
    case CW_T_Q4_0: mmq_type<CW_T_Q4_0>(B, a, qx, dx, s); break;
    case CW_T_Q5_0: mmq_type<CW_T_Q5_0>(B, a, qx, dx, s); break;
    case CW_T_Q4_K: mmq_type<CW_T_Q4_K>(B, a, qx, dx, s); break;
    case CW_T_Q6_K: mmq_type<CW_T_Q6_K>(B, a, qx, dx, s); break;
    default: CU_REQUIRE(0, "mmq: a type without integer products");
    }
}
