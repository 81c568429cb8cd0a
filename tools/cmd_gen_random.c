/* cmd_gen_random.c — `tierkv gen-random --shape NAME --type T -o FILE [--seed S] [--layers N] [-t N]`:
 * writes a GGUF with the real shapes of a known model (MODELS.md) and random weights, for speed
 * benchmarks only. Weights are random quant bytes whose f16 scale fields are set so that every
 * element has a standard deviation of about 0.5/sqrt(n_in): a matmul of an O(1) activation stays
 * O(1), and nothing becomes NaN/inf through a forward pass. Norms are 1.0, biases small; Qwen3's
 * per-head q/k norms are 1 + 0.25 u (u uniform in [-1, 1)), so that a test can see them applied.
 * Types follow FORMATS.md 2.6: Q4_K_M is the K mix; K-quants on rows that are not a multiple of 256
 * fall back (Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0; the output or tied embedding -> Q8_0).
 * Architectures, as llama.cpp names and lays out their tensors: qwen2 (q/k/v biases), llama,
 * qwen3 (no biases; attn_q_norm and attn_k_norm of head_dim; key_length/value_length), qwen3moe
 * (qwen3's attention; an F32 router ffn_gate_inp [n_embd, n_expert] and 3-D expert tensors
 * ffn_{gate,up}_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps [n_ff_exp, n_embd, n_expert]; no
 * dense FFN, no shared expert).
 * The file is streamed: two batches of chunks of rows in memory (a chunk a thread, 8 MiB each),
 * whatever the model's size; the threads fill one while the other is written. On a
 * failure the output is removed only if this run created it: never a path it could not open, a
 * directory, a device, or a file that was there before (that one is said to be incomplete). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/half.h"
#include "base/workers.h"
#include "cmds.h"
#include "gguf/gguf.h"
#include "gguf/gguf_random.h"
#include "gguf/gguf_write.h"
#include "out.h"
#include "shapes.h"

#define MIX_Q4_K_M 1000 /* pseudo type id for the mix */

static const struct { const char *name; uint32_t type; uint32_t file_type; } TYPES[] = {
    {"F32", GGML_F32, 0},    {"F16", GGML_F16, 1},    {"BF16", GGML_BF16, 32},  {"Q8_0", GGML_Q8_0, 7},
    {"Q4_0", GGML_Q4_0, 2},  {"Q5_0", GGML_Q5_0, 8},  {"Q4_K", GGML_Q4_K, 14},  {"Q5_K", GGML_Q5_K, 16},
    {"Q6_K", GGML_Q6_K, 18}, {"Q4_K_M", MIX_Q4_K_M, 15},
};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

/* the roles llama.cpp's K mix tells apart (R_FFN_DOWN: ffn_down and ffn_down_exps alike) */
enum role { R_EMBD, R_OUTPUT, R_ATTN_K, R_ATTN_V, R_ATTN_OUT, R_FFN_DOWN, R_MATRIX };

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv gen-random --shape NAME --type T -o FILE [--seed S] [--layers N] [-t N]\n"
                 "  writes a GGUF with real shapes and random weights (speed benchmarks only)\n  shapes:");
    for (size_t i = 0; i < shapes_n; i++) fprintf(out, " %s", shapes_table[i].name);
    fprintf(out, "\n  types (any case):");
    for (size_t i = 0; i < N_TYPES; i++) fprintf(out, " %s", TYPES[i].name);
    fprintf(out, "\n  --layers N keeps the first N layers (default: the model's count); --seed S (default 1);\n"
                 "  -t N fills on N threads (default: the online CPUs, at most 64; the same file for any N)\n");
}

/* llama.cpp's "more bits" layers of the K mixes: first and last eighth, and every third between. */
static int more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

static int is_kquant(uint32_t t) { return t == GGML_Q4_K || t == GGML_Q5_K || t == GGML_Q6_K; }

/* llama.cpp's llama_tensor_get_type for Q4_K_M, the rows that apply here; its n_expert == 8 rules
 * (attn_k and attn_v Q8_0, attn_output Q5_K) fire for exactly 8 experts, not for 128. */
