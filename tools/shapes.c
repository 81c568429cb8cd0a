/* shapes.c — the known models' shapes and random weights (see shapes.h). */
#include "shapes.h"

#include <math.h>
#include <string.h>

#include "base/half.h"
#include "gguf/gguf.h"

/* MODELS.md "Shapes"; eps 1e-6 for the Qwen family as FORMATS.md 4.2 says. */
const model_shape shapes_table[] = {
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1e6f, 1e-6f, 1},
    {"qwen2.5-coder-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151936, 32768, 1e6f, 1e-6f, 0},
    {"r1-distill-qwen-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151936, 131072, 1e4f, 1e-6f, 0},
    {"r1-distill-qwen-7b", "qwen2", 28, 3584, 28, 4, 18944, 152064, 131072, 1e4f, 1e-6f, 0},
    {"r1-distill-qwen-14b", "qwen2", 48, 5120, 40, 8, 13824, 152064, 131072, 1e6f, 1e-6f, 0},
    {"r1-distill-qwen-32b", "qwen2", 64, 5120, 40, 8, 27648, 152064, 131072, 1e6f, 1e-6f, 0},
    {"llama-70b", "llama", 80, 8192, 64, 8, 28672, 128256, 131072, 5e5f, 1e-5f, 0},
};
const size_t shapes_n = sizeof shapes_table / sizeof shapes_table[0];

const model_shape *shapes_find(const char *name) {
    for (size_t i = 0; name && i < shapes_n; i++)
        if (!strcmp(shapes_table[i].name, name)) return &shapes_table[i];
    return NULL;
}

/* ---- random data ---- */

uint64_t shapes_rng_next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
float shapes_rng_unif(uint64_t *s) { return (float)(shapes_rng_next(s) >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; }

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

void shapes_fill(uint32_t t, uint8_t *buf, uint64_t n, uint64_t n_in, uint64_t *rng) {
    float target = 0.5f / sqrtf((float)n_in);
    if (t == GGML_F32 || t == GGML_F16 || t == GGML_BF16) {
        float a = target * 1.7320508f; /* uniform(-a, a) has std a/sqrt(3) */
        for (uint64_t i = 0; i < n; i++) {
            float x = a * shapes_rng_unif(rng);
            if (t == GGML_F32) memcpy(buf + 4 * i, &x, 4);
            else put16(buf + 2 * i, t == GGML_F16 ? tkv_f32_to_f16(x) : tkv_f32_to_bf16(x));
        }
        return;
    }
    uint64_t bsize = ggml_type_size(t), nb = n / ggml_blck_size(t), bytes = nb * bsize;
    for (uint64_t i = 0; i < bytes; i += 8) {
        uint64_t r = shapes_rng_next(rng);
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
