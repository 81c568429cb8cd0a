/* matmul.h — Y = X · Wᵀ on the CPU worker threads, for one weight matrix and a batch of rows.
 * W is n_out rows of n_in elements in ggml type `type`; X is n_tok rows of n_in f32 (stride n_in);
 * Y is n_tok rows of n_out f32 (stride y_stride). Activations are converted once per call into
 * `scratch` (at least cpu_matmul_scratch_size bytes). Work is split over output rows, so every
 * output is computed by the same code whatever the thread count: results do not depend on it. */
#ifndef TKV_CPU_MATMUL_H
#define TKV_CPU_MATMUL_H
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/ops.h"
#include "base/workers.h"

size_t cpu_matmul_scratch_size(uint32_t type, int64_t n_in, int64_t n_tok);

/* Several matrices applied to the same X in one job (q/k/v, gate/up): one wake-up of the workers, one
 * activation conversion per activation format. Results equal separate cpu_matmul calls bit for bit. */
#define CPU_MM_MAX_PARTS 4
typedef struct {
    uint32_t type;      /* ggml type of W */
    const void *w;      /* n_out rows of n_in elements */
    int64_t n_out;
    float *y;           /* [n_tok][y_stride] */
    int64_t y_stride;
} cpu_mm_out;

size_t cpu_matmul_multi_scratch_size(const cpu_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok);
void cpu_matmul_multi(tkv_workers *workers, cpu_isa isa, const cpu_mm_out *outs, int n_outs, int64_t n_in, const float *x,
                      int64_t n_tok, void *scratch);

void cpu_matmul(tkv_workers *workers, cpu_isa isa, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y, int64_t y_stride, void *scratch);

#endif
