/* test_gguf.c — GGUF parser, getters and writer: the fixture files parse with known values; a
 * malformed-file suite built in memory fails with a message naming the problem; the writer round-trips;
 * gen-random writes the expected tensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/cmds.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "t.h"

/* ---- fixture files ---- */

static int has_tensor(const gguf_file *f, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    return t && t->type == type && t->ne[0] == ne0 && t->ne[1] == ne1;
}

TEST(gguf_fixture_models) {
    static const char *types[] = {"F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"};
    for (int arch = 0; arch < 2; arch++) {
        for (int i = 0; i < 8; i++) {
            char rel[128], err[512];
            snprintf(rel, sizeof rel, "fixtures/models/%s-%s.gguf", arch ? "llama" : "qwen2", types[i]);
            NEED(rel);
            gguf_file f;
            int rc = gguf_open(t_shared(rel), &f, err, sizeof err);
            CHECKF(rc == 0, "%s: %s", rel, err);
            if (rc) continue;
            gguf_str s;
            CHECK(gguf_get_str(&f, "general.architecture", &s, err, sizeof err) == 0);
            CHECK(gguf_str_eq(s, arch ? "llama" : "qwen2"));
            CHECK(f.version == 3 && f.alignment == 32 && f.data_start % 32 == 0);
            CHECK(f.n_tensors == (arch ? 30u : 26u));
            uint32_t n_embd = 0, n_layer = 0;
            char key[64];
            snprintf(key, sizeof key, "%s.embedding_length", arch ? "llama" : "qwen2");
            CHECK(gguf_get_u32(&f, key, &n_embd, err, sizeof err) == 0 && n_embd == 256);
            snprintf(key, sizeof key, "%s.block_count", arch ? "llama" : "qwen2");
            CHECK(gguf_get_u32(&f, key, &n_layer, err, sizeof err) == 0 && n_layer == (arch ? 3u : 2u));
            uint32_t et;
            uint64_t n;
            const uint8_t *data;
            CHECK(gguf_get_arr(&f, "tokenizer.ggml.tokens", &et, &n, &data, err, sizeof err) == 0);
            CHECK(et == GGUF_STR && n == 1024);
            const gguf_tensor *norm = gguf_find_tensor(&f, "output_norm.weight");
            CHECK(norm && norm->type == GGML_F32 && norm->n_dims == 1 && norm->ne[0] == 256 && norm->nbytes == 1024);
            if (!arch) CHECK(has_tensor(&f, "blk.0.attn_k.bias", GGML_F32, 128, 1));
            if (i == 0) CHECK(has_tensor(&f, "token_embd.weight", GGML_F32, 256, 1024));
            if (i == 1) CHECK(has_tensor(&f, "blk.1.ffn_up.weight", GGML_F16, 256, arch ? 768 : 512));
            if (i == 2) CHECK(has_tensor(&f, "blk.0.attn_q.weight", GGML_BF16, 256, 256));
            if (i == 5 && arch) CHECK(has_tensor(&f, "output.weight", GGML_Q6_K, 256, 1024));
            if (i == 5 && !arch) CHECK(has_tensor(&f, "blk.0.attn_k.weight", GGML_Q4_K, 256, 128));
            for (uint64_t k = 0; k < f.n_tensors; k++)
                CHECK(f.tensors[k].data + f.tensors[k].nbytes <= f.bytes + f.size);
            gguf_free(&f);
        }
    }
}

TEST(gguf_fixture_vocab) {
    static const char *files[] = {"fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf",
                                  "fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf",
                                  "fixtures/tokenizer/extra/vocab-r1-distill-qwen-7b.gguf"};
    for (int i = 0; i < 3; i++) NEED(files[i]);
    for (int i = 0; i < 3; i++) {
        gguf_file f;
        char err[512];
        int rc = gguf_open(t_shared(files[i]), &f, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", files[i], err);
        if (rc) continue;
        CHECK(f.n_tensors == 0);
        if (i == 0) CHECK(f.data_start > f.size); /* ends before data_start: accepted */
        uint32_t et;
        uint64_t n;
        const uint8_t *p;
        REQUIRE(gguf_get_arr(&f, "tokenizer.ggml.tokens", &et, &n, &p, err, sizeof err) == 0 && et == GGUF_STR);
        CHECK(n > 50000);
        uint64_t total = 0;
        for (uint64_t k = 0; k < n; k++) total += gguf_arr_str_next(&p).len;
        CHECK(total > n && p <= f.bytes + f.size);
        gguf_str model;
        CHECK(gguf_get_str(&f, "tokenizer.ggml.model", &model, err, sizeof err) == 0 && gguf_str_eq(model, "gpt2"));
        gguf_free(&f);
    }
}

TEST(gguf_open_errors) {
    gguf_file f;
    char err[512], path[512];
    CHECK(gguf_open("/nonexistent/x.gguf", &f, err, sizeof err) == -1 && strstr(err, "/nonexistent/x.gguf"));
    CHECK(gguf_open(t_tmpdir(), &f, err, sizeof err) == -1 && strstr(err, "directory"));
    snprintf(path, sizeof path, "%s/empty.gguf", t_tmpdir());
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp);
    fclose(fp);
    CHECK(gguf_open(path, &f, err, sizeof err) == -1 && strstr(err, "empty") && strstr(err, path));
    fp = fopen(path, "wb");
    REQUIRE(fp);
    fputs("GGUF\3\0\0\0 not really", fp);
    fclose(fp);
    CHECK(gguf_open(path, &f, err, sizeof err) == -1 && strstr(err, path));
}

/* gguf_load's copy must parse to the same file as the mapping, byte for byte, on a 2 MiB boundary
 * (huge pages need it); bad paths and bad bytes give the same errors as gguf_open. */
