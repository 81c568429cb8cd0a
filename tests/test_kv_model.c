/* test_kv_model.c — the memory hierarchy and the eviction baselines driven by the real forward pass
 * (fixture models, and the cached real models when TIERKV_SLOW_TESTS=1).
 *
 * Every test runs a reference engine (policy full) and candidate engines in lockstep on the same
 * prompt: each engine decodes greedily on its own logits, and every step's logits row is compared
 * with memcmp against the reference (the lossless tiers must not change a bit). Per-step checks go
 * through the KV introspection (kv_check, kv_token_tier, kv_view_layer).
 *
 * Fixture models are tiny (2 layers, hundreds of tok/s on one thread), so they run on one thread
 * each; the whole file takes a few seconds there. The real-model test (kv_model_real_*) needs
 * TIERKV_SLOW_TESTS=1 (the CI script sets it) and the files in ~/.cache/tierkv/models (or
 * $TIERKV_HOME/models); it skips otherwise. On 2 cores the 1.5B decodes a few tok/s, so the long
 * run (512 steps, full + two hierarchy settings in lockstep) uses the 0.5B file and the 1.5B gets a
 * 128-step run (full + one): both models' shapes and kernels are covered, about 2.5 minutes on two
 * idle cores (310 s measured while another test suite shared them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv.h"
#include "model/model.h"
#include "t.h"
#include "t_engine.h"
#include "t_ref.h"

#define QWEN2 "fixtures/models/qwen2-Q4_K_M.gguf"
#define LLAMA "fixtures/models/llama-Q8_0.gguf"

typedef struct {
    const char *name;
    kv_options kv;    /* policy and budgets (the engine fills the shape) */
    int no_compare;   /* 1: logits may differ (budgets that evict); first_diff is still recorded */
    te_engine *e;
    float *lg;
    int first_diff;   /* first logits row that differed from the reference, -1 none */
    int bad;          /* per-step check failures (the first message is printed) */
    kv_stats st;      /* at the end, after kv_sync */
    int64_t token_bytes; /* T0 bytes of one token (set by the baseline check) */
    int np;
} cand;

/* Called after every decode step of a candidate (step 0..n_gen-1). */
typedef void (*check_fn)(cand *c, int step);

static void cand_init(cand *c, const char *name, kv_policy_kind p, double ratio, int delta) {
    memset(c, 0, sizeof *c);
    c->name = name;
    kv_options_default(&c->kv);
    c->kv.policy = p;
    c->kv.t0_ratio = ratio;
    c->kv.delta = delta;
    c->first_diff = -1;
}

static void bad(cand *c, int step, const char *what) {
    if (c->bad++ == 0) fprintf(stderr, "    %s: step %d: %s\n", c->name, step, what);
}

static void prompt_ids(int32_t *p, int n, int vocab) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)(((int64_t)i * 7919 + 13) % vocab);
}

/* A reference (ref_kv, or policy full when NULL) plus k candidates in lockstep; returns -1 (with a
 * failed check) if an engine fails. */
static int lockstep_with(const char *model, int threads, int np, int n_gen, const kv_options *ref_kv, cand *c, int k,
                         check_fn fn) {
    char err[512];
    te_options o;
    te_options_default(&o);
    o.n_threads = threads;
    o.n_ctx = np + n_gen + 1;
    if (ref_kv) o.kv = *ref_kv;
    o.kv.f16 = k > 0 ? c[0].kv.f16 : 0; /* the reference stores the candidates' element type */
    for (int i = 1; i < k; i++)
        if (c[i].kv.f16 != o.kv.f16) {
            CHECK(!"lockstep candidates must share one KV element type");
            return -1;
        }
    te_engine *ref;
    if (te_open(model, &o, &ref, err, sizeof err)) {
        fprintf(stderr, "    open %s: %s\n", model, err);
        CHECK(!"engine open");
        return -1;
    }
    int V = te_n_vocab(ref), rc = 0;
    int32_t *prompt = malloc((size_t)np * sizeof *prompt);
    prompt_ids(prompt, np, V < 50000 ? V : 50000);
    float *lg = malloc((size_t)V * sizeof(float));
    for (int i = 0; i < k; i++) {
        te_options oc = o;
        oc.kv = c[i].kv;
        c[i].np = np;
        c[i].lg = malloc((size_t)V * sizeof(float));
        if (te_open(model, &oc, &c[i].e, err, sizeof err)) {
            fprintf(stderr, "    open %s: %s\n", c[i].name, err);
            CHECK(!"candidate engine open");
            rc = -1;
            k = i;
            goto done;
        }
    }
    if (te_prefill(ref, 0, prompt, np, lg, 0, err, sizeof err)) goto fail;
    for (int i = 0; i < k; i++) {
        if (te_prefill(c[i].e, 0, prompt, np, c[i].lg, 0, err, sizeof err)) goto fail;
        if (memcmp(lg, c[i].lg, (size_t)V * sizeof(float)) && c[i].first_diff < 0) c[i].first_diff = 0;
    }
    for (int s = 0; s < n_gen; s++) {
        int32_t tok = tkv_argmax(lg, V);
        int seq = 0;
        if (te_decode(ref, &seq, &tok, 1, lg, err, sizeof err)) goto fail;
        for (int i = 0; i < k; i++) {
            int32_t t = tkv_argmax(c[i].lg, V);
            if (te_decode(c[i].e, &seq, &t, 1, c[i].lg, err, sizeof err)) goto fail;
            if (c[i].first_diff < 0 && memcmp(lg, c[i].lg, (size_t)V * sizeof(float)))
                c[i].first_diff = s + 1;
            if (fn) fn(&c[i], s);
        }
    }
    goto done;
fail:
    fprintf(stderr, "    %s\n", err);
    CHECK(!"prefill/decode failed");
    rc = -1;
done:
    for (int i = 0; i < k; i++) {
        kv_cache *kv = te_kv(c[i].e);
        kv_sync(kv);
        kv_get_stats(kv, -1, &c[i].st);
        if (kv_check(kv, err, sizeof err)) bad(&c[i], n_gen, err);
        te_close(c[i].e);
        free(c[i].lg);
    }
    te_close(ref);
    free(lg);
    free(prompt);
    return rc;
}

