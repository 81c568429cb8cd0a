/* gguf.c — the GGUF v2/v3 parser (FORMATS.md 1), a pure function over (bytes, size).
 * Owns: validation (every check of FORMATS.md 1.7) and the kv/tensor index of a gguf_file.
 * Invariants: every read goes through a cursor that is checked against the bytes left; every count
 * read from the file is bounded by those bytes before anything is allocated from it; arithmetic on
 * file values is overflow-checked. Strings and arrays point into the caller's bytes.
 * Layout policy: a tolerant reader. Tensors must be aligned, inside the file and must not overlap;
 * the contiguous, in-order layout llama.cpp writes is not required. Keys and tensor names must be
 * UTF-8 without control bytes (they are printed and compared as text); string values are bytes.
 * Does not: mmap files (gguf_open.c), know anything about models. */
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/utf8.h"

#define GGUF_DEFAULT_ALIGN 32
#define KV_MIN_BYTES 13     /* key len (8) + key (>= 1) + value type (4) */
#define TENSOR_MIN_BYTES 24 /* name len (8) + n_dims (4) + type (4) + offset (8) */
#define NAME_MAX_BYTES 64   /* names must be shorter than this */

typedef struct {
    const uint8_t *b;
    uint64_t size, pos;
    char *err;
    size_t errlen;
} cursor;

static uint64_t rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > left(c))
        return tkv_errf(c->err, c->errlen, "gguf: truncated file: %s needs %llu bytes at offset %llu, %llu left",
                        what, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)left(c));
    return 0;
}
static int get_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = rd32(c->b + c->pos);
    c->pos += 4;
    return 0;
}
static int get_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    *v = rd64(c->b + c->pos);
    c->pos += 8;
    return 0;
}
static int get_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t at = c->pos, len;
    if (get_u64(c, &len, what)) return -1;
    if (len > left(c))
        return tkv_errf(c->err, c->errlen,
                        "gguf: %s at offset %llu: string length %llu exceeds the %llu bytes left", what,
                        (unsigned long long)at, (unsigned long long)len, (unsigned long long)left(c));
    s->ptr = (const char *)(c->b + c->pos);
    s->len = len;
    c->pos += len;
    return 0;
}