TEST(gguf_load_copy_equals_map) {
    static const char *rels[] = {"fixtures/models/qwen2-Q4_K_M.gguf", "fixtures/models/llama-Q8_0.gguf"};
    char err[512], path[512];
    for (int i = 0; i < 2; i++) NEED(rels[i]);
    for (int i = 0; i < 2; i++) {
        gguf_file a, b, c;
        REQUIRE(gguf_load(t_shared(rels[i]), GGUF_MMAP, &a, err, sizeof err) == 0);
        REQUIRE(gguf_load(t_shared(rels[i]), GGUF_COPY, &b, err, sizeof err) == 0);
        REQUIRE(gguf_load(t_shared(rels[i]), GGUF_AUTO, &c, err, sizeof err) == 0);
        CHECK(a.size == b.size && b.size == c.size && a.n_tensors == b.n_tensors && a.n_kv == b.n_kv);
        CHECK(b.map && ((uintptr_t)b.map & (((uintptr_t)2 << 20) - 1)) == 0 && b.map_size % ((uint64_t)2 << 20) == 0);
        CHECK(a.bytes != b.bytes && memcmp(a.bytes, b.bytes, (size_t)a.size) == 0);
        for (uint64_t t = 0; t < a.n_tensors && t < b.n_tensors; t++)
            CHECK(a.tensors[t].offset == b.tensors[t].offset && a.tensors[t].data - a.bytes == b.tensors[t].data - b.bytes);
        gguf_free(&a);
        gguf_free(&b);
        gguf_free(&c);
    }
    gguf_file f;
    CHECK(gguf_load("/nonexistent/x.gguf", GGUF_COPY, &f, err, sizeof err) == -1 && strstr(err, "/nonexistent/x.gguf"));
    CHECK(gguf_load(t_tmpdir(), GGUF_COPY, &f, err, sizeof err) == -1 && strstr(err, "directory"));
    snprintf(path, sizeof path, "%s/bad-load.gguf", t_tmpdir());
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp);
    fputs("GGUF\3\0\0\0 not really", fp);
    fclose(fp);
    CHECK(gguf_load(path, GGUF_COPY, &f, err, sizeof err) == -1 && strstr(err, path));
    CHECK(gguf_load(path, GGUF_AUTO, &f, err, sizeof err) == -1 && strstr(err, path));
}

/* ---- an in-memory builder for (possibly invalid) GGUF bytes ---- */

typedef struct {
    uint8_t p[4096];
    size_t n;
} bb;