static int lockstep(const char *model, int threads, int np, int n_gen, cand *c, int k, check_fn fn) {
    return lockstep_with(model, threads, np, n_gen, NULL, c, k, fn);
}

static const model_config *cfg_of(cand *c) { return &te_model(c->e)->cfg; }

/* ---- the hierarchy: lossless tiers are bit-exact ---- */

/* kv_check (slots, T0 within its budget, protected tokens in T0) and, independently, the protected
 * positions through kv_token_tier; an unpinned prompt (kv.unpin_prompt) in T0 or T1. */
static void check_hierarchy(cand *c, int step) {
    kv_cache *kv = te_kv(c->e);
    char err[256];
    if (kv_check(kv, err, sizeof err)) bad(c, step, err);
    int len = kv_seq_len(kv, 0), w = c->kv.window > 1 ? c->kv.window : 1;
    for (int p = 0; p < len; p++) {
        int prot = (p < c->np && !c->kv.unpin_prompt) || p < c->kv.sinks || p >= len - w, t = kv_token_tier(kv, 0, p);
        if ((prot && t != 0) || (p < c->np && t > 1)) {
            snprintf(err, sizeof err, "%s position %d in T%d", prot ? "protected" : "prompt", p, t);
            bad(c, step, err);
        }
    }
}

/* 512 greedy steps after a 64-token prompt, T0 at 10/30/50/70% of the length, re-tiering every
 * 1, 7 or 64 steps, no T2 and no eviction (T1 takes the rest). The window is 16 so that T0 has room
 * for unprotected tokens and re-tierings move tokens both ways. */
static void hierarchy_grid_at(const char *path) {
    static const double ratios[] = {0.1, 0.3, 0.5, 0.7};
    static const int deltas[] = {1, 7, 64};
    enum { NP = 64, NG = 512, K = 12 };
    cand c[K];
    char names[K][48];
    for (int r = 0; r < 4; r++)
        for (int d = 0; d < 3; d++) {
            int i = r * 3 + d;
            snprintf(names[i], sizeof names[i], "hierarchy %.0f%% delta %d", ratios[r] * 100, deltas[d]);
            cand_init(&c[i], names[i], KV_POLICY_HIERARCHY, ratios[r], deltas[d]);
            c[i].kv.window = 16;
        }
    REQUIRE(path && lockstep(path, 1, NP, NG, c, K, check_hierarchy) == 0);
    for (int i = 0; i < K; i++) {
        const kv_stats *s = &c[i].st;
        if (i == 0) printf("    %s\n", path);
        printf("    %-26s down %7.1f KiB up %7.1f KiB retiers %3lld peak T0 %6.1f KiB budget %6.1f KiB\n", c[i].name,
               s->bytes_moved_down / 1024.0, s->bytes_moved_up / 1024.0, (long long)s->retiers, s->peak_t0_bytes / 1024.0,
               s->t0_budget_bytes / 1024.0);
        CHECKF(c[i].first_diff < 0, "%s: logits differ from full at step %d", c[i].name, c[i].first_diff);
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECKF(s->peak_t0_bytes <= s->t0_budget_bytes, "%s: peak T0 %lld > budget %lld", c[i].name,
               (long long)s->peak_t0_bytes, (long long)s->t0_budget_bytes);
        CHECKF(s->bytes_moved_down > 0, "%s: nothing moved down", c[i].name);
        /* at 10% the budget is raised to the protected tokens: no room for a promotion */
        if (ratios[i / 3] >= 0.3) CHECKF(s->bytes_moved_up > 0, "%s: nothing moved up", c[i].name);
        CHECK(s->tokens[2] == 0 && s->tokens[3] == 0);
    }
}

