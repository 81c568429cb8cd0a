/* test_gpu_order.c — the KV module under a GPU's ordering, on a machine without a GPU.
 *
 * The test backend "cpu-async" (src/backend/cpu/cpu_async.c) holds every copy_moves until
 * copy_wait(layer), as a copy stream's work is only known done after the compute queue waits for it,
 * and reads attention tables again only when tables_gen changes, as the CUDA backend's device image
 * does; it is not unified, so the forward's read-backs and split attention's device-part path run
 * (on the CPU the split runs its unified path). Each test decodes greedily with an engine on "cpu"
 * (the reference) and the same configuration on "cpu-async" in lockstep: every logits row must be
 * the same bits. A slot reused before the copy that reads it has run, a row read before the copy
 * that writes it, or a keep mask of another layer read under a stale tables_gen gives other logits.
 *
 * The hierarchy runs are also compared with policy full on the CPU (the lossless tiers change no
 * bit), so a race that happened on both sides would still show. cuda_tiers_lockstep runs the same
 * comparisons on the CUDA backend itself, where one opens (a GPU, or `make cuda-emu-test`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h" /* cpu_async_hazards */
#include "backend/cuda/cuda_plan.h"   /* cu_runs_of: the runs a GPU's copy path makes of a list */
#include "kv/kv.h"
#include "kv/kv_state.h" /* pool sizes */
#include "kv/kv_view.h"  /* kv_stage_slot */
#include "t.h"
#include "t_engine.h"
#include "t_ref.h" /* t_gen_model */

#define QWEN2 "fixtures/models/qwen2-Q4_K_M.gguf"

static uint64_t last_steps, last_breaks; /* the last cpu-async candidate's brackets (cpu_async_steps) */

/* Greedy decoding of n_gen steps after an np-token prompt (prefilled in chunks of `chunk`) on the
 * reference options and on the candidate's, with the model at path; returns the first logits row
 * that differs (-1: none), -2 on an engine failure. st: the candidate's statistics at the end. */
static int lockstep_model(const char *path, const te_options *ref_o, const te_options *cand_o, int np, int chunk,
                          int n_gen, kv_stats *st) {
    char err[512];
    te_engine *e[2] = {NULL, NULL};
    const te_options *o[2] = {ref_o, cand_o};
    for (int i = 0; i < 2; i++)
        if (te_open(path, o[i], &e[i], err, sizeof err)) {
            fprintf(stderr, "    open: %s\n", err);
            te_close(e[0]);
            return -2;
        }
    int V = te_n_vocab(e[0]), diff = -1, rc = 0;
    int32_t *prompt = malloc((size_t)np * sizeof *prompt);
    float *lg[2] = {malloc((size_t)V * sizeof(float)), malloc((size_t)V * sizeof(float))};
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    for (int i = 0; i < 2 && !rc; i++)
        for (int at = 0; at < np && !rc; at += chunk) {
            int n = np - at < chunk ? np - at : chunk;
            if (te_prefill(e[i], 0, prompt + at, n, lg[i], 0, err, sizeof err)) rc = -2;
        }
    if (!rc && memcmp(lg[0], lg[1], (size_t)V * sizeof(float))) diff = 0;
    for (int s = 0; s < n_gen && !rc; s++) {
        for (int i = 0; i < 2 && !rc; i++) {
            int seq = 0;
            int32_t tok = tkv_argmax(lg[i], V);
            if (te_decode(e[i], &seq, &tok, 1, lg[i], err, sizeof err)) rc = -2;
        }
        if (!rc && diff < 0 && memcmp(lg[0], lg[1], (size_t)V * sizeof(float))) diff = s + 1;
    }
    if (rc) fprintf(stderr, "    %s\n", err);
    kv_sync(te_kv(e[1]));
    kv_get_stats(te_kv(e[1]), -1, st);
    if (cand_o->backend && !strcmp(cand_o->backend, "cpu-async")) { /* no move could pass the compute before it */
        cpu_async_steps(te_kv(e[1])->be, &last_steps, &last_breaks);
        uint64_t h = cpu_async_order_hazards(te_kv(e[1])->be);
        CHECKF(h == 0, "%llu moves submitted where a copy queue could run them before the compute they follow",
               (unsigned long long)h);
    }
    if (kv_check(te_kv(e[1]), err, sizeof err)) {
        fprintf(stderr, "    kv_check: %s\n", err);
        rc = -2;
    }
    for (int i = 0; i < 2; i++) te_close(e[i]), free(lg[i]);
    free(prompt);
    return rc ? rc : diff;
}

/* lockstep_model on the qwen2 fixture */
static int lockstep(const te_options *ref_o, const te_options *cand_o, int np, int chunk, int n_gen, kv_stats *st) {
    return lockstep_model(t_shared(QWEN2), ref_o, cand_o, np, chunk, n_gen, st);
}

static void base_options(te_options *o, const char *backend) {
    te_options_default(o);
    o->n_threads = 1;
    o->n_ctx = 512;
    o->backend = backend;
}

/* One configuration: the candidate on cpu-async against the same on cpu, and (for lossless ones)
 * against full on cpu. */
static void run_case(const char *name, const kv_options *kv, int split, int lossless, int np, int chunk, int n_gen,
                     kv_stats *st) {
    te_options ref, cand;
    base_options(&ref, "cpu");
    base_options(&cand, "cpu-async");
    ref.kv = cand.kv = *kv;
    ref.split = cand.split = split;
    int d = lockstep(&ref, &cand, np, chunk, n_gen, st);
    CHECKF(d == -1, "%s: cpu-async logits differ from cpu at step %d (-2: engine failure)", name, d);
    if (!lossless) return;
    te_options full;
    base_options(&full, "cpu");
    full.kv.f16 = kv->f16;
    kv_stats st2;
    d = lockstep(&full, &cand, np, chunk, n_gen, &st2);
    CHECKF(d == -1, "%s: cpu-async logits differ from full at step %d", name, d);
}