static void b_room(const bb *b, size_t n) {
    if (b->n + n > sizeof b->p) abort(); /* a test bug: grow bb */
}
static void b_raw(bb *b, const void *p, size_t n) {
    b_room(b, n);
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_le(bb *b, uint64_t v, int k) {
    b_room(b, (size_t)k);
    for (int i = 0; i < k; i++) b->p[b->n + (size_t)i] = (uint8_t)(v >> (8 * i));
    b->n += (size_t)k;
}
static void b_str(bb *b, const char *s) {
    b_le(b, strlen(s), 8);
    b_raw(b, s, strlen(s));
}
static void put_le_at(bb *b, size_t at, uint64_t v, int k) {
    for (int i = 0; i < k; i++) b->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

typedef struct {
    const char *key1;     /* NULL: "test.u32" */
    int align_kind;       /* 0 none, 1 u32, 2 u64 */
    uint64_t align;
    const char *name_b;   /* NULL: "b" */
    uint32_t ndims_b;     /* 0: 1 dim {32} */
    uint64_t ne_b[4];
    int vocab_only;       /* no tensors, no data */
} spec;

/* Where the fields a test mutates live. */
typedef struct {
    size_t n_tensors, n_kv, key0_len, kv1_type, kv2_elem_type, kv2_count, b_ndims, b_ne0, b_type, b_offset;
    size_t end_infos;
} offs;

/* Valid unless the spec says otherwise: 4 or 5 kvs (str, u32, i32[3], str[2]), tensors a F32 [8,2] at 0
 * and b Q8_0 [32] at 64; the file ends right after b's data. */
static void build(bb *b, const spec *s, offs *o) {
    memset(b, 0, sizeof *b);
    memset(o, 0, sizeof *o);
    b_raw(b, "GGUF", 4);
    b_le(b, 3, 4);
    o->n_tensors = b->n;
    b_le(b, s->vocab_only ? 0 : 2, 8);
    o->n_kv = b->n;
    b_le(b, s->align_kind ? 5 : 4, 8);
    o->key0_len = b->n;
    b_str(b, "general.architecture");
    b_le(b, GGUF_STR, 4);
    b_str(b, "qwen2");
    b_str(b, s->key1 ? s->key1 : "test.u32");
    o->kv1_type = b->n;
    b_le(b, GGUF_U32, 4);
    b_le(b, 7, 4);
    b_str(b, "test.arr");
    b_le(b, GGUF_ARR, 4);
    o->kv2_elem_type = b->n;
    b_le(b, GGUF_I32, 4);
    o->kv2_count = b->n;
    b_le(b, 3, 8);
    for (int i = 1; i <= 3; i++) b_le(b, (uint64_t)i, 4);
    b_str(b, "test.strs");
    b_le(b, GGUF_ARR, 4);
    b_le(b, GGUF_STR, 4);
    b_le(b, 2, 8);
    b_str(b, "a");
    b_str(b, "bc");
    if (s->align_kind) {
        b_str(b, "general.alignment");
        b_le(b, s->align_kind == 1 ? GGUF_U32 : GGUF_U64, 4);
        b_le(b, s->align, s->align_kind == 1 ? 4 : 8);
    }
    if (!s->vocab_only) {
        b_str(b, "a");
        b_le(b, 2, 4);
        b_le(b, 8, 8);
        b_le(b, 2, 8);
        b_le(b, GGML_F32, 4);
        b_le(b, 0, 8);
        b_str(b, s->name_b ? s->name_b : "b");
        o->b_ndims = b->n;
        uint32_t nd = s->ndims_b ? s->ndims_b : 1;
        b_le(b, nd, 4);
        o->b_ne0 = b->n;
        for (uint32_t d = 0; d < nd; d++) b_le(b, s->ndims_b ? s->ne_b[d] : 32, 8);
        o->b_type = b->n;
        b_le(b, GGML_Q8_0, 4);
        o->b_offset = b->n;
        b_le(b, 64, 8);
    }
    o->end_infos = b->n;
    if (s->vocab_only) return;
    while (b->n % 32) b_le(b, 0, 1);
    for (int i = 0; i < 16; i++) b_le(b, 0x3f800000u, 4); /* a = 1.0f */
    b_le(b, 0x3c00, 2);                                     /* b: d = 1.0 (f16), qs = 0..31 */
    for (int i = 0; i < 32; i++) b_le(b, (uint64_t)i, 1);
}

/* gguf_parse must fail and its message must contain `word`. */
static int fails_with(const bb *b, size_t n, const char *word) {
    gguf_file f;
    char err[512] = "";
    int rc = gguf_parse(b->p, n, &f, err, sizeof err);
    if (rc == 0) {
        fprintf(stderr, "    parse succeeded, expected an error with '%s'\n", word);
        gguf_free(&f);
        return 0;
    }
    if (!strstr(err, word)) {
        fprintf(stderr, "    message '%s' lacks '%s'\n", err, word);
        return 0;
    }
    return f.kv == NULL && f.tensors == NULL && f.n_kv == 0;
}

TEST(gguf_malformed_base_is_valid) {
    bb b;
    offs o;
    spec s = {0};
    build(&b, &s, &o);
    gguf_file f;
    char err[512];
    REQUIRE(gguf_parse(b.p, b.n, &f, err, sizeof err) == 0);
    CHECK(f.n_kv == 4 && f.n_tensors == 2 && f.data_start % 32 == 0);
    const gguf_tensor *t = gguf_find_tensor(&f, "b");
    CHECK(t && t->type == GGML_Q8_0 && t->nbytes == 34 && t->offset == 64 && t->data[2 + 31] == 31);
    CHECK(t->data + t->nbytes == b.p + b.n);
    uint32_t et;
    uint64_t n;
    const uint8_t *p;
    CHECK(gguf_get_arr(&f, "test.strs", &et, &n, &p, err, sizeof err) == 0 && n == 2);
    gguf_str s0 = gguf_arr_str_next(&p), s1 = gguf_arr_str_next(&p);
    CHECK(gguf_str_eq(s0, "a") && gguf_str_eq(s1, "bc"));
    gguf_free(&f);
}

TEST(gguf_malformed_truncated) {
    bb b;
    offs o;
    spec s = {0};
    build(&b, &s, &o);
    for (size_t n = 0; n < b.n; n++) {
        gguf_file f;
        char err[512] = "";
        int rc = gguf_parse(b.p, n, &f, err, sizeof err);
        CHECKF(rc == -1 && err[0] && f.kv == NULL, "truncated at %zu: rc %d", n, rc);
        if (rc == 0) gguf_free(&f);
    }
    /* vocab-only: succeeds exactly when every record is there, with or without the padding */
    s.vocab_only = 1;
    build(&b, &s, &o);
    for (size_t n = 0; n <= o.end_infos + 40; n++) {
        gguf_file f;
        char err[512] = "";
        int rc = gguf_parse(b.p, n, &f, err, sizeof err);
        CHECKF(rc == (n >= o.end_infos ? 0 : -1), "vocab-only truncated at %zu: rc %d (%s)", n, rc, err);
        if (rc == 0) gguf_free(&f);
    }
}

TEST(gguf_malformed_header) {
    bb b;
    offs o;
    spec s = {0};
    build(&b, &s, &o);
    bb m = b;
    CHECK(fails_with(&m, 10, "too small"));
    m.p[0] = 'X';
    CHECK(fails_with(&m, m.n, "magic"));
    uint32_t versions[] = {1, 4, 0};
    for (int i = 0; i < 3; i++) {
        m = b;
        put_le_at(&m, 4, versions[i], 4);
        CHECK(fails_with(&m, m.n, "version"));
    }
    m = b;
    put_le_at(&m, 4, 0x03000000u, 4);
    CHECK(fails_with(&m, m.n, "big-endian"));
    put_le_at(&m, 4, 0x02000000u, 4);
    CHECK(fails_with(&m, m.n, "big-endian"));
    m = b;
    put_le_at(&m, o.n_kv, 1ull << 60, 8);
    CHECK(fails_with(&m, m.n, "n_kv"));
    m = b;
    put_le_at(&m, o.n_kv, UINT64_MAX, 8);
    CHECK(fails_with(&m, m.n, "n_kv"));
    m = b;
    put_le_at(&m, o.n_tensors, UINT64_MAX / 2, 8);
    CHECK(fails_with(&m, m.n, "n_tensors"));
    m = b;
    put_le_at(&m, o.n_tensors, 1000, 8); /* plausible alone, impossible with the kvs */
    CHECK(fails_with(&m, m.n, "n_tensors"));
}

TEST(gguf_malformed_kv) {
    bb b, m;
    offs o;
    spec s = {0};
    build(&b, &s, &o);
    m = b;
    put_le_at(&m, o.key0_len, UINT64_MAX, 8);
    CHECK(fails_with(&m, m.n, "string length"));
    m = b;
    put_le_at(&m, o.key0_len, m.n, 8);
    CHECK(fails_with(&m, m.n, "string length"));
    m = b;
    put_le_at(&m, o.key0_len, 0, 8);
    CHECK(fails_with(&m, m.n, "empty"));
    m = b;
    put_le_at(&m, o.kv1_type, 13, 4);
    CHECK(fails_with(&m, m.n, "unknown value type"));
    m = b;
    put_le_at(&m, o.kv1_type, 0x80000000u, 4);
    CHECK(fails_with(&m, m.n, "unknown value type"));
    m = b;
    put_le_at(&m, o.kv2_elem_type, GGUF_ARR, 4);
    CHECK(fails_with(&m, m.n, "nested"));
    m = b;
    put_le_at(&m, o.kv2_elem_type, 77, 4);
    CHECK(fails_with(&m, m.n, "element type"));
    m = b;
    put_le_at(&m, o.kv2_count, 1ull << 62, 8); /* x 4 bytes overflows u64 */
    CHECK(fails_with(&m, m.n, "overflow"));
    m = b;
    put_le_at(&m, o.kv2_count, 1000, 8);
    CHECK(fails_with(&m, m.n, "exceeds"));
    m = b;
    put_le_at(&m, o.kv2_elem_type, GGUF_STR, 4); /* i32 payload read as strings: lengths garbage */
    put_le_at(&m, o.kv2_count, UINT64_MAX, 8);
    CHECK(fails_with(&m, m.n, "string array count"));

    spec d = {.key1 = "general.architecture"};
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "duplicate key"));
    d = (spec){.key1 = "test.strs"};
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "duplicate key 'test.strs'"));
}

