/* kvq.h — the T2 codecs (one place, above the backends: the CPU backend encodes and decodes with
 * them, the CUDA backend's q8h kernels match them bit for bit, the KV module sizes its pools by them): one K or V row of one (token, layer), kv_dim = n_head_kv * head_dim f32
 * values (head g at [g*head_dim, (g+1)*head_dim)), encoded into a byte record and decoded back.
 * Pure functions of pointers and sizes: no globals but const tables, no allocation, no policy; the
 * KV module and the backend's op table choose which codec a pool uses (not wired here).
 *
 * Codecs (names are CLI values; keep them stable):
 *   q8h   int8, one f32 scale per head (the paper's). Also on split storage (kvq_q8h_*): the
 *         BE_KV_Q8_HEAD record keeps K's and V's quants apart from their scales.
 *   q8b   int8 in blocks of 32 values, one bf16 scale per block, symmetric.
 *   q8bh  per head, the rotation R = H D / sqrt(head_dim) (below), then q8b; decode inverts it.
 *   q4b   4 bits in blocks of 32, one bf16 scale per block, symmetric (q4_0-like levels -8..7).
 *   q4bh  the rotation, then q4b.
 * Blocks never straddle heads (head_dim % 32 == 0), so a head slice is a valid row of its own
 * (n_head_kv = 1): that is how a per-head bound is asked for.
 *
 * Records (host byte order: T2 lives in memory only; no alignment assumed; nb = kv_dim / 32):
 *   q8h          int8 q[kv_dim], f32 s[n_head_kv]            kv_dim + 4 n_head_kv bytes
 *   q8b, q8bh    int8 q[kv_dim], bf16 d[nb]                  kv_dim * 17/16
 *   q4b, q4bh    u8 p[kv_dim/2], bf16 d[nb]                  kv_dim * 9/16
 *                (block b's element j < 16 in the low nibble of p[16b + j], j + 16 in its high one)
 *
 * Why bf16 block scales (not f32, not fp16): a block's values are quantised against the scale as
 * stored (q = round(x / d_stored)), so the scale's precision only moves the grid (by <= 2^-8
 * relative), it never adds error beyond half a step; bf16 costs 2 bytes per 32 values (f32: 4) and
 * keeps f32's exponent range, where an fp16 scale would underflow for blocks with amax below ~8e-3
 * (subnormal, then zero) and overflow above ~8e6. A product q * d of a 7-bit integer and an 8-bit
 * significand is exact in f32.
 *
 * Which values a block (or q8h group) holds. q8h stores zeros (scale 0) for a group with a NaN or
 * infinite element, or whose amax is so small that 127 / amax overflows; elsewhere it equals the
 * old codec bit for bit (the old one leaves NaN elements and amax < ~3.7e-37 to lrintf's
 * unspecified result). The block codecs store zeros (scale 0) for a block whose amax is NaN,
 * infinite, below KVQ_AMAX_MIN or above KVQ_AMAX_MAX (an f16 cache cannot hold such values anyway);
 * with the rotation the rule applies to the rotated values, so a head with one non-finite value
 * decodes to zeros. All-zero groups decode to exact (+0) zeros. Decoding what the encoder wrote
 * never yields NaN or inf.
 *
 * The rotation (q8bh, q4bh). D is a fixed diagonal of +-1 (bit i of kvq_signs, i < head_dim; the
 * same for every head, layer and token, from splitmix64 with seed KVQ_SIGN_SEED, checked by a test),
 * H the Sylvester Walsh-Hadamard matrix (fast transform, head_dim a power of two in 32..256). R is
 * orthonormal, so ||R x|| = ||x|| and q . k = (R q) . (R k): an outlier channel (the same few
 * channels of a Qwen2 K head in every token) is spread over all head_dim coefficients, and the
 * random signs keep structured inputs (a constant, one channel) from landing on one coefficient.
 * An attention kernel aware of R need not invert it per token: q . k^ = (R q) . z^ (rotate q once),
 * sum_t a_t v^_t = R^T sum_t a_t z^_t (one inverse per output). The flips are 0 - x: zeros stay +0.
 *
 * Error bounds. u = 2^-24 (f32 rounding). For one q8h group or one block, with amax its largest |x|
 * and h its half step:
 *     b = h (1 + 2^-12) + 2^-23 amax + 2^-140        (rounding of x/d and of the product)
 *   q8h h = s / 2 (s the stored f32 scale, ~amax/127); q8b h = d / 2 (d ~ amax/127);
 *   q4b h = max(|d| / 2, amax_opp - 7 |d|) (d = -x_max / 8 rounded, x_max the value of largest |x|;
 *   amax_opp the largest |x| of opposite sign to x_max, which may clamp at level 7: up to ~|d|);
 *   a block stored as zeros: b = amax (inf when not finite).
 * Every element of the block: |x_i - y_i| <= b. With the rotation, per head of n = 2^L values,
 * z = R x as computed, b_j the bound of z_j's block (in z):
 *     e = (sum_j b_j) / sqrt(n) + g (||x||_1 + (||z||_1 + sum_j b_j) / sqrt(n)),  g = (L + 3) u
 * (an inverse rotation spreads each z error over all n outputs with weight 1/sqrt(n); g covers the
 * rounding of both transforms). kvq_error_bound returns the largest b (e) over the row. The
 * unrotated bounds are reached (tests: the worst error of random rows is > 0.9 b); the rotated one
 * is a worst case about 5x above what random rows show, as the n coefficient errors add in
 * quadrature, not in phase.
 * Attention scores: for a query slice q of one head, |q . k - q . k^| <= ||q||_1 e_head, where
 * e_head = kvq_error_bound(c, k_head, 1, head_dim) (the sum of |q_i| |k_i - k^_i|), exact products.
 *
 * Not here: choosing codecs per tier, records of K and V together (be_kv_fmt), threading. */
