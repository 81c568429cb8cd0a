/* ops_avx512.c — the AVX-512 (F/BW/VL/DQ/VNNI) kernels (the Makefile builds *_avx512.c with those
 * flags). Same bodies as ops_avx2.c (ops_x86.h) on 256-bit vectors, with the integer
 * multiply-accumulate steps done by VNNI (vpdpbusd, vpdpwssd): the same integers, so the same bits
 * as the AVX2 variant. Only called when cpu_detect_isa() (or the caller) chose CPU_ISA_AVX512. */
#define CPU_X86_NAME avx512
#include "backend/cpu/ops_x86.h"
