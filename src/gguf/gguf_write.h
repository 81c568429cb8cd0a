/* gguf_write.h — a streaming GGUF v3 writer.
 * Order of use: gguf_writer_begin; any number of gguf_writer_add_* (metadata, kept in memory: it is
 * small) and gguf_writer_add_tensor (info only: name, dims, type; offsets are assigned here);
 * gguf_writer_open or gguf_writer_open_stream writes the header, metadata, tensor infos and padding;
 * gguf_writer_write streams tensor data in the order the tensors were added, in chunks of any size
 * (a tensor's padding is written once its last byte arrives); gguf_writer_close checks that every
 * byte was written and releases the writer. gguf_writer_free releases it at any point (on error).
 * Keys and names are chosen by the program: duplicates are a broken invariant (assert). */
#ifndef TKV_GGUF_WRITE_H
#define TKV_GGUF_WRITE_H
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "gguf/gguf.h"

typedef struct gguf_writer gguf_writer;

/* A GGUF string as the format stores it, appended to b: its length (u64, little-endian), its bytes.
 * Also what mutate-gguf builds its edits with. */
void gguf_put_str(tkv_buf *b, const char *s, uint64_t len);

/* alignment 0 means the default 32; any other value is written as general.alignment. */
gguf_writer *gguf_writer_begin(uint32_t alignment);
void gguf_writer_free(gguf_writer *w);

void gguf_writer_add_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_writer_add_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_writer_add_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_add_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_add_bool(gguf_writer *w, const char *key, int v);
void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
void gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_add_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_writer_add_f64(gguf_writer *w, const char *key, double v);
/* Array of a fixed-size element type (not STR/ARR): n elements in host order at data. */
void gguf_writer_add_arr(gguf_writer *w, const char *key, uint32_t elem_type, uint64_t n, const void *data);
/* String array written element by element: begin with the count, then exactly n gguf_writer_arr_str calls. */
void gguf_writer_begin_arr_str(gguf_writer *w, const char *key, uint64_t n);
void gguf_writer_arr_str(gguf_writer *w, const char *s, uint64_t len);

/* Declares a tensor; ne has n_dims (1..4) entries. Fails on a bad type or ne[0] % block != 0. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                           char *err, size_t errlen);
/* Bytes of tensor data a tensor of this type and shape needs (0 if the type is unknown). */
uint64_t gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne);

int gguf_writer_open(gguf_writer *w, const char *path, char *err, size_t errlen);
/* Writes to a stream the caller owns (e.g. open_memstream); close does not fclose it. */
int gguf_writer_open_stream(gguf_writer *w, FILE *fp, char *err, size_t errlen);
int gguf_writer_write(gguf_writer *w, const void *data, size_t n, char *err, size_t errlen);
/* Checks every tensor got all its bytes, flushes, closes and frees w (also on error). */
int gguf_writer_close(gguf_writer *w, char *err, size_t errlen);

#endif
