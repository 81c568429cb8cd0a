/* cuda_attn.cu — attention over slot tables on the GPU, its split form and the merge.
 *
 * Work split (flash-decoding): positions 0..n_pos-1 of each query row are cut into fixed chunks of
 * AT_CH positions; one block per (chunk, kv head, pass of up to AT_G of its query heads, row)
 * computes, for those heads, the scores of its positions, their chunk max m_c and the weights
 * e^(s - m_c) with their sum l_c, and the unnormalised V sum o_c. A second kernel merges the
 * chunks of each (row, head) in chunk order; a third writes the masses. The chunking depends on
 * positions only and every sum runs in a fixed order, so the same K/V values give the same bits
 * whichever tier (T0 device, T1 pinned read in place, STAGE) holds them: tiering through the lossless
 * tiers never changes the result.
 *
 * Reads: a block first resolves its chunk's slot references (keep mask, tier filter, chunk table)
 * into record addresses in shared memory, so the row loads that follow depend on nothing else;
 * then one warp per position loads the kv head's K row (hd values; 256 contiguous bytes for hd = 128
 * in f16), four positions in flight per warp, and, if any weight is nonzero, its V row, each once
 * for all query heads of the group (GQA). The 8 heads' dot products are summed over the warp by
 * one reduce-scatter (9 shuffles instead of 40). Masked, evicted and out-of-tier positions are never
 * read. Records of any pool format are widened in registers (F32, F16 exact; Q8_HEAD int8 * scale as
 * src/codec's q8h). The merge gives each warp every 8th chunk, the rows of several chunks in flight.
 * Bound: KV bytes of the attended positions from HBM (PCIe for pinned tiers). Measured on an H200
 * (7B shape, f16, one query; docs/CUDA.md): 24 us per layer at 2048 positions, 28.5 at 8192, 127 at
 * 32768 (0.5 TB/s there: still latency-bound).
 *
 * Split: a->tiers restricts the positions to slots of those tiers; with a->part the merged chunk
 * results are written unnormalised (o, m, l) instead of o. attention_merge combines parts by
 * log-sum-exp. Error of split against full: both are exact rearrangements of one softmax; in f32
 * each weight picks up at most a few ulp (the extra e^(m_k - M) factor and the s - m roundings:
 * relative <= (|s - m_k| + |m_k - M|) * 2^-24 + 3 ulp of expf), and the sums run in another order
 * (<= n * 2^-24 relative to sum |w v|); measured against full in tests/test_cuda.c (bound 1e-5). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_internal.h"

#define AT_CH 64     /* positions per chunk: 2048 positions fill 32 chunks per kv head */
#define AT_WARPS 4
#define AT_G 8       /* query heads per block */
#define AT_CB 256    /* threads of a combine block */
#define AT_SEG 1024  /* chunk factors a combine block holds in shared memory at a time */

struct at_args {
    int n_tok, n_head, n_head_kv, hd, layer, group, hpass, n_chunk;
    float scale;
    unsigned tiers;   /* bit per pool; all bits when the caller gave 0 */
    const float *q;
    const cu_tok_info *tok;
    const int32_t *slots;
    const uint8_t *keep;
    cu_pools_view pv;
    float *po, *pm, *pl; /* per (row, head, chunk): unnormalised o [hd], max, sum */
    float *eb;           /* per (row, head, position): e^(s - m_c), or NULL */
    int eb_stride;
};

__device__ __forceinline__ float at_neg_inf() { return __int_as_float(0xff800000); }

