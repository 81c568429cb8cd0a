/* test_cuda.c — the CUDA backend.
 * Without a GPU (every build): the host-side logic the kernels rely on.
 *   cuda_host_wlayout: every weight type's device layout, decoded unit by unit with the very decoders
 *     the kernels run (cuda_wlayout.h), covers each element once and equals the generic CPU
 *     dequantisation bit for bit.
 *   cuda_host_moves: move lists planned into runs and phases, executed run by run, leave the pools
 *     as the moves executed one by one in list order do (demoted T0 slot handed to a promoted token in
 *     the same batch included); such a batch is one group; a swap is refused by the one-group planner.
 *   cuda_host_move_groups: ANY move list (swaps, chains longer than the phases, repeated
 *     destinations, conversions) split into groups, each group's runs executed phase by phase as a
 *     device may (all reads of a phase before its writes, or its records in reverse order), leaves
 *     the pools byte for byte as the CPU backend's copy_moves (list order) does; the lists include
 *     ones the one-group planner refused (the old abort).
 *   cuda_host_tables: the attention tables' image (shared slot tables and keep masks once) holds
 *     what each row's own tables hold; its size stays under the scratch bound.
 *   cuda_host_ring: ring reservations are aligned, inside one segment, and a segment is entered only
 *     after it was left (its event recorded).
 *   cuda_host_arena: the weights' arena hands out aligned, disjoint ranges inside its chunk and says
 *     when one does not fit, leaving the chunk as it was.
 *   cuda_host_blas_probe: cuBLAS loads from the toolkit as the backend loads it (skips where the
 *     toolkit has none), and a library named by TIERKV_CUBLAS that is not there fails naming it.
 * With a GPU (`make cuda`): every op against the CPU reference on fresh random data, outputs
 * poisoned (NaN) before each run, ||out - ref|| / ||ref|| printed per op and bounded. Without
 * TKV_CUDA these skip with "built without CUDA (make cuda)"; with it but no device, with the CUDA
 * runtime's reason. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/cuda_plan.h"
#include "backend/cuda/cuda_wlayout.h"
#include "base/half.h"
#include "codec/kvq.h"
#include "model/route.h"
#include "t.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

static uint64_t rs = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}
static float rndf(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }

static const uint32_t TYPES[] = {CW_T_F32, CW_T_F16, CW_T_BF16, CW_T_Q8_0, CW_T_Q4_0, CW_T_Q5_0, CW_T_Q4_K, CW_T_Q6_K};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])
static const char *tname(uint32_t t) {
    switch (t) {
    case CW_T_F32: return "F32";
    case CW_T_F16: return "F16";
    case CW_T_BF16: return "BF16";
    case CW_T_Q8_0: return "Q8_0";
    case CW_T_Q4_0: return "Q4_0";
    case CW_T_Q5_0: return "Q5_0";
    case CW_T_Q4_K: return "Q4_K";
    default: return "Q6_K";
    }
}

/* n_rows random file rows of type t: random bytes with small finite scale fields */
static uint8_t *rand_file_rows(uint32_t t, int64_t n_in, int64_t n_rows, size_t *row_bytes) {
    size_t rb = cpu_weight_row_size(t, n_in);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) w[i] = (uint8_t)rnd();
    int64_t blck = cpu_type_blck(t), nb = n_in / blck * n_rows;
    size_t bs = rb / (size_t)(n_in / blck);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = w + (size_t)b * bs;
        switch (t) {
        case CW_T_F32: { float f = rndf(); memcpy(p, &f, 4); break; }
        case CW_T_F16: put16(p, tkv_f32_to_f16(rndf())); break;
        case CW_T_BF16: put16(p, tkv_f32_to_bf16(rndf())); break;
        case CW_T_Q8_0: case CW_T_Q4_0: case CW_T_Q5_0: put16(p, tkv_f32_to_f16(rndf() * 0.01f)); break;
        case CW_T_Q4_K: put16(p, tkv_f32_to_f16(rndf() * 0.01f)), put16(p + 2, tkv_f32_to_f16(rndf() * 0.01f)); break;
        case CW_T_Q6_K: put16(p + 208, tkv_f32_to_f16(rndf() * 0.01f)); break;
        }
    }
    *row_bytes = rb;
    return w;
}

/* the layout of file rows in host memory, as prepare_weight builds it on the device */
static uint8_t *host_layout(uint32_t t, const uint8_t *file, int64_t n_in, int64_t n_rows, cw_mat *m) {
    size_t off[3];
    int64_t st[3];
    size_t total = cw_layout(t, n_in, n_rows, off, st);
    if (!total) return NULL;
    uint8_t *buf = calloc(1, total);
    cw_repack_rows(t, file, n_in, n_rows, buf + off[0], buf + off[1], buf + off[2]);
    *m = (cw_mat){.type = t, .n_in = n_in, .n_out = n_rows, .a = buf + off[0], .b = buf + off[1], .c = buf + off[2],
                  .sa = st[0], .sb = st[1], .sc = st[2]};
    return buf;
}

/* prepare_weight's upload: a piece of nr rows from file row r0, filled by threads over disjoint row
 * ranges (cw_stage_rows), holds for each array k exactly the bytes the whole matrix's layout has
 * at off[k] + r0 * stride[k], which is where the piece's array k is copied to on the device. */
TEST(cuda_host_stage_rows) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = TYPES[ti];
        int64_t n_in = 768, rows = 37;
        if (n_in % cw_block(t)) continue;
        size_t rb, off[3];
        int64_t st[3];
        uint8_t *file = rand_file_rows(t, n_in, rows, &rb);
        cw_mat m;
        uint8_t *whole = host_layout(t, file, n_in, rows, &m);
        REQUIRE(whole && cw_layout(t, n_in, rows, off, st));
        static const int64_t pieces[][2] = {{0, 37}, {0, 13}, {13, 11}, {24, 13}, {36, 1}}; /* r0, nr */
        int bad = 0;
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            int64_t r0 = pieces[p][0], nr = pieces[p][1];
            size_t bytes = (size_t)nr * (size_t)(st[0] + st[1] + st[2]);
            uint8_t *stage = malloc(bytes);
            REQUIRE(stage);
            memset(stage, 0xA5, bytes);
            int64_t cut1 = nr / 3, cut2 = nr - nr / 4; /* three threads' ranges, one may be empty */
            cw_stage_rows(t, file + (size_t)r0 * rb, n_in, nr, stage, cut1, cut2);
            cw_stage_rows(t, file + (size_t)r0 * rb, n_in, nr, stage, 0, cut1);
            cw_stage_rows(t, file + (size_t)r0 * rb, n_in, nr, stage, cut2, nr);
            const uint8_t *src = stage;
            for (int k = 0; k < 3; k++) {
                size_t n = (size_t)nr * (size_t)st[k];
                if (n && memcmp(src, whole + off[k] + (size_t)r0 * (size_t)st[k], n)) bad++;
                src += n;
            }
            free(stage);
        }
        CHECKF(bad == 0, "%s: %d arrays of the staged pieces differ from the layout", tname(t), bad);
        free(whole), free(file);
    }
}

TEST(cuda_host_wlayout) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = TYPES[ti];
        int64_t lens[] = {256, 768, 3584, 96, 896};
        for (int li = 0; li < 5; li++) {
            int64_t n_in = lens[li];
            if (n_in % cw_block(t)) continue;
            int64_t rows = 3;
            size_t rb;
            uint8_t *file = rand_file_rows(t, n_in, rows, &rb);
            cw_mat m;
            uint8_t *buf = host_layout(t, file, n_in, rows, &m);
            REQUIRE(buf);
            float *ref = malloc((size_t)n_in * sizeof(float)), *got = malloc((size_t)n_in * sizeof(float));
            int *seen = malloc((size_t)n_in * sizeof(int));
            int U = cw_unit(t), NS = cw_nspan(t), SL = U / NS, bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                cpu_ops_for(t, CPU_ISA_GENERIC)->dequant_row(file + (size_t)r * rb, ref, n_in);
                memset(seen, 0, (size_t)n_in * sizeof(int));
                for (int64_t u = 0; u < n_in / U; u++) {
                    float v[32];
                    cw_unit_any(&m, r, u, v);
                    for (int s = 0; s < NS; s++)
                        for (int k = 0; k < SL; k++) {
                            int64_t e = cw_span_base(t, u, s) + k;
                            if (e < 0 || e >= n_in) { bad++; continue; }
                            seen[e]++;
                            got[e] = v[s * SL + k];
                        }
                }
                for (int64_t e = 0; e < n_in; e++)
                    if (seen[e] != 1 || tkv_f32_bits(got[e]) != tkv_f32_bits(ref[e])) bad++;
            }
            CHECKF(bad == 0, "%s n_in %lld: %d elements differ from the generic dequantisation", tname(t), (long long)n_in, bad);
            free(ref), free(got), free(seen), free(buf), free(file);
        }
    }
    size_t off[3];
    int64_t st[3];
    CHECK(cw_layout(CW_T_Q4_K, 896, 4, off, st) == 0); /* K-quants need whole 256-blocks */
    CHECK(cw_layout(13 /* Q5_K */, 256, 4, off, st) == 0);  /* not a type the backend runs */
}

/* ---- KV records on the host (the layout of backend.h) ---- */

static size_t rec_bytes(be_kv_fmt f, int nkv, int hd) {
    size_t kd = (size_t)nkv * hd;
    return f == BE_KV_F32 ? 8 * kd : f == BE_KV_F16 ? 4 * kd : 2 * kd + 8 * (size_t)nkv;
}
static void rec_encode(uint8_t *rec, be_kv_fmt f, int nkv, int hd, const float *k, const float *v) {
    int kd = nkv * hd;
    for (int part = 0; part < 2; part++) {
        const float *x = part ? v : k;
        if (f == BE_KV_F32) memcpy(rec + (size_t)part * kd * 4, x, (size_t)kd * 4);
        else if (f == BE_KV_F16)
            for (int i = 0; i < kd; i++) { uint16_t h = tkv_f32_to_f16(x[i]); memcpy(rec + ((size_t)part * kd + i) * 2, &h, 2); }
        else {
            float sc[64];
            kvq_q8h_encode(x, nkv, hd, (int8_t *)rec + (size_t)part * kd, sc);
            memcpy(rec + 2 * (size_t)kd + (size_t)part * nkv * 4, sc, (size_t)nkv * 4);
        }
    }
}
static void rec_decode(const uint8_t *rec, be_kv_fmt f, int nkv, int hd, float *k, float *v) {
    int kd = nkv * hd;
    for (int part = 0; part < 2; part++) {
        float *x = part ? v : k;
        if (!x) continue;
        if (f == BE_KV_F32) memcpy(x, rec + (size_t)part * kd * 4, (size_t)kd * 4);
        else if (f == BE_KV_F16)
            for (int i = 0; i < kd; i++) { uint16_t h; memcpy(&h, rec + ((size_t)part * kd + i) * 2, 2); x[i] = tkv_f16_to_f32(h); }
        else {
            float sc[64];
            memcpy(sc, rec + 2 * (size_t)kd + (size_t)part * nkv * 4, (size_t)nkv * 4);
            kvq_q8h_decode((const int8_t *)rec + (size_t)part * kd, sc, nkv, hd, x);
        }
    }
}

/* Host pools for the planner test: chunks from malloc. */
typedef struct {
    be_kv_pools p;
    void *chunks[BE_N_POOLS][8];
} hpools;

static void hpools_init(hpools *h, int n_layer, int nkv, int hd, const be_kv_fmt fmt[4], int shift, int n_chunks) {
    memset(h, 0, sizeof *h);
    h->p.n_layer = n_layer, h->p.n_head_kv = nkv, h->p.head_dim = hd;
    for (int i = 0; i < BE_N_POOLS; i++) {
        be_kv_pool *q = &h->p.pool[i];
        q->fmt = fmt[i], q->mem = BE_MEM_HOST, q->layers = i == BE_STAGE ? 2 : n_layer, q->chunk_shift = shift;
        q->n_chunks = n_chunks, q->chunks = h->chunks[i];
        q->record_bytes = rec_bytes(fmt[i], nkv, hd);
        for (int c = 0; c < n_chunks; c++)
            h->chunks[i][c] = calloc(1, ((size_t)1 << shift) * (size_t)q->layers * q->record_bytes);
    }
}
static void hpools_free(hpools *h) {
    for (int i = 0; i < BE_N_POOLS; i++)
        for (int c = 0; c < h->p.pool[i].n_chunks; c++) free(h->chunks[i][c]);
}

/* one move on the host: decode, re-encode (exact for the same format: a byte copy) */
static void host_move(const be_kv_pools *p, int32_t src, int32_t dst, int layer) {
    const be_kv_pool *ps = &p->pool[BE_SLOT_TIER(src)], *pd = &p->pool[BE_SLOT_TIER(dst)];
    const uint8_t *s = be_kv_record(p, src, layer);
    uint8_t *d = be_kv_record(p, dst, layer);
    if (ps->fmt == pd->fmt) { memmove(d, s, ps->record_bytes); return; }
    int kd = p->n_head_kv * p->head_dim;
    float *k = malloc((size_t)kd * 8), *v = k + kd;
    rec_decode(s, ps->fmt, p->n_head_kv, p->head_dim, k, v);
    rec_encode(d, pd->fmt, p->n_head_kv, p->head_dim, k, v);
    free(k);
}
/* One record of a run: s into d, a byte copy or through f32 (k, v: kv_dim floats each). */
static void run_record(const cu_move_run *r, const uint8_t *s, uint8_t *d, const be_kv_pools *p, float *k, float *v) {
    if (r->same) memmove(d, s, r->src_bytes);
    else {
        rec_decode(s, r->src_fmt, p->n_head_kv, p->head_dim, k, v);
        rec_encode(d, r->dst_fmt, p->n_head_kv, p->head_dim, k, v);
    }
}
static void host_runs(const cu_move_run *runs, int n_runs, const be_kv_pools *p) {
    int kd = p->n_head_kv * p->head_dim;
    float *k = malloc((size_t)kd * 8), *v = k + kd;
    for (int r = 0; r < n_runs; r++)
        for (uint32_t i = 0; i < runs[r].n; i++)
            run_record(&runs[r], (const uint8_t *)(uintptr_t)(runs[r].src + (uint64_t)i * runs[r].src_bytes),
                       (uint8_t *)(uintptr_t)(runs[r].dst + (uint64_t)i * runs[r].dst_bytes), p, k, v);
    free(k);
}
static void fill_pools_random(hpools *h) {
    for (int i = 0; i < BE_N_POOLS; i++) {
        be_kv_pool *q = &h->p.pool[i];
        size_t per = ((size_t)1 << q->chunk_shift) * (size_t)q->layers;
        int kd = h->p.n_head_kv * h->p.head_dim;
        float *k = malloc((size_t)kd * 8), *v = k + kd;
        for (int c = 0; c < q->n_chunks; c++)
            for (size_t r = 0; r < per; r++) {
                for (int e = 0; e < 2 * kd; e++) k[e] = rndf();
                rec_encode((uint8_t *)h->chunks[i][c] + r * q->record_bytes, q->fmt, h->p.n_head_kv, h->p.head_dim, k, v);
            }
        free(k);
    }
}
static int pools_equal(const hpools *a, const hpools *b) {
    for (int i = 0; i < BE_N_POOLS; i++) {
        const be_kv_pool *q = &a->p.pool[i];
        size_t bytes = ((size_t)1 << q->chunk_shift) * (size_t)q->layers * q->record_bytes;
        for (int c = 0; c < q->n_chunks; c++)
            if (memcmp(a->chunks[i][c], b->chunks[i][c], bytes)) return 0;
    }
    return 1;
}
static void pools_copy(hpools *dst, const hpools *src) {
    for (int i = 0; i < BE_N_POOLS; i++) {
        const be_kv_pool *q = &src->p.pool[i];
        size_t bytes = ((size_t)1 << q->chunk_shift) * (size_t)q->layers * q->record_bytes;
        for (int c = 0; c < q->n_chunks; c++) memcpy(dst->chunks[i][c], src->chunks[i][c], bytes);
    }
}

static int runs_equal(const cu_move_run *a, int na, const cu_move_run *b, int nb) {
    if (na != nb) return 0;
    for (int r = 0; r < na; r++)
        if (a[r].src != b[r].src || a[r].dst != b[r].dst || a[r].n != b[r].n || a[r].src_bytes != b[r].src_bytes ||
            a[r].dst_bytes != b[r].dst_bytes || a[r].src_fmt != b[r].src_fmt || a[r].dst_fmt != b[r].dst_fmt ||
            a[r].phase != b[r].phase || a[r].same != b[r].same || a[r].src_tier != b[r].src_tier ||
            a[r].dst_tier != b[r].dst_tier)
            return 0;
    return 1;
}