static uint32_t pick_type(uint32_t want, enum role r, int il, int n_layer, uint32_t n_expert, uint64_t ne0) {
    uint32_t t = want;
    if (want == MIX_Q4_K_M) {
        t = GGML_Q4_K;
        if (r == R_OUTPUT) t = GGML_Q6_K;
        if ((r == R_ATTN_V || r == R_FFN_DOWN) && more_bits(il, n_layer)) t = GGML_Q6_K;
        if ((r == R_ATTN_V || r == R_ATTN_K) && n_expert == 8) t = GGML_Q8_0;
        if (r == R_ATTN_OUT && n_expert == 8) t = GGML_Q5_K;
    }
    if (ne0 % ggml_blck_size(t) == 0) return t;
    if (r == R_OUTPUT && is_kquant(t)) return GGML_Q8_0;
    if (t == GGML_Q4_K) t = GGML_Q5_0;
    else if (t == GGML_Q5_K) t = GGML_Q5_1;
    else if (t == GGML_Q6_K) t = GGML_Q8_0;
    return ne0 % ggml_blck_size(t) == 0 ? t : GGML_F16;
}

/* ---- the model ---- */

enum kind { K_MATRIX, K_NORM, K_BIAS, K_QK_NORM };

typedef struct {
    char name[64];
    uint32_t n_dims, type;
    uint64_t ne[3];  /* ne[0] the row (inputs), ne[1] rows (outputs), ne[2] experts; missing dims 1 */
    enum kind kind;  /* matrix (random), norm (ones), bias (small), q/k norm (around 1) */
} tdesc;

static int is_qwen3(const model_shape *s) { return !strncmp(s->arch, "qwen3", 5); }

static int plan(const model_shape *s, uint32_t want, uint32_t n_layer, tdesc **out, char *err, size_t errlen) {
    uint32_t hd = s->head_dim, E = s->n_embd, KV = hd * s->n_head_kv, Q = hd * s->n_head, X = s->n_expert;
    size_t cap = 3 + (size_t)n_layer * 14, n = 0;
    tdesc *t = calloc(cap, sizeof *t);
    if (!t) return snprintf(err, errlen, "out of memory"), -1;
#define TENSOR(nm, nd, ne0, ne1, ne2, k, typ)                                                              \
    do {                                                                                                   \
        t[n] = (tdesc){.n_dims = (nd), .ne = {(ne0), (ne1), (ne2)}, .type = (typ), .kind = (k)};           \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                                   \
        n++;                                                                                               \
    } while (0)
#define MAT(nm, in, outn, role, il) TENSOR(nm, 2, in, outn, 1, K_MATRIX, pick_type(want, role, il, (int)n_layer, X, (in)))
#define EXPERTS(nm, in, outn, role, il) TENSOR(nm, 3, in, outn, X, K_MATRIX, pick_type(want, role, il, (int)n_layer, X, (in)))
#define VEC(nm, len, k) TENSOR(nm, 1, len, 1, 1, k, GGML_F32)
    char nm[64];
    MAT("token_embd.weight", E, s->n_vocab, s->tied ? R_OUTPUT : R_EMBD, 0);
    int bias = strcmp(s->arch, "qwen2") == 0, qk_norm = is_qwen3(s);
    for (uint32_t il = 0; il < n_layer; il++) {
        int L = (int)il;
#define NM(x) (snprintf(nm, sizeof nm, "blk.%u." x, il), nm)
        VEC(NM("attn_norm.weight"), E, K_NORM);
        MAT(NM("attn_q.weight"), E, Q, R_MATRIX, L);
        if (bias) VEC(NM("attn_q.bias"), Q, K_BIAS);
        if (qk_norm) VEC(NM("attn_q_norm.weight"), hd, K_QK_NORM);
        MAT(NM("attn_k.weight"), E, KV, R_ATTN_K, L);
        if (bias) VEC(NM("attn_k.bias"), KV, K_BIAS);
        if (qk_norm) VEC(NM("attn_k_norm.weight"), hd, K_QK_NORM);
        MAT(NM("attn_v.weight"), E, KV, R_ATTN_V, L);
        if (bias) VEC(NM("attn_v.bias"), KV, K_BIAS);
        MAT(NM("attn_output.weight"), Q, E, R_ATTN_OUT, L);
        VEC(NM("ffn_norm.weight"), E, K_NORM);
        if (X) {
            /* the router stays F32: converters write it so and llama.cpp's quantize leaves it */
            TENSOR(NM("ffn_gate_inp.weight"), 2, E, X, 1, K_MATRIX, GGML_F32);
            EXPERTS(NM("ffn_gate_exps.weight"), E, s->n_ff_exp, R_MATRIX, L);
            EXPERTS(NM("ffn_up_exps.weight"), E, s->n_ff_exp, R_MATRIX, L);
            EXPERTS(NM("ffn_down_exps.weight"), s->n_ff_exp, E, R_FFN_DOWN, L);
        } else {
            MAT(NM("ffn_gate.weight"), E, s->n_ff, R_MATRIX, L);
            MAT(NM("ffn_up.weight"), E, s->n_ff, R_MATRIX, L);
            MAT(NM("ffn_down.weight"), s->n_ff, E, R_FFN_DOWN, L);
        }
#undef NM
    }
    VEC("output_norm.weight", E, K_NORM);
    if (!s->tied) MAT("output.weight", E, s->n_vocab, R_OUTPUT, 0);
#undef MAT
#undef EXPERTS
#undef VEC
#undef TENSOR
    TKV_ASSERT(n <= cap);
    *out = t;
    return (int)n;
}