/* EPL elements at e0 of part `part` (0 K, 1 V) of a record, widened to f32 */
template <int EPL>
__device__ __forceinline__ void at_load(const uint8_t *rec, int fmt, int kv_dim, int nkv, int hd, int part, int e0,
                                        float *out) {
    if (fmt == BE_KV_F16) {
        const __half *p = (const __half *)rec + part * kv_dim + e0;
        if constexpr (EPL == 8) {
            uint4 u = *(const uint4 *)p;
            const __half *h = (const __half *)&u;
#pragma unroll
            for (int k = 0; k < 8; k++) out[k] = __half2float(h[k]);
        } else if constexpr (EPL == 4) {
            uint2 u = *(const uint2 *)p;
            const __half *h = (const __half *)&u;
#pragma unroll
            for (int k = 0; k < 4; k++) out[k] = __half2float(h[k]);
        } else {
#pragma unroll
            for (int k = 0; k < EPL; k++) out[k] = __half2float(p[k]);
        }
    } else if (fmt == BE_KV_F32) {
        const float *p = (const float *)rec + part * kv_dim + e0;
        if constexpr (EPL % 4 == 0) {
#pragma unroll
            for (int k = 0; k < EPL; k += 4) {
                float4 f = *(const float4 *)(p + k);
                out[k] = f.x, out[k + 1] = f.y, out[k + 2] = f.z, out[k + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int k = 0; k < EPL; k++) out[k] = p[k];
        }
    } else {
        const int8_t *p = (const int8_t *)rec + part * kv_dim + e0;
        float s = ((const float *)(rec + 2 * kv_dim))[part * nkv + e0 / hd];
#pragma unroll
        for (int k = 0; k < EPL; k++) out[k] = __fmul_rn((float)p[k], s);
    }
}

/* Is position j read by kv head g of row ti? Returns its slot reference or BE_SLOT_NONE. */
__device__ __forceinline__ int32_t at_ref(const at_args &a, const cu_tok_info &ti, int g, int j) {
    int32_t r = a.slots[ti.slot_off + j];
    if (r == BE_SLOT_NONE) return BE_SLOT_NONE;
    if (!((a.tiers >> BE_SLOT_TIER(r)) & 1u)) return BE_SLOT_NONE;
    if (ti.keep_off >= 0 && !a.keep[ti.keep_off + g * ti.keep_stride + j]) return BE_SLOT_NONE;
    return r;
}

/* the pool view of a tier, by constant indices (a run-time index into the kernel's parameters would
 * copy them to local memory) */
__device__ __forceinline__ cu_pool_view at_pool(const at_args &a, int tier) {
    switch (tier) {
    case 0: return a.pv.p[0];
    case 1: return a.pv.p[1];
    case 2: return a.pv.p[2];
    default: return a.pv.p[3];
    }
}

/* positions whose rows a warp has in flight at once (their record addresses come from shared memory,
 * so the loads are independent) */
template <int EPL>
__host__ __device__ constexpr int at_flight() { return EPL >= 8 ? 2 : 4; }

/* The sums over the warp of p[0..AT_G-1], by a reduce-scatter (9 shuffles where 8 butterflies take
 * 40): the sum of head h lands in lanes 4h..4h+3. The order of the additions is fixed. */
__device__ __forceinline__ float at_reduce8(const float (&p)[AT_G], int lane) {
    static_assert(AT_G == 8, "at_reduce8 splits 8 heads over the lanes");
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float a4[4], a2[2];
#pragma unroll
    for (int i = 0; i < 4; i++) a4[i] = (b4 ? p[i + 4] : p[i]) + __shfl_xor_sync(0xffffffffu, b4 ? p[i] : p[i + 4], 16);
#pragma unroll
    for (int i = 0; i < 2; i++) a2[i] = (b3 ? a4[i + 2] : a4[i]) + __shfl_xor_sync(0xffffffffu, b3 ? a4[i] : a4[i + 2], 8);
    float s = (b2 ? a2[1] : a2[0]) + __shfl_xor_sync(0xffffffffu, b2 ? a2[0] : a2[1], 4);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    return s + __shfl_xor_sync(0xffffffffu, s, 1);
}

template <int EPL>
__global__ void __launch_bounds__(AT_WARPS * 32) at_chunk_kernel(const at_args a) {
    constexpr int PF = at_flight<EPL>();
    const int c = blockIdx.x, t = blockIdx.z, g = blockIdx.y / a.hpass;
    const int h0 = g * a.group + (blockIdx.y % a.hpass) * AT_G;
    const int nh = min(AT_G, (g + 1) * a.group - h0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kv_dim = a.n_head_kv * a.hd;
    const cu_tok_info ti = a.tok[t];
    const int j0 = c * AT_CH, j1 = min(j0 + AT_CH, ti.n_pos);
    const int64_t ph0 = ((int64_t)t * a.n_head + h0) * a.n_chunk + c; /* (row, head h0, chunk c) */
    if (j0 >= j1) { /* beyond this row's positions */
        for (int h = warp; h < nh; h += AT_WARPS) {
            for (int d = lane; d < a.hd; d += 32) a.po[(ph0 + (int64_t)h * a.n_chunk) * a.hd + d] = 0.0f;
            if (lane == 0) a.pm[ph0 + (int64_t)h * a.n_chunk] = at_neg_inf(), a.pl[ph0 + (int64_t)h * a.n_chunk] = 0.0f;
        }
        return;
    }
    __shared__ const uint8_t *rp[AT_CH]; /* each position's record, NULL when it is not read */
    __shared__ int rf[AT_CH];            /* its pool's format */
    __shared__ float w[AT_G][AT_CH];     /* scores, then weights */
    __shared__ float red[AT_G][256];     /* the V sums of the warps, added in warp order */
    const int len = j1 - j0;

    /* the chunk's slot references resolved once, by all threads: the loads below depend on nothing else */
    for (int i = threadIdx.x; i < len; i += AT_WARPS * 32) {
        int32_t r = at_ref(a, ti, g, j0 + i);
        const uint8_t *rec = NULL;
        int fmt = 0;
        if (r != BE_SLOT_NONE) {
            const cu_pool_view pv = at_pool(a, BE_SLOT_TIER(r));
            rec = cu_rec(pv, r, a.layer);
            fmt = pv.fmt;
        }
        rp[i] = rec;
        rf[i] = fmt;
    }
    float qv[AT_G][EPL];
#pragma unroll
    for (int h = 0; h < AT_G; h++)
#pragma unroll
        for (int k = 0; k < EPL; k++)
            qv[h][k] = h < nh ? a.q[((int64_t)t * a.n_head + h0 + h) * a.hd + lane * EPL + k] : 0.0f;
    __syncthreads();

    /* scores: a warp per position, PF positions in flight, a lane per EPL elements of the head */
    for (int i0 = warp * PF; i0 < len; i0 += AT_WARPS * PF) {
        float kk[PF][EPL];
#pragma unroll
        for (int p = 0; p < PF; p++) {
            const uint8_t *rec = i0 + p < len ? rp[i0 + p] : NULL;
            if (rec) at_load<EPL>(rec, rf[i0 + p], kv_dim, a.n_head_kv, a.hd, 0, g * a.hd + lane * EPL, kk[p]);
            else
#pragma unroll
                for (int k = 0; k < EPL; k++) kk[p][k] = 0.0f;
        }
#pragma unroll
        for (int p = 0; p < PF; p++) {
            float part[AT_G];
#pragma unroll
            for (int h = 0; h < AT_G; h++) {
                part[h] = 0.0f;
#pragma unroll
                for (int k = 0; k < EPL; k++) part[h] += qv[h][k] * kk[p][k];
            }
            const float s = at_reduce8(part, lane);
            const int i = i0 + p, h = lane >> 2;
            if ((lane & 3) == 0 && h < nh && i < len) w[h][i] = rp[i] ? s * a.scale : at_neg_inf();
        }
    }
    __syncthreads();
    /* per head: chunk max, weights, their sum */
    for (int h = warp; h < nh; h += AT_WARPS) {
        float m = at_neg_inf();
        for (int i = lane; i < len; i += 32) m = fmaxf(m, w[h][i]);
        m = cu_warp_max(m);
        float l = 0.0f;
        for (int i = lane; i < len; i += 32) {
            float e = w[h][i] == at_neg_inf() ? 0.0f : expf(w[h][i] - m);
            w[h][i] = e;
            l += e;
        }
        l = cu_warp_sum(l);
        if (lane == 0) {
            a.pm[ph0 + (int64_t)h * a.n_chunk] = m;
            a.pl[ph0 + (int64_t)h * a.n_chunk] = l;
        }
        if (a.eb) {
            float *e = a.eb + ((int64_t)t * a.n_head + h0 + h) * a.eb_stride;
            for (int i = lane; i < len; i += 32) e[j0 + i] = w[h][i];
        }
    }
    __syncthreads();
    /* weighted V sum: each warp over its positions (PF in flight), then the warps' sums in warp order */
    float acc[AT_G][EPL];
#pragma unroll
    for (int h = 0; h < AT_G; h++)
#pragma unroll
        for (int k = 0; k < EPL; k++) acc[h][k] = 0.0f;
    for (int i0 = warp * PF; i0 < len; i0 += AT_WARPS * PF) {
        float vv[PF][EPL];
        bool use[PF];
#pragma unroll
        for (int p = 0; p < PF; p++) {
            const int i = i0 + p;
            use[p] = false;
            if (i < len && rp[i])
#pragma unroll
                for (int h = 0; h < AT_G; h++) use[p] |= h < nh && w[h][i] != 0.0f;
            if (use[p]) at_load<EPL>(rp[i], rf[i], kv_dim, a.n_head_kv, a.hd, 1, g * a.hd + lane * EPL, vv[p]);
        }
#pragma unroll
        for (int p = 0; p < PF; p++) {
            if (!use[p]) continue;
#pragma unroll
            for (int h = 0; h < AT_G; h++) {
                float e = h < nh ? w[h][i0 + p] : 0.0f;
#pragma unroll
                for (int k = 0; k < EPL; k++) acc[h][k] += e * vv[p][k];
            }
        }
    }
    for (int ww = 0; ww < AT_WARPS; ww++) {
        if (warp == ww)
#pragma unroll
            for (int h = 0; h < AT_G; h++)
#pragma unroll
                for (int k = 0; k < EPL; k++) {
                    float *dst = &red[h][lane * EPL + k];
                    *dst = ww == 0 ? acc[h][k] : *dst + acc[h][k];
                }
        __syncthreads();
    }
    for (int h = warp; h < nh; h += AT_WARPS)
        for (int d = lane; d < a.hd; d += 32) a.po[(ph0 + (int64_t)h * a.n_chunk) * a.hd + d] = red[h][d];
}

/* a block's max or sum of v, the warps' results taken in warp order (the same bits on every call) */
__device__ __forceinline__ float at_block_reduce(float v, float *sh, bool is_max) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    v = is_max ? cu_warp_max(v) : cu_warp_sum(v);
    __syncthreads(); /* sh is free */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = sh[0];
    for (int k = 1; k < nw; k++) r = is_max ? fmaxf(r, sh[k]) : r + sh[k];
    return r;
}

/* EPL consecutive floats (16-byte aligned for EPL >= 4) */
template <int EPL>
__device__ __forceinline__ void at_ldf(const float *p, float *v) {
    if constexpr (EPL % 4 == 0) {
#pragma unroll
        for (int k = 0; k < EPL; k += 4) {
            float4 x = *(const float4 *)(p + k);
            v[k] = x.x, v[k + 1] = x.y, v[k + 2] = x.z, v[k + 3] = x.w;
        }
    } else if constexpr (EPL == 2) {
        float2 x = *(const float2 *)p;
        v[0] = x.x, v[1] = x.y;
    } else {
        v[0] = p[0];
    }
}

/* Merges the chunks of one (row, head): M the chunks' max; each chunk's factor e^(m_c - M) held in
 * shared memory AT_SEG chunks at a time; L the sum of factor x l_c; o the sum of factor x o_c, each
 * warp over every AT_CB/32-th chunk (a lane per EPL elements, several chunks' rows in flight), the
 * warps' sums then added in warp order. fc receives each chunk's factor for the masses: e^(m_c - M) / L
 * (or e^(m_c - M) for a part). A chunk without a read position has o_c = 0 and factor 0. */
template <int EPL>
__global__ void __launch_bounds__(AT_CB) at_combine_kernel(const at_args a, float *o, float *part_o, float *part_m,
                                                           float *part_l, float *fc) {
    constexpr int NW = AT_CB / 32;
    const int h = blockIdx.x, t = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const cu_tok_info ti = a.tok[t];
    const int nc = (ti.n_pos + AT_CH - 1) / AT_CH;
    const int64_t base = ((int64_t)t * a.n_head + h) * a.n_chunk;
    __shared__ float f[AT_SEG];
    __shared__ float sh[NW];
    __shared__ float red[NW][256];
    float M = at_neg_inf();
    for (int c = threadIdx.x; c < nc; c += AT_CB) M = fmaxf(M, a.pm[base + c]);
    M = at_block_reduce(M, sh, true);
    float lp = 0.0f, s[EPL];
#pragma unroll
    for (int k = 0; k < EPL; k++) s[k] = 0.0f;
    for (int c0 = 0; c0 < nc; c0 += AT_SEG) {
        const int n = min(AT_SEG, nc - c0);
        __syncthreads(); /* the previous segment's factors are no longer read */
        for (int c = threadIdx.x; c < n; c += AT_CB) {
            float m = a.pm[base + c0 + c];
            float e = m == at_neg_inf() ? 0.0f : expf(m - M);
            f[c] = e;
            lp += e * a.pl[base + c0 + c];
        }
        __syncthreads();
        const float *po = a.po + (base + c0) * a.hd + lane * EPL;
#pragma unroll 8
        for (int c = warp; c < n; c += NW) {
            float v[EPL];
            at_ldf<EPL>(po + (int64_t)c * a.hd, v);
            const float e = f[c];
#pragma unroll
            for (int k = 0; k < EPL; k++) s[k] += e * v[k];
        }
    }
    const float L = at_block_reduce(lp, sh, false);
#pragma unroll
    for (int k = 0; k < EPL; k++) red[warp][lane * EPL + k] = s[k];
    __syncthreads();
    for (int d = threadIdx.x; d < a.hd; d += AT_CB) {
        float sum = red[0][d];
        for (int w = 1; w < NW; w++) sum += red[w][d];
        int64_t od = ((int64_t)t * a.n_head + h) * a.hd + d;
        if (part_o) part_o[od] = sum;
        else o[od] = L > 0.0f ? sum / L : 0.0f;
    }
    if (threadIdx.x == 0 && part_o) {
        part_m[(int64_t)t * a.n_head + h] = M;
        part_l[(int64_t)t * a.n_head + h] = L;
    }
    if (fc)
        for (int c = threadIdx.x; c < nc; c += AT_CB) {
            float e = a.pm[base + c] == at_neg_inf() ? 0.0f : expf(a.pm[base + c] - M);
            fc[base + c] = part_o ? e : (L > 0.0f ? e / L : 0.0f);
        }
}

/* masses of positions j < n_pos: per head, or summed over heads in head order */
__global__ void at_mass_kernel(const at_args a, const float *fc, float *mass, int mass_heads, int mass_stride) {
    const int t = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const cu_tok_info ti = a.tok[t];
    if (j >= ti.n_pos) return;
    const int c = j / AT_CH;
    float sum = 0.0f;
    for (int h = 0; h < a.n_head; h++) {
        float v = a.eb[((int64_t)t * a.n_head + h) * a.eb_stride + j] * fc[((int64_t)t * a.n_head + h) * a.n_chunk + c];
        if (mass_heads > 1) mass[((int64_t)t * mass_heads + h) * mass_stride + j] = v;
        else sum += v;
    }
    if (mass_heads == 1) mass[(int64_t)t * mass_stride + j] = sum;
}

/* ---- scratch layout: the tables image, then the partials, factors and weights ---- */

struct at_layout {
    size_t tables, po, pm, pl, fc, eb, total;
    int n_chunk;
};

static size_t up256(size_t x) { return (x + 255) & ~(size_t)255; }

static at_layout at_layout_of(int n_tok, int max_pos, int n_head, int hd) {
    at_layout L;
    size_t nt = (size_t)(n_tok > 0 ? n_tok : 1), mp = (size_t)(max_pos > 0 ? max_pos : 1);
    L.n_chunk = (int)((mp + AT_CH - 1) / AT_CH);
    size_t rows = nt * (size_t)n_head * (size_t)L.n_chunk;
    L.tables = 0;
    L.po = up256(cu_tables_bound((int)nt, (int)mp, n_head));
    L.pm = L.po + up256(rows * (size_t)hd * 4);
    L.pl = L.pm + up256(rows * 4);
    L.fc = L.pl + up256(rows * 4);
    L.eb = L.fc + up256(rows * 4);
    L.total = L.eb + up256(nt * (size_t)n_head * mp * 4);
    return L;
}

size_t cu_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim) {
    (void)b;
    return at_layout_of(n_tok, max_pos, n_head, head_dim).total;
}