static void hierarchy_grid(const char *model) {
    NEED(model);
    hierarchy_grid_at(t_shared(model));
}

TEST(kv_model_hierarchy_bit_exact_qwen2) { hierarchy_grid(QWEN2); }
TEST(kv_model_hierarchy_bit_exact_llama) { hierarchy_grid(LLAMA); }
/* Qwen3's per-head q/k norm and its expert FFN change nothing of the KV module's: the same grid */
TEST(kv_model_hierarchy_bit_exact_qwen3) { hierarchy_grid_at(t_gen_model("test-qwen3", "Q4_K_M")); }
TEST(kv_model_hierarchy_bit_exact_qwen3moe) { hierarchy_grid_at(t_gen_model("test-qwen3moe", "Q4_K_M")); }

/* The staged path (T1 rows copied into staging) and synchronous transfers, alone and together. */
TEST(kv_model_hierarchy_staged_and_sync) {
    cand c[3];
    cand_init(&c[0], "staged", KV_POLICY_HIERARCHY, 0.5, 7);
    c[0].kv.staged = 1;
    cand_init(&c[1], "sync", KV_POLICY_HIERARCHY, 0.3, 1);
    c[1].kv.sync_transfers = 1;
    cand_init(&c[2], "staged+sync", KV_POLICY_HIERARCHY, 0.5, 64);
    c[2].kv.staged = c[2].kv.sync_transfers = 1;
    for (int i = 0; i < 3; i++) c[i].kv.window = 16;
    NEED(QWEN2);
    REQUIRE(lockstep(t_shared(QWEN2), 1, 96, 300, c, 3, check_hierarchy) == 0);
    for (int i = 0; i < 3; i++) {
        CHECKF(c[i].first_diff < 0, "%s: logits differ from full at step %d", c[i].name, c[i].first_diff);
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECK(c[i].st.bytes_moved_down > 0 && c[i].st.bytes_moved_up > 0);
        CHECK(!c[i].kv.staged || c[i].st.bytes_staged > 0);
    }
}

/* An f32 cache (--kv-type f32; the tests above use the default f16): every T0 share, re-tiering
 * period, staging and synchronous transfers give the full f32 cache's logits bit for bit, on both
 * architectures. */
static void hierarchy_f32(const char *model) {
    cand c[4];
    cand_init(&c[0], "f32 hierarchy 30% delta 7", KV_POLICY_HIERARCHY, 0.3, 7);
    cand_init(&c[1], "f32 hierarchy 50% delta 64 staged", KV_POLICY_HIERARCHY, 0.5, 64);
    c[1].kv.staged = 1;
    cand_init(&c[2], "f32 hierarchy 10% delta 1 sync", KV_POLICY_HIERARCHY, 0.1, 1);
    c[2].kv.sync_transfers = 1;
    cand_init(&c[3], "f32 hierarchy 70% delta 3", KV_POLICY_HIERARCHY, 0.7, 3);
    for (int i = 0; i < 4; i++) c[i].kv.window = 16, c[i].kv.f16 = 0;
    NEED(model);
    REQUIRE(lockstep(t_shared(model), 1, 64, 300, c, 4, check_hierarchy) == 0);
    for (int i = 0; i < 4; i++) {
        CHECKF(c[i].first_diff < 0, "%s: logits differ from full f32 at step %d", c[i].name, c[i].first_diff);
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECK(c[i].st.bytes_moved_down > 0 && c[i].st.tokens[2] == 0 && c[i].st.tokens[3] == 0);
        CHECK(!c[i].kv.staged || c[i].st.bytes_staged > 0);
    }
}
TEST(kv_model_hierarchy_f32_bit_exact_qwen2) { hierarchy_f32(QWEN2); }
TEST(kv_model_hierarchy_f32_bit_exact_llama) { hierarchy_f32(LLAMA); }

/* The T0 share does not change what the hierarchy evicts: at 10% eviction (window 16, re-tiering
 * every 7 steps) T0 at 10%, 30% or 20 tokens, the prompt pinned in T0 or not (--unpin-prompt: the
 * prompt competes for T0 and waits in T1), all give the logits of T0 at 50% with the prompt pinned,
 * bit for bit, while evicting. Unpinned at 10% and at 20 tokens, T0 really holds less than the prompt
 * (64 tokens) and part of the prompt sits in T1; it is never evicted (check_hierarchy, kv_check). */
