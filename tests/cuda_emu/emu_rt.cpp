/* emu_rt.cpp — the CUDA emulation's runtime (emu.h says what it models): the runtime calls the CUDA
 * backend makes, implemented on the CPU, and the kernel scheduler.
 *
 * Kernels: a block at a time, one fiber per thread on stacks of 256 KiB with a guard page, switched
 * by emu_switch (x86-64: the callee-saved registers and the stack pointer) at barriers only, in
 * thread order or its reverse (EMU_REVERSE); a pass over the fibers that runs none while some wait
 * is a deadlock, reported with the kernel and block. Streams: work runs when it is queued, an order
 * the device may also choose, or deferred (EMU_DEFER, below); a stream under capture records it
 * instead (kernels with their arguments copied, copies with their pointers), and a graph launch
 * replays the record. Memory: cudaMalloc's bytes start as 0xff (NaN as f32, so a
 * result read before it is written shows), and so do a launch's dynamic shared memory bytes, which
 * end at a guard page (an access past them faults); every copy must lie inside one allocation on
 * its device side, and what CUDA forbids during a capture (pageable copies, a sync of the capturing
 * stream, a query of an event it recorded, another stream waiting on one) fails as it would there.
 * EMU_REPORT=1 prints the kernels, blocks and graph replays run, at exit. */
#include "emu.h"
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#if !defined(__x86_64__)
#error "the CUDA emulation switches fibers with x86-64 code (emu_switch)"
#endif
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");
extern "C" void emu_switch(void **save_sp, void *to_sp);
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)0)
#define ASAN_FINISH(save, bottom, size) ((void)0)
#endif
static const void *sched_bottom;
static size_t sched_size;
static void *sched_fake, *fiber_fake[1024];

/* EMU_TSAN (make cuda-emu-test EMU_TSAN=1): ThreadSanitizer finds the races. The kernels, the tests
 * and the backend are instrumented; this file is not, so its own bookkeeping stays out of sight and
 * only what it declares below orders anything. Each stream has a fiber its work runs on (on a stack
 * of its own) and a fiber per CUDA thread index for its kernels; the orders CUDA promises become
 * acquire and release: the host's queueing before the work, a stream's work in its order, an event
 * record before a wait on it, a barrier (or a warp's sync) among its threads, a kernel's start and
 * end, and the host's waits (stream, event, device, a copy into pageable memory). Nothing else
 * orders them, so an access to the same bytes from two of them with neither ordered before the
 * other is reported, whichever order the emulation ran them in: a stream that reads what another
 * writes without waiting for it, the host reading pinned memory a kernel may still write, two
 * threads of a block on one shared variable with no barrier between them. Shared memory and the
 * warp exchange slots sit in one section (emu_shared) whose history, and the dynamic shared
 * memory's, is forgotten when a block starts, as a new block's shared memory is new. A stream has
 * two fibers (and stacks) per thread index, for even and odd blocks in the order they run, so two
 * consecutive blocks of a kernel are never one fiber. Not seen: a race between threads of the same
 * index in blocks two apart (blocks 0 and 2 of a launch run on one fiber, in order). */
#if defined(EMU_TSAN)
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_set_fiber_name(void *fiber, const char *name);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
void __tsan_java_init(unsigned long heap_begin, unsigned long heap_size);
void __tsan_java_alloc(unsigned long ptr, unsigned long size);
void __tsan_java_free(unsigned long ptr, unsigned long size);
extern char __start_emu_shared[], __stop_emu_shared[];
}
#define HB_ACQ(p) __tsan_acquire((void *)(p))
#define HB_REL(p) __tsan_release((void *)(p))
#define TSAN_TO(f) __tsan_switch_to_fiber((f), 1) /* 1: the switch itself orders nothing */
#else
#define HB_ACQ(p) ((void)0)
#define HB_REL(p) ((void)0)
#define TSAN_TO(f) ((void)0)
#endif

/* A recursive lock of plain atomics. Under ThreadSanitizer a pthread mutex taken by the streams'
 * fibers would order them through the emulator's bookkeeping and hide the races it is there to find;
 * this file is not instrumented, so these atomics order nothing it can see. */
struct emu_mutex {
    std::atomic<std::thread::id> owner{};
    int depth = 0;
    void lock() {
        const std::thread::id me = std::this_thread::get_id();
        if (owner.load(std::memory_order_acquire) == me) {
            depth++;
            return;
        }
        std::thread::id none;
        while (!owner.compare_exchange_weak(none, me, std::memory_order_acquire)) none = std::thread::id(), sched_yield();
        depth = 1;
    }
    void unlock() {
        if (--depth == 0) owner.store(std::thread::id(), std::memory_order_release);
    }
};

