/* cuda_gemm.cu — matrix products of many tokens (prompt chunks, many sequences' steps) through
 * cuBLAS, the toolkit's GEMM library, loaded at run time (once a process, at the first backend's
 * open, and kept): where it is missing the kernels of cuda_matmul.cu run and describe() says why, so
 * a machine without it still runs (slower prefill).
 *
 * Why: the GEMV kernels read every weight once per MM_NT (8) tokens; a 2048-token prompt read the
 * 7B's 15 GB of BF16 weights 256 times. A GEMM reads them once per call on the tensor cores.
 *
 * Numerics, per weight type, for a call of at least cu_gemm_from(type) tokens:
 *   F32        f32 x f32 (no TF32), f32 sums;
 *   BF16, F16  the weights as stored, x rounded to the same type (RNE): the CPU backend's pairing
 *              (FORMATS.md 2.7), f32 sums;
 *   quantised  each row dequantised exactly (the CPU's dequantisation, cuda_wlayout.h) and rounded
 *              to f16 into scratch, x rounded to f16, f32 sums. The CPU rounds x to Q8_0/Q8_K
 *              instead: this path differs from it by that rounding, as the float kernels do.
 * f16 x is scaled by a power of two first where its largest magnitude reaches 2^15 (alpha undoes it
 * exactly), so an activation beyond f16's range does not overflow; below that the scale is 1 and
 * changes no bit. Only the order of the f32 sums is cuBLAS's: for a given shape it is the same on
 * every call (its workspace and stream are fixed at open), but a token's result may differ in the
 * last bits from what the one-token kernels give it.
 * Quantised matrices are dequantised in pieces of at most GEMM_DQ_BYTES (whole rows), one GEMM a
 * piece, in the caller's scratch: a step allocates nothing. Invariants: cuda_internal.h. */
#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_mm.h"
extern "C" {
#include "base/err.h"
}

#define GEMM_DQ_BYTES ((size_t)64 << 20) /* the dequantised piece of a quantised matrix */
#define GEMM_WS_BYTES ((size_t)32 << 20) /* cuBLAS's workspace (its guide's size for Hopper) */
#define GEMM_AUTO_16 (MM_NT + 1)         /* tokens from which 16-bit and f32 weights go to cuBLAS */
#define GEMM_AUTO_Q 32                   /* and quantised ones (their dequantisation is paid per call) */
#define GEMM_STR_(x) #x
#define GEMM_STR(x) GEMM_STR_(x)
#define GEMM_LIB "libcublas.so." GEMM_STR(CUBLAS_VER_MAJOR)

/* the 32-bit-int cublasGemmEx (C++ overloads it with the 64-bit one) */
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                     const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                     void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

/* the library's entry points this file calls, resolved by name */
struct blas_syms {
    void *dl;
    char version[32];
    decltype(&cublasGetProperty) get_property;
    decltype(&cublasGetStatusString) status_string;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSetPointerMode_v2) set_pointer_mode;
    gemm_ex_fn gemm_ex;
};

/* a backend's use of it */
struct cu_blas {
    const blas_syms *S; /* the process's loaded library (loaded once, never unloaded) */
    cublasHandle_t h;
    void *ws;           /* device, GEMM_WS_BYTES */
    float *konst;       /* device: {1, 0} (alpha and beta where nothing is scaled) */
};

/* ---- the choice (TIERKV_CUDA_GEMM) ---- */

int cu_gemm_choice(int *from, char *err, size_t errlen) {
    const char *v = getenv("TIERKV_CUDA_GEMM");
    *from = -1;
    if (!v || !*v || !strcmp(v, "auto")) return 0;
    if (!strcmp(v, "off")) return *from = 0, 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end != v && !*end && n >= 2 && n <= 4096) return *from = (int)n, 0;
    return tkv_errf(err, errlen, "TIERKV_CUDA_GEMM='%.40s': expected auto, off, or the tokens (2..4096) from which "
                    "every matmul goes to cuBLAS", v);
}

/* ---- loading ---- */

static int blas_sym(blas_syms *L, void **fn, const char *name, char *err, size_t errlen) {
    *fn = dlsym(L->dl, name);
    return *fn ? 0 : tkv_errf(err, errlen, "cuBLAS: %s has no %s", L->version, name);
}