/* A batch like kv_step_end's: demotions T0 -> T1 / T2, promotions into the T0 slots they free,
 * staging T1/T2 -> STAGE, with runs of consecutive slots. */
static int make_moves(be_move *mv, int slots_per_pool) {
    int n = 0;
    for (int s = 0; s < 8; s++) mv[n++] = (be_move){BE_SLOT(BE_T0, 3 + s), BE_SLOT(BE_T1, 10 + s)};   /* a run */
    mv[n++] = (be_move){BE_SLOT(BE_T0, 20), BE_SLOT(BE_T2, 5)};                                       /* quantise */
    mv[n++] = (be_move){BE_SLOT(BE_T1, 40), BE_SLOT(BE_T0, 3)};   /* promoted into a slot just demoted */
    mv[n++] = (be_move){BE_SLOT(BE_T2, 9), BE_SLOT(BE_T0, 20)};   /* dequantised into a freed slot */
    for (int s = 0; s < 6; s++) mv[n++] = (be_move){BE_SLOT(BE_T1, 50 + 2 * s), BE_SLOT(BE_STAGE, s)}; /* scattered */
    for (int k = 0; k < 10; k++) {
        int a = 64 + (int)(rnd() % (unsigned)(slots_per_pool - 64)), b = 64 + (int)(rnd() % (unsigned)(slots_per_pool - 64));
        mv[n++] = (be_move){BE_SLOT(BE_T1, a), BE_SLOT(BE_T2, b)};
    }
    return n;
}

/* The integer decoders (cuda_mmq.cu's products): every element sc * q - off equals the float
 * decoder's bit for bit, and each span lies in one 32-block (one activation scale). */
TEST(cuda_host_wlayout_int) {
    int types = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = TYPES[ti];
        if (!cw_has_iunit(t)) continue;
        types++;
        int64_t n_in = 768, rows = 4;
        size_t rb;
        uint8_t *file = rand_file_rows(t, n_in, rows, &rb);
        cw_mat m;
        uint8_t *buf = host_layout(t, file, n_in, rows, &m);
        REQUIRE(buf);
        int U = cw_unit(t), NS = cw_nspan(t), SL = U / NS, bad = 0, split = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t u = 0; u < n_in / U; u++) {
                float v[32], sc[4], off[4];
                uint32_t q[8];
                cw_unit_any(&m, r, u, v);
                cw_iunit_any(&m, r, u, q, sc, off);
                for (int s = 0; s < NS; s++) {
                    int64_t b = cw_span_base(t, u, s);
                    split += b / 32 != (b + SL - 1) / 32;
                    for (int k = 0; k < SL; k++) {
                        int e = s * SL + k;
                        float got = cw_sub(cw_mul(sc[s], (float)(int8_t)((q[e >> 2] >> (8 * (e & 3))) & 0xffu)), off[s]);
                        bad += tkv_f32_bits(got) != tkv_f32_bits(v[e]);
                    }
                }
            }
        CHECKF(bad == 0 && split == 0, "%s: %d elements differ from the float decoder, %d spans cross a 32-block", tname(t),
               bad, split);
        free(buf), free(file);
    }
    CHECK(types == 4);
    CHECK(cw_bsub(0x000f0800u, 0x08080808u) == 0xf80700f8u); /* -8, 0, 7, -8 as bytes */
}

TEST(cuda_host_moves) {
    const be_kv_fmt fmts[4] = {BE_KV_F16, BE_KV_F16, BE_KV_Q8_HEAD, BE_KV_F16};
    hpools a, b;
    hpools_init(&a, 3, 2, 64, fmts, 5, 4), hpools_init(&b, 3, 2, 64, fmts, 5, 4);
    fill_pools_random(&a);
    pools_copy(&b, &a);
    be_move mv[64];
    int n = make_moves(mv, 128);
    /* the random T1 -> T2 tail may pick a destination twice; keep the first */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (mv[j].dst == mv[i].dst) { mv[i] = mv[--n]; i--; break; }
    cu_move_run runs[64];
    uint64_t ws[CU_MOVE_WS_WORDS(64)];
    for (int layer = 0; layer < 3; layer++) {
        for (int i = 0; i < n; i++) host_move(&a.p, mv[i].src, mv[i].dst, layer);
        int nr = cu_plan_moves(&b.p, mv, n, layer, runs, ws);
        REQUIRE(nr > 0 && nr < n);
        int total = 0, phase_ok = 1, ordered = 1;
        for (int r = 0; r < nr; r++) {
            total += (int)runs[r].n;
            if (r && runs[r].phase < runs[r - 1].phase) ordered = 0;
            /* the promotion into T0 slot 3 reads nothing another move writes, but writes what the
             * first demotion reads: it must come in a later phase */
            if (runs[r].dst == (uint64_t)(uintptr_t)be_kv_record(&b.p, BE_SLOT(BE_T0, 3), layer) && runs[r].phase == 0) phase_ok = 0;
        }
        CHECK(total == n);
        CHECK(phase_ok && ordered);
        CHECK(runs[0].n == 8 && runs[0].same); /* the eight consecutive demotions are one run */
        uint8_t ph[64];
        int starts[65];
        uint64_t gws[CU_MOVE_WS_WORDS(64)];
        CHECK(cu_group_moves(&b.p, mv, n, layer, ph, starts, gws) == 1); /* the batch stays one group */
        cu_move_run runs2[64];
        int nr2 = cu_runs_of(&b.p, mv, n, layer, ph, runs2);
        CHECK(runs_equal(runs2, nr2, runs, nr)); /* with the same runs */
        host_runs(runs, nr, &b.p);
        CHECKF(pools_equal(&a, &b), "layer %d: runs by phase differ from the moves in list order", layer);
    }
    /* a swap cannot run in place */
    be_move sw[2] = {{BE_SLOT(BE_T0, 1), BE_SLOT(BE_T1, 1)}, {BE_SLOT(BE_T1, 1), BE_SLOT(BE_T0, 1)}};
    CHECK(cu_plan_moves(&b.p, sw, 2, 0, runs, ws) == -1);
    hpools_free(&a), hpools_free(&b);
}

/* Two chunks of one layer can lie end to end (one allocation cut in two, or two allocations that
 * happen to): the last slot of the first and the first of the second are adjacent in memory but
 * two runs, since a run becomes one copy-engine transfer, which must not span two allocations. */
TEST(cuda_host_runs_chunk_edge) {
    const be_kv_fmt fmts[4] = {BE_KV_F16, BE_KV_F16, BE_KV_F16, BE_KV_F16};
    hpools h;
    hpools_init(&h, 1, 2, 64, fmts, 3, 2); /* one layer, 8 slots a chunk */
    be_kv_pool *t0 = &h.p.pool[BE_T0];
    size_t chunk = ((size_t)1 << t0->chunk_shift) * t0->record_bytes;
    void *own[2] = {h.chunks[BE_T0][0], h.chunks[BE_T0][1]};
    uint8_t *one = calloc(2, chunk);
    h.chunks[BE_T0][0] = one, h.chunks[BE_T0][1] = one + chunk;
    be_move mv[3] = {{BE_SLOT(BE_T0, 6), BE_SLOT(BE_T1, 0)}, {BE_SLOT(BE_T0, 7), BE_SLOT(BE_T1, 1)},
                     {BE_SLOT(BE_T0, 8), BE_SLOT(BE_T1, 2)}};
    uint8_t ph[3] = {0, 0, 0};
    cu_move_run runs[3];
    int nr = cu_runs_of(&h.p, mv, 3, 0, ph, runs);
    CHECKF(nr == 2 && runs[0].n == 2 && runs[1].n == 1, "%d runs (the first of %u records): a run across two chunks",
           nr, nr > 0 ? runs[0].n : 0);
    h.chunks[BE_T0][0] = own[0], h.chunks[BE_T0][1] = own[1];
    free(one);
    hpools_free(&h);
}

/* The runs of one group executed as a device may run them: phase after phase, and inside a phase
 * either every source read before any destination is written (mode 0: a read-after-write inside a
 * phase would read the old bytes) or the records in reverse order (mode 1: a write-after-read or a
 * write-after-write inside a phase would show). */
static void sim_runs(const cu_move_run *runs, int n_runs, const be_kv_pools *p, int mode) {
    int kd = p->n_head_kv * p->head_dim;
    size_t max_rec = rec_bytes(BE_KV_F32, p->n_head_kv, p->head_dim);
    float *k = malloc((size_t)kd * 8), *v = k + kd;
    for (int r0 = 0; r0 < n_runs;) {
        int r1 = r0;
        size_t recs = 0;
        while (r1 < n_runs && runs[r1].phase == runs[r0].phase) recs += runs[r1++].n;
        uint8_t *tmp = malloc(recs * max_rec + 1);
        if (mode == 0) {
            size_t at = 0;
            for (int r = r0; r < r1; r++)
                for (uint32_t i = 0; i < runs[r].n; i++, at++)
                    memcpy(tmp + at * max_rec, (const void *)(uintptr_t)(runs[r].src + (uint64_t)i * runs[r].src_bytes),
                           runs[r].src_bytes);
        }
        size_t at = 0;
        for (int rr = r0; rr < r1; rr++) {
            int r = mode == 1 ? r1 - 1 - (rr - r0) : rr;
            for (uint32_t ii = 0; ii < runs[r].n; ii++, at++) {
                uint32_t i = mode == 1 ? runs[r].n - 1 - ii : ii;
                const uint8_t *s = mode == 0 ? tmp + at * max_rec
                                             : (const uint8_t *)(uintptr_t)(runs[r].src + (uint64_t)i * runs[r].src_bytes);
                run_record(&runs[r], s, (uint8_t *)(uintptr_t)(runs[r].dst + (uint64_t)i * runs[r].dst_bytes), p, k, v);
            }
        }
        free(tmp);
        r0 = r1;
    }
    free(k);
}

/* A move list of hazards over few slots: swaps, list-order chains (each move reading what the one
 * before wrote), reverse chains (each writing what the one before read: write-after-read deeper
 * than the phases), repeated destinations, and random moves between every pair of tiers. mild: only
 * random moves and list-order chains of 2 (what the one-group planner accepts but runs otherwise). */
static int hazard_moves(be_move *mv, int cap, int slots, int mild) {
    int n = 0;
    while (n < cap - 8) {
        int kind = mild ? (rnd() % 4 ? 5 : 1) : (int)(rnd() % 6), t1 = (int)(rnd() % 4), t2 = (int)(rnd() % 4);
        int a = (int)(rnd() % (unsigned)slots), b = (int)(rnd() % (unsigned)slots);
        if (kind == 0) { /* there and back: a cycle */
            mv[n++] = (be_move){BE_SLOT(t1, a), BE_SLOT(t2, b)};
            mv[n++] = (be_move){BE_SLOT(t2, b), BE_SLOT(t1, a)};
        } else if (kind == 1 || kind == 2) { /* a chain of 6 or 7 (mild: 2) */
            int len = mild ? 2 : 6 + (int)(rnd() % 2);
            int32_t ref[8];
            for (int i = 0; i <= len; i++) ref[i] = BE_SLOT((int)(rnd() % 4), (int)(rnd() % (unsigned)slots));
            for (int i = 0; i < len; i++) {
                int j = kind == 1 ? i : len - 1 - i; /* 1: r0->r1, r1->r2, ...  2: r(len-1)->r(len), ... r0->r1 */
                mv[n++] = (be_move){ref[j], ref[j + 1]};
            }
        } else if (kind == 3) { /* the same destination twice */
            mv[n++] = (be_move){BE_SLOT(t1, a), BE_SLOT(t2, b)};
            mv[n++] = (be_move){BE_SLOT(t1, (a + 1) % slots), BE_SLOT(t2, b)};
        } else {
            mv[n++] = (be_move){BE_SLOT(t1, a), BE_SLOT(t2, b)};
        }
    }
    return n;
}

/* Moves between two disjoint sets of tiers (no move reads what another writes, as staging's T1/T2 to
 * STAGE), destinations in increasing order (cu_group_moves' one-group case); or with one destination
 * written twice, in decreasing order, or the last move reading the first one's destination (each
 * planned by the general pass). */
static int disjoint_moves(be_move *mv, int cap, int slots, int kind) {
    int from_low = (int)(rnd() % 2), n = 0; /* {T0, T1} -> {T2, STAGE}, or the other way */
    for (int t = 0; t < 2; t++)
        for (int s = 0; s < slots && n < cap; s++) {
            if (rnd() % 3 == 0) continue;
            int src_t = from_low ? (int)(rnd() % 2) : 2 + (int)(rnd() % 2), dst_t = from_low ? 2 + t : t;
            mv[n++] = (be_move){BE_SLOT(src_t, (int)(rnd() % (unsigned)slots)), BE_SLOT(dst_t, s)};
        }
    if (kind == 1 && n > 2) mv[n - 1].dst = mv[(int)(rnd() % (unsigned)(n - 1))].dst;
    if (kind == 3 && n > 2) mv[n - 1].src = mv[0].dst; /* reads what the first move wrote */
    if (kind == 2)
        for (int i = 0; i < n / 2; i++) {
            be_move t = mv[i];
            mv[i] = mv[n - 1 - i], mv[n - 1 - i] = t;
        }
    return n;
}

TEST(cuda_host_move_groups) {
    be_backend *cpu = NULL;
    char err[256];
    be_params bp = {.name = "cpu", .n_threads = 1};
    REQUIRE(be_open(&bp, &cpu, err, sizeof err) == 0);
    /* same-format pools, then T1 in F32 and T2 in Q8_HEAD (conversions both ways) */
    const be_kv_fmt fmt_same[4] = {BE_KV_F16, BE_KV_F16, BE_KV_F16, BE_KV_F16};
    const be_kv_fmt fmt_conv[4] = {BE_KV_F16, BE_KV_F32, BE_KV_Q8_HEAD, BE_KV_F16};
    enum { CAP = 96, LISTS = 300 };
    be_move mv[CAP];
    cu_move_run runs[CAP], runs1[CAP];
    uint8_t phase[CAP];
    int starts[CAP + 1];
    uint64_t ws[CU_MOVE_WS_WORDS(CAP)], ws1[CU_MOVE_WS_WORDS(CAP)];
    int bad = 0, bad_plan = 0, bad_sorted = 0, old_refused = 0, old_wrong = 0, split = 0, groups_total = 0;
    for (int variant = 0; variant < 2; variant++) {
        const be_kv_fmt *f = variant ? fmt_conv : fmt_same;
        hpools init, ref, dev, old;
        hpools_init(&init, 3, 2, 32, f, 3, 4), hpools_init(&ref, 3, 2, 32, f, 3, 4);
        hpools_init(&dev, 3, 2, 32, f, 3, 4), hpools_init(&old, 3, 2, 32, f, 3, 4);
        for (int list = 0; list < LISTS; list++) {
            int mild = list % 3 == 0, slots = mild ? 32 : 4 + (int)(rnd() % 12); /* few slots: many hazards */
            int n = list % 5 == 4 ? disjoint_moves(mv, CAP, 32, list / 5 % 4)
                                  : hazard_moves(mv, mild ? 12 : 16 + (int)(rnd() % (CAP - 16)), slots, mild);
            int layer = (int)(rnd() % 3);
            fill_pools_random(&init);
            /* the CPU backend: list order */
            pools_copy(&ref, &init);
            cpu->ops->copy_moves(cpu, &ref.p, mv, n, layer);
            /* the groups (all pools share one layout, so the plan made on dev's addresses is run on dev) */
            int ng = cu_group_moves(&dev.p, mv, n, layer, phase, starts, ws);
            REQUIRE(ng >= 1 && starts[0] == 0 && starts[ng] == n);
            { /* the one-group case gives the sorted pass's answer */
                uint8_t sphase[CAP];
                int sstarts[CAP + 1], sg = cu_group_moves_sorted(&dev.p, mv, n, layer, sphase, sstarts, ws1);
                bad_sorted += sg != ng || memcmp(sphase, phase, (size_t)n) || memcmp(sstarts, starts, ((size_t)ng + 1) * sizeof(int));
            }
            groups_total += ng, split += ng > 1;
            for (int mode = 0; mode < 2; mode++) {
                pools_copy(&dev, &init);
                for (int g = 0; g < ng; g++) {
                    int i0 = starts[g], i1 = starts[g + 1];
                    REQUIRE(i1 > i0);
                    int nr = cu_runs_of(&dev.p, mv + i0, i1 - i0, layer, phase + i0, runs);
                    if (mode == 0) { /* the one-group planner accepts each group and plans the same runs */
                        int nr1 = cu_plan_moves(&dev.p, mv + i0, i1 - i0, layer, runs1, ws1);
                        bad_plan += !runs_equal(runs, nr, runs1, nr1);
                    }
                    sim_runs(runs, nr, &dev.p, mode);
                }
                if (!pools_equal(&dev, &ref)) {
                    if (bad < 3)
                        fprintf(stderr, "    variant %d list %d (%d moves, %d groups), mode %d: differs from list order\n",
                                variant, list, n, ng, mode);
                    bad++;
                }
            }
            /* the old behaviour: the whole list as one group (-1 was an abort) */
            pools_copy(&old, &init);
            int onr = cu_plan_moves(&old.p, mv, n, layer, runs, ws);
            if (onr < 0) old_refused++;
            else {
                sim_runs(runs, onr, &old.p, 0);
                old_wrong += !pools_equal(&old, &ref);
            }
        }
        hpools_free(&init), hpools_free(&ref), hpools_free(&dev), hpools_free(&old);
    }
    CHECKF(bad == 0, "%d runs of move lists by groups differ from the CPU backend's list order", bad);
    CHECKF(bad_plan == 0, "%d groups the one-group planner refuses or plans otherwise", bad_plan);
    CHECKF(bad_sorted == 0, "%d lists grouped otherwise than by the sorted pass", bad_sorted);
    /* the lists hold what the one-group planner refused (an abort before) or ran otherwise than list order */
    CHECKF(old_refused > 0 && old_wrong > 0, "old: refused %d, wrong %d", old_refused, old_wrong);
    CHECK(split > 0);
    printf("    %d lists: %d groups in all; as one group %d were refused and %d ran otherwise than list order\n",
           2 * LISTS, groups_total, old_refused, old_wrong);
    be_close(cpu);
}

