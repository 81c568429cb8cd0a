/* kvq.c — the T2 codecs, generic C (formats, rules and bounds in kvq.h).
 * Owns the block quantisers, the row layouts and the error bounds. Invariants: the encoder and the
 * bound compute a block's scale with the same function (so the bound knows the stored scale);
 * decoding only multiplies (and adds, for a min) and never sees a non-finite scale; the rotation
 * lives in kvq_rot.c. Does not allocate (a rotated head is staged on the stack, <= KVQ_ROT_MAX). */
#include <math.h>
#include <string.h>

#include "codec/kvq.h"
#include "base/err.h"
#include "base/half.h"
#include "codec/kvq_impl.h"

const kvq_info kvq_infos[KVQ_N] = {
    [KVQ_Q8H] = {"q8h", KVQ_K_Q8H, 0},   [KVQ_Q8B] = {"q8b", KVQ_K_Q8B, 0},
    [KVQ_Q8BH] = {"q8bh", KVQ_K_Q8B, 1}, [KVQ_Q4B] = {"q4b", KVQ_K_Q4S, 0},
    [KVQ_Q4BH] = {"q4bh", KVQ_K_Q4S, 1},
};

const char *kvq_name(kvq_codec c) { return (unsigned)c < KVQ_N ? kvq_infos[c].name : NULL; }

int kvq_parse(const char *name, kvq_codec *out) {
    for (int c = 0; c < KVQ_N; c++)
        if (name && strcmp(name, kvq_infos[c].name) == 0) { *out = (kvq_codec)c; return 0; }
    return -1;
}

int kvq_supported(kvq_codec c, int head_dim, char *err, size_t errlen) {
    if ((unsigned)c >= KVQ_N) return tkv_errf(err, errlen, "kvq: unknown codec %d", (int)c), 0;
    const kvq_info *in = &kvq_infos[c];
    if (head_dim < 1) return tkv_errf(err, errlen, "%s: head_dim %d is not positive", in->name, head_dim), 0;
    if (in->kind != KVQ_K_Q8H && head_dim % KVQ_BLOCK)
        return tkv_errf(err, errlen, "%s: head_dim %d is not a multiple of the block (%d)", in->name, head_dim,
                        KVQ_BLOCK), 0;
    if (in->rot && (head_dim < KVQ_ROT_MIN || head_dim > KVQ_ROT_MAX || (head_dim & (head_dim - 1))))
        return tkv_errf(err, errlen, "%s: head_dim %d is not a power of two in [%d, %d] (the Hadamard rotation)",
                        in->name, head_dim, KVQ_ROT_MIN, KVQ_ROT_MAX), 0;
    return 1;
}

size_t kvq_row_bytes(kvq_codec c, int n_head_kv, int head_dim) {
    if (!kvq_supported(c, head_dim, NULL, 0) || n_head_kv < 1) return 0;
    size_t n = (size_t)n_head_kv * (size_t)head_dim, nb = n / KVQ_BLOCK;
    switch (kvq_infos[c].kind) {
    case KVQ_K_Q8H: return n + 4 * (size_t)n_head_kv;
    case KVQ_K_Q8B: return n + 2 * nb;
    default: return n / 2 + 2 * nb;
    }
}

/* ---- groups and blocks ---- */

/* Largest |x|, NaN if any x is NaN (fmaxf would drop it). */
static float amax_of(const float *x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m || isnan(a)) m = a;
        if (isnan(m)) break;
    }
    return m;
}

static int block_in_range(float amax) { return amax >= KVQ_AMAX_MIN && amax <= KVQ_AMAX_MAX; }
static int clampi(long r, int lo, int hi) { return r < lo ? lo : r > hi ? hi : (int)r; }

/* q8h: one group (a head), symmetric, round to nearest. Returns the scale. */
static float q8h_encode(const float *x, int n, int8_t *q) {
    float amax = amax_of(x, n);
    if (!(amax > 0.0f) || !isfinite(amax) || !isfinite(127.0f / amax)) {
        memset(q, 0, (size_t)n);
        return 0.0f;
    }
    float s = amax / 127.0f, inv = 127.0f / amax;
    for (int i = 0; i < n; i++) q[i] = (int8_t)clampi(lrintf(x[i] * inv), -127, 127);
    return s;
}

static void q8h_decode(const int8_t *q, int n, float s, float *y) {
    for (int i = 0; i < n; i++) y[i] = (float)q[i] * s;
}

void kvq_q8h_encode(const float *x, int n_head_kv, int head_dim, int8_t *q, float *scales) {
    for (int g = 0; g < n_head_kv; g++) scales[g] = q8h_encode(x + (size_t)g * head_dim, head_dim, q + (size_t)g * head_dim);
}