static kv_options hier(double ratio, int delta) {
    kv_options k;
    kv_options_default(&k);
    k.policy = KV_POLICY_HIERARCHY;
    k.t0_ratio = ratio;
    k.delta = delta;
    k.window = 16;
    return k;
}

/* Planned batches, on the transfer thread and on the calling thread: a source slot freed when the
 * batch completes must not be reused before its copies have run. */
TEST(gpu_order_hierarchy_batches) {
    NEED(QWEN2);
    kv_stats st;
    kv_options k = hier(0.5, 7);
    run_case("hierarchy 50% delta 7", &k, 0, 1, 64, 64, 200, &st);
    CHECK(st.bytes_moved_down > 0 && st.bytes_moved_up > 0);
    k = hier(0.5, 1);
    k.sync_transfers = 1;
    run_case("hierarchy 50% delta 1 sync", &k, 0, 1, 64, 64, 200, &st);
    CHECK(st.bytes_moved_down > 0 && st.bytes_moved_up > 0);
    k = hier(0.3, 5);
    k.staged = 1;
    run_case("hierarchy 30% delta 5 staged", &k, 0, 1, 64, 64, 150, &st);
    CHECK(st.bytes_staged > 0);
    k = hier(0.3, 5);
    run_case("hierarchy 30% delta 5 split", &k, 1, 0, 64, 64, 150, &st);
}

/* Synchronous demotions: an unpinned prompt prefilled in chunks overflows T0 at every chunk, and the
 * lowest-scored written T0 token is moved to T1 on the spot; its T0 slot goes to the new token. */
TEST(gpu_order_sync_demotions) {
    NEED(QWEN2);
    kv_stats st;
    kv_options k = hier(0.3, 64);
    k.unpin_prompt = 1;
    run_case("hierarchy 30% unpinned prompt in chunks of 8", &k, 0, 1, 96, 8, 100, &st);
    CHECKF(st.sync_demotions > 0, "no synchronous demotion happened (%lld)", (long long)st.sync_demotions);
    k.sync_transfers = 1;
    run_case("the same, sync transfers", &k, 0, 1, 96, 8, 100, &st);
    CHECK(st.sync_demotions > 0);
}

/* One prefill of many calls (max_batch 8: the calls before the last want no logits, so nothing
 * waits for the device between them), an unpinned prompt over its T0 budget: each call demotes T0
 * rows the one before wrote, whose kv_write a GPU's compute queue may not have run when the copy
 * queue gets the move. With copy_after_compute no move is submitted where it could pass them;
 * taken away, cpu-async counts the moves that could. The logits stay cpu's either way (cpu-async
 * runs its compute at once), so only the count shows the race. */