/* The group cache (cuda_plan.h): a move list's groups and phases are the same at every layer, and its
 * runs differ by their addresses only, so the same list again (staging, once per layer) is not planned
 * again; a list that differs in one move, the same list over other pools, or over the same chunk
 * table holding another chunk, is planned afresh. Every cached answer equals cu_group_moves' and
 * cu_runs_of's at that layer. The lists: hazards over a few slots (short runs), and staging lists of
 * consecutive slots with holes (long runs, across chunks). */
static int stage_like_moves(be_move *mv, int cap, int slots) {
    int n = 0;
    for (int s = (int)(rnd() % 4); s < slots && n < cap; s++)
        if (rnd() % 7) mv[n++] = (be_move){BE_SLOT(s >= 40 && s < 48 ? BE_T2 : BE_T1, s), BE_SLOT(BE_STAGE, s)};
    return n;
}

/* cu_plan_moves_cached's answer against cu_group_moves and cu_runs_of at `layer` (n_runs: its runs) */
static int plan_differs(cu_group_cache *c, const be_kv_pools *p, const be_move *mv, int n, int layer, uint64_t *ws,
                        int *n_runs) {
    enum { CAP = 96 };
    uint8_t phase[CAP], cphase[CAP];
    int starts[CAP + 1], cstarts[CAP + 1], run_starts[CAP + 1];
    cu_move_run runs[CAP], cruns[CAP];
    if (n > CAP) return 1;
    int g = cu_group_moves(p, mv, n, layer, phase, starts, ws);
    int cg = cu_plan_moves_cached(c, p, mv, n, layer, cphase, cstarts, cruns, run_starts, ws);
    if (cg != g || memcmp(cphase, phase, (size_t)n) || memcmp(cstarts, starts, ((size_t)g + 1) * sizeof(int))) return 1;
    if (run_starts[0] != 0) return 1;
    if (n_runs) *n_runs = run_starts[g];
    for (int k = 0; k < g; k++) {
        int nr = cu_runs_of(p, mv + starts[k], starts[k + 1] - starts[k], layer, phase + starts[k], runs);
        if (!runs_equal(cruns + run_starts[k], run_starts[k + 1] - run_starts[k], runs, nr)) return 1;
    }
    return 0;
}

TEST(cuda_host_group_cache) {
    const be_kv_fmt f[4] = {BE_KV_F16, BE_KV_F16, BE_KV_Q8_HEAD, BE_KV_F16};
    enum { CAP = 96, LISTS = 200, L = 3 };
    be_move mv[CAP];
    uint64_t ws[CU_MOVE_WS_WORDS(CAP)];
    hpools a, b;
    hpools_init(&a, L, 2, 32, f, 3, 8), hpools_init(&b, L, 2, 32, f, 3, 8);
    cu_group_cache c;
    memset(&c, 0, sizeof c);
    int bad = 0, long_runs = 0;
    uint64_t want_hits = 0, want_misses = 0;
    for (int list = 0; list < LISTS; list++) {
        int mild = list % 3 == 0, slots = mild ? 32 : 4 + (int)(rnd() % 12), n;
        if (list % 4 == 3) n = stage_like_moves(mv, CAP, 64);
        else n = hazard_moves(mv, mild ? 12 : 16 + (int)(rnd() % (CAP - 16)), slots, mild);
        int n_runs = 0;
        for (int rep = 0; rep < 2; rep++) /* a step's layers, twice: one plan, then hits */
            for (int l = 0; l < L; l++) bad += plan_differs(&c, &a.p, mv, n, l, ws, &n_runs);
        want_hits += 2 * L - 1, want_misses++;
        if (list % 4 == 3) long_runs += n_runs < n / 2;
        /* a batch between the layers' staging lists: each list planned once */
        be_move batch[2] = {{BE_SLOT(BE_T0, 1), BE_SLOT(BE_T1, 2)}, {BE_SLOT(BE_T0, 2), BE_SLOT(BE_T2, 0)}};
        for (int l = 0; l < L; l++)
            bad += plan_differs(&c, &a.p, batch, 2, l, ws, NULL) + plan_differs(&c, &a.p, mv, n, l, ws, NULL);
        want_hits += 2 * L - 1, want_misses++;
        /* one move changed: planned afresh */
        int k = (int)(rnd() % (unsigned)n);
        be_move keep = mv[k];
        mv[k].dst = BE_SLOT(BE_SLOT_TIER(mv[k].dst), (int)(((uint32_t)mv[k].dst & 0x3fffffffu) + 1) % slots);
        bad += plan_differs(&c, &a.p, mv, n, 1, ws, NULL);
        mv[k] = keep;
        /* the same list over other pools; then over a's table with one chunk replaced */
        bad += plan_differs(&c, &b.p, mv, n, 2, ws, NULL);
        int t = BE_SLOT_TIER(mv[0].src), ch = BE_SLOT_IDX(mv[0].src) >> 3;
        void *was = a.chunks[t][ch];
        a.chunks[t][ch] = b.chunks[t][ch];
        bad += plan_differs(&c, &a.p, mv, n, 0, ws, NULL);
        a.chunks[t][ch] = was;
        want_misses += 3;
    }
    printf("    %d lists: %llu answers from the cache, %llu planned; %d staging lists of long runs\n", LISTS,
           (unsigned long long)c.hits, (unsigned long long)c.misses, long_runs);
    CHECKF(bad == 0, "%d cached answers differ from cu_group_moves' and cu_runs_of's", bad);
    CHECKF(c.hits == want_hits && c.misses == want_misses, "hits %llu misses %llu, expected %llu and %llu",
           (unsigned long long)c.hits, (unsigned long long)c.misses, (unsigned long long)want_hits,
           (unsigned long long)want_misses);
    CHECK(long_runs == LISTS / 4);
    cu_group_cache_free(&c);
    hpools_free(&a), hpools_free(&b);
}

TEST(cuda_host_tables) {
    enum { NT = 5, NKV = 3, KS = 300 };
    int32_t s0[200], s1[100];
    uint8_t k0[NKV * KS];
    for (int i = 0; i < 200; i++) s0[i] = (int32_t)rnd();
    for (int i = 0; i < 100; i++) s1[i] = (int32_t)rnd();
    for (int i = 0; i < NKV * KS; i++) k0[i] = (uint8_t)(rnd() & 1);
    /* rows 0..2: one sequence in prefill (n_pos 150, 151, 152 sharing s0 and k0); rows 3, 4: another
     * sequence without a mask, and row 4 again sequence 0 */
    const int32_t *slots[NT] = {s0, s0, s0, s1, s0};
    const uint8_t *keep[NT] = {k0, k0, k0, NULL, k0};
    int n_pos[NT] = {150, 151, 152, 100, 180};
    cu_tok_info tok[NT];
    cu_piece pieces[1 + NT * (1 + NKV)];
    const void *uptr[NT];
    int ulen[NT], uoff[NT];
    cu_tables_ws ws = {uptr, ulen, uoff};
    cu_tables_plan plan;
    cu_plan_tables(NT, slots, n_pos, keep, KS, NKV, tok, pieces, ws, &plan);
    CHECK(plan.bytes <= cu_tables_bound(NT, 200, NKV));
    CHECK(plan.n_pieces == 1 + 2 + NKV); /* tok, two slot tables, one mask of NKV rows */
    uint8_t *img = calloc(1, plan.bytes);
    for (int i = 0; i < plan.n_pieces; i++) {
        REQUIRE(pieces[i].dst + pieces[i].bytes <= plan.bytes);
        memcpy(img + pieces[i].dst, pieces[i].src, pieces[i].bytes);
    }
    const cu_tok_info *ti = (const cu_tok_info *)(img + plan.tok_off);
    const int32_t *sl = (const int32_t *)(img + plan.slots_off);
    const uint8_t *kp = img + plan.keep_off;
    int bad = 0;
    for (int t = 0; t < NT; t++) {
        if (ti[t].n_pos != n_pos[t]) bad++;
        for (int j = 0; j < n_pos[t]; j++) {
            if (sl[ti[t].slot_off + j] != slots[t][j]) bad++;
            for (int g = 0; g < NKV; g++) {
                int want = keep[t] ? keep[t][g * KS + j] : 1;
                int got = ti[t].keep_off < 0 ? 1 : kp[ti[t].keep_off + g * ti[t].keep_stride + j];
                if (want != got) bad++;
            }
        }
    }
    CHECKF(bad == 0, "%d table entries differ in the image", bad);
    CHECK(ti[0].slot_off == ti[4].slot_off && ti[3].keep_off == -1);
    free(img);
}

TEST(cuda_host_ring) {
    cu_ring_pos r;
    cu_ring_init(&r, 4096, 4);
    CHECK(r.seg == 1024 && r.cap == 4096);
    int recorded[4] = {0}, bad = 0, entered_n = 0;
    for (int i = 0; i < 2000; i++) {
        size_t bytes = 1 + rnd() % 700, align = (size_t)1 << (rnd() % 9);
        int left, entered;
        int cur = r.cur;
        size_t at = cu_ring_take(&r, bytes, align, &left, &entered);
        if (at % align || at / r.seg != (at + bytes - 1) / r.seg || at + bytes > r.cap) bad++;
        if (left >= 0) {
            if (left != cur || entered != (cur + 1) % 4) bad++;
            recorded[left] = 1;
            entered_n++;
            /* every segment but the very first lap's is re-entered only after it was left */
            if (entered_n > 3 && !recorded[entered]) bad++;
        } else if (entered != -1 || at / r.seg != (size_t)cur) bad++;
    }
    CHECK(bad == 0);
    CHECK(entered_n > 4);
}

TEST(cuda_host_arena) {
    size_t used = 0, cap = 1 << 16, prev_end = 0;
    int bad = 0, refused = 0;
    for (int i = 0; i < 4000; i++) {
        size_t bytes = rnd() % 5000, align = (size_t)1 << (rnd() % 9), was = used;
        size_t at = cu_arena_take(&used, cap, bytes, align);
        if (at == SIZE_MAX) {
            refused++;
            /* refused only where the aligned range would pass the chunk's end; nothing taken */
            if (used != was || ((was + align - 1) & ~(align - 1)) + bytes <= cap) bad++;
            used = 0, prev_end = 0; /* a new chunk */
            continue;
        }
        if (at % align || at < prev_end || at + bytes > cap || used != at + bytes || at - was >= align) bad++;
        prev_end = at + bytes;
    }
    CHECK(bad == 0);
    CHECK(refused > 10);
    size_t u = 5;
    CHECK(cu_arena_take(&u, 64, 0, 256) == SIZE_MAX && u == 5); /* the aligned offset itself past the end */
    u = 0;
    CHECK(cu_arena_take(&u, 64, 64, 256) == 0 && u == 64);
    CHECK(cu_arena_take(&u, SIZE_MAX, SIZE_MAX, 1) == SIZE_MAX && u == 64); /* no wrap around */
}

/* TIERKV_CUDA_GEMV: a bad value is refused at open, naming the variable, before any device is asked
 * for (so this runs without a GPU); good values pass that check */
#ifdef TKV_CUDA
/* each bad value of the variable refused at open with "VAR='value'", no good one (a good value may
 * still fail to open: no GPU, no cuBLAS, but not with that refusal) */
static void env_values(const char *var, const char *const *bad, size_t n_bad, const char *const *good, size_t n_good) {
    char *saved = t_env_save(var), refusal[64];
    snprintf(refusal, sizeof refusal, "%s='", var);
    be_params p = {.name = "cuda", .device = 0};
    char err[256];
    for (size_t i = 0; i < n_bad + n_good; i++) {
        const char *v = i < n_bad ? bad[i] : good[i - n_bad];
        setenv(var, v, 1);
        be_backend *b = NULL;
        err[0] = 0;
        int rc = cuda_backend_open(&p, &b, err, sizeof err);
        if (i < n_bad) CHECKF(rc != 0 && strstr(err, refusal), "%s='%s' not refused: %s", var, v, err);
        else CHECKF(rc == 0 || !strstr(err, refusal), "%s='%s' refused: %s", var, v, err);
        if (b) be_close(b);
    }
    t_env_restore(var, saved);
}
#endif

TEST(cuda_gemv_env) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *bad[] = {"fast", "direct,3", "tile,", "direct2", "tile,1x", "directx"};
    const char *good[] = {"tile", "direct", "tile,1", "tile,2", "direct,1", "direct,2", ""};
    env_values("TIERKV_CUDA_GEMV", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
#endif
}

TEST(cuda_gemm_env) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *bad[] = {"on", "1", "0", "4097", "16x", "-5", "cublas"};
    const char *good[] = {"auto", "off", "2", "16", "4096", ""};
    env_values("TIERKV_CUDA_GEMM", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
#endif
}

TEST(cuda_prof_env) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *bad[] = {"2", "yes", "on", "1x"};
    const char *good[] = {"0", "1", ""};
    env_values("TIERKV_CUDA_PROFILE", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
#endif
}

TEST(cuda_graph_env) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *bad[] = {"1", "0", "yes", "auto", "onn", "off "};
    const char *good[] = {"on", "off", ""};
    env_values("TIERKV_CUDA_GRAPH", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
#endif
}

TEST(cuda_route_env) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *bad[] = {"gpu", "1", "cpu", "Host", "device "};
    const char *good[] = {"device", "host", ""};
    env_values("TIERKV_CUDA_ROUTE", bad, sizeof bad / sizeof bad[0], good, sizeof good / sizeof good[0]);
#endif
}

TEST(cuda_host_blas_probe) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    char *saved = t_env_save("TIERKV_CUBLAS"), msg[256];
    unsetenv("TIERKV_CUBLAS");
    int rc = cuda_blas_probe(msg, sizeof msg);
    printf("    cuBLAS: %s\n", msg);
    setenv("TIERKV_CUBLAS", "/nonexistent/libcublas.so.13", 1);
    char msg2[256];
    CHECK(cuda_blas_probe(msg2, sizeof msg2) != 0 && strstr(msg2, "/nonexistent/libcublas.so.13"));
    t_env_restore("TIERKV_CUBLAS", saved);
    if (rc) SKIP(msg);
    CHECKF(!strncmp(msg, "cuBLAS 13.", 10), "%s", msg);
#endif
}

/* ====================================================================================== GPU === */

#ifndef TKV_CUDA
#define GPU_OR_SKIP() SKIP("built without CUDA (make cuda)")
#else
static be_backend *g_be;
static char g_why[512];
static be_backend *gpu(void) {
    static int tried;
    if (!tried) {
        tried = 1;
        be_params p = {.name = "cuda", .device = 0};
        if (cuda_backend_open(&p, &g_be, g_why, sizeof g_why)) g_be = NULL;
        else printf("    cuda: %s\n", g_be->ops->describe(g_be));
    }
    return g_be;
}
#define GPU_OR_SKIP()                  \
    be_backend *B = gpu();             \
    if (!B) SKIP(g_why);               \
    const be_ops *O = B->ops;          \
    (void)O