void kvq_q8h_decode(const int8_t *q, const float *scales, int n_head_kv, int head_dim, float *y) {
    for (int g = 0; g < n_head_kv; g++) q8h_decode(q + (size_t)g * head_dim, head_dim, scales[g], y + (size_t)g * head_dim);
}

/* The stored scale of a block (bf16 bits, 0 for a block stored as zeros), shared by encode and bound. */
static uint16_t q8_scale(float amax) { return block_in_range(amax) ? tkv_f32_to_bf16(amax / 127.0f) : 0; }

/* q4b: the value of largest |x| (the first of equals) maps to level -8 exactly. */
static float q4s_xmax(const float *x, float *amax_opp) {
    float xm = 0.0f;
    for (int i = 0; i < KVQ_BLOCK; i++)
        if (fabsf(x[i]) > fabsf(xm)) xm = x[i];
    float o = 0.0f;
    for (int i = 0; i < KVQ_BLOCK; i++)
        if ((x[i] < 0) != (xm < 0)) o = fmaxf(o, fabsf(x[i]));
    *amax_opp = o;
    return xm;
}

static uint16_t q4s_scale(float amax, float xm) { return block_in_range(amax) ? tkv_f32_to_bf16(xm / -8.0f) : 0; }

static void put_nibbles(uint8_t *p, const int *q) {
    for (int j = 0; j < KVQ_BLOCK / 2; j++) p[j] = (uint8_t)(q[j] | (q[j + KVQ_BLOCK / 2] << 4));
}

/* One block of 32 values into the row record: quants at element offset e (block b = e / 32). */
static void encode_block(int kind, const float *x, uint8_t *rec, size_t n_row, size_t e) {
    size_t b = e / KVQ_BLOCK;
    float amax = amax_of(x, KVQ_BLOCK);
    if (kind == KVQ_K_Q8B) {
        uint16_t d = q8_scale(amax);
        float inv = d ? 1.0f / tkv_bf16_to_f32(d) : 0.0f;
        int8_t *qs = (int8_t *)rec + e;
        for (int i = 0; i < KVQ_BLOCK; i++) qs[i] = (int8_t)(d ? clampi(lrintf(x[i] * inv), -127, 127) : 0);
        memcpy(rec + n_row + 2 * b, &d, 2);
        return;
    }
    float opp, xm = q4s_xmax(x, &opp);
    uint16_t d = q4s_scale(amax, xm);
    float inv = d ? 1.0f / tkv_bf16_to_f32(d) : 0.0f;
    int q[KVQ_BLOCK];
    for (int i = 0; i < KVQ_BLOCK; i++) q[i] = d ? clampi(lrintf(x[i] * inv) + 8, 0, 15) : 8; /* zeros: level 8 */
    put_nibbles(rec + e / 2, q);
    memcpy(rec + n_row / 2 + 2 * b, &d, 2);
}

/* The block of elements [e, e + 32) of a row record of n_row elements into y[32]. */
static void decode_block(int kind, const uint8_t *rec, size_t n_row, size_t e, float *y) {
    size_t b = e / KVQ_BLOCK;
    uint16_t d16;
    if (kind == KVQ_K_Q8B) {
        memcpy(&d16, rec + n_row + 2 * b, 2);
        float d = tkv_bf16_to_f32(d16);
        const int8_t *qs = (const int8_t *)rec + e;
        for (int i = 0; i < KVQ_BLOCK; i++) y[i] = (float)qs[i] * d;
        return;
    }
    memcpy(&d16, rec + n_row / 2 + 2 * b, 2);
    float d = tkv_bf16_to_f32(d16);
    const uint8_t *p = rec + e / 2;
    for (int j = 0; j < KVQ_BLOCK / 2; j++) {
        y[j] = (float)((p[j] & 15) - 8) * d;
        y[j + KVQ_BLOCK / 2] = (float)((p[j] >> 4) - 8) * d;
    }
}

/* ---- rows ---- */

void kvq_encode_row(kvq_codec c, const float *x, int n_head_kv, int head_dim, void *rec) {
    TKV_ASSERT(kvq_supported(c, head_dim, NULL, 0) && n_head_kv >= 1);
    const kvq_info *in = &kvq_infos[c];
    uint8_t *r = rec;
    size_t n = (size_t)n_head_kv * (size_t)head_dim;
    if (in->kind == KVQ_K_Q8H) {
        for (int g = 0; g < n_head_kv; g++) {
            float s = q8h_encode(x + (size_t)g * head_dim, head_dim, (int8_t *)r + (size_t)g * head_dim);
            memcpy(r + n + 4 * (size_t)g, &s, 4); /* a record is not aligned */
        }
        return;
    }
    float z[KVQ_ROT_MAX];
    for (int g = 0; g < n_head_kv; g++) {
        size_t h0 = (size_t)g * head_dim;
        const float *src = x + h0;
        if (in->rot) {
            memcpy(z, src, (size_t)head_dim * sizeof(float));
            kvq_rotate(z, head_dim);
            src = z;
        }
        for (int e = 0; e < head_dim; e += KVQ_BLOCK) encode_block(in->kind, src + e, r, n, h0 + (size_t)e);
    }
}