/* TIERKV_CUBLAS names the library; else the dynamic loader's path, then the toolkit's folders */
static int blas_load(blas_syms *L, char *err, size_t errlen) {
    char tried[256] = "", path[512], last[160] = "";
    const char *only = getenv("TIERKV_CUBLAS"), *home = getenv("CUDA_HOME");
    const char *names[3] = {GEMM_LIB, NULL, "/usr/local/cuda/lib64/" GEMM_LIB};
    if (home && *home) {
        snprintf(path, sizeof path, "%s/lib64/" GEMM_LIB, home);
        names[1] = path;
    }
    if (only && *only) names[0] = only, names[1] = names[2] = NULL;
    for (int i = 0; i < 3 && !L->dl; i++) {
        if (!names[i]) continue;
        L->dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (L->dl) break;
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s", tried[0] ? ", " : "", names[i]);
        const char *why = dlerror();
        snprintf(last, sizeof last, "%s", why ? why : "");
    }
    if (!L->dl)
        return tkv_errf(err, errlen, "cuBLAS not loaded (tried %s; TIERKV_CUBLAS names the library): %s", tried, last);
    snprintf(L->version, sizeof L->version, "libcublas");
    if (blas_sym(L, (void **)&L->get_property, "cublasGetProperty", err, errlen)) return -1;
    int major = 0, minor = 0, patch = 0;
    L->get_property(MAJOR_VERSION, &major), L->get_property(MINOR_VERSION, &minor), L->get_property(PATCH_LEVEL, &patch);
    snprintf(L->version, sizeof L->version, "cuBLAS %d.%d.%d", major, minor, patch);
    if (major != CUBLAS_VER_MAJOR)
        return tkv_errf(err, errlen, "%s loaded; this build was compiled against cuBLAS %d", L->version, CUBLAS_VER_MAJOR);
    if (blas_sym(L, (void **)&L->status_string, "cublasGetStatusString", err, errlen) ||
        blas_sym(L, (void **)&L->create, "cublasCreate_v2", err, errlen) ||
        blas_sym(L, (void **)&L->destroy, "cublasDestroy_v2", err, errlen) ||
        blas_sym(L, (void **)&L->set_stream, "cublasSetStream_v2", err, errlen) ||
        blas_sym(L, (void **)&L->set_workspace, "cublasSetWorkspace_v2", err, errlen) ||
        blas_sym(L, (void **)&L->set_pointer_mode, "cublasSetPointerMode_v2", err, errlen) ||
        blas_sym(L, (void **)&L->gemm_ex, "cublasGemmEx", err, errlen))
        return -1;
    return 0;
}

/* A fresh load (TIERKV_CUBLAS as it is now), unloaded again: what a backend would find. */
extern "C" int cuda_blas_probe(char *msg, size_t n) {
    blas_syms L;
    memset(&L, 0, sizeof L);
    int rc = blas_load(&L, msg, n);
    if (!rc) snprintf(msg, n, "%s", L.version);
    if (L.dl) dlclose(L.dl);
    return rc;
}

/* The library for the process: loaded at the first backend's open (cuBLAS takes a second or two to
 * load; tests open many backends), kept loaded; a failure is remembered with its message. */
static const blas_syms *blas_once(char *err, size_t errlen) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static blas_syms syms;
    static int state; /* 0 not tried, 1 loaded, -1 failed */
    static char why[256];
    pthread_mutex_lock(&lock);
    if (!state) {
        state = blas_load(&syms, why, sizeof why) ? -1 : 1;
        if (state < 0 && syms.dl) dlclose(syms.dl), syms.dl = NULL;
    }
    const int ok = state > 0;
    pthread_mutex_unlock(&lock);
    if (!ok) tkv_errf(err, errlen, "%s", why);
    return ok ? &syms : NULL;
}

#define BLAS_CHECK(L, call)                                                                          \
    do {                                                                                             \
        cublasStatus_t s_ = (call);                                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) cu_fatal(#call, (L)->S->status_string(s_), __FILE__, __LINE__); \
    } while (0)