#endif

#ifdef TKV_CUDA
static void *dalloc(be_backend *B, size_t bytes, be_mem mem) {
    char e[256];
    void *p = B->ops->alloc(B, bytes, mem, e, sizeof e);
    if (!p) { fprintf(stderr, "alloc: %s\n", e); abort(); }
    return p;
}
static void poison(be_backend *B, void *d, size_t bytes) {
    uint8_t *h = malloc(bytes);
    memset(h, 0xff, bytes); /* NaN in every float */
    B->ops->upload(B, d, h, bytes);
    free(h);
}
static void fetch(be_backend *B, void *host, const void *d, size_t bytes) {
    const void *r = B->ops->read(B, d, bytes, host);
    if (r != host) memcpy(host, r, bytes);
}
static double rel_err(const float *out, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static void rand_vec(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = rndf() * scale;
}
#define REPORT(op, err, bound)                                                      \
    do {                                                                            \
        printf("    %-34s rel err %.3g (bound %.0e)\n", op, (err), (double)(bound)); \
        CHECKF((err) <= (bound), "%s: %g", op, (err));                              \
    } while (0)
#endif

#ifdef TKV_CUDA
/* f32 rows of x as the CPU backend's Q8_0 products see them: rounded to Q8_0 blocks (FORMATS.md 2.7)
 * and read back */
static void q8_round_rows(const float *x, float *xq, int64_t n_in, int64_t nt) {
    const cpu_type_ops *q8 = cpu_ops_for(CW_T_Q8_0, CPU_ISA_GENERIC);
    void *blk = malloc(cpu_act_row_size(CW_T_Q8_0, n_in));
    for (int64_t q = 0; q < nt; q++) {
        q8->quantize_act(x + q * n_in, blk, n_in);
        q8->dequant_row(blk, xq + q * n_in, n_in);
    }
    free(blk);
}
#endif

#ifdef TKV_CUDA
static float round16(float v, int bf) {
    return bf ? tkv_bf16_to_f32(tkv_f32_to_bf16(v)) : tkv_f16_to_f32(tkv_f32_to_f16(v));
}
/* the power of two the cuBLAS path scales x by before rounding it to f16 (cuda_gemm.cu) */
static float f16_scale(const float *x, size_t n) {
    float a = 0;
    for (size_t i = 0; i < n; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    if (!(a >= 32768.0f) || isinf(a)) return 1.0f;
    int e;
    frexpf(a, &e);
    return ldexpf(1.0f, 15 - e);
}
/* x as the cuBLAS path multiplies a type with (xg, divided by *scale after the sum), and its rows
 * dequantised (deq in place): F32 as is, BF16 x rounded to bf16, F16 x scaled and rounded to f16,
 * quantised types the same with the weights rounded to f16 */
static void gemm_x(uint32_t t, const float *x, float *xg, size_t n, float *scale) {
    *scale = t == CW_T_F32 || t == CW_T_BF16 ? 1.0f : f16_scale(x, n);
    for (size_t i = 0; i < n; i++) xg[i] = t == CW_T_F32 ? x[i] : round16(x[i] * *scale, t == CW_T_BF16);
}
static void gemm_w(uint32_t t, float *deq, int64_t n) {
    if (t != CW_T_F32 && t != CW_T_F16 && t != CW_T_BF16)
        for (int64_t k = 0; k < n; k++) deq[k] = round16(deq[k], 0);
}
#endif

#ifdef TKV_CUDA
/* The cases below on backend B for the token counts toks[0..n_toks); counts the calls that ran the
 * integer kernels and cuBLAS. */
static void matmul_cases(be_backend *B, const int64_t *toks, int n_toks, int *integer_runs, int *gemm_runs) {
    const be_ops *O = B->ops;
    const int64_t n_ins[] = {256, 3584, 896}, n_out = 67;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int li = 0; li < 3; li++)
            for (int tk = 0; tk < n_toks; tk++) {
                /* two outputs of one activation: of two types (two launches), or of one (one launch; at
                 * 11 tokens the 16-bit and F32 types then go to cuBLAS, which takes a call only when
                 * every output does, and a quantised type only from 32 tokens) */
                uint32_t t = TYPES[ti], t2 = tk == 1 || tk == 3 ? t : TYPES[(ti + 3) % N_TYPES];
                int64_t n_in = n_ins[li], nt = toks[tk];
                /* 896 (Qwen2.5-0.5B's rows: 56 units, a last step with idle lanes) only for the types of 32-blocks */
                if (n_in % 256 && (cw_block(t) > 32 || cw_block(t2) > 32)) continue;
                size_t rb, rb2;
                uint8_t *f1 = rand_file_rows(t, n_in, n_out, &rb), *f2 = rand_file_rows(t2, n_in, n_out + 5, &rb2);
                be_mat m1 = {f1, t, n_in, n_out}, m2 = {f2, t2, n_in, n_out + 5};
                char e[256];
                REQUIRE(O->prepare_weight(B, &m1, BE_W_MATMUL, e, sizeof e) == 0);
                REQUIRE(O->prepare_weight(B, &m2, BE_W_MATMUL, e, sizeof e) == 0);
                float *x = malloc((size_t)(nt * n_in) * 4), *xq = malloc((size_t)(nt * n_in) * 4);
                float *xg = malloc((size_t)(nt * n_in) * 4);
                rand_vec(x, (size_t)(nt * n_in), 1.0f);
                q8_round_rows(x, xq, n_in, nt);
                float *dx = dalloc(B, (size_t)(nt * n_in) * 4, BE_MEM_DEVICE);
                int64_t ys = n_out + 5 + 7; /* a stride wider than the rows */
                float *dy1 = dalloc(B, (size_t)(nt * ys) * 4, BE_MEM_DEVICE), *dy2 = dalloc(B, (size_t)(nt * ys) * 4, BE_MEM_DEVICE);
                O->upload(B, dx, x, (size_t)(nt * n_in) * 4);
                /* the second output with a bias (the matmul's last store adds it: matmul_bias) */
                const int biased = tk % 2 == 1 || tk == 4;
                float *bh = malloc((size_t)(n_out + 5) * 4), *db = dalloc(B, (size_t)(n_out + 5) * 4, BE_MEM_DEVICE);
                rand_vec(bh, (size_t)(n_out + 5), 2.0f);
                O->upload(B, db, bh, (size_t)(n_out + 5) * 4);
                CHECK(O->matmul_bias == 1);
                be_mm_out outs[2] = {{&m1, dy1, ys, NULL}, {&m2, dy2, ys, biased ? db : NULL}};
                size_t ss = O->matmul_scratch(B, outs, 2, n_in, nt);
                void *scratch = ss ? dalloc(B, ss, BE_MEM_DEVICE) : NULL;
                float *y = malloc((size_t)(nt * ys) * 4), *deq = malloc((size_t)n_in * 4);
                double *ref = malloc((size_t)(nt * (n_out + 5)) * 8);
                float *got = malloc((size_t)(nt * (n_out + 5)) * 4);
                const int g1 = cuda_gemm_from(B, t), g2 = cuda_gemm_from(B, t2);
                for (int with = 0; with < (scratch ? 2 : 1); with++) {
                    poison(B, dy1, (size_t)(nt * ys) * 4), poison(B, dy2, (size_t)(nt * ys) * 4);
                    O->matmul(B, outs, 2, n_in, dx, nt, with ? scratch : NULL);
                    const int gemm = with && g1 && g2 && nt >= g1 && nt >= g2; /* the call goes to cuBLAS */
                    for (int which = 0; which < 2; which++) {
                        uint32_t tt = which ? t2 : t;
                        int64_t no = which ? n_out + 5 : n_out;
                        const uint8_t *f = which ? f2 : f1;
                        const int rounded = with && !gemm && tt != CW_T_F32 && tt != CW_T_F16 && tt != CW_T_BF16;
                        float scale = 1.0f;
                        if (gemm) gemm_x(tt, x, xg, (size_t)(nt * n_in), &scale);
                        const float *xr = gemm ? xg : rounded ? xq : x;
                        *integer_runs += rounded, *gemm_runs += gemm;
                        fetch(B, y, which ? dy2 : dy1, (size_t)(nt * ys) * 4);
                        int past = 0; /* stores past a token's rows, into the stride's padding */
                        for (int64_t q = 0; q < nt; q++)
                            for (int64_t r = no; r < ys; r++) {
                                uint32_t bits;
                                memcpy(&bits, &y[q * ys + r], 4);
                                past += bits != 0xffffffffu;
                            }
                        for (int64_t r = 0; r < no; r++) {
                            cpu_ops_for(tt, CPU_ISA_GENERIC)->dequant_row(f + (size_t)r * (which ? rb2 : rb), deq, n_in);
                            if (gemm) gemm_w(tt, deq, n_in);
                            for (int64_t q = 0; q < nt; q++) {
                                double sum = 0;
                                for (int64_t k = 0; k < n_in; k++) sum += (double)deq[k] * xr[q * n_in + k];
                                ref[q * no + r] = sum / scale + (which && biased ? bh[r] : 0.0);
                                got[q * no + r] = y[q * ys + r];
                            }
                        }
                        char name[80];
                        snprintf(name, sizeof name, "matmul %s n_in %lld x%lld%s%s", tname(tt), (long long)n_in, (long long)nt,
                                 rounded ? " int8" : gemm ? " cublas" : "", which && biased ? " +bias" : "");
                        double err = rel_err(got, ref, (size_t)(nt * no));
                        /* cuBLAS: the tensor cores' f32 accumulation truncates as it aligns and
                         * normalises (about 5e-6 modelled at 3584 terms); a skipped rounding of x is
                         * 2e-4 (f16) to 1.6e-3 (bf16) away, still far outside 3e-5 */
                        const double bound = gemm ? 3e-5 : 1e-5;
                        if (((tk == 0 || (tk == 4 && gemm)) && li < 2) || err > bound) REPORT(name, err, bound);
                        CHECKF(past == 0, "%s: %d floats written past the rows", name, past);
                    }
                }
                free(y), free(deq), free(ref), free(got), free(x), free(xq), free(xg), free(f1), free(f2), free(bh);
                O->free(B, db, BE_MEM_DEVICE);
                O->free(B, dx, BE_MEM_DEVICE), O->free(B, dy1, BE_MEM_DEVICE), O->free(B, dy2, BE_MEM_DEVICE);
                if (scratch) O->free(B, scratch, BE_MEM_DEVICE);
            }
}
#endif

/* Every type against the f32 product of its exact dequantisation (plus a bias on the second output
 * of every other call, added by the product's last store), without scratch (the float
 * kernels); with the scratch matmul_scratch asks for, the quantised types run the integer kernels,
 * whose reference rounds x to Q8_0 blocks first (the float product is 1e-3 away from it, so a
 * kernel that skipped or changed the rounding fails), and a call of as many tokens as
 * cuda_gemm_from asks for (11 tokens of 16-bit or F32 outputs only, 40 of any) goes to cuBLAS,
 * whose reference rounds x (and quantised weights) to 16 bits as cuda_gemm.cu says (the unrounded
 * product is 1e-3 away). Every token count the kernels are compiled for alone (1, 2, 3, 8) and
 * across launches (11), and no store lands past a token's rows (the output stride is wider than
 * them: poisoned padding). */
TEST(cuda_matmul) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const int64_t toks[] = {1, 3, 8, 11, 40, 2};
    int integer_runs = 0, gemm_runs = 0;
    matmul_cases(B, toks, 6, &integer_runs, &gemm_runs);
    CHECK(integer_runs > 0); /* the integer kernel ran */
    if (cuda_gemm_from(B, CW_T_BF16)) CHECK(gemm_runs > 0);
    else printf("    cuBLAS not in use: %s\n", O->describe(B));
    /* a type the backend does not run fails with its name */
    uint8_t dummy[176 * 2] = {0};
    be_mat m5 = {dummy, 13 /* Q5_K */, 256, 2};
    char e[256] = "";
    CHECK(O->prepare_weight(B, &m5, BE_W_MATMUL, e, sizeof e) != 0);
    CHECK(strstr(e, "Q5_K") && strstr(e, "not supported by the CUDA backend"));
#endif
}

/* The one-token kernels forced (TIERKV_CUDA_GEMV) for every type, with two rows a warp, which the
 * default choice never takes: the same checks at 1 and 2 tokens. */
TEST(cuda_matmul_forced) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    static const char *kinds[] = {"tile,2", "direct,2", "direct,1"};
    const int64_t toks[] = {1, 2};
    for (int k = 0; k < 3; k++) {
        char *saved = t_env_save("TIERKV_CUDA_GEMV");
        setenv("TIERKV_CUDA_GEMV", kinds[k], 1);
        be_params bp = {.name = "cuda", .device = 0};
        be_backend *F = NULL;
        char e[256];
        int rc = cuda_backend_open(&bp, &F, e, sizeof e);
        t_env_restore("TIERKV_CUDA_GEMV", saved);
        if (rc) {
            CHECKF(0, "TIERKV_CUDA_GEMV=%s: %s", kinds[k], e);
            return;
        }
        printf("    TIERKV_CUDA_GEMV=%s\n", kinds[k]);
        int integer_runs = 0, gemm_runs = 0;
        matmul_cases(F, toks, 2, &integer_runs, &gemm_runs);
        be_close(F);
    }
    (void)O;
#endif
}

#ifdef TKV_CUDA
/* One call of nt tokens of a type-t matrix [n_out][n_in] (|x| up to xmag, plus a bias where asked)
 * through cuBLAS, against the reference that rounds as cuda_gemm.cu says; returns its error, or -1
 * when cuBLAS does not take such a call. *scale: the power of two x was scaled by. */
static double gemm_one(be_backend *B, uint32_t t, int64_t n_in, int64_t n_out, int64_t nt, float xmag, int biased,
                       float *scale) {
    if (!cuda_gemm_from(B, t) || cuda_gemm_from(B, t) > nt) return -1;
    const be_ops *O = B->ops;
    size_t rb;
    uint8_t *f = rand_file_rows(t, n_in, n_out, &rb);
    be_mat m = {f, t, n_in, n_out};
    char e[256];
    if (O->prepare_weight(B, &m, BE_W_MATMUL, e, sizeof e)) {
        free(f);
        return INFINITY;
    }
    float *x = malloc((size_t)(nt * n_in) * 4), *xg = malloc((size_t)(nt * n_in) * 4), *bh = malloc((size_t)n_out * 4);
    rand_vec(x, (size_t)(nt * n_in), xmag), rand_vec(bh, (size_t)n_out, 2.0f);
    float *dx = dalloc(B, (size_t)(nt * n_in) * 4, BE_MEM_DEVICE), *dy = dalloc(B, (size_t)(nt * n_out) * 4, BE_MEM_DEVICE);
    float *db = dalloc(B, (size_t)n_out * 4, BE_MEM_DEVICE);
    O->upload(B, dx, x, (size_t)(nt * n_in) * 4), O->upload(B, db, bh, (size_t)n_out * 4);
    be_mm_out out = {&m, dy, n_out, biased ? db : NULL};
    void *scratch = dalloc(B, O->matmul_scratch(B, &out, 1, n_in, nt), BE_MEM_DEVICE);
    poison(B, dy, (size_t)(nt * n_out) * 4);
    O->matmul(B, &out, 1, n_in, dx, nt, scratch);
    float *y = malloc((size_t)(nt * n_out) * 4), *deq = malloc((size_t)n_in * 4);
    double *ref = malloc((size_t)(nt * n_out) * 8);
    fetch(B, y, dy, (size_t)(nt * n_out) * 4);
    gemm_x(t, x, xg, (size_t)(nt * n_in), scale);
    for (int64_t r = 0; r < n_out; r++) {
        cpu_ops_for(t, CPU_ISA_GENERIC)->dequant_row(f + (size_t)r * rb, deq, n_in);
        gemm_w(t, deq, n_in);
        for (int64_t q = 0; q < nt; q++) {
            double sum = 0;
            for (int64_t k = 0; k < n_in; k++) sum += (double)deq[k] * xg[q * n_in + k];
            ref[q * n_out + r] = sum / *scale + (biased ? bh[r] : 0.0);
        }
    }
    double err = rel_err(y, ref, (size_t)(nt * n_out));
    free(y), free(deq), free(ref), free(x), free(xg), free(bh), free(f);
    O->free(B, dx, BE_MEM_DEVICE), O->free(B, dy, BE_MEM_DEVICE), O->free(B, db, BE_MEM_DEVICE);
    O->free(B, scratch, BE_MEM_DEVICE);
    return err;
}
#endif

