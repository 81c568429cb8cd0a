/* gguf_write.c — streaming GGUF v3 writer (see gguf_write.h).
 * Owns: the metadata and tensor-info bytes until open() writes them, then the position in the data
 * section. Tensor data is never held: the caller streams it. Layout is the one llama.cpp writes:
 * tensors in info order, offset_0 = 0, offset_{i+1} = offset_i + pad(nbytes_i, ALIGN). */
#include "gguf/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"

struct gguf_writer {
    uint64_t align;
    tkv_buf kv, ti;          /* encoded kv records / tensor-info records */
    uint64_t n_kv, n_tensors;
    char **keys, **names;    /* for the duplicate checks */
    uint64_t *nbytes;        /* per tensor */
    uint64_t next_offset;    /* offset the next declared tensor gets */
    uint64_t arr_left;       /* string-array elements still expected */
    FILE *fp;
    int own_fp;
    uint64_t cur, cur_done;  /* streaming position: tensor index, bytes of it written */
};

void gguf_put_str(tkv_buf *b, const char *s, uint64_t len) {
    tkv_buf_le(b, len, 8);
    tkv_buf_add(b, s, (size_t)len);
}
static char **push_name(char **list, uint64_t n, const char *s) {
    for (uint64_t i = 0; i < n; i++) TKV_ASSERT(strcmp(list[i], s) != 0);
    char **l = realloc(list, (size_t)(n + 1) * sizeof *l);
    TKV_ASSERT(l != NULL);
    size_t len = strlen(s);
    l[n] = tkv_xmalloc(len + 1);
    memcpy(l[n], s, len + 1);
    return l;
}

static uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

gguf_writer *gguf_writer_begin(uint32_t alignment) {
    gguf_writer *w = tkv_xcalloc(1, sizeof *w);
    TKV_ASSERT(alignment == 0 || (alignment & (alignment - 1)) == 0);
    w->align = alignment ? alignment : 32;
    if (alignment && alignment != 32) gguf_writer_add_u32(w, "general.alignment", alignment);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_tensors; i++) free(w->names[i]);
    free(w->keys);
    free(w->names);
    free(w->nbytes);
    free(w->kv.p);
    free(w->ti.p);
    if (w->fp && w->own_fp) fclose(w->fp);
    free(w);
}

static void key(gguf_writer *w, const char *k, uint32_t type) {
    TKV_ASSERT(w->arr_left == 0 && !w->fp && k[0]);
    w->keys = push_name(w->keys, w->n_kv, k);
    w->n_kv++;
    gguf_put_str(&w->kv, k, strlen(k));
    tkv_buf_le(&w->kv, type, 4);
}

void gguf_writer_add_u8(gguf_writer *w, const char *k, uint8_t v) { key(w, k, GGUF_U8); tkv_buf_le(&w->kv, v, 1); }
void gguf_writer_add_i8(gguf_writer *w, const char *k, int8_t v) { key(w, k, GGUF_I8); tkv_buf_le(&w->kv, (uint8_t)v, 1); }
void gguf_writer_add_u16(gguf_writer *w, const char *k, uint16_t v) { key(w, k, GGUF_U16); tkv_buf_le(&w->kv, v, 2); }
void gguf_writer_add_i16(gguf_writer *w, const char *k, int16_t v) { key(w, k, GGUF_I16); tkv_buf_le(&w->kv, (uint16_t)v, 2); }
void gguf_writer_add_u32(gguf_writer *w, const char *k, uint32_t v) { key(w, k, GGUF_U32); tkv_buf_le(&w->kv, v, 4); }
void gguf_writer_add_i32(gguf_writer *w, const char *k, int32_t v) { key(w, k, GGUF_I32); tkv_buf_le(&w->kv, (uint32_t)v, 4); }
void gguf_writer_add_u64(gguf_writer *w, const char *k, uint64_t v) { key(w, k, GGUF_U64); tkv_buf_le(&w->kv, v, 8); }
void gguf_writer_add_i64(gguf_writer *w, const char *k, int64_t v) { key(w, k, GGUF_I64); tkv_buf_le(&w->kv, (uint64_t)v, 8); }
void gguf_writer_add_bool(gguf_writer *w, const char *k, int v) { key(w, k, GGUF_BOOL); tkv_buf_le(&w->kv, v != 0, 1); }
void gguf_writer_add_f32(gguf_writer *w, const char *k, float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    key(w, k, GGUF_F32);
    tkv_buf_le(&w->kv, b, 4);
}
void gguf_writer_add_f64(gguf_writer *w, const char *k, double v) {
    uint64_t b;
    memcpy(&b, &v, 8);
    key(w, k, GGUF_F64);
    tkv_buf_le(&w->kv, b, 8);
}
void gguf_writer_add_str(gguf_writer *w, const char *k, const char *v) {
    key(w, k, GGUF_STR);
    gguf_put_str(&w->kv, v, strlen(v));
}

void gguf_writer_add_arr(gguf_writer *w, const char *k, uint32_t et, uint64_t n, const void *data) {
    int es = (int)gguf_vtype_size(et);
    TKV_ASSERT(es > 0);
    key(w, k, GGUF_ARR);
    tkv_buf_le(&w->kv, et, 4);
    tkv_buf_le(&w->kv, n, 8);
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++) { /* host values -> little-endian */
        uint64_t v = 0;
        if (es == 1) v = p[i];
        else if (es == 2) { uint16_t x; memcpy(&x, p + 2 * i, 2); v = x; }
        else if (es == 4) { uint32_t x; memcpy(&x, p + 4 * i, 4); v = x; }
        else memcpy(&v, p + 8 * i, 8);
        tkv_buf_le(&w->kv, v, es);
    }
}