static void grow_tables_ws(cu_backend *B, int n_tok, int n_pieces) {
    if (n_tok > B->tok_cap) {
        int cap = n_tok > 2 * B->tok_cap ? n_tok : 2 * B->tok_cap;
        free(B->tok), free(B->uptr), free(B->ulen), free(B->uoff);
        B->tok = (cu_tok_info *)malloc((size_t)cap * sizeof(cu_tok_info));
        B->uptr = (const void **)malloc((size_t)cap * sizeof(void *));
        B->ulen = (int *)malloc((size_t)cap * sizeof(int));
        B->uoff = (int *)malloc((size_t)cap * sizeof(int));
        CU_REQUIRE(B->tok && B->uptr && B->ulen && B->uoff, "out of host memory");
        B->tok_cap = cap;
    }
    if (n_pieces > B->piece_cap) {
        free(B->pieces);
        B->pieces = (cu_piece *)malloc((size_t)n_pieces * sizeof(cu_piece));
        CU_REQUIRE(B->pieces, "out of host memory");
        B->piece_cap = n_pieces;
    }
}

/* the tables image into the scratch (skipped when tables_gen says the device copy is current) */
static void at_upload_tables(cu_backend *B, const be_attn *a, uint8_t *scratch, cu_tables_plan *plan) {
    int max_pieces = 1 + a->n_tok * (1 + a->n_head_kv);
    grow_tables_ws(B, a->n_tok, max_pieces);
    cu_tables_ws ws = {B->uptr, B->ulen, B->uoff};
    cu_plan_tables(a->n_tok, a->slots, a->n_pos, a->keep, a->keep_stride, a->n_head_kv, B->tok, B->pieces, ws, plan);
    if (a->tables_gen && a->tables_gen == B->tables_gen && scratch == B->tables_scratch && plan->bytes == B->tables_bytes)
        return;
    for (int i = 0; i < plan->n_pieces; i++)
        cu_ring_upload(&B->arg, scratch + plan->tok_off + B->pieces[i].dst, B->pieces[i].src, B->pieces[i].bytes);
    B->tables_gen = a->tables_gen;
    B->tables_scratch = scratch;
    B->tables_bytes = plan->bytes;
}