namespace emu {
thread_local fiber *t_cur;
thread_local uint3 t_blk;
thread_local dim3 t_bdim, t_gdim;
thread_local void *t_dyn_smem;

struct barrier {
    int count;
    unsigned gen;
};
static const size_t STACK = 256 << 10;
#if defined(EMU_TSAN)
enum { SETS = 2 }; /* even and odd blocks run on fibers and stacks of their own (above) */
#else
enum { SETS = 1 };
#endif
/* Where a stream's work runs: the stacks of its kernels' threads (by index) and, under EMU_TSAN, its
 * fibers and the objects its orders are released to (the stream's order, a kernel's start and end). */
struct exec_ctx {
    int id; /* 0: the legacy stream; then in creation order */
    void *stacks[SETS][1024];
    alignas(8) char hb[8], kstart[8], kend[8];
#if defined(EMU_TSAN)
    void *fib, *kfib[SETS][1024]; /* the stream's work; its kernels' threads (even, odd blocks) */
    unsigned blocks;           /* blocks run, for the parity */
    void *op_stack, *ret_sp; /* the stack the work runs on; where the host's continues */
    void *host_fib, *tok;
    std::function<void()> *fn;
#endif
};
static exec_ctx legacy_x;          /* the legacy stream's (a null cudaStream_t) */
static thread_local exec_ctx *t_x; /* the context whose work this thread runs now */
static emu_mutex dev_mu;           /* one piece of work at a time, whichever host thread queued it */
static void *sched_sp;
static const std::function<void()> *t_body;
static const char *t_kname;
static fiber F[1024];
static barrier bar, wbar[32];
#if defined(EMU_TSAN)
#define EMU_SHARED __attribute__((section("emu_shared")))
#else
#define EMU_SHARED
#endif
static uint64_t slots[32][32] EMU_SHARED;
/* dynamic shared memory: the launch's bytes (rounded up to 16) end where a guard page begins, so a
 * kernel that reads or writes past what its launch asked for faults */
static const size_t DYN_MAX = 48 << 10;
static uint8_t *dyn_end;
static size_t dyn_bytes;
/* the running block's barrier objects (EMU_TSAN): 2 for __syncthreads, 2 a warp (by the generation's parity) */
static char *blk_hb;
static int live, n_thr;
static uint64_t n_kernels, n_blocks_run;
/* EMU_REVERSE=1: between two barriers the block's threads run from the last to the first, so a
 * thread that reads shared memory another writes without a barrier between them reads it before
 * the write in one of the two orders */
static const int reverse = getenv("EMU_REVERSE") && atoi(getenv("EMU_REVERSE")) > 0;

void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "CUDA EMULATION ERROR (%s, block %u,%u,%u): ", t_kname ? t_kname : "-", t_blk.x, t_blk.y, t_blk.z);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void *new_stack(void) {
    uint8_t *m = (uint8_t *)mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("no memory for fiber stacks");
    mprotect(m, 4096, PROT_NONE);
    return m + 4096;
}
static void free_stack(void *stack) { munmap((uint8_t *)stack - 4096, STACK + 4096); }
/* a stack pointer from which emu_switch enters entry at the top of stack */
static void *fresh_sp(void *stack, void (*entry)()) {
    uint64_t *sp = (uint64_t *)((uint8_t *)stack + STACK);
    *--sp = 0;
    *--sp = (uint64_t)(uintptr_t)entry;
    for (int k = 0; k < 6; k++) *--sp = 0;
    return sp;
}

#if defined(EMU_TSAN)
static void *fiber_factory;
__attribute__((constructor)) static void make_fiber_factory(void) { fiber_factory = __tsan_create_fiber(0); }
/* a new fiber, created by one that has done nothing since the process started, so nothing the host
 * did orders it */
static void *new_fiber(int stream, int thread, int odd) {
    void *cur = __tsan_get_current_fiber();
    TSAN_TO(fiber_factory);
    void *f = __tsan_create_fiber(0);
    TSAN_TO(cur);
    char *name = (char *)malloc(48); /* kept: the runtime may keep the pointer */
    if (thread < 0) snprintf(name, 48, "stream %d", stream);
    else snprintf(name, 48, "stream %d, CUDA thread %d (%s blocks)", stream, thread, odd ? "odd" : "even");
    __tsan_set_fiber_name(f, name);
    return f;
}
static void op_tramp() {
    exec_ctx *x = t_x;
    HB_ACQ(x->tok);
    HB_ACQ(x->hb);
    (*x->fn)();
    delete x->fn; /* the closure freed by the fiber that read it */
    HB_REL(x->hb);
    TSAN_TO(x->host_fib);
    void *unused;
    emu_switch(&unused, x->ret_sp);
    __builtin_unreachable();
}
#endif
/* fn, one piece of stream work, run now in x's context (on its own fiber and stack under EMU_TSAN) and
 * deleted; tok: what the host released when it queued the work */
