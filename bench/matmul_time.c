/* matmul_time.c — the time of one CPU matmul (backend/cpu/matmul.h) on random weights, for kernel
 * work in docs/BENCHMARKS.md. Not a test: it prints one line per run, and the hash of Y so that two
 * builds can be checked to give the same bits.
 *
 *   build/bench/matmul_time TYPE N_IN N_OUT N_TOK [THREADS [REPS]]
 *
 * TYPE: q4_KX or q6_KX (the layouts the 1.5B's Q4_K and Q6_K weights run in). Weights are random
 * bytes with fixed f16 scales (2^-7), activations uniform in [-0.5, 0.5), fixed seed; kernels as
 * cpuid chooses. Prints the median of REPS calls (default 21) in ms and as cycles per 256-element
 * block and token per thread at a nominal 3.1 GHz (a scale, not a measured clock). Shapes of the
 * 1.5B: q/k/v and o 1536 -> 1536, gate/up 1536 -> 8960, down 8960 -> 1536, output 1536 -> 151936. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_impl.h"
#include "base/clock.h"
#include "base/version.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: matmul_time q4_KX|q6_KX N_IN N_OUT N_TOK [THREADS [REPS]]\n");
        return 2;
    }
    int q6 = !strcmp(argv[1], "q6_KX");
    if (!q6 && strcmp(argv[1], "q4_KX")) {
        fprintf(stderr, "matmul_time: type %s: not q4_KX or q6_KX\n", argv[1]);
        return 2;
    }
    int64_t n_in = atoll(argv[2]), n_out = atoll(argv[3]), n_tok = atoll(argv[4]);
    int threads = argc > 5 ? atoi(argv[5]) : 2, reps = argc > 6 ? atoi(argv[6]) : 21;
    if (n_in <= 0 || n_in % CPU_QKK || n_out <= 0 || n_tok <= 0 || threads < 1 || reps < 1) {
        fprintf(stderr, "matmul_time: N_IN must be a positive multiple of 256; N_OUT, N_TOK, THREADS, REPS positive\n");
        return 2;
    }
    uint32_t type = q6 ? CPU_T_Q6_KX : CPU_T_Q4_KX;
    size_t bs = q6 ? CPU_BS_Q6_KX : CPU_BS_Q4_KX, row = cpu_weight_row_size(type, n_in);
    uint8_t *w = malloc(row * (size_t)n_out);
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok)), *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    void *scratch = malloc(cpu_matmul_scratch_size(type, n_in, n_tok));
    double *t = malloc(sizeof(double) * (size_t)reps);
    tkv_pool *pool = pool_init(threads);
    if (!w || !x || !y || !scratch || !t || !pool) {
        fprintf(stderr, "matmul_time: out of memory\n");
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < row * (size_t)n_out; i++) w[i] = (uint8_t)rand();
    const uint16_t scale = 0x2000; /* f16 2^-7 */
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t b = 0; b < n_in / CPU_QKK; b++) {
            uint8_t *blk = w + (size_t)r * row + (size_t)b * bs;
            if (q6) memcpy(blk + 208, &scale, 2);
            else memcpy(blk, &scale, 2), memcpy(blk + 2, &scale, 2);
        }
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    cpu_isa isa = cpu_detect_isa();
    for (int k = 0; k < reps; k++) {
        double t0 = tkv_now_s();
        cpu_matmul(pool, isa, type, w, n_in, n_out, x, n_tok, y, n_out, scratch);
        t[k] = tkv_now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    double med = t[reps / 2], blocks = (double)n_out * (double)(n_in / CPU_QKK) * (double)n_tok;
    uint64_t h = tkv_fnv1a64(y, sizeof(float) * (size_t)(n_out * n_tok));
    printf("%s %lld -> %lld, %lld tokens, %d threads: median %.3f ms (of %d), %.2f cycles/block/token/thread at 3.1 GHz, "
           "Y hash %016llx\n", argv[1], (long long)n_in, (long long)n_out, (long long)n_tok, threads, med * 1e3, reps,
           med * 3.1e9 * threads / blocks, (unsigned long long)h);
    pool_free(pool);
    free(t), free(scratch), free(y), free(x), free(w);
    return 0;
}
