/* test_scores_device.c — the ranked scores updated on the backend (kv_scores.h, be_ops.score_add).
 *
 * On "cpu-async" (not host memory, a GPU's ordering) the hierarchy's scores are added up where the
 * attention wrote its weights and read back only when the host ranks them. The tiers then depend on
 * those scores, so a lossy configuration (T2 and an evicted tail) is run in lockstep on "cpu" (the
 * host's update, the reference), on "cpu-async" and on "cpu-async" with host_scores: every logits
 * row, every position's tier after every step and, at the end, every score must be the same bits.
 * A read-back that is missed (the host ranking stale scores) or an update in another order fails it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/kv_scores.h" /* kv_scores_host: the scores compared at the end */
#include "t.h"
#include "t_engine.h"

#define QWEN2 "fixtures/models/qwen2-Q4_K_M.gguf"
#define N_ENG 3

static te_options opts(const char *backend, int host_scores, int n_seq, int shared) {
    te_options o;
    te_options_default(&o);
    o.n_threads = 1;
    o.n_ctx = 512;
    o.n_seq = n_seq;
    o.backend = backend;
    kv_options_default(&o.kv);
    o.kv.policy = KV_POLICY_HIERARCHY;
    o.kv.delta = 5;
    o.kv.window = 16;
    o.kv.t2_ratio = 0.2;
    o.kv.evict_ratio = 0.1;
    if (shared) o.kv.t0_budget_bytes = 160u << 10; /* one T0 for both: ranked across them */
    else o.kv.t0_ratio = 0.3;
    o.kv.host_scores = host_scores;
    o.kv.stage_t2 = 1; /* cpu-async reads no T2 in place, as a GPU: the CPU stages it too */
    return o;
}

/* n_seq sequences, each a 48-token prompt then n_gen greedy steps decoded together; engine 0 is
 * the reference. */
static void run(const char *path, int n_seq, int shared, int n_gen) {
    te_options o[N_ENG] = {opts("cpu", 0, n_seq, shared), opts("cpu-async", 0, n_seq, shared),
                           opts("cpu-async", 1, n_seq, shared)};
    static const char *name[N_ENG] = {"cpu", "cpu-async", "cpu-async host scores"};
    te_engine *e[N_ENG];
    char err[256];
    for (int i = 0; i < N_ENG; i++) REQUIRE(te_open(path, &o[i], &e[i], err, sizeof err) == 0);
    const int want_dev[N_ENG] = {0, 1, 0};
    for (int i = 0; i < N_ENG; i++)
        CHECKF(kv_scores_on_device(te_kv(e[i])) == want_dev[i], "%s: scores on the device %d, expected %d", name[i],
               kv_scores_on_device(te_kv(e[i])), want_dev[i]);
    int V = te_n_vocab(e[0]), np = 48, seqs[2] = {0, 1};
    float *lg[N_ENG];
    for (int i = 0; i < N_ENG; i++) lg[i] = malloc((size_t)V * n_seq * sizeof(float));
    for (int i = 0; i < N_ENG; i++)
        for (int q = 0; q < n_seq; q++) {
            int32_t prompt[48];
            for (int k = 0; k < np; k++) prompt[k] = (int32_t)((k * 7919 + 13 + q * 331) % V);
            REQUIRE(te_prefill(e[i], q, prompt, np, lg[i] + (size_t)q * V, 0, err, sizeof err) == 0);
        }
    int diff_logits = -1, diff_tier = -1;
    for (int s = 0; s < n_gen; s++) {
        int32_t tok[2];
        for (int q = 0; q < n_seq; q++) tok[q] = tkv_argmax(lg[0] + (size_t)q * V, V);
        for (int i = 0; i < N_ENG; i++) REQUIRE(te_decode(e[i], seqs, tok, n_seq, lg[i], err, sizeof err) == 0);
        for (int i = 1; i < N_ENG; i++) {
            if (diff_logits < 0 && memcmp(lg[0], lg[i], (size_t)V * n_seq * sizeof(float))) diff_logits = s;
            for (int q = 0; q < n_seq && diff_tier < 0; q++)
                for (int p = 0; p < kv_seq_len(te_kv(e[0]), q); p++)
                    if (kv_token_tier(te_kv(e[0]), q, p) != kv_token_tier(te_kv(e[i]), q, p)) {
                        printf("    %s, step %d: sequence %d position %d in tier %d, the reference's in %d\n", name[i], s, q,
                               p, kv_token_tier(te_kv(e[i]), q, p), kv_token_tier(te_kv(e[0]), q, p));
                        diff_tier = s;
                        break;
                    }
        }
    }
    CHECKF(diff_logits < 0, "logits differ from the reference's at step %d", diff_logits);
    CHECKF(diff_tier < 0, "tiers differ from the reference's at step %d", diff_tier);
    /* the scores themselves, bit for bit, once current on the host */
    for (int i = 1; i < N_ENG; i++)
        for (int q = 0; q < n_seq; q++) {
            kv_cache *kv = te_kv(e[i]);
            kv_seq *a = &te_kv(e[0])->seq[q], *b = &kv->seq[q];
            kv_scores_host(kv, b);
            CHECKF(a->len == b->len && !memcmp(a->score, b->score, (size_t)a->len * sizeof(double)),
                   "%s: sequence %d's scores differ from the reference's", name[i], q);
        }
    kv_stats st;
    kv_sync(te_kv(e[0]));
    kv_get_stats(te_kv(e[0]), -1, &st);
    uint64_t reads, ups, bytes = kv_scores_read_back(te_kv(e[1]), &reads, &ups);
    printf("    %s: %d sequence(s)%s, %d steps: %lld re-tierings, %lld sync demotions, %lld evicted, %lld in T2; scores "
           "read back %llu times (%llu bytes), sent up %llu times\n",
           strrchr(path, '/') ? strrchr(path, '/') + 1 : path, n_seq, shared ? " sharing T0" : "", n_gen, (long long)st.retiers, (long long)st.sync_demotions,
           (long long)st.tokens_evicted, (long long)st.tokens[BE_T2], (unsigned long long)reads, (unsigned long long)bytes,
           (unsigned long long)ups);
    /* the configuration is lossy (else the tiers could not change a logit), the device's scores were
     * read back, and each sequence's went up once, before its first update there */
    CHECK(st.retiers > 0 && st.tokens_evicted > 0 && st.tokens[BE_T2] > 0 && reads > 0 && ups == (uint64_t)n_seq);
    uint64_t r2, u2, b2 = kv_scores_read_back(te_kv(e[2]), &r2, &u2);
    CHECKF(b2 == 0 && r2 == 0 && u2 == 0, "host scores: %llu bytes of scores read back", (unsigned long long)b2);
    for (int i = 0; i < N_ENG; i++) te_close(e[i]), free(lg[i]);
}