TEST(gguf_malformed_alignment) {
    bb m;
    offs o;
    uint64_t bad[] = {0, 48, 3, 0x80000001u};
    for (int i = 0; i < 4; i++) {
        spec s = {.align_kind = 1, .align = bad[i]};
        build(&m, &s, &o);
        CHECK(fails_with(&m, m.n, "power of two"));
    }
    spec s = {.align_kind = 2, .align = 32};
    build(&m, &s, &o);
    CHECK(fails_with(&m, m.n, "general.alignment has type u64"));
    /* a valid non-default alignment: the builder pads to 32, so 16 also works */
    s = (spec){.align_kind = 1, .align = 16};
    build(&m, &s, &o);
    gguf_file f;
    char err[512];
    int rc = gguf_parse(m.p, m.n, &f, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        CHECK(f.alignment == 16);
        gguf_free(&f);
    }
}

TEST(gguf_malformed_tensors) {
    bb b, m;
    offs o;
    spec s = {0};
    build(&b, &s, &o);
    m = b;
    put_le_at(&m, o.b_offset, 65, 8);
    CHECK(fails_with(&m, m.n, "alignment"));
    m = b;
    put_le_at(&m, o.b_offset, 1024, 8);
    CHECK(fails_with(&m, m.n, "past end of file"));
    m = b;
    CHECK(fails_with(&m, m.n - 1, "'b' data"));
    m = b;
    put_le_at(&m, o.b_offset, UINT64_MAX - 31, 8);
    CHECK(fails_with(&m, m.n, "overflow"));
    m = b;
    put_le_at(&m, o.b_offset, 32, 8);
    CHECK(fails_with(&m, m.n, "overlap"));
    m = b;
    put_le_at(&m, o.b_offset, 0, 8);
    CHECK(fails_with(&m, m.n, "overlap"));
    m = b;
    put_le_at(&m, o.b_ndims, 5, 4);
    CHECK(fails_with(&m, m.n, "n_dims"));
    m = b;
    put_le_at(&m, o.b_ne0, 33, 8);
    CHECK(fails_with(&m, m.n, "multiple"));
    m = b;
    put_le_at(&m, o.b_ne0, 1ull << 63, 8);
    CHECK(fails_with(&m, m.n, "negative"));
    uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, 39, 1000};
    for (int i = 0; i < 10; i++) {
        m = b;
        put_le_at(&m, o.b_type, removed[i], 4);
        CHECK(fails_with(&m, m.n, "removed"));
    }
    m = b;
    put_le_at(&m, o.b_type, GGML_Q2_K, 4);
    CHECK(fails_with(&m, m.n, "not supported"));

    spec d = {.name_b = "a"};
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "duplicate tensor name 'a'"));
    d = (spec){.name_b = ""};
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "empty name"));
    d = (spec){.name_b = "0123456789012345678901234567890123456789012345678901234567890123"}; /* 64 bytes */
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "too long"));
    d = (spec){.ndims_b = 3, .ne_b = {32, 1ull << 40, 1ull << 40}};
    build(&m, &d, &o);
    CHECK(fails_with(&m, m.n, "overflow"));
    d = (spec){.ndims_b = 2, .ne_b = {32, 0}}; /* an empty tensor is fine */
    build(&m, &d, &o);
    gguf_file f;
    char err[512];
    int rc = gguf_parse(m.p, m.n, &f, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) gguf_free(&f);
}

/* ---- typed getters and the writer ---- */

static int write_mem(gguf_writer *w, uint8_t **out, size_t *n, int with_data) {
    char err[512];
    FILE *fp = open_memstream((char **)out, n);
    if (!fp || gguf_writer_open_stream(w, fp, err, sizeof err)) return -1;
    if (with_data) {
        uint8_t chunk[100];
        for (int i = 0; i < 100; i++) chunk[i] = (uint8_t)(i * 7 + 1);
        /* tensor bytes: 48 (a) + 288 (q) + 12 (h) = 348, sent in odd-sized chunks */
        size_t left = 348;
        while (left) {
            size_t k = left < 37 ? left : 37;
            if (gguf_writer_write(w, chunk, k, err, sizeof err)) return -1;
            left -= k;
        }
    }
    int rc = gguf_writer_close(w, err, sizeof err);
    fclose(fp);
    return rc;
}