/* An activation beyond f16's range (|x| up to 2^20) through cuBLAS for a quantised type and F16:
 * finite, and equal to the reference that scales x by a power of two before rounding it (without
 * the scale every product would be inf). */
TEST(cuda_gemm_range) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const uint32_t types[] = {CW_T_Q4_K, CW_T_F16};
    for (int ti = 0; ti < 2; ti++) {
        float scale = 1.0f;
        double err = gemm_one(B, types[ti], 512, 96, 40, 1.0e6f, 0, &scale);
        if (err < 0) SKIP("cuBLAS not in use for 40 tokens");
        CHECKF(scale < 1.0f, "scale %g", scale);
        char name[80];
        snprintf(name, sizeof name, "cublas %s |x| to 1e6", tname(types[ti]));
        REPORT(name, err, 1e-5);
    }
#endif
}

/* A quantised matrix taller than one dequantised piece (at most 32768 rows at a time): the second
 * piece's rows (a tail of 67) land at their offset, with the bias added once over all of them.
 * Every model's output matrix (152064 rows for a 7B) goes this way. */
TEST(cuda_gemm_pieces) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    float scale = 1.0f;
    double err = gemm_one(B, CW_T_Q4_0, 256, 32768 + 67, 32, 1.0f, 1, &scale);
    if (err < 0) SKIP("cuBLAS not in use for 32 tokens of Q4_0");
    REPORT("cublas Q4_0 in two pieces +bias", err, 1e-5);
#endif
}

/* TIERKV_CUDA_PROFILE=1: the ops' results are the unprofiled backend's bit for bit, and at close
 * each op's line counts its calls (stderr captured into a file). */
TEST(cuda_profile) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const int64_t n_in = 512, n_out = 64, nts[2] = {1, 40};
    char *saved_env = t_env_save("TIERKV_CUDA_PROFILE");
    setenv("TIERKV_CUDA_PROFILE", "1", 1);
    be_params bp = {.name = "cuda", .device = 0};
    be_backend *P = NULL;
    char e[256];
    int rc = cuda_backend_open(&bp, &P, e, sizeof e);
    t_env_restore("TIERKV_CUDA_PROFILE", saved_env);
    REQUIRE(rc == 0);
    CHECK(strstr(P->ops->describe(P), "[profiled]") != NULL);
    size_t rb;
    uint8_t *f = rand_file_rows(CW_T_BF16, n_in, n_out, &rb);
    be_mat m1 = {f, CW_T_BF16, n_in, n_out}, m2 = {f, CW_T_BF16, n_in, n_out};
    REQUIRE(O->prepare_weight(B, &m1, BE_W_MATMUL, e, sizeof e) == 0);
    REQUIRE(P->ops->prepare_weight(P, &m2, BE_W_MATMUL, e, sizeof e) == 0);
    float *x = malloc((size_t)(40 * n_in) * 4), *y1 = malloc((size_t)(40 * n_out) * 4), *y2 = malloc((size_t)(40 * n_out) * 4);
    rand_vec(x, (size_t)(40 * n_in), 1.0f);
    be_backend *bs[2] = {B, P};
    float *ys[2] = {y1, y2};
    for (int k = 0; k < 2; k++) {
        const be_ops *o = bs[k]->ops;
        be_mat *m = k ? &m2 : &m1;
        float *dx = dalloc(bs[k], (size_t)(40 * n_in) * 4, BE_MEM_DEVICE), *dy = dalloc(bs[k], (size_t)(40 * n_out) * 4, BE_MEM_DEVICE);
        o->upload(bs[k], dx, x, (size_t)(40 * n_in) * 4);
        be_mm_out out = {m, dy, n_out, NULL};
        size_t ss = o->matmul_scratch(bs[k], &out, 1, n_in, 40);
        void *scratch = ss ? dalloc(bs[k], ss, BE_MEM_DEVICE) : NULL;
        for (int i = 0; i < 2; i++) o->matmul(bs[k], &out, 1, n_in, dx, nts[i], scratch);
        fetch(bs[k], ys[k], dy, (size_t)(40 * n_out) * 4);
        o->free(bs[k], dx, BE_MEM_DEVICE), o->free(bs[k], dy, BE_MEM_DEVICE);
        if (scratch) o->free(bs[k], scratch, BE_MEM_DEVICE);
    }
    CHECK(memcmp(y1, y2, (size_t)(40 * n_out) * 4) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/profile.err", t_tmpdir());
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(saved >= 0 && fd >= 0);
    dup2(fd, 2), close(fd);
    be_close(P);
    fflush(stderr);
    dup2(saved, 2), close(saved);
    char *text = t_slurp(path);
    REQUIRE(text);
    printf("%s", text);
    CHECK(strstr(text, "\"op\":\"matmul_1\",\"calls\":1,") != NULL);
    CHECK(strstr(text, "\"op\":\"matmul_many\",\"calls\":1,") != NULL);
    CHECK(strstr(text, "\"op\":\"read\"") != NULL);
    free(text), free(x), free(y1), free(y2), free(f);
#endif
}

TEST(cuda_embed) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = TYPES[ti];
        int64_t n_in = 768, V = 40;
        size_t rb;
        uint8_t *f = rand_file_rows(t, n_in, V, &rb);
        be_mat m = {f, t, n_in, V};
        char e[256];
        REQUIRE(O->prepare_weight(B, &m, BE_W_EMBED_AND_OUTPUT, e, sizeof e) == 0);
        int32_t tok[5] = {0, 39, 7, 7, 21};
        float *dx = dalloc(B, 5 * (size_t)n_in * 4, BE_MEM_DEVICE), *x = malloc(5 * (size_t)n_in * 4), *ref = malloc((size_t)n_in * 4);
        poison(B, dx, 5 * (size_t)n_in * 4);
        O->embed(B, &m, tok, 5, dx);
        fetch(B, x, dx, 5 * (size_t)n_in * 4);
        int bad = 0;
        for (int i = 0; i < 5; i++) {
            cpu_ops_for(t, CPU_ISA_GENERIC)->dequant_row(f + (size_t)tok[i] * rb, ref, n_in);
            for (int64_t k = 0; k < n_in; k++) bad += tkv_f32_bits(x[i * n_in + k]) != tkv_f32_bits(ref[k]);
        }
        CHECKF(bad == 0, "embed %s: %d elements differ from the dequantisation", tname(t), bad);
        free(f), free(x), free(ref);
        O->free(B, dx, BE_MEM_DEVICE);
    }
    printf("    embed: all types bit-exact with the generic dequantisation\n");
#endif
}

TEST(cuda_dense_ops) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const int rows = 5, n = 3584 + 64;
    size_t N = (size_t)rows * n;
    float *x = malloc(N * 4), *y = malloc(N * 4), *w = malloc((size_t)n * 4), *out = malloc(N * 4);
    double *ref = malloc(N * 8);
    float *dx = dalloc(B, N * 4, BE_MEM_DEVICE), *dy = dalloc(B, N * 4, BE_MEM_DEVICE);
    float *dw = dalloc(B, (size_t)n * 4, BE_MEM_DEVICE);
    /* rmsnorm */
    rand_vec(x, N, 3.0f), rand_vec(w, (size_t)n, 1.5f);
    O->upload(B, dx, x, N * 4), O->upload(B, dw, w, (size_t)n * 4), poison(B, dy, N * 4);
    O->rmsnorm(B, dy, dx, dw, rows, n, 1e-6f);
    fetch(B, out, dy, N * 4);
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        float sc = 1.0f / sqrtf((float)(ss / n) + 1e-6f);
        for (int i = 0; i < n; i++) ref[r * n + i] = (x[r * n + i] * sc) * w[i];
    }
    REPORT("rmsnorm", rel_err(out, ref, N), 1e-6);
    /* add_bias, add */
    rand_vec(x, N, 1.0f), rand_vec(y, N, 1.0f), rand_vec(w, (size_t)n, 1.0f);
    O->upload(B, dx, x, N * 4), O->upload(B, dy, y, N * 4), O->upload(B, dw, w, (size_t)n * 4);
    O->add_bias(B, dy, dw, rows, n);
    O->add(B, dy, dx, (int64_t)N);
    fetch(B, out, dy, N * 4);
    for (size_t i = 0; i < N; i++) ref[i] = (double)(y[i] + w[i % n]) + x[i];
    REPORT("add_bias + add", rel_err(out, ref, N), 1e-7);
    /* add_rmsnorm: x and the normed rows with the bits of add, then rmsnorm */
    {
        float *dd = dalloc(B, N * 4, BE_MEM_DEVICE), *dh = dalloc(B, N * 4, BE_MEM_DEVICE);
        float *x1 = malloc(N * 4), *h1 = malloc(N * 4), *x2 = malloc(N * 4), *h2 = malloc(N * 4);
        rand_vec(x, N, 3.0f), rand_vec(y, N, 2.0f), rand_vec(w, (size_t)n, 1.5f);
        O->upload(B, dx, x, N * 4), O->upload(B, dd, y, N * 4), O->upload(B, dw, w, (size_t)n * 4);
        O->add(B, dx, dd, (int64_t)N);
        O->rmsnorm(B, dh, dx, dw, rows, n, 1e-6f);
        fetch(B, x1, dx, N * 4), fetch(B, h1, dh, N * 4);
        O->upload(B, dx, x, N * 4), poison(B, dh, N * 4);
        O->add_rmsnorm(B, dx, dd, dh, dw, rows, n, 1e-6f);
        fetch(B, x2, dx, N * 4), fetch(B, h2, dh, N * 4);
        CHECK(memcmp(x1, x2, N * 4) == 0 && memcmp(h1, h2, N * 4) == 0);
        printf("    add_rmsnorm: the bits of add then rmsnorm\n");
        free(x1), free(h1), free(x2), free(h2);
        O->free(B, dd, BE_MEM_DEVICE), O->free(B, dh, BE_MEM_DEVICE);
    }
    /* rope, both pair styles, positions up to 40000; the third pass at other positions of the same
     * count (the backend keeps the last positions on the device: they must be replaced) */
    for (int pass = 0; pass < 3; pass++) {
        const int pa[4] = {0, 17, 4095, 40000}, pb[4] = {3, 17, 9000, 1};
        int hd = 128, heads = 7, nr = 4, neox = pass > 0, pos[4];
        memcpy(pos, pass < 2 ? pa : pb, sizeof pos);
        size_t M = (size_t)nr * heads * hd;
        rand_vec(x, M, 2.0f);
        O->upload(B, dx, x, M * 4);
        O->rope(B, dx, nr, heads, hd, pos, 10000.0f, 1.0f, neox);
        fetch(B, out, dx, M * 4);
        float s = powf(10000.0f, -2.0f / (float)hd);
        for (int t = 0; t < nr; t++)
            for (int h = 0; h < heads; h++) {
                float theta = (float)pos[t];
                for (int i = 0; i < hd / 2; i++) {
                    float th = theta * 1.0f, co = cosf(th), si = sinf(th);
                    int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
                    size_t o = ((size_t)t * heads + h) * hd;
                    ref[o + a] = x[o + a] * co - x[o + b] * si;
                    ref[o + b] = x[o + a] * si + x[o + b] * co;
                    theta *= s;
                }
            }
        REPORT(pass == 2 ? "rope (neox, new positions)" : neox ? "rope (neox)" : "rope (adjacent pairs)", rel_err(out, ref, M), 1e-6);
    }
    /* swiglu against the generic op */
    rand_vec(x, N, 8.0f), rand_vec(y, N, 2.0f);
    O->upload(B, dx, x, N * 4), O->upload(B, dy, y, N * 4);
    O->swiglu(B, dx, dy, (int64_t)N);
    fetch(B, out, dx, N * 4);
    float *g = malloc(N * 4);
    memcpy(g, x, N * 4);
    cpu_f32_ops_for(CPU_ISA_GENERIC)->swiglu(g, y, (int64_t)N);
    for (size_t i = 0; i < N; i++) ref[i] = g[i];
    REPORT("swiglu", rel_err(out, ref, N), 1e-6);
    free(g);
    /* gather_rows */
    rand_vec(x, N, 1.0f);
    O->upload(B, dx, x, N * 4), poison(B, dy, N * 4);
    int rws[3] = {4, 0, 4};
    O->gather_rows(B, dy, dx, rws, 3, n);
    fetch(B, out, dy, (size_t)3 * n * 4);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < n; k++) ref[i * n + k] = x[rws[i] * n + k];
    REPORT("gather_rows", rel_err(out, ref, (size_t)3 * n), 0);
    O->free(B, dx, BE_MEM_DEVICE), O->free(B, dy, BE_MEM_DEVICE), O->free(B, dw, BE_MEM_DEVICE);
    free(x), free(y), free(w), free(out), free(ref);
#endif
}

#ifdef TKV_CUDA
/* n floats of device memory d fetched into got: how many differ from want's bits (printed) */
static size_t device_bits_differ(be_backend *B, const char *what, float *got, const float *d, const float *want,
                                 size_t n) {
    fetch(B, got, d, n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
    printf("    %s: %zu of %zu values differ from the CPU's\n", what, bad, n);
    return bad;
}
#endif

/* expand_cols (split's compacted host weights spread out on the device) against the CPU's op: rows
 * of a 7B's 28 heads at 8192 positions, two tokens with different column counts. */
TEST(cuda_expand_cols) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    enum { T = 2, R = 28, DS = 8192, SS = 4100 };
    be_backend *cpu;
    char e[256];
    REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 1}, &cpu, e, sizeof e) == 0);
    size_t nsrc = (size_t)T * R * SS + (size_t)T * SS, ndst = (size_t)T * R * DS;
    float *src = malloc(nsrc * 4), *want = malloc(ndst * 4), *got = malloc(ndst * 4);
    rand_vec(src, (size_t)T * R * SS, 1.0f);
    int32_t *cols = (int32_t *)(void *)(src + (size_t)T * R * SS);
    int n_cols[T] = {SS, 1500};
    for (int t = 0; t < T; t++)
        for (int k = 0; k < SS; k++) cols[t * SS + k] = k >= n_cols[t] ? 0 : k < 2000 ? 2 * k : k + 4000; /* distinct, < DS */
    float *ds = dalloc(B, nsrc * 4, BE_MEM_DEVICE), *dd = dalloc(B, ndst * 4, BE_MEM_DEVICE);
    O->upload(B, ds, src, nsrc * 4), poison(B, dd, ndst * 4);
    cpu->ops->expand_cols(cpu, want, DS, src, cols, SS, n_cols, T, R);
    O->expand_cols(B, dd, DS, ds, (const int32_t *)(const void *)(ds + (size_t)T * R * SS), SS, n_cols, T, R);
    CHECK(device_bits_differ(B, "expand_cols", got, dd, want, ndst) == 0);
    O->free(B, ds, BE_MEM_DEVICE), O->free(B, dd, BE_MEM_DEVICE);
    free(src), free(want), free(got);
    be_close(cpu);
#endif
}

/* combine_rows (an expert FFN's weighted sums) against the CPU's op, bit for bit: a prompt chunk of
 * 40 tokens, 8 experts each (Qwen3-30B-A3B's), rows of a 7B's width read in any order, one row read
 * by two tokens; rows past n left as they were. */
TEST(cuda_combine_rows) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    enum { N = 40, K = 8, W = 3584, SR = N * K };
    be_backend *cpu;
    char e[256];
    REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 1}, &cpu, e, sizeof e) == 0);
    size_t ny = (size_t)(N + 1) * W;
    float *src = malloc((size_t)SR * W * 4), *want = malloc(ny * 4), *got = malloc(ny * 4);
    int rows[N * K];
    float w[N * K];
    rand_vec(src, (size_t)SR * W, 3.0f);
    for (int i = 0; i < N * K; i++) {
        rows[i] = (int)(((int64_t)i * 97 + 5) % SR);
        w[i] = 0.05f + 0.1f * (float)(rnd() % 17);
    }
    rows[K + 1] = rows[0]; /* token 1 reads token 0's first row */
    float *ds = dalloc(B, (size_t)SR * W * 4, BE_MEM_DEVICE), *dy = dalloc(B, ny * 4, BE_MEM_DEVICE);
    O->upload(B, ds, src, (size_t)SR * W * 4), poison(B, dy, ny * 4);
    fetch(B, want, dy, ny * 4); /* the poison, kept past row N */
    cpu->ops->combine_rows(cpu, want, src, rows, w, N, K, W);
    O->combine_rows(B, dy, ds, rows, w, N, K, W);
    CHECK(device_bits_differ(B, "combine_rows", got, dy, want, ny) == 0);
    if (O->combine_pairs) { /* pair (t, j)'s row its own, the weights on the device (route's) */
        for (int i = 0; i < N * K; i++) rows[i] = i;
        float *dw = dalloc(B, sizeof w, BE_MEM_DEVICE);
        O->upload(B, dw, w, sizeof w), poison(B, dy, ny * 4);
        cpu->ops->combine_rows(cpu, want, src, rows, w, N, K, W);
        O->combine_pairs(B, dy, ds, dw, N, K, W);
        CHECK(device_bits_differ(B, "combine_pairs", got, dy, want, ny) == 0);
        O->free(B, dw, BE_MEM_DEVICE);
    }
    O->free(B, ds, BE_MEM_DEVICE), O->free(B, dy, BE_MEM_DEVICE);
    free(src), free(want), free(got);
    be_close(cpu);
