/* peak.h — the int8 multiply-accumulate peak of the CPU kernels' own instructions, measured: the
 * ceiling batched matmuls and prefill are compared with (`tierkv bench --int8-peak`). Each ISA's
 * loop (peak_avx2.c, peak_avx512.c, built with that ISA's flags) runs independent accumulator
 * chains of the instruction sequence its kernels use for 32 int8 products:
 *   avx512: vpdpbusd on 256-bit vectors (u8 x s8, 4 products summed into each i32 lane), as the
 *           VNNI kernels do;
 *   avx2:   vpmaddubsw (u8 x s8 pairs into i16) then vpmaddwd by ones (pairs into i32) and vpaddd.
 * No memory is read: the loop is bound by the multiply ports alone. */
#ifndef TKV_CPU_PEAK_H
#define TKV_CPU_PEAK_H
#include <stdint.h>

#include "backend/cpu/ops.h"

/* iters rounds of the ISA's loop; returns the int8 products done (sink keeps the result alive) */
uint64_t cpu_i8_loop_avx2(uint64_t iters, int32_t *sink);
uint64_t cpu_i8_loop_avx512(uint64_t iters, int32_t *sink);

/* int8 operations per second (2 per product: a multiply and an add) of `isa`'s loop on n_threads
 * threads together, timed over about `seconds`; 0 for the generic kernels (no int8 instruction). */
double cpu_int8_peak(cpu_isa isa, int n_threads, double seconds);

#endif