TEST(gpu_order_copies_after_compute) {
    NEED(QWEN2);
    for (int on = 1; on >= 0; on--) {
        te_options o;
        base_options(&o, "cpu-async");
        o.max_batch = 8;
        o.kv = hier(0.3, 64);
        o.kv.unpin_prompt = 1;
        te_engine *e;
        char err[512];
        REQUIRE(te_open(t_shared(QWEN2), &o, &e, err, sizeof err) == 0);
        kv_cache *kv = te_kv(e);
        cpu_async_copy_order(kv->be, on);
        int V = te_n_vocab(e), np = 96;
        int32_t prompt[96];
        for (int i = 0; i < np; i++) prompt[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
        float *lg = malloc((size_t)V * sizeof *lg);
        REQUIRE(te_prefill(e, 0, prompt, np, lg, 0, err, sizeof err) == 0);
        for (int s = 0; s < 8; s++) {
            int seq = 0;
            int32_t tok = tkv_argmax(lg, V);
            REQUIRE(te_decode(e, &seq, &tok, 1, lg, err, sizeof err) == 0);
        }
        kv_stats st;
        kv_sync(kv);
        kv_get_stats(kv, -1, &st);
        uint64_t h = cpu_async_order_hazards(kv->be);
        CHECKF(st.sync_demotions > 0, "no synchronous demotion (%lld)", (long long)st.sync_demotions);
        if (on) CHECKF(h == 0, "%llu moves could pass the compute before them", (unsigned long long)h);
        else CHECKF(h > 0, "without copy_after_compute no move was counted: the check sees nothing");
        free(lg);
        te_close(e);
    }
    /* and the same prompt in calls of 8 against cpu and full, bit for bit */
    kv_options k = hier(0.3, 64);
    k.unpin_prompt = 1;
    te_options ref, cand;
    base_options(&ref, "cpu"), base_options(&cand, "cpu-async");
    ref.kv = cand.kv = k;
    ref.max_batch = cand.max_batch = 8;
    kv_stats st;
    CHECK(lockstep(&ref, &cand, 96, 96, 40, &st) == -1);
}

/* A mixture-of-experts model (test-qwen3moe) on a backend that is not host memory: each layer's router
 * logits read back into the pinned buffer, the routed rows gathered and combined from host index
 * arrays, prompt calls of 8 tokens (several tokens an expert) and single-token steps; full, and the
 * hierarchy's lossless tiers against full. No call is bracketed as a graph step: the routing reads
 * back inside every layer, which would end a capture. */
TEST(gpu_order_experts) {
    const char *moe = t_gen_model("test-qwen3moe", "Q8_0");
    REQUIRE(moe);
    te_options ref, cand;
    base_options(&ref, "cpu"), base_options(&cand, "cpu-async");
    kv_stats st;
    int d = lockstep_model(moe, &ref, &cand, 40, 8, 60, &st);
    CHECKF(d == -1, "full: cpu-async logits differ from cpu at step %d (-2: engine failure)", d);
    CHECKF(last_steps == 0 && last_breaks == 0, "%llu calls bracketed, %llu waits inside",
           (unsigned long long)last_steps, (unsigned long long)last_breaks);
    ref.kv = cand.kv = hier(0.5, 7);
    d = lockstep_model(moe, &ref, &cand, 40, 8, 60, &st);
    CHECKF(d == -1, "hierarchy 50%%: cpu-async logits differ from cpu at step %d", d);
    CHECK(st.bytes_moved_down > 0);
    base_options(&ref, "cpu");
    d = lockstep_model(moe, &ref, &cand, 40, 8, 60, &st);
    CHECKF(d == -1, "hierarchy 50%% on cpu-async: logits differ from full at step %d", d);
}

/* Keep masks differ per layer: a tables_gen that stands for every layer hands a GPU layer 0's masks
 * in every layer. */
TEST(gpu_order_keep_masks_per_layer) {
    NEED(QWEN2);
    static const kv_policy_kind pol[] = {KV_POLICY_H2O, KV_POLICY_RKV, KV_POLICY_SNAPKV};
    static const char *name[] = {"h2o 50%", "rkv 50%", "snapkv 50%"};
    for (int i = 0; i < 3; i++) {
        kv_options k;
        kv_options_default(&k);
        k.policy = pol[i];
        k.t0_ratio = 0.5;
        kv_stats st;
        run_case(name[i], &k, 0, 0, 64, 64, 120, &st);
        CHECKF(st.tokens_evicted > 0, "%s: nothing evicted", name[i]);
    }
}

/* Pools are reserved when a sequence opens: no step grows one (on a GPU a growth is a cudaMalloc or
 * cudaHostAlloc inside a timed step). Each policy runs a sequence to its full length. */
TEST(gpu_order_pools_reserved_before_steps) {
    NEED(QWEN2);
    static const struct { const char *name; kv_policy_kind p; double t0, t2, ev; int staged; } cs[] = {
        {"full", KV_POLICY_FULL, -1, 0, 0, 0},
        {"hierarchy 30%, T2 20%, 3% evicted", KV_POLICY_HIERARCHY, 0.3, 0.2, 0.03, 0},
        {"hierarchy 50% staged", KV_POLICY_HIERARCHY, 0.5, 0, 0, 1},
        {"quant 30%", KV_POLICY_QUANT, 0.3, 0, 0.05, 0},
        {"evict 50%", KV_POLICY_EVICT, 0.5, 0, 0, 0},
        {"h2o 50%", KV_POLICY_H2O, 0.5, 0, 0, 0},
    };
    enum { CTX = 384, NP = 48 };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        te_options o;
        base_options(&o, "cpu");
        o.n_ctx = CTX;
        o.kv.policy = cs[c].p;
        if (cs[c].t0 >= 0) o.kv.t0_ratio = cs[c].t0;
        if (cs[c].t2 > 0) o.kv.t2_ratio = cs[c].t2;
        if (cs[c].ev > 0) o.kv.evict_ratio = cs[c].ev;
        o.kv.staged = cs[c].staged;
        o.kv.delta = 16;
        o.kv.window = 16;
        char err[512];
        te_engine *e;
        if (te_open(t_shared(QWEN2), &o, &e, err, sizeof err)) {
            CHECKF(0, "%s: %s", cs[c].name, err);
            continue;
        }
        kv_cache *kv = te_kv(e);
        int before[BE_N_POOLS];
        for (int t = 0; t < BE_N_POOLS; t++) before[t] = kv->tp[t].n_slots;
        int V = te_n_vocab(e), seq = 0, rc = 0;
        int32_t prompt[NP];
        float *lg = malloc((size_t)V * sizeof(float));
        for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
        rc = te_prefill(e, 0, prompt, NP, lg, 0, err, sizeof err);
        for (int s = NP; s < CTX && !rc; s++) {
            int32_t tok = tkv_argmax(lg, V);
            rc = te_decode(e, &seq, &tok, 1, lg, err, sizeof err);
        }
        CHECKF(!rc, "%s: %s", cs[c].name, err);
        kv_sync(kv);
        for (int t = 0; t < BE_N_POOLS; t++)
            CHECKF(kv->tp[t].n_slots == before[t], "%s: pool %d grew from %d to %d slots during the steps (peak in use %lld)",
                   cs[c].name, t, before[t], kv->tp[t].n_slots, (long long)kv->tp[t].peak);
        free(lg);
        te_close(e);
    }
}

/* What a decode step reads back from a backend that is not host memory. With the scores updated on
 * the host (host_scores): per layer the attention weights of the positions the step attends (rows
 * of the longest table rounded up to 16 floats, not of the whole context), with split attention
 * also the queries; then one row of logits. Counted exactly, on cpu-async, with the reads (each a
 * wait for a GPU): every layer's weights come back in one read at the end of the step, beside the
 * logits' (2 a step); split adds one read of the queries a layer (its merge runs on the device).
 * With the scores updated on the device (the default): no weights; the scores come back when the
 * host ranks them, one read of the sequence's length: a re-tiering at the end of a step, and a
 * demotion for the step's new token unless the re-tiering before it left both copies the same.
 * Split sends its host part up: o, m and l, and its weights compacted to the T1 positions it read
 * (with their indices; the rest of a row is 0 and is spread out again on the device). */