int cu_gemm_open(cu_backend *B, int from, char *err, size_t errlen) {
    B->gemm_from = from;
    B->blas = NULL;
    if (!from) return snprintf(B->blas_why, sizeof B->blas_why, "off (TIERKV_CUDA_GEMM)"), 0;
    cu_blas *L = (cu_blas *)calloc(1, sizeof *L);
    CU_REQUIRE(L, "out of host memory");
    char why[sizeof B->blas_why - 16];
    int rc = (L->S = blas_once(why, sizeof why)) ? 0 : -1;
    if (!rc) {
        cublasStatus_t s = L->S->create(&L->h);
        if (s != CUBLAS_STATUS_SUCCESS)
            rc = tkv_errf(why, sizeof why, "%s: cublasCreate: %s", L->S->version, L->S->status_string(s));
    }
    if (rc) {
        free(L);
        snprintf(B->blas_why, sizeof B->blas_why, "kernels (%s)", why);
        /* asked for by number: refused rather than quietly slower */
        return from > 0 ? tkv_errf(err, errlen, "TIERKV_CUDA_GEMM=%d: %s", from, why) : 0;
    }
    CUDA_CHECK(cudaMalloc(&L->ws, GEMM_WS_BYTES));
    CUDA_CHECK(cudaMalloc((void **)&L->konst, 2 * sizeof(float)));
    const float k[2] = {1.0f, 0.0f};
    CUDA_CHECK(cudaMemcpyAsync(L->konst, k, sizeof k, cudaMemcpyHostToDevice, B->compute));
    CUDA_CHECK(cudaStreamSynchronize(B->compute)); /* k is on this stack */
    /* the stream first: setting it resets the workspace to the library's own */
    BLAS_CHECK(L, L->S->set_stream(L->h, B->compute));
    BLAS_CHECK(L, L->S->set_workspace(L->h, L->ws, GEMM_WS_BYTES));
    BLAS_CHECK(L, L->S->set_pointer_mode(L->h, CUBLAS_POINTER_MODE_DEVICE));
    B->blas = L;
    if (from > 0) snprintf(B->blas_why, sizeof B->blas_why, "%s from %d tokens", L->S->version, from);
    else
        snprintf(B->blas_why, sizeof B->blas_why, "%s from %d tokens (16-bit), %d (quantised)", L->S->version, GEMM_AUTO_16,
                 GEMM_AUTO_Q);
    return 0;
}

void cu_gemm_close(cu_backend *B) {
    cu_blas *L = B->blas;
    if (!L) return;
    L->S->destroy(L->h);
    CUDA_CHECK(cudaFree(L->ws));
    CUDA_CHECK(cudaFree(L->konst));
    free(L);
    B->blas = NULL;
}

/* ---- which calls, and their scratch ---- */

static bool is_16(uint32_t t) { return t == CW_T_F32 || t == CW_T_F16 || t == CW_T_BF16; }

int cu_gemm_from(const cu_backend *B, uint32_t t) {
    if (!B->blas) return 0;
    return B->gemm_from > 0 ? B->gemm_from : is_16(t) ? GEMM_AUTO_16 : GEMM_AUTO_Q;
}

extern "C" int cuda_gemm_from(const be_backend *b, uint32_t type) { return cu_gemm_from(cu_ofc(b), type); }

/* a call goes to cuBLAS when it has as many tokens as every output's type asks for */
static bool gemm_wants(const cu_backend *B, const be_mm_out *outs, int n_outs, int64_t n_tok) {
    if (!B->blas) return false;
    for (int i = 0; i < n_outs; i++)
        if (n_tok < cu_gemm_from(B, cu_type_of(outs[i].w))) return false;
    return true;
}

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

/* rows of a dequantised piece (at most 32768: the dequantisation's grid has a block row a row) */
static int64_t dq_rows(int64_t n_in, int64_t n_out) {
    int64_t r = (int64_t)(GEMM_DQ_BYTES / ((size_t)n_in * 2)) / 128 * 128;
    if (r < 128) r = 128;
    if (r > 32768) r = 32768;
    return r < n_out ? r : n_out;
}

/* Scratch: a header (amax bits, alpha, beta), x rounded to 16 bits, the dequantised piece. */
#define GEMM_HDR 256
size_t cu_gemm_scratch(const cu_backend *B, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok) {
    if (!gemm_wants(B, outs, n_outs, n_tok)) return 0;
    size_t dq = 0;
    for (int i = 0; i < n_outs; i++)
        if (!is_16(cu_type_of(outs[i].w))) {
            size_t b = (size_t)dq_rows(n_in, outs[i].w->n_out) * (size_t)n_in * 2;
            if (b > dq) dq = b;
        }
    return GEMM_HDR + al256((size_t)(n_in * n_tok) * 2) + dq;
}

/* ---- kernels: x to 16 bits, rows to f16 ---- */