TEST(scores_device_same_tiers_one_sequence) {
    NEED(QWEN2);
    run(t_shared(QWEN2), 1, 0, 120);
}

/* two sequences in one batch under one T0 budget: the shared re-tiering ranks both (each one's
 * scores read back) and a demotion for a new token looks at every live sequence's lowest */
TEST(scores_device_same_tiers_shared_budget) {
    NEED(QWEN2);
    run(t_shared(QWEN2), 2, 1, 100);
}

/* The fixture's weight per addition, 1 / (2 layers x 4 heads), is a power of two: its additions are
 * exact in any order, so only a model whose isn't can tell the order apart (24 x 14 here). */
TEST(scores_device_same_tiers_real_model) {
    const char *path = t_need_model("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf");
    if (!path) return;
    run(path, 1, 0, 40);
}

/* The CPU reference of the backend op (what the GPU op checks compare with): two tokens sharing one
 * score array add in token order, a NULL array is skipped, positions past n_pos stay. */
TEST(scores_device_op_reference) {
    be_backend *b;
    char err[256];
    REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 1}, &b, err, sizeof err) == 0);
    REQUIRE(b->ops->score_add != NULL);
    enum { H = 3, S = 8 };
    float mass[3 * H * S];
    for (int i = 0; i < 3 * H * S; i++) mass[i] = (float)((i * 37) % 11) / 7.0f;
    double a[S] = {0.5, 0, 0, 0, 0, 0, 0, 9}, w = 1.0 / 7.0;
    double *ptr[3] = {a, NULL, a};
    int n_pos[3] = {5, 8, 7};
    b->ops->score_add(b, ptr, n_pos, 3, mass, H, S, w);
    int bad = 0;
    double want[S] = {0.5, 0, 0, 0, 0, 0, 0, 9};
    for (int t = 0; t < 3; t += 2)
        for (int i = 0; i < n_pos[t]; i++)
            for (int h = 0; h < H; h++) want[i] += w * mass[(t * H + h) * S + i];
    for (int i = 0; i < S; i++) bad += memcmp(&a[i], &want[i], sizeof(double)) != 0;
    CHECKF(bad == 0, "%d of %d scores differ from the additions in order", bad, S);
    CHECK(a[7] == 9);
    be_close(b);
}
