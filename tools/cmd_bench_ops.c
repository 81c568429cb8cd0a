/* cmd_bench_ops.c — `tierkv bench-ops`: the backend's decode kernels alone, on random data of a known
 * model's shape (tools/shapes.h), without loading a model:
 *   matmul     each per-layer matrix (attn_q/k/v, attn_output, ffn_gate/up/down) in the given type,
 *              prepared by the backend's prepare_weight, times one token (the decode GEMV): µs per
 *              call and GB/s (the matrix's bytes in the file's layout / time)
 *   attention  one layer, one query token, the shape's heads, over `depth` positions of an f16 T0
 *              pool filled with random rows (kv_write), no keep mask, no weights asked: µs per layer
 * Timing: wall clock around --reps calls, ended by one backend read of 4 bytes of the op's output (a
 * read waits for the compute queue: on a GPU the queued calls have all run), after one untimed call
 * and read (first-use costs: the device copy of the slot table, lazy setup). So a time includes the
 * host's launch cost per call where that exceeds the device's; it is not an event-timed kernel.
 * Prints one JSON object per line with --json, else a table. Not a test: `make test` runs it once on
 * the CPU with a tiny shape to check its output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/clock.h"
#include "cmds.h"
#include "common.h"
#include "gguf/gguf.h"
#include "shapes.h"

#define MAX_DEPTHS 16

typedef struct {
    be_backend *b;
    const be_ops *o;
    int reps, json;
    const char *backend;
    uint64_t rng;
} bench;

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv bench-ops [--backend cpu|cuda] [--shape NAME] [--type T] [--depths N,N,...] [--reps N]\n"
                 "                        [-t N] [--device N] [--json]\n"
                 "  times the backend's decode matmuls (one token) and one layer's attention on random data of a\n"
                 "  model's shape (defaults: cpu, r1-distill-qwen-7b, BF16, 2048,8192,32768, 20 reps, 2 threads)\n"
                 "  shapes:");
    for (size_t i = 0; i < shapes_n; i++) fprintf(out, " %s", shapes_table[i].name);
    fprintf(out, "\n  types: F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q6_K ... (what the backend's prepare_weight takes)\n");
}

/* the ggml type called name, or -1 */
static int type_of(const char *name) {
    for (uint32_t t = 0; t < 64; t++)
        if (ggml_blck_size(t) && !strcmp(ggml_type_name(t), name)) return (int)t;
    return -1;
}

static void *dalloc(bench *B, size_t bytes, char *err, size_t errlen) {
    return B->o->alloc(B->b, bytes, BE_MEM_DEVICE, err, errlen);
}

static void upload_random(bench *B, float *dst, size_t n, float scale) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n && h; i++) h[i] = scale * shapes_rng_unif(&B->rng);
    if (h) B->o->upload(B->b, dst, h, n * sizeof *h);
    free(h);
}

/* waits for the compute queue (a read of 4 bytes of an op's output) */
static void sync_on(bench *B, const float *dev) {
    float tmp;
    (void)B->o->read(B->b, dev, sizeof tmp, &tmp);
}

static int bench_matmul(bench *B, const char *name, uint32_t type, int64_t n_in, int64_t n_out, char *err, size_t errlen) {
    if (n_in % ggml_blck_size(type)) {
        snprintf(err, errlen, "%s: %lld inputs are not a whole number of %s blocks (%u)", name, (long long)n_in,
                 ggml_type_name(type), ggml_blck_size(type));
        return -1;
    }
    size_t row = (size_t)ggml_type_size(type) * (size_t)(n_in / ggml_blck_size(type)), bytes = row * (size_t)n_out;
    void *w = NULL;
    if (posix_memalign(&w, 4096, bytes)) {
        snprintf(err, errlen, "%s: out of memory (%zu bytes of weights)", name, bytes);
        return -1;
    }
    shapes_fill(type, w, (uint64_t)n_in * (uint64_t)n_out, (uint64_t)n_in, &B->rng);
    be_mat m = {.data = w, .type = type, .n_in = n_in, .n_out = n_out};
    int rc = -1;
    float *x = NULL, *y = NULL;
    void *scratch = NULL;
    if (B->o->prepare_weight(B->b, &m, BE_W_MATMUL, err, errlen)) goto done;
    be_mm_out out = {&m, NULL, n_out};
    size_t ss = B->o->matmul_scratch(B->b, &out, 1, n_in, 1);
    if (!(x = dalloc(B, (size_t)n_in * 4, err, errlen)) || !(y = dalloc(B, (size_t)n_out * 4, err, errlen)) ||
        !(scratch = dalloc(B, ss ? ss : 64, err, errlen)))
        goto done;
    out.y = y;
    upload_random(B, x, (size_t)n_in, 1.0f);
    B->o->matmul(B->b, &out, 1, n_in, x, 1, scratch);
    sync_on(B, y);
    double t0 = tkv_now_s();
    for (int r = 0; r < B->reps; r++) B->o->matmul(B->b, &out, 1, n_in, x, 1, scratch);
    sync_on(B, y);
    double us = (tkv_now_s() - t0) / B->reps * 1e6, gbs = (double)bytes / (us * 1e-6) / 1e9;
    if (B->json)
        printf("{\"op\":\"matmul\",\"name\":\"%s\",\"n_in\":%lld,\"n_out\":%lld,\"type\":\"%s\",\"us\":%.1f,\"gb_s\":%.1f,"
               "\"bytes\":%zu,\"reps\":%d,\"backend\":\"%s\"}\n",
               name, (long long)n_in, (long long)n_out, ggml_type_name(type), us, gbs, bytes, B->reps, B->backend);
    else
        printf("  %-12s %7lld %7lld %10.1f %9.1f\n", name, (long long)n_in, (long long)n_out, us, gbs);
    rc = 0;
done:
    if (x) B->o->free(B->b, x, BE_MEM_DEVICE);
    if (y) B->o->free(B->b, y, BE_MEM_DEVICE);
    if (scratch) B->o->free(B->b, scratch, BE_MEM_DEVICE);
    free(w); /* a backend that keeps the weights in place (the CPU) is done with them */
    return rc;
}

