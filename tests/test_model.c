/* test_model.c — the forward pass against llama.cpp's logits for the fixture models (every weight
 * type, both architectures, short and long sequences) and the two real default models, plus
 * determinism across thread counts, prefill chunk sizes and multi-sequence batches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/ops.h"
#include "base/err.h"
#include "base/hugemem.h"
#include "t.h"
#include "t_engine.h"
#include "t_ref.h"

/* Tolerances on max |dlogit| per type. llama.cpp quantises activations (FORMATS.md 2.7); we
 * emulate that, so remaining differences come from float summation order, which now and then
 * flips an activation quantum, after which a sequence drifts a little. FORMATS.md section 7
 * measured, with emulation, up to F32 1.8e-5, F16 1.8e-2, BF16 0.13, Q8_0 0.51, Q6_K 0.58,
 * Q5_K_M 0.66, Q4_K_M 0.96, Q4_0 0.61 on these sharp random-weight models (logits up to ~40); we
 * measured at most 2.8e-5, 1.9e-2, 0.16, 0.39, 0.65, 0.64, 0.79, 0.61 (AVX2 and generic kernels).
 * Each max bound is about 1.5x the larger of the two, and well under the distance between the
 * type's own reference and the F32 reference (1.0 for Q8_0 up to 12 for Q4_0), so a wrong
 * dequantisation or kernel fails. The RMS bound is a quarter of the max bound: a flip moves some
 * rows, a wrong kernel moves every logit of every row (measured rms here: at most 0.134).
 *
 * The references used an f32 KV cache. With an f16 cache (--kv-type f16) K and V are rounded to
 * fp16 (relative 2^-11) before attention, which moves the logits of these sharp models by itself:
 * measured (both archs, short and long) max 0.013 / rms 0.0022 on F32 weights, and with quantised
 * weights, where the perturbation also flips activation quanta, at most 0.030 (F16), 0.21 (BF16),
 * 0.82 (Q8_0), 1.08 (Q6_K), 1.12 (Q5_K_M), 0.97 (Q4_K_M), 0.80 (Q4_0), rms at most 0.21. The f16
 * bounds are about 1.5x those; the F32 row (0.02) is the one that pins the f16 attention path, since
 * a wrong fp16 kernel moves logits by O(1). */
static const struct { const char *type; double max_tol, rms_tol, max_tol16, rms_tol16; } tols[] = {
    {"F32", 1e-4, 2.5e-5, 0.02, 0.005}, {"F16", 0.03, 0.0075, 0.05, 0.012}, {"BF16", 0.25, 0.0625, 0.32, 0.08},
    {"Q8_0", 0.8, 0.2, 1.25, 0.3}, {"Q6_K", 1.0, 0.25, 1.6, 0.32}, {"Q5_K_M", 1.0, 0.25, 1.7, 0.32},
    {"Q4_K_M", 1.5, 0.375, 1.5, 0.375}, {"Q4_0", 1.0, 0.25, 1.2, 0.3},
};