/* Whether the call reads a STAGE slot (among the tiers it reads): the tables walked once per
 * tables_gen of a KV module (every layer of a step has the same tables) */
static bool at_reads_stage(cu_backend *B, const be_attn *a, unsigned tiers) {
    if (!((tiers >> BE_STAGE) & 1u)) return false;
    if (a->tables_gen && a->tables_gen == B->stage_gen && a->pools == B->stage_pools) return B->stage_read;
    bool any = false;
    for (int t = 0; t < a->n_tok && !any; t++)
        for (int j = 0; j < a->n_pos[t] && !any; j++) {
            const int32_t r = a->slots[t][j];
            any = r != BE_SLOT_NONE && BE_SLOT_TIER(r) == BE_STAGE;
        }
    B->stage_gen = a->tables_gen, B->stage_pools = a->pools, B->stage_read = any;
    return any;
}

void cu_attention(be_backend *b, const be_attn *a, void *scratch) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (a->n_tok <= 0) return;
    const int hd = a->head_dim;
    CU_REQUIRE(hd == 32 || hd == 64 || hd == 128 || hd == 256, "attention: head_dim must be 32, 64, 128 or 256");
    CU_REQUIRE(a->n_head % a->n_head_kv == 0, "attention: n_head must be a multiple of n_head_kv");
    int max_pos = 1;
    for (int t = 0; t < a->n_tok; t++) max_pos = a->n_pos[t] > max_pos ? a->n_pos[t] : max_pos;
    at_layout L = at_layout_of(a->n_tok, max_pos, a->n_head, hd);
    uint8_t *S = (uint8_t *)scratch;
    cu_tables_plan plan;
    at_upload_tables(B, a, S, &plan);

    at_args x;
    memset(&x, 0, sizeof x);
    x.n_tok = a->n_tok, x.n_head = a->n_head, x.n_head_kv = a->n_head_kv, x.hd = hd, x.layer = a->layer;
    x.group = a->n_head / a->n_head_kv;
    x.hpass = (x.group + AT_G - 1) / AT_G;
    x.n_chunk = L.n_chunk;
    x.scale = a->scale;
    x.tiers = a->tiers ? a->tiers : 0xfu;
    for (int i = 0; i < BE_N_POOLS; i++) { /* the tiers read: in memory the GPU reads, in a format at_load reads */
        const be_kv_pool *q = &a->pools->pool[i];
        if (!((x.tiers >> i) & 1u) || q->n_chunks == 0) continue;
        CU_REQUIRE(q->mem != BE_MEM_HOST, "attention: a tier in pageable host memory (T2 of a KV module that keeps it "
                   "in BE_MEM_HOST): read it through STAGE (--staged) or leave it out with tiers (split)");
        CU_REQUIRE(q->fmt == BE_KV_F16 || q->fmt == BE_KV_F32 || q->fmt == BE_KV_Q8_HEAD,
                   "attention: a tier whose record format the kernels cannot read (kv_fmts allows F32, F16, Q8_HEAD)");
    }
    x.q = a->q;
    x.tok = (const cu_tok_info *)(S + plan.tok_off);
    x.slots = (const int32_t *)(S + plan.slots_off);
    x.keep = S + plan.keep_off;
    cu_pools_sync(B, a->pools, &x.pv);
    x.po = (float *)(S + L.po), x.pm = (float *)(S + L.pm), x.pl = (float *)(S + L.pl);
    float *mass = a->part ? a->part->mass : a->mass;
    const int want_mass = a->mass_mode != BE_MASS_NONE && mass;
    x.eb = want_mass ? (float *)(S + L.eb) : NULL;
    x.eb_stride = max_pos;

    dim3 grid((unsigned)L.n_chunk, (unsigned)(a->n_head_kv * x.hpass), (unsigned)a->n_tok);
    switch (hd / 32) {
    case 1: at_chunk_kernel<1><<<grid, AT_WARPS * 32, 0, B->compute>>>(x); break;
    case 2: at_chunk_kernel<2><<<grid, AT_WARPS * 32, 0, B->compute>>>(x); break;
    case 4: at_chunk_kernel<4><<<grid, AT_WARPS * 32, 0, B->compute>>>(x); break;
    default: at_chunk_kernel<8><<<grid, AT_WARPS * 32, 0, B->compute>>>(x); break;
    }
    CU_LAUNCHED();
    float *fc = want_mass ? (float *)(S + L.fc) : NULL;
    dim3 cg((unsigned)a->n_head, (unsigned)a->n_tok);
    float *po = a->part ? a->part->o : NULL, *pm = a->part ? a->part->m : NULL, *pl = a->part ? a->part->l : NULL;
    float *o = a->part ? NULL : a->o;
    switch (hd / 32) {
    case 1: at_combine_kernel<1><<<cg, AT_CB, 0, B->compute>>>(x, o, po, pm, pl, fc); break;
    case 2: at_combine_kernel<2><<<cg, AT_CB, 0, B->compute>>>(x, o, po, pm, pl, fc); break;
    case 4: at_combine_kernel<4><<<cg, AT_CB, 0, B->compute>>>(x, o, po, pm, pl, fc); break;
    default: at_combine_kernel<8><<<cg, AT_CB, 0, B->compute>>>(x, o, po, pm, pl, fc); break;
    }
    CU_LAUNCHED();
    if (want_mass) {
        int mh = a->mass_mode == BE_MASS_HEADS ? a->n_head : 1;
        dim3 mg((unsigned)((max_pos + 255) / 256), (unsigned)a->n_tok);
        at_mass_kernel<<<mg, 256, 0, B->compute>>>(x, fc, mass, mh, a->mass_stride);
        CU_LAUNCHED();
    }
    /* the STAGE layer this call read may be overwritten by the next staging copy only after this;
     * while a graph is captured, a call that read no STAGE row has nothing to order (the event's last
     * record stays the last reader's) and the capture goes on */
    const be_kv_pool *st = &a->pools->pool[BE_STAGE];
    if (st->n_chunks > 0 && st->layers >= 1 && st->layers <= CU_MAX_STAGE_LAYERS &&
        (!B->graph.capturing || at_reads_stage(B, a, x.tiers))) {
        cu_graph_break(B); /* the copy stream waits on this event: recorded outside any capture */
        CUDA_CHECK(cudaEventRecord(B->stage_ev[a->layer % st->layers], B->compute));
    }
}

