/* cmd_mutate_gguf.c — `tierkv mutate-gguf IN.gguf -o DIR [--seed N] [--only TEXT]`: writes malformed
 * variants of a valid GGUF model, each named for what it breaks, and DIR/MANIFEST.tsv with one line
 * per file: name, what the loader must do (error: inspect and run exit 1; no-model: a file without
 * tensors, which inspect shows and run refuses; valid: both load it), a text its error must contain
 * (alternatives split by '|', empty: any message) and what was changed.
 *
 * The mutations, all computed from the input's own layout (gguf_parse's index):
 *   truncations at every structure boundary: inside the header, at and inside each KV pair, at each
 *   tensor info, in the alignment padding, at and inside the data; counts and sizes at their limits
 *   and beyond (n_tensors, n_kv, key/string/array lengths, dimensions 0 / huge / overflowing);
 *   overlapping, out-of-range and misaligned tensor data; bad general.alignment values and types;
 *   bad UTF-8 and control bytes in keys, names and strings; type confusion of metadata keys and
 *   array elements; tensors and metadata that contradict each other (n_embd, layers, vocabulary,
 *   a missing tensor, a norm or bias in a quantised type, a row that is no whole number of blocks);
 *   and a few changes that leave the file loadable, listed as valid (never silently generated).
 * Deterministic: the same input and --seed give the same files (the seed picks bytes and tensors
 * where one of several would do). --sparse leaves the tensor data of every variant that must fail
 * as a hole (zeros that take no disk): what breaks those files lies in their header and length,
 * and the test that makes a few thousand of them then writes megabytes instead of gigabytes; the
 * valid variants keep the input's data. The machinery (layout, edits, writing) is in mutate.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "cmds.h"
#include "gguf/gguf.h"
#include "mutate.h"
#include "out.h"

#define EMIT(...) do { if (mut_emit(__VA_ARGS__)) return -1; } while (0)

static int header_variants(mut_ctx *m) {
    const mut_layout *L = m->L;
    uint64_t nt = L->f.n_tensors, nk = L->f.n_kv;
    mut_edit e[MUT_MAX_EDITS];
    e[0] = mut_splice(0, 4, "GGUX", 4);
    EMIT(m, "hdr-magic", "error", "magic", "magic GGUX", e, 1, 0, 0);
    static const struct { const char *name; uint32_t v; const char *says; } ver[] = {
        {"hdr-version-1", 1, "version"}, {"hdr-version-4", 4, "version"}, {"hdr-version-big-endian", 0x03000000u, "big-endian"}};
    for (int i = 0; i < 3; i++) {
        e[0] = mut_patch(4, ver[i].v, 4);
        EMIT(m, ver[i].name, "error", ver[i].says, "version field", e, 1, 0, 0);
    }
    /* n_tensors: 0 leaves a vocabulary-only file; 1 and n-1 cut the table short (the rest becomes padding) */
    e[0] = mut_patch(8, 0, 8);
    EMIT(m, "hdr-n_tensors-0", "no-model", "missing", "n_tensors 0: a file without tensors", e, 1, 0, 0);
    e[0] = mut_patch(8, 1, 8);
    EMIT(m, "hdr-n_tensors-1", "error", "missing", "n_tensors 1", e, 1, 0, 0);
    int last_required = mut_required_tensor(L, L->f.tensors[nt - 1].name);
    e[0] = mut_patch(8, nt - 1, 8);
    EMIT(m, "hdr-n_tensors-minus-1", last_required ? "error" : "valid", last_required ? "missing" : "",
         "n_tensors one less: the last tensor info is read as padding", e, 1, 0, 0);
    e[0] = mut_patch(8, nt + 1, 8);
    EMIT(m, "hdr-n_tensors-plus-1", "error", "", "n_tensors one more: padding or data read as a tensor info", e, 1, 0, 0);
    static const uint64_t huge[] = {1ull << 32, 1ull << 63, UINT64_MAX};
    static const char *const hname[] = {"2^32", "2^63", "max"};
    char name[160];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "hdr-n_tensors-%s", hname[i]);
        e[0] = mut_patch(8, huge[i], 8);
        EMIT(m, name, "error", "n_tensors", "n_tensors beyond what the bytes can hold", e, 1, 0, 0);
        snprintf(name, sizeof name, "hdr-n_kv-%s", hname[i]);
        e[0] = mut_patch(16, huge[i], 8);
        EMIT(m, name, "error", "n_kv", "n_kv beyond what the bytes can hold", e, 1, 0, 0);
    }
    e[0] = mut_patch(16, 0, 8);
    EMIT(m, "hdr-n_kv-0", "error", "", "n_kv 0: the KV pairs read as tensor infos", e, 1, 0, 0);
    e[0] = mut_patch(16, nk - 1, 8);
    EMIT(m, "hdr-n_kv-minus-1", "error", "", "n_kv one less: the last KV pair read as a tensor info", e, 1, 0, 0);
    e[0] = mut_patch(16, nk + 1, 8);
    EMIT(m, "hdr-n_kv-plus-1", "error", "", "n_kv one more: the first tensor info read as a KV pair", e, 1, 0, 0);
    return 0;
}

