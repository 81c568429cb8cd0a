/* ops.h — the CPU op table. Every op has a plain C reference (ops_generic.c); AVX2 and AVX-512
 * versions (ops_avx2.c, ops_avx512.c) implement the same functions and are tested against it.
 * The variant is chosen once at start from cpuid (cpu_detect_isa) or forced by the caller.
 * Kernels are pure functions of pointers and sizes: no globals, no allocation, no policy.
 *
 * Matrix products follow llama.cpp's CPU numerics (FORMATS.md 2.7): the f32 activation row is
 * first converted to the weight type's "activation type" (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for
 * Q4_1/Q5_1, Q8_K for K-quants, F16 for F16, BF16 for BF16, F32 for F32), then each output is the
 * dot product of one weight row with the converted activation row. */
#ifndef TKV_CPU_OPS_H
#define TKV_CPU_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "codec/kvq.h"

typedef enum { CPU_ISA_GENERIC = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 } cpu_isa;

cpu_isa cpu_detect_isa(void);            /* best variant this CPU supports */
const char *cpu_isa_name(cpu_isa isa);   /* "generic", "avx2", "avx512" */
/* The variant a kernels name asks for ("auto" or NULL: the best; "generic", "avx2", "avx512"):
 * -1 with a message for an unknown name or one this CPU lacks. */
int cpu_isa_choose(const char *kernels, cpu_isa *out, char *err, size_t errlen);

typedef struct {
    uint32_t type;      /* weight ggml type */
    uint32_t act_type;  /* activation ggml type (GGML_Q8_0, GGML_Q8_1, GGML_Q8_K, GGML_F16, GGML_BF16, GGML_F32) */
    /* f32 row of n elements -> activation row (n a multiple of the activation block size) */
    void (*quantize_act)(const float *x, void *y, int64_t n);
    /* s[0] = dot(weight row w, activation row a), n elements */
    void (*vec_dot)(int64_t n, float *s, const void *w, const void *a);
    /* s[k*s_stride + r] = dot(w + r*w_stride, a + k*a_stride) for r < nr, k < nx: a tile of nr weight
     * rows against nx activation rows, laid out like Y (token-major); must give exactly vec_dot's
     * results */
    void (*vec_dot_tile)(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, int nr,
                         const void *a, size_t a_stride, int nx);
    /* weight row -> f32 (exact dequantisation) */
    void (*dequant_row)(const void *w, float *y, int64_t n);
} cpu_type_ops;

/* NULL if the type is not supported. */
const cpu_type_ops *cpu_ops_for(uint32_t type, cpu_isa isa);

/* Layouts the kernels prefer to the file's (repack.c, repack32.c): cpu_repack_type(t, n) is the
 * type id of t's repacked rows of n elements (0 when there is none; Q4_K -> Q4_KX, Q5_0 -> Q5_0X
 * when n is a multiple of 128, ...: same bytes per row, reordered), and cpu_repack_rows rewrites
 * n_rows rows of n elements of type t into it, in place. The repacked type has its own op table
 * entries; its integers are those of the original type and its generic results the same bits
 * (tested). */
uint32_t cpu_repack_type(uint32_t type, int64_t n);
void cpu_repack_rows(uint32_t type, void *w, int64_t n, int64_t n_rows);

/* Weight geometry of a supported type: elements per block (0 if unsupported), bytes of n elements. */
int64_t cpu_type_blck(uint32_t type);
size_t cpu_weight_row_size(uint32_t type, int64_t n);

/* Bytes of an activation row of n elements for weight type `type`. */
size_t cpu_act_row_size(uint32_t type, int64_t n);

/* f32 helpers used by the forward and attention, per ISA. They must be deterministic (the same
 * inputs give the same bits on every call), which the bit-exact tiering tests rely on. */
typedef struct {
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n); /* y += a*x */
    void (*scale_f32)(float *y, float a, int64_t n);                /* y *= a */
    /* gate[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + e^-z); SIMD variants use their own exp
     * and agree with the generic expf within a few ulp (tested) */
    void (*swiglu)(float *gate, const float *up, int64_t n);
    /* Attention of one group of query heads sharing a KV head, over positions 0..n-1 in order.
     * scores: att[h*stride + j] = dot(q + h*hd, rows[j] + off) * scale for h < group, or -INFINITY
     * where rows[j] is NULL or keep[j] == 0 (keep may be NULL). Each dot sums over d in order of
     * 8-wide chunks, the same whatever `group` is. */
    void (*attn_scores)(const float *q, int group, int hd, const float *const *rows, size_t off,
                        const uint8_t *keep, int n, float scale, float *att, size_t stride);
    /* wsum: out[h*hd + d] = sum over j in order of att[h*stride + j] * rows[j][off + d], skipping
     * weights equal to 0 (evicted or masked rows are never read). */
    void (*attn_wsum)(const float *att, size_t stride, int group, int hd, const float *const *rows, size_t off,
                      int n, float *out);
    /* The unnormalised softmax over a[0..n): a[j] = exp(a[j] - max) in place (-INFINITY entries exactly
     * 0), *m the max, *l the sum of the a[j] (in double, the SIMD variants adding 8 float lanes
     * first; rounded once). Every entry masked: all 0, *m = -INFINITY, *l = 0. Attention runs it per
     * chunk of positions and merges the chunks by log-sum-exp. */
    void (*softmax_part)(float *a, int n, float *m, float *l);
    /* attn_scores and attn_wsum over fp16 rows (an f16 KV cache): each row value is widened exactly
     * to f32 and then used as above, so the results are bit for bit those of the f32 kernels on the
     * widened rows (the tests check exactly that). */
    void (*attn_scores_f16)(const float *q, int group, int hd, const uint16_t *const *rows, size_t off,
                            const uint8_t *keep, int n, float scale, float *att, size_t stride);
    void (*attn_wsum_f16)(const float *att, size_t stride, int group, int hd, const uint16_t *const *rows, size_t off,
                          int n, float *out);
    /* Attention straight from T2 records (the CPU reads T2 where it lies; kvq.h's kvq_head says where
     * one head's quants and scales lie, its offsets from the record base recs[j] points to). A T2
     * element is its level times its scale, an exact f32 product (q8h: rounded once, as decoding).
     * scores_t2: for every j with recs[j] != NULL, att[h*stride + j] = (dot(q + h*hd, k^_j) + (qc ?
     * qc[h] : 0)) * scale, or -INFINITY where keep[j] == 0; other entries are left as they are. q is
     * the rotated query when kh->rot (q . k = (R q) . (R k)), qc[h] its query's dot with the key
     * centre (centred formats). The generic dot sums over d in order, the SIMD ones in 8-wide chunks.
     * wsum_t2: attn_wsum (over fp16 rows when f16, else f32) where rows[j] != NULL, and where
     * recs[j] != NULL the T2 value head (vh->rot is 0), in one pass over j in order per output. */
    void (*attn_scores_t2)(const float *q, int group, int hd, const uint8_t *const *recs, const kvq_head *kh,
                           const float *qc, const uint8_t *keep, int n, float scale, float *att, size_t stride);
    void (*attn_wsum_t2)(const float *att, size_t stride, int group, int hd, const void *const *rows, int f16,
                         size_t off, const uint8_t *const *recs, const kvq_head *vh, int n, float *out);
    /* y[i] = tkv_f32_to_f16(x[i]) (base/half.h: round to nearest even, NaN quieted with its top
     * payload bits) for every input, bit for bit: the rows an f16 KV record is written with */
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
} cpu_f32_ops;
const cpu_f32_ops *cpu_f32_ops_for(cpu_isa isa);

#endif
