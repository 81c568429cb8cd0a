/* peak.c — the driver of peak.h: every thread runs the ISA's loop for the same number of rounds;
 * the products of all of them over the wall time of the slowest. */
#include "backend/cpu/peak.h"

#include "base/clock.h"
#include "base/workers.h"

typedef struct {
    cpu_isa isa;
    uint64_t iters;
    int32_t sink[64];
    uint64_t products[64];
} peak_job;

static void peak_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    peak_job *J = ctx;
    for (int64_t i = i0; i < i1; i++) {
        uint64_t n = J->isa == CPU_ISA_AVX512 ? cpu_i8_loop_avx512(J->iters, &J->sink[tid & 63])
                                              : cpu_i8_loop_avx2(J->iters, &J->sink[tid & 63]);
        J->products[tid & 63] += n;
    }
}

double cpu_int8_peak(cpu_isa isa, int n_threads, double seconds) {
    if (isa != CPU_ISA_AVX2 && isa != CPU_ISA_AVX512) return 0;
    if (n_threads < 1) n_threads = 1;
    tkv_workers *w = workers_init(n_threads);
    peak_job J = {.isa = isa, .iters = 1 << 16};
    /* calibrate on one item per thread until a round takes a tenth of the time asked */
    double dt = 0;
    while (J.iters < (1ull << 40)) {
        double t0 = tkv_now_s();
        workers_for(w, n_threads, peak_task, &J);
        dt = tkv_now_s() - t0;
        if (dt > seconds / 10) break;
        J.iters *= 4;
    }
    for (int i = 0; i < 64; i++) J.products[i] = 0;
    int items = n_threads * 10; /* claimed in chunks: each thread ends within about one item of the others */
    double t0 = tkv_now_s();
    workers_for(w, items, peak_task, &J);
    dt = tkv_now_s() - t0;
    workers_free(w);
    uint64_t total = 0;
    for (int i = 0; i < 64; i++) total += J.products[i];
    return dt > 0 ? 2.0 * (double)total / dt : 0;
}