static int truncations(mut_ctx *m) {
    const mut_layout *L = m->L;
    char name[200], what[200];
    mut_edit e[1];
#define CUT(k, nm, wh, says)                                                                                 \
    do {                                                                                                     \
        e[0] = mut_splice((k), L->size - (k), NULL, 0);                                                          \
        EMIT(m, nm, "error", says, wh, e, 1, 0, 0);                                                          \
    } while (0)
    static const size_t hdr_cuts[] = {0, 3, 4, 8, 16, 23, 24};
    for (size_t i = 0; i < sizeof hdr_cuts / sizeof hdr_cuts[0]; i++) {
        snprintf(name, sizeof name, "trunc-header-at-%zu", hdr_cuts[i]);
        snprintf(what, sizeof what, "the file cut to %zu bytes", hdr_cuts[i]);
        CUT(hdr_cuts[i], name, what, hdr_cuts[i] == 0 ? "empty" : hdr_cuts[i] < 24 ? "too small" : "");
    }
    for (uint64_t i = 0; i < L->f.n_kv; i++) {
        const gguf_kv *kv = &L->f.kv[i];
        int kl = (int)(kv->key.len < 60 ? kv->key.len : 60);
        snprintf(name, sizeof name, "trunc-kv-%02llu-start-%.*s", (unsigned long long)i, kl, kv->key.ptr);
        snprintf(what, sizeof what, "cut at the start of KV pair %llu", (unsigned long long)i);
        if (i) CUT(L->kv_at[i], name, what, ""); /* KV 0 starts at 24, cut above */
        size_t mid = L->kv_type_at[i] + 4 + (L->kv_end[i] - L->kv_type_at[i] - 4) / 2;
        snprintf(name, sizeof name, "trunc-kv-%02llu-inside-%.*s", (unsigned long long)i, kl, kv->key.ptr);
        snprintf(what, sizeof what, "cut inside the value of KV pair %llu", (unsigned long long)i);
        CUT(mid, name, what, "");
    }
    for (uint64_t i = 0; i < L->f.n_tensors; i++) {
        const gguf_tensor *t = &L->f.tensors[i];
        snprintf(name, sizeof name, "trunc-tensor-info-%02llu-%.*s", (unsigned long long)i, (int)t->name.len, t->name.ptr);
        snprintf(what, sizeof what, "cut at the start of tensor info %llu", (unsigned long long)i);
        CUT(L->ti_at[i], name, what, "");
    }
    if (L->f.data_start > L->info_end) {
        CUT(L->info_end, "trunc-padding-start", "cut after the tensor infos, before the alignment padding", "data section");
        if (L->f.data_start - L->info_end >= 2)
            CUT(L->info_end + (size_t)(L->f.data_start - L->info_end) / 2, "trunc-padding-inside", "cut inside the alignment padding",
                "data section");
    }
    CUT((size_t)L->f.data_start, "trunc-data-start", "cut where the tensor data starts", "past end of file");
    /* inside the data: the first tensor in data order, one the seed picks, the end of the last */
    uint64_t first = 0, pick = mut_rng(&m->rng) % L->f.n_tensors;
    for (uint64_t i = 0; i < L->f.n_tensors; i++)
        if (L->f.tensors[i].offset < L->f.tensors[first].offset) first = i;
    uint64_t ts[2] = {first, pick};
    for (int k = 0; k < 2; k++) {
        const gguf_tensor *t = &L->f.tensors[ts[k]];
        if (t->nbytes < 2) continue;
        snprintf(name, sizeof name, "trunc-data-inside-%.*s", (int)t->name.len, t->name.ptr);
        snprintf(what, sizeof what, "cut in the middle of the data of %.*s", (int)t->name.len, t->name.ptr);
        CUT((size_t)(L->f.data_start + t->offset + t->nbytes / 2), name, what, "past end of file");
    }
    CUT((size_t)(L->f.data_start + L->max_end - 1), "trunc-data-last-byte", "the last byte of tensor data missing", "past end of file");
#undef CUT
    return 0;
}

