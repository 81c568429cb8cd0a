/* ops_avx2.c — the AVX2+FMA+F16C kernels (the Makefile builds *_avx2.c with those flags).
 * The bodies live in ops_x86.h, shared with ops_avx512.c; see there for numerics and layout.
 * Only called when cpu_detect_isa() (or the caller) chose CPU_ISA_AVX2 or better. */
#define CPU_X86_NAME avx2
#include "backend/cpu/ops_x86.h"