TEST(gguf_write_roundtrip) {
    gguf_writer *w = gguf_writer_begin(64);
    gguf_writer_add_u8(w, "k.u8", 200);
    gguf_writer_add_i8(w, "k.i8", -5);
    gguf_writer_add_u16(w, "k.u16", 60000);
    gguf_writer_add_i16(w, "k.i16", -30000);
    gguf_writer_add_u32(w, "k.u32", 4000000000u);
    gguf_writer_add_i32(w, "k.i32", -1);
    gguf_writer_add_f32(w, "k.f32", 1.5f);
    gguf_writer_add_bool(w, "k.bool", 1);
    gguf_writer_add_str(w, "k.str", "hello");
    gguf_writer_add_u64(w, "k.u64", 1ull << 40);
    gguf_writer_add_u64(w, "k.u64small", 12345);
    gguf_writer_add_i64(w, "k.i64", -7);
    gguf_writer_add_f64(w, "k.f64", 0.25);
    int32_t ints[3] = {1, -2, 3};
    gguf_writer_add_arr(w, "k.arr", GGUF_I32, 3, ints);
    gguf_writer_begin_arr_str(w, "k.strs", 3);
    gguf_writer_arr_str(w, "x", 1);
    gguf_writer_arr_str(w, "", 0);
    gguf_writer_arr_str(w, "yz", 2);
    char err[512];
    uint64_t ne_a[2] = {4, 3}, ne_q[2] = {256, 2}, ne_h[1] = {6};
    REQUIRE(gguf_writer_add_tensor(w, "a", 2, ne_a, GGML_F32, err, sizeof err) == 0);
    REQUIRE(gguf_writer_add_tensor(w, "q", 2, ne_q, GGML_Q4_K, err, sizeof err) == 0);
    REQUIRE(gguf_writer_add_tensor(w, "h", 1, ne_h, GGML_F16, err, sizeof err) == 0);
    uint64_t bad[1] = {100};
    CHECK(gguf_writer_add_tensor(w, "bad", 1, bad, GGML_Q4_0, err, sizeof err) == -1 && strstr(err, "multiple"));
    uint8_t *mem = NULL;
    size_t n = 0;
    REQUIRE(write_mem(w, &mem, &n, 1) == 0);

    gguf_file f;
    int rc = gguf_parse(mem, n, &f, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc) { free(mem); return; }
    CHECK(f.version == 3 && f.alignment == 64 && f.n_kv == 16 && f.n_tensors == 3);
    uint32_t u32;
    uint64_t u64;
    float f32;
    int bv;
    gguf_str s;
    CHECK(gguf_get_u32(&f, "k.u8", &u32, err, sizeof err) == 0 && u32 == 200);
    CHECK(gguf_get_u32(&f, "k.u16", &u32, err, sizeof err) == 0 && u32 == 60000);
    CHECK(gguf_get_u32(&f, "k.u32", &u32, err, sizeof err) == 0 && u32 == 4000000000u);
    CHECK(gguf_get_u64(&f, "k.u64", &u64, err, sizeof err) == 0 && u64 == 1ull << 40);
    CHECK(gguf_get_f32(&f, "k.f32", &f32, err, sizeof err) == 0 && f32 == 1.5f);
    CHECK(gguf_get_f32(&f, "k.f64", &f32, err, sizeof err) == 0 && f32 == 0.25f);
    CHECK(gguf_get_bool(&f, "k.bool", &bv, err, sizeof err) == 0 && bv == 1);
    CHECK(gguf_get_str(&f, "k.str", &s, err, sizeof err) == 0 && gguf_str_eq(s, "hello"));
    const gguf_kv *kv = gguf_find(&f, "k.i8");
    CHECK(kv && kv->type == GGUF_I8 && (int8_t)kv->data[0] == -5);
    kv = gguf_find(&f, "k.i16");
    CHECK(kv && kv->type == GGUF_I16 && (int16_t)(kv->data[0] | kv->data[1] << 8) == -30000);
    kv = gguf_find(&f, "k.i64");
    CHECK(kv && kv->type == GGUF_I64 && kv->size == 8 && kv->data[0] == 0xf9 && kv->data[7] == 0xff);
    uint32_t et;
    uint64_t cnt;
    const uint8_t *p;
    CHECK(gguf_get_arr(&f, "k.arr", &et, &cnt, &p, err, sizeof err) == 0 && et == GGUF_I32 && cnt == 3);
    CHECK(p[4] == 0xfe && p[8] == 3);
    CHECK(gguf_get_arr(&f, "k.strs", &et, &cnt, &p, err, sizeof err) == 0 && et == GGUF_STR && cnt == 3);
    gguf_str e0 = gguf_arr_str_next(&p), e1 = gguf_arr_str_next(&p), e2 = gguf_arr_str_next(&p);
    CHECK(gguf_str_eq(e0, "x") && gguf_str_eq(e1, "") && gguf_str_eq(e2, "yz"));

    const gguf_tensor *ta = gguf_find_tensor(&f, "a"), *tq = gguf_find_tensor(&f, "q"), *th = gguf_find_tensor(&f, "h");
    REQUIRE(ta && tq && th);
    CHECK(ta->nbytes == 48 && ta->offset == 0 && ta->ne[0] == 4 && ta->ne[1] == 3 && ta->n_dims == 2);
    CHECK(tq->nbytes == 288 && tq->offset == 64 && tq->type == GGML_Q4_K);
    CHECK(th->nbytes == 12 && th->offset == 64 + 320 && th->ne[1] == 1 && th->n_dims == 1);
    CHECK(f.data_start % 64 == 0);
    /* byte k of the data stream is chunk[k % 37] = (k%37)*7+1 */
    CHECK(ta->data[0] == 1 && ta->data[1] == 8);
    CHECK(tq->data[0] == (uint8_t)((48 % 37) * 7 + 1));
    CHECK(th->data[11] == (uint8_t)((347 % 37) * 7 + 1));
    gguf_free(&f);
    free(mem);
}