static void fixture_case(const char *arch, int ti, const char *seq) {
    char model[256], json[256], lg[256];
    snprintf(model, sizeof model, "fixtures/models/%s-%s.gguf", arch, tols[ti].type);
    snprintf(json, sizeof json, "fixtures/models/%s-%s.%s.json", arch, tols[ti].type, seq);
    snprintf(lg, sizeof lg, "fixtures/models/%s-%s.%s.logits.f32", arch, tols[ti].type, seq);
    NEED(model);
    NEED(json);
    NEED(lg);
    ref_data r;
    CHECKF(load_ref(t_shared(json), t_shared(lg), &r) == 0, "cannot load %s", json);
    if (!r.logits) return;
    /* both KV element types: f32 (the default) and f16 (llama.cpp's default cache type) */
    for (int f16 = 0; f16 < 2; f16++) {
        cmp_stats s;
        double max_tol = f16 ? tols[ti].max_tol16 : tols[ti].max_tol, rms_tol = f16 ? tols[ti].rms_tol16 : tols[ti].rms_tol;
        int rc = run_compare(t_shared(model), &r, max_tol, 2, f16, &s);
        CHECKF(rc == 0, "%s: run failed", model);
        const char *kt = f16 ? "f16" : "f32";
        printf("    %-6s %-7s %-5s kv %s rows %3d  max|d| %.2e  rms %.2e  top1 %d/%d\n", arch, tols[ti].type, seq, kt, s.rows,
               s.max_diff, s.rms, s.top1_checked - s.top1_mismatch, s.top1_checked);
        CHECKF(s.rows == r.rows, "%s %s kv %s: compared %d rows of %d", model, seq, kt, s.rows, r.rows);
        CHECKF(s.max_diff <= max_tol, "%s %s kv %s: max |dlogit| %.3g > %.3g", model, seq, kt, s.max_diff, max_tol);
        CHECKF(s.rms <= rms_tol, "%s %s kv %s: rms %.3g > %.3g", model, seq, kt, s.rms, rms_tol);
        CHECKF(s.top1_mismatch == 0, "%s %s kv %s: %d top-1 mismatches", model, seq, kt, s.top1_mismatch);
    }
    free_ref(&r);
}

TEST(model_fixture_logits_qwen2) {
    for (int ti = 0; ti < (int)(sizeof tols / sizeof tols[0]); ti++) {
        fixture_case("qwen2", ti, "short");
        fixture_case("qwen2", ti, "long");
    }
}

TEST(model_fixture_logits_llama) {
    for (int ti = 0; ti < (int)(sizeof tols / sizeof tols[0]); ti++) {
        fixture_case("llama", ti, "short");
        fixture_case("llama", ti, "long");
    }
}

static void real_case(const char *file, const char *prefix) {
    char json[256], lg[256];
    snprintf(json, sizeof json, "fixtures/real/%s.json", prefix);
    snprintf(lg, sizeof lg, "fixtures/real/%s.logits.f32", prefix);
    NEED(json);
    NEED(lg);
    const char *path = t_need_model(file);
    if (!path) return;
    ref_data r;
    CHECKF(load_ref(t_shared(json), t_shared(lg), &r) == 0, "cannot load %s", json);
    if (!r.logits) return;
    /* Real Q4_K_M models have smoother logits than the random fixtures; we measured max 0.50 / 0.65
     * and rms 0.079 / 0.096 (0.5B / 1.5B); with an f16 cache 0.47 / 0.66 and 0.080 / 0.095. Bounds:
     * 1.0 max, 0.2 rms, for both KV element types. */
    for (int f16 = 0; f16 < 2; f16++) {
        cmp_stats s;
        CHECK(run_compare(path, &r, 1.0, 2, f16, &s) == 0);
        printf("    %-28s kv %s rows %3d  max|d| %.2e  rms %.2e  top1 %d/%d\n", prefix, f16 ? "f16" : "f32", s.rows, s.max_diff,
               s.rms, s.top1_checked - s.top1_mismatch, s.top1_checked);
        CHECK(s.rows == r.rows);
        CHECKF(s.max_diff <= 1.0, "max |dlogit| %.3g", s.max_diff);
        CHECKF(s.rms <= 0.2, "rms %.3g", s.rms);
        CHECKF(s.top1_mismatch == 0, "%d top-1 mismatches", s.top1_mismatch);
    }
    free_ref(&r);
}

TEST(model_real_logits_0_5b) { real_case("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf", "qwen2.5-coder-0.5b.chat"); }
TEST(model_real_logits_1_5b) { real_case("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b.chat"); }