static int t0_min_seen[5];
static void check_t0_min(cand *c, int step) {
    check_hierarchy(c, step);
    kv_stats st;
    kv_get_stats(te_kv(c->e), 0, &st);
    int *m = &t0_min_seen[c->name[0] - '0'];
    if (step > 0 && (*m == 0 || st.tokens[0] < *m)) *m = (int)st.tokens[0];
}

TEST(kv_model_t0_share_does_not_change_eviction) {
    enum { NP = 64, NG = 300, K = 5 };
    static const struct { const char *name; double ratio; int tokens, unpin; } cfg[K] = {
        {"0 pinned, T0 10%", 0.1, 0, 0},     {"1 pinned, T0 30%", 0.3, 0, 0},
        {"2 unpinned, T0 10%", 0.1, 0, 1},   {"3 unpinned, T0 30%", 0.3, 0, 1},
        {"4 unpinned, T0 20 tokens", -1, 20, 1},
    };
    kv_options ref;
    kv_options_default(&ref);
    ref.policy = KV_POLICY_HIERARCHY, ref.t0_ratio = 0.5, ref.evict_ratio = 0.1, ref.delta = 7, ref.window = 16;
    cand c[K];
    for (int i = 0; i < K; i++) {
        cand_init(&c[i], cfg[i].name, KV_POLICY_HIERARCHY, cfg[i].ratio, 7);
        c[i].kv.evict_ratio = 0.1, c[i].kv.window = 16, c[i].kv.t0_tokens = cfg[i].tokens;
        c[i].kv.unpin_prompt = cfg[i].unpin;
        t0_min_seen[i] = 0;
    }
    NEED(QWEN2);
    REQUIRE(lockstep_with(t_shared(QWEN2), 1, NP, NG, &ref, c, K, check_t0_min) == 0);
    for (int i = 0; i < K; i++) {
        const kv_stats *s = &c[i].st;
        printf("    %-26s T0 %4lld T1 %4lld evicted %4lld, least T0 held %d, moved up %lld KiB\n", c[i].name,
               (long long)s->tokens[0], (long long)s->tokens[1], (long long)s->tokens[3], t0_min_seen[i],
               (long long)(s->bytes_moved_up / 1024));
        CHECKF(c[i].first_diff < 0, "%s: logits differ from T0 50%% at step %d", c[i].name, c[i].first_diff);
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECKF(s->tokens[3] >= (NP + NG) / 10 - 1, "%s: %lld evicted", c[i].name, (long long)s->tokens[3]);
    }
    /* pinned, T0 never holds less than the prompt; unpinned at 10% and 20 tokens it does */
    CHECK(t0_min_seen[0] >= NP && t0_min_seen[1] >= NP);
    CHECKF(t0_min_seen[2] < NP && t0_min_seen[4] <= 20 + 1, "least T0 held: %d and %d", t0_min_seen[2], t0_min_seen[4]);
}

/* An absolute T0 budget (--hbm-budget): T0 never holds more bytes than it, at any step. */
TEST(kv_model_t0_within_byte_budget) {
    cand c[1];
    cand_init(&c[0], "hierarchy 160 tokens", KV_POLICY_HIERARCHY, -1, 16);
    c[0].kv.window = 16;
    /* qwen2 fixture, f32 cache: 2 layers x 2 kv heads x 64 head dim x K,V x 4 bytes = 2048 bytes per token */
    c[0].kv.f16 = 0;
    c[0].kv.t0_budget_bytes = 160 * 2048;
    NEED(QWEN2);
    REQUIRE(lockstep(t_shared(QWEN2), 1, 64, 300, c, 1, check_hierarchy) == 0);
    CHECKF(c[0].first_diff < 0, "logits differ from full at step %d", c[0].first_diff);
    CHECK(c[0].bad == 0);
    CHECK(c[0].st.t0_budget_bytes == 160 * 2048);
    CHECKF(c[0].st.peak_t0_bytes <= 160 * 2048, "peak T0 %lld", (long long)c[0].st.peak_t0_bytes);
    CHECK(c[0].st.tokens[1] > 0 && c[0].st.bytes_moved_up > 0);
}

/* A hierarchy given a T2 codec and a T2 share of 0 holds nothing in T2 and gives full's logits bit
 * for bit, whatever the codec (the centred one too: its centre is the model's K bias). */