static void read_back_case(int split, int staged, int host_scores) {
    te_options o;
    base_options(&o, "cpu-async");
    o.kv = hier(0.5, 7);
    o.kv.staged = staged;
    o.kv.host_scores = host_scores;
    o.split = split;
    te_engine *e;
    char err[256];
    REQUIRE(te_open(t_shared(QWEN2), &o, &e, err, sizeof err) == 0);
    const model_config *c = &te_model(e)->cfg;
    kv_cache *kv = te_kv(e);
    CHECK(kv_scores_on_device(kv) == !host_scores);
    int V = te_n_vocab(e), np = 40, seq = 0, bad = 0, bad_reads = 0, bad_sent = 0, score_reads = 0, t1_steps = 0;
    int32_t prompt[40], tok = 17;
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    float *logits = malloc((size_t)V * 4);
    /* the prompt: the hierarchy reads no prompt query's weights, so none are written or come back;
     * split alone (not staged) reads the queries of each 16-token sub-batch and sends its part up
     * without weights */
    {
        uint64_t r0, r1, b0 = tkv_read_back_bytes(te_session(e), &r0), s0 = tkv_split_sent_bytes(te_session(e));
        REQUIRE(te_prefill(e, 0, prompt, np, logits, 0, err, sizeof err) == 0);
        uint64_t got = tkv_read_back_bytes(te_session(e), &r1) - b0, sent = tkv_split_sent_bytes(te_session(e)) - s0;
        uint64_t nq = (uint64_t)c->n_head * c->head_dim, subs = ((uint64_t)np + 15) / 16, L = (uint64_t)c->n_layer;
        int q_reads = split && !staged;
        uint64_t want = (uint64_t)V * 4 + (q_reads ? L * np * nq * 4 : 0);
        uint64_t want_reads = 1 + (q_reads ? L * subs : 0), want_sent = q_reads ? L * np * (nq + 2 * c->n_head) * 4 : 0;
        CHECKF(got == want && r1 - r0 == want_reads && sent == want_sent,
               "split %d staged %d: the prompt read back %llu bytes in %llu reads and sent %llu (want %llu, %llu, %llu)",
               split, staged, (unsigned long long)got, (unsigned long long)(r1 - r0), (unsigned long long)sent,
               (unsigned long long)want, (unsigned long long)want_reads, (unsigned long long)want_sent);
    }
    kv_stats st0, st1;
    kv_get_stats(kv, -1, &st0);
    int retiered_before = 0;
    double hw0 = tkv_host_wait_seconds(te_session(e));
    for (int pos = np; pos < np + 40; pos++) {
        uint64_t t1 = 0; /* T1 positions the step's split reads: these now, and a demotion's for the new token */
        for (int p = 0; p < pos; p++) t1 += kv_token_tier(kv, seq, p) == BE_T1;
        uint64_t r0, r1, b0 = tkv_read_back_bytes(te_session(e), &r0), s0 = tkv_split_sent_bytes(te_session(e));
        REQUIRE(te_decode(e, &seq, &tok, 1, logits, err, sizeof err) == 0);
        uint64_t got = tkv_read_back_bytes(te_session(e), &r1) - b0, sent = tkv_split_sent_bytes(te_session(e)) - s0;
        kv_get_stats(kv, -1, &st1);
        int retier = st1.retiers > st0.retiers, demoted = st1.sync_demotions > st0.sync_demotions;
        t1 += (uint64_t)(st1.sync_demotions - st0.sync_demotions);
        t1_steps += t1 > 0;
        st0 = st1;
        /* the device's scores, read by the host: a demotion for the new token (length pos), a
         * re-tiering at the step's end (length pos + 1) */
        int read_demote = !host_scores && demoted && !retiered_before, read_retier = !host_scores && retier;
        retiered_before = retier;
        score_reads += read_demote + read_retier;
        uint64_t want_reads = (split ? (uint64_t)c->n_layer : 0) + (host_scores ? 2 : 1) + read_demote + read_retier;
        if (r1 - r0 != want_reads && !bad_reads++)
            printf("    split %d host scores %d, position %d: %llu reads, %llu expected\n", split, host_scores, pos,
                   (unsigned long long)(r1 - r0), (unsigned long long)want_reads);
        uint64_t stride = (uint64_t)((pos + 1 + 15) & ~15), nh = (uint64_t)c->n_head, nq = nh * c->head_dim;
        uint64_t per_layer = (host_scores ? nh * stride * 4 : 0) + (split ? nq * 4 : 0);
        uint64_t want = (uint64_t)c->n_layer * per_layer + (uint64_t)V * 4 + 8 * ((uint64_t)pos * read_demote +
                                                                                   (uint64_t)(pos + 1) * read_retier);
        if (got != want && !bad++)
            printf("    split %d host scores %d, position %d: %llu bytes read back, %llu expected\n", split, host_scores,
                   pos, (unsigned long long)got, (unsigned long long)want);
        /* split sends the host's part up: o, m, l and its weights, a layer at a time, the weights
         * compacted to its T1 positions' columns and their indices */
        uint64_t want_sent = split ? (uint64_t)c->n_layer * (nq + 2 * nh + (nh + 1) * t1) * 4 : 0;
        if (sent != want_sent && !bad_sent++)
            printf("    split %d, position %d: %llu bytes sent up, %llu expected\n", split, pos, (unsigned long long)sent,
                   (unsigned long long)want_sent);
        tok = (int32_t)((tok * 31 + 7) % V);
    }
    /* the host's waits in those reads are counted (here the reads' own copies: more than nothing) */
    double hw = tkv_host_wait_seconds(te_session(e)) - hw0;
    CHECKF(hw > 0 && hw < 60, "split %d: the host blocked %g s in 40 steps' reads", split, hw);
    CHECKF(bad == 0, "split %d host scores %d: %d of 40 steps read back another number of bytes", split, host_scores, bad);
    CHECKF(bad_reads == 0, "split %d host scores %d: %d of 40 steps waited for the device another number of times", split,
           host_scores, bad_reads);
    CHECKF(bad_sent == 0, "split %d: %d of 40 steps sent another number of bytes up", split, bad_sent);
    CHECKF(t1_steps >= 20, "only %d of 40 steps had T1 positions: the weights' compaction is not seen", t1_steps);
    uint64_t reads, ups;
    kv_scores_read_back(kv, &reads, &ups);
    CHECKF(reads == (uint64_t)score_reads && ups == (uint64_t)!host_scores && (host_scores || score_reads >= 5),
           "split %d host scores %d: scores read back %llu times (%d expected), sent up %llu times", split, host_scores,
           (unsigned long long)reads, score_reads, (unsigned long long)ups);
    CHECKF(cpu_async_hazards(kv->be) == 0, "split %d: %llu pinned uploads' sources changed before the next read",
           split, (unsigned long long)cpu_async_hazards(kv->be));
    free(logits);
    te_close(e);
}