/* Greedy ids for a prompt: prefill in chunks of `batch`, decode n steps on `threads` threads. */
static int greedy_run(const char *model, const int32_t *prompt, int np, int n, int threads, int batch, int isa, int mmap_w,
                      int32_t *out) {
    te_options o;
    te_options_default(&o);
    o.mmap_weights = mmap_w;
    o.n_threads = threads;
    o.max_batch = batch;
    o.n_ctx = np + n + 1;
    o.isa = isa;
    char err[512];
    te_engine *e;
    if (te_open(model, &o, &e, err, sizeof err)) return -1;
    int V = te_n_vocab(e);
    float *lg = malloc((size_t)V * sizeof(float));
    int rc = te_prefill(e, 0, prompt, np, lg, 0, err, sizeof err);
    for (int i = 0; i < n && rc == 0; i++) {
        int best = 0;
        for (int k = 1; k < V; k++) if (lg[k] > lg[best]) best = k;
        out[i] = best;
        int seq = 0;
        rc = te_decode(e, &seq, &out[i], 1, lg, err, sizeof err);
    }
    free(lg);
    te_close(e);
    return rc;
}

TEST(model_greedy_deterministic_threads_batches) {
    NEED("fixtures/models/qwen2-Q4_K_M.gguf");
    const char *model = t_shared("fixtures/models/qwen2-Q4_K_M.gguf");
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (i * 37 + 11) % 1024;
    int32_t a[32], b[32], c[32], d[32];
    REQUIRE(greedy_run(model, prompt, 40, 32, 1, 64, -1, 0, a) == 0);
    REQUIRE(greedy_run(model, prompt, 40, 32, 2, 64, -1, 0, b) == 0);
    REQUIRE(greedy_run(model, prompt, 40, 32, 2, 7, -1, 0, c) == 0);
    REQUIRE(greedy_run(model, prompt, 40, 32, 3, 1, -1, 0, d) == 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) == 0);
    CHECK(memcmp(a, d, sizeof a) == 0);
    /* the same run twice */
    REQUIRE(greedy_run(model, prompt, 40, 32, 2, 64, -1, 0, d) == 0);
    CHECK(memcmp(a, d, sizeof a) == 0);
    /* weights mapped from the file instead of copied into huge-page memory */
    REQUIRE(greedy_run(model, prompt, 40, 32, 2, 64, -1, 1, d) == 0);
    CHECK(memcmp(a, d, sizeof a) == 0);
}

/* Q4_K matrices reordered at load (Q4_KX, the default) give the file layout's logits bit for bit
 * with the generic kernels (whose f32 steps are the same for both layouts), and within float
 * summation noise with this CPU's kernels. */
static int prompt_logits(const char *model, int isa, int keep_layout, const int32_t *prompt, int np, float **out) {
    te_options o;
    te_options_default(&o);
    o.isa = isa;
    o.keep_layout = keep_layout;
    o.n_ctx = np + 1;
    o.max_batch = 8;
    char err[512];
    te_engine *e;
    if (te_open(model, &o, &e, err, sizeof err)) return -1;
    int V = te_n_vocab(e);
    *out = malloc((size_t)V * np * sizeof(float));
    int rc = te_prefill(e, 0, prompt, np, *out, 1, err, sizeof err);
    te_close(e);
    return rc ? -1 : V;
}