/* GPT-2 byte-to-unicode (FORMATS.md 5.5) as UTF-8; returns the length (1 or 2). */
static int byte_token(int b, char *out) {
    int cp;
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) cp = b;
    else if (b <= 0x20) cp = 0x100 + b;
    else if (b <= 0xa0) cp = 0x100 + 33 + (b - 0x7f);
    else cp = 0x100 + 33 + 34; /* 0xad */
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static void add_metadata(gguf_writer *w, const model_shape *s, uint32_t n_layer, const char *tname, uint32_t file_type) {
    char key[128], name[128];
#define K(x) (snprintf(key, sizeof key, "%s." x, s->arch), key)
    gguf_writer_add_str(w, "general.architecture", s->arch);
    snprintf(name, sizeof name, "random %s %s", s->name, tname);
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.file_type", file_type);
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    gguf_writer_add_u32(w, K("context_length"), s->n_ctx);
    gguf_writer_add_u32(w, K("embedding_length"), s->n_embd);
    gguf_writer_add_u32(w, K("block_count"), n_layer);
    gguf_writer_add_u32(w, K("feed_forward_length"), s->n_ff);
    gguf_writer_add_u32(w, K("attention.head_count"), s->n_head);
    gguf_writer_add_u32(w, K("attention.head_count_kv"), s->n_head_kv);
    gguf_writer_add_f32(w, K("attention.layer_norm_rms_epsilon"), s->eps);
    gguf_writer_add_f32(w, K("rope.freq_base"), s->theta);
    gguf_writer_add_u32(w, K("rope.dimension_count"), s->head_dim);
    if (is_qwen3(s)) { /* qwen2 and llama files carry none: head_dim is n_embd / n_head there */
        gguf_writer_add_u32(w, K("attention.key_length"), s->head_dim);
        gguf_writer_add_u32(w, K("attention.value_length"), s->head_dim);
    }
    if (s->n_expert) {
        gguf_writer_add_u32(w, K("expert_count"), s->n_expert);
        gguf_writer_add_u32(w, K("expert_used_count"), s->n_expert_used);
        gguf_writer_add_u32(w, K("expert_feed_forward_length"), s->n_ff_exp);
    }
#undef K
    /* tokenizer: 256 byte tokens, <|endoftext|> (CONTROL, eos), then [PAD<i>] (UNUSED) up to n_vocab */
    uint32_t eos = 256;
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_begin_arr_str(w, "tokenizer.ggml.tokens", s->n_vocab);
    int32_t *tt = malloc(sizeof *tt * s->n_vocab);
    if (!tt) abort();
    for (uint32_t i = 0; i < s->n_vocab; i++) {
        char tok[32];
        int len;
        if (i < 256) { len = byte_token((int)i, tok); tt[i] = 1; }
        else if (i == eos) { len = snprintf(tok, sizeof tok, "<|endoftext|>"); tt[i] = 3; }
        else { len = snprintf(tok, sizeof tok, "[PAD%u]", i); tt[i] = 5; }
        gguf_writer_arr_str(w, tok, (uint64_t)len);
    }
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_I32, s->n_vocab, tt);
    free(tt);
    gguf_writer_begin_arr_str(w, "tokenizer.ggml.merges", 0);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", eos);
    gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", eos);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 0);
}