/* Every prefix of a writer file (all value kinds, three tensors) fails cleanly; so do sampled
 * prefixes of a real fixture (the next test), which end inside its metadata, tensor infos or data. */
TEST(gguf_malformed_truncated_more) {
    gguf_writer *w = gguf_writer_begin(0);
    gguf_writer_add_u8(w, "a", 1);
    gguf_writer_add_i16(w, "b", -2);
    gguf_writer_add_f64(w, "c", 3.0);
    gguf_writer_add_bool(w, "d", 1);
    gguf_writer_add_str(w, "e", "text");
    gguf_writer_add_i64(w, "f", -6);
    uint16_t arr[2] = {1, 2};
    gguf_writer_add_arr(w, "g", GGUF_U16, 2, arr);
    gguf_writer_begin_arr_str(w, "h", 2);
    gguf_writer_arr_str(w, "x", 1);
    gguf_writer_arr_str(w, "yz", 2);
    char err[512];
    uint64_t ne_a[2] = {4, 3}, ne_q[2] = {256, 2}, ne_h[1] = {6};
    REQUIRE(gguf_writer_add_tensor(w, "a", 2, ne_a, GGML_F32, err, sizeof err) == 0);
    REQUIRE(gguf_writer_add_tensor(w, "q", 2, ne_q, GGML_Q4_K, err, sizeof err) == 0);
    REQUIRE(gguf_writer_add_tensor(w, "h", 1, ne_h, GGML_F16, err, sizeof err) == 0);
    uint8_t *mem = NULL;
    size_t n = 0;
    REQUIRE(write_mem(w, &mem, &n, 1) == 0);
    gguf_file f;
    REQUIRE(gguf_parse(mem, n, &f, err, sizeof err) == 0);
    size_t end = (size_t)(f.tensors[2].data + f.tensors[2].nbytes - f.bytes); /* trailing padding is optional */
    gguf_free(&f);
    for (size_t k = 0; k < n; k++) {
        int rc = gguf_parse(mem, k, &f, err, sizeof err);
        CHECKF(rc == (k >= end ? 0 : -1), "writer file truncated at %zu of %zu: rc %d", k, n, rc);
        if (rc == 0) gguf_free(&f);
    }
    free(mem);
}

TEST(gguf_malformed_truncated_fixture) {
    gguf_file f;
    char err[512];
    NEED("fixtures/models/llama-Q4_K_M.gguf");
    FILE *fp = fopen(t_shared("fixtures/models/llama-Q4_K_M.gguf"), "rb");
    REQUIRE(fp);
    static uint8_t buf[64 << 10];
    size_t got = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    REQUIRE(got == sizeof buf);
    for (size_t k = 0; k < got; k += 61) {
        int rc = gguf_parse(buf, k, &f, err, sizeof err);
        CHECKF(rc == -1 && err[0], "fixture truncated at %zu: rc %d", k, rc);
        if (rc == 0) gguf_free(&f);
    }
}

TEST(gguf_write_incomplete) {
    gguf_writer *w = gguf_writer_begin(0);
    char err[512];
    uint64_t ne[1] = {8};
    REQUIRE(gguf_writer_add_tensor(w, "t", 1, ne, GGML_F32, err, sizeof err) == 0);
    uint8_t *mem = NULL;
    size_t n = 0;
    FILE *fp = open_memstream((char **)&mem, &n);
    REQUIRE(fp && gguf_writer_open_stream(w, fp, err, sizeof err) == 0);
    uint8_t d[40] = {0};
    CHECK(gguf_writer_write(w, d, 40, err, sizeof err) == -1 && strstr(err, "past the last tensor"));
    CHECK(gguf_writer_close(w, err, sizeof err) == 0);
    fclose(fp);
    free(mem);
    w = gguf_writer_begin(0);
    REQUIRE(gguf_writer_add_tensor(w, "t", 1, ne, GGML_F32, err, sizeof err) == 0);
    mem = NULL;
    fp = open_memstream((char **)&mem, &n);
    REQUIRE(fp && gguf_writer_open_stream(w, fp, err, sizeof err) == 0);
    CHECK(gguf_writer_write(w, d, 5, err, sizeof err) == 0);
    CHECK(gguf_writer_close(w, err, sizeof err) == -1 && strstr(err, "5 of its 32 bytes"));
    fclose(fp);
    free(mem);
}

TEST(gguf_getters) {
    gguf_writer *w = gguf_writer_begin(0);
    gguf_writer_add_u64(w, "u64.small", 77);
    gguf_writer_add_u64(w, "u64.big", 1ull << 33);
    gguf_writer_add_i32(w, "i32.neg", -3);
    gguf_writer_add_i64(w, "i64.pos", 123);
    gguf_writer_add_str(w, "s", "text");
    gguf_writer_add_f32(w, "f", 2.0f);
    gguf_writer_add_bool(w, "b", 0);
    uint8_t *mem = NULL;
    size_t n = 0;
    REQUIRE(write_mem(w, &mem, &n, 0) == 0);
    gguf_file f;
    char err[512];
    REQUIRE(gguf_parse(mem, n, &f, err, sizeof err) == 0);
    uint32_t u32 = 0;
    uint64_t u64;
    float x;
    int bv;
    gguf_str s;
    const uint8_t *p;
    uint32_t et;
    CHECK(gguf_get_u32(&f, "u64.small", &u32, err, sizeof err) == 0 && u32 == 77);
    CHECK(gguf_get_u32(&f, "i64.pos", &u32, err, sizeof err) == 0 && u32 == 123);
    CHECK(gguf_get_u32(&f, "u64.big", &u32, err, sizeof err) == -1 && strstr(err, "out of range") && strstr(err, "u64.big"));
    CHECK(gguf_get_u64(&f, "u64.big", &u64, err, sizeof err) == 0 && u64 == 1ull << 33);
    CHECK(gguf_get_u64(&f, "i32.neg", &u64, err, sizeof err) == -1 && strstr(err, "negative"));
    CHECK(gguf_get_u32(&f, "s", &u32, err, sizeof err) == -1 && strstr(err, "expected an integer"));
    CHECK(gguf_get_u32(&f, "f", &u32, err, sizeof err) == -1 && strstr(err, "type f32"));
    CHECK(gguf_get_f32(&f, "u64.small", &x, err, sizeof err) == -1 && strstr(err, "expected a float"));
    CHECK(gguf_get_str(&f, "f", &s, err, sizeof err) == -1 && strstr(err, "expected str"));
    CHECK(gguf_get_bool(&f, "s", &bv, err, sizeof err) == -1 && strstr(err, "expected bool"));
    CHECK(gguf_get_bool(&f, "b", &bv, err, sizeof err) == 0 && bv == 0);
    CHECK(gguf_get_arr(&f, "s", &et, &u64, &p, err, sizeof err) == -1 && strstr(err, "expected an array"));
    CHECK(gguf_get_u32(&f, "missing.key", &u32, err, sizeof err) == -1 && strstr(err, "'missing.key' not found"));
    CHECK(gguf_find_tensor(&f, "nothing") == NULL);
    gguf_free(&f);
    free(mem);
}