#endif
}

/* The expert routing on the device (route) against the host's (moe_route): the same experts, and
 * weights within 4 ulp (CUDA's expf is within 2 ulp of the host's; the sums and the division are
 * the host's, in its order). 128 experts (Qwen3-30B-A3B's) with 8 a token, and 60 (not a multiple
 * of the warp) with 3; 5 tokens, one with tied logits (the lower index first). */
TEST(cuda_route) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    if (!O->route) SKIP("experts routed on the host (TIERKV_CUDA_ROUTE=host)");
    static const int XS[2] = {128, 60}, KS[2] = {8, 3};
    enum { N = 5 };
    for (int c = 0; c < 2; c++) {
        const int X = XS[c], K = KS[c];
        float *lg = malloc((size_t)N * X * 4), w[N * 8], got_w[N * 8];
        int32_t sel[N * 8], got_sel[N * 8];
        rand_vec(lg, (size_t)N * X, 4.0f);
        for (int e = 0; e < X; e++) lg[2 * X + e] = (float)(e % 7) * 0.5f; /* maxima at 6, 13, 20, ... */
        moe_route(lg, N, X, K, sel, w);
        float *dl = dalloc(B, (size_t)N * X * 4, BE_MEM_DEVICE), *dw = dalloc(B, sizeof w, BE_MEM_DEVICE);
        int32_t *ds = dalloc(B, sizeof sel, BE_MEM_DEVICE);
        O->upload(B, dl, lg, (size_t)N * X * 4), poison(B, ds, sizeof sel), poison(B, dw, sizeof w);
        O->route(B, dl, N, X, K, ds, dw);
        fetch(B, got_sel, ds, (size_t)N * K * 4), fetch(B, got_w, dw, (size_t)N * K * 4);
        int bad = 0, same = 0;
        double ulps = 0;
        for (int i = 0; i < N * K; i++) {
            bad += got_sel[i] != sel[i];
            same += !memcmp(&got_w[i], &w[i], 4);
            double u = isfinite(got_w[i]) ? fabs((double)got_w[i] - w[i]) / ldexp(1.0, ilogb(w[i]) - 23) : INFINITY;
            if (u > ulps) ulps = u;
        }
        printf("    route %d experts, %d a token: %d of %d choices differ, weights within %.1f ulp (%d of %d the same "
               "bits)\n", X, K, bad, N * K, ulps, same, N * K);
        CHECK(bad == 0);
        CHECK(ulps <= 4.0);
        CHECK(got_sel[2 * K] == 6 && got_sel[2 * K + 1] == 13);
        O->free(B, dl, BE_MEM_DEVICE), O->free(B, dw, BE_MEM_DEVICE), O->free(B, ds, BE_MEM_DEVICE);
        free(lg);
    }
#endif
}

/* The experts' products chosen on the device (matmul_sel) against matmul's one-token product of each
 * pair's expert and row, bit for bit: every type, rows of 256 and 3584, 5 experts of two outputs of
 * one type (gate and up), 7 pairs of 4 tokens (x_div 2) and of 7 rows (x_div 1), experts repeated
 * and out of order, with the integer kernels' scratch and without; the stride's padding stays
 * untouched (compared whole, poison included). */
TEST(cuda_matmul_sel) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    if (!O->matmul_sel) SKIP("experts routed on the host (TIERKV_CUDA_ROUTE=host)");
    enum { X = 5, P = 7, NO = 67, YS = NO + 7 };
    const int32_t sel[P] = {3, 0, 3, 4, 1, 1, 2};
    int32_t *ds = dalloc(B, sizeof sel, BE_MEM_DEVICE);
    O->upload(B, ds, sel, sizeof sel);
    const int64_t n_ins[2] = {256, 3584};
    int cases = 0, differ = 0;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int li = 0; li < 2; li++) {
            const uint32_t t = TYPES[ti];
            const int64_t n_in = n_ins[li];
            be_mat m[2][X];
            uint8_t *f[2][X];
            char e[256];
            for (int o = 0; o < 2; o++)
                for (int x = 0; x < X; x++) {
                    size_t rb;
                    f[o][x] = rand_file_rows(t, n_in, NO, &rb);
                    m[o][x] = (be_mat){f[o][x], t, n_in, NO};
                    REQUIRE(O->prepare_weight(B, &m[o][x], BE_W_MATMUL, e, sizeof e) == 0);
                }
            float *x = malloc((size_t)P * n_in * 4), *got = malloc((size_t)P * YS * 4);
            float *want = malloc((size_t)P * YS * 4);
            rand_vec(x, (size_t)P * n_in, 1.0f);
            float *dx = dalloc(B, (size_t)P * n_in * 4, BE_MEM_DEVICE);
            O->upload(B, dx, x, (size_t)P * n_in * 4);
            float *dy[2], *dr[2];
            for (int o = 0; o < 2; o++) {
                dy[o] = dalloc(B, (size_t)P * YS * 4, BE_MEM_DEVICE);
                dr[o] = dalloc(B, (size_t)P * YS * 4, BE_MEM_DEVICE);
            }
            be_mm_out outs[2] = {{m[0], dy[0], YS, NULL}, {m[1], dy[1], YS, NULL}};
            size_t ss = O->matmul_scratch(B, outs, 2, n_in, P);
            void *scratch = ss ? dalloc(B, ss, BE_MEM_DEVICE) : NULL;
            for (int x_div = 1; x_div <= 2; x_div++)
                for (int with = 0; with < (scratch ? 2 : 1); with++) {
                    for (int o = 0; o < 2; o++)
                        poison(B, dy[o], (size_t)P * YS * 4), poison(B, dr[o], (size_t)P * YS * 4);
                    O->matmul_sel(B, outs, 2, X, n_in, dx, x_div, ds, P, with ? scratch : NULL);
                    for (int p = 0; p < P; p++) {
                        be_mm_out r[2] = {{&m[0][sel[p]], dr[0] + (size_t)p * YS, YS, NULL},
                                          {&m[1][sel[p]], dr[1] + (size_t)p * YS, YS, NULL}};
                        O->matmul(B, r, 2, n_in, dx + (size_t)(p / x_div) * n_in, 1, with ? scratch : NULL);
                    }
                    int bad = 0;
                    for (int o = 0; o < 2; o++) {
                        fetch(B, got, dy[o], (size_t)P * YS * 4), fetch(B, want, dr[o], (size_t)P * YS * 4);
                        for (size_t i = 0; i < (size_t)P * YS; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
                    }
                    cases++, differ += bad != 0;
                    CHECKF(bad == 0, "matmul_sel %s n_in %lld x_div %d%s: %d values differ from matmul's", tname(t),
                           (long long)n_in, x_div, with ? " int8" : "", bad);
                }
            for (int o = 0; o < 2; o++) {
                O->free(B, dy[o], BE_MEM_DEVICE), O->free(B, dr[o], BE_MEM_DEVICE);
                for (int i = 0; i < X; i++) free(f[o][i]);
            }
            if (scratch) O->free(B, scratch, BE_MEM_DEVICE);
            O->free(B, dx, BE_MEM_DEVICE);
            free(x), free(got), free(want);
        }
    printf("    matmul_sel: %d of %d cases differ from matmul's products\n", differ, cases);
    O->free(B, ds, BE_MEM_DEVICE);
#endif
}

/* matmul_sel with its pairs grouped by expert (many pairs against few experts: a prompt's chunk)
 * against the same pairs a few at a time (each pair a grid row, which cuda_matmul_sel checks against
 * matmul), bit for bit: every type, rows of 256 and 1280 (several x tiles of MM_NT tokens), 24 pairs
 * of 5 experts (one with none, one with 12: two tiles, the last one short; x_div 1 and 3), with
 * the integer kernels' scratch and without, then the first half of them (fewer tiles than the call
 * before); then 300 experts (more than the grouping's threads) with 600 pairs in F32. Every value
 * compared, the stride's padding included. Small (19 rows), as it
 * runs under ThreadSanitizer in CI. */
#ifdef TKV_CUDA
static void sel_tiles_case(be_backend *B, const be_ops *O, uint32_t t, int64_t n_in, int X, int NO, const int32_t *sel,
                           int P, int *cases, int *differ) {
    const int YS = NO + 5, C = 6; /* the reference's calls: 6 pairs each (a multiple of every x_div) */
    be_mat *m[2];
    uint8_t **f[2];
    char e[256];
    for (int o = 0; o < 2; o++) {
        m[o] = calloc((size_t)X, sizeof **m), f[o] = calloc((size_t)X, sizeof **f);
        for (int x = 0; x < X; x++) {
            size_t rb;
            f[o][x] = rand_file_rows(t, n_in, NO, &rb);
            m[o][x] = (be_mat){f[o][x], t, n_in, NO};
            REQUIRE(O->prepare_weight(B, &m[o][x], BE_W_MATMUL, e, sizeof e) == 0);
        }
    }
    int32_t *ds = dalloc(B, (size_t)P * 4, BE_MEM_DEVICE);
    O->upload(B, ds, sel, (size_t)P * 4);
    float *x = malloc((size_t)P * n_in * 4), *got = malloc((size_t)P * YS * 4), *want = malloc((size_t)P * YS * 4);
    rand_vec(x, (size_t)P * n_in, 1.0f);
    float *dx = dalloc(B, (size_t)P * n_in * 4, BE_MEM_DEVICE), *dy[2], *dr[2];
    O->upload(B, dx, x, (size_t)P * n_in * 4);
    for (int o = 0; o < 2; o++)
        dy[o] = dalloc(B, (size_t)P * YS * 4, BE_MEM_DEVICE), dr[o] = dalloc(B, (size_t)P * YS * 4, BE_MEM_DEVICE);
    be_mm_out outs[2] = {{m[0], dy[0], YS, NULL}, {m[1], dy[1], YS, NULL}};
    O->matmul_sel(B, outs, 2, X, n_in, NULL, 1, NULL, 0, NULL); /* the tables, as the forward makes them */
    size_t ss = O->matmul_scratch(B, outs, 2, n_in, P);
    void *scratch = ss ? dalloc(B, ss, BE_MEM_DEVICE) : NULL;
    for (int x_div = 1; x_div <= 3; x_div += 2)
        for (int with = 0; with < (scratch ? 2 : 1); with++) {
            for (int o = 0; o < 2; o++)
                poison(B, dy[o], (size_t)P * YS * 4), poison(B, dr[o], (size_t)P * YS * 4);
            O->matmul_sel(B, outs, 2, X, n_in, dx, x_div, ds, P, with ? scratch : NULL);
            for (int p0 = 0; p0 < P; p0 += C) {
                be_mm_out r[2] = {{m[0], dr[0] + (size_t)p0 * YS, YS, NULL}, {m[1], dr[1] + (size_t)p0 * YS, YS, NULL}};
                int n = P - p0 < C ? P - p0 : C;
                O->matmul_sel(B, r, 2, X, n_in, dx + (size_t)(p0 / x_div) * n_in, x_div, ds + p0, n,
                              with ? scratch : NULL);
            }
            int bad = 0;
            for (int o = 0; o < 2; o++) {
                fetch(B, got, dy[o], (size_t)P * YS * 4), fetch(B, want, dr[o], (size_t)P * YS * 4);
                for (size_t i = 0; i < (size_t)P * YS; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
            }
            /* then the first half of the pairs: fewer tiles, and those the call does not use must
             * be marked so whatever the last call left there (the rows past the half stay poison) */
            const int half = P / 2;
            for (int o = 0; o < 2; o++) poison(B, dy[o], (size_t)P * YS * 4);
            O->matmul_sel(B, outs, 2, X, n_in, dx, x_div, ds, half, with ? scratch : NULL);
            for (int o = 0; o < 2; o++) {
                fetch(B, got, dy[o], (size_t)P * YS * 4), fetch(B, want, dr[o], (size_t)P * YS * 4);
                for (size_t i = 0; i < (size_t)P * YS; i++) {
                    uint32_t u;
                    memcpy(&u, &got[i], 4);
                    bad += i < (size_t)half * YS ? memcmp(&got[i], &want[i], 4) != 0 : u != 0xffffffffu;
                }
            }
            ++*cases, *differ += bad != 0;
            CHECKF(bad == 0, "matmul_sel in tiles %s n_in %lld, %d experts, x_div %d%s: %d values differ", tname(t),
                   (long long)n_in, X, x_div, with ? " int8" : "", bad);
        }
    for (int o = 0; o < 2; o++) {
        O->free(B, dy[o], BE_MEM_DEVICE), O->free(B, dr[o], BE_MEM_DEVICE);
        for (int i = 0; i < X; i++) free(f[o][i]);
        free(m[o]), free(f[o]);
    }
    if (scratch) O->free(B, scratch, BE_MEM_DEVICE);
    O->free(B, dx, BE_MEM_DEVICE), O->free(B, ds, BE_MEM_DEVICE);
    free(x), free(got), free(want);
}
#endif

TEST(cuda_matmul_sel_tiles) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    if (!O->matmul_sel) SKIP("experts routed on the host (TIERKV_CUDA_ROUTE=host)");
    enum { P = 24, BIG_X = 300, BIG_P = 600 };
    int32_t sel[P], big[BIG_P];
    for (int p = 0; p < P; p++) sel[p] = p % 2 ? 4 : p % 8 == 0 ? 0 : p % 8 == 2 ? 1 : 3; /* 2 unused */
    for (int p = 0; p < BIG_P; p++) big[p] = (int32_t)((p * 37 + p / 7) % BIG_X);
    int cnt[5] = {0};
    for (int p = 0; p < P; p++) cnt[sel[p]]++;
    REQUIRE(cnt[2] == 0 && cnt[4] == 12);
    const int64_t n_ins[2] = {256, 1280};
    int cases = 0, differ = 0;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int li = 0; li < 2; li++) sel_tiles_case(B, O, TYPES[ti], n_ins[li], 5, 19, sel, P, &cases, &differ);
    sel_tiles_case(B, O, CW_T_F32, 256, BIG_X, 9, big, BIG_P, &cases, &differ);
    printf("    matmul_sel in tiles: %d of %d cases differ from a grid row a pair\n", differ, cases);
#endif
}

/* The KV policy's score update (score_add) against the CPU backend's op, bit for bit: 28 heads (a
 * weight 1 / (layers x heads) that is not a power of two, so the order of the additions shows), four
 * tokens: two share one array (their additions in token order), one has its own, one is skipped;
 * positions past n_pos untouched; more positions than one block. */
TEST(cuda_score_add) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    enum { H = 28, S = 1040, T = 4 };
    be_backend *cpu;
    char e[256];
    REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 1}, &cpu, e, sizeof e) == 0);
    float *mass = malloc((size_t)T * H * S * 4);
    for (size_t i = 0; i < (size_t)T * H * S; i++) mass[i] = fabsf(rndf()) / 64.0f;
    double *a = malloc(S * 8), *b = malloc(S * 8), *out = malloc(S * 8), w = 1.0 / (28.0 * H);
    for (int i = 0; i < S; i++) a[i] = b[i] = fabs((double)rndf()) * (i % 3);
    float *dm = dalloc(B, (size_t)T * H * S * 4, BE_MEM_DEVICE);
    double *da = dalloc(B, S * 8, BE_MEM_DEVICE), *db = dalloc(B, S * 8, BE_MEM_DEVICE);
    O->upload(B, dm, mass, (size_t)T * H * S * 4), O->upload(B, da, a, S * 8), O->upload(B, db, b, S * 8);
    int n_pos[T] = {1001, 1040, 700, 1040};
    double *hp[T] = {a, b, a, NULL}, *dp[T] = {da, db, da, NULL};
    cpu->ops->score_add(cpu, hp, n_pos, T, mass, H, S, w);
    O->score_add(B, dp, n_pos, T, dm, H, S, w);
    fetch(B, out, da, S * 8);
    int bad = 0;
    for (int i = 0; i < S; i++) bad += memcmp(&out[i], &a[i], 8) != 0;
    fetch(B, out, db, S * 8);
    for (int i = 0; i < S; i++) bad += memcmp(&out[i], &b[i], 8) != 0;
    printf("    score_add: %d of %d scores differ from the CPU's\n", bad, 2 * S);
    CHECK(bad == 0);
    O->free(B, dm, BE_MEM_DEVICE), O->free(B, da, BE_MEM_DEVICE), O->free(B, db, BE_MEM_DEVICE);
    free(mass), free(a), free(b), free(out);
    be_close(cpu);
