/* gguf_random.c — random tensor data of a ggml type (see gguf_random.h). */
#include "gguf/gguf_random.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base/half.h"
#include "gguf/gguf.h"

uint64_t gguf_rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
float gguf_rng_unif(uint64_t *s) { return (float)(gguf_rng_next(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }

/* xorshift64*'s state update as a 64x64 matrix over GF(2): col[j] is the image of bit j. */
typedef struct { uint64_t col[64]; } gf2mat;

static uint64_t gf2_apply(const gf2mat *m, uint64_t v) {
    uint64_t r = 0;
    for (int j = 0; v; j++, v >>= 1)
        if (v & 1) r ^= m->col[j];
    return r;
}

static gf2mat rng_pow2[64]; /* rng_pow2[i]: the update applied 2^i times */
static pthread_once_t rng_pow2_once = PTHREAD_ONCE_INIT;

static void rng_pow2_init(void) {
    for (int j = 0; j < 64; j++) {
        uint64_t s = 1ull << j;
        gguf_rng_next(&s);
        rng_pow2[0].col[j] = s;
    }
    for (int i = 1; i < 64; i++)
        for (int j = 0; j < 64; j++) rng_pow2[i].col[j] = gf2_apply(&rng_pow2[i - 1], rng_pow2[i - 1].col[j]);
}

uint64_t gguf_rng_skip(uint64_t s, uint64_t n) {
    pthread_once(&rng_pow2_once, rng_pow2_init);
    for (int i = 0; n; i++, n >>= 1) /* powers of one matrix commute: any order */
        if (n & 1) s = gf2_apply(&rng_pow2[i], s);
    return s;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Standard deviation of the dequantized element per unit of d, for uniformly random quant bytes
 * (with dmin/m chosen to cancel the mean where the type has one). */
static float unit_std(uint32_t t) {
    switch (t) {
    case GGML_Q4_0: return 4.6f;
    case GGML_Q5_0: case GGML_Q5_1: return 9.2f;
    case GGML_Q8_0: return 73.9f;
    case GGML_Q4_K: return 254.0f;
    case GGML_Q5_K: return 518.0f;
    case GGML_Q6_K: return 1367.0f;
    default: return 1.0f;
    }
}

uint64_t gguf_fill_draws(uint32_t t, uint64_t n) {
    if (t == GGML_F32 || t == GGML_F16 || t == GGML_BF16) return n;
    return (n / ggml_blck_size(t) * ggml_type_size(t) + 7) / 8;
}

void gguf_fill_random(uint32_t t, uint8_t *buf, uint64_t n, uint64_t n_in, uint64_t *rng) {
    float target = 0.5f / sqrtf((float)n_in);
    if (t == GGML_F32 || t == GGML_F16 || t == GGML_BF16) {
        float a = target * 1.7320508f; /* uniform(-a, a) has std a/sqrt(3) */
        for (uint64_t i = 0; i < n; i++) {
            float x = a * gguf_rng_unif(rng);
            if (t == GGML_F32) memcpy(buf + 4 * i, &x, 4);
            else put16(buf + 2 * i, t == GGML_F16 ? tkv_f32_to_f16(x) : tkv_f32_to_bf16(x));
        }
        return;
    }
    uint64_t bsize = ggml_type_size(t), nb = n / ggml_blck_size(t), bytes = nb * bsize;
    for (uint64_t i = 0; i < bytes; i += 8) {
        uint64_t r = gguf_rng_next(rng);
        for (uint64_t k = 0; k < 8 && i + k < bytes; k++) buf[i + k] = (uint8_t)(r >> (8 * k));
    }
    float d = target / unit_std(t);
    uint16_t hd = tkv_f32_to_f16(d);
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *p = buf + b * bsize;
        switch (t) {
        case GGML_Q4_0: case GGML_Q5_0: case GGML_Q8_0: put16(p, hd); break;
        case GGML_Q5_1: put16(p, hd); put16(p + 2, tkv_f32_to_f16(-15.5f * d)); break;
        case GGML_Q4_K: put16(p, hd); put16(p + 2, tkv_f32_to_f16(7.5f * d)); break;
        case GGML_Q5_K: put16(p, hd); put16(p + 2, tkv_f32_to_f16(15.5f * d)); break;
        case GGML_Q6_K: put16(p + 208, hd); break;
        default: break;
        }
    }
}
