/* emu.h — the CUDA backend's device code run on the CPU (`make cuda-emu-test`, docs/CUDA.md
 * "Checked on the CPU by emulation"). nvcc-emu includes it before each .cu file, whose launches
 * rewrite.py has turned into emu::launch calls; emu_rt.cpp runs them.
 *
 * The model: the toolkit's own headers give the types (__half, float4, cudaError_t...); the
 * execution-space keywords are emptied; __shared__ is a static (one block runs at a time, under one
 * lock); threadIdx is the running fiber's (one fiber per CUDA thread of the block, switched only at
 * __syncthreads and the warp primitives); the warp primitives exchange through one slot per lane.
 * Arithmetic is the host's: the _rn intrinsics are the plain IEEE operations (nvcc-emu compiles
 * with -ffp-contract=off), expf and sinf are libm's, not CUDA's (2 ulp), and there are no tensor
 * cores. What it checks: each kernel's result against the CPU's (the tests' bounds), its launch
 * configuration, its barriers and warp masks (a deadlock or a mask naming an absent lane stops the
 * run with the kernel and block), and that pointer arguments point into device or pinned memory.
 * What it cannot: speed, and accesses out of bounds or races (run it under ASan for the first,
 * under ThreadSanitizer for the second: emu_rt.cpp, EMU_TSAN); without ThreadSanitizer a race
 * between streams shows only in an order that runs it (the deferred ones, EMU_DEFER), and one
 * inside a block only in a thread order that runs it (EMU_REVERSE). */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __launch_bounds__(...)
#if defined(__SANITIZE_THREAD__) /* g++ */
#define EMU_TSAN_ON 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang++ */
#define EMU_TSAN_ON 1
#endif
#endif
#if defined(EMU_TSAN_ON)
#define __shared__ static __attribute__((section("emu_shared"))) /* forgotten at each block's start (emu_rt.cpp) */
#else
#define __shared__ static
#endif
namespace emu {
/* a __shared__ variable the running block uses (rewrite.py adds the call after each declaration):
 * under ThreadSanitizer its history is forgotten before the next block starts */
#if defined(EMU_TSAN_ON)
void shared_used_tsan(const void *p, size_t n);
static inline void shared_used(const void *p, size_t n) { shared_used_tsan(p, n); }
#else
static inline void shared_used(const void *, size_t) {}
#endif
} // namespace emu

namespace emu {
/* one CUDA thread of the running block */
struct fiber {
    uint3 tid;
    int lane, warp, index;
    int done;
    void *sp;
    struct barrier *wait;
    unsigned wait_gen;
};
extern thread_local fiber *t_cur;
extern thread_local uint3 t_blk;
extern thread_local dim3 t_bdim, t_gdim;
extern thread_local void *t_dyn_smem;
void syncthreads();
/* the lanes of mask (the caller's among them) wait for each other */
void warp_sync(unsigned mask);
/* the running warp's exchange slots, one per lane */
uint64_t *warp_slots();
/* a kernel broke a rule of the device: the message names it and the block, then abort */
[[noreturn]] void fail(const char *fmt, ...);
/* fn runs now, or goes into the graph of the stream's capture (kernel: the node's function) */
void enqueue(cudaStream_t s, std::function<void()> fn, const void *kernel, const char *what);
/* every block of the grid in turn, blockDim fibers each running body */
void run_kernel(const char *name, dim3 g, dim3 b, size_t shm, const std::function<void()> &body);
/* 0, or 1 with the launch error set as the device sets it (cudaGetLastError reports it) */
int launch_check(dim3 g, dim3 b, size_t shm);
/* p lies in memory from cudaMalloc or cudaHostAlloc */
int device_readable(const void *p);
template <class T> void check_arg(const char *k, int i, const T &v) {
    if constexpr (std::is_pointer_v<T>)
        if (v && !device_readable((const void *)v)) fail("kernel %s: argument %d (%p) is not device or pinned memory", k, i, (const void *)v);
}

/* k<<<g, b, shm, s>>>(a...): the arguments converted to the kernel's parameter types and copied
 * (as a graph keeps them), checked and run when the stream runs the launch */
template <class... P> struct launcher {
    void (*k)(P...);
    dim3 g, b;
    size_t shm;
    cudaStream_t s;
    const char *name;
    template <class... A> void operator()(A &&...a) {
        if (launch_check(g, b, shm)) return;
        std::tuple<P...> args(static_cast<P>(a)...);
        auto kk = k;
        dim3 gg = g, bb = b;
        size_t sm = shm;
        const char *nm = name;
        enqueue(s, [=]() {
            std::apply([&](const auto &...x) { int i = 0; (check_arg(nm, i++, x), ...); }, args);
            run_kernel(nm, gg, bb, sm, [&]() { std::apply(kk, args); });
        }, (const void *)kk, name);
    }
};
template <class... P>
launcher<P...> launch(const char *name, void (*k)(P...), dim3 g, dim3 b, size_t shm = 0, cudaStream_t s = 0) {
    return launcher<P...>{k, g, b, shm, s, name};
}
} // namespace emu

/* ---- the device's built-in variables and functions ---- */
#define threadIdx (emu::t_cur->tid)
#define blockIdx (emu::t_blk)
#define blockDim (emu::t_bdim)
#define gridDim (emu::t_gdim)
static const int warpSize = 32;

static inline void __syncthreads() { emu::syncthreads(); }
/* lane ^ lm's value; within width-lane segments, a lane above the caller's segment gives the caller's */
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    emu::fiber *f = emu::t_cur;
    uint64_t *slot = emu::warp_slots();
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    slot[f->lane] = bits;
    emu::warp_sync(mask);
    int src = f->lane ^ lm;
    if ((src & ~(width - 1)) > (f->lane & ~(width - 1))) src = f->lane;
    if (src >= 32 || !((mask >> src) & 1u)) emu::fail("__shfl_xor_sync: lane %d reads lane %d outside mask %08x", f->lane, src, mask);
    T r;
    memcpy(&r, &slot[src], sizeof r);
    emu::warp_sync(mask);
    return r;
}
static inline int __any_sync(unsigned mask, int pred) {
    emu::fiber *f = emu::t_cur;
    uint64_t *slot = emu::warp_slots();
    slot[f->lane] = pred != 0;
    emu::warp_sync(mask);
    int any = 0;
    for (int l = 0; l < 32; l++)
        if ((mask >> l) & 1u) any |= (int)slot[l];
    emu::warp_sync(mask);
    return any;
}
/* the correctly rounded operations: the host's IEEE ones (no contraction into fma) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += ((a >> (8 * i)) & 255u) * ((b >> (8 * i)) & 255u);
    return c;
}
/* atomics: fibers run one at a time, but ThreadSanitizer must see atomic accesses */
template <class T> static inline T emu_atomic_max(T *p, T v) {
    T o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > o && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return o;
}
static inline unsigned atomicMax(unsigned *p, unsigned v) { return emu_atomic_max(p, v); }
static inline int atomicMax(int *p, int v) { return emu_atomic_max(p, v); }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
/* CUDA's overloads of min and max */
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
/* the backend declares its device helpers (cuda_internal.h) only for a CUDA compiler */
#define __CUDACC__ 1