/* Key, string and array lengths, value types, element types: patched in place. */
static int kv_fields(mut_ctx *m) {
    const mut_layout *L = m->L;
    uint64_t nk = L->f.n_kv;
    char name[200];
    mut_edit e[2];
    uint64_t pick[3] = {0, nk / 2, nk - 1};
    for (int k = 0; k < 3; k++) {
        uint64_t i = pick[k];
        const gguf_kv *kv = &L->f.kv[i];
        int kl = (int)(kv->key.len < 60 ? kv->key.len : 60);
        snprintf(name, sizeof name, "key-len-0-%.*s", kl, kv->key.ptr);
        e[0] = mut_patch(L->kv_at[i], 0, 8);
        EMIT(m, name, "error", "empty", "key length 0", e, 1, 1, 0);
        snprintf(name, sizeof name, "key-len-max-%.*s", kl, kv->key.ptr);
        e[0] = mut_patch(L->kv_at[i], UINT64_MAX, 8);
        EMIT(m, name, "error", "string length", "key length 2^64-1", e, 1, 1, 0);
        snprintf(name, sizeof name, "key-len-plus-1-%.*s", kl, kv->key.ptr);
        e[0] = mut_patch(L->kv_at[i], kv->key.len + 1, 8);
        EMIT(m, name, "error", "", "key length one more: the value type read one byte late", e, 1, 1, 0);
        snprintf(name, sizeof name, "type-unknown-%.*s", kl, kv->key.ptr);
        e[0] = mut_patch(L->kv_type_at[i], 13, 4);
        EMIT(m, name, "error", "unknown value type", "value type 13", e, 1, 1, 0);
        /* a byte of the key: not UTF-8, then a control byte */
        size_t at = (size_t)((const uint8_t *)kv->key.ptr - L->b) + (size_t)(mut_rng(&m->rng) % kv->key.len);
        snprintf(name, sizeof name, "key-utf8-%.*s", kl, kv->key.ptr);
        e[0] = mut_splice(at, 1, "\xff", 1);
        EMIT(m, name, "error", "UTF-8", "a byte of the key replaced by 0xFF", e, 1, 1, 0);
        snprintf(name, sizeof name, "key-control-byte-%.*s", kl, kv->key.ptr);
        e[0] = mut_splice(at, 1, "\x01", 1);
        EMIT(m, name, "error", "control", "a byte of the key replaced by 0x01", e, 1, 1, 0);
    }
    int a = mut_find_kv(L, "general.architecture");
    e[0] = mut_patch(L->kv_type_at[a] + 4, UINT64_MAX, 8);
    EMIT(m, "str-len-max-general.architecture", "error", "string length", "string length 2^64-1", e, 1, 1, 0);
    e[0] = mut_patch(L->kv_type_at[a] + 4, L->f.kv[a].size + 1, 8);
    EMIT(m, "str-len-plus-1-general.architecture", "error", "", "string length one more", e, 1, 1, 0);
    static const struct { const char *key; uint64_t n; const char *tag, *says; } arr[] = {
        {"tokenizer.ggml.tokens", UINT64_MAX, "max", "string array count"},
        {"tokenizer.ggml.tokens", 0, "0", ""},
        {"tokenizer.ggml.token_type", 1ull << 62, "2^62", "overflow"},
        {"tokenizer.ggml.token_type", 1ull << 40, "2^40", "exceeds"},
        {"tokenizer.ggml.merges", UINT64_MAX, "max", "string array count"},
        {"tokenizer.ggml.merges", 1, "plus-1", ""},
    };
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) {
        int k = mut_find_kv(L, arr[i].key);
        if (k < 0) continue;
        uint64_t n = !strcmp(arr[i].tag, "plus-1") ? L->f.kv[k].arr_n + 1 : arr[i].n;
        snprintf(name, sizeof name, "arr-count-%s-%s", arr[i].tag, arr[i].key);
        e[0] = mut_patch(L->kv_type_at[k] + 8, n, 8);
        EMIT(m, name, "error", arr[i].says, "array count changed, the elements left as they are", e, 1, 1, 0);
    }
    int tt = mut_find_kv(L, "tokenizer.ggml.token_type");
    if (tt >= 0) {
        e[0] = mut_patch(L->kv_type_at[tt] + 4, GGUF_ARR, 4);
        EMIT(m, "arr-elem-nested-tokenizer.ggml.token_type", "error", "nested", "array of arrays", e, 1, 1, 0);
        e[0] = mut_patch(L->kv_type_at[tt] + 4, 77, 4);
        EMIT(m, "arr-elem-unknown-tokenizer.ggml.token_type", "error", "element type", "array element type 77", e, 1, 1, 0);
    }
    /* a key given twice: general.name renamed general.architecture */
    int gn = mut_find_kv(L, "general.name");
    if (gn >= 0) {
        tkv_buf k = {0};
        gguf_put_str(&k, "general.architecture", 20);
        e[0] = mut_splice(L->kv_at[gn], (size_t)(8 + L->f.kv[gn].key.len), k.u, k.n);
        free(k.u);
        EMIT(m, "dup-key-general.architecture", "error", "duplicate key", "general.name renamed general.architecture", e, 1, 1, 0);
    }
    return 0;
}