static void run_op(exec_ctx *x, std::function<void()> *fn, void *tok) {
    std::lock_guard<emu_mutex> lk(dev_mu);
    if (t_x) fail("stream work queued more work while it ran");
    t_x = x;
#if defined(EMU_TSAN)
    if (!x->fib) x->fib = new_fiber(x->id, -1, 0), x->op_stack = new_stack();
    x->fn = fn, x->tok = tok, x->host_fib = __tsan_get_current_fiber();
    void *sp = fresh_sp(x->op_stack, op_tramp);
    TSAN_TO(x->fib);
    emu_switch(&x->ret_sp, sp);
#else
    (void)tok;
    (*fn)();
    delete fn;
#endif
    t_x = NULL;
}

#if defined(EMU_TSAN)
/* the shared memory blocks used since the last block started (the warp slots apart): forgotten when
 * the next one starts */
struct sh_range {
    uintptr_t p;
    size_t n;
};
static sh_range sh_used[256]; /* a fixed array: the kernels' threads add to it, and allocate nothing */
static int n_sh_used;
static bool slots_used;
void shared_used_tsan(const void *p, size_t n) {
    for (int i = 0; i < n_sh_used; i++)
        if (sh_used[i].p == (uintptr_t)p) return;
    if (n_sh_used == 256) fail("more than 256 __shared__ variables in one block");
    sh_used[n_sh_used++] = sh_range{(uintptr_t)p, n};
}
uint64_t *warp_slots() {
    slots_used = true;
    return slots[t_cur->warp];
}
#else
uint64_t *warp_slots() { return slots[t_cur->warp]; }
#endif

static void wait_on(barrier *b, unsigned g) {
    fiber *f = t_cur;
    f->wait = b;
    f->wait_gen = g;
    ASAN_START(&fiber_fake[f->index], sched_bottom, sched_size);
#if defined(EMU_TSAN)
    TSAN_TO(t_x->fib);
#endif
    emu_switch(&f->sp, sched_sp);
    ASAN_FINISH(fiber_fake[f->index], &sched_bottom, &sched_size);
}

void syncthreads() {
    unsigned g = bar.gen;
    HB_REL(blk_hb + (g & 1));
    if (++bar.count >= live) {
        bar.count = 0, bar.gen++;
    } else
        wait_on(&bar, g);
    HB_ACQ(blk_hb + (g & 1));
}

void warp_sync(unsigned mask) {
    fiber *f = t_cur;
    int lanes = n_thr - f->warp * 32;
    if (lanes > 32) lanes = 32;
    unsigned present = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
    if (mask & ~present) fail("warp sync with mask %08x names lanes that do not exist (%d lanes in warp %d)", mask, lanes, f->warp);
    if (!((mask >> f->lane) & 1u)) fail("lane %d syncs with a mask %08x without it", f->lane, mask);
    int want = __builtin_popcount(mask);
    barrier *b = &wbar[f->warp];
    unsigned g = b->gen;
    char *o = blk_hb + 2 + 2 * f->warp + (g & 1);
    HB_REL(o);
    if (++b->count >= want) {
        b->count = 0, b->gen++;
    } else
        wait_on(b, g);
    HB_ACQ(o);
}

static void tramp() {
    fiber *f = t_cur;
    ASAN_FINISH(NULL, &sched_bottom, &sched_size);
    HB_ACQ(t_x->kstart);
    (*t_body)();
    HB_REL(t_x->kend);
    f->done = 1;
    live--;
    if (bar.count > 0 && bar.count >= live) bar.count = 0, bar.gen++;
    ASAN_START(NULL, sched_bottom, sched_size);
#if defined(EMU_TSAN)
    TSAN_TO(t_x->fib);
#endif
    emu_switch(&f->sp, sched_sp);
    __builtin_unreachable();
}