void gguf_writer_begin_arr_str(gguf_writer *w, const char *k, uint64_t n) {
    key(w, k, GGUF_ARR);
    tkv_buf_le(&w->kv, GGUF_STR, 4);
    tkv_buf_le(&w->kv, n, 8);
    w->arr_left = n;
}

void gguf_writer_arr_str(gguf_writer *w, const char *s, uint64_t len) {
    TKV_ASSERT(w->arr_left > 0);
    w->arr_left--;
    gguf_put_str(&w->kv, s, len);
}

uint64_t gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne) {
    uint32_t blck = ggml_blck_size(type);
    if (!blck || n_dims == 0 || n_dims > 4) return 0;
    uint64_t n = ne[0] / blck * ggml_type_size(type);
    for (uint32_t d = 1; d < n_dims; d++) n *= ne[d];
    return n;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                           char *err, size_t errlen) {
    TKV_ASSERT(w->arr_left == 0 && !w->fp);
    size_t len = strlen(name);
    if (len == 0 || len >= 64) return tkv_errf(err, errlen, "gguf_write: tensor name '%s' must have 1..63 bytes", name);
    if (n_dims == 0 || n_dims > 4) return tkv_errf(err, errlen, "gguf_write: tensor '%s': n_dims %u not in 1..4", name, n_dims);
    uint32_t blck = ggml_blck_size(type);
    if (!blck) return tkv_errf(err, errlen, "gguf_write: tensor '%s': unknown type id %u", name, type);
    if (ne[0] % blck)
        return tkv_errf(err, errlen, "gguf_write: tensor '%s': ne[0] = %llu is not a multiple of the %s block size %u",
                        name, (unsigned long long)ne[0], ggml_type_name(type), blck);
    w->names = push_name(w->names, w->n_tensors, name);
    uint64_t *nb = realloc(w->nbytes, (size_t)(w->n_tensors + 1) * sizeof *nb);
    TKV_ASSERT(nb != NULL);
    w->nbytes = nb;
    w->nbytes[w->n_tensors++] = gguf_tensor_nbytes(type, n_dims, ne);
    gguf_put_str(&w->ti, name, len);
    tkv_buf_le(&w->ti, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++) tkv_buf_le(&w->ti, ne[d], 8);
    tkv_buf_le(&w->ti, type, 4);
    tkv_buf_le(&w->ti, w->next_offset, 8);
    w->next_offset += pad(w->nbytes[w->n_tensors - 1], w->align);
    return 0;
}

static int wr(gguf_writer *w, const void *p, size_t n, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, w->fp) != n) return tkv_errf(err, errlen, "gguf_write: write failed: %s", strerror(errno));
    return 0;
}
static int zeros(gguf_writer *w, uint64_t n, char *err, size_t errlen) {
    static const uint8_t z[64];
    while (n) {
        size_t k = n > sizeof z ? sizeof z : (size_t)n;
        if (wr(w, z, k, err, errlen)) return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_open_stream(gguf_writer *w, FILE *fp, char *err, size_t errlen) {
    TKV_ASSERT(w->arr_left == 0 && !w->fp);
    w->fp = fp;
    tkv_buf h = {0};
    tkv_buf_add(&h, "GGUF", 4);
    tkv_buf_le(&h, 3, 4);
    tkv_buf_le(&h, w->n_tensors, 8);
    tkv_buf_le(&h, w->n_kv, 8);
    int rc = wr(w, h.p, h.n, err, errlen);
    free(h.p);
    if (rc || wr(w, w->kv.p, w->kv.n, err, errlen) || wr(w, w->ti.p, w->ti.n, err, errlen)) return -1;
    uint64_t end = 24 + w->kv.n + w->ti.n;
    return zeros(w, pad(end, w->align) - end, err, errlen);
}

int gguf_writer_open(gguf_writer *w, const char *path, char *err, size_t errlen) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return tkv_errf(err, errlen, "gguf_write: cannot create '%s': %s", path, strerror(errno));
    w->own_fp = 1;
    return gguf_writer_open_stream(w, fp, err, errlen);
}

int gguf_writer_write(gguf_writer *w, const void *data, size_t n, char *err, size_t errlen) {
    TKV_ASSERT(w->fp != NULL);
    const uint8_t *p = data;
    while (n) {
        while (w->cur < w->n_tensors && w->nbytes[w->cur] == 0) w->cur++;
        if (w->cur >= w->n_tensors)
            return tkv_errf(err, errlen, "gguf_write: %zu bytes of data past the last tensor", n);
        uint64_t want = w->nbytes[w->cur] - w->cur_done;
        size_t k = want < n ? (size_t)want : n;
        if (wr(w, p, k, err, errlen)) return -1;
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == w->nbytes[w->cur]) {
            if (zeros(w, pad(w->cur_done, w->align) - w->cur_done, err, errlen)) return -1;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return 0;
}

int gguf_writer_close(gguf_writer *w, char *err, size_t errlen) {
    int rc = 0;
    while (w->cur < w->n_tensors && w->nbytes[w->cur] == 0) w->cur++;
    if (w->cur < w->n_tensors)
        rc = tkv_errf(err, errlen, "gguf_write: tensor '%s' got %llu of its %llu bytes", w->names[w->cur],
                      (unsigned long long)w->cur_done, (unsigned long long)w->nbytes[w->cur]);
    if (w->fp && fflush(w->fp) != 0 && rc == 0) rc = tkv_errf(err, errlen, "gguf_write: flush failed: %s", strerror(errno));
    if (w->fp && w->own_fp) {
        if (fclose(w->fp) != 0 && rc == 0) rc = tkv_errf(err, errlen, "gguf_write: close failed: %s", strerror(errno));
        w->fp = NULL;
    }
    gguf_writer_free(w);
    return rc;
}