TEST(kv_model_t2_share_zero_bit_exact) {
    static const char *const codecs[] = {"q8h", "q8bh", "q4bhc"};
    cand c[3];
    char names[3][48];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "hierarchy 30%%, T2 0%% %s", codecs[i]);
        cand_init(&c[i], names[i], KV_POLICY_HIERARCHY, 0.3, 7);
        c[i].kv.t2_ratio = 0;
        c[i].kv.window = 16;
        REQUIRE(be_kv_t2_parse(codecs[i], &c[i].kv.t2_fmt) == 0);
    }
    NEED(QWEN2);
    REQUIRE(lockstep(t_shared(QWEN2), 1, 64, 300, c, 3, check_hierarchy) == 0);
    for (int i = 0; i < 3; i++) {
        CHECKF(c[i].first_diff < 0, "%s: logits differ from full at step %d", c[i].name, c[i].first_diff);
        CHECKF(c[i].bad == 0 && c[i].st.tokens[2] == 0 && c[i].st.bytes_moved_down > 0, "%s: %d step checks failed, %lld in T2",
               c[i].name, c[i].bad, (long long)c[i].st.tokens[2]);
    }
}

/* Protected tokens (prompt, sinks, window) stay in T0 also when the rest goes to T2 (lossy, so
 * logits are not compared). */
TEST(kv_model_protected_stay_in_t0) {
    cand c[2];
    cand_init(&c[0], "hierarchy 30% + T2 30%", KV_POLICY_HIERARCHY, 0.3, 7);
    c[0].kv.t2_ratio = 0.3;
    c[0].kv.window = 16;
    c[0].no_compare = 1;
    cand_init(&c[1], "quant 20%", KV_POLICY_QUANT, 0.2, 5);
    c[1].kv.sinks = 8;
    c[1].kv.window = 32;
    c[1].no_compare = 1;
    NEED(LLAMA);
    REQUIRE(lockstep(t_shared(LLAMA), 1, 64, 300, c, 2, check_hierarchy) == 0);
    for (int i = 0; i < 2; i++) {
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECK(c[i].st.tokens[2] > 0);
    }
}

/* ---- eviction: an evicted token is never read again ---- */

static void check_evicted_not_in_view(cand *c, int step) {
    kv_cache *kv = te_kv(c->e);
    const model_config *m = cfg_of(c);
    char err[256];
    if (kv_check(kv, err, sizeof err)) bad(c, step, err);
    int len = kv_seq_len(kv, 0);
    for (int l = 0; l < m->n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, 0, l, &v);
        if (v.n != len) bad(c, step, "view length");
        for (int p = 0; p < len; p++) {
            int t3 = kv_token_tier(kv, 0, p) == 3;
            const void *kr = v.k16 ? (const void *)v.k16[p] : (const void *)v.k[p];
            const void *vr = v.k16 ? (const void *)v.v16[p] : (const void *)v.v[p];
            if (t3 != (kr == NULL) || t3 != (vr == NULL)) {
                snprintf(err, sizeof err, "layer %d position %d: tier %d but view row %p", l, p, kv_token_tier(kv, 0, p), kr);
                bad(c, step, err);
            }
        }
    }
}

static uint8_t evicted_once[4096];

/* Evictions are final: once T3, a position stays T3 (so no later view ever hands out its row). */
static void check_evict_final(cand *c, int step) {
    check_evicted_not_in_view(c, step);
    kv_cache *kv = te_kv(c->e);
    int len = kv_seq_len(kv, 0);
    for (int p = 0; p < len && p < 4096; p++) {
        int t3 = kv_token_tier(kv, 0, p) == 3;
        if (evicted_once[p] && !t3) bad(c, step, "an evicted position came back");
        evicted_once[p] |= (uint8_t)t3;
    }
}

TEST(kv_model_evicted_never_read) {
    memset(evicted_once, 0, sizeof evicted_once);
    cand c[1];
    cand_init(&c[0], "evict 50%", KV_POLICY_EVICT, 0.5, 7);
    c[0].kv.window = 16;
    c[0].no_compare = 1;
    NEED(QWEN2);
    REQUIRE(lockstep(t_shared(QWEN2), 1, 64, 300, c, 1, check_evict_final) == 0);
    CHECK(c[0].bad == 0);
    CHECK(c[0].st.tokens_evicted > 0 && c[0].st.tokens[3] > 0);
    CHECK(c[0].st.peak_t0_bytes <= c[0].st.t0_budget_bytes);
}

/* ---- the baselines ---- */

static const kv_policy_kind baselines[4] = {KV_POLICY_STREAMING, KV_POLICY_H2O, KV_POLICY_RKV, KV_POLICY_SNAPKV};