static void run_block(int n) {
    exec_ctx *x = t_x;
    live = n, n_thr = n;
    int set = 0;
#if defined(EMU_TSAN)
    set = x->blocks++ % SETS; /* a fiber's stack is its own: a stack two fibers used would be a race */
    void **kfib = x->kfib[set];
#endif
    void **stacks = x->stacks[set];
    bar = barrier{0, 0};
    for (auto &w : wbar) w = barrier{0, 0};
    for (int i = 0; i < n; i++) {
        if (!stacks[i]) stacks[i] = new_stack();
#if defined(EMU_TSAN)
        if (!kfib[i]) kfib[i] = new_fiber(x->id, i, set);
#endif
        fiber *f = &F[i];
        f->index = i, f->lane = i & 31, f->warp = i >> 5, f->done = 0, f->wait = NULL;
        f->tid.x = i % t_bdim.x, f->tid.y = (i / t_bdim.x) % t_bdim.y, f->tid.z = i / (t_bdim.x * t_bdim.y);
        f->sp = fresh_sp(stacks[i], &tramp);
    }
#if defined(EMU_TSAN)
    /* A new block's shared memory: what earlier blocks did there is forgotten. The runtime's one call
     * that forgets a range's history is its Java heap's allocation, so the emu_shared section is that
     * heap and what the blocks before used of it is allocated anew; the dynamic shared memory is
     * mapped anew (which forgets it too) and refilled. Then the block's threads are ordered after it. */
    static unsigned long sh0, shn;
    if (!shn) {
        sh0 = (unsigned long)__start_emu_shared & ~7ul;
        shn = ((unsigned long)__stop_emu_shared - sh0 + 7) & ~7ul;
        __tsan_java_init(sh0, shn);
        __tsan_java_alloc(sh0, shn);
    }
    if (slots_used) shared_used_tsan(slots, sizeof slots), slots_used = false;
    for (int i = 0; i < n_sh_used; i++) {
        const unsigned long a = sh_used[i].p & ~7ul, len = (sh_used[i].p + sh_used[i].n - a + 7) & ~7ul;
        __tsan_java_free(a, len);
        __tsan_java_alloc(a, len);
    }
    n_sh_used = 0;
    if (dyn_bytes) {
        const size_t pages = (dyn_bytes + 4095) & ~(size_t)4095;
        const int fixed = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
        if (mmap(dyn_end - pages, pages, PROT_READ | PROT_WRITE, fixed, -1, 0) == MAP_FAILED) fail("no memory for dynamic shared memory");
        memset(dyn_end - dyn_bytes, 0xff, dyn_bytes);
    }
    HB_REL(x->kstart);
    blk_hb = (char *)malloc(2 + 64); /* new objects a block: no block orders another */
#endif
    int remaining = n;
    while (remaining) {
        int progress = 0;
        for (int k = 0; k < n; k++) {
            fiber *f = &F[reverse ? n - 1 - k : k];
            int i = f->index;
            if (f->done || (f->wait && f->wait->gen == f->wait_gen)) continue;
            f->wait = NULL;
            t_cur = f;
            ASAN_START(&sched_fake, stacks[i], STACK);
#if defined(EMU_TSAN)
            TSAN_TO(kfib[i]);
#endif
            emu_switch(&sched_sp, f->sp);
            ASAN_FINISH(sched_fake, NULL, NULL);
            progress = 1;
            if (f->done) remaining--;
        }
        if (!progress) {
            int at_bar = 0, at_warp = 0, first_done = -1;
            for (int i = 0; i < n; i++) {
                if (F[i].done && first_done < 0) first_done = i;
                if (!F[i].done) (F[i].wait == &bar ? at_bar : at_warp)++;
            }
            t_cur = NULL;
            fail("deadlock: %d threads wait at __syncthreads, %d at a warp sync, %d of %d exited (first: %d)", at_bar, at_warp,
                 n - remaining, n, first_done);
        }
    }
#if defined(EMU_TSAN)
    free(blk_hb);
    blk_hb = NULL;
#endif
    t_cur = NULL;
}

void run_kernel(const char *name, dim3 g, dim3 b, size_t shm, const std::function<void()> &body) {
    std::lock_guard<emu_mutex> lk(dev_mu);
    if (!t_x) fail("kernel %s ran outside a stream's work", name);
    if (!dyn_end) {
        uint8_t *m = (uint8_t *)mmap(NULL, DYN_MAX + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) fail("no memory for dynamic shared memory");
        mprotect(m + DYN_MAX, 4096, PROT_NONE);
        dyn_end = m + DYN_MAX;
    }
    dyn_bytes = (shm + 15) & ~(size_t)15;
    memset(dyn_end - dyn_bytes, 0xff, dyn_bytes); /* garbage, as the device's */
    t_dyn_smem = dyn_end - dyn_bytes;
    t_gdim = g, t_bdim = b, t_body = &body, t_kname = name;
    int n = (int)(b.x * b.y * b.z);
    n_kernels++;
    HB_REL(t_x->kstart);
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                t_blk = uint3{x, y, z};
                run_block(n);
                n_blocks_run++;
            }
    HB_ACQ(t_x->kend);
    t_kname = NULL;
}
} // namespace emu

/* ---------------- the runtime ---------------- */
using namespace emu;
static thread_local cudaError_t last_err = cudaSuccess;
static cudaError_t set_err(cudaError_t e) {
    if (e != cudaSuccess) last_err = e;
    return e;
}

struct alloc_info {
    size_t n;
    int type; /* cudaMemoryTypeDevice / Host */
};
static emu_mutex mem_mu;
static std::map<uintptr_t, alloc_info> allocs;

static int find_alloc(const void *p, uintptr_t *base, alloc_info *ai) {
    std::lock_guard<emu_mutex> lk(mem_mu);
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin()) return 0;
    --it;
    if ((uintptr_t)p >= it->first + it->second.n) return 0;
    if (base) *base = it->first;
    if (ai) *ai = it->second;
    return 1;
}
/* where [p, p + n) lies: the type of the one allocation that holds it (cudaMemoryTypeDevice or
 * Host), 0 outside every allocation, -1 from inside one to past its end */
