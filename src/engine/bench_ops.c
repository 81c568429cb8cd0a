/* bench_ops.c — tkv_bench_ops (tierkv.h): a backend's decode ops timed alone on random data of a
 * model's shape, without a model.
 *   matmul     each per-layer matrix (attn_q/k/v, attn_output, ffn_gate/up/down) of random weights
 *              (gguf_random.h) in the asked type, prepared by the backend's prepare_weight, one token
 *              (with cold_mib, copies of each matrix totalling that many MiB, at most MAX_COPIES,
 *              called in turn: alone, a matrix that fits the last-level cache is read from there on
 *              every call after the first, where a decode step reads each from memory)
 *   attention  one layer, one query token, the shape's heads, over `depth` positions of an f16 T0 pool
 *              (one layer, chunks of 4096 slots) filled with random rows by kv_write; no keep mask, no
 *              weights asked; the slot table's device copy is kept across calls (tables_gen), as the
 *              layers of one forward call keep it
 * Timing: wall clock around reps calls, ended by one backend read of 4 bytes of the op's output (a
 * read waits for the compute queue: on a GPU every queued call has run), after one untimed call and
 * read (first-use costs). A time therefore includes the host's launch cost per call where that
 * exceeds the device's; it is not an event-timed kernel. Not used by a decode step.
 * Also tkv_cpu_int8_peak: the CPU kernels' int8 instruction peak (backend/cpu/peak.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/peak.h"
#include "base/clock.h"
#include "base/err.h"
#include "gguf/gguf.h"
#include "gguf/gguf_random.h"
#include "tierkv.h"

typedef struct {
    be_backend *b;
    const be_ops *o;
    int reps, n_tok, cold_mib;
    uint64_t rng;
    void (*row)(void *ctx, const tkv_bench_ops_row *r);
    void *ctx;
} bench;

static void *dalloc(bench *B, size_t bytes, char *err, size_t errlen) {
    return B->o->alloc(B->b, bytes, BE_MEM_DEVICE, err, errlen);
}

static void upload_random(bench *B, float *dst, size_t n, float scale) {
    float *h = tkv_xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = scale * gguf_rng_unif(&B->rng);
    B->o->upload(B->b, dst, h, n * sizeof *h);
    free(h);
}

/* waits for the compute queue (a read of 4 bytes of an op's output) */
static void sync_on(bench *B, const float *dev) {
    float tmp;
    (void)B->o->read(B->b, dev, sizeof tmp, &tmp);
}

static int bench_matmul(bench *B, const char *name, uint32_t type, int64_t n_in, int64_t n_out, char *err, size_t errlen) {
    int64_t nt = B->n_tok;
    if (n_in % ggml_blck_size(type))
        return tkv_errf(err, errlen, "%s: %lld inputs are not a whole number of %s blocks (%u)", name, (long long)n_in,
                        ggml_type_name(type), ggml_blck_size(type));
    size_t row = (size_t)ggml_row_bytes(type, n_in), bytes = row * (size_t)n_out;
    enum { MAX_COPIES = 256 };
    size_t want = (size_t)B->cold_mib << 20;
    int copies = want > bytes ? (int)((want + bytes - 1) / bytes) : 1;
    if (copies > MAX_COPIES) copies = MAX_COPIES;
    void *w[MAX_COPIES] = {0};
    be_mat m[MAX_COPIES];
    int rc = TKV_ERR, made = 0;
    float *x = NULL, *y = NULL;
    void *scratch = NULL;
    for (; made < copies; made++) {
        if (posix_memalign(&w[made], 4096, bytes)) {
            w[made] = NULL;
            tkv_errf(err, errlen, "%s: out of memory (copy %d of %zu bytes of weights)", name, made + 1, bytes);
            goto done;
        }
        if (made == 0) gguf_fill_random(type, w[0], (uint64_t)n_in * (uint64_t)n_out, (uint64_t)n_in, &B->rng);
        else memcpy(w[made], w[0], bytes);
        m[made] = (be_mat){.data = w[made], .type = type, .n_in = n_in, .n_out = n_out};
    }
    for (int c = 0; c < copies; c++)
        if (B->o->prepare_weight(B->b, &m[c], BE_W_MATMUL, err, errlen)) goto done;
    be_mm_out out = {&m[0], NULL, n_out, NULL};
    size_t ss = B->o->matmul_scratch(B->b, &out, 1, n_in, nt);
    if (!(x = dalloc(B, (size_t)(n_in * nt) * 4, err, errlen)) || !(y = dalloc(B, (size_t)(n_out * nt) * 4, err, errlen)) ||
        !(scratch = dalloc(B, ss ? ss : 64, err, errlen)))
        goto done;
    out.y = y;
    upload_random(B, x, (size_t)(n_in * nt), 1.0f);
    B->o->matmul(B->b, &out, 1, n_in, x, (int)nt, scratch);
    sync_on(B, y);
    double t0 = tkv_now_s();
    for (int r = 0; r < B->reps; r++) {
        out.w = &m[r % copies];
        B->o->matmul(B->b, &out, 1, n_in, x, (int)nt, scratch);
    }
    sync_on(B, y);
    tkv_bench_ops_row res = {.op = "matmul", .name = name, .n_in = n_in, .n_out = n_out, .bytes = (int64_t)bytes,
                             .n_tok = (int)nt, .copies = copies, .us = (tkv_now_s() - t0) / B->reps * 1e6};
    B->row(B->ctx, &res);
    rc = TKV_OK;
done:
    if (x) B->o->free(B->b, x, BE_MEM_DEVICE);
    if (y) B->o->free(B->b, y, BE_MEM_DEVICE);
    if (scratch) B->o->free(B->b, scratch, BE_MEM_DEVICE);
    for (int c = 0; c < made; c++) free(w[c]); /* a backend that keeps the weights in place (the CPU) is done with them */
    return rc;
}