/* With --hbm-ratio 1.0 every baseline, and evict and quant, keep everything: logits bit-identical
 * to full. 300 steps after a 128-token prompt cross R-KV's compression points (n = 128, 257),
 * SnapKV's prompt end and four re-tierings (evict at 1.0 once evicted a token at the second). */
static void baselines_ratio1(const char *model) {
    cand c[6];
    for (int i = 0; i < 4; i++) cand_init(&c[i], kv_policy_name(baselines[i]), baselines[i], 1.0, 64);
    cand_init(&c[4], "evict", KV_POLICY_EVICT, 1.0, 64);
    cand_init(&c[5], "quant", KV_POLICY_QUANT, 1.0, 64);
    NEED(model);
    REQUIRE(lockstep(t_shared(model), 1, 128, 300, c, 6, check_evicted_not_in_view) == 0);
    for (int i = 0; i < 6; i++) {
        CHECKF(c[i].first_diff < 0, "%s: logits differ from full at step %d", c[i].name, c[i].first_diff);
        CHECK(c[i].bad == 0 && c[i].st.tokens_evicted == 0);
    }
}
TEST(kv_model_baselines_ratio1_bit_exact_qwen2) { baselines_ratio1(QWEN2); }
TEST(kv_model_baselines_ratio1_bit_exact_llama) { baselines_ratio1(LLAMA); }

static int half(int n) { return (int)(0.5 * n + 1e-9); }

/* The most one (layer, kv head) row may hold at length n under a 50% budget, per docs/BASELINES.md,
 * computed here independently of the adapters. */
static int rule_limit(kv_policy_kind p, int n, int np, int sinks) {
    switch (p) {
    case KV_POLICY_STREAMING: { int b = half(n); if (b < n && b <= sinks) b = sinks + 1; return b; }
    case KV_POLICY_H2O: return half(n) < 1 ? 1 : half(n);
    case KV_POLICY_RKV: { /* compressions at the prompt end, then at (n-1) % 128 == 0, n - np >= 8 */
        int nc = np;
        for (int m = np + 1; m <= n; m++)
            if ((m - 1) % 128 == 0 && m - np >= 8) nc = m;
        int b = half(nc) <= 8 ? 9 : half(nc);
        return b + (n - nc);
    }
    default: { int b = half(np) <= 32 ? 33 : half(np); return b + (n - np); } /* SnapKV: prompt only */
    }
}

static void check_baseline_budget(cand *c, int step) {
    kv_cache *kv = te_kv(c->e);
    const model_config *m = cfg_of(c);
    char err[256];
    if (kv_check(kv, err, sizeof err)) bad(c, step, err);
    int len = kv_seq_len(kv, 0), limit = rule_limit(c->kv.policy, len, c->np, c->kv.sinks);
    /* positions held by at least one row must be exactly the T0 tokens (slots freed otherwise) */
    static uint8_t any[4096];
    memset(any, 0, sizeof any);
    double dropped = 0; /* positions no longer held, summed over rows */
    for (int l = 0; l < m->n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, 0, l, &v);
        for (int g = 0; g < m->n_head_kv; g++) {
            int held = 0;
            for (int p = 0; p < v.n; p++) {
                int h = (v.k16 ? v.k16[p] != NULL : v.k[p] != NULL) && (!v.keep || v.keep[(size_t)g * v.keep_stride + p]);
                held += h;
                any[p] |= (uint8_t)h;
            }
            dropped += len - held;
            if (held > limit) {
                snprintf(err, sizeof err, "layer %d kv head %d holds %d at length %d, rule allows %d", l, g, held, len, limit);
                bad(c, step, err);
            }
        }
    }
    int n_any = 0;
    for (int p = 0; p < len; p++) n_any += any[p];
    kv_stats st;
    kv_get_stats(kv, 0, &st);
    if (st.tokens[0] != n_any) bad(c, step, "T0 tokens != positions held by some (layer, kv head)");
    if (st.limit_bytes != (int64_t)limit * kv_token_bytes(kv, 0)) bad(c, step, "stats limit_bytes != the rule");
    if (st.held_bytes > st.limit_bytes) bad(c, step, "stats held_bytes > limit_bytes");
    if (fabs(st.evicted_equiv - dropped / (m->n_layer * m->n_head_kv)) > 1e-6)
        bad(c, step, "stats evicted_equiv != positions dropped per (layer, kv head), averaged");
    c->token_bytes = kv_token_bytes(kv, 0);
}

/* Each baseline at a 50% budget for 300 generated tokens never holds more than its rule allows,
 * after every step, per (layer, kv head), and frees the slots of tokens no row holds. */
