/* race_check.cu — that the emulation under ThreadSanitizer (make cuda-emu-test EMU_TSAN=1) finds the
 * races it claims to, and none where CUDA orders the accesses. One case a run, named on the command
 * line; `make cuda-emu-race-check` runs each and expects ThreadSanitizer's exit status (66) from the
 * racy ones and 0 from the others. Not part of the product: a check of the checker. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define N 1024
#define THREADS 128

__global__ void fill(float *p, int n, float v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
__global__ void fill_half(__half *p, int n, float v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = __float2half_rn(v);
}
__global__ void copy16(uint4 *d, const uint4 *s, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) d[i] = s[i];
}
/* thread 0 writes a shared value every thread then reads: with the barrier, or without */
__global__ void share(float *out, int barrier) {
    __shared__ float v;
    if (threadIdx.x == 0) v = (float)blockIdx.x;
    if (barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
/* every block's thread 0 writes one word: two blocks, nothing orders them */
__global__ void same_word(float *out) {
    if (threadIdx.x == 0) out[0] = (float)blockIdx.x;
}
/* each lane's value from its neighbour, through a shuffle */
__global__ void shuffle(float *out) {
    float v = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
}

static int fail(const char *what) {
    fprintf(stderr, "race_check: %s failed\n", what);
    return 2;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: race_check CASE\n"), 2;
    const char *c = argv[1];
    cudaStream_t a, b;
    cudaEvent_t e;
    float *d0, *d1, *h;
    if (cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) || cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) ||
        cudaEventCreate(&e) || cudaMalloc((void **)&d0, N * 4) || cudaMalloc((void **)&d1, N * 4) ||
        cudaHostAlloc((void **)&h, N * 4, cudaHostAllocMapped))
        return fail("setup");
    float sum = 0;
    if (!strcmp(c, "streams-ordered") || !strcmp(c, "streams-racy")) {
        /* a writes, b reads: with an event between them, or not */
        fill<<<4, THREADS, 0, a>>>(d0, N, 1.0f);
        if (!strcmp(c, "streams-ordered")) cudaEventRecord(e, a), cudaStreamWaitEvent(b, e, 0);
        copy16<<<2, THREADS, 0, b>>>((uint4 *)d1, (const uint4 *)d0, N / 4);
    } else if (!strcmp(c, "half-racy")) {
        /* a half written from a conversion's result (a store g++ leaves unchecked), read on another stream */
        fill_half<<<4, THREADS, 0, a>>>((__half *)d0, N, 1.0f);
        copy16<<<1, THREADS, 0, b>>>((uint4 *)d1, (const uint4 *)d0, N / 8);
    } else if (!strcmp(c, "host-ordered") || !strcmp(c, "host-racy")) {
        /* a kernel writes pinned memory; the host reads it after the stream's sync, or without one */
        fill<<<4, THREADS, 0, a>>>(h, N, 2.0f);
        if (!strcmp(c, "host-ordered")) cudaStreamSynchronize(a);
        for (int i = 0; i < N; i++) sum += h[i];
    } else if (!strcmp(c, "reuse-ordered") || !strcmp(c, "reuse-racy")) {
        /* the host rewrites a pinned source its copy may still read: after the copy's event, or at once */
        for (int i = 0; i < N; i++) h[i] = (float)i;
        cudaMemcpyAsync(d0, h, N * 4, cudaMemcpyHostToDevice, a);
        cudaEventRecord(e, a);
        if (!strcmp(c, "reuse-ordered")) cudaEventSynchronize(e);
        for (int i = 0; i < N; i++) h[i] = 0.0f;
    } else if (!strcmp(c, "block-ordered") || !strcmp(c, "block-racy")) {
        share<<<2, THREADS, 0, a>>>(d0, !strcmp(c, "block-ordered"));
    } else if (!strcmp(c, "blocks-racy")) {
        same_word<<<2, THREADS, 0, a>>>(d0);
    } else if (!strcmp(c, "shared-streams-ordered")) {
        /* one kernel's blocks on two streams at once: each block's shared memory is its own */
        share<<<2, THREADS, 0, a>>>(d0, 1);
        share<<<2, THREADS, 0, b>>>(d1, 1);
    } else if (!strcmp(c, "warp-ordered")) {
        shuffle<<<1, 32, 0, a>>>(d0);
    } else {
        return fprintf(stderr, "race_check: unknown case %s\n", c), 2;
    }
    if (cudaDeviceSynchronize() || cudaGetLastError()) return fail("the run");
    printf("race_check %s: ran (%g)\n", c, sum);
    return 0;
}
