/* test_cuda_graph.c — a forward call as a CUDA graph (src/backend/cuda/cuda_graph.cu) against the
 * same calls op by op (TIERKV_CUDA_GRAPH=off): two engines on the GPU decode greedily in lockstep,
 * and every logits row must be the same bits. Under full every call is captured and none breaks;
 * the kept graphs are updated, not instantiated again each step. Under the hierarchy the steps with
 * moves in flight run op by op and the rest as graphs, none broken (its STAGE pool is there for T2,
 * but a bracketed call reads no STAGE row), with the same bits; and two sequences decoding together
 * (the matmuls' multi-token kernels inside the graph). Needs a GPU (skips without one, and in a
 * build without CUDA); the bracket placement itself is checked on the CPU (test_gpu_order.c,
 * gpu_order_step_brackets). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/kv_state.h" /* the engine's backend */
#include "t.h"
#include "t_engine.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define QWEN2 "fixtures/models/qwen2-Q4_K_M.gguf"

#ifdef TKV_CUDA
/* engine i (0: graphs off, 1: on) of these KV options; NULL with the reason printed */
static te_engine *open_gpu(const kv_options *kv, int n_seq, int graphs, char *why, size_t n) {
    te_options o;
    te_options_default(&o);
    o.n_threads = 1, o.n_ctx = 512, o.n_seq = n_seq, o.backend = "cuda", o.kv = *kv;
    char *saved = t_env_save("TIERKV_CUDA_GRAPH");
    setenv("TIERKV_CUDA_GRAPH", graphs ? "on" : "off", 1);
    te_engine *e = NULL;
    if (te_open(t_shared(QWEN2), &o, &e, why, n)) e = NULL;
    t_env_restore("TIERKV_CUDA_GRAPH", saved);
    return e;
}

static char g_why[512]; /* why the engines did not open */
typedef unsigned long long ull;

static void report(const char *name, const cuda_graph_stats *st) {
    printf("    %s: %llu captured, %llu updated, %llu instantiated, %llu broken, %llu updates refused (first: "
           "result %d)\n", name, (ull)st->captures, (ull)st->updated, (ull)st->instantiated, (ull)st->breaks,
           (ull)st->refused, st->refused_why);
}

/* Each of n_seq sequences a prompt of 45 tokens in chunks of 8 (the last of 5), then n_gen greedy
 * steps of all of them together, on both engines; returns the first call whose logits differ (-1:
 * none, -2: an engine failed); *st the graphs'. */
static int lockstep(const kv_options *kv, int n_seq, int n_gen, cuda_graph_stats *st, int *skipped) {
    char why[512];
    te_engine *e[2] = {open_gpu(kv, n_seq, 0, g_why, sizeof g_why), NULL};
    if (e[0]) e[1] = open_gpu(kv, n_seq, 1, g_why, sizeof g_why);
    if (!e[0] || !e[1]) {
        te_close(e[0]);
        *skipped = 1;
        return -2;
    }
    int V = te_n_vocab(e[0]), diff = -1, rc = 0, call = 0, seqs[2] = {0, 1};
    size_t row = (size_t)V * 4;
    float *lg[2] = {malloc(2 * row), malloc(2 * row)};
    int32_t prompt[45], tok[2];
    for (int q = 0; q < n_seq; q++) {
        for (int i = 0; i < 45; i++) prompt[i] = (int32_t)((i * 7919 + 13 + q * 101) % V);
        for (int at = 0; at < 45 && !rc; at += 8, call++) {
            int n = 45 - at < 8 ? 45 - at : 8;
            for (int i = 0; i < 2 && !rc; i++)
                rc = te_prefill(e[i], q, prompt + at, n, lg[i] + (size_t)q * V, 0, why, sizeof why) ? -2 : 0;
            if (!rc && diff < 0 && memcmp(lg[0] + (size_t)q * V, lg[1] + (size_t)q * V, row)) diff = call;
        }
    }
    for (int s = 0; s < n_gen && !rc; s++, call++) {
        for (int q = 0; q < n_seq; q++) tok[q] = tkv_argmax(lg[0] + (size_t)q * V, V);
        for (int i = 0; i < 2 && !rc; i++) rc = te_decode(e[i], seqs, tok, n_seq, lg[i], why, sizeof why) ? -2 : 0;
        if (!rc && diff < 0 && memcmp(lg[0], lg[1], (size_t)n_seq * row)) diff = call;
    }
    if (rc) fprintf(stderr, "    %s\n", why);
    cuda_graph_counts(te_kv(e[1])->be, st);
    cuda_graph_stats off;
    cuda_graph_counts(te_kv(e[0])->be, &off);
    if (off.captures) rc = -2, fprintf(stderr, "    TIERKV_CUDA_GRAPH=off captured %llu calls\n", (ull)off.captures);
    for (int i = 0; i < 2; i++) te_close(e[i]), free(lg[i]);
    return rc ? rc : diff;
}
#endif

TEST(cuda_graph_decode) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    NEED(QWEN2);
    const char *env = getenv("TIERKV_CUDA_GRAPH");
    if (env && !strcmp(env, "off")) SKIP("TIERKV_CUDA_GRAPH=off");
    kv_options kv;
    kv_options_default(&kv);
    cuda_graph_stats st;
    int skipped = 0;
    int d = lockstep(&kv, 1, 80, &st, &skipped);
    if (skipped) SKIP(g_why);
    report("full", &st);
    CHECKF(d == -1, "full: graph logits differ from op by op at call %d (-2: engine failure)", d);
    CHECKF(st.captures == 86 && st.breaks == 0, "full: %llu of 86 calls captured, %llu broken", (ull)st.captures,
           (ull)st.breaks);
    CHECKF(st.updated + st.instantiated == st.captures && st.instantiated <= 12,
           "full: %llu captures launched as %llu updates and %llu instantiations", (ull)st.captures, (ull)st.updated,
           (ull)st.instantiated);

    kv.policy = KV_POLICY_HIERARCHY, kv.t0_ratio = 0.3, kv.delta = 5, kv.window = 16, kv.unpin_prompt = 1;
    d = lockstep(&kv, 1, 80, &st, &skipped);
    report("hierarchy", &st);
    CHECKF(d == -1, "hierarchy: graph logits differ from op by op at call %d (-2: engine failure): %s", d, g_why);
    CHECKF(st.captures > 40 && st.captures < 86 && st.breaks == 0, "hierarchy: %llu of 86 calls captured, %llu broken",
           (ull)st.captures, (ull)st.breaks);

    /* two sequences decoding together (the kernels' multi-token path in the graph) */
    kv_options_default(&kv);
    d = lockstep(&kv, 2, 40, &st, &skipped);
    report("full, two sequences", &st);
    CHECKF(d == -1, "two sequences: graph logits differ from op by op at call %d (-2: engine failure)", d);
    CHECKF(st.captures == 52 && st.breaks == 0, "two sequences: %llu of 52 calls captured, %llu broken",
           (ull)st.captures, (ull)st.breaks);
#endif
}