void kvq_decode_row(kvq_codec c, const void *rec, int n_head_kv, int head_dim, float *y) {
    TKV_ASSERT(kvq_supported(c, head_dim, NULL, 0) && n_head_kv >= 1);
    const kvq_info *in = &kvq_infos[c];
    const uint8_t *r = rec;
    size_t n = (size_t)n_head_kv * (size_t)head_dim;
    if (in->kind == KVQ_K_Q8H) {
        for (int g = 0; g < n_head_kv; g++) {
            float s;
            memcpy(&s, r + n + 4 * (size_t)g, 4);
            q8h_decode((const int8_t *)r + (size_t)g * head_dim, head_dim, s, y + (size_t)g * head_dim);
        }
        return;
    }
    for (size_t e = 0; e < n; e += KVQ_BLOCK) decode_block(in->kind, r, n, e, y + e);
    if (in->rot)
        for (int g = 0; g < n_head_kv; g++) kvq_unrotate(y + (size_t)g * head_dim, head_dim);
}

void kvq_head_at(kvq_codec c, int n_head_kv, int head_dim, int g, kvq_head *out) {
    TKV_ASSERT(kvq_supported(c, head_dim, NULL, 0) && g >= 0 && g < n_head_kv);
    const kvq_info *in = &kvq_infos[c];
    size_t n = (size_t)n_head_kv * (size_t)head_dim, h0 = (size_t)g * (size_t)head_dim;
    out->rot = in->rot;
    out->per_head = in->kind == KVQ_K_Q8H;
    out->bits = in->kind == KVQ_K_Q4S ? 4 : 8;
    switch (in->kind) {
    case KVQ_K_Q8H: out->q_off = h0, out->s_off = n + 4 * (size_t)g; break;
    case KVQ_K_Q8B: out->q_off = h0, out->s_off = n + 2 * (h0 / KVQ_BLOCK); break;
    default: out->q_off = h0 / 2, out->s_off = n / 2 + 2 * (h0 / KVQ_BLOCK); break;
    }
}

/* ---- bounds ---- */

static double slack(double h, double amax) { return h * (1.0 + 0x1p-12) + 0x1p-23 * amax + 0x1p-140; }

/* The element bound of one block of x (the values the block quantiser sees). */
static double block_bound(int kind, const float *x) {
    float amax = amax_of(x, KVQ_BLOCK);
    if (!isfinite(amax)) return INFINITY;
    if (!block_in_range(amax)) return amax;
    double h;
    if (kind == KVQ_K_Q8B) h = tkv_bf16_to_f32(q8_scale(amax)) / 2.0;
    else {
        float opp, xm = q4s_xmax(x, &opp);
        double d = fabs((double)tkv_bf16_to_f32(q4s_scale(amax, xm)));
        h = fmax(d / 2.0, (double)opp - 7.0 * d);
    }
    return slack(h, amax);
}

static double head_bound(const kvq_info *in, const float *x, int hd) {
    if (in->kind == KVQ_K_Q8H) {
        float amax = amax_of(x, hd);
        if (!isfinite(amax)) return INFINITY;
        if (!(amax > 0.0f) || !isfinite(127.0f / amax)) return amax;
        return slack((amax / 127.0f) / 2.0, amax); /* the scale q8h_encode stores */
    }
    float z[KVQ_ROT_MAX];
    const float *v = x;
    if (in->rot) {
        memcpy(z, x, (size_t)hd * sizeof(float));
        kvq_rotate(z, hd);
        v = z;
    }
    double sum_b = 0.0, worst = 0.0;
    for (int e = 0; e < hd; e += KVQ_BLOCK) {
        double b = block_bound(in->kind, v + e);
        sum_b += KVQ_BLOCK * b;
        worst = fmax(worst, b);
    }
    if (!isfinite(sum_b)) return INFINITY;
    if (!in->rot) return worst;
    double l1x = 0.0, l1z = 0.0, rn = sqrt((double)hd);
    for (int i = 0; i < hd; i++) l1x += fabs((double)x[i]), l1z += fabs((double)z[i]);
    int L = 0;
    while ((1 << L) < hd) L++;
    double g = (L + 3) * 0x1p-24;
    return sum_b / rn + g * (l1x + (l1z + sum_b) / rn);
}

double kvq_error_bound(kvq_codec c, const float *x, int n_head_kv, int head_dim) {
    TKV_ASSERT(kvq_supported(c, head_dim, NULL, 0) && n_head_kv >= 1);
    double worst = 0.0;
    for (int g = 0; g < n_head_kv; g++) worst = fmax(worst, head_bound(&kvq_infos[c], x + (size_t)g * head_dim, head_dim));
    return worst;
}