/* |x|'s largest value, as the bits of a non-negative float (ordered as unsigned integers) */
__global__ void amax_kernel(const float *__restrict__ x, int64_t n, unsigned *amax) {
    float m = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(x[i]));
    m = cu_warp_max(m);
    if ((threadIdx.x & 31) == 0) atomicMax(amax, __float_as_uint(m));
}

/* the power of two that brings amax below 2^15 (1 when it is there, or not finite) */
__device__ __forceinline__ float f16_scale(unsigned amax_bits) {
    const float a = __uint_as_float(amax_bits);
    if (!(a >= 32768.0f) || isinf(a)) return 1.0f;
    int e;
    frexpf(a, &e); /* a < 2^e */
    return ldexpf(1.0f, 15 - e);
}

/* F16 == 1: x * scale to f16 (alpha = 1 / scale into hdr[1]); else x to bf16 */
template <int F16>
__global__ void x16_kernel(const float *__restrict__ x, int64_t n, void *out, unsigned *hdr) {
    const float s = F16 ? f16_scale(hdr[0]) : 1.0f;
    if (F16 && blockIdx.x == 0 && threadIdx.x == 0) ((float *)hdr)[1] = 1.0f / s, ((float *)hdr)[2] = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (F16) ((__half *)out)[i] = __float2half_rn(x[i] * s);
        else ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
    }
}

/* rows [row0, row0 + blockIdx.y) of w, exactly dequantised, rounded to f16: one thread a unit,
 * written 8 halves (16 bytes) at a time (spans start at multiples of 8 elements, rows at 64 bytes) */
template <int T>
__global__ void dq16_kernel(const cw_mat w, int64_t row0, __half *out) {
    constexpr int U = mm_unit<T>(), NS = mm_nspan<T>(), SL = U / NS;
    static_assert(SL % 8 == 0, "spans of whole 16-byte stores");
    const int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (u >= w.n_in / U) return;
    float v[U];
    mm_decode<T>(w, row0 + r, u, v);
    __half *o = out + r * w.n_in;
#pragma unroll
    for (int s = 0; s < NS; s++) {
        const int64_t base = cw_span_base(T, u, s);
#pragma unroll
        for (int k = 0; k < SL; k += 8) {
            __half2 h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) h[j] = __floats2half2_rn(v[s * SL + k + 2 * j], v[s * SL + k + 2 * j + 1]);
            uint4 q;
            memcpy(&q, h, sizeof q); /* register moves */
            *(uint4 *)(o + base + k) = q;
        }
    }
}

template <int T>
static void dq16_launch(cu_backend *B, const cw_mat &w, int64_t row0, int64_t nr, __half *out) {
    const int64_t units = w.n_in / mm_unit<T>();
    dim3 grid((unsigned)((units + 127) / 128), (unsigned)nr);
    dq16_kernel<T><<<grid, 128, 0, B->compute>>>(w, row0, out);
    CU_LAUNCHED();
}

static void dq16(cu_backend *B, const cw_mat &w, int64_t row0, int64_t nr, __half *out) {
    switch (w.type) {
    case CW_T_Q8_0: dq16_launch<CW_T_Q8_0>(B, w, row0, nr, out); break;
    case CW_T_Q4_0: dq16_launch<CW_T_Q4_0>(B, w, row0, nr, out); break;
    case CW_T_Q5_0: dq16_launch<CW_T_Q5_0>(B, w, row0, nr, out); break;
    case CW_T_Q4_K: dq16_launch<CW_T_Q4_K>(B, w, row0, nr, out); break;
    case CW_T_Q6_K: dq16_launch<CW_T_Q6_K>(B, w, row0, nr, out); break;
    default: CU_REQUIRE(0, "gemm: no dequantisation for this type");
    }
}

/* ---- the call ---- */

enum { X_NONE, X_F16, X_BF16 };