static int range_kind(const void *p, size_t n) {
    uintptr_t base;
    alloc_info ai;
    if (!find_alloc(p, &base, &ai)) return 0;
    return (uintptr_t)p + n > base + ai.n ? -1 : ai.type;
}

struct node {
    int type; /* cudaGraphNodeType */
    std::function<void()> fn;
};
struct CUgraphNode_st : node {};
struct CUgraph_st {
    std::vector<CUgraphNode_st *> nodes;
};
struct CUgraphExec_st {
    std::vector<node> nodes;
};
/* EMU_DEFER=1: work waits in its stream's queue until the host waits for it, and then only the work
 * the host waits for runs (the stream's queue up to it, and on other streams only what an event
 * wait in it needs): a host access to pinned memory the queued work has not yet read or written
 * shows, and so does a stream that reads what another writes without waiting for it.
 * EMU_DEFER=2: the same, but when the host waits, every other stream first runs as far as it may:
 * a stream that writes (or reads) what another has queued before it, without waiting for it, shows. */
struct op {
    std::function<void()> *fn; /* on the heap, made before the host's release (the work reads nothing the
                                * host writes later), deleted by whoever runs it */
    struct CUevent_st *wait; /* a stream wait: runnable once wait->done >= gen */
    uint64_t gen;
    struct CUstream_st *from; /* the stream of the record it waits for */
    void *tok;                /* EMU_TSAN: what the host released when it queued this */
};
struct CUstream_st {
    int capturing;
    CUgraph_st *g;
    std::deque<op> q;
    exec_ctx x;
};
struct CUevent_st {
    CUstream_st *captured_in;
    double t;
    uint64_t gen, done; /* records asked for, records run */
    CUstream_st *where; /* the stream of the latest record */
    std::shared_ptr<char> rec; /* EMU_TSAN: what the latest record released */
};
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static emu_mutex streams_mu; /* the stream list and, when deferred, their queues */
static const int defer = getenv("EMU_DEFER") ? atoi(getenv("EMU_DEFER")) : 0;
static uint64_t ops_deferred;
static std::vector<CUstream_st *> streams;
static int is_stream(cudaStream_t s) {
    std::lock_guard<emu_mutex> lk(streams_mu);
    for (auto *t : streams)
        if (t == s) return 1;
    return 0;
}

static int capturing(cudaStream_t s) { return s && is_stream(s) && s->capturing; }
static exec_ctx *ctx_of(cudaStream_t s) { return s && is_stream(s) ? &s->x : &legacy_x; }
/* what the host's queueing releases to the work it queues (EMU_TSAN) */
static void *new_token(void) {
#if defined(EMU_TSAN)
    void *t = malloc(1);
    HB_REL(t);
    return t;
#else
    return NULL;
#endif
}
static void run(cudaStream_t s, op &o) {
    run_op(ctx_of(s), o.fn, o.tok);
    free(o.tok);
    o.fn = NULL, o.tok = NULL;
}
/* fn queued on s (wait: an event wait's fields), or run now */
static void push_op(cudaStream_t s, std::function<void()> &&fn, CUevent_st *wait = NULL, uint64_t gen = 0,
                    CUstream_st *from = NULL) {
    op o{new std::function<void()>(std::move(fn)), wait, gen, from, NULL};
    o.tok = new_token();
    if (defer && s && is_stream(s)) {
        std::lock_guard<emu_mutex> lk(streams_mu);
        s->q.push_back(std::move(o));
        ops_deferred++;
        return;
    }
    run(s, o);
}
/* the host has waited for s's work queued so far: it is ordered after it (EMU_TSAN) */
static void host_waited(cudaStream_t s) { HB_ACQ(ctx_of(s)->hb); }
static void host_waited_all(void) {
    std::lock_guard<emu_mutex> lk(streams_mu);
    for (auto *t : streams) HB_ACQ(t->x.hb);
    HB_ACQ(legacy_x.hb);
}

