/* gguf.h — GGUF v2/v3 reader (FORMATS.md section 1).
 * gguf_parse() is a pure function over (bytes, size): it validates everything (1.7) and builds an
 * index; strings and arrays point into the caller's bytes (no copies), so the bytes must outlive
 * the gguf_file. gguf_open() mmaps a file and parses it. Nothing here knows about models. */
#ifndef TKV_GGUF_H
#define TKV_GGUF_H
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
};

/* ggml tensor type ids (FORMATS.md 2.1); only those the engine supports are named. */
enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
    GGML_Q8_0 = 8, GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13,
    GGML_Q6_K = 14, GGML_Q8_K = 15, GGML_BF16 = 30, GGML_TYPE_COUNT = 39,
};

typedef struct {
    const char *ptr;   /* not NUL-terminated: points into the file */
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;       /* enum gguf_vtype */
    uint32_t arr_type;   /* element type when type == GGUF_ARR */
    uint64_t arr_n;      /* element count when type == GGUF_ARR */
    const uint8_t *data; /* the value bytes (for arrays: the first element; for STR: the text, after its length) */
    uint64_t size;       /* bytes of the value (for arrays: all elements; for STR: the text length) */
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];      /* ne[0] fastest; missing dims are 1 */
    uint32_t type;       /* enum ggml_type */
    uint64_t offset;     /* relative to data_start */
    uint64_t nbytes;
    const uint8_t *data; /* = bytes + data_start + offset */
} gguf_tensor;

typedef struct {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;         /* n_kv entries, file order */
    gguf_tensor *tensors;/* n_tensors entries, file order */
    uint64_t alignment;
    uint64_t data_start;
    const uint8_t *bytes;
    uint64_t size;
    void *map;           /* set by gguf_open/gguf_load: base of the mapping to unmap */
    uint64_t map_size;
    int copied;          /* 1: map is an anonymous copy of the file (gguf_load), 0: a file mapping */
} gguf_file;

/* Type table: block size (elements) and bytes per block; 0 for unknown/removed ids. */
uint32_t ggml_blck_size(uint32_t type);
uint32_t ggml_type_size(uint32_t type);
/* Bytes of n elements of a type (n a whole number of its blocks; 0 for an unknown type): a row */
uint64_t ggml_row_bytes(uint32_t type, int64_t n);
const char *ggml_type_name(uint32_t type); /* "Q4_K", ..., or "?" */
int ggml_type_by_name(const char *name);   /* the type whose name is name ("Q8_0", ...), or -1 */
/* Metadata value type names: "u8", ..., "str", "arr", "f64", or "?". */
const char *gguf_vtype_name(uint32_t t);
/* Bytes of one scalar of a metadata value type; 0 for STR/ARR (variable) and unknown ids. */
uint64_t gguf_vtype_size(uint32_t t);
/* 1 if the engine can run weights of this type (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K). */
int ggml_type_supported(uint32_t type);

/* Parses bytes[0..size). On error returns -1 with a message naming the problem (and the byte offset
 * where it makes sense); *out is left zeroed. On success the caller frees with gguf_free. */
int gguf_parse(const uint8_t *bytes, size_t size, gguf_file *out, char *err, size_t errlen);
int gguf_open(const char *path, gguf_file *out, char *err, size_t errlen); /* maps the file */
/* Opens path read-only for gguf_open/gguf_load: a regular, non-empty file of at most SIZE_MAX bytes
 * (*fd, *size), or -1 naming the path and what it is instead (a directory, a FIFO, a socket, a
 * device). Never blocks: a FIFO is refused, not waited on for a writer. */
int gguf_open_file(const char *path, int *fd, size_t *size, char *err, size_t errlen);
/* For inference (gguf_load.c): GGUF_COPY reads the file into read-only huge-page memory, GGUF_MMAP
 * maps it, GGUF_AUTO copies when huge pages are allowed and the file is at most half of the
 * available memory. */
typedef enum { GGUF_AUTO, GGUF_MMAP, GGUF_COPY } gguf_load_mode;
int gguf_load(const char *path, gguf_load_mode mode, gguf_file *out, char *err, size_t errlen);
void gguf_free(gguf_file *f); /* also unmaps what gguf_open or gguf_load mapped */
/* For gguf_open/gguf_load: parses size bytes at map, a mapping of map_len bytes that the
 * gguf_file then owns; on error unmaps it and names path. */
int gguf_parse_mapping(const char *path, void *map, size_t size, size_t map_len, gguf_file *out, char *err,
                       size_t errlen);

/* Lookups (linear scan is fine: a few hundred keys, used at load time only). */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
int gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: accept any integer type (range-checked) / any float type. Return 0 on success,
 * -1 with a message when missing or of the wrong kind. */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, char *err, size_t errlen);
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, char *err, size_t errlen);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, char *err, size_t errlen);
/* Arrays: element count and type; string arrays are walked with gguf_arr_str_next. */
int gguf_get_arr(const gguf_file *f, const char *key, uint32_t *elem_type, uint64_t *n,
                 const uint8_t **data, char *err, size_t errlen);
/* Iterates a string array already validated by gguf_parse: *p starts at the array data. */
gguf_str gguf_arr_str_next(const uint8_t **p);

#endif