/* One layer's attention at each depth over a T0 pool of f16 rows (one layer, chunks of 4096 slots). */
static int bench_attention(bench *B, const model_shape *s, const int *depths, int n_depths, char *err, size_t errlen) {
    int hd = (int)(s->n_embd / s->n_head), nh = (int)s->n_head, nkv = (int)s->n_head_kv, kd = nkv * hd;
    int max_d = 0;
    for (int i = 0; i < n_depths; i++) max_d = depths[i] > max_d ? depths[i] : max_d;
    enum { SHIFT = 12, BATCH = 1024 };
    int n_chunks = (max_d + (1 << SHIFT) - 1) >> SHIFT;
    be_kv_pools p;
    memset(&p, 0, sizeof p);
    p.n_layer = 1, p.n_head_kv = nkv, p.head_dim = hd;
    void **chunks = calloc((size_t)n_chunks, sizeof *chunks);
    int32_t *table = malloc((size_t)max_d * sizeof *table), *slots = malloc(BATCH * sizeof *slots);
    float *q = NULL, *o = NULL, *k = NULL, *v = NULL;
    void *scratch = NULL;
    int rc = -1, made = 0;
    if (!chunks || !table || !slots) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int t = 0; t < BE_N_POOLS; t++) {
        be_kv_pool *q0 = &p.pool[t];
        q0->fmt = BE_KV_F16, q0->mem = BE_MEM_DEVICE, q0->layers = 1, q0->chunk_shift = SHIFT;
        q0->record_bytes = be_kv_record_bytes(BE_KV_F16, nkv, hd);
    }
    p.pool[BE_T0].chunks = chunks;
    for (; made < n_chunks; made++)
        if (!(chunks[made] = dalloc(B, ((size_t)1 << SHIFT) * p.pool[BE_T0].record_bytes, err, errlen))) goto done;
    p.pool[BE_T0].n_chunks = n_chunks;
    size_t ss = B->o->attention_scratch(B->b, 1, max_d, nh, hd);
    if (!(q = dalloc(B, (size_t)nh * hd * 4, err, errlen)) || !(o = dalloc(B, (size_t)nh * hd * 4, err, errlen)) ||
        !(k = dalloc(B, (size_t)BATCH * kd * 4, err, errlen)) || !(v = dalloc(B, (size_t)BATCH * kd * 4, err, errlen)) ||
        !(scratch = dalloc(B, ss ? ss : 64, err, errlen)))
        goto done;
    for (int i = 0; i < max_d; i++) table[i] = BE_SLOT(BE_T0, i);
    for (int i0 = 0; i0 < max_d; i0 += BATCH) { /* random rows (keys scaled like a real model's) */
        int n = max_d - i0 < BATCH ? max_d - i0 : BATCH;
        for (int i = 0; i < n; i++) slots[i] = table[i0 + i];
        upload_random(B, k, (size_t)n * kd, 4.0f);
        upload_random(B, v, (size_t)n * kd, 1.0f);
        B->o->kv_write(B->b, &p, 0, slots, n, k, v);
    }
    upload_random(B, q, (size_t)nh * hd, 1.0f);
    if (!B->json) printf("\n  %-12s %9s\n", "attention", "us/layer");
    for (int i = 0; i < n_depths; i++) {
        const int32_t *tabs[1] = {table};
        int n_pos[1] = {depths[i]};
        be_attn a = {.n_tok = 1, .layer = 0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                     .scale = 1.0f / sqrtf((float)hd), .q = q, .o = o, .pools = &p, .slots = tabs, .n_pos = n_pos,
                     .mass_mode = BE_MASS_NONE, .tables_gen = (uint64_t)i + 1};
        B->o->attention(B->b, &a, scratch); /* untimed: the device copy of the slot table */
        sync_on(B, o);
        double t0 = tkv_now_s();
        for (int r = 0; r < B->reps; r++) B->o->attention(B->b, &a, scratch);
        sync_on(B, o);
        double us = (tkv_now_s() - t0) / B->reps * 1e6;
        if (B->json)
            printf("{\"op\":\"attention\",\"depth\":%d,\"us_per_layer\":%.1f,\"n_head\":%d,\"n_head_kv\":%d,\"head_dim\":%d,"
                   "\"kv\":\"f16\",\"reps\":%d,\"backend\":\"%s\"}\n",
                   depths[i], us, nh, nkv, hd, B->reps, B->backend);
        else
            printf("  %-12d %9.1f\n", depths[i], us);
    }
    rc = 0;
