/* cuda_mm.h — internal to cuda_matmul.cu and cuda_mmq.cu: one launch's description of a matrix
 * product (up to BE_MM_MAX_OUTS outputs of one weight type reading one activation), and the integer
 * products of cuda_mmq.cu that cu_matmul hands a launch to. CUDA C++. */
#ifndef TKV_CUDA_MM_H
#define TKV_CUDA_MM_H
#include "backend/cuda/cuda_internal.h"

#define MM_WARPS 4 /* warps per block */
#define MM_NT 8    /* tokens per launch at most */

struct mm_out {
    cw_mat w;
    float *y;
    int64_t y_stride;
    const float *bias; /* [n_out] added to each row's sum, or NULL */
    int block0; /* first block of this output */
};
struct mm_args {
    mm_out o[BE_MM_MAX_OUTS];
    int n_o;
    const float *x; /* [nt][n_in] */
    int64_t n_in;
    int nt;         /* tokens of this launch, <= MM_NT */
    int kt;         /* x tile, a multiple of 256 (the float kernels) */
};
/* The experts of matmul_sel, a second kernel parameter (matmul's kernels take an unused one, so
 * mm_args and their code stay as they were). Pair p's output i reads matrix etab[i][sel[p]] and x row
 * p / x_div and writes y row p; mm_args' o[i].w is the array's first matrix (the shape all share).
 * Two ways to lay the pairs on the grid (the kernels' template parameter SEL, below):
 * MM_PAIR: grid row blockIdx.y is pair blockIdx.y (nt 1);
 * MM_TILE: grid row blockIdx.y is tile blockIdx.y of the pairs grouped by expert (cuda_moe.cu's
 * group_kernel): up to MM_NT pairs of one expert, tile_e[y] (-1: an unused tile, the block exits),
 * whose pairs are order[tile_p0[y]..] (tile_n[y] of them), so each weight unit is read once for all of
 * them. A pair's sums are the same either way (a lane's units and their order do not depend on the
 * tokens of the block). */
#define MM_PLAIN 0 /* matmul's kernels */
#define MM_PAIR 1
#define MM_TILE 2
struct mm_sel {
    const cw_mat *etab[BE_MM_MAX_OUTS];
    const int32_t *sel;
    int x_div;
    int n_pairs; /* grid rows (MM_TILE: tiles) */
    const int32_t *order, *tile_e, *tile_p0, *tile_n; /* MM_TILE's grouping */
};

/* a prepared matrix's device description (prepare_weight made it) */
static inline const cw_mat *cu_mat_of(const be_mat *w) {
    CU_REQUIRE(w->type & CW_TYPE_TAG, "a matrix reached the CUDA backend without prepare_weight");
    return (const cw_mat *)w->data;
}
/* the type of a matrix, prepared or not (forward sizes its scratch either way) */
static inline uint32_t cu_type_of(const be_mat *w) { return (w->type & CW_TYPE_TAG) ? cu_mat_of(w)->type : w->type; }

/* each output's first block (block0) when a block holds rows_per_block rows; the launch's blocks */
static inline int mm_blocks(mm_args &a, int rows_per_block) {
    int blocks = 0;
    for (int i = 0; i < a.n_o; i++) {
        a.o[i].block0 = blocks;
        blocks += (int)((a.o[i].w.n_out + rows_per_block - 1) / rows_per_block);
    }
    return blocks;
}

#ifdef __CUDACC__
/* unit u of a prepared row decoded to f32 (cuda_wlayout.h), and the units' geometry */
template <int T>
__device__ __forceinline__ void mm_decode(const cw_mat &w, int64_t row, int64_t u, float *v) {
    if constexpr (T == CW_T_F32) cw_unit_f32(&w, row, u, v);
    else if constexpr (T == CW_T_F16) cw_unit_16(&w, row, u, v, 0);
    else if constexpr (T == CW_T_BF16) cw_unit_16(&w, row, u, v, 1);
    else if constexpr (T == CW_T_Q8_0) cw_unit_q8_0(&w, row, u, v);
    else if constexpr (T == CW_T_Q4_0) cw_unit_q4_0(&w, row, u, v);
    else if constexpr (T == CW_T_Q5_0) cw_unit_q5_0(&w, row, u, v);
    else if constexpr (T == CW_T_Q4_K) cw_unit_q4_k(&w, row, u, v);
    else cw_unit_q6_k(&w, row, u, v);
}