static int type_confusion(mut_ctx *m) {
    const mut_layout *L = m->L;
    char name[200], what[200];
    mut_edit e[2];
    enum { V_STR, V_U32, V_I32, V_U64, V_F32, V_BOOL, V_ARR_I32, V_ARR_STR, V_ARR_F32, V_ARR_U32, V_F32BITS };
    static const struct { const char *suffix; int arch; int kind; const char *tag; } c[] = {
        {"embedding_length", 1, V_STR, "str"},        {"embedding_length", 1, V_F32BITS, "f32"},
        {"block_count", 1, V_I32, "i32-negative"},     {"block_count", 1, V_U64, "u64-2^40"},
        {"attention.head_count", 1, V_BOOL, "bool"},   {"attention.head_count_kv", 1, V_F32, "f32"},
        {"attention.layer_norm_rms_epsilon", 1, V_U32, "u32"}, {"rope.freq_base", 1, V_STR, "str"},
        {"context_length", 1, V_STR, "str"},           {"general.architecture", 0, V_U32, "u32"},
        {"tokenizer.ggml.model", 0, V_U32, "u32"},     {"tokenizer.ggml.pre", 0, V_ARR_STR, "arr-str"},
        {"tokenizer.ggml.tokens", 0, V_ARR_I32, "arr-i32"}, {"tokenizer.ggml.tokens", 0, V_STR, "str"},
        {"tokenizer.ggml.token_type", 0, V_ARR_STR, "arr-str"}, {"tokenizer.ggml.token_type", 0, V_ARR_F32, "arr-f32"},
        {"tokenizer.ggml.merges", 0, V_ARR_U32, "arr-u32"}, {"tokenizer.ggml.bos_token_id", 0, V_STR, "str"},
        {"tokenizer.ggml.eos_token_id", 0, V_F32, "f32"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *key = c[i].arch ? mut_arch_key(L, c[i].suffix) : c[i].suffix;
        int k = mut_find_kv(L, key);
        if (k < 0) continue;
        const gguf_kv *kv = &L->f.kv[k];
        uint64_t n = kv->type == GGUF_ARR ? kv->arr_n : 3;
        tkv_buf v = {0};
        uint32_t t = GGUF_ARR;
        switch (c[i].kind) {
        case V_STR: gguf_put_str(&v, "256", 3); t = GGUF_STR; break;
        case V_U32: tkv_buf_le(&v, 7, 4); t = GGUF_U32; break;
        case V_I32: tkv_buf_le(&v, 0xFFFFFFFFu, 4); t = GGUF_I32; break;
        case V_U64: tkv_buf_le(&v, 1ull << 40, 8); t = GGUF_U64; break;
        case V_F32: tkv_buf_le(&v, 0x3f800000u, 4); t = GGUF_F32; break;
        case V_BOOL: tkv_buf_le(&v, 1, 1); t = GGUF_BOOL; break;
        case V_F32BITS: tkv_buf_add(&v, kv->data, 4); t = GGUF_F32; break; /* the same bits read as a float */
        case V_ARR_I32: case V_ARR_F32: case V_ARR_U32:
            tkv_buf_le(&v, c[i].kind == V_ARR_I32 ? GGUF_I32 : c[i].kind == V_ARR_F32 ? GGUF_F32 : GGUF_U32, 4);
            tkv_buf_le(&v, n, 8);
            for (uint64_t j = 0; j < n; j++) tkv_buf_le(&v, c[i].kind == V_ARR_F32 ? 0x3f800000u : 1, 4);
            break;
        case V_ARR_STR:
            tkv_buf_le(&v, GGUF_STR, 4);
            tkv_buf_le(&v, n, 8);
            for (uint64_t j = 0; j < n; j++) gguf_put_str(&v, "1", 1);
            break;
        }
        snprintf(name, sizeof name, "type-%s-as-%s", key, c[i].tag);
        snprintf(what, sizeof what, "%s written as %s", key, c[i].tag);
        e[0] = mut_retype(L, k, t, &v);
        free(v.u);
        EMIT(m, name, "error", key, what, e, 1, 1, 0);
    }
    /* a key the file lacks, added with the wrong type */
    if (mut_find_kv(L, "tokenizer.ggml.add_bos_token") < 0) {
        tkv_buf v = {0};
        tkv_buf_le(&v, 1, 4);
        e[0] = mut_add_kv(L, "tokenizer.ggml.add_bos_token", GGUF_U32, &v);
        e[1] = mut_patch(16, L->f.n_kv + 1, 8);
        free(v.u);
        EMIT(m, "type-tokenizer.ggml.add_bos_token-as-u32", "error", "tokenizer.ggml.add_bos_token", "add_bos_token added as u32", e, 2, 1, 0);
    }
    return 0;
}

/* General.alignment added with bad values and types (it is absent from llama.cpp's files). */
static int alignment(mut_ctx *m) {
    const mut_layout *L = m->L;
    if (mut_find_kv(L, "general.alignment") >= 0) return 0;
    char name[200];
    mut_edit e[3];
    static const uint32_t bad[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        tkv_buf v = {0};
        tkv_buf_le(&v, bad[i], 4);
        e[0] = mut_add_kv(L, "general.alignment", GGUF_U32, &v);
        e[1] = mut_patch(16, L->f.n_kv + 1, 8);
        free(v.u);
        snprintf(name, sizeof name, "align-%u", bad[i]);
        EMIT(m, name, "error", "power of two", "general.alignment not a power of two", e, 2, 1, 0);
    }
    tkv_buf v = {0};
    tkv_buf_le(&v, 1u << 31, 4);
    e[0] = mut_add_kv(L, "general.alignment", GGUF_U32, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    EMIT(m, "align-2^31", "error", "data section", "general.alignment 2^31: the data starts past the end", e, 2, 1, 0);
    v = (tkv_buf){0};
    tkv_buf_le(&v, 32, 8);
    e[0] = mut_add_kv(L, "general.alignment", GGUF_U64, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    EMIT(m, "align-as-u64", "error", "general.alignment has type u64", "general.alignment written as u64", e, 2, 1, 0);
    v = (tkv_buf){0};
    gguf_put_str(&v, "32", 2);
    e[0] = mut_add_kv(L, "general.alignment", GGUF_STR, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    EMIT(m, "align-as-str", "error", "general.alignment has type str", "general.alignment written as a string", e, 2, 1, 0);
    /* alignment 2, laid out as it says: a well-formed file whose tensor data are not 32-byte aligned
     * (two bytes more in general.name when the header would end on a multiple of 32 by chance) */
    v = (tkv_buf){0};
    tkv_buf_le(&v, 2, 4);
    e[0] = mut_add_kv(L, "general.alignment", GGUF_U32, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    size_t end = L->info_end + e[0].ins.n;
    int ne = 2, gn = mut_find_kv(L, "general.name");
    if (((end + 1) & ~(size_t)1) % 32 == 0) {
        if (gn < 0) { mut_edits_free(e, 2); return 0; }
        tkv_buf s = {0};
        tkv_buf_le(&s, L->f.kv[gn].size + 2, 8);
        tkv_buf_add(&s, L->f.kv[gn].data, (size_t)L->f.kv[gn].size);
        tkv_buf_add(&s, "xx", 2);
        e[2] = mut_splice(L->kv_type_at[gn] + 4, 8 + (size_t)L->f.kv[gn].size, s.u, s.n);
        free(s.u);
        ne = 3;
    }
    EMIT(m, "align-2-misaligned-data", "error", "aligned", "general.alignment 2 and the data laid out so", e, ne, 1, 2);
    return 0;
}

/* A byte of a string value replaced by 0xFF. */
static mut_edit bad_byte(mut_ctx *m, size_t at, size_t len) {
    return mut_splice(at + (size_t)(mut_rng(&m->rng) % (len ? len : 1)), len ? 1 : 0, "\xff", 1);
}

static int strings(mut_ctx *m) {
    const mut_layout *L = m->L;
    mut_edit e[1];
    static const struct { const char *key, *expect, *says; } s[] = {
        {"general.architecture", "error", "architecture"}, {"tokenizer.ggml.pre", "error", "tokenizer.ggml.pre"},
        {"tokenizer.ggml.model", "error", "tokenizer.ggml.model"}, {"general.name", "valid", ""},
    };
    char name[200];
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        int k = mut_find_kv(L, s[i].key);
        if (k < 0 || L->f.kv[k].type != GGUF_STR || !L->f.kv[k].size) continue;
        snprintf(name, sizeof name, "value-utf8-%s", s[i].key);
        e[0] = bad_byte(m, (size_t)(L->f.kv[k].data - L->b), (size_t)L->f.kv[k].size);
        EMIT(m, name, s[i].expect, s[i].says, "a byte of the string replaced by 0xFF", e, 1, 1, 0);
    }
    /* a token's text: the vocabulary holds bytes, not necessarily UTF-8 */
    int k = mut_find_kv(L, "tokenizer.ggml.tokens");
    if (k >= 0 && L->f.kv[k].arr_n > 300) {
        const uint8_t *p = L->f.kv[k].data;
        uint64_t want = 256 + mut_rng(&m->rng) % (L->f.kv[k].arr_n - 256);
        gguf_str t = {0};
        for (uint64_t j = 0; j <= want; j++) t = gguf_arr_str_next(&p);
        if (t.len) {
            snprintf(name, sizeof name, "value-utf8-token-%llu", (unsigned long long)want);
            e[0] = bad_byte(m, (size_t)((const uint8_t *)t.ptr - L->b), (size_t)t.len);
            EMIT(m, name, "valid", "", "a byte of one token's text replaced by 0xFF", e, 1, 1, 0);
        }
    }
    return 0;
}

/* Metadata values that contradict the tensors, and keys removed or added. */
static int metadata(mut_ctx *m) {
    const mut_layout *L = m->L;
    char name[200], says[200];
    mut_edit e[3];
    uint32_t E = 0, NL = 0, FF = 0, H = 0;
    char er[64];
    gguf_get_u32(&L->f, mut_arch_key(L, "embedding_length"), &E, er, sizeof er);
    gguf_get_u32(&L->f, mut_arch_key(L, "block_count"), &NL, er, sizeof er);
    gguf_get_u32(&L->f, mut_arch_key(L, "feed_forward_length"), &FF, er, sizeof er);
    gguf_get_u32(&L->f, mut_arch_key(L, "attention.head_count"), &H, er, sizeof er);
    snprintf(says, sizeof says, "blk.%u.attn_norm.weight", NL);
    /* an expert FFN (qwen3moe) has no dense FFN for feed_forward_length to contradict; a file with
     * its own head dimension (key_length: qwen3) keeps it when the embedding or the heads change,
     * so the first matrix whose shape breaks is another */
    int moe = mut_find_tensor(L, "blk.0.ffn_gate_inp.weight") >= 0;
    int kl = mut_find_kv(L, mut_arch_key(L, "attention.key_length")) >= 0;
    const struct { const char *suffix, *tag; uint32_t v; const char *expect, *says; } u[] = {
        {"embedding_length", "2x", 2 * E, "error", "token_embd.weight"},
        {"embedding_length", "minus-1", E - 1, "error", kl ? "embedding|token_embd.weight" : "embedding"},
        {"block_count", "plus-1", NL + 1, "error", says},
        {"block_count", "0", 0, "error", "block_count"},
        {"block_count", "4096", 4096, "error", "missing"},
        {"feed_forward_length", "plus-32", FF + 32, moe ? "valid" : "error", moe ? "" : "ffn_gate.weight"},
        {"attention.head_count", "0", 0, "error", "head counts"},
        {"attention.head_count_kv", "3", 3, "error", "head counts"},
        {"attention.head_count", "2x", 2 * H, "error", kl ? "attn_q.weight|attn_k.weight" : "attn_k.weight"},
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        int k = mut_find_kv(L, mut_arch_key(L, u[i].suffix));
        if (k < 0 || L->f.kv[k].type != GGUF_U32) continue;
        snprintf(name, sizeof name, "meta-%s-%s", u[i].suffix, u[i].tag);
        e[0] = mut_patch(L->kv_type_at[k] + 4, u[i].v, 4);
        EMIT(m, name, u[i].expect, u[i].says, "a shape key that contradicts the tensors", e, 1, 1, 0);
    }
    static const struct { const char *suffix, *tag; uint32_t bits; const char *says; } f[] = {
        {"attention.layer_norm_rms_epsilon", "nan", 0x7fc00000u, "epsilon"},
        {"attention.layer_norm_rms_epsilon", "0", 0, "epsilon"},
        {"rope.freq_base", "inf", 0x7f800000u, "rope base"},
        {"rope.freq_base", "negative", 0xbf800000u, "rope base"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        int k = mut_find_kv(L, mut_arch_key(L, f[i].suffix));
        if (k < 0 || L->f.kv[k].type != GGUF_F32) continue;
        snprintf(name, sizeof name, "meta-%s-%s", f[i].suffix, f[i].tag);
        e[0] = mut_patch(L->kv_type_at[k] + 4, f[i].bits, 4);
        EMIT(m, name, "error", f[i].says, "a float key out of its domain", e, 1, 1, 0);
    }
    /* keys added: a key length unlike the matrices' head size (the head size is the key length
     * where a file has one: the q/k/v matrices or the rope dimension then disagree), an unknown rope
     * scaling, an unknown key (valid) */
    tkv_buf v = {0};
    if (!kl) {
        tkv_buf_le(&v, E / (H ? H : 1) * 2, 4);
        e[0] = mut_add_kv(L, mut_arch_key(L, "attention.key_length"), GGUF_U32, &v);
        e[1] = mut_patch(16, L->f.n_kv + 1, 8);
        free(v.u);
        EMIT(m, "meta-key_length-2x-head_dim", "error", "rope.dimension_count|attn_q.weight",
             "attention.key_length twice the head size", e, 2, 1, 0);
    }
    v = (tkv_buf){0};
    gguf_put_str(&v, "yarn", 4);
    e[0] = mut_add_kv(L, mut_arch_key(L, "rope.scaling.type"), GGUF_STR, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    EMIT(m, "meta-rope.scaling.type-yarn", "error", "rope scaling", "rope.scaling.type yarn (unsupported)", e, 2, 1, 0);
    v = (tkv_buf){0};
    tkv_buf_le(&v, 7, 4);
    e[0] = mut_add_kv(L, "tierkv.test.unknown_key", GGUF_U32, &v);
    e[1] = mut_patch(16, L->f.n_kv + 1, 8);
    free(v.u);
    EMIT(m, "valid-unknown-key", "valid", "", "a key nothing reads", e, 2, 1, 0);
    int k = mut_find_kv(L, "tokenizer.ggml.model");
    if (k >= 0) {
        v = (tkv_buf){0};
        gguf_put_str(&v, "llama", 5);
        e[0] = mut_retype(L, k, GGUF_STR, &v);
        free(v.u);
        EMIT(m, "meta-tokenizer.ggml.model-llama", "error", "tokenizer.ggml.model", "a SentencePiece vocabulary (unsupported)", e, 1, 1, 0);
    }
    static const char *const drop[] = {"general.architecture", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                       "tokenizer.ggml.model", NULL};
    for (int i = 0; drop[i]; i++) {
        k = mut_find_kv(L, drop[i]);
        if (k < 0) continue;
        snprintf(name, sizeof name, "drop-key-%s", drop[i]);
        e[0] = mut_splice(L->kv_at[k], L->kv_end[k] - L->kv_at[k], NULL, 0);
        e[1] = mut_patch(16, L->f.n_kv - 1, 8);
        EMIT(m, name, "error", drop[i], "the key removed", e, 2, 1, 0);
    }
    int tk = mut_find_kv(L, "tokenizer.ggml.tokens"), ty = mut_find_kv(L, "tokenizer.ggml.token_type");
    if (tk >= 0 && ty >= 0 && L->f.kv[ty].type == GGUF_ARR && L->f.kv[ty].arr_n == L->f.kv[tk].arr_n) {
        /* the vocabulary one token shorter than token_embd's rows: the last token and its type removed */
        const uint8_t *p = L->f.kv[tk].data;
        gguf_str t = {0};
        for (uint64_t j = 0; j < L->f.kv[tk].arr_n; j++) t = gguf_arr_str_next(&p);
        uint64_t n = L->f.kv[tk].arr_n - 1;
        e[0] = mut_patch(L->kv_type_at[tk] + 8, n, 8);
        e[1] = mut_splice((size_t)((const uint8_t *)t.ptr - L->b) - 8, 8 + (size_t)t.len, NULL, 0);
        e[2] = mut_patch(L->kv_type_at[ty] + 8, n, 8);
        mut_edit e3 = mut_splice(L->kv_end[ty] - 4, 4, NULL, 0);
        mut_edit all[4] = {e[0], e[1], e[2], e3};
        EMIT(m, "vocab-one-token-short", "error", "token_embd.weight", "the last token and its type removed", all, 4, 1, 0);
    }
    int mg = mut_find_kv(L, "tokenizer.ggml.merges");
    if (mg >= 0) {
        e[0] = mut_patch(L->kv_type_at[mg] + 8, 0, 8);
        e[1] = mut_splice(L->kv_type_at[mg] + 16, L->kv_end[mg] - L->kv_type_at[mg] - 16, NULL, 0);
        EMIT(m, "valid-merges-empty", "valid", "", "no merges: every byte its own token", e, 2, 1, 0);
    }
    return 0;
}

static int tensor_info(mut_ctx *m) {
    const mut_layout *L = m->L;
    char name[200], says[120];
    mut_edit e[2];
    int q = mut_find_tensor(L, "blk.0.attn_q.weight"), kk = mut_find_tensor(L, "blk.0.attn_k.weight");
    if (q < 0 || kk < 0) return 0;
    const gguf_tensor *tq = &L->f.tensors[q], *tkk = &L->f.tensors[kk];
    size_t qname = L->ti_at[q] + 8;
    /* names */
    e[0] = mut_patch(L->ti_at[q], 0, 8);
    EMIT(m, "tensor-name-len-0-blk.0.attn_q.weight", "error", "empty name", "tensor name length 0", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_at[q], UINT64_MAX, 8);
    EMIT(m, "tensor-name-len-max-blk.0.attn_q.weight", "error", "string length", "tensor name length 2^64-1", e, 1, 1, 0);
    e[0] = mut_splice(qname + (size_t)(mut_rng(&m->rng) % tq->name.len), 1, "\xff", 1);
    EMIT(m, "tensor-name-utf8-blk.0.attn_q.weight", "error", "UTF-8", "a byte of the name replaced by 0xFF", e, 1, 1, 0);
    e[0] = mut_splice(qname + 11, 1, "k", 1); /* blk.0.attn_q -> blk.0.attn_k */
    EMIT(m, "tensor-name-dup-blk.0.attn_k.weight", "error", "duplicate tensor name", "attn_q renamed attn_k", e, 1, 1, 0);
    e[0] = mut_splice(qname + 11, 1, "x", 1);
    EMIT(m, "tensor-renamed-blk.0.attn_q.weight", "error", "blk.0.attn_q.weight", "attn_q renamed attn_x: missing", e, 1, 1, 0);
    /* dimensions */
    e[0] = mut_patch(L->ti_dims_at[q] - 4, 5, 4);
    EMIT(m, "tensor-ndims-5-blk.0.attn_q.weight", "error", "n_dims", "n_dims 5", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q] - 4, 0, 4);
    EMIT(m, "tensor-ndims-0-blk.0.attn_q.weight", "error", "", "n_dims 0: the dimensions read as type and offset", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q], 0, 8);
    EMIT(m, "tensor-ne0-0-blk.0.attn_q.weight", "error", "blk.0.attn_q.weight", "ne[0] = 0: an empty tensor", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q] + 8, 0, 8);
    EMIT(m, "tensor-ne1-0-blk.0.attn_q.weight", "error", "blk.0.attn_q.weight", "ne[1] = 0: an empty tensor", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q] + 8, 1ull << 40, 8);
    EMIT(m, "tensor-ne1-2^40-blk.0.attn_q.weight", "error", "blk.0.attn_q.weight", "ne[1] = 2^40: far past the end", e, 1, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q], 1ull << 32, 8);
    e[1] = mut_patch(L->ti_dims_at[q] + 8, 1ull << 32, 8);
    EMIT(m, "tensor-ne-product-overflows-blk.0.attn_q.weight", "error", "overflow", "ne = [2^32, 2^32]: 2^64 elements", e, 2, 1, 0);
    e[0] = mut_patch(L->ti_dims_at[q], 1ull << 63, 8);
    EMIT(m, "tensor-ne0-negative-blk.0.attn_q.weight", "error", "negative", "ne[0] = 2^63", e, 1, 1, 0);
    if (tkk->n_dims == 2 && tkk->ne[0] != tkk->ne[1]) { /* a square matrix swapped is the same shape */
        e[0] = mut_patch(L->ti_dims_at[kk], tkk->ne[1], 8);
        e[1] = mut_patch(L->ti_dims_at[kk] + 8, tkk->ne[0], 8);
        EMIT(m, "tensor-dims-swapped-blk.0.attn_k.weight", "error", "blk.0.attn_k.weight", "ne[0] and ne[1] swapped", e, 2, 1, 0);
    }
    /* types */
    static const struct { uint32_t t; const char *tag, *says; } ty[] = {
        {4, "4-removed", "removed"}, {39, "39", "unknown"}, {0xFFFFFFFFu, "max", "unknown"}, {GGML_Q2_K, "Q2_K", "not supported"}};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "tensor-type-%s-blk.0.attn_q.weight", ty[i].tag);
        e[0] = mut_patch(L->ti_type_at[q], ty[i].t, 4);
        EMIT(m, name, "error", ty[i].says, "tensor type id", e, 1, 1, 0);
    }
    /* a row that is no whole number of blocks: ne[0] one less in the tensor's block type (Q8_0 for float types) */
    uint32_t bt = ggml_blck_size(tq->type) > 1 ? tq->type : GGML_Q8_0;
    e[0] = mut_patch(L->ti_type_at[q], bt, 4);
    e[1] = mut_patch(L->ti_dims_at[q], tq->ne[0] - 1, 8);
    snprintf(name, sizeof name, "tensor-row-not-whole-blocks-%s-blk.0.attn_q.weight", ggml_type_name(bt));
    EMIT(m, name, "error", "not a multiple", "ne[0] one less than a whole number of blocks", e, 2, 1, 0);
    /* norms and biases in a quantised type (their length is a whole number of blocks) */
    static const struct { const char *t; uint32_t type; } vq[] = {
        {"blk.0.attn_norm.weight", GGML_Q8_0}, {"output_norm.weight", GGML_Q4_K}, {"blk.0.attn_k.bias", GGML_Q8_0}};
    for (int i = 0; i < 3; i++) {
        int k = mut_find_tensor(L, vq[i].t);
        if (k < 0 || L->f.tensors[k].ne[0] % ggml_blck_size(vq[i].type)) continue;
        snprintf(name, sizeof name, "vector-as-%s-%s", ggml_type_name(vq[i].type), vq[i].t);
        e[0] = mut_patch(L->ti_type_at[k], vq[i].type, 4);
        EMIT(m, name, "error", vq[i].t, "a norm or bias stored in a quantised type", e, 1, 1, 0);
    }
    /* tensors removed from the table (their data stays, unread) */
    char last_down[64];
    uint32_t NL = 0;
    char er[64];
    gguf_get_u32(&L->f, mut_arch_key(L, "block_count"), &NL, er, sizeof er);
    snprintf(last_down, sizeof last_down, "blk.%u.ffn_down.weight", NL ? NL - 1 : 0);
    const char *drop[] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", last_down, "blk.0.attn_q.bias",
                          "output.weight", "blk.0.attn_k_norm.weight", "blk.0.ffn_gate_inp.weight", "blk.0.ffn_down_exps.weight"};
    for (int i = 0; i < (int)(sizeof drop / sizeof drop[0]); i++) {
        int k = mut_find_tensor(L, drop[i]);
        if (k < 0) continue;
        int req = mut_required_tensor(L, L->f.tensors[k].name);
        snprintf(name, sizeof name, "drop-tensor-%s", drop[i]);
        snprintf(says, sizeof says, "%s", req ? drop[i] : "");
        e[0] = mut_splice(L->ti_at[k], L->ti_end[k] - L->ti_at[k], NULL, 0);
        e[1] = mut_patch(8, L->f.n_tensors - 1, 8);
        EMIT(m, name, req ? "error" : "valid", says, req ? "a required tensor removed" : "an optional tensor removed (output: tied)", e, 2, 1, 0);
    }
    return 0;
}