done:
    for (int c = 0; c < made; c++) B->o->free(B->b, chunks[c], BE_MEM_DEVICE);
    void *bufs[] = {q, o, k, v, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) B->o->free(B->b, bufs[i], BE_MEM_DEVICE);
    free(chunks), free(table), free(slots);
    return rc;
}

/* "2048,8192" -> depths; -1 on a bad list */
static int parse_depths(const char *s, int *out) {
    int n = 0;
    const char *at = s;
    while (*at) {
        char num[32];
        size_t len = strcspn(at, ",");
        long d;
        if (len == 0 || len >= sizeof num || n == MAX_DEPTHS) return -1;
        memcpy(num, at, len), num[len] = 0;
        if (parse_int(num, 1, 1 << 24, &d)) return -1;
        out[n++] = (int)d;
        at += len + (at[len] == ',');
    }
    return n ? n : -1;
}

int cmd_bench_ops(int argc, char **argv) {
    const char *backend = "cpu", *shape_name = "r1-distill-qwen-7b", *type_name = "BF16", *depth_list = "2048,8192,32768";
    long reps = 20, threads = 2, device = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "bench-ops: %s needs a value\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--type")) type_name = v;
        else if (!strcmp(a, "--depths")) depth_list = v;
        else if (!strcmp(a, "--reps")) { if (parse_int(v, 1, 100000, &reps)) { fprintf(stderr, "bench-ops: bad --reps '%s'\n", v); return 2; } }
        else if (!strcmp(a, "-t")) { if (parse_int(v, 1, 256, &threads)) { fprintf(stderr, "bench-ops: bad -t '%s'\n", v); return 2; } }
        else if (!strcmp(a, "--device")) { if (parse_int(v, 0, 64, &device)) { fprintf(stderr, "bench-ops: bad --device '%s'\n", v); return 2; } }
        else { fprintf(stderr, "bench-ops: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    const model_shape *s = shapes_find(shape_name);
    if (!s) { fprintf(stderr, "bench-ops: unknown shape '%s'\n", shape_name); usage(stderr); return 2; }
    int type = type_of(type_name);
    if (type < 0) { fprintf(stderr, "bench-ops: unknown type '%s'\n", type_name); usage(stderr); return 2; }
    int depths[MAX_DEPTHS], n_depths = parse_depths(depth_list, depths);
    if (n_depths < 0) { fprintf(stderr, "bench-ops: bad --depths '%s' (up to %d positive counts, comma-separated)\n", depth_list, MAX_DEPTHS); return 2; }
    char err[512];
    be_params bp = {.name = backend, .n_threads = (int)threads, .device = (int)device};
    bench B = {.reps = (int)reps, .json = json, .backend = backend, .rng = 0x9e3779b97f4a7c15ull};
    if (be_open(&bp, &B.b, err, sizeof err)) { fprintf(stderr, "bench-ops: %s\n", err); return 1; }
    B.o = B.b->ops;
    fprintf(stderr, "bench-ops: %s backend (%s), %s, %s weights, %ld reps, wall clock over the reps ended by a read\n",
            backend, B.o->describe(B.b), s->name, type_name, reps);
    int64_t E = s->n_embd, hd = E / s->n_head, Q = hd * s->n_head, KV = hd * s->n_head_kv, F = s->n_ff;
    const struct { const char *name; int64_t n_in, n_out; } mats[] = {
        {"attn_q", E, Q}, {"attn_k", E, KV}, {"attn_v", E, KV}, {"attn_output", Q, E},
        {"ffn_gate", E, F}, {"ffn_up", E, F}, {"ffn_down", F, E},
    };
    int rc = 0;
    if (!json) printf("  %-12s %7s %7s %10s %9s\n", "matmul", "n_in", "n_out", "us", "GB/s");
    for (size_t i = 0; i < sizeof mats / sizeof mats[0] && !rc; i++)
        if (bench_matmul(&B, mats[i].name, (uint32_t)type, mats[i].n_in, mats[i].n_out, err, sizeof err)) rc = 1;
    if (!rc && bench_attention(&B, s, depths, n_depths, err, sizeof err)) rc = 1;
    if (rc) fprintf(stderr, "bench-ops: %s\n", err);
    be_close(B.b);
    return rc;
}