TEST(model_repacked_layout_same_logits) {
    NEED("fixtures/models/qwen2-Q4_K_M.gguf");
    const char *model = t_shared("fixtures/models/qwen2-Q4_K_M.gguf");
    int32_t prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (i * 59 + 3) % 1024;
    float *g = NULL, *gx = NULL, *f = NULL, *fx = NULL;
    int V = prompt_logits(model, 0, 1, prompt, 12, &g);
    REQUIRE(V > 0 && prompt_logits(model, 0, 0, prompt, 12, &gx) == V);
    size_t n = (size_t)V * 12;
    CHECK(memcmp(g, gx, n * sizeof(float)) == 0);
    if (cpu_detect_isa() != CPU_ISA_GENERIC) {
        REQUIRE(prompt_logits(model, -1, 1, prompt, 12, &f) == V && prompt_logits(model, -1, 0, prompt, 12, &fx) == V);
        double d_file = 0, d_x = 0;
        for (size_t i = 0; i < n; i++) {
            d_file = fmax(d_file, fabs((double)f[i] - g[i]));
            d_x = fmax(d_x, fabs((double)fx[i] - g[i]));
        }
        printf("    %s against generic: file layout max |d| %.3g, Q4_KX %.3g\n", cpu_isa_name(cpu_detect_isa()), d_file, d_x);
        CHECKF(d_x <= 2 * d_file + 1e-3, "Q4_KX %.3g, file layout %.3g", d_x, d_file);
    }
    free(g); free(gx); free(f); free(fx);
}

/* Decoding two sequences in one batch gives each the logits it gets alone. */
TEST(model_multi_sequence_batch_matches_single) {
    NEED("fixtures/models/llama-Q8_0.gguf");
    const char *model = t_shared("fixtures/models/llama-Q8_0.gguf");
    te_options o;
    te_options_default(&o);
    o.n_seq = 2;
    o.n_ctx = 64;
    char err[512];
    te_engine *e;
    REQUIRE(te_open(model, &o, &e, err, sizeof err) == 0);
    int V = te_n_vocab(e);
    int32_t p0[10], p1[13];
    for (int i = 0; i < 10; i++) p0[i] = (i * 91 + 5) % V;
    for (int i = 0; i < 13; i++) p1[i] = (i * 53 + 17) % V;
    float *l0 = malloc((size_t)V * 4), *l1 = malloc((size_t)V * 4), *both = malloc((size_t)2 * V * 4);
    REQUIRE(te_prefill(e, 0, p0, 10, l0, 0, err, sizeof err) == 0);
    REQUIRE(te_prefill(e, 1, p1, 13, l1, 0, err, sizeof err) == 0);
    float *alone0 = malloc((size_t)8 * V * 4), *alone1 = malloc((size_t)8 * V * 4);
    int32_t t0 = 3, t1 = 7;
    int seqs[2] = {0, 1};
    for (int s = 0; s < 8; s++) {
        int32_t toks[2] = {t0 + s, t1 + s};
        REQUIRE(te_decode(e, seqs, toks, 2, both, err, sizeof err) == 0);
        memcpy(alone0 + (size_t)s * V, both, (size_t)V * 4);
        memcpy(alone1 + (size_t)s * V, both + V, (size_t)V * 4);
    }
    te_close(e);
    /* now each alone */
    o.n_seq = 1;
    for (int which = 0; which < 2; which++) {
        REQUIRE(te_open(model, &o, &e, err, sizeof err) == 0);
        REQUIRE(te_prefill(e, 0, which ? p1 : p0, which ? 13 : 10, l0, 0, err, sizeof err) == 0);
        for (int s = 0; s < 8; s++) {
            int32_t tok = (which ? t1 : t0) + s;
            int seq = 0;
            REQUIRE(te_decode(e, &seq, &tok, 1, l0, err, sizeof err) == 0);
            CHECK(memcmp(l0, (which ? alone1 : alone0) + (size_t)s * V, (size_t)V * 4) == 0);
        }
        te_close(e);
    }
    free(l0); free(l1); free(both); free(alone0); free(alone1);
}