/* One piece of the weight stream: rows [r0, r0 + nr) of a tensor (an expert tensor's rows run expert
 * after expert), and the generator's state where the sequential walk would start it. */
typedef struct {
    const tdesc *t;
    uint64_t r0, nr, rng;
    uint8_t *buf;
} piece;

static uint64_t row_bytes_of(const tdesc *t) { return gguf_tensor_nbytes(t->type, 1, t->ne); }

static uint64_t piece_draws(const tdesc *t, uint64_t nr) {
    if (t->kind == K_MATRIX) return gguf_fill_draws(t->type, nr * t->ne[0]);
    return t->kind == K_NORM ? 0 : t->ne[0];
}

static void fill_piece(piece *p) {
    const tdesc *t = p->t;
    uint64_t rng = p->rng;
    if (t->kind == K_MATRIX) {
        gguf_fill_random(t->type, p->buf, p->nr * t->ne[0], t->ne[0], &rng);
        return;
    }
    for (uint64_t i = 0; i < t->ne[0]; i++) {
        float x = t->kind == K_NORM ? 1.0f
                : t->kind == K_BIAS ? 0.02f * gguf_rng_unif(&rng)
                                    : 1.0f + 0.25f * gguf_rng_unif(&rng);
        memcpy(p->buf + 4 * i, &x, 4);
    }
}

static void fill_pieces(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    piece *p = ctx;
    for (int64_t i = i0; i < i1; i++) fill_piece(&p[i]);
}

/* A filled batch written in order, on a thread of its own while the next batch is filled. */
typedef struct {
    gguf_writer *w;
    piece *p;
    int n, rc;
    char err[256];
} batch_write;

static void *write_batch(void *arg) {
    batch_write *b = arg;
    b->rc = 0;
    for (int i = 0; i < b->n && !b->rc; i++)
        b->rc = gguf_writer_write(b->w, b->p[i].buf, (size_t)(b->p[i].nr * row_bytes_of(b->p[i].t)), b->err,
                                  sizeof b->err);
    return NULL;
}

/* Streams every tensor's data in chunks of whole rows of at most cap bytes. A batch of chunks is
 * filled on the threads, each chunk from the state the one sequential walk reaches there
 * (gguf_rng_skip), and written in order while the next batch is filled (two batches in memory), so
 * the file is the same for every thread count. */
static int write_data(gguf_writer *w, const tdesc *t, int nt, uint64_t rng, int threads, char *err, size_t errlen) {
    size_t cap = 8u << 20, slack = 256 * 1024; /* one row past cap where a row is larger */
    int nb = threads > 32 ? 32 : threads;
    piece *p = calloc((size_t)nb * 2, sizeof *p);
    uint8_t *mem = malloc((size_t)nb * 2 * (cap + slack));
    tkv_workers *wk = workers_init(threads);
    batch_write bw = {.w = w};
    pthread_t writer;
    int rc = -1, writing = 0, ti = 0;
    uint64_t r = 0;
    if (!p || !mem || !wk) { snprintf(err, errlen, "out of memory"); goto done; }
    for (int k = 0; ti < nt; k ^= 1) {
        piece *set = p + (size_t)k * nb;
        int n = 0;
        for (; n < nb && ti < nt; n++) {
            const tdesc *d = &t[ti];
            uint64_t rb = row_bytes_of(d), rows = d->ne[1] * d->ne[2];
            uint64_t per = cap / rb ? cap / rb : 1, nr = rows - r < per ? rows - r : per;
            uint8_t *buf = mem + ((size_t)k * nb + n) * (cap + slack);
            set[n] = (piece){.t = d, .r0 = r, .nr = nr, .rng = rng, .buf = buf};
            rng = gguf_rng_skip(rng, piece_draws(d, nr));
            r += nr;
            if (r == rows) ti++, r = 0;
        }
        workers_for(wk, n, fill_pieces, set);
        if (writing && (pthread_join(writer, NULL), writing = 0, bw.rc)) goto done;
        bw.p = set, bw.n = n;
        if (pthread_create(&writer, NULL, write_batch, &bw)) { write_batch(&bw); if (bw.rc) goto done; }
        else writing = 1;
    }
    if (writing && (pthread_join(writer, NULL), writing = 0, bw.rc)) goto done;
    rc = 0;
done:
    if (writing) pthread_join(writer, NULL);
    if (rc && bw.rc) snprintf(err, errlen, "%s", bw.err);
    if (wk) workers_free(wk);
    free(mem);
    free(p);
    return rc;
}

