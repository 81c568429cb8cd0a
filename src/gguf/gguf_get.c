/* gguf_get.c — typed metadata getters. Tolerant in the way FORMATS.md 1.7.9 suggests: integer
 * getters accept any integer type and range-check the value; the float getter accepts f32 and f64.
 * A missing key, a value of the wrong kind, or one out of range is an error naming the key. */
#include <string.h>

#include "base/err.h"
#include "gguf/gguf.h"

static const gguf_kv *lookup(const gguf_file *f, const char *key, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) tkv_errf(err, errlen, "gguf: key '%s' not found", key);
    return kv;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Integer value as (negative?, magnitude-or-value). Returns -1 if kv is not an integer. */
static int int_value(const gguf_kv *kv, int *neg, uint64_t *u) {
    *neg = 0;
    switch (kv->type) {
    case GGUF_U8: *u = le(kv->data, 1); return 0;
    case GGUF_U16: *u = le(kv->data, 2); return 0;
    case GGUF_U32: *u = le(kv->data, 4); return 0;
    case GGUF_U64: *u = le(kv->data, 8); return 0;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: {
        int bytes = kv->type == GGUF_I8 ? 1 : kv->type == GGUF_I16 ? 2 : kv->type == GGUF_I32 ? 4 : 8;
        uint64_t v = le(kv->data, bytes);
        int bits = bytes * 8;
        if (bits < 64 && (v >> (bits - 1)) & 1) v |= ~0ull << bits; /* sign-extend */
        int64_t s;
        memcpy(&s, &v, 8);
        if (s < 0) { *neg = 1; *u = 0; return 0; }
        *u = (uint64_t)s;
        return 0;
    }
    default: return -1;
    }
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, char *err, size_t errlen) {
    const gguf_kv *kv = lookup(f, key, err, errlen);
    if (!kv) return -1;
    int neg;
    uint64_t u;
    if (int_value(kv, &neg, &u))
        return tkv_errf(err, errlen, "gguf: key '%s' has type %s, expected an integer", key, gguf_vtype_name(kv->type));
    if (neg) return tkv_errf(err, errlen, "gguf: key '%s' is negative, expected an unsigned value", key);
    *out = u;
    return 0;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, char *err, size_t errlen) {
    uint64_t u;
    if (gguf_get_u64(f, key, &u, err, errlen)) return -1;
    if (u > UINT32_MAX)
        return tkv_errf(err, errlen, "gguf: key '%s' value %llu is out of range for u32", key, (unsigned long long)u);
    *out = (uint32_t)u;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, char *err, size_t errlen) {
    const gguf_kv *kv = lookup(f, key, err, errlen);
    if (!kv) return -1;
    if (kv->type == GGUF_F32) {
        uint32_t b = (uint32_t)le(kv->data, 4);
        memcpy(out, &b, 4);
        return 0;
    }
    if (kv->type == GGUF_F64) {
        uint64_t b = le(kv->data, 8);
        double d;
        memcpy(&d, &b, 8);
        *out = (float)d;
        return 0;
    }
    return tkv_errf(err, errlen, "gguf: key '%s' has type %s, expected a float", key, gguf_vtype_name(kv->type));
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, char *err, size_t errlen) {
    const gguf_kv *kv = lookup(f, key, err, errlen);
    if (!kv) return -1;
    if (kv->type != GGUF_BOOL)
        return tkv_errf(err, errlen, "gguf: key '%s' has type %s, expected bool", key, gguf_vtype_name(kv->type));
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, char *err, size_t errlen) {
    const gguf_kv *kv = lookup(f, key, err, errlen);
    if (!kv) return -1;
    if (kv->type != GGUF_STR)
        return tkv_errf(err, errlen, "gguf: key '%s' has type %s, expected str", key, gguf_vtype_name(kv->type));
    out->ptr = (const char *)kv->data;
    out->len = kv->size;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, uint32_t *elem_type, uint64_t *n, const uint8_t **data,
                 char *err, size_t errlen) {
    const gguf_kv *kv = lookup(f, key, err, errlen);
    if (!kv) return -1;
    if (kv->type != GGUF_ARR)
        return tkv_errf(err, errlen, "gguf: key '%s' has type %s, expected an array", key, gguf_vtype_name(kv->type));
    *elem_type = kv->arr_type;
    *n = kv->arr_n;
    *data = kv->data;
    return 0;
}
