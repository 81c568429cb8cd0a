/* cpu_detect.c — picks the kernel variant and maps (weight type, isa) to an op table.
 * Detection asks cpuid for the instructions and xgetbv for the OS saving the wider register state
 * (a CPU can have AVX-512 that the kernel does not enable). AVX-512 means F+BW+VL+DQ+VNNI, AVX2
 * means AVX2+FMA+F16C; anything less is generic. The tables are constant data: a fast variant that
 * lacks a function names the generic one in its slot (Q4_1/Q5_1 and every dequant_row are generic). No environment is read here: the caller
 * passes the isa (main may force one from a flag). This file is compiled without ISA flags. */
#include <cpuid.h>

#include "backend/cpu/ops_impl.h"

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

cpu_isa cpu_detect_isa(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CPU_ISA_GENERIC;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return CPU_ISA_GENERIC;
    uint64_t xcr0 = read_xcr0();
    if ((xcr0 & 0x6) != 0x6) return CPU_ISA_GENERIC; /* SSE and AVX state */
    if (__get_cpuid_max(0, NULL) < 7) return CPU_ISA_GENERIC;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    if (!(avx2 && fma && f16c)) return CPU_ISA_GENERIC;
    if (f && dq && bw && vl && vnni && (xcr0 & 0xe0) == 0xe0) return CPU_ISA_AVX512; /* opmask, zmm state */
    return CPU_ISA_AVX2;
}

const char *cpu_isa_name(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    default: return "generic";
    }
}