/* ---- merge ---- */

struct mg_args {
    be_attn_part p[CU_MAX_PARTS];
    int n_parts, n_tok, n_head, hd, mass_heads, mass_stride;
    const int *n_pos; /* device, or NULL when no part has masses */
};

__global__ void at_merge_kernel(const mg_args a, float *o) {
    const int h = blockIdx.x, t = blockIdx.y;
    const int64_t th = (int64_t)t * a.n_head + h;
    float M = at_neg_inf(), f[CU_MAX_PARTS];
#pragma unroll
    for (int k = 0; k < CU_MAX_PARTS; k++)
        if (k < a.n_parts) M = fmaxf(M, a.p[k].m[th]);
    float L = 0.0f;
#pragma unroll
    for (int k = 0; k < CU_MAX_PARTS; k++) {
        f[k] = (k < a.n_parts && a.p[k].m[th] != at_neg_inf()) ? expf(a.p[k].m[th] - M) : 0.0f;
        if (k < a.n_parts) L += f[k] * a.p[k].l[th];
    }
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < CU_MAX_PARTS; k++)
            if (f[k] != 0.0f) s += f[k] * a.p[k].o[th * a.hd + d];
        o[th * a.hd + d] = L > 0.0f ? s / L : 0.0f;
    }
    if (!a.n_pos || a.mass_heads <= 0) return; /* no masses asked for */
    if (a.mass_heads > 1) { /* exact: each head's weights rescaled by its own factor */
#pragma unroll
        for (int k = 0; k < CU_MAX_PARTS; k++) {
            if (k >= a.n_parts || !a.p[k].mass) continue;
            float c = L > 0.0f ? f[k] / L : 0.0f;
            float *m = a.p[k].mass + th * a.mass_stride;
            for (int j = threadIdx.x; j < a.n_pos[t]; j += blockDim.x) m[j] *= c;
        }
    } else if (h == 0) {
        /* summed masses: a part's sum over heads cannot be rescaled per head after the fact; the mean
         * of the heads' factors is used (exact when they agree). docs/CUDA.md: ask for
         * BE_MASS_HEADS in split mode when the scores must equal full attention's. */
#pragma unroll
        for (int k = 0; k < CU_MAX_PARTS; k++) {
            if (k >= a.n_parts || !a.p[k].mass) continue;
            float c = 0.0f;
            for (int hh = 0; hh < a.n_head; hh++) {
                int64_t q = (int64_t)t * a.n_head + hh;
                float Mh = at_neg_inf(), Lh = 0.0f;
#pragma unroll
                for (int kk = 0; kk < CU_MAX_PARTS; kk++)
                    if (kk < a.n_parts) Mh = fmaxf(Mh, a.p[kk].m[q]);
#pragma unroll
                for (int kk = 0; kk < CU_MAX_PARTS; kk++)
                    if (kk < a.n_parts && a.p[kk].m[q] != at_neg_inf()) Lh += expf(a.p[kk].m[q] - Mh) * a.p[kk].l[q];
                if (Lh > 0.0f && a.p[k].m[q] != at_neg_inf()) c += expf(a.p[k].m[q] - Mh) / Lh;
            }
            c /= (float)a.n_head;
            float *m = a.p[k].mass + (int64_t)t * a.mass_stride;
            for (int j = threadIdx.x; j < a.n_pos[t]; j += blockDim.x) m[j] *= c;
        }
    }
}