TEST(gguf_type_table) {
    CHECK(ggml_blck_size(GGML_Q4_K) == 256 && ggml_type_size(GGML_Q4_K) == 144);
    CHECK(ggml_blck_size(GGML_Q5_0) == 32 && ggml_type_size(GGML_Q5_0) == 22);
    CHECK(ggml_type_size(GGML_Q6_K) == 210 && ggml_type_size(GGML_BF16) == 2);
    CHECK(ggml_blck_size(4) == 0 && ggml_blck_size(31) == 0 && ggml_blck_size(39) == 0 && ggml_blck_size(~0u) == 0);
    CHECK(strcmp(ggml_type_name(GGML_Q8_0), "Q8_0") == 0 && strcmp(ggml_type_name(5), "?") == 0);
    CHECK(ggml_type_supported(GGML_Q5_1) && !ggml_type_supported(GGML_Q2_K) && !ggml_type_supported(GGML_Q8_K));
}

/* ---- gen-random ---- */

TEST(gguf_gen_random_qwen05b) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/rand-0.5b.gguf", t_tmpdir());
    char *argv[] = {"gen-random", "--shape", "qwen2.5-0.5b", "--type", "Q4_K_M", "--layers", "1",
                    "--seed", "3", "-o", path, NULL};
    REQUIRE(cmd_gen_random(11, argv) == 0);
    gguf_file f;
    int rc = gguf_open(path, &f, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc) return;
    gguf_str s;
    uint32_t v;
    float x;
    CHECK(gguf_get_str(&f, "general.architecture", &s, err, sizeof err) == 0 && gguf_str_eq(s, "qwen2"));
    CHECK(gguf_get_u32(&f, "qwen2.block_count", &v, err, sizeof err) == 0 && v == 1);
    CHECK(gguf_get_u32(&f, "qwen2.embedding_length", &v, err, sizeof err) == 0 && v == 896);
    CHECK(gguf_get_u32(&f, "qwen2.attention.head_count", &v, err, sizeof err) == 0 && v == 14);
    CHECK(gguf_get_u32(&f, "qwen2.attention.head_count_kv", &v, err, sizeof err) == 0 && v == 2);
    CHECK(gguf_get_u32(&f, "qwen2.feed_forward_length", &v, err, sizeof err) == 0 && v == 4864);
    CHECK(gguf_get_f32(&f, "qwen2.rope.freq_base", &x, err, sizeof err) == 0 && x == 1e6f);
    CHECK(gguf_get_f32(&f, "qwen2.attention.layer_norm_rms_epsilon", &x, err, sizeof err) == 0 && x == 1e-6f);
    CHECK(gguf_get_u32(&f, "tokenizer.ggml.eos_token_id", &v, err, sizeof err) == 0 && v < 151936);
    uint32_t et;
    uint64_t n;
    const uint8_t *p;
    CHECK(gguf_get_arr(&f, "tokenizer.ggml.tokens", &et, &n, &p, err, sizeof err) == 0 && et == GGUF_STR && n == 151936);
    gguf_str t0 = gguf_arr_str_next(&p);
    CHECK(gguf_str_eq(t0, "\xc4\x80")); /* byte 0x00 -> U+0100 */
    CHECK(gguf_get_arr(&f, "tokenizer.ggml.merges", &et, &n, &p, err, sizeof err) == 0 && n == 0);
    /* tied embedding with 896-wide rows: Q8_0; q/k/v/o/gate/up fall back to Q5_0; ffn_down is real Q4_K/Q6_K */
    CHECK(f.n_tensors == 2 + 12);
    CHECK(gguf_find_tensor(&f, "output.weight") == NULL);
    CHECK(has_tensor(&f, "token_embd.weight", GGML_Q8_0, 896, 151936));
    CHECK(has_tensor(&f, "blk.0.attn_q.weight", GGML_Q5_0, 896, 896));
    CHECK(has_tensor(&f, "blk.0.attn_k.weight", GGML_Q5_0, 896, 128));
    CHECK(has_tensor(&f, "blk.0.attn_v.weight", GGML_Q8_0, 896, 128)); /* Q6_K in a more-bits layer -> Q8_0 */
    CHECK(has_tensor(&f, "blk.0.attn_q.bias", GGML_F32, 896, 1));
    CHECK(has_tensor(&f, "blk.0.attn_k.bias", GGML_F32, 128, 1));
    CHECK(has_tensor(&f, "blk.0.attn_output.weight", GGML_Q5_0, 896, 896));
    CHECK(has_tensor(&f, "blk.0.ffn_gate.weight", GGML_Q5_0, 896, 4864));
    CHECK(has_tensor(&f, "blk.0.ffn_down.weight", GGML_Q6_K, 4864, 896));
    CHECK(has_tensor(&f, "blk.0.ffn_norm.weight", GGML_F32, 896, 1));
    CHECK(has_tensor(&f, "output_norm.weight", GGML_F32, 896, 1));
    const gguf_tensor *norm = gguf_find_tensor(&f, "output_norm.weight");
    if (norm) CHECK(norm->data[3] == 0x3f && norm->data[2] == 0x80); /* 1.0f */
    gguf_free(&f);
    remove(path);
}