int cmd_gen_random(int argc, char **argv) {
    const char *shape_name = NULL, *type_name = NULL, *out = NULL;
    unsigned long long seed = 1;
    long layers = -1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "gen-random: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--type")) type_name = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--seed")) {
            errno = 0;
            seed = strtoull(v, &end, 0);
            /* strtoull takes "-1" (as 2^64-1) and saturates on overflow: both are refused */
            if (!*v || *end || errno || strchr(v, '-')) { fprintf(stderr, "gen-random: bad --seed '%s' (0..2^64-1)\n", v); return 2; }
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            threads = strtol(v, &end, 10);
            if (!*v || *end || threads < 1 || threads > 256) {
                fprintf(stderr, "gen-random: bad %s '%s' (1..256)\n", a, v);
                return 2;
            }
        } else if (!strcmp(a, "--layers")) {
            layers = strtol(v, &end, 10);
            if (!*v || *end || layers < 1 || layers > 1000) { fprintf(stderr, "gen-random: bad --layers '%s'\n", v); return 2; }
        } else { fprintf(stderr, "gen-random: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (!shape_name || !type_name || !out) { fprintf(stderr, "gen-random: --shape, --type and -o are required\n"); usage(stderr); return 2; }
    const model_shape *s = shapes_find(shape_name);
    if (!s) { fprintf(stderr, "gen-random: unknown shape '%s'\n", shape_name); usage(stderr); return 2; }
    int ti = -1;
    for (size_t i = 0; i < N_TYPES; i++) if (!strcasecmp(TYPES[i].name, type_name)) ti = (int)i;
    if (ti < 0) { fprintf(stderr, "gen-random: unknown type '%s'\n", type_name); usage(stderr); return 2; }
    uint32_t n_layer = layers > 0 ? (uint32_t)layers : s->n_layer;

    char err[512];
    struct stat st;
    int existed = lstat(out, &st) == 0, opened = 0;
    FILE *fp = NULL;
    tdesc *t = NULL;
    int nt = plan(s, TYPES[ti].type, n_layer, &t, err, sizeof err);
    if (nt < 0) { fprintf(stderr, "gen-random: %s\n", err); return 1; }
    gguf_writer *w = gguf_writer_begin(0);
    add_metadata(w, s, n_layer, TYPES[ti].name, TYPES[ti].file_type);
    uint64_t total = 0;
    for (int i = 0; i < nt; i++) {
        if (gguf_writer_add_tensor(w, t[i].name, t[i].n_dims, t[i].ne, t[i].type, err, sizeof err)) goto fail;
        total += gguf_tensor_nbytes(t[i].type, t[i].n_dims, t[i].ne);
    }
    /* "x": a path that was not there is created by this run, or the run fails */
    fp = fopen(out, existed ? "wb" : "wbx");
    if (!fp) { snprintf(err, sizeof err, "cannot create '%s': %s", out, strerror(errno)); goto fail; }
    opened = 1;
    if (gguf_writer_open_stream(w, fp, err, sizeof err)) goto fail;
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    if (!rng) rng = 1;
    if (!threads) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : online > 64 ? 64 : online;
    }
    if (write_data(w, t, nt, rng, (int)threads, err, sizeof err)) goto fail;
    free(t);
    t = NULL;
    int crc = gguf_writer_close(w, err, sizeof err);
    w = NULL;
    if (fclose(fp) != 0 && crc == 0) crc = snprintf(err, sizeof err, "cannot write '%s': %s", out, strerror(errno));
    fp = NULL;
    if (crc) goto fail;
    printf("wrote %s: %s %s, %u layers, %d tensors, %.2f GiB of weights\n", out, s->name, TYPES[ti].name, n_layer, nt,
           (double)total / (1024.0 * 1024 * 1024));
    return out_finish("gen-random");
fail:
    fprintf(stderr, "gen-random: %s\n", err);
    gguf_writer_free(w);
    free(t);
    if (fp) fclose(fp);
    if (opened && !existed) {
        if (remove(out) == 0) fprintf(stderr, "gen-random: removed the incomplete %s\n", out);
    } else if (opened && S_ISREG(st.st_mode)) {
        fprintf(stderr, "gen-random: %s is incomplete (it existed before, so it was not removed)\n", out);
    }
    return 1;
}
