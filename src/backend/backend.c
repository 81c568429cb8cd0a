/* backend.c — the KV record formats every backend shares (their sizes are part of the seam: the KV
 * module sizes its pools by them). Opening a backend by name is open.c's, the one file that knows
 * the implementations. */
#include "backend/backend.h"

#include <string.h>

#include "codec/kvq.h"
#include "base/err.h"

/* The key and value codecs of the kvq formats (the centred ones store what their twins store). */
static int codecs_of(be_kv_fmt fmt, kvq_codec *k, kvq_codec *v) {
    switch (fmt) {
    case BE_KV_Q8B: *k = KVQ_Q8B, *v = KVQ_Q8H; return 1;
    case BE_KV_Q8BH:
    case BE_KV_Q8BHC: *k = KVQ_Q8BH, *v = KVQ_Q8H; return 1;
    case BE_KV_Q4BH:
    case BE_KV_Q4BHC: *k = KVQ_Q4BH, *v = KVQ_Q4B; return 1;
    default: return 0;
    }
}

int be_kv_fmt_centred(be_kv_fmt fmt) { return fmt == BE_KV_Q8BHC || fmt == BE_KV_Q4BHC; }

size_t be_kv_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim) {
    size_t kd = (size_t)n_head_kv * (size_t)head_dim;
    kvq_codec kc, vc;
    switch (fmt) {
    case BE_KV_F32: return 2 * kd * sizeof(float);
    case BE_KV_F16: return 2 * kd * sizeof(uint16_t);
    case BE_KV_Q8_HEAD: return 2 * kd + 2 * (size_t)n_head_kv * sizeof(float);
    default:
        if (!codecs_of(fmt, &kc, &vc)) return 0;
        return kvq_row_bytes(kc, n_head_kv, head_dim) + kvq_row_bytes(vc, n_head_kv, head_dim);
    }
}

size_t be_kv_k_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim) {
    kvq_codec kc, vc;
    return codecs_of(fmt, &kc, &vc) ? kvq_row_bytes(kc, n_head_kv, head_dim) : 0;
}

int be_kv_fmt_codecs(be_kv_fmt fmt, int *k, int *v) {
    kvq_codec kc, vc;
    if (!codecs_of(fmt, &kc, &vc)) return 0;
    *k = (int)kc, *v = (int)vc;
    return 1;
}

int be_kv_fmt_exact(be_kv_fmt fmt) { return fmt == BE_KV_F32 || fmt == BE_KV_F16; }

static const struct { be_kv_fmt fmt; const char *name; } t2_names[] = {
    {BE_KV_Q8_HEAD, "q8h"}, {BE_KV_Q8B, "q8b"},     {BE_KV_Q8BH, "q8bh"},
    {BE_KV_Q4BH, "q4bh"},   {BE_KV_Q8BHC, "q8bhc"}, {BE_KV_Q4BHC, "q4bhc"},
};

be_kv_fmt be_kv_t2_default(const char *name) {
    if (name && !strcmp(name, "cuda")) return BE_KV_Q8_HEAD; /* the only T2 codec cuda_kv.cu has */
    return BE_KV_Q8BH; /* the int8 codec that matched full on GSM8K and MATH-500 (docs/T2-CODECS.md) */
}

const char *be_kv_t2_names(void) { return "q8h, q8b, q8bh, q4bh, q8bhc, q4bhc"; } /* t2_names, in order */

const char *be_kv_t2_name(be_kv_fmt fmt) {
    for (size_t i = 0; i < sizeof t2_names / sizeof t2_names[0]; i++)
        if (t2_names[i].fmt == fmt) return t2_names[i].name;
    return "?";
}

int be_kv_t2_parse(const char *name, be_kv_fmt *out) {
    for (size_t i = 0; name && i < sizeof t2_names / sizeof t2_names[0]; i++)
        if (!strcmp(name, t2_names[i].name)) return *out = t2_names[i].fmt, 0;
    return -1;
}

int be_kv_fmt_supported(be_kv_fmt fmt, int head_dim, char *err, size_t errlen) {
    kvq_codec kc, vc;
    if (!codecs_of(fmt, &kc, &vc)) return fmt < BE_KV_N_FMT ? 1 : (tkv_errf(err, errlen, "unknown KV format %d", (int)fmt), 0);
    return kvq_supported(kc, head_dim, err, errlen) && kvq_supported(vc, head_dim, err, errlen);
}