/* cpu-async's check of upload_pinned's contract: a source changed before the next read counts. */
TEST(gpu_order_pinned_upload_hazard) {
    be_backend *b;
    char err[256];
    REQUIRE(be_open(&(be_params){.name = "cpu-async", .n_threads = 1}, &b, err, sizeof err) == 0);
    const be_ops *op = b->ops;
    REQUIRE(op->upload_pinned != NULL);
    float *src = op->alloc(b, 64 * 4, BE_MEM_PINNED, err, sizeof err), *dst = op->alloc(b, 64 * 4, BE_MEM_DEVICE, err, sizeof err);
    float *host = op->alloc(b, 64 * 4, BE_MEM_PINNED, err, sizeof err);
    REQUIRE(src && dst && host);
    for (int i = 0; i < 64; i++) src[i] = (float)i;
    op->upload_pinned(b, dst, src, 64 * 4);
    op->read(b, dst, 64 * 4, host);
    CHECK(cpu_async_hazards(b) == 0 && host[63] == 63.0f);
    op->upload_pinned(b, dst, src, 64 * 4);
    src[5] = -1.0f; /* before the queue is known to have run */
    op->read(b, dst, 64 * 4, host);
    CHECK(cpu_async_hazards(b) == 1);
    src[6] = -1.0f; /* after it: fine */
    op->read(b, dst, 64 * 4, host);
    CHECK(cpu_async_hazards(b) == 1);
    op->free(b, src, BE_MEM_PINNED), op->free(b, dst, BE_MEM_DEVICE), op->free(b, host, BE_MEM_PINNED);
    be_close(b);
}

TEST(gpu_order_read_back_attended_rows) {
    NEED(QWEN2);
    for (int host_scores = 0; host_scores < 2; host_scores++) {
        read_back_case(0, 0, host_scores);
        read_back_case(1, 0, host_scores);
        read_back_case(1, 1, host_scores); /* staged prefill, split decode: the decode steps read as split's */
    }
}

/* Two sequences decoding together under --staged --split (one token each: split), after their
 * prompts (staged): cpu-async against cpu bit for bit, and no T1 row staged by the joint steps. */
TEST(gpu_order_staged_split_two_sequences) {
    NEED(QWEN2);
    te_engine *e[2];
    char err[256];
    for (int b = 0; b < 2; b++) {
        te_options o;
        base_options(&o, b ? "cpu-async" : "cpu");
        o.n_seq = 2;
        o.kv = hier(0.3, 5);
        o.kv.unpin_prompt = 1;
        o.kv.staged = 1;
        o.split = 1;
        REQUIRE(te_open(t_shared(QWEN2), &o, &e[b], err, sizeof err) == 0);
    }
    int V = te_n_vocab(e[0]), seqs[2] = {0, 1}, diff = -1;
    float *lg[2] = {malloc((size_t)V * 8), malloc((size_t)V * 8)};
    int32_t prompt[2][64];
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 64; i++) prompt[q][i] = (int32_t)((i * 7919 + 13 + q * 101) % V);
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < 2; q++)
            for (int at = 0; at < 64; at += 8)
                REQUIRE(te_prefill(e[b], q, prompt[q] + at, 8, lg[b] + (size_t)q * V, 0, err, sizeof err) == 0);
    kv_stats a, z;
    kv_sync(te_kv(e[1]));
    kv_get_stats(te_kv(e[1]), -1, &a);
    for (int s = 0; s < 60; s++) {
        int32_t tok[2];
        for (int q = 0; q < 2; q++) tok[q] = tkv_argmax(lg[0] + (size_t)q * V, V);
        for (int b = 0; b < 2; b++) REQUIRE(te_decode(e[b], seqs, tok, 2, lg[b], err, sizeof err) == 0);
        if (diff < 0 && memcmp(lg[0], lg[1], (size_t)V * 8)) diff = s;
    }
    kv_sync(te_kv(e[1]));
    kv_get_stats(te_kv(e[1]), -1, &z);
    printf("    two sequences: staged %lld bytes in the prompts, %lld in 60 joint decode steps; T1 holds %lld tokens\n",
           (long long)a.bytes_staged, (long long)(z.bytes_staged - a.bytes_staged), (long long)z.tokens[BE_T1]);
    CHECKF(diff == -1, "cpu-async logits differ from cpu at joint step %d", diff);
    CHECK(a.bytes_staged > 0 && z.bytes_staged == a.bytes_staged && z.tokens[BE_T1] > 0);
    for (int b = 0; b < 2; b++) te_close(e[b]), free(lg[b]);
}

/* Staged and split together: prefill chunks staged (exact: the prompt's logits are full's bits),
 * decode steps split (no T1 row staged once the prompt is in). An unpinned prompt in chunks of 8
 * overflows T0 at every chunk, so the later chunks attend rows in T1. */
static te_options staged_split(const char *backend, int staged, int split) {
    te_options o;
    base_options(&o, backend);
    o.kv = hier(0.3, 5);
    o.kv.unpin_prompt = 1;
    o.kv.staged = staged;
    o.split = split;
    return o;
}

/* The decode steps of split (o) after a 96-token prompt in chunks of 8, against full's (f), the same
 * tokens fed to both: within split's rounding of full's (the bound of tests/test_split.c). */