static int data_placement(mut_ctx *m) {
    const mut_layout *L = m->L;
    uint64_t al = L->f.alignment, room = L->size - L->f.data_start;
    /* two tensors next to each other in data order */
    uint64_t a = 0, b = 0;
    for (uint64_t i = 0; i < L->f.n_tensors; i++)
        if (L->f.tensors[i].offset < L->f.tensors[a].offset) a = i;
    b = a == 0 ? 1 : 0;
    for (uint64_t i = 0; i < L->f.n_tensors; i++)
        if (L->f.tensors[i].offset > L->f.tensors[a].offset && L->f.tensors[i].offset < L->f.tensors[b].offset) b = i;
    if (L->f.tensors[b].offset <= L->f.tensors[a].offset) b = a == 0 ? 1 : 0;
    const gguf_tensor *ta = &L->f.tensors[a], *tb = &L->f.tensors[b];
    char name[200];
    mut_edit e[1];
    snprintf(name, sizeof name, "data-overlap-same-offset-%.*s", (int)tb->name.len, tb->name.ptr);
    e[0] = mut_patch(L->ti_off_at[b], ta->offset, 8);
    EMIT(m, name, "error", "overlap", "two tensors at the same offset", e, 1, 1, 0);
    if (ta->nbytes > al) {
        snprintf(name, sizeof name, "data-overlap-partial-%.*s", (int)tb->name.len, tb->name.ptr);
        e[0] = mut_patch(L->ti_off_at[b], ta->offset + al, 8);
        EMIT(m, name, "error", "overlap", "a tensor starting inside another", e, 1, 1, 0);
    }
    uint64_t past = (room + al - 1) / al * al;
    snprintf(name, sizeof name, "data-offset-past-end-%.*s", (int)tb->name.len, tb->name.ptr);
    e[0] = mut_patch(L->ti_off_at[b], past, 8);
    EMIT(m, name, "error", "past end of file", "offset at the end of the file", e, 1, 1, 0);
    snprintf(name, sizeof name, "data-offset-overflow-%.*s", (int)tb->name.len, tb->name.ptr);
    e[0] = mut_patch(L->ti_off_at[b], UINT64_MAX - (al - 1), 8);
    EMIT(m, name, "error", "overflow", "offset 2^64-32: offset + size overflows", e, 1, 1, 0);
    snprintf(name, sizeof name, "data-offset-misaligned-%.*s", (int)tb->name.len, tb->name.ptr);
    e[0] = mut_patch(L->ti_off_at[b], tb->offset + 1, 8);
    EMIT(m, name, "error", "alignment", "offset one byte off the alignment", e, 1, 1, 0);
    /* the largest tensor moved to the last aligned offset: it runs past the end */
    uint64_t big = 0;
    for (uint64_t i = 0; i < L->f.n_tensors; i++)
        if (L->f.tensors[i].nbytes > L->f.tensors[big].nbytes) big = i;
    const gguf_tensor *tg = &L->f.tensors[big];
    snprintf(name, sizeof name, "data-runs-past-end-%.*s", (int)tg->name.len, tg->name.ptr);
    e[0] = mut_patch(L->ti_off_at[big], (room - 1) / al * al, 8);
    EMIT(m, name, "error", "past end of file", "the largest tensor moved to the last aligned offset", e, 1, 1, 0);
    return 0;
}

