/* emu_cublas.cpp — libcublas_emu.so, the CUDA emulation's cuBLAS (TIERKV_CUBLAS names it): the calls
 * cuda_gemm.cu makes by dlsym, with cublasGemmEx computed on the CPU (f32 sums in k order) and
 * queued on the handle's stream through the emulator, so a capture records it. alpha and beta are
 * read when it runs in device pointer mode, and beta x C is always computed, so a C left unset
 * (NaN) shows even where beta is 0. Only what the backend asks for: C in f32, B not transposed. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <functional>
#include <stdio.h>
#include <string.h>
namespace emu { void enqueue(cudaStream_t s, std::function<void()> fn, const void *kernel, const char *what); }
struct emu_handle { cudaStream_t s; int device_ptrs; };
static float ld(const void *p, int t, size_t i) {
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    }
    fprintf(stderr, "emu cublas: data type %d\n", t);
    abort();
}
extern "C" {
int cublasGetProperty(int type, int *v) { *v = type == 0 ? 13 : type == 1 ? 1 : 0; return 0; }
const char *cublasGetStatusString(int s) { return s ? "emulated cuBLAS error" : "CUBLAS_STATUS_SUCCESS (emulated)"; }
int cublasCreate_v2(emu_handle **h) { *h = new emu_handle(); return 0; }
int cublasDestroy_v2(emu_handle *h) { delete h; return 0; }
int cublasSetStream_v2(emu_handle *h, cudaStream_t s) { h->s = s; return 0; }
int cublasSetWorkspace_v2(emu_handle *, void *, size_t) { return 0; }
int cublasSetPointerMode_v2(emu_handle *h, int mode) { h->device_ptrs = mode == 1; return 0; }
int cublasGemmEx(emu_handle *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
                 const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
    (void)compute, (void)algo;
    if (ct != CUDA_R_32F || tb != 0 || m < 0 || n < 0 || k < 0) { fprintf(stderr, "emu cublas: unsupported call\n"); return 7; }
    float ah = h->device_ptrs ? 0.f : *(const float *)alpha, bh = h->device_ptrs ? 0.f : *(const float *)beta;
    int dev = h->device_ptrs;
    emu::enqueue(h->s, [=]() {
        float a = dev ? *(const float *)alpha : ah, b = dev ? *(const float *)beta : bh;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float s = 0.f;
                for (int p = 0; p < k; p++) {
                    size_t ai = ta ? (size_t)p + (size_t)i * lda : (size_t)i + (size_t)p * lda;
                    s += ld(A, at, ai) * ld(B, bt, (size_t)p + (size_t)j * ldb);
                }
                float *c = (float *)C + (size_t)i + (size_t)j * ldc;
                *c = a * s + b * *c;
            }
    }, NULL, "memcpy (cuBLAS GEMM)");
    return 0;
}
}
