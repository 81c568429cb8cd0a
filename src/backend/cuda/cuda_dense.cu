/* cuda_dense.cu — the element-wise and row-wise ops over activations in device memory: rmsnorm,
 * add_bias, add, add_rmsnorm (add then rmsnorm in one launch, the same bits as the two), rope,
 * swiglu, gather_rows, combine_rows (an expert FFN's weighted sums), expand_cols (split's host
 * weights spread out), and the KV policy's score update (score_add). Each is one small kernel on the
 * compute stream, bound by launch latency at decode sizes (a few KB per row); host arrays (positions,
 * row indices, column counts, score pointers) reach the device through the argument ring.
 * Numerics, against the CPU forward: rmsnorm sums squares in double (in a fixed tree order instead
 * of left to right), then mean in f32 and 1.0f / sqrtf(mean + eps), both correctly rounded here as
 * on the CPU; rope takes theta_0 = pos, theta_{i+1} = theta_i * s (s = powf(base, -2/hd) computed
 * on the host with the CPU's powf) and angle = theta_i * scale, the same f32 products, but CUDA's
 * sinf/cosf (2 ulp) for the host libm's; swiglu uses CUDA's expf (2 ulp). */
#include <math.h>

#include "backend/cuda/cuda_internal.h"

#define DN_THREADS 256

/* the scale 1 / sqrt(mean(x^2) + eps) of a row from each thread's double sum of squares: the warps'
 * butterflies, then the warps' sums in warp order (a fixed tree: the same bits on every call) */
__device__ __forceinline__ float rms_scale(double ss, int n, float eps) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double part[DN_THREADS / 32];
    __shared__ float scale_s;
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int k = 0; k < DN_THREADS / 32; k++) s += part[k];
        float mean = (float)(s / n);
        scale_s = 1.0f / sqrtf(mean + eps);
    }
    __syncthreads();
    return scale_s;
}

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int n, float eps) {
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += DN_THREADS) ss += (double)xr[i] * (double)xr[i];
    const float sc = rms_scale(ss, n, eps);
    for (int i = threadIdx.x; i < n; i += DN_THREADS) yr[i] = __fmul_rn(__fmul_rn(xr[i], sc), w[i]);
}

void cu_rmsnorm(be_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (rows <= 0) return;
    rmsnorm_kernel<<<rows, DN_THREADS, 0, B->compute>>>(y, x, w, n, eps);
    CU_LAUNCHED();
}

/* add then rmsnorm in one launch: each thread adds its elements (the f32 sum add_kernel makes) and
 * sums their squares as rmsnorm_kernel does, so x and y get the two kernels' bits */
__global__ void add_rmsnorm_kernel(float *x, const float *d, float *y, const float *w, int n, float eps) {
    float *xr = x + (int64_t)blockIdx.x * n;
    const float *dr = d + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += DN_THREADS) {
        const float v = __fadd_rn(xr[i], dr[i]);
        xr[i] = v;
        ss += (double)v * (double)v;
    }
    const float sc = rms_scale(ss, n, eps);
    for (int i = threadIdx.x; i < n; i += DN_THREADS) yr[i] = __fmul_rn(__fmul_rn(xr[i], sc), w[i]);
}

void cu_add_rmsnorm(be_backend *b, float *x, const float *d, float *y, const float *w, int rows, int n, float eps) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (rows <= 0) return;
    add_rmsnorm_kernel<<<rows, DN_THREADS, 0, B->compute>>>(x, d, y, w, n, eps);
    CU_LAUNCHED();
}

__global__ void add_bias_kernel(float *y, const float *bias, int64_t total, int n) {
    int64_t i = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x;
    if (i < total) y[i] += bias[i % n];
}

void cu_add_bias(be_backend *b, float *y, const float *bias, int rows, int n) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    int64_t total = (int64_t)rows * n;
    if (total <= 0 || !bias) return;
    add_bias_kernel<<<(unsigned)((total + DN_THREADS - 1) / DN_THREADS), DN_THREADS, 0, B->compute>>>(y, bias, total, n);
    CU_LAUNCHED();
}