static int grid_of(int64_t n) {
    int64_t g = (n + 255) / 256;
    return (int)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

/* x converted to what the type multiplies with (once a kind per call: the outputs of one type
 * come together); returns alpha and beta's device address */
static const float *x_as(cu_backend *B, int kind, int *have, const float *x, int64_t n, void *x16, unsigned *hdr) {
    if (kind == X_BF16) {
        if (*have != X_BF16) {
            x16_kernel<0><<<grid_of(n), 256, 0, B->compute>>>(x, n, x16, hdr);
            CU_LAUNCHED();
            *have = X_BF16;
        }
        return B->blas->konst;
    }
    if (*have != X_F16) {
        CUDA_CHECK(cudaMemsetAsync(hdr, 0, sizeof(unsigned), B->compute));
        amax_kernel<<<grid_of(n), 256, 0, B->compute>>>(x, n, hdr);
        CU_LAUNCHED();
        x16_kernel<1><<<grid_of(n), 256, 0, B->compute>>>(x, n, x16, hdr);
        CU_LAUNCHED();
        *have = X_F16;
    }
    return (const float *)hdr + 1;
}

/* y[t][r0 + i] = sum_k A[i][k] X[t][k] for i < m: column-major, C (m x n_tok) = op(A)^T X */
static void gemm(cu_backend *B, int64_t m, int64_t n_tok, int64_t n_in, const float *ab, const void *a, cudaDataType at,
                 int64_t lda, const void *x, cudaDataType xt, float *y, int64_t ldy) {
    cu_blas *L = B->blas;
    /* beta lies on the device, so cuBLAS cannot know at launch that it is 0 and skip reading C:
     * C is zeroed first, so whatever bytes y held (a NaN) cannot reach the result */
    CUDA_CHECK(cudaMemset2DAsync(y, (size_t)ldy * sizeof(float), 0, (size_t)m * sizeof(float), (size_t)n_tok,
                                 B->compute));
    BLAS_CHECK(L, L->S->gemm_ex(L->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n_tok, (int)n_in, ab, a, at, (int)lda, x, xt,
                                (int)n_in, ab + 1, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* y[t * ldy + r] += bias[r]: the outputs' biases after their GEMMs (add_bias's f32 add) */
__global__ void bias_rows_kernel(float *y, int64_t ldy, const float *bias, int64_t n_out, int64_t n_tok) {
    const int64_t n = n_out * n_tok, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float *p = y + (i / n_out) * ldy + i % n_out;
        *p = __fadd_rn(*p, bias[i % n_out]);
    }
}

bool cu_gemm_run(cu_backend *B, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                 void *scratch) {
    if (!scratch || !gemm_wants(B, outs, n_outs, n_tok)) return false;
    CU_REQUIRE(((uintptr_t)scratch & 255) == 0, "gemm: scratch must be 256-byte aligned");
    CU_REQUIRE(n_in <= INT32_MAX && n_tok <= INT32_MAX, "gemm: sizes past cuBLAS's int");
    cu_graph_break(B); /* cuBLAS is not captured (cuda_graph.cu) */
    unsigned *hdr = (unsigned *)scratch;
    uint8_t *x16 = (uint8_t *)scratch + GEMM_HDR;
    __half *dq = (__half *)(x16 + al256((size_t)(n_in * n_tok) * 2));
    int have = X_NONE;
    for (int i = 0; i < n_outs; i++) {
        const cw_mat &m = *cu_mat_of(outs[i].w);
        float *const y = outs[i].y;
        const int64_t ys = outs[i].y_stride;
        CU_REQUIRE(m.n_in == n_in, "matmul: a matrix's n_in differs from the activation's");
        if (m.type == CW_T_F32) {
            gemm(B, m.n_out, n_tok, n_in, B->blas->konst, m.a, CUDA_R_32F, m.sa / 4, x, CUDA_R_32F, y, ys);
        } else if (m.type == CW_T_BF16 || m.type == CW_T_F16) {
            const int bf = m.type == CW_T_BF16;
            const float *ab = x_as(B, bf ? X_BF16 : X_F16, &have, x, n_in * n_tok, x16, hdr);
            const cudaDataType t = bf ? CUDA_R_16BF : CUDA_R_16F;
            gemm(B, m.n_out, n_tok, n_in, ab, m.a, t, m.sa / 2, x16, t, y, ys);
        } else {
            const float *ab = x_as(B, X_F16, &have, x, n_in * n_tok, x16, hdr);
            const int64_t per = dq_rows(n_in, m.n_out);
            for (int64_t r0 = 0; r0 < m.n_out; r0 += per) {
                const int64_t nr = m.n_out - r0 < per ? m.n_out - r0 : per;
                dq16(B, m, r0, nr, dq);
                gemm(B, nr, n_tok, n_in, ab, dq, CUDA_R_16F, n_in, x16, CUDA_R_16F, y + r0, ys);
            }
        }
        if (outs[i].bias) {
            bias_rows_kernel<<<grid_of(m.n_out * n_tok), 256, 0, B->compute>>>(y, ys, outs[i].bias, m.n_out, n_tok);
            CU_LAUNCHED();
        }
    }
    return true;
}