/* A key or name for a message: at most 80 bytes, control bytes shown as '?'. buf holds >= 96 bytes. */
static void key_fmt(char *buf, size_t n, gguf_str s) {
    size_t len = s.len > 80 ? 80 : (size_t)s.len, k = 0;
    for (size_t i = 0; i < len && k + 1 < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[k++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    buf[k] = 0;
    if (s.len > 80) snprintf(buf + k, n - k, "...");
}

/* 0 if s is UTF-8 (strict: no overlongs, surrogates or code points past U+10FFFF) without control
 * bytes; else -1 with a message naming `what` ("key", "tensor name") and its offset. */
static int check_name(cursor *c, gguf_str s, const char *what, uint64_t at) {
    const unsigned char *p = (const unsigned char *)s.ptr;
    char kb[96];
    for (uint64_t i = 0; i < s.len;) {
        unsigned char b = p[i];
        if (b < 0x20 || b == 0x7f) {
            key_fmt(kb, sizeof kb, s);
            return tkv_errf(c->err, c->errlen, "gguf: %s '%s' at offset %llu holds a control byte (0x%02x at byte %llu)", what, kb,
                            (unsigned long long)at, b, (unsigned long long)i);
        }
        size_t n = tkv_utf8_seq(p + i, (size_t)(s.len - i));
        if (!n) {
            key_fmt(kb, sizeof kb, s);
            return tkv_errf(c->err, c->errlen, "gguf: %s '%s' at offset %llu is not valid UTF-8 (byte %llu)", what, kb,
                            (unsigned long long)at, (unsigned long long)i);
        }
        i += (uint64_t)n;
    }
    return 0;
}

/* Reads one value of type t (already read) for key `key`; fills kv->data/size (and array fields). */
static int parse_value(cursor *c, gguf_kv *kv) {
    char kb[96];
    key_fmt(kb, sizeof kb, kv->key);
    uint64_t at = c->pos;
    if (kv->type > GGUF_F64)
        return tkv_errf(c->err, c->errlen, "gguf: key '%s': unknown value type %u at offset %llu", kb, kv->type,
                        (unsigned long long)(at - 4));
    if (kv->type == GGUF_STR) {
        gguf_str s;
        if (get_str(c, &s, "string value")) return -1;
        kv->data = (const uint8_t *)s.ptr;
        kv->size = s.len;
        return 0;
    }
    if (kv->type != GGUF_ARR) {
        uint64_t sz = gguf_vtype_size(kv->type);
        if (need(c, sz, "scalar value")) return -1;
        kv->data = c->b + c->pos;
        kv->size = sz;
        c->pos += sz;
        return 0;
    }
    uint32_t et;
    uint64_t n;
    if (get_u32(c, &et, "array element type") || get_u64(c, &n, "array count")) return -1;
    if (et == GGUF_ARR)
        return tkv_errf(c->err, c->errlen, "gguf: key '%s': nested array (array of arrays) at offset %llu is not supported",
                        kb, (unsigned long long)at);
    if (et > GGUF_F64)
        return tkv_errf(c->err, c->errlen, "gguf: key '%s': unknown array element type %u at offset %llu", kb, et,
                        (unsigned long long)at);
    kv->arr_type = et;
    kv->arr_n = n;
    kv->data = c->b + c->pos;
    if (et == GGUF_STR) {
        if (n > left(c) / 8)
            return tkv_errf(c->err, c->errlen, "gguf: key '%s': string array count %llu exceeds the %llu bytes left",
                            kb, (unsigned long long)n, (unsigned long long)left(c));
        uint64_t start = c->pos;
        for (uint64_t i = 0; i < n; i++) {
            gguf_str s;
            if (get_str(c, &s, "string array element")) return -1;
        }
        kv->size = c->pos - start;
        return 0;
    }
    uint64_t es = gguf_vtype_size(et);
    if (n > UINT64_MAX / es)
        return tkv_errf(c->err, c->errlen, "gguf: key '%s': array count %llu x %llu bytes overflows", kb,
                        (unsigned long long)n, (unsigned long long)es);
    if (n * es > left(c))
        return tkv_errf(c->err, c->errlen, "gguf: key '%s': array of %llu %s (%llu bytes) exceeds the %llu bytes left",
                        kb, (unsigned long long)n, gguf_vtype_name(et), (unsigned long long)(n * es),
                        (unsigned long long)left(c));
    kv->size = n * es;
    c->pos += n * es;
    return 0;
}

static int str_cmp(const void *a, const void *b) {
    const gguf_str *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int r = n ? memcmp(x->ptr, y->ptr, (size_t)n) : 0;
    if (r) return r;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Returns the index in `s` (sorted copy) of a duplicate, or -1. */
static int64_t find_dup(gguf_str *s, uint64_t n) {
    if (n < 2) return -1;
    qsort(s, (size_t)n, sizeof *s, str_cmp);
    for (uint64_t i = 1; i < n; i++)
        if (str_cmp(&s[i - 1], &s[i]) == 0) return (int64_t)i;
    return -1;
}

typedef struct {
    uint64_t start, end; /* relative to data_start */
    uint64_t idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_header(cursor *c, gguf_file *f) {
    if (c->size < 24)
        return tkv_errf(c->err, c->errlen, "gguf: file too small (%llu bytes, a header needs 24)",
                        (unsigned long long)c->size);
    if (memcmp(c->b, "GGUF", 4) != 0)
        return tkv_errf(c->err, c->errlen, "gguf: bad magic %02x %02x %02x %02x (expected 'GGUF')", c->b[0], c->b[1],
                        c->b[2], c->b[3]);
    c->pos = 4;
    uint32_t v;
    get_u32(c, &v, "version");
    if (v != 2 && v != 3) {
        uint32_t sw = (v >> 24) | ((v >> 8) & 0xff00) | ((v << 8) & 0xff0000) | (v << 24);
        if (sw >= 1 && sw <= 3)
            return tkv_errf(c->err, c->errlen, "gguf: version 0x%08x is a big-endian file (version %u), not supported", v, sw);
        return tkv_errf(c->err, c->errlen, "gguf: unsupported version %u (only 2 and 3 are supported)", v);
    }
    f->version = v;
    get_u64(c, &f->n_tensors, "n_tensors");
    get_u64(c, &f->n_kv, "n_kv");
    uint64_t rem = left(c);
    if (f->n_kv > rem / KV_MIN_BYTES)
        return tkv_errf(c->err, c->errlen, "gguf: n_kv %llu is impossible: %llu bytes left after the header",
                        (unsigned long long)f->n_kv, (unsigned long long)rem);
    if (f->n_tensors > rem / TENSOR_MIN_BYTES || f->n_kv * KV_MIN_BYTES + f->n_tensors * TENSOR_MIN_BYTES > rem)
        return tkv_errf(c->err, c->errlen, "gguf: n_tensors %llu is impossible with n_kv %llu: %llu bytes left after the header",
                        (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv, (unsigned long long)rem);
    return 0;
}

static int parse_kvs(cursor *c, gguf_file *f) {
    f->kv = calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kv);
    if (!f->kv) return tkv_errf(c->err, c->errlen, "gguf: out of memory for %llu keys", (unsigned long long)f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        uint64_t at = c->pos;
        if (get_str(c, &kv->key, "key")) return -1;
        if (kv->key.len == 0)
            return tkv_errf(c->err, c->errlen, "gguf: key %llu at offset %llu is empty", (unsigned long long)i,
                            (unsigned long long)at);
        if (check_name(c, kv->key, "key", at)) return -1;
        if (get_u32(c, &kv->type, "value type")) return -1;
        if (parse_value(c, kv)) return -1;
    }
    gguf_str *keys = malloc((f->n_kv ? (size_t)f->n_kv : 1) * sizeof *keys);
    if (!keys) return tkv_errf(c->err, c->errlen, "gguf: out of memory");
    for (uint64_t i = 0; i < f->n_kv; i++) keys[i] = f->kv[i].key;
    int64_t d = find_dup(keys, f->n_kv);
    if (d >= 0) {
        char kb[96];
        key_fmt(kb, sizeof kb, keys[d]);
        free(keys);
        return tkv_errf(c->err, c->errlen, "gguf: duplicate key '%s'", kb);
    }
    free(keys);

    f->alignment = GGUF_DEFAULT_ALIGN;
    const gguf_kv *a = gguf_find(f, "general.alignment");
    if (a) {
        if (a->type != GGUF_U32)
            return tkv_errf(c->err, c->errlen, "gguf: general.alignment has type %s, expected u32", gguf_vtype_name(a->type));
        uint32_t al = rd32(a->data);
        if (al == 0 || (al & (al - 1)) != 0)
            return tkv_errf(c->err, c->errlen, "gguf: general.alignment %u is not a nonzero power of two", al);
        f->alignment = al;
    }
    return 0;
}

static int parse_tensor_info(cursor *c, gguf_tensor *t) {
    uint64_t at = c->pos;
    if (get_str(c, &t->name, "tensor name")) return -1;
    char nb[96];
    key_fmt(nb, sizeof nb, t->name);
    if (t->name.len == 0)
        return tkv_errf(c->err, c->errlen, "gguf: tensor at offset %llu has an empty name", (unsigned long long)at);
    if (t->name.len >= NAME_MAX_BYTES)
        return tkv_errf(c->err, c->errlen, "gguf: tensor name '%s' at offset %llu is too long (%llu bytes, limit 63)",
                        nb, (unsigned long long)at, (unsigned long long)t->name.len);
    if (check_name(c, t->name, "tensor name", at)) return -1;
    if (get_u32(c, &t->n_dims, "n_dims")) return -1;
    if (t->n_dims > 4)
        return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': n_dims %u exceeds 4", nb, t->n_dims);
    uint64_t nel = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (get_u64(c, &t->ne[d], "tensor dimension")) return -1;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': dimension %u is negative", nb, d);
        if (t->ne[d] != 0 && nel > (uint64_t)INT64_MAX / t->ne[d])
            return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': element count overflows", nb);
        nel *= t->ne[d];
    }
    if (get_u32(c, &t->type, "tensor type")) return -1;
    uint32_t blck = ggml_blck_size(t->type), bsize = ggml_type_size(t->type);
    if (blck == 0)
        return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': unknown or removed type id %u", nb, t->type);
    if (!ggml_type_supported(t->type))
        return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': type %s (id %u) is not supported", nb,
                        ggml_type_name(t->type), t->type);
    if (t->ne[0] % blck != 0)
        return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': ne[0] = %llu is not a multiple of the %s block size %u",
                        nb, (unsigned long long)t->ne[0], ggml_type_name(t->type), blck);
    /* row bytes <= ne0 * 4, nel <= INT64_MAX; check the products anyway */
    uint64_t row = t->ne[0] / blck * bsize, nb_total = row;
    for (int d = 1; d < 4; d++) {
        if (t->ne[d] != 0 && nb_total > UINT64_MAX / t->ne[d])
            return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': byte size overflows", nb);
        nb_total *= t->ne[d];
    }
    t->nbytes = nb_total;
    if (get_u64(c, &t->offset, "tensor offset")) return -1;
    return 0;
}

static int parse_tensors(cursor *c, gguf_file *f) {
    f->tensors = calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors) return tkv_errf(c->err, c->errlen, "gguf: out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (parse_tensor_info(c, &f->tensors[i])) return -1;

    uint64_t al = f->alignment;
    uint64_t end = c->pos; /* <= size, so the padding cannot overflow */
    f->data_start = (end + al - 1) / al * al;
    if (f->n_tensors == 0) return 0; /* a vocab-only file may end before data_start */

    gguf_str *names = malloc((size_t)f->n_tensors * sizeof *names);
    if (!names) return tkv_errf(c->err, c->errlen, "gguf: out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) names[i] = f->tensors[i].name;
    int64_t d = find_dup(names, f->n_tensors);
    if (d >= 0) {
        char nb[96];
        key_fmt(nb, sizeof nb, names[d]);
        free(names);
        return tkv_errf(c->err, c->errlen, "gguf: duplicate tensor name '%s'", nb);
    }
    free(names);

    if (f->data_start > c->size)
        return tkv_errf(c->err, c->errlen, "gguf: data section starts at %llu, past end of file (size %llu)",
                        (unsigned long long)f->data_start, (unsigned long long)c->size);
    uint64_t room = c->size - f->data_start;
    span *sp = malloc((size_t)f->n_tensors * sizeof *sp);
    if (!sp) return tkv_errf(c->err, c->errlen, "gguf: out of memory");
    uint64_t ns = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char nb[96];
        key_fmt(nb, sizeof nb, t->name);
        if (t->offset % al != 0) {
            free(sp);
            return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': offset %llu is not a multiple of the alignment %llu",
                            nb, (unsigned long long)t->offset, (unsigned long long)al);
        }
        if (t->offset > room || t->nbytes > room - t->offset) {
            free(sp);
            if (t->offset > UINT64_MAX - f->data_start || t->nbytes > UINT64_MAX - f->data_start - t->offset)
                return tkv_errf(c->err, c->errlen, "gguf: tensor '%s': offset %llu + %llu bytes overflows (past end of file, size %llu)",
                                nb, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                                (unsigned long long)c->size);
            return tkv_errf(c->err, c->errlen, "gguf: tensor '%s' data [%llu, %llu) ends past end of file (size %llu)", nb,
                            (unsigned long long)(f->data_start + t->offset),
                            (unsigned long long)(f->data_start + t->offset + t->nbytes), (unsigned long long)c->size);
        }
        t->data = c->b + f->data_start + t->offset;
        if (t->nbytes) sp[ns++] = (span){t->offset, t->offset + t->nbytes, i};
    }
    qsort(sp, (size_t)ns, sizeof *sp, span_cmp);
    for (uint64_t i = 1; i < ns; i++) {
        if (sp[i].start < sp[i - 1].end) {
            char a[96], b[96];
            key_fmt(a, sizeof a, f->tensors[sp[i - 1].idx].name);
            key_fmt(b, sizeof b, f->tensors[sp[i].idx].name);
            free(sp);
            return tkv_errf(c->err, c->errlen, "gguf: tensors '%s' and '%s' overlap", a, b);
        }
    }
    free(sp);
    return 0;
}

int gguf_parse(const uint8_t *bytes, size_t size, gguf_file *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!bytes && size) return tkv_errf(err, errlen, "gguf: no bytes");
    cursor c = {bytes, size, 0, err, errlen};
    gguf_file f = {0};
    f.bytes = bytes;
    f.size = size;
    if (parse_header(&c, &f) || parse_kvs(&c, &f) || parse_tensors(&c, &f)) {
        free(f.kv);
        free(f.tensors);
        return -1;
    }
    *out = f;
    return 0;
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

gguf_str gguf_arr_str_next(const uint8_t **p) {
    gguf_str s;
    s.len = rd64(*p);
    s.ptr = (const char *)(*p + 8);
    *p += 8 + s.len;
    return s;
}