void cu_attention_merge(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                        int head_dim, int mass_heads, int mass_stride, const int *n_pos) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n_tok <= 0) return;
    CU_REQUIRE(n_parts >= 1 && n_parts <= CU_MAX_PARTS, "attention_merge: 1..CU_MAX_PARTS parts");
    mg_args a;
    memset(&a, 0, sizeof a);
    int any_mass = 0;
    for (int k = 0; k < n_parts; k++) {
        a.p[k] = parts[k];
        cu_require_device_readable(parts[k].o, "attention_merge: a part's o");
        cu_require_device_readable(parts[k].m, "attention_merge: a part's m");
        cu_require_device_readable(parts[k].l, "attention_merge: a part's l");
        if (parts[k].mass) cu_require_device_readable(parts[k].mass, "attention_merge: a part's mass"), any_mass = 1;
    }
    a.n_parts = n_parts, a.n_tok = n_tok, a.n_head = n_head, a.hd = head_dim;
    a.mass_heads = mass_heads, a.mass_stride = mass_stride;
    a.n_pos = any_mass && n_pos && mass_heads > 0 ? (const int *)cu_ring_put(&B->arg, n_pos, (size_t)n_tok * sizeof(int)) : NULL;
    dim3 grid((unsigned)n_head, (unsigned)n_tok);
    at_merge_kernel<<<grid, 128, 0, B->compute>>>(a, o);
    CU_LAUNCHED();
}
