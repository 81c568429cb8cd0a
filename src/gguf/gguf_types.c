/* gguf_types.c — the ggml tensor type table (FORMATS.md 2.1) as data, and the names of the
 * metadata value types.
 * Owns: block size, bytes per block, name and "can the engine run it" for each type id.
 * Removed ids (4, 5, 31..33, 36..38) and ids >= GGML_TYPE_COUNT have blck = size = 0, name "?". */
#include "gguf/gguf.h"

#include <string.h>

typedef struct {
    const char *name; /* NULL for removed ids */
    uint32_t blck;    /* elements per block */
    uint32_t size;    /* bytes per block */
    int supported;    /* the engine has kernels for it */
} type_info;

static const type_info TYPES[GGML_TYPE_COUNT] = {
    [0] = {"F32", 1, 4, 1},        [1] = {"F16", 1, 2, 1},        [2] = {"Q4_0", 32, 18, 1},
    [3] = {"Q4_1", 32, 20, 1},     [6] = {"Q5_0", 32, 22, 1},     [7] = {"Q5_1", 32, 24, 1},
    [8] = {"Q8_0", 32, 34, 1},     [9] = {"Q8_1", 32, 36, 0},     [10] = {"Q2_K", 256, 84, 0},
    [11] = {"Q3_K", 256, 110, 0},  [12] = {"Q4_K", 256, 144, 1},  [13] = {"Q5_K", 256, 176, 1},
    [14] = {"Q6_K", 256, 210, 1},  [15] = {"Q8_K", 256, 292, 0},  [16] = {"IQ2_XXS", 256, 66, 0},
    [17] = {"IQ2_XS", 256, 74, 0}, [18] = {"IQ3_XXS", 256, 98, 0}, [19] = {"IQ1_S", 256, 50, 0},
    [20] = {"IQ4_NL", 32, 18, 0},  [21] = {"IQ3_S", 256, 110, 0}, [22] = {"IQ2_S", 256, 82, 0},
    [23] = {"IQ4_XS", 256, 136, 0}, [24] = {"I8", 1, 1, 0},       [25] = {"I16", 1, 2, 0},
    [26] = {"I32", 1, 4, 0},       [27] = {"I64", 1, 8, 0},       [28] = {"F64", 1, 8, 0},
    [29] = {"IQ1_M", 256, 56, 0},  [30] = {"BF16", 1, 2, 1},      [34] = {"TQ1_0", 256, 54, 0},
    [35] = {"TQ2_0", 256, 66, 0},
};

uint32_t ggml_blck_size(uint32_t type) { return type < GGML_TYPE_COUNT ? TYPES[type].blck : 0; }
uint32_t ggml_type_size(uint32_t type) { return type < GGML_TYPE_COUNT ? TYPES[type].size : 0; }
uint64_t ggml_row_bytes(uint32_t type, int64_t n) {
    uint32_t blk = ggml_blck_size(type);
    return blk ? (uint64_t)(n / blk) * ggml_type_size(type) : 0;
}
const char *ggml_type_name(uint32_t type) {
    return type < GGML_TYPE_COUNT && TYPES[type].name ? TYPES[type].name : "?";
}
int ggml_type_by_name(const char *name) {
    for (uint32_t t = 0; name && t < GGML_TYPE_COUNT; t++)
        if (TYPES[t].blck && TYPES[t].name && !strcmp(TYPES[t].name, name)) return (int)t;
    return -1;
}
int ggml_type_supported(uint32_t type) { return type < GGML_TYPE_COUNT && TYPES[type].supported; }

const char *gguf_vtype_name(uint32_t t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    return t <= GGUF_F64 ? names[t] : "?";
}

uint64_t gguf_vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}
