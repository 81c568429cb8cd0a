/* mutate.h — the machinery of `tierkv mutate-gguf` (tools/cmd_mutate_gguf.c holds the catalogue of
 * variants): the input's layout (where every KV pair and tensor info field lies, from gguf_parse's
 * index), edits of its bytes, and writing one variant with its manifest line. A variant is the
 * input with a few edits: either of the header (the bytes before the tensor data; the data section
 * follows re-padded, so a header that grows or shrinks keeps every tensor where its offset says) or
 * of the whole file (truncations). Uses src/gguf only. */
#ifndef TKV_TOOLS_MUTATE_H
#define TKV_TOOLS_MUTATE_H
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"

#define MUT_MAX_EDITS 4

/* One edit of a base buffer: `del` bytes at `at` replaced by `ins`. */
typedef struct {
    size_t at, del;
    tkv_buf ins;
} mut_edit;

/* Where every field of the input lives (byte offsets into the file). */
typedef struct {
    const uint8_t *b;
    size_t size;
    gguf_file f;
    char arch[16];
    size_t info_end;                               /* end of the tensor infos */
    size_t *kv_at, *kv_type_at, *kv_end;           /* per KV: record start, value type field, end */
    size_t *ti_at, *ti_dims_at, *ti_type_at, *ti_off_at, *ti_end; /* per tensor info */
    uint64_t max_end;                              /* end of the last tensor's data, relative to data_start */
} mut_layout;

/* One run of the generator: the input, the output directory and manifest, the seeded choices. */
typedef struct {
    mut_layout *L;
    const char *dir, *only;
    int sparse;
    FILE *manifest;
    uint64_t rng;
    int n_written;
    char err[4700];
} mut_ctx;

uint64_t mut_rng(uint64_t *s);                   /* xorshift64*: the seeded choices */

/* Parses the input (a model: general.architecture and tensors) and finds its fields. */
int mut_layout_init(mut_layout *L, const uint8_t *b, size_t size, char *err, size_t errlen);
void mut_layout_free(mut_layout *L);
int mut_find_kv(const mut_layout *L, const char *key);       /* index or -1 */
int mut_find_tensor(const mut_layout *L, const char *name);  /* index or -1 */
const char *mut_arch_key(const mut_layout *L, const char *suffix); /* "ARCH.suffix" (a ring of 8) */
/* Whether the binder (model.c) needs this tensor: not output.weight (tied), biases for qwen2 only. */
int mut_required_tensor(const mut_layout *L, gguf_str name);

/* Edits: k bytes at `at` overwritten with the little-endian v; `del` bytes at `at` replaced by p[0..n);
 * the value (type and bytes) of KV k replaced; a KV record appended after the last one (the caller
 * raises n_kv). */
mut_edit mut_patch(size_t at, uint64_t v, int k);
mut_edit mut_splice(size_t at, size_t del, const void *p, size_t n);
mut_edit mut_retype(const mut_layout *L, int k, uint32_t t, const tkv_buf *v);
mut_edit mut_add_kv(const mut_layout *L, const char *key, uint32_t t, const tkv_buf *v);
void mut_edits_free(mut_edit *e, int ne);

/* Writes DIR/NAME.gguf (the edits applied to the header when hdr, else to the whole file; pad_to:
 * the header's padding, 0 the input's alignment) and its manifest line, unless --only leaves it out;
 * frees the edits. expect: error | no-model | valid; says: a text the error must contain. */
int mut_emit(mut_ctx *m, const char *name, const char *expect, const char *says, const char *what, mut_edit *e, int ne,
             int hdr, uint64_t pad_to);

#endif