TEST(gguf_gen_random_flags) {
    char path[512];
    snprintf(path, sizeof path, "%s/never.gguf", t_tmpdir());
    char *a1[] = {"gen-random", "--shape", "no-such-model", "--type", "Q4_0", "-o", path, NULL};
    CHECK(cmd_gen_random(7, a1) == 2);
    char *a2[] = {"gen-random", "--shape", "qwen2.5-0.5b", "--type", "Q3_K", "-o", path, NULL};
    CHECK(cmd_gen_random(7, a2) == 2);
    char *a3[] = {"gen-random", "--bogus", NULL};
    CHECK(cmd_gen_random(2, a3) == 2);
}

TEST(gguf_inspect_cmd) {
    NEED("fixtures/models/qwen2-Q4_K_M.gguf");
    NEED("fixtures/models/llama-Q8_0.gguf");
    char *a1[] = {"inspect", (char *)t_shared("fixtures/models/qwen2-Q4_K_M.gguf"), NULL};
    FILE *saved = stdout;
    char *out = NULL;
    size_t n = 0;
    stdout = open_memstream(&out, &n);
    REQUIRE(stdout);
    int rc = cmd_inspect(2, a1);
    char *a2[] = {"inspect", (char *)t_shared("fixtures/models/llama-Q8_0.gguf"), "--json", NULL};
    int rc2 = cmd_inspect(3, a2);
    fclose(stdout);
    stdout = saved;
    CHECK(rc == 0 && rc2 == 0);
    CHECK(out && strstr(out, "blk.0.attn_k.weight") && strstr(out, "Q4_K") && strstr(out, "tokenizer.ggml.tokens"));
    CHECK(out && strstr(out, "\"tensors\"") && strstr(out, "\"Q8_0\""));
    free(out);
    char *a3[] = {"inspect", "--nope", NULL};
    CHECK(cmd_inspect(2, a3) == 2);
    char *a4[] = {"inspect", "/nonexistent.gguf", NULL};
    CHECK(cmd_inspect(2, a4) == 1);
}

/* gen-random removes its output on a failure only when this run created it: not a directory, a
 * device, a path it could not open, nor a file that was there before. A write that fails midway
 * is made with a file-size limit (SIGXFSZ ignored, so the write returns EFBIG). */
static int gen_random_sh(const char *out, int limit_blocks, char *msg, size_t cap) {
    char cmd[2048], log[600], limit[32] = "";
    snprintf(log, sizeof log, "%s/gen-random.log", t_tmpdir());
    if (limit_blocks) snprintf(limit, sizeof limit, "ulimit -f %d;", limit_blocks); /* 512-byte blocks */
    snprintf(cmd, sizeof cmd, "sh -c \"trap '' XFSZ; %s exec %s gen-random --shape qwen2.5-0.5b --type Q4_0 --layers 1 -o '%s'\" >'%s' 2>&1",
             limit, t_bin(), out, log);
    int st = system(cmd);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(msg, 1, cap - 1, f) : 0;
    msg[n] = 0;
    if (f) fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(gguf_gen_random_removes_only_its_own) {
    char dir[512], keep[600], path[600], msg[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/genr-dir", t_tmpdir());
    REQUIRE(mkdir(dir, 0777) == 0);
    snprintf(keep, sizeof keep, "%s/keep", dir);
    FILE *f = fopen(keep, "w");
    REQUIRE(f);
    fclose(f);
    /* an existing directory: refused, left as it was */
    CHECK(gen_random_sh(dir, 0, msg, sizeof msg) == 1 && strstr(msg, "Is a directory"));
    CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(keep, F_OK) == 0);
    /* a device that fails every write */
    CHECK(gen_random_sh("/dev/full", 0, msg, sizeof msg) == 1 && strstr(msg, "write failed"));
    CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    /* a path whose directory does not exist */
    snprintf(path, sizeof path, "%s/no-such-dir/x.gguf", t_tmpdir());
    CHECK(gen_random_sh(path, 0, msg, sizeof msg) == 1 && strstr(msg, "No such file"));
    /* a new file whose write fails midway (limit 32 KiB, header and the first tensor): removed */
    snprintf(path, sizeof path, "%s/genr-new.gguf", t_tmpdir());
    CHECK(gen_random_sh(path, 64, msg, sizeof msg) == 1 && strstr(msg, "removed the incomplete"));
    CHECK(access(path, F_OK) != 0);
    /* ... and at once (limit 512 bytes: inside the metadata) */
    CHECK(gen_random_sh(path, 1, msg, sizeof msg) == 1 && strstr(msg, "removed the incomplete"));
    CHECK(access(path, F_OK) != 0);
    /* a file that was there before: kept, and said to be incomplete */
    snprintf(path, sizeof path, "%s/genr-old.gguf", t_tmpdir());
    f = fopen(path, "w");
    REQUIRE(f);
    fputs("old", f);
    fclose(f);
    CHECK(gen_random_sh(path, 64, msg, sizeof msg) == 1 && strstr(msg, "is incomplete"));
    CHECK(access(path, F_OK) == 0);
}