#endif
}

#ifdef TKV_CUDA
/* host truth: the decoded values of (tier, slot, layer) */
typedef struct {
    float *v; /* [tier][slot][layer][2 * kv_dim] */
    int slots, layers, kd;
} truth;
static float *tr_at(truth *t, int32_t ref, int layer) {
    return t->v + (((size_t)BE_SLOT_TIER(ref) * t->slots + BE_SLOT_IDX(ref)) * t->layers + layer) * 2 * t->kd;
}
/* Pools on the backend: T0 device, T1 pinned, T2 pinned (or pageable host memory, as a KV module may
 * keep it), STAGE device with 2 layers; with the host truth of what write_random wrote into them and
 * kv_write's device rows (a tier's slots' worth of K and of V). */
typedef struct {
    be_kv_pools p;
    void *chunks[BE_N_POOLS][16];
    truth tr;
    float *dk, *dv;
} dpools;
static void dpools_init(be_backend *B, dpools *d, int n_layer, int nkv, int hd, const be_kv_fmt fmt[4], int shift,
                        int n_chunks, int t2_host) {
    memset(d, 0, sizeof *d);
    d->p.n_layer = n_layer, d->p.n_head_kv = nkv, d->p.head_dim = hd;
    const be_mem mem[4] = {BE_MEM_DEVICE, BE_MEM_PINNED, t2_host ? BE_MEM_HOST : BE_MEM_PINNED, BE_MEM_DEVICE};
    for (int i = 0; i < BE_N_POOLS; i++) {
        be_kv_pool *q = &d->p.pool[i];
        q->fmt = fmt[i], q->mem = mem[i], q->layers = i == BE_STAGE ? 2 : n_layer, q->chunk_shift = shift;
        q->n_chunks = n_chunks, q->chunks = d->chunks[i];
        q->record_bytes = be_kv_record_bytes(fmt[i], nkv, hd);
        for (int c = 0; c < n_chunks; c++)
            d->chunks[i][c] = dalloc(B, ((size_t)1 << shift) * (size_t)q->layers * q->record_bytes, mem[i]);
    }
    const int S = n_chunks << shift, kd = nkv * hd;
    d->tr = (truth){calloc((size_t)4 * S * n_layer * 2 * kd, 4), S, n_layer, kd};
    d->dk = dalloc(B, (size_t)S * kd * 4, BE_MEM_DEVICE), d->dv = dalloc(B, (size_t)S * kd * 4, BE_MEM_DEVICE);
}
static void dpools_free(be_backend *B, dpools *d) {
    for (int i = 0; i < BE_N_POOLS; i++)
        for (int c = 0; c < d->p.pool[i].n_chunks; c++) B->ops->free(B, d->chunks[i][c], d->p.pool[i].mem);
    free(d->tr.v);
    B->ops->free(B, d->dk, BE_MEM_DEVICE), B->ops->free(B, d->dv, BE_MEM_DEVICE);
}
/* writes random K/V rows into refs through kv_write and records the decoded values */
static void write_random(be_backend *B, dpools *d, const int32_t *refs, int n, int layer) {
    int kd = d->p.n_head_kv * d->p.head_dim;
    float *k = malloc((size_t)n * kd * 4), *v = malloc((size_t)n * kd * 4);
    rand_vec(k, (size_t)n * kd, 2.0f), rand_vec(v, (size_t)n * kd, 1.0f);
    if (n > 1) memset(k + kd, 0, (size_t)kd * 4); /* an all-zero row: Q8 scale 0 */
    if (n > 3 && d->p.pool[BE_SLOT_TIER(refs[0])].fmt == BE_KV_Q8_HEAD) {
        /* the codec's edges, where the host stores a head as zeros with scale 0: a NaN in a head
         * (a GPU's fmaxf would drop it), and a head so small that 127 / amax overflows */
        k[2 * kd + 5] = NAN;
        for (int i = 0; i < d->p.head_dim; i++) v[3 * kd + d->p.head_dim + i] = i % 2 ? 1e-38f : -1e-38f;
    }
    B->ops->upload(B, d->dk, k, (size_t)n * kd * 4), B->ops->upload(B, d->dv, v, (size_t)n * kd * 4);
    B->ops->kv_write(B, &d->p, layer, refs, n, d->dk, d->dv);
    uint8_t *rec = malloc(rec_bytes(BE_KV_F32, d->p.n_head_kv, d->p.head_dim));
    for (int i = 0; i < n; i++) {
        be_kv_fmt f = d->p.pool[BE_SLOT_TIER(refs[i])].fmt;
        rec_encode(rec, f, d->p.n_head_kv, d->p.head_dim, k + (size_t)i * kd, v + (size_t)i * kd);
        float *t = tr_at(&d->tr, refs[i], layer);
        rec_decode(rec, f, d->p.n_head_kv, d->p.head_dim, t, t + kd);
    }
    free(rec), free(k), free(v);
}
#endif

TEST(cuda_kv_write_read_moves) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const int nkv = 4, hd = 128, kd = nkv * hd, L = 2, shift = 7, nch = 2, S = nch << shift;
    const be_kv_fmt fmts[4] = {BE_KV_F16, BE_KV_F16, BE_KV_Q8_HEAD, BE_KV_F16};
    const be_kv_fmt fmts32[4] = {BE_KV_F32, BE_KV_F32, BE_KV_Q8_HEAD, BE_KV_F32};
    /* variants: f16 tiers, f32 tiers, f16 tiers with T2 in pageable host memory */
    for (int variant = 0; variant < 3; variant++) {
        dpools d;
        dpools_init(B, &d, L, nkv, hd, variant == 1 ? fmts32 : fmts, shift, nch, variant == 2);
        int32_t *refs = malloc((size_t)S * 4);
        for (int layer = 0; layer < L; layer++)
            for (int tier = 0; tier < 4; tier++) {
                int slots = tier == BE_STAGE && layer ? 0 : S; /* STAGE has 2 layers: layer 1 written below */
                for (int s = 0; s < slots; s++) refs[s] = BE_SLOT(tier, s);
                if (!slots) continue;
                if (tier == BE_T2 && variant == 2) { /* kv_write does not reach pageable memory: the host encodes */
                    int32_t one;
                    float *kk = malloc((size_t)kd * 8);
                    for (int s = 0; s < S; s++) {
                        one = BE_SLOT(BE_T2, s);
                        rand_vec(kk, 2 * (size_t)kd, 1.5f);
                        rec_encode(be_kv_record(&d.p, one, layer), BE_KV_Q8_HEAD, nkv, hd, kk, kk + kd);
                        float *t = tr_at(&d.tr, one, layer);
                        rec_decode(be_kv_record(&d.p, one, layer), BE_KV_Q8_HEAD, nkv, hd, t, t + kd);
                    }
                    free(kk);
                    continue;
                }
                write_random(B, &d, refs, slots, layer);
            }
        /* kv_read gives back exactly what the pool format holds */
        float *k = malloc((size_t)S * kd * 4), *v = malloc((size_t)S * kd * 4);
        int bad = 0;
        for (int tier = 0; tier < 3; tier++) {
            for (int s = 0; s < S; s++) refs[s] = BE_SLOT(tier, (s * 37) % S);
            B->ops->kv_read(B, &d.p, 1, refs, S, k, v);
            for (int s = 0; s < S; s++) {
                const float *t = tr_at(&d.tr, refs[s], 1);
                bad += memcmp(k + (size_t)s * kd, t, (size_t)kd * 4) != 0;
                bad += memcmp(v + (size_t)s * kd, t + kd, (size_t)kd * 4) != 0;
            }
        }
        static const char *vname[3] = {"f16", "f32", "f16, T2 pageable"};
        CHECKF(bad == 0, "kv_write/kv_read (%s): %d rows differ from the host codec", vname[variant], bad);
        /* moves: a long run for the copy engine, scattered records, conversions, a freed T0 slot reused */
        be_move mv[200];
        int n = 0;
        for (int s = 0; s < 100; s++) mv[n++] = (be_move){BE_SLOT(BE_T0, s), BE_SLOT(BE_T1, 128 + s)}; /* 200 KB+ run */
        mv[n++] = (be_move){BE_SLOT(BE_T0, 110), BE_SLOT(BE_T2, 3)};
        mv[n++] = (be_move){BE_SLOT(BE_T1, 5), BE_SLOT(BE_T0, 0)}; /* into a slot demoted above */
        mv[n++] = (be_move){BE_SLOT(BE_T2, 50), BE_SLOT(BE_T0, 110)};
        mv[n++] = (be_move){BE_SLOT(BE_T1, 60), BE_SLOT(BE_T2, 61)};
        for (int s = 0; s < 20; s++) mv[n++] = (be_move){BE_SLOT(s % 2 ? BE_T1 : BE_T2, 200 + 2 * s), BE_SLOT(BE_STAGE, s)};
        /* a swap through a spare slot (a cycle) and a write-after-read chain deeper than the phases:
         * more groups (cuda_plan.h) */
        mv[n++] = (be_move){BE_SLOT(BE_T0, 120), BE_SLOT(BE_T1, 250)};
        mv[n++] = (be_move){BE_SLOT(BE_T1, 251), BE_SLOT(BE_T0, 120)};
        mv[n++] = (be_move){BE_SLOT(BE_T1, 250), BE_SLOT(BE_T1, 251)};
        for (int s = 245; s >= 240; s--) mv[n++] = (be_move){BE_SLOT(BE_T1, s), BE_SLOT(BE_T1, s + 1)};
        for (int layer = 0; layer < L; layer++) {
            /* host truth in list order, each move reading what its source holds then (the CPU
             * backend's meaning; the staging of T1 slots 202.. reads what the demotions wrote there) */
            uint8_t *rec = malloc(rec_bytes(BE_KV_F32, nkv, hd));
            for (int i = 0; i < n; i++) {
                be_kv_fmt fd = d.p.pool[BE_SLOT_TIER(mv[i].dst)].fmt;
                const float *s = tr_at(&d.tr, mv[i].src, layer);
                float *t = tr_at(&d.tr, mv[i].dst, BE_SLOT_TIER(mv[i].dst) == BE_STAGE ? layer % 2 : layer);
                rec_encode(rec, fd, nkv, hd, s, s + kd);
                rec_decode(rec, fd, nkv, hd, t, t + kd);
            }
            free(rec);
            B->ops->copy_moves(B, &d.p, mv, n, layer);
            B->ops->copy_wait(B, layer);
            bad = 0;
            for (int i = 0; i < n; i++) {
                B->ops->kv_read(B, &d.p, layer, &mv[i].dst, 1, k, v);
                const float *t = tr_at(&d.tr, mv[i].dst, BE_SLOT_TIER(mv[i].dst) == BE_STAGE ? layer % 2 : layer);
                bad += memcmp(k, t, (size_t)kd * 4) != 0 || memcmp(v, t + kd, (size_t)kd * 4) != 0;
            }
            CHECKF(bad == 0, "copy_moves layer %d (%s): %d records differ from the moves in list order", layer,
                   vname[variant], bad);
        }
        /* the stalls at copy_wait, timed on the device, settled by the reads above */
        double stall = B->ops->copy_stall_seconds ? B->ops->copy_stall_seconds(B) : -1;
        CHECKF(stall >= 0 && stall < 10, "copy_stall_seconds %g", stall);
        /* the host blocked in those kv_reads (each waits for the compute stream): counted */
        double hw = B->ops->host_wait_seconds ? B->ops->host_wait_seconds(B) : -1;
        CHECKF(hw > 0 && hw < 60, "host_wait_seconds %g after the kv_reads", hw);
        printf("    kv_write/kv_read/copy_moves (%s T0/T1/STAGE, Q8 T2): exact against the host codec; copy stalls %.3f ms, "
               "host waits %.3f ms\n",
               vname[variant], stall * 1e3, hw * 1e3);
        free(k), free(v), free(refs);
        dpools_free(B, &d);
    }
#endif
}

#ifdef TKV_CUDA
/* Three rounds of: random rows kv_write'n into T0 slots of L layers, copy_after_compute, moved at once
 * to T1 in reverse order on the copy stream, nothing waiting for the device between. Then, by_host 0:
 * after each layer's copy_wait, kv_read of the moved records (device order only); by_host 1: every
 * copy_wait, host_sync, and the host reads the pinned T1 records itself. The records whose values are
 * not the rows written. */
static int moved_rows_bad(be_backend *B, int L, int nch, int by_host) {
    const be_ops *O = B->ops;
    const int nkv = 4, hd = 128, kd = nkv * hd, shift = 7, S = nch << shift;
    const be_kv_fmt fmts[4] = {BE_KV_F16, BE_KV_F16, BE_KV_Q8_HEAD, BE_KV_F16};
    dpools d;
    dpools_init(B, &d, L, nkv, hd, fmts, shift, nch, 0);
    int32_t *refs = malloc((size_t)S * 4);
    be_move *mv = malloc((size_t)S * sizeof *mv);
    float *x = malloc((size_t)2 * kd * 4);
    int bad = 0;
    for (int round = 0; round < 3; round++) {
        for (int s = 0; s < S; s++) refs[s] = BE_SLOT(BE_T0, s), mv[s] = (be_move){BE_SLOT(BE_T0, s), BE_SLOT(BE_T1, S - 1 - s)};
        for (int layer = 0; layer < L; layer++) write_random(B, &d, refs, S, layer);
        O->copy_after_compute(B);
        for (int layer = 0; layer < L; layer++) O->copy_moves(B, &d.p, mv, S, layer);
        if (by_host) {
            for (int layer = 0; layer < L; layer++) O->copy_wait(B, layer);
            O->host_sync(B);
        }
        for (int layer = 0; layer < L; layer++) {
            if (!by_host) O->copy_wait(B, layer);
            for (int s = 0; s < S; s++) {
                if (by_host)
                    rec_decode(be_kv_record(&d.p, mv[s].dst, layer), fmts[BE_T1], nkv, hd, x, x + kd);
                else
                    O->kv_read(B, &d.p, layer, &mv[s].dst, 1, x, x + kd);
                bad += memcmp(x, tr_at(&d.tr, mv[s].src, layer), (size_t)2 * kd * 4) != 0;
            }
        }
    }
    free(x), free(mv), free(refs);
    dpools_free(B, &d);
    return bad;
}
#endif

/* copy_after_compute: rows kv_write queued on the compute stream and moved at once on the copy stream,
 * with nothing waiting for the device between: the copies read the new rows, not the slots' old
 * bytes (without the op the copy stream may run first: the KV module's batches after a prompt's
 * chunk). Several layers of writes queued first, so the copies would have a head start. */
TEST(cuda_copy_after_compute) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    REQUIRE(O->copy_after_compute != NULL);
    int bad = moved_rows_bad(B, 4, 2, 0);
    CHECKF(bad == 0, "%d records moved before the kv_write queued ahead of them", bad);
#endif
}

/* host_sync: rows moved T0 -> T1 (pinned host memory) on the copy stream, fenced by copy_wait only
 * (which orders the device, not the host), then host_sync: the host reads every moved record itself
 * and finds the new rows (a sequence saved right after its moves, kv_io.c). */
TEST(cuda_host_sync) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    REQUIRE(O->copy_after_compute != NULL && O->host_sync != NULL);
    int bad = moved_rows_bad(B, 8, 4, 1);
    CHECKF(bad == 0, "%d moved records not there for the host after host_sync", bad);
#endif
}