template <int T>
__host__ __device__ constexpr int mm_unit() {
    return T == CW_T_F32 ? 4 : (T == CW_T_F16 || T == CW_T_BF16) ? 8 : T == CW_T_Q8_0 ? 16 : 32;
}
template <int T>
__host__ __device__ constexpr int mm_nspan() {
    return T == CW_T_Q6_K ? 4 : (T == CW_T_Q4_0 || T == CW_T_Q5_0 || T == CW_T_Q4_K) ? 2 : 1;
}
/* The output a block works on, selected with constant indices into the kernel's parameters (a
 * run-time index, or a copy of a whole mm_out, would put them in local memory). SEL: MM_PLAIN for
 * matmul's kernels (their code as before matmul_sel: a template parameter, so they carry none of it),
 * else the pairs' layout, each block reading the matrix of its pair's or tile's expert (s). */
template <int SEL>
__device__ __forceinline__ void mm_pick_out(const mm_args &a, const mm_sel &s, cw_mat &w, float *&y, int64_t &y_stride,
                                            int &block0, const float *&bias) {
    w = a.o[0].w, y = a.o[0].y, y_stride = a.o[0].y_stride, block0 = 0, bias = a.o[0].bias;
    const cw_mat *tab = s.etab[0];
#pragma unroll
    for (int i = 1; i < BE_MM_MAX_OUTS; i++)
        if (i < a.n_o && (int)blockIdx.x >= a.o[i].block0) {
            w = a.o[i].w, y = a.o[i].y, y_stride = a.o[i].y_stride, block0 = a.o[i].block0, bias = a.o[i].bias;
            if constexpr (SEL != MM_PLAIN) tab = s.etab[i];
        }
    if constexpr (SEL == MM_PAIR) { /* pair blockIdx.y's expert */
        w = tab[s.sel[blockIdx.y]];
        y += (int64_t)blockIdx.y * y_stride;
    } else if constexpr (SEL == MM_TILE) {
        w = tab[s.tile_e[blockIdx.y]];
    }
}
/* MM_TILE: whether the block's tile is unused (the grid holds as many as the pairs could need) */
template <int SEL>
__device__ __forceinline__ bool mm_idle(const mm_sel &s) {
    if constexpr (SEL == MM_TILE) return s.tile_e[blockIdx.y] < 0;
    else return false;
}
/* MM_TILE: the block's tile's pairs, read once a block (0 for the other layouts: unused) */
template <int SEL>
__device__ __forceinline__ int mm_tile_nt(const mm_sel &s) {
    if constexpr (SEL == MM_TILE) return s.tile_n[blockIdx.y];
    else return 0;
}
/* the block's tokens: the launch's, or its tile's pairs (tile_nt, mm_tile_nt's) */
template <int SEL>
__device__ __forceinline__ int mm_nt(const mm_args &a, int tile_nt) {
    if constexpr (SEL == MM_TILE) return tile_nt;
    else return a.nt;
}
/* the first x row a block reads: its pair's (MM_PAIR), else the launch's first */
template <int SEL>
__device__ __forceinline__ int64_t mm_x_row(const mm_sel &s) {
    if constexpr (SEL == MM_PAIR) return (int64_t)(blockIdx.y / s.x_div);
    else return 0;
}
/* MM_TILE: the pair of the tile's token t (the y row it writes; x row pair / x_div) */
__device__ __forceinline__ int64_t mm_tile_pair(const mm_sel &s, int t) {
    return s.order[s.tile_p0[blockIdx.y] + t];
}
/* matmul_sel's grid: the outputs' blocks by the pairs (MM_PAIR) or by the tiles (MM_TILE) */
static inline dim3 mm_grid(const mm_sel &s, int blocks) { return dim3((unsigned)blocks, (unsigned)s.n_pairs); }
/* a row's sum as stored: plus its bias where there is one (one f32 add: add_bias's bits) */
__device__ __forceinline__ float mm_biased(float s, const float *bias, int64_t row) {
    return bias ? __fadd_rn(s, bias[row]) : s;
}
#endif

/* cuda_mmq.cu: Q8_0 weights against the activation rounded to Q8_0 blocks (FORMATS.md 2.7) */
bool cu_mmq_type(uint32_t t);                          /* a type the integer products run */
size_t cu_mmq_scratch(int64_t n_in, int64_t n_tok);    /* bytes of the rounded activation */
/* x [n_tok][n_in] rounded into scratch (compute stream); *qx, *dx: its quants and f32 scales */
void cu_mmq_quantize(cu_backend *B, const float *x, int64_t n_in, int64_t n_tok, void *scratch, const int8_t **qx,
                     const float **dx);
/* one launch of a's outputs (all of one cu_mmq_type); qx, dx the launch's first token's rows; s:
 * matmul_sel's experts (one token a pair, or tiles where s->order is set), or NULL */
void cu_mmq_launch(cu_backend *B, mm_args &a, const int8_t *qx, const float *dx, const mm_sel *s);
/* cuda_matmul.cu: one launch of a's outputs (all of type t) by the float kernels; s as above */
void cu_mm_dispatch(cu_backend *B, uint32_t t, mm_args &a, const mm_sel *s);
#endif
