/* half.h — exact fp16/bf16 <-> f32 conversions (FORMATS.md 2.2), portable C, no intrinsics. */
#ifndef TKV_HALF_H
#define TKV_HALF_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float tkv_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t tkv_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* f16 -> f32, exact including subnormals, inf and NaN. */
static inline float tkv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return tkv_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return tkv_bits_f32(sign);
        float f = (float)man * (1.0f / 16777216.0f); /* man * 2^-24 */
        return sign ? -f : f;
    }
    return tkv_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* f32 -> f16, IEEE round to nearest even; a NaN stays a NaN, quieted, with its top 10 payload bits
 * (as x86's vcvtps2ph converts it). */
static inline uint16_t tkv_f32_to_f16(float f) {
    uint32_t x = tkv_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                  /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;         /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (112 - e) + 1 ... result = m >> (shift) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax - 0x38000000u) >> 13);
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

/* A row of n fp16 values widened exactly (rows the other way: the CPU op table's f32_to_f16). */
static inline void tkv_f16_row_to_f32(const uint16_t *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = tkv_f16_to_f32(x[i]);
}

static inline float tkv_bf16_to_f32(uint16_t h) { return tkv_bits_f32((uint32_t)h << 16); }

static inline uint16_t tkv_f32_to_bf16(float f) {
    uint32_t x = tkv_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static inline uint16_t tkv_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t tkv_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#endif