static void split_decode_near_full(const te_options *f, const te_options *o, const char *name) {
    char err[256];
    te_engine *ef, *es;
    REQUIRE(te_open(t_shared(QWEN2), f, &ef, err, sizeof err) == 0);
    REQUIRE(te_open(t_shared(QWEN2), o, &es, err, sizeof err) == 0);
    int V = te_n_vocab(ef), seq = 0, top1 = 0, rows = 0;
    int32_t prompt[96];
    for (int i = 0; i < 96; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    for (int at = 0; at < 96; at += 8)
        REQUIRE(te_prefill(ef, 0, prompt + at, 8, a, 0, err, sizeof err) == 0 &&
                te_prefill(es, 0, prompt + at, 8, b, 0, err, sizeof err) == 0);
    double worst = 0;
    for (int s = 0; s < 100; s++) {
        int32_t t = tkv_argmax(a, V);
        REQUIRE(te_decode(ef, &seq, &t, 1, a, err, sizeof err) == 0 && te_decode(es, &seq, &t, 1, b, err, sizeof err) == 0);
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
        top1 += tkv_argmax(a, V) == tkv_argmax(b, V), rows++;
    }
    printf("    %s: %d decode rows, top-1 equal on %d, max |logit difference| %.2e\n", name, rows, top1, worst);
    CHECK(worst < 1.2 && top1 >= rows * 95 / 100);
    free(a), free(b);
    te_close(ef), te_close(es);
}

TEST(gpu_order_staged_prefill_split_decode) {
    NEED(QWEN2);
    kv_stats st;
    te_options ref = staged_split("cpu", 1, 1), cand = staged_split("cpu-async", 1, 1);
    int d = lockstep(&ref, &cand, 96, 8, 120, &st);
    CHECKF(d == -1, "staged + split: cpu-async logits differ from cpu at step %d (-2: engine failure)", d);
    CHECK(st.sync_demotions > 0 && st.bytes_staged > 0);
    /* with T2: its rows are still staged for the split decode steps (cpu-async reads no T2 in place,
     * as a GPU; the CPU reference stages them too with stage_t2) */
    ref.kv.t2_ratio = cand.kv.t2_ratio = 0.2;
    ref.kv.stage_t2 = 1;
    d = lockstep(&ref, &cand, 96, 8, 120, &st);
    CHECKF(d == -1, "staged + split with T2: cpu-async logits differ from cpu at step %d (-2: engine failure)", d);
    CHECKF(st.tokens[BE_T2] > 0, "no token reached T2 (%lld)", (long long)st.tokens[BE_T2]);
    ref.kv.t2_ratio = cand.kv.t2_ratio = 0;
    ref.kv.stage_t2 = 0;
    /* the prompt's logits: full's bits when staged, not when split (the check can tell them apart) */
    te_options full;
    base_options(&full, "cpu");
    te_options split_only = staged_split("cpu", 0, 1);
    d = lockstep(&full, &ref, 96, 8, 1, &st);
    CHECKF(d != 0 && d != -2, "staged + split: the prompt's logits are not full's (%d)", d);
    d = lockstep(&full, &split_only, 96, 8, 1, &st);
    CHECKF(d == 0, "split alone: the prompt's logits equal full's (%d): this test cannot tell", d);
    /* the decode steps: within split's rounding of full's (the bound of tests/test_split.c), the
     * same tokens fed to both */
    split_decode_near_full(&full, &ref, "staged + split against full");
    /* the decode steps stage nothing (no T2 here); staged alone stages every step */
    for (int staged_only = 0; staged_only < 2; staged_only++) {
        te_options o = staged_split("cpu-async", 1, !staged_only);
        te_engine *e;
        char err[256];
        REQUIRE(te_open(t_shared(QWEN2), &o, &e, err, sizeof err) == 0);
        int V = te_n_vocab(e), seq = 0;
        int32_t prompt[96], tok = 17;
        for (int i = 0; i < 96; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
        float *lg = malloc((size_t)V * 4);
        for (int at = 0; at < 96; at += 8) REQUIRE(te_prefill(e, 0, prompt + at, 8, lg, 0, err, sizeof err) == 0);
        kv_stats a, b;
        kv_sync(te_kv(e));
        kv_get_stats(te_kv(e), -1, &a);
        int64_t builds = te_kv(e)->stage_memo.builds;
        for (int s = 0; s < 30; s++) REQUIRE(te_decode(e, &seq, &tok, 1, lg, err, sizeof err) == 0);
        /* the staging list is built once a step, not once a layer */
        builds = te_kv(e)->stage_memo.builds - builds;
        CHECKF(builds == 30, "%lld staging lists built in 30 decode steps of %d layers", (long long)builds,
               te_model(e)->cfg.n_layer);
        kv_sync(te_kv(e));
        kv_get_stats(te_kv(e), -1, &b);
        printf("    %s: staged %lld bytes in the prompt, %lld in 30 decode steps; T1 holds %lld tokens\n",
               staged_only ? "staged" : "staged + split", (long long)a.bytes_staged,
               (long long)(b.bytes_staged - a.bytes_staged), (long long)b.tokens[BE_T1]);
        CHECK(a.bytes_staged > 0 && b.tokens[BE_T1] > 0);
        if (staged_only) CHECK(b.bytes_staged > a.bytes_staged);
        else CHECK(b.bytes_staged == a.bytes_staged);
        free(lg);
        te_close(e);
    }
}

/* The hierarchy on the CUDA backend itself (a GPU, or the emulated device of `make cuda-emu-test`):
 * gpu.sh's token check on the fixture, in the suite. Its lossless tiers give full's bits there too,
 * read in place over the bus (direct) and staged into device memory; split's decode steps stay within
 * its rounding of full's; and a lossy hierarchy's scores added up on the device give the same logits
 * as the host's (--host-scores). Skips where the backend does not open. (Split's attention differs
 * from full's by about 1e-7; the matmuls quantise their activations to 8 bits, so the logits are
 * mostly full's bits, and where that rounding crosses a quantisation step they jump by a few
 * hundredths: 0.08 at one step of 100 under the emulated device, 2026-12-07.) */
TEST(cuda_tiers_lockstep) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    NEED(QWEN2);
    static char why[512];
    te_options full;
    base_options(&full, "cuda");
    te_engine *probe;
    if (te_open(t_shared(QWEN2), &full, &probe, why, sizeof why)) SKIP(why);
    te_close(probe);
    kv_stats st;
    for (int staged = 0; staged < 2; staged++) {
        te_options o = staged_split("cuda", staged, 0);
        int d = lockstep(&full, &o, 96, 8, 60, &st);
        printf("    %s: T1 holds %lld tokens, %lld bytes staged\n", staged ? "staged" : "direct",
               (long long)st.tokens[BE_T1], (long long)st.bytes_staged);
        CHECKF(d == -1, "%s: logits differ from full's at step %d (-2: engine failure)", staged ? "staged" : "direct", d);
        CHECK(st.tokens[BE_T1] > 0 && (st.bytes_staged > 0) == staged);
    }
    te_options split = staged_split("cuda", 1, 1);
    split_decode_near_full(&full, &split, "cuda staged + split against full");
    te_options dev = staged_split("cuda", 0, 0), host;
    dev.kv.t2_ratio = 0.2, dev.kv.evict_ratio = 0.1;
    host = dev;
    host.kv.host_scores = 1;
    int d = lockstep(&host, &dev, 96, 8, 60, &st);
    printf("    lossy: T2 holds %lld tokens\n", (long long)st.tokens[BE_T2]);
    CHECKF(d == -1, "lossy: the device's scores give other logits than the host's at step %d (-2: engine failure)", d);
    CHECK(st.tokens[BE_T2] > 0);
#endif
}

/* The forward's brackets (step_begin/step_end, where the CUDA backend captures a call as a graph):
 * every call of a policy that waits on nothing mid-call is bracketed and nothing inside waits (a
 * wait would end the capture early); calls that stage rows, fence moves or split are not bracketed
 * (hierarchy: the steps right after a re-tiering, whose moves are in flight; staged: all but the
 * prompt's first chunks).
 * Returns the calls made; *steps, *breaks: cpu-async's counts. */
static int bracket_run(const te_options *o, uint64_t *steps, uint64_t *breaks) {
    te_engine *e;
    char err[256];
    if (te_open(t_shared(QWEN2), o, &e, err, sizeof err)) {
        fprintf(stderr, "    open: %s\n", err);
        return -1;
    }
    int V = te_n_vocab(e), calls = 0;
    float *lg = malloc((size_t)V * sizeof(float));
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
    for (int at = 0; at < 40; at += 8, calls++)
        if (te_prefill(e, 0, prompt + at, 8, lg, 0, err, sizeof err)) calls = -1000;
    for (int s = 0; s < 60; s++, calls++) {
        int seq = 0;
        int32_t tok = tkv_argmax(lg, V);
        if (te_decode(e, &seq, &tok, 1, lg, err, sizeof err)) calls = -1000;
    }
    cpu_async_steps(te_kv(e)->be, steps, breaks);
    free(lg);
    te_close(e);
    return calls;
}

TEST(gpu_order_step_brackets) {
    NEED(QWEN2);
    struct {
        const char *name;
        int policy, staged, split, all; /* all: every call bracketed (else some, or none when staged/split) */
    } cases[] = {
        {"full", KV_POLICY_FULL, 0, 0, 1},
        {"h2o", KV_POLICY_H2O, 0, 0, 1},
        {"hierarchy", KV_POLICY_HIERARCHY, 0, 0, 0},
        {"hierarchy staged", KV_POLICY_HIERARCHY, 1, 0, 0},
        {"hierarchy split", KV_POLICY_HIERARCHY, 0, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        te_options o;
        base_options(&o, "cpu-async");
        o.kv = hier(0.3, 5);
        o.kv.policy = cases[i].policy;
        o.kv.unpin_prompt = cases[i].policy == KV_POLICY_HIERARCHY;
        o.kv.staged = cases[i].staged;
        o.split = cases[i].split;
        if (cases[i].policy == KV_POLICY_H2O) o.kv.t0_ratio = 0.5;
        uint64_t steps = 0, breaks = 0;
        int calls = bracket_run(&o, &steps, &breaks);
        unsigned long long st = steps, br = breaks;
        printf("    %s: %d calls, %llu bracketed, %llu waited inside\n", cases[i].name, calls, st, br);
        CHECKF(calls == 65, "%s: an engine call failed", cases[i].name);
        CHECKF(breaks == 0, "%s: %llu bracketed calls waited for the device inside", cases[i].name, br);
        if (cases[i].all) CHECKF(steps == 65, "%s: %llu of 65 calls bracketed", cases[i].name, st);
        else if (cases[i].split) CHECKF(steps == 0, "%s: %llu calls bracketed (split waits mid-call)", cases[i].name, st);
        else if (cases[i].staged) /* only the prompt's first chunks, before T1 holds a row to stage */
            CHECKF(steps < 5, "%s: %llu calls bracketed (staging waits mid-call)", cases[i].name, st);
        else CHECKF(steps > 30 && steps < 65, "%s: %llu of 65 calls bracketed (moves in flight fence some)", cases[i].name, st);
    }
}

/* `tierkv plan`'s STAGE figure (kv_plan: the fast memory a GPU stages rows in) is what a session
 * allocates: cpu-async keeps two STAGE layers and stages T2 as a GPU does; after a sequence opens
 * (its tiers reserved at their bounds) STAGE holds the plan's bytes, with and without --staged, with
 * and without a T2 share, and for quant (all but T0 in T2). */
TEST(gpu_order_stage_plan) {
    NEED(QWEN2);
    struct { const char *name; int staged, quant; double t2; } cases[] = {
        {"hierarchy staged, T2 20%", 1, 0, 0.2}, {"hierarchy staged", 1, 0, 0}, {"hierarchy, T2 20%", 0, 0, 0.2},
        {"hierarchy", 0, 0, 0}, {"quant staged", 1, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        te_options o;
        base_options(&o, "cpu-async");
        o.kv = hier(0.5, 16);
        o.kv.staged = cases[i].staged;
        if (cases[i].quant) o.kv.policy = KV_POLICY_QUANT;
        else o.kv.t2_ratio = cases[i].t2;
        te_engine *e;
        char err[256];
        if (te_open(t_shared(QWEN2), &o, &e, err, sizeof err)) {
            CHECKF(0, "%s: %s", cases[i].name, err);
            continue;
        }
        kv_cache *kv = te_kv(e);
        int32_t prompt[40], V = te_n_vocab(e);
        for (int k = 0; k < 40; k++) prompt[k] = (int32_t)((k * 7919 + 13) % V);
        float *logits = malloc((size_t)V * 4);
        REQUIRE(logits && te_prefill(e, 0, prompt, 40, logits, 0, err, sizeof err) == 0);
        kv_plan_result r;
        REQUIRE(kv_plan(&kv->o, 1, kv->seq[0].n_ctx, 40, &r, err, sizeof err) == 0);
        const be_kv_pool *st = &kv->pools.pool[BE_STAGE];
        int64_t have = (int64_t)st->n_chunks * ((int64_t)1 << st->chunk_shift) * st->layers * (int64_t)st->record_bytes;
        CHECKF(have == r.stage_bytes_total && have > 0 && st->layers == 2, "%s: STAGE holds %lld bytes (%d layers), the plan says %lld",
               cases[i].name, (long long)have, st->layers, (long long)r.stage_bytes_total);
        free(logits);
        te_close(e);
    }
}

/* The staging list of a decode step: each row's STAGE slot mirrors its true slot, the list runs in
 * STAGE slot order with each slot once, so rows of consecutive T1 (or T2) slots are consecutive on
 * both sides and the GPU's planner (cu_runs_of) makes one run of each range of consecutive staged
 * slots: a few long copies a layer where position order gave about one per two rows. With T1 and T2
 * both staged (cpu-async stages T2, as a GPU does; the CPU with stage_t2) each chunk of either tier
 * has a STAGE chunk of its own, in the order the tiers grew, so STAGE is as large as the two tiers
 * together (not twice the larger); that configuration decodes in lockstep with the same on the CPU. */
TEST(gpu_order_stage_runs) {
    NEED(QWEN2);
    for (int with_t2 = 0; with_t2 < 2; with_t2++) {
        te_options o;
        base_options(&o, "cpu-async");
        o.kv = hier(0.5, 16);
        o.kv.staged = 1;
        if (with_t2) o.kv.t2_ratio = 0.2, o.kv.evict_ratio = 0.03, o.kv.stage_t2 = 1; /* the CPU reference stages T2 too */
        if (with_t2) {
            kv_stats st;
            run_case("hierarchy 50% staged, T2 20%, 3% evicted", &o.kv, 0, 0, 40, 16, 120, &st);
        }
        te_engine *e;
        char err[256];
        REQUIRE(te_open(t_shared(QWEN2), &o, &e, err, sizeof err) == 0);
        kv_cache *kv = te_kv(e);
        int V = te_n_vocab(e), seq = 0, checked = 0, bad_order = 0, bad_mirror = 0, bad_runs = 0, rows = 0, all_runs = 0;
        int32_t prompt[40], tok = 17;
        for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 7919 + 13) % V);
        float *logits = malloc((size_t)V * 4);
        REQUIRE(te_prefill(e, 0, prompt, 40, logits, 0, err, sizeof err) == 0);
        int cap = 0;
        cu_move_run *runs = NULL;
        uint8_t *phase = NULL;
        for (int step = 0; step < 400; step++) {
            REQUIRE(te_decode(e, &seq, &tok, 1, logits, err, sizeof err) == 0);
            tok = (int32_t)((tok * 31 + 7) % V);
            if (step % 25 != 24) continue;
            const be_move *m = kv->stage_moves;
            int n = kv->stage_memo.n, ranges = 0;
            for (int i = 0; i < n; i++) {
                bad_order += i > 0 && BE_SLOT_IDX(m[i].dst) <= BE_SLOT_IDX(m[i - 1].dst);
                bad_mirror += BE_SLOT_TIER(m[i].dst) != BE_STAGE || m[i].dst != kv_stage_slot(kv, m[i].src) ||
                              BE_SLOT_TIER(m[i].src) == BE_T0;
                /* a new range of consecutive true slots inside one chunk */
                ranges += !(i > 0 && m[i].src == m[i - 1].src + 1 && BE_SLOT_IDX(m[i].src) % (1 << KV_CHUNK_SHIFT));
            }
            if (n > cap) {
                cap = n;
                runs = realloc(runs, (size_t)cap * sizeof *runs);
                phase = realloc(phase, (size_t)cap);
                REQUIRE(runs && phase);
            }
            memset(phase, 0, (size_t)n);
            int nr = cu_runs_of(&kv->pools, m, n, 3, phase, runs);
            if (nr != ranges && !bad_runs++)
                printf("    step %d: %d staged rows in %d runs, %d ranges of consecutive slots\n", step + 1, n, nr, ranges);
            rows += n, all_runs += nr, checked++;
        }
        CHECKF(checked == 16 && rows > 1000, "%d lists checked, %d rows", checked, rows);
        CHECKF(bad_order == 0 && bad_mirror == 0, "T2 %d: %d rows out of STAGE slot order, %d not at their mirror", with_t2,
               bad_order, bad_mirror);
        CHECKF(bad_runs == 0, "T2 %d: %d lists planned into more runs than their slot ranges", with_t2, bad_runs);
        CHECKF(all_runs * 4 < rows, "T2 %d: %d rows staged in %d runs", with_t2, rows, all_runs);
        int n1 = kv->pools.pool[BE_T1].n_chunks, n2 = kv->pools.pool[BE_T2].n_chunks;
        CHECKF(kv->pools.pool[BE_STAGE].n_chunks == n1 + (kv_stage_mirrors(kv, BE_T2) ? n2 : 0) && kv_stage_mirrors(kv, BE_T1),
               "T2 %d: STAGE has %d chunks for T1's %d and T2's %d", with_t2, kv->pools.pool[BE_STAGE].n_chunks, n1, n2);
        printf("    T2 %d: %d rows staged in 16 steps' lists, %d runs (%.1f rows a run)\n", with_t2, rows, all_runs,
               (double)rows / all_runs);
        free(runs), free(phase), free(logits);
        char cerr[256];
        CHECKF(kv_check(kv, cerr, sizeof cerr) == 0, "kv_check: %s", cerr);
        te_close(e);
    }
}