static int head_dim(const tkv_bench_ops_params *P) { return P->head_dim ? P->head_dim : P->n_embd / P->n_head; }

static int bench_attention(bench *B, const tkv_bench_ops_params *P, char *err, size_t errlen) {
    int hd = head_dim(P), nh = P->n_head, nkv = P->n_head_kv, kd = nkv * hd, max_d = 0;
    for (int i = 0; i < P->n_depths; i++) max_d = P->depths[i] > max_d ? P->depths[i] : max_d;
    if (max_d <= 0) return TKV_OK;
    enum { SHIFT = 12, BATCH = 1024 };
    int n_chunks = (max_d + (1 << SHIFT) - 1) >> SHIFT, made = 0, rc = TKV_ERR;
    be_kv_pools p;
    memset(&p, 0, sizeof p);
    p.n_layer = 1, p.n_head_kv = nkv, p.head_dim = hd;
    void **chunks = tkv_xcalloc((size_t)n_chunks, sizeof *chunks);
    int32_t *table = tkv_xmalloc((size_t)max_d * sizeof *table), *slots = tkv_xmalloc(BATCH * sizeof *slots);
    float *q = NULL, *o = NULL, *k = NULL, *v = NULL;
    void *scratch = NULL;
    for (int t = 0; t < BE_N_POOLS; t++) {
        be_kv_pool *pl = &p.pool[t];
        pl->fmt = BE_KV_F16, pl->mem = BE_MEM_DEVICE, pl->layers = 1, pl->chunk_shift = SHIFT;
        pl->record_bytes = be_kv_record_bytes(BE_KV_F16, nkv, hd);
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
    for (int i0 = 0; i0 < max_d; i0 += BATCH) {
        int n = max_d - i0 < BATCH ? max_d - i0 : BATCH;
        for (int i = 0; i < n; i++) slots[i] = table[i0 + i];
        upload_random(B, k, (size_t)n * kd, 4.0f);
        upload_random(B, v, (size_t)n * kd, 1.0f);
        B->o->kv_write(B->b, &p, 0, slots, n, k, v);
    }
    upload_random(B, q, (size_t)nh * hd, 1.0f);
    for (int i = 0; i < P->n_depths; i++) {
        const int32_t *tabs[1] = {table};
        int n_pos[1] = {P->depths[i]};
        be_attn a = {.n_tok = 1, .layer = 0, .n_head = nh, .n_head_kv = nkv, .head_dim = hd,
                     .scale = 1.0f / sqrtf((float)hd), .q = q, .o = o, .pools = &p, .slots = tabs, .n_pos = n_pos,
                     .mass_mode = BE_MASS_NONE, .tables_gen = (uint64_t)i + 1};
        B->o->attention(B->b, &a, scratch); /* untimed: the device copy of the slot table */
        sync_on(B, o);
        double t0 = tkv_now_s();
        for (int r = 0; r < B->reps; r++) B->o->attention(B->b, &a, scratch);
        sync_on(B, o);
        tkv_bench_ops_row res = {.op = "attention", .depth = P->depths[i], .us = (tkv_now_s() - t0) / B->reps * 1e6};
        B->row(B->ctx, &res);
    }
    rc = TKV_OK;
done:
    for (int c = 0; c < made; c++) B->o->free(B->b, chunks[c], BE_MEM_DEVICE);
    void *bufs[] = {q, o, k, v, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) B->o->free(B->b, bufs[i], BE_MEM_DEVICE);
    free(chunks), free(table), free(slots);
    return rc;
}

int tkv_bench_ops(const tkv_bench_ops_params *P, void (*row)(void *ctx, const tkv_bench_ops_row *r), void *ctx,
                  char *describe, size_t describe_len, char *err, size_t errlen) {
    int type = ggml_type_by_name(P->type);
    if (type < 0) return tkv_errf(err, errlen, "unknown weight type '%s'", P->type ? P->type : "(none)");
    if (P->n_embd <= 0 || P->n_head <= 0 || P->n_head_kv <= 0 || P->n_ff <= 0 || P->head_dim < 0 ||
        (!P->head_dim && P->n_embd % P->n_head) || P->n_head % P->n_head_kv || P->reps < 1)
        return tkv_errf(err, errlen, "bench-ops: a bad shape (%d, %d heads, %d kv heads, head dim %d, %d) or reps %d",
                        P->n_embd, P->n_head, P->n_head_kv, P->head_dim, P->n_ff, P->reps);
    for (int i = 0; i < P->n_depths; i++)
        if (P->depths[i] < 1) return tkv_errf(err, errlen, "bench-ops: depth %d is not positive", P->depths[i]);
    if (P->n_tok < 0 || P->n_tok > 4096) return tkv_errf(err, errlen, "bench-ops: %d tokens per matmul (1..4096)", P->n_tok);
    if (P->cold_mib < 0 || P->cold_mib > 65536) return tkv_errf(err, errlen, "bench-ops: --cold %d MiB (0..65536)", P->cold_mib);
    be_params bp = {.name = P->backend, .n_threads = P->n_threads, .device = P->device};
    bench B = {.reps = P->reps, .n_tok = P->n_tok > 1 ? P->n_tok : 1, .cold_mib = P->cold_mib, .rng = P->seed ? P->seed : 1, .row = row, .ctx = ctx};
    if (be_open(&bp, &B.b, err, errlen)) return TKV_ERR;
    B.o = B.b->ops;
    if (describe && describe_len) snprintf(describe, describe_len, "%s", B.o->describe(B.b));
    int64_t E = P->n_embd, hd = head_dim(P), Q = hd * P->n_head, KV = hd * P->n_head_kv, F = P->n_ff;
    const struct { const char *name; int64_t n_in, n_out; } mats[] = {
        {"attn_q", E, Q}, {"attn_k", E, KV}, {"attn_v", E, KV}, {"attn_output", Q, E},
        {"ffn_gate", E, F}, {"ffn_up", E, F}, {"ffn_down", F, E},
    };
    int rc = TKV_OK;
    for (size_t i = 0; i < sizeof mats / sizeof mats[0] && rc == TKV_OK; i++)
        rc = bench_matmul(&B, mats[i].name, (uint32_t)type, mats[i].n_in, mats[i].n_out, err, errlen);
    if (rc == TKV_OK) rc = bench_attention(&B, P, err, errlen);
    be_close(B.b);
    return rc;
}

int tkv_cpu_int8_peak(const char *kernels, int n_threads, double seconds, double *ops_per_s, const char **isa, char *err,
                      size_t errlen) {
    cpu_isa v;
    if (n_threads < 1 || n_threads > 256) return tkv_errf(err, errlen, "threads must be 1..256 (got %d)", n_threads);
    if (cpu_isa_choose(kernels, &v, err, errlen)) return TKV_ERR;
    *isa = cpu_isa_name(v);
    *ops_per_s = cpu_int8_peak(v, n_threads, seconds > 0 ? seconds : 0.5);
    return 0;
}