namespace emu {
int device_readable(const void *p) { return find_alloc(p, NULL, NULL); }
void enqueue(cudaStream_t s, std::function<void()> fn, const void *kernel, const char *what) {
    if (capturing(s)) {
        auto *n = new CUgraphNode_st();
        n->type = kernel ? cudaGraphNodeTypeKernel : (strncmp(what, "memset", 6) ? cudaGraphNodeTypeMemcpy : cudaGraphNodeTypeMemset);
        n->fn = std::move(fn);
        s->g->nodes.push_back(n);
        return;
    }
    push_op(s, std::move(fn));
}
static int runnable(const op &o) { return !o.wait || o.wait->done >= o.gen; }
/* one operation that brings t's head nearer to running: the head, or what its event wait needs */
static int step_for(CUstream_st *t, int depth) {
    if (!t || t->q.empty() || depth > 64) return 0;
    if (!runnable(t->q.front())) return step_for(t->q.front().from, depth + 1);
    op o = std::move(t->q.front());
    t->q.pop_front();
    run(t, o);
    return 1;
}
/* runs what done() needs, by steps for the stream need() names (NULL: any with work), until done()
 * holds; the host waits (for another thread's work) at most 30 s */
static void run_until(const std::function<bool()> &done, const std::function<CUstream_st *()> &need) {
    if (!defer) return;
    std::unique_lock<emu_mutex> lk(streams_mu);
    int idle_ms = 0;
    while (!done()) {
        CUstream_st *t = need();
        int ran = 0;
        if (defer == 2)
            for (auto *u : streams)
                while (u != t && !u->q.empty() && runnable(u->q.front())) ran |= step_for(u, 0);
        if (done()) break;
        if (t) ran |= step_for(t, 0);
        else
            for (auto *u : streams) ran |= step_for(u, 0);
        if (ran) {
            idle_ms = 0;
            continue;
        }
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        lk.lock();
        if (++idle_ms > 30000) fail("the host waits for work that no stream can run (a stream waits on an event never recorded)");
    }
}
static void run_stream(CUstream_st *s) {
    run_until([=] { return s->q.empty(); }, [=] { return s; });
}
static void run_all() {
    run_until([] {
        for (auto *t : streams)
            if (!t->q.empty()) return false;
        return true;
    }, [] { return (CUstream_st *)NULL; });
}
int launch_check(dim3 g, dim3 b, size_t shm) {
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || nt > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
        fprintf(stderr, "CUDA EMULATION: invalid launch configuration: grid %u,%u,%u block %u,%u,%u\n", g.x, g.y, g.z, b.x, b.y, b.z);
        set_err(cudaErrorInvalidConfiguration);
        return 1;
    }
    if (shm > 48 * 1024) {
        fprintf(stderr, "CUDA EMULATION: %zu bytes of dynamic shared memory without cudaFuncSetAttribute\n", shm);
        set_err(cudaErrorInvalidValue);
        return 1;
    }
    return 0;
}
} // namespace emu

extern "C" {
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_err;
    last_err = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_err; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error (emulated)";
    case cudaErrorInvalidValue: return "invalid argument (emulated)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing (emulated)";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed (emulated)";
    case cudaErrorNotReady: return "device not ready (emulated)";
    default: return "an error (emulated)";
    }
}
const char *cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }
cudaError_t cudaGetDeviceCount(int *n) { *n = getenv("EMU_NO_DEVICE") ? 0 : 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation of sm_90");
    p->major = 9, p->minor = 0, p->multiProcessorCount = 132, p->totalGlobalMem = (size_t)80 << 30;
    p->unifiedAddressing = 1, p->canMapHostMemory = 1, p->sharedMemPerBlock = 48 << 10, p->maxThreadsPerBlock = 1024;
    p->warpSize = 32, p->maxThreadsDim[0] = 1024, p->sharedMemPerBlockOptin = 227 << 10, p->sharedMemPerMultiprocessor = 228 << 10;
    p->memoryBusWidth = 5120, p->l2CacheSize = 50 << 20;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    run_all();
    host_waited_all();
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)70 << 30, *t = (size_t)80 << 30; return cudaSuccess; }