TEST(model_bad_inputs_error_cleanly) {
    NEED("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf");
    NEED("fixtures/models/qwen2-Q8_0.gguf");
    te_options o;
    te_options_default(&o);
    char err[512];
    te_engine *e;
    CHECK(te_open("/nonexistent/model.gguf", &o, &e, err, sizeof err) != 0);
    CHECK(strstr(err, "nonexistent") != NULL);
    /* a vocab-only file has no tensors: the binder lists what is missing */
    CHECK(te_open(t_shared("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"), &o, &e, err, sizeof err) != 0);
    CHECKF(strstr(err, "missing") && strstr(err, "token_embd.weight"), "got: %s", err);
    o.n_ctx = 16;
    REQUIRE(te_open(t_shared("fixtures/models/qwen2-Q8_0.gguf"), &o, &e, err, sizeof err) == 0);
    int32_t toks[20] = {0};
    CHECK(te_prefill(e, 0, toks, 20, NULL, 0, err, sizeof err) != 0); /* does not fit */
    toks[0] = 5000;
    CHECK(te_prefill(e, 0, toks, 1, NULL, 0, err, sizeof err) != 0); /* bad id */
    CHECK(strstr(err, "5000") != NULL);
    CHECK(te_prefill(e, 3, toks, 1, NULL, 0, err, sizeof err) != 0); /* bad sequence */
    te_close(e);
}

/* Where the weights are read from at load: the CPU backend, which runs them from host memory, gets
 * them copied into huge pages when the kernel allows those (and maps the file with --mmap); a
 * backend with memory of its own (cpu-async here, as the GPU's) maps the file, since it reads it
 * once to prepare its copy. Without transparent huge pages the CPU backend maps too, and the
 * cpu-async case can no longer tell the two apart: the check says so. */
TEST(model_weights_mapped_for_own_memory) {
    const char *path = t_gen_model("test-qwen3", "F16");
    REQUIRE(path);
    char err[512];
    static const struct { const char *backend; int mmap, copied; } C[] = {
        {"cpu", 0, 1}, {"cpu", 1, 0}, {"cpu-async", 0, 0}};
    int huge = tkv_huge_allowed();
    if (!huge) fprintf(stderr, "    no transparent huge pages here: every load maps the file\n");
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        tkv_model_params p;
        tkv_model_params_default(&p);
        p.backend = C[i].backend, p.mmap_weights = C[i].mmap;
        tkv_model *m = NULL;
        int rc = tkv_model_open(path, &p, &m, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", C[i].backend, err);
        if (rc) continue;
        tkv_model_info info;
        tkv_model_get_info(m, &info);
        CHECKF(info.weights_copied == (C[i].copied && huge), "%s mmap %d: copied %d", C[i].backend, C[i].mmap,
               info.weights_copied);
        tkv_model_close(m);
    }
}

/* `tierkv bench --json` opens with a load row: how long the model and the session took, and whether
 * the weights were copied (the default on the CPU where huge pages are allowed) or mapped (--mmap) */
TEST(model_bench_reports_load) {
    const char *path = t_shared("fixtures/models/qwen2-Q8_0.gguf");
    if (access(path, R_OK)) SKIP("fixture model missing");
    const char *flags[] = {"", "--mmap"};
    for (int k = 0; k < 2; k++) {
        char cmd[2048], out[600];
        snprintf(out, sizeof out, "%s/bench-load.jsonl", t_tmpdir());
        snprintf(cmd, sizeof cmd, "%s bench -m %s -p 4 -n 2 -d 0 --reps 1 -t 1 --json %s > %s 2>&1", t_bin(), path,
                 flags[k], out);
        REQUIRE(system(cmd) == 0);
        char *o = t_slurp(out);
        REQUIRE(o);
        char want[64];
        snprintf(want, sizeof want, "\"weights_copied\":%d", k == 0 && tkv_huge_allowed());
        double ms = -1, ss = -1;
        const char *p = strstr(o, "\"model_s\":"), *q = strstr(o, "\"session_s\":");
        if (p) ms = atof(p + 10);
        if (q) ss = atof(q + 12);
        CHECKF(!strncmp(o, "{\"test\":\"load\"", 14) && strstr(o, want) && ms >= 0 && ss >= 0 &&
                   strstr(o, "\"tok_per_s\""),
               "bench %s: %s", flags[k], o);
        free(o);
    }
}