__global__ void add_kernel(float *y, const float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x;
    if (i < n) y[i] += x[i];
}

void cu_add(be_backend *b, float *y, const float *x, int64_t n) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    add_kernel<<<(unsigned)((n + DN_THREADS - 1) / DN_THREADS), DN_THREADS, 0, B->compute>>>(y, x, n);
    CU_LAUNCHED();
}

/* one thread per (row, head, pair); the angle's running product is replayed per thread so every
 * pair gets the CPU's exact sequence of f32 products */
__global__ void rope_kernel(float *x, int n_rows, int n_heads, int hd, const int *pos, float s, float scale, int neox) {
    const int half = hd / 2;
    int64_t id = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x;
    if (id >= (int64_t)n_rows * n_heads * half) return;
    int i = (int)(id % half);
    int64_t rh = id / half; /* row * n_heads + head */
    int row = (int)(rh / n_heads);
    float theta = (float)pos[row];
    for (int k = 0; k < i; k++) theta = __fmul_rn(theta, s);
    float th = __fmul_rn(theta, scale);
    float si, co;
    sincosf(th, &si, &co);
    float *v = x + rh * hd;
    int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    float x0 = v[ia], x1 = v[ib];
    v[ia] = __fsub_rn(__fmul_rn(x0, co), __fmul_rn(x1, si));
    v[ib] = __fadd_rn(__fmul_rn(x0, si), __fmul_rn(x1, co));
}

void cu_rope(be_backend *b, float *x, int n_rows, int n_heads, int head_dim, const int *pos, float base, float scale,
             int neox) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n_rows <= 0) return;
    float s = powf(base, -2.0f / (float)head_dim);
    const int *pd = cu_kept_put(B, &B->pos, pos, n_rows); /* the same for every layer of a step */
    int64_t n = (int64_t)n_rows * n_heads * (head_dim / 2);
    rope_kernel<<<(unsigned)((n + DN_THREADS - 1) / DN_THREADS), DN_THREADS, 0, B->compute>>>(x, n_rows, n_heads, head_dim,
                                                                                              pd, s, scale, neox);
    CU_LAUNCHED();
}

__global__ void swiglu_kernel(float *g, const float *u, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * DN_THREADS + threadIdx.x;
    if (i >= n) return;
    float z = g[i];
    g[i] = __fmul_rn(__fdiv_rn(z, __fadd_rn(1.0f, expf(-z))), u[i]);
}

void cu_swiglu(be_backend *b, float *gate, const float *up, int64_t n) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    swiglu_kernel<<<(unsigned)((n + DN_THREADS - 1) / DN_THREADS), DN_THREADS, 0, B->compute>>>(gate, up, n);
    CU_LAUNCHED();
}

__global__ void gather_kernel(float *dst, const float *src, const int *rows, int width) {
    const float *s = src + (int64_t)rows[blockIdx.x] * width;
    float *d = dst + (int64_t)blockIdx.x * width;
    for (int i = threadIdx.x; i < width; i += DN_THREADS) d[i] = s[i];
}

void cu_gather_rows(be_backend *b, float *dst, const float *src, const int *rows, int n, int width) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0) return;
    const int *rd = (const int *)cu_ring_put(&B->arg, rows, (size_t)n * sizeof(int));
    gather_kernel<<<n, DN_THREADS, 0, B->compute>>>(dst, src, rd, width);
    CU_LAUNCHED();
}

/* Block t sums token t's k expert rows, left to right, each product rounded before its add (no
 * fused multiply-add): the CPU's bits. rows and w come through the argument ring (combine_rows), or
 * rows is NULL, pair t*k + j's row its own, and w is where route wrote it (combine_pairs). */
__global__ void combine_kernel(float *y, const float *src, const int *rows, const float *w, int k, int width) {
    const int t = blockIdx.x;
    float *yr = y + (int64_t)t * width;
    for (int i = threadIdx.x; i < width; i += DN_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            const int64_t r = rows ? rows[t * k + j] : t * k + j;
            float p = __fmul_rn(src[r * width + i], w[t * k + j]);
            acc = j ? __fadd_rn(acc, p) : p;
        }
        yr[i] = acc;
    }
}