#ifndef TKV_KVQ_H
#define TKV_KVQ_H
#include <stddef.h>
#include <stdint.h>

typedef enum { KVQ_Q8H = 0, KVQ_Q8B, KVQ_Q8BH, KVQ_Q4B, KVQ_Q4BH, KVQ_N } kvq_codec;

#define KVQ_BLOCK 32
#define KVQ_ROT_MIN 32            /* rotated codecs: head_dim a power of two in [32, 256] */
#define KVQ_ROT_MAX 256
#define KVQ_AMAX_MIN 0x1p-96      /* block codecs store zeros below ... */
#define KVQ_AMAX_MAX 0x1p96       /* ... and above these */
#define KVQ_SIGN_SEED 0x7469657240717571ull

/* "q8h", ... ; NULL for a value out of range. */
const char *kvq_name(kvq_codec c);
/* 0 and *out for a known name, -1 otherwise. */
int kvq_parse(const char *name, kvq_codec *out);
/* 1 when c can encode heads of head_dim values; else 0 and a one-line reason in err. */
int kvq_supported(kvq_codec c, int head_dim, char *err, size_t errlen);
/* Bytes of one row's record; 0 when the codec does not support head_dim. */
size_t kvq_row_bytes(kvq_codec c, int n_head_kv, int head_dim);

/* x[n_head_kv * head_dim] -> rec[kvq_row_bytes]; rec -> y. head_dim must be supported (asserted). */
void kvq_encode_row(kvq_codec c, const float *x, int n_head_kv, int head_dim, void *rec);
void kvq_decode_row(kvq_codec c, const void *rec, int n_head_kv, int head_dim, float *y);
/* The same decode with AVX2 (kvq_avx2.c; call only where cpu_detect_isa() >= CPU_ISA_AVX2): equal to
 * kvq_decode_row bit for bit. */
void kvq_decode_row_avx2(kvq_codec c, const void *rec, int n_head_kv, int head_dim, float *y);

/* q8h on split storage: q[n_head_kv * head_dim] and scales[n_head_kv], the same values
 * kvq_encode_row(KVQ_Q8H) writes into one record; the decodes equal kvq_decode_row's bit for bit
 * (the AVX2 one only where cpu_detect_isa() >= CPU_ISA_AVX2). */
void kvq_q8h_encode(const float *x, int n_head_kv, int head_dim, int8_t *q, float *scales);
void kvq_q8h_decode(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *y);
void kvq_q8h_decode_avx2(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *y);

/* Reading a row record in place (an attention kernel that never decodes a whole row): where head g's
 * quants and scales lie and how they are read. Element i of the head (i < head_dim) is
 * level(i) * scale(i): bits 8, level = q[i] (int8 at q_off); bits 4, the nibble of block b = i / 32
 * as in the record layout above, level = nibble - 8 (bytes at q_off + 16 b); scale = the f32 at
 * s_off (per_head) or the bf16 of block b at s_off + 2 b. The products are kvq_decode_row's before
 * its inverse rotation (rot: the levels hold R x, so q . x = (R q) . levels*scales). */
typedef struct {
    int bits;     /* 8 or 4 */
    int per_head; /* 1: one f32 scale for the head (q8h); 0: a bf16 scale per block of 32 */
    int rot;      /* 1: the values are of R x (q8bh, q4bh) */
    size_t q_off; /* bytes from the row record to the head's first quant */
    size_t s_off; /* bytes from the row record to the head's scale(s) */
} kvq_head;
void kvq_head_at(kvq_codec c, int n_head_kv, int head_dim, int g, kvq_head *out);

/* The bound above: max over the row of the elements' bounds (INFINITY if a value is not finite). */
double kvq_error_bound(kvq_codec c, const float *x, int n_head_kv, int head_dim);

/* The rotation of one head in place (n a power of two, 1 <= n <= KVQ_ROT_MAX, asserted):
 * kvq_rotate x <- H D x / sqrt(n); kvq_unrotate x <- D H x / sqrt(n), its inverse. As computed, for
 * n = 2^L: |unrotate(rotate(x))_i - x_i| <= 2 (L + 3) u ||x||_1 and
 * | ||rotate(x)|| - ||x|| | <= (L + 3) u ||x||_1. */
void kvq_rotate(float *x, int n);
void kvq_unrotate(float *x, int n);
extern const uint64_t kvq_signs[KVQ_ROT_MAX / 64]; /* bit i set: D_ii = -1 */

#endif
