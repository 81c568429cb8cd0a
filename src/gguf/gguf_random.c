/* gguf_random.c — random tensor data of a ggml type (see gguf_random.h). */
#include "gguf/gguf_random.h"

#include <math.h>
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