void cu_combine_rows(be_backend *b, float *y, const float *src, const int *rows, const float *w, int n, int k,
                     int width) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0 || k <= 0) return;
    size_t nk = (size_t)n * (size_t)k;
    const int *rd = (const int *)cu_ring_put(&B->arg, rows, nk * sizeof(int));
    const float *wd = (const float *)cu_ring_put(&B->arg, w, nk * sizeof(float));
    combine_kernel<<<n, DN_THREADS, 0, B->compute>>>(y, src, rd, wd, k, width);
    CU_LAUNCHED();
}

void cu_combine_pairs(be_backend *b, float *y, const float *src, const float *w, int n, int k, int width) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n <= 0 || k <= 0) return;
    combine_kernel<<<n, DN_THREADS, 0, B->compute>>>(y, src, (const int *)nullptr, w, k, width);
    CU_LAUNCHED();
}

/* One thread per position; the tokens, then the heads, in order, each product and sum rounded as
 * the host's (no contraction into a fused multiply-add): the host's scores bit for bit. A thread
 * owns its position in every score array, so tokens sharing an array never race. Reads of one head's
 * weights are coalesced across the block. */
__global__ void score_add_kernel(double *const *score, const int *n_pos, int n_tok, const float *mass, int n_head,
                                 int stride, double w) {
    int i = blockIdx.x * DN_THREADS + threadIdx.x;
    for (int t = 0; t < n_tok; t++) {
        double *s = score[t];
        if (!s || i >= n_pos[t]) continue;
        const float *m = mass + (int64_t)t * n_head * stride + i;
        double sc = s[i];
        for (int h = 0; h < n_head; h++) sc = __dadd_rn(sc, __dmul_rn(w, (double)m[(int64_t)h * stride]));
        s[i] = sc;
    }
}

void cu_score_add(be_backend *b, double *const *score, const int *n_pos, int n_tok, const float *mass, int n_head,
                  int stride, double w) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    int top = 0;
    for (int t = 0; t < n_tok; t++)
        if (score[t] && n_pos[t] > top) top = n_pos[t];
    if (top <= 0) return;
    double *const *sd = (double *const *)cu_ring_put(&B->arg, score, (size_t)n_tok * sizeof *score);
    const int *nd = (const int *)cu_ring_put(&B->arg, n_pos, (size_t)n_tok * sizeof *n_pos);
    score_add_kernel<<<(unsigned)((top + DN_THREADS - 1) / DN_THREADS), DN_THREADS, 0, B->compute>>>(sd, nd, n_tok, mass,
                                                                                                   n_head, stride, w);
    CU_LAUNCHED();
}

/* One block per row: the row zeroed, then its columns written (the block's threads see the zeros
 * first: a barrier between). */
__global__ void expand_cols_kernel(float *dst, int dst_stride, const float *src, const int32_t *cols, int src_stride,
                                   const int *n_cols, int rows) {
    const int64_t row = blockIdx.x;
    const int t = (int)(row / rows);
    float *d = dst + row * dst_stride;
    for (int j = threadIdx.x; j < dst_stride; j += DN_THREADS) d[j] = 0.0f;
    __syncthreads();
    const float *s = src + row * src_stride;
    const int32_t *c = cols + (int64_t)t * src_stride;
    for (int k = threadIdx.x; k < n_cols[t]; k += DN_THREADS) d[c[k]] = s[k];
}

void cu_expand_cols(be_backend *b, float *dst, int dst_stride, const float *src, const int32_t *cols, int src_stride,
                    const int *n_cols, int n_tok, int rows) {
    cu_backend *B = cu_of(b);
    cu_bind(B);
    if (n_tok <= 0 || rows <= 0) return;
    const int *nd = (const int *)cu_ring_put(&B->arg, n_cols, (size_t)n_tok * sizeof *n_cols);
    expand_cols_kernel<<<(unsigned)(n_tok * rows), DN_THREADS, 0, B->compute>>>(dst, dst_stride, src, cols, src_stride, nd,
                                                                                 rows);
    CU_LAUNCHED();
}
