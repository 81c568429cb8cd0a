/* matmul.h — Y = X · Wᵀ on the CPU thread pool, for one weight matrix and a batch of rows.
 * W is n_out rows of n_in elements in ggml type `type`; X is n_tok rows of n_in f32 (stride n_in);
 * Y is n_tok rows of n_out f32 (stride y_stride). Activations are converted once per call into
 * `scratch` (at least cpu_matmul_scratch_size bytes). Work is split over output rows, so every
 * output is computed by the same code whatever the thread count: results do not depend on it. */
#ifndef TKV_CPU_MATMUL_H
#define TKV_CPU_MATMUL_H
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/ops.h"
#include "base/pool.h"

size_t cpu_matmul_scratch_size(uint32_t type, int64_t n_in, int64_t n_tok);

void cpu_matmul(tkv_pool *pool, cpu_isa isa, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y, int64_t y_stride, void *scratch);

#endif