static void baselines_half(const char *model, int f16) {
    cand c[4];
    for (int i = 0; i < 4; i++) {
        cand_init(&c[i], kv_policy_name(baselines[i]), baselines[i], 0.5, 64);
        c[i].no_compare = 1;
        c[i].kv.f16 = f16;
    }
    NEED(model);
    REQUIRE(lockstep(t_shared(model), 1, 128, 300, c, 4, check_baseline_budget) == 0);
    for (int i = 0; i < 4; i++) {
        const kv_stats *s = &c[i].st;
        printf("    %-9s T0 %4lld tokens, evicted %4lld (per row %5.1f), held %7.1f KiB (peak %7.1f), budget %7.1f KiB, rule %7.1f KiB\n",
               c[i].name, (long long)s->tokens[0], (long long)s->tokens[3], s->evicted_equiv, s->held_bytes / 1024.0,
               s->peak_held_bytes / 1024.0, s->t0_budget_bytes / 1024.0, s->limit_bytes / 1024.0);
        CHECKF(c[i].bad == 0, "%s: %d step checks failed", c[i].name, c[i].bad);
        CHECKF(s->held_bytes <= s->limit_bytes && s->peak_held_bytes <= (int64_t)(128 + 300) * c[i].token_bytes,
               "%s: held %lld > rule %lld", c[i].name, (long long)s->held_bytes, (long long)s->limit_bytes);
        CHECKF(s->held_bytes < (int64_t)(128 + 300) * c[i].token_bytes, "%s: nothing dropped", c[i].name);
        /* the drops reach attention: the logits part from full's */
        CHECKF(c[i].first_diff >= 0, "%s: logits equal full's although tokens were dropped", c[i].name);
    }
    /* StreamingLLM drops whole tokens: exactly its budget is resident */
    CHECK(c[0].st.tokens[0] == half(128 + 300));
    CHECK(c[0].st.tokens[3] == 128 + 300 - half(128 + 300));
    CHECK(fabs(c[0].st.evicted_equiv - (double)(128 + 300 - half(128 + 300))) < 1e-9);
    /* H2O keeps half of every row: about half of the length is gone from each, on average */
    CHECKF(c[1].st.evicted_equiv > 0.4 * (128 + 300), "h2o evicted_equiv %.1f", c[1].st.evicted_equiv);
}
/* f16 caches (the default; R-KV reads its keys widened from fp16) and an f32 one */
TEST(kv_model_baselines_hold_budget_qwen2) { baselines_half(QWEN2, 1); }
TEST(kv_model_baselines_hold_budget_llama) { baselines_half(LLAMA, 1); }
TEST(kv_model_baselines_hold_budget_f32) { baselines_half(QWEN2, 0); }

/* An absolute budget (bytes -> tokens through kv_token_bytes): H2O holds that many per row. */
TEST(kv_model_baselines_byte_budget) {
    cand c[1];
    cand_init(&c[0], "h2o 100 tokens", KV_POLICY_H2O, -1, 64);
    c[0].kv.f16 = 1; /* 1024 bytes per token below */
    c[0].kv.t0_budget_bytes = 100 * 1024; /* qwen2 fixture, f16: 1024 bytes per token */
    c[0].no_compare = 1;
    NEED(QWEN2);
    REQUIRE(lockstep(t_shared(QWEN2), 1, 128, 100, c, 1, NULL) == 0);
    CHECK(c[0].bad == 0);
    CHECK(c[0].st.t0_budget_bytes == 100 * 1024 && c[0].st.limit_bytes == 100 * 1024);
    CHECK(c[0].st.held_bytes == 100 * 1024);
    CHECK(c[0].st.peak_held_bytes == 100 * 1024);
}

/* ---- the real models (TIERKV_SLOW_TESTS=1) ---- */

static const char *real_model(const char *file) {
    static char path[1024];
    const char *home = getenv("TIERKV_HOME");
    if (home) snprintf(path, sizeof path, "%s/models/%s", home, file);
    else snprintf(path, sizeof path, "%s/.cache/tierkv/models/%s", getenv("HOME") ? getenv("HOME") : ".", file);
    return access(path, R_OK) == 0 ? path : NULL;
}

static int slow_tests(void) {
    const char *s = getenv("TIERKV_SLOW_TESTS");
    return s && !strcmp(s, "1");
}

/* 0.5B: 512 steps, hierarchy at 30% (delta 7) and 50% (delta 64, staged); 1.5B: 128 steps at 50%,
 * delta 7. Both bit-identical to full. */