static int valid_variants(mut_ctx *m) {
    mut_edit e[1];
    EMIT(m, "valid-copy", "valid", "", "the input unchanged", e, 0, 0, 0);
    static const uint8_t tail[1000];
    e[0] = mut_splice(m->L->size, 0, tail, sizeof tail);
    EMIT(m, "valid-trailing-bytes", "valid", "", "1000 zero bytes after the data", e, 1, 0, 0);
    return 0;
}

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv mutate-gguf IN.gguf -o DIR [--seed N] [--only TEXT] [--sparse]\n"
                 "  writes malformed variants of a GGUF model into DIR (created if missing), each named for what it\n"
                 "  breaks, and DIR/MANIFEST.tsv: file, expect (error | no-model | valid), a text the error must\n"
                 "  contain, what changed. --only TEXT: only the variants whose name contains TEXT. --sparse: the\n"
                 "  tensor data of the variants that must fail left as holes (zeros, no disk). Deterministic.\n");
}

int cmd_mutate_gguf(int argc, char **argv) {
    const char *in = NULL, *dir = NULL, *only = NULL;
    unsigned long long seed = 1;
    int sparse = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if ((!strcmp(a, "-o") || !strcmp(a, "--seed") || !strcmp(a, "--only")) && i + 1 >= argc) {
            fprintf(stderr, "mutate-gguf: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--sparse")) sparse = 1;
        else if (!strcmp(a, "-o")) dir = argv[++i];
        else if (!strcmp(a, "--only")) only = argv[++i];
        else if (!strcmp(a, "--seed")) {
            char *end;
            const char *v = argv[++i];
            errno = 0;
            seed = strtoull(v, &end, 10);
            if (!*v || *end || errno || *v == '-') { fprintf(stderr, "mutate-gguf: bad --seed '%s'\n", v); return 2; }
        } else if (a[0] == '-' && a[1]) { fprintf(stderr, "mutate-gguf: unknown flag %s\n", a); usage(stderr); return 2; }
        else if (!in) in = a;
        else { fprintf(stderr, "mutate-gguf: more than one input given\n"); usage(stderr); return 2; }
    }
    if (!in || !dir) { fprintf(stderr, "mutate-gguf: give IN.gguf and -o DIR\n"); usage(stderr); return 2; }
    gguf_file src;
    char err[512];
    if (gguf_open(in, &src, err, sizeof err)) { fprintf(stderr, "mutate-gguf: %s\n", err); return 1; }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "mutate-gguf: cannot create '%s': %s\n", dir, strerror(errno));
        gguf_free(&src);
        return 1;
    }
    mut_layout L;
    if (mut_layout_init(&L, src.bytes, (size_t)src.size, err, sizeof err)) {
        fprintf(stderr, "mutate-gguf: %s: %s\n", in, err);
        mut_layout_free(&L);
        gguf_free(&src);
        return 1;
    }
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s/MANIFEST.tsv", dir);
    mut_ctx m = {.L = &L, .dir = dir, .only = only, .sparse = sparse, .rng = seed * 0x9E3779B97F4A7C15ull + 1};
    m.manifest = fopen(mpath, "w");
    int rc = 1;
    if (!m.manifest) snprintf(m.err, sizeof m.err, "mutate-gguf: cannot create '%s': %s", mpath, strerror(errno));
    else {
        fprintf(m.manifest, "file\texpect\tsays\twhat\n");
        if (!valid_variants(&m) && !header_variants(&m) && !truncations(&m) && !kv_fields(&m) && !type_confusion(&m) &&
            !alignment(&m) && !strings(&m) && !metadata(&m) && !tensor_info(&m) && !data_placement(&m))
            rc = 0;
        if (fclose(m.manifest) != 0 && !rc) {
            snprintf(m.err, sizeof m.err, "mutate-gguf: cannot write '%s': %s", mpath, strerror(errno));
            rc = 1;
        }
    }
    if (rc) fprintf(stderr, "%s\n", m.err);
    else {
        printf("mutate-gguf: %d files and MANIFEST.tsv in %s\n", m.n_written, dir);
        rc = out_finish("mutate-gguf");
    }
    mut_layout_free(&L);
    gguf_free(&src);
    return rc;
}