static cudaError_t alloc_any(void **p, size_t n, int type) {
    size_t r = (n + 255) & ~(size_t)255;
    if (!r) r = 256;
    void *m = aligned_alloc(256, r);
    if (!m) return set_err(cudaErrorMemoryAllocation);
    memset(m, type == cudaMemoryTypeDevice ? 0xff : 0xfe, r); /* garbage: NaN as f32 */
    std::lock_guard<emu_mutex> lk(mem_mu);
    allocs[(uintptr_t)m] = alloc_info{n ? n : 1, type};
    *p = m;
    return cudaSuccess;
}
static cudaError_t free_any(void *p, int type) {
    if (!p) return cudaSuccess;
    run_all(); /* cudaFree and cudaFreeHost wait for the device */
    host_waited_all();
    std::lock_guard<emu_mutex> lk(mem_mu);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.type != type) {
        fprintf(stderr, "CUDA EMULATION: free of %p that is not a %s allocation\n", p, type == cudaMemoryTypeDevice ? "device" : "pinned");
        return set_err(cudaErrorInvalidValue);
    }
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) { return alloc_any(p, n, cudaMemoryTypeDevice); }
cudaError_t cudaFree(void *p) { return free_any(p, cudaMemoryTypeDevice); }
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return alloc_any(p, n, cudaMemoryTypeHost); }
cudaError_t cudaMallocHost(void **p, size_t n) { return alloc_any(p, n, cudaMemoryTypeHost); }
cudaError_t cudaFreeHost(void *p) { return free_any(p, cudaMemoryTypeHost); }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    uintptr_t base;
    alloc_info ai;
    memset(a, 0, sizeof *a);
    if (find_alloc(p, &base, &ai)) {
        a->type = (cudaMemoryType)ai.type;
        a->devicePointer = (void *)p;
        a->hostPointer = ai.type == cudaMemoryTypeHost ? (void *)p : NULL;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (!n) return cudaSuccess;
    const int dk = range_kind(dst, n), sk = range_kind(src, n);
    const int dst_dev = dk == cudaMemoryTypeDevice, src_dev = sk == cudaMemoryTypeDevice, dst_reg = dk > 0, src_reg = sk > 0;
    const char *bad = NULL;
    /* under unified addressing, pinned memory is a device address too */
    if (kind == cudaMemcpyHostToDevice && (!dst_reg || src_dev)) bad = "host to device";
    if (kind == cudaMemcpyDeviceToHost && (!src_reg || dst_dev)) bad = "device to host";
    if (kind == cudaMemcpyDeviceToDevice && (!src_reg || !dst_reg)) bad = "device to device";
    if (kind == cudaMemcpyDefault && !dst_reg && !src_reg) bad = "default between two unregistered ranges";
    /* a range that starts inside an allocation must end inside it */
    if (!bad && (dk < 0 || sk < 0)) bad = "past the end of an allocation";
    if (bad) {
        fprintf(stderr, "CUDA EMULATION: cudaMemcpyAsync %s: dst %p (%s) src %p (%s) %zu bytes\n", bad, dst,
                dst_dev ? "device" : dst_reg ? "pinned" : "host", src, src_dev ? "device" : src_reg ? "pinned" : "host", n);
        return set_err(cudaErrorInvalidValue);
    }
    if (capturing(s) && (!dst_reg || !src_reg)) {
        fprintf(stderr, "CUDA EMULATION: cudaMemcpyAsync with pageable host memory during capture\n");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    if (!src_reg) { /* a pageable source is staged before the call returns */
        auto copy = std::make_shared<std::vector<uint8_t>>((const uint8_t *)src, (const uint8_t *)src + n);
        /* moved in: the work's closure holds the only reference, so the fiber that reads it frees it */
        enqueue(s, [dst, n, copy = std::move(copy)]() { memcpy(dst, copy->data(), n); }, NULL, "memcpy");
    } else if (!dst_reg) { /* into pageable memory: the call returns when the copy is done */
        auto done = std::make_shared<int>(0);
        enqueue(s, [=]() { memcpy(dst, src, n), *done = 1; }, NULL, "memcpy");
        run_until([=] { return *done != 0; }, [=] { return s; });
        host_waited(s);
    } else
        enqueue(s, [=]() { memcpy(dst, src, n); }, NULL, "memcpy");
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    cudaError_t r = cudaMemcpyAsync(dst, src, n, kind, 0);
    host_waited(0); /* the legacy stream's work runs as it is queued */
    return r;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!n) return cudaSuccess;
    if (range_kind(p, n) <= 0) {
        fprintf(stderr, "CUDA EMULATION: cudaMemsetAsync outside device memory: %p %zu\n", p, n);
        return set_err(cudaErrorInvalidValue);
    }
    enqueue(s, [=]() { memset(p, v, n); }, NULL, "memset");
    return cudaSuccess;
}
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
    if (!w || !h) return cudaSuccess;
    if (w > pitch || range_kind(p, pitch * (h - 1) + w) <= 0) {
        fprintf(stderr, "CUDA EMULATION: cudaMemset2DAsync outside device memory: %p pitch %zu %zu x %zu\n", p, pitch, w, h);
        return set_err(cudaErrorInvalidValue);
    }
    enqueue(s, [=]() { for (size_t r = 0; r < h; r++) memset((uint8_t *)p + r * pitch, v, w); }, NULL, "memset2d");
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    static int n_created;
    auto *t = new CUstream_st();
    std::lock_guard<emu_mutex> lk(streams_mu);
    t->x.id = ++n_created;
    streams.push_back(t);
    *s = t;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    run_stream(s);
    std::lock_guard<emu_mutex> lk(streams_mu);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == s) {
            streams.erase(streams.begin() + i);
            for (auto &set : s->x.stacks)
                for (void *st : set)
                    if (st) free_stack(st);
#if defined(EMU_TSAN)
            for (auto &set : s->x.kfib)
                for (void *f : set)
                    if (f) __tsan_destroy_fiber(f);
            if (s->x.fib) __tsan_destroy_fiber(s->x.fib), free_stack(s->x.op_stack);
#endif
            delete s;
            return cudaSuccess;
        }
    return set_err(cudaErrorInvalidValue);
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (capturing(s)) {
        fprintf(stderr, "CUDA EMULATION: cudaStreamSynchronize on a capturing stream\n");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    run_stream(s);
    host_waited(s);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (defer && s && !s->q.empty()) return cudaErrorNotReady;
    host_waited(s);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new CUevent_st();
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->captured_in = capturing(s) ? s : NULL;
    if (e->captured_in) return cudaSuccess;
    std::lock_guard<emu_mutex> lk(streams_mu);
    uint64_t g = ++e->gen;
    e->where = s && is_stream(s) ? s : NULL;
    auto rec = std::make_shared<char>(0);
    e->rec = rec;
    enqueue(s, [=]() {
        e->t = now_ms(), e->done = e->done > g ? e->done : g;
        HB_REL(rec.get());
    }, NULL, "event");
    return cudaSuccess;
}
static cudaError_t event_host_check(cudaEvent_t e, const char *what) {
    if (e->captured_in && e->captured_in->capturing) {
        fprintf(stderr, "CUDA EMULATION: %s of an event recorded in a capture\n", what);
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    cudaError_t r = event_host_check(e, "cudaEventQuery");
    if (r != cudaSuccess) return r;
    std::lock_guard<emu_mutex> lk(streams_mu);
    if (e->done < e->gen) step_for(e->where, 0); /* a host polling the event sees it pass */
    if (e->done < e->gen) return cudaErrorNotReady;
    if (e->rec) HB_ACQ(e->rec.get());
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    cudaError_t r = event_host_check(e, "cudaEventSynchronize");
    if (r != cudaSuccess) return r;
    uint64_t g = e->gen;
    CUstream_st *w = e->where;
    std::shared_ptr<char> rec = e->rec;
    run_until([=] { return e->done >= g; }, [=] { return w; });
    if (rec) HB_ACQ(rec.get());
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    if (e->captured_in && e->captured_in->capturing && !capturing(s)) {
        fprintf(stderr, "CUDA EMULATION: a stream waits on an event of a capture (it would join the capture)\n");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    if (capturing(s)) return cudaSuccess; /* a graph here replays on one stream, in its order */
    std::lock_guard<emu_mutex> lk(streams_mu);
    std::shared_ptr<char> rec = e->rec;
    push_op(s, [rec]() {
        if (rec) HB_ACQ(rec.get());
    }, e, e->gen, e->where);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || !is_stream(s) || s->capturing) return set_err(cudaErrorInvalidValue);
    s->capturing = 1;
    s->g = new CUgraph_st();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!capturing(s)) return set_err(cudaErrorInvalidValue);
    s->capturing = 0;
    *g = s->g;
    s->g = NULL;
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
    if (nodes)
        for (size_t i = 0; i < *n && i < g->nodes.size(); i++) nodes[i] = g->nodes[i];
    *n = g->nodes.size();
    return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t nd, cudaGraphNodeType *t) {
    *t = (cudaGraphNodeType)nd->type;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    auto *x = new CUgraphExec_st();
    for (auto *n : g->nodes) x->nodes.push_back(*n);
    *e = x;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    for (auto *n : g->nodes) delete n;
    delete g;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    return cudaSuccess;
}
static uint64_t graph_launches, graph_nodes_run;
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    if (capturing(s)) return set_err(cudaErrorStreamCaptureUnsupported);
    graph_launches++;
    std::vector<node> nodes = e->nodes; /* as launched: an update after this launch does not change it */
    enqueue(s, [nodes]() {
        for (auto &n : nodes) {
            graph_nodes_run++;
            n.fn();
        }
    }, NULL, "graph");
    return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
    memset(info, 0, sizeof *info);
    if (e->nodes.size() != g->nodes.size()) {
        info->result = cudaGraphExecUpdateErrorTopologyChanged;
        return set_err(cudaErrorGraphExecUpdateFailure);
    }
    for (size_t i = 0; i < g->nodes.size(); i++)
        if (e->nodes[i].type != g->nodes[i]->type) {
            info->result = cudaGraphExecUpdateErrorNodeTypeChanged;
            info->errorNode = g->nodes[i];
            return set_err(cudaErrorGraphExecUpdateFailure);
        }
    for (size_t i = 0; i < g->nodes.size(); i++) e->nodes[i] = *g->nodes[i];
    info->result = cudaGraphExecUpdateSuccess;
    return cudaSuccess;
}
} // extern "C"

__attribute__((destructor)) static void emu_report(void) {
    if (getenv("EMU_REPORT"))
        fprintf(stderr, "cuda emulation: %llu kernels, %llu blocks, %llu graph launches (%llu nodes), %llu operations deferred\n",
                (unsigned long long)n_kernels, (unsigned long long)n_blocks_run, (unsigned long long)graph_launches,
                (unsigned long long)graph_nodes_run, (unsigned long long)ops_deferred);
}