TEST(kv_model_real_hierarchy_bit_exact) {
    if (!slow_tests()) SKIP("set TIERKV_SLOW_TESTS=1 (2.5-5 minutes on 2 cores)");
    const char *m05 = real_model("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf");
    const char *m15 = real_model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    if (!m05 && !m15) SKIP("real models not cached (scripts/fetch-model.sh)");
    if (m05) {
        cand c[2];
        cand_init(&c[0], "0.5b hierarchy 30% delta 7", KV_POLICY_HIERARCHY, 0.3, 7);
        cand_init(&c[1], "0.5b hierarchy 50% delta 64 staged", KV_POLICY_HIERARCHY, 0.5, 64);
        c[1].kv.staged = 1;
        for (int i = 0; i < 2; i++) c[i].kv.window = 16;
        REQUIRE(lockstep(m05, 2, 64, 512, c, 2, check_hierarchy) == 0);
        for (int i = 0; i < 2; i++) {
            printf("    %-36s down %8.1f KiB up %8.1f KiB\n", c[i].name, c[i].st.bytes_moved_down / 1024.0,
                   c[i].st.bytes_moved_up / 1024.0);
            CHECKF(c[i].first_diff < 0, "%s: logits differ from full at step %d", c[i].name, c[i].first_diff);
            CHECK(c[i].bad == 0 && c[i].st.bytes_moved_down > 0 && c[i].st.bytes_moved_up > 0);
        }
    }
    if (m15) {
        cand c[1];
        cand_init(&c[0], "1.5b hierarchy 50% delta 7", KV_POLICY_HIERARCHY, 0.5, 7);
        c[0].kv.window = 16;
        REQUIRE(lockstep(m15, 2, 64, 128, c, 1, check_hierarchy) == 0);
        printf("    %-36s down %8.1f KiB up %8.1f KiB\n", c[0].name, c[0].st.bytes_moved_down / 1024.0,
               c[0].st.bytes_moved_up / 1024.0);
        CHECKF(c[0].first_diff < 0, "%s: logits differ from full at step %d", c[0].name, c[0].first_diff);
        CHECK(c[0].bad == 0 && c[0].st.bytes_moved_down > 0 && c[0].st.bytes_moved_up > 0);
    }
}

/* ---- the baselines with the prompt protected (--protect-prompt) ---- */

static int pp_np; /* prompt length of the run */

/* No prompt position is dropped by any (layer, kv head) row; kv_check holds every row to the
 * limit the step reported (prompt + the method's budget). */
static void check_prompt_kept(cand *c, int step) {
    kv_cache *kv = te_kv(c->e);
    const model_config *m = cfg_of(c);
    char err[256];
    if (kv_check(kv, err, sizeof err)) bad(c, step, err);
    for (int l = 0; l < m->n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, 0, l, &v);
        for (int p = 0; p < pp_np && p < v.n; p++) {
            int here = v.k16 ? v.k16[p] != NULL : v.k[p] != NULL;
            for (int g = 0; g < m->n_head_kv && here; g++) here = !v.keep || v.keep[(size_t)g * v.keep_stride + p];
            if (!here) {
                snprintf(err, sizeof err, "layer %d: prompt position %d dropped", l, p);
                bad(c, step, err);
                return;
            }
        }
    }
}

/* At 30% of 428 positions the budget (128 tokens) is the prompt alone: the protected methods keep
 * all of it and choose among generated tokens with what is left, raised to evict's protected window
 * (64 here: the same T0 budget as evict, prompt + window); SnapKV protected runs as the R-KV paper's
 * decode-time SnapKV (it would otherwise evict nothing at all). */
TEST(kv_model_baselines_protect_prompt) {
    NEED(QWEN2);
    cand c[4];
    for (int i = 0; i < 4; i++) {
        cand_init(&c[i], kv_policy_name(baselines[i]), baselines[i], 0.3, 64);
        c[i].no_compare = 1;
        c[i].kv.protect_prompt = 1;
    }
    pp_np = 128;
    REQUIRE(lockstep(t_shared(QWEN2), 1, 128, 300, c, 4, check_prompt_kept) == 0);
    for (int i = 0; i < 4; i++) {
        printf("    %-9s protected: T0 %4lld tokens, evicted %4lld (per row %5.1f)\n", c[i].name, (long long)c[i].st.tokens[0],
               (long long)c[i].st.tokens[3], c[i].st.evicted_equiv);
        CHECKF(c[i].bad == 0, "%s protected: %d step checks failed", c[i].name, c[i].bad);
        CHECKF(c[i].st.evicted_equiv > 100, "%s protected: %.1f dropped per row", c[i].name, c[i].st.evicted_equiv);
    }
    /* each row holds the prompt + evict's window, no more (H2O's rows choose different tokens) */
    CHECK(c[0].st.tokens[0] == 128 + 64 && c[0].st.evicted_equiv == 428 - 192 && c[1].st.evicted_equiv == 428 - 192);
    CHECK(c[2].st.budget_raised > 0);
}