#define OPS(T, A, qisa, qt, disa, t) \
    {T, A, cpu_##qisa##_quant_##qt, cpu_##disa##_dot_##t, cpu_##disa##_dottile_##t, cpu_gen_dequant_##t}

static const cpu_type_ops gen_table[] = {
    OPS(CPU_T_F32, CPU_T_F32, gen, f32, gen, f32),     OPS(CPU_T_F16, CPU_T_F16, gen, f16, gen, f16),
    OPS(CPU_T_BF16, CPU_T_BF16, gen, bf16, gen, bf16), OPS(CPU_T_Q4_0, CPU_T_Q8_0, gen, q8_0, gen, q4_0),
    OPS(CPU_T_Q4_1, CPU_T_Q8_1, gen, q8_1, gen, q4_1), OPS(CPU_T_Q5_0, CPU_T_Q8_0, gen, q8_0, gen, q5_0),
    OPS(CPU_T_Q5_1, CPU_T_Q8_1, gen, q8_1, gen, q5_1), OPS(CPU_T_Q8_0, CPU_T_Q8_0, gen, q8_0, gen, q8_0),
    OPS(CPU_T_Q4_K, CPU_T_Q8_K, gen, q8_K, gen, q4_K), OPS(CPU_T_Q5_K, CPU_T_Q8_K, gen, q8_K, gen, q5_K),
    OPS(CPU_T_Q6_K, CPU_T_Q8_K, gen, q8_K, gen, q6_K),  OPS(CPU_T_Q4_KX, CPU_T_Q8_KX, gen, q8_KX, gen, q4_KX),
    OPS(CPU_T_Q6_KX, CPU_T_Q8_KX6, gen, q8_KX6, gen, q6_KX),
    OPS(CPU_T_Q5_0X, CPU_T_Q8_0XA, gen, q8_0XA, gen, q5_0X), OPS(CPU_T_Q8_0X, CPU_T_Q8_0XA, gen, q8_0XA, gen, q8_0X),
};

static const cpu_type_ops avx2_table[] = {
    OPS(CPU_T_F32, CPU_T_F32, gen, f32, avx2, f32),     OPS(CPU_T_F16, CPU_T_F16, gen, f16, avx2, f16),
    OPS(CPU_T_BF16, CPU_T_BF16, gen, bf16, avx2, bf16), OPS(CPU_T_Q4_0, CPU_T_Q8_0, avx2, q8_0, avx2, q4_0),
    OPS(CPU_T_Q4_1, CPU_T_Q8_1, gen, q8_1, gen, q4_1),   OPS(CPU_T_Q5_0, CPU_T_Q8_0, avx2, q8_0, avx2, q5_0),
    OPS(CPU_T_Q5_1, CPU_T_Q8_1, gen, q8_1, gen, q5_1),   OPS(CPU_T_Q8_0, CPU_T_Q8_0, avx2, q8_0, avx2, q8_0),
    OPS(CPU_T_Q4_K, CPU_T_Q8_K, avx2, q8_K, avx2, q4_K), OPS(CPU_T_Q5_K, CPU_T_Q8_K, avx2, q8_K, avx2, q5_K),
    OPS(CPU_T_Q6_K, CPU_T_Q8_K, avx2, q8_K, avx2, q6_K), OPS(CPU_T_Q4_KX, CPU_T_Q8_KX, avx2, q8_KX, avx2, q4_KX),
    OPS(CPU_T_Q6_KX, CPU_T_Q8_KX6, avx2, q8_KX6, avx2, q6_KX),
    OPS(CPU_T_Q5_0X, CPU_T_Q8_0XA, avx2, q8_0XA, avx2, q5_0X), OPS(CPU_T_Q8_0X, CPU_T_Q8_0XA, avx2, q8_0XA, avx2, q8_0X),
};

static const cpu_type_ops avx512_table[] = {
    OPS(CPU_T_F32, CPU_T_F32, gen, f32, avx512, f32),     OPS(CPU_T_F16, CPU_T_F16, gen, f16, avx512, f16),
    OPS(CPU_T_BF16, CPU_T_BF16, gen, bf16, avx512, bf16), OPS(CPU_T_Q4_0, CPU_T_Q8_0, avx512, q8_0, avx512, q4_0),
    OPS(CPU_T_Q4_1, CPU_T_Q8_1, gen, q8_1, gen, q4_1),   OPS(CPU_T_Q5_0, CPU_T_Q8_0, avx512, q8_0, avx512, q5_0),
    OPS(CPU_T_Q5_1, CPU_T_Q8_1, gen, q8_1, gen, q5_1),   OPS(CPU_T_Q8_0, CPU_T_Q8_0, avx512, q8_0, avx512, q8_0),
    OPS(CPU_T_Q4_K, CPU_T_Q8_K, avx512, q8_K, avx512, q4_K), OPS(CPU_T_Q5_K, CPU_T_Q8_K, avx512, q8_K, avx512, q5_K),
    OPS(CPU_T_Q6_K, CPU_T_Q8_K, avx512, q8_K, avx512, q6_K), OPS(CPU_T_Q4_KX, CPU_T_Q8_KX, avx512, q8_KX, avx512, q4_KX),
    OPS(CPU_T_Q6_KX, CPU_T_Q8_KX6, avx512, q8_KX6, avx512, q6_KX),
    OPS(CPU_T_Q5_0X, CPU_T_Q8_0XA, avx512, q8_0XA, avx512, q5_0X), OPS(CPU_T_Q8_0X, CPU_T_Q8_0XA, avx512, q8_0XA, avx512, q8_0X),
};

#define N_TYPES (sizeof gen_table / sizeof gen_table[0])

const cpu_type_ops *cpu_ops_for(uint32_t type, cpu_isa isa) {
    const cpu_type_ops *t = isa == CPU_ISA_AVX512 ? avx512_table : isa == CPU_ISA_AVX2 ? avx2_table : gen_table;
    for (size_t i = 0; i < N_TYPES; i++)
        if (t[i].type == type) return &t[i];
    return NULL;
}

size_t cpu_act_row_size(uint32_t type, int64_t n) {
    const cpu_type_ops *o = cpu_ops_for(type, CPU_ISA_GENERIC);
    if (!o) return 0;
    switch (o->act_type) {
    case CPU_T_F32: return (size_t)n * 4;
    case CPU_T_F16: case CPU_T_BF16: return (size_t)n * 2;
    case CPU_T_Q8_0: return (size_t)(n / CPU_QK) * CPU_BS_Q8_0;
    case CPU_T_Q8_1: return (size_t)(n / CPU_QK) * CPU_BS_Q8_1;
    case CPU_T_Q8_K: return (size_t)(n / CPU_QKK) * CPU_BS_Q8_K;
    case CPU_T_Q8_KX6: return (size_t)(n / CPU_QKK) * CPU_BS_Q8_KX6;
    case CPU_T_Q8_KX: return (size_t)(n / CPU_QKK) * CPU_BS_Q8_KX;
    case CPU_T_Q8_0XA: return (size_t)(n / CPU_QKX) * CPU_BS_Q8_0XA;
    default: return 0;
    }
}

/* Weight geometry (FORMATS.md 2.1): elements per block and bytes per block. */
static const struct { uint32_t type, blck, size; } geometry[] = {
    {CPU_T_F32, 1, 4},          {CPU_T_F16, 1, 2},          {CPU_T_BF16, 1, 2},
    {CPU_T_Q4_0, 32, CPU_BS_Q4_0}, {CPU_T_Q4_1, 32, CPU_BS_Q4_1}, {CPU_T_Q5_0, 32, CPU_BS_Q5_0},
    {CPU_T_Q5_1, 32, CPU_BS_Q5_1}, {CPU_T_Q8_0, 32, CPU_BS_Q8_0}, {CPU_T_Q4_K, 256, CPU_BS_Q4_K},
    {CPU_T_Q5_K, 256, CPU_BS_Q5_K}, {CPU_T_Q6_K, 256, CPU_BS_Q6_K}, {CPU_T_Q4_KX, 256, CPU_BS_Q4_KX},
    {CPU_T_Q6_KX, 256, CPU_BS_Q6_KX}, {CPU_T_Q5_0X, CPU_QKX, CPU_BS_Q5_0X}, {CPU_T_Q8_0X, CPU_QKX, CPU_BS_Q8_0X},
};

int64_t cpu_type_blck(uint32_t type) {
    for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
        if (geometry[i].type == type) return geometry[i].blck;
    return 0;
}

size_t cpu_weight_row_size(uint32_t type, int64_t n) {
    for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
        if (geometry[i].type == type) return (size_t)(n / geometry[i].blck) * geometry[i].size;
    return 0;
}

static const cpu_f32_ops f32_gen = {cpu_gen_dot_f32v, cpu_gen_axpy_f32, cpu_gen_scale_f32, cpu_gen_swiglu, cpu_gen_attn_scores,
                                     cpu_gen_attn_wsum, cpu_gen_softmax_part,
                                     cpu_gen_attn_scores_f16, cpu_gen_attn_wsum_f16, cpu_gen_attn_scores_t2, cpu_gen_attn_wsum_t2, cpu_gen_f32_to_f16};
static const cpu_f32_ops f32_avx2 = {cpu_avx2_dot_f32v, cpu_avx2_axpy_f32, cpu_avx2_scale_f32, cpu_avx2_swiglu, cpu_avx2_attn_scores,
                                     cpu_avx2_attn_wsum, cpu_avx2_softmax_part,
                                     cpu_avx2_attn_scores_f16, cpu_avx2_attn_wsum_f16, cpu_avx2_attn_scores_t2, cpu_avx2_attn_wsum_t2, cpu_avx2_f32_to_f16};
static const cpu_f32_ops f32_avx512 = {cpu_avx512_dot_f32v, cpu_avx512_axpy_f32, cpu_avx512_scale_f32, cpu_avx512_swiglu, cpu_avx512_attn_scores,
                                     cpu_avx512_attn_wsum, cpu_avx512_softmax_part,
                                     cpu_avx512_attn_scores_f16, cpu_avx512_attn_wsum_f16, cpu_avx512_attn_scores_t2, cpu_avx512_attn_wsum_t2, cpu_avx512_f32_to_f16};

const cpu_f32_ops *cpu_f32_ops_for(cpu_isa isa) {
    return isa == CPU_ISA_AVX512 ? &f32_avx512 : isa == CPU_ISA_AVX2 ? &f32_avx2 : &f32_gen;
}