#ifdef TKV_CUDA
/* Reference attention over host truth: positions in order, masked/evicted/out-of-tier skipped. */
static void ref_attention(truth *tr, const be_attn *a, double *o, double *mass, double *pm, double *pl) {
    int G = a->n_head / a->n_head_kv, hd = a->head_dim;
    unsigned tiers = a->tiers ? a->tiers : 0xfu;
    for (int t = 0; t < a->n_tok; t++) {
        int np = a->n_pos[t];
        double *s = malloc((size_t)(np > 0 ? np : 1) * 8);
        for (int h = 0; h < a->n_head; h++) {
            int g = h / G;
            const float *q = a->q + ((size_t)t * a->n_head + h) * hd; /* host copy of q */
            double m = -INFINITY;
            for (int j = 0; j < np; j++) {
                int32_t r = a->slots[t][j];
                int ok = r != BE_SLOT_NONE && ((tiers >> BE_SLOT_TIER(r)) & 1u) && (!a->keep || !a->keep[t] || a->keep[t][g * a->keep_stride + j]);
                if (!ok) { s[j] = -INFINITY; continue; }
                const float *kv = tr_at(tr, r, BE_SLOT_TIER(r) == BE_STAGE ? a->layer % 2 : a->layer);
                double d = 0;
                for (int e = 0; e < hd; e++) d += (double)q[e] * kv[g * hd + e];
                s[j] = d * a->scale;
                if (s[j] > m) m = s[j];
            }
            double l = 0;
            for (int j = 0; j < np; j++) s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - m), l += s[j];
            double *oo = o + ((size_t)t * a->n_head + h) * hd;
            for (int e = 0; e < hd; e++) oo[e] = 0;
            for (int j = 0; j < np; j++) {
                if (s[j] == 0) continue;
                int32_t r = a->slots[t][j];
                const float *kv = tr_at(tr, r, BE_SLOT_TIER(r) == BE_STAGE ? a->layer % 2 : a->layer) + tr->kd;
                for (int e = 0; e < hd; e++) oo[e] += s[j] * kv[g * hd + e];
            }
            double norm = pm ? 1.0 : (l > 0 ? 1.0 / l : 0);
            for (int e = 0; e < hd; e++) oo[e] *= norm;
            if (pm) pm[(size_t)t * a->n_head + h] = m, pl[(size_t)t * a->n_head + h] = l;
            if (mass)
                for (int j = 0; j < np; j++) {
                    double w = s[j] * norm;
                    if (a->mass_mode == BE_MASS_HEADS) mass[((size_t)t * a->n_head + h) * a->mass_stride + j] = w;
                    else mass[(size_t)t * a->mass_stride + j] += w;
                }
        }
        free(s);
    }
}
#endif

TEST(cuda_attention) {
    GPU_OR_SKIP();
#ifdef TKV_CUDA
    const struct { int n_head, nkv, hd; } shapes[] = {{28, 4, 128}, {14, 2, 64}, {40, 2, 128}, {8, 8, 32}};
    for (int si = 0; si < 4; si++) {
        const int H = shapes[si].n_head, nkv = shapes[si].nkv, hd = shapes[si].hd;
        const int L = 3, shift = 8, nch = 3, S = nch << shift, layer = 1;
        const be_kv_fmt fmts[4] = {BE_KV_F16, BE_KV_F16, BE_KV_Q8_HEAD, BE_KV_F16};
        dpools d;
        dpools_init(B, &d, L, nkv, hd, fmts, shift, nch, 0);
        int32_t *refs = malloc((size_t)S * 4);
        for (int tier = 0; tier < 4; tier++) {
            for (int s = 0; s < S; s++) refs[s] = BE_SLOT(tier, s);
            write_random(B, &d, refs, S, tier == BE_STAGE ? layer % 2 : layer);
        }
        /* three rows: sequence A decoding at 700 positions, sequence B in prefill at 300 and 301 */
        enum { NT = 3 };
        const int P = 701;
        int32_t *ta = malloc(P * 4), *tb = malloc(P * 4);
        for (int j = 0; j < P; j++) {
            int r = (int)(rnd() % 10);
            int tier = r < 5 ? BE_T0 : r < 7 ? BE_T1 : r < 8 ? BE_T2 : r < 9 ? BE_STAGE : -1;
            ta[j] = tier < 0 ? BE_SLOT_NONE : BE_SLOT(tier, (j * 7 + si) % S);
            tb[j] = BE_SLOT(j % 3 == 0 ? BE_T1 : BE_T0, (j * 13 + 5) % S);
        }
        uint8_t *keep = malloc((size_t)nkv * P);
        for (int i = 0; i < nkv * P; i++) keep[i] = rnd() % 8 != 0;
        const int32_t *slots[NT] = {ta, tb, tb};
        const uint8_t *keeps[NT] = {keep, NULL, NULL};
        int n_pos[NT] = {700, 300, 301};
        size_t QN = (size_t)NT * H * hd;
        float *q = malloc(QN * 4), *o = malloc(QN * 4);
        rand_vec(q, QN, 1.0f);
        float *dq = dalloc(B, QN * 4, BE_MEM_DEVICE), *dout = dalloc(B, QN * 4, BE_MEM_DEVICE);
        O->upload(B, dq, q, QN * 4);
        size_t scratch_b = O->attention_scratch(B, NT, P, H, hd);
        void *scratch = dalloc(B, scratch_b, BE_MEM_DEVICE);
        const int MS = 720;
        size_t MN = (size_t)NT * H * MS;
        float *dmass = dalloc(B, MN * 4, BE_MEM_PINNED), *mass = malloc(MN * 4);
        double *ref = calloc(QN, 8), *mref = calloc(MN, 8);
        float *got_mass = malloc(MN * 4);
        double *mref_c = malloc(MN * 8);
        for (int mode = BE_MASS_HEADS; mode <= BE_MASS_SUM; mode++) {
            be_attn a = {.n_tok = NT, .layer = layer, .n_head = H, .n_head_kv = nkv, .head_dim = hd,
                         .scale = 1.0f / sqrtf((float)hd), .q = dq, .o = dout, .pools = &d.p, .slots = slots,
                         .n_pos = n_pos, .keep = keeps, .keep_stride = P, .mass_mode = mode, .mass = dmass,
                         .mass_stride = MS, .tables_gen = 0};
            poison(B, dout, QN * 4), poison(B, dmass, MN * 4);
            O->attention(B, &a, scratch);
            fetch(B, o, dout, QN * 4);
            fetch(B, mass, dmass, MN * 4);
            be_attn ah = a;
            ah.q = q;
            memset(mref, 0, MN * 8);
            ref_attention(&d.tr, &ah, ref, mref, NULL, NULL);
            char name[80];
            snprintf(name, sizeof name, "attention %d/%d heads, hd %d", H, nkv, hd);
            if (mode == BE_MASS_HEADS) REPORT(name, rel_err(o, ref, QN), 1e-5);
            /* the masses of positions < n_pos */
            size_t nm = 0;
            int mh = mode == BE_MASS_HEADS ? H : 1;
            for (int t = 0; t < NT; t++)
                for (int h = 0; h < mh; h++)
                    for (int j = 0; j < n_pos[t]; j++) {
                        got_mass[nm] = mass[((size_t)t * mh + h) * MS + j];
                        mref_c[nm++] = mref[((size_t)t * mh + h) * MS + j];
                    }
            REPORT(mode == BE_MASS_HEADS ? "  mass per head" : "  mass summed over heads", rel_err(got_mass, mref_c, nm), 1e-5);
        }
        /* the tiers do not change the bits: every T1 position copied to T0 slot-for-slot gives the same o */
        {
            be_attn a = {.n_tok = NT, .layer = layer, .n_head = H, .n_head_kv = nkv, .head_dim = hd,
                         .scale = 1.0f / sqrtf((float)hd), .q = dq, .o = dout, .pools = &d.p, .slots = slots,
                         .n_pos = n_pos, .keep = keeps, .keep_stride = P, .mass_mode = BE_MASS_NONE, .tables_gen = 7};
            O->attention(B, &a, scratch);
            float *o1 = malloc(QN * 4), *o2 = malloc(QN * 4);
            fetch(B, o1, dout, QN * 4);
            /* the same tables_gen: the device copy of the tables is reused */
            poison(B, dout, QN * 4);
            O->attention(B, &a, scratch);
            fetch(B, o2, dout, QN * 4);
            CHECK(memcmp(o1, o2, QN * 4) == 0);
            /* the T1 records (pinned) copied slot for slot into a second pool in device memory, and
             * the T1 references read from there: the same f16 bits from another memory */
            dpools d2;
            dpools_init(B, &d2, L, nkv, hd, fmts, shift, nch, 0);
            be_move *mv = malloc((size_t)S * sizeof *mv);
            for (int s = 0; s < S; s++) mv[s] = (be_move){BE_SLOT(BE_T1, s), BE_SLOT(BE_T0, s)};
            be_kv_pools cross = d.p; /* T1 = d's pinned T1, T0 = d2's device T0 */
            cross.pool[BE_T0] = d2.p.pool[BE_T0];
            O->copy_moves(B, &cross, mv, S, layer);
            O->copy_wait(B, layer);
            be_kv_pools moved = d.p;
            moved.pool[BE_T1] = d2.p.pool[BE_T0];
            moved.pool[BE_T1].layers = L;
            a.pools = &moved;
            a.tables_gen = 0;
            poison(B, dout, QN * 4);
            O->attention(B, &a, scratch);
            fetch(B, o2, dout, QN * 4);
            CHECKF(memcmp(o1, o2, QN * 4) == 0, "%s", "T1 rows read from device memory instead of pinned memory changed the result");
            free(o1), free(o2), free(mv);
            dpools_free(B, &d2);
        }
        /* split: T0 on one side, T1 + T2 + STAGE on the other, merged; against full */
        {
            float *p_o[2], *p_m[2], *p_l[2], *p_mass[2];
            for (int k = 0; k < 2; k++) {
                p_o[k] = dalloc(B, QN * 4, BE_MEM_DEVICE);
                p_m[k] = dalloc(B, (size_t)NT * H * 4, k ? BE_MEM_PINNED : BE_MEM_DEVICE);
                p_l[k] = dalloc(B, (size_t)NT * H * 4, k ? BE_MEM_PINNED : BE_MEM_DEVICE);
                p_mass[k] = dalloc(B, MN * 4, BE_MEM_DEVICE);
                poison(B, p_o[k], QN * 4), poison(B, p_mass[k], MN * 4);
            }
            be_attn_part parts[2];
            for (int k = 0; k < 2; k++) {
                parts[k] = (be_attn_part){p_o[k], p_m[k], p_l[k], p_mass[k]};
                be_attn a = {.n_tok = NT, .layer = layer, .n_head = H, .n_head_kv = nkv, .head_dim = hd,
                             .scale = 1.0f / sqrtf((float)hd), .q = dq, .o = NULL, .pools = &d.p, .slots = slots,
                             .n_pos = n_pos, .keep = keeps, .keep_stride = P, .mass_mode = BE_MASS_HEADS,
                             .mass_stride = MS, .tables_gen = 9, .tiers = k ? (1u << BE_T1) | (1u << BE_T2) | (1u << BE_STAGE) : 1u << BE_T0,
                             .part = &parts[k]};
                O->attention(B, &a, scratch);
            }
            /* one part's partial results against the reference restricted to its tiers */
            float *pm = malloc((size_t)NT * H * 4), *pl = malloc((size_t)NT * H * 4);
            double *rpm = malloc((size_t)NT * H * 8), *rpl = malloc((size_t)NT * H * 8);
            fetch(B, o, p_o[1], QN * 4);
            fetch(B, pm, p_m[1], (size_t)NT * H * 4), fetch(B, pl, p_l[1], (size_t)NT * H * 4);
            be_attn ah = {.n_tok = NT, .layer = layer, .n_head = H, .n_head_kv = nkv, .head_dim = hd,
                          .scale = 1.0f / sqrtf((float)hd), .q = q, .slots = slots, .n_pos = n_pos, .keep = keeps,
                          .keep_stride = P, .tiers = (1u << BE_T1) | (1u << BE_T2) | (1u << BE_STAGE)};
            ref_attention(&d.tr, &ah, ref, NULL, rpm, rpl);
            /* the part's o is unnormalised relative to its own m: compare o / l */
            for (size_t i = 0; i < QN; i++) {
                size_t th = i / (size_t)hd;
                o[i] = pl[th] > 0 ? o[i] / pl[th] : 0;
                ref[i] = rpl[th] > 0 ? ref[i] / rpl[th] : 0;
            }
            REPORT("  split part (T1+T2+STAGE) o / l", rel_err(o, ref, QN), 1e-5);
            int bad_m = 0;
            for (int i = 0; i < NT * H; i++) bad_m += rpl[i] > 0 && fabs(pm[i] - rpm[i]) > 1e-5 * (1 + fabs(rpm[i]));
            CHECK(bad_m == 0);
            poison(B, dout, QN * 4);
            O->attention_merge(B, dout, parts, 2, NT, H, hd, H, MS, n_pos);
            fetch(B, o, dout, QN * 4);
            be_attn af = ah;
            af.tiers = 0;
            af.mass_mode = BE_MASS_HEADS;
            af.mass_stride = MS;
            memset(mref, 0, MN * 8);
            ref_attention(&d.tr, &af, ref, mref, NULL, NULL);
            REPORT("  split + merge vs full", rel_err(o, ref, QN), 1e-5);
            /* merged masses: part 0's plus part 1's equal full attention's */
            float *m0 = malloc(MN * 4), *m1 = malloc(MN * 4);
            fetch(B, m0, p_mass[0], MN * 4), fetch(B, m1, p_mass[1], MN * 4);
            size_t nm = 0;
            for (int t = 0; t < NT; t++)
                for (int h = 0; h < H; h++)
                    for (int j = 0; j < n_pos[t]; j++) {
                        size_t at = ((size_t)t * H + h) * MS + j;
                        got_mass[nm] = m0[at] + m1[at];
                        mref_c[nm++] = mref[at];
                    }
            REPORT("  split masses (per head) vs full", rel_err(got_mass, mref_c, nm), 1e-5);
            free(m0), free(m1), free(pm), free(pl), free(rpm), free(rpl);
            for (int k = 0; k < 2; k++) {
                O->free(B, p_o[k], BE_MEM_DEVICE), O->free(B, p_mass[k], BE_MEM_DEVICE);
                O->free(B, p_m[k], k ? BE_MEM_PINNED : BE_MEM_DEVICE), O->free(B, p_l[k], k ? BE_MEM_PINNED : BE_MEM_DEVICE);
            }
            /* be_split_attention whole, as the forward calls it: the T1 part on a CPU backend over the
             * pinned T1 pool, sent up by upload_pinned, merged and summed on the device; against full
             * (ref and mref above) */
            be_backend *cpu;
            char e2[256];
            REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 2}, &cpu, e2, sizeof e2) == 0);
            be_split *sp = be_split_new(B, cpu, NT, H, hd, MS, e2, sizeof e2);
            CHECKF(sp != NULL, "be_split_new: %s", e2);
            if (sp) {
                float *dm = dalloc(B, MN * 4, BE_MEM_DEVICE), *hm = malloc(MN * 4);
                poison(B, dout, QN * 4), poison(B, dm, MN * 4);
                be_attn as = {.n_tok = NT, .layer = layer, .n_head = H, .n_head_kv = nkv, .head_dim = hd,
                              .scale = 1.0f / sqrtf((float)hd), .q = dq, .o = dout, .pools = &d.p, .slots = slots,
                              .n_pos = n_pos, .keep = keeps, .keep_stride = P, .mass_mode = BE_MASS_HEADS, .mass = dm,
                              .mass_stride = MS, .tables_gen = 11};
                be_split_attention(sp, &as, scratch);
                fetch(B, o, dout, QN * 4);
                REPORT("  be_split_attention (CPU T1 part) vs full", rel_err(o, ref, QN), 1e-5);
                fetch(B, hm, dm, MN * 4);
                nm = 0;
                for (int t = 0; t < NT; t++)
                    for (int h = 0; h < H; h++)
                        for (int j = 0; j < n_pos[t]; j++) {
                            size_t at = ((size_t)t * H + h) * MS + j;
                            got_mass[nm] = hm[at];
                            mref_c[nm++] = mref[at];
                        }
                REPORT("  be_split_attention masses vs full", rel_err(got_mass, mref_c, nm), 1e-5);
                CHECK(be_split_reads(sp) == 1 && be_split_sent_bytes(sp) > 0); /* the queries; the host part */
                O->free(B, dm, BE_MEM_DEVICE), free(hm);
                be_split_free(sp);
            }
            be_close(cpu);
        }
        free(ta), free(tb), free(keep), free(q), free(o), free(mass), free(ref), free(mref), free(got_mass), free(mref_c);
        free(refs);
        O->free(B, dq, BE_MEM_DEVICE), O->free(B, dout, BE_MEM_DEVICE), O->free(B, scratch, BE_MEM_DEVICE);
        O->free(B, dmass, BE_MEM_PINNED);
        dpools_free(B, &d);
    }
#endif
}
