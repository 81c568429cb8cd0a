/* test_cuda_graph.c — a forward call as a CUDA graph (src/backend/cuda/cuda_graph.cu) against the
 * same calls op by op (TIERKV_CUDA_GRAPH=off): two engines on the GPU decode greedily in lockstep,
 * and every logits row must be the same bits. Under full every call is captured and none breaks;
 * the kept graphs are updated, not instantiated again each step. Under the hierarchy the steps with
 * moves in flight run op by op and the rest as graphs, none broken (its STAGE pool is there for T2,
 * but a bracketed call reads no STAGE row), with the same bits; and two sequences decoding together
 * (the matmuls' multi-token kernels inside the graph). Needs a GPU (skips without one, and in a
 * build without CUDA); the bracket placement itself is checked on the CPU (test_gpu_order.c,
 * gpu_order_step_brackets). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/kv_state.h" /* the engine's backend */
#include "t.h"
#include "t_engine.h"
#include "t_ref.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

#define QWEN2 "fixtures/models/qwen2-Q4_K_M.gguf"

#ifdef TKV_CUDA
/* an engine of the model at path with these KV options on the GPU, graphs on or off, an expert FFN
 * routed on the host (TIERKV_CUDA_ROUTE=host) or the device; NULL with the reason in why */
static te_engine *open_gpu_at(const char *path, const kv_options *kv, int n_seq, int graphs, int route_host, char *why,
                              size_t n) {
    te_options o;
    te_options_default(&o);
    o.n_threads = 1, o.n_ctx = 512, o.n_seq = n_seq, o.backend = "cuda", o.kv = *kv;
    char *saved = t_env_save("TIERKV_CUDA_GRAPH"), *saved_route = t_env_save("TIERKV_CUDA_ROUTE");
    setenv("TIERKV_CUDA_GRAPH", graphs ? "on" : "off", 1);
    setenv("TIERKV_CUDA_ROUTE", route_host ? "host" : "device", 1);
    te_engine *e = NULL;
    if (te_open(path, &o, &e, why, n)) e = NULL;
    t_env_restore("TIERKV_CUDA_GRAPH", saved);
    t_env_restore("TIERKV_CUDA_ROUTE", saved_route);
    return e;
}
/* engine i (0: graphs off, 1: on) of these KV options on the fixture */
static te_engine *open_gpu(const kv_options *kv, int n_seq, int graphs, char *why, size_t n) {
    return open_gpu_at(t_shared(QWEN2), kv, n_seq, graphs, 0, why, n);
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

#ifdef TKV_CUDA
/* the rows of two engines' logits: the largest difference over the largest |logit| into *worst,
 * rows whose greedy token differs into *argmax, rows of the same bits into *same */
static void moe_compare(const float *a, const float *b, int rows, int V, double *worst, int *argmax, int *same) {
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * V, *y = b + (size_t)r * V;
        double top = 0, d = 0;
        for (int i = 0; i < V; i++) {
            top = fabs(x[i]) > top ? fabs(x[i]) : top;
            double di = isfinite(y[i]) ? fabs((double)x[i] - y[i]) : INFINITY;
            d = di > d ? di : d;
        }
        d = top > 0 ? d / top : d;
        *worst = d > *worst ? d : *worst;
        *argmax += tkv_argmax(x, V) != tkv_argmax(y, V);
        *same += !memcmp(x, y, (size_t)V * 4);
    }
}
#endif

/* A Qwen3 MoE model (the generated test shape: 8 experts, 2 a token) on the GPU, three engines in
 * lockstep: experts routed on the host with graphs asked for, on the device op by op, and on the
 * device with graphs. Two sequences: prompts of 20 tokens in chunks of 8 (routed on the device where
 * it is asked) and 12 (a call of more than 8 tokens groups its tokens by expert on the host), then
 * 16 steps of both together (4 pairs a layer). The device's routing gives the host's logits up to
 * its expf (within 1e-4 of the largest logit, the same greedy tokens; with the host's expf, the same
 * bits); the graphs give the device's op-by-op bits. A call routed on the host is never captured (it
 * reads the router's logits back); one routed on the device always is, and none breaks (the experts'
 * tables were made before the first step). */
TEST(cuda_moe_decode) {
#ifndef TKV_CUDA
    SKIP("built without CUDA (make cuda)");
#else
    const char *path = t_gen_model("test-qwen3moe", "Q8_0");
    REQUIRE(path);
    kv_options kv;
    kv_options_default(&kv);
    te_engine *e[3] = {open_gpu_at(path, &kv, 2, 1, 1, g_why, sizeof g_why), NULL, NULL};
    if (e[0]) e[1] = open_gpu_at(path, &kv, 2, 0, 0, g_why, sizeof g_why);
    if (e[1]) e[2] = open_gpu_at(path, &kv, 2, 1, 0, g_why, sizeof g_why);
    if (!e[2]) {
        te_close(e[0]), te_close(e[1]);
        SKIP(g_why);
    }
    char why[512];
    int V = te_n_vocab(e[0]), rc = 0, call = 0, graph_diff = -1, argmax = 0, same = 0, rows = 0, seqs[2] = {0, 1};
    double worst = 0;
    float *lg[3];
    for (int i = 0; i < 3; i++) lg[i] = malloc((size_t)2 * V * 4);
    int32_t prompt[20], tok[2];
    for (int q = 0; q < 2 && !rc; q++) {
        for (int i = 0; i < 20; i++) prompt[i] = (int32_t)((i * 7919 + 13 + q * 101) % V);
        for (int c = 0; c < 2 && !rc; c++, call++) {
            int at = c ? 8 : 0, n = c ? 12 : 8;
            for (int i = 0; i < 3 && !rc; i++)
                rc = te_prefill(e[i], q, prompt + at, n, lg[i] + (size_t)q * V, 0, why, sizeof why);
            if (rc) break;
            moe_compare(lg[0] + (size_t)q * V, lg[1] + (size_t)q * V, 1, V, &worst, &argmax, &same), rows++;
            if (graph_diff < 0 && memcmp(lg[1] + (size_t)q * V, lg[2] + (size_t)q * V, (size_t)V * 4))
                graph_diff = call;
        }
    }
    for (int s = 0; s < 16 && !rc; s++, call++) {
        for (int q = 0; q < 2; q++) tok[q] = tkv_argmax(lg[1] + (size_t)q * V, V);
        for (int i = 0; i < 3 && !rc; i++) rc = te_decode(e[i], seqs, tok, 2, lg[i], why, sizeof why);
        if (rc) break;
        moe_compare(lg[0], lg[1], 2, V, &worst, &argmax, &same), rows += 2;
        if (graph_diff < 0 && memcmp(lg[1], lg[2], (size_t)2 * V * 4)) graph_diff = call;
    }
    CHECKF(rc == 0, "an engine failed: %s", why);
    cuda_graph_stats st[3];
    for (int i = 0; i < 3; i++) cuda_graph_counts(te_kv(e[i])->be, &st[i]);
    report("experts routed on the host", &st[0]);
    report("experts routed on the device", &st[2]);
    printf("    routed on the device against the host: largest difference %.2g of the largest logit, %d of %d rows "
           "the same bits, %d greedy tokens differ\n", worst, same, rows, argmax);
    CHECKF(worst <= 1e-4 && argmax == 0, "device routing: %.3g of the largest logit, %d greedy tokens differ", worst,
           argmax);
    CHECKF(graph_diff == -1, "graph logits differ from op by op at call %d", graph_diff);
    CHECKF(st[0].captures == 0, "routed on the host: %llu calls captured", (ull)st[0].captures);
    CHECKF(st[2].captures == 18 && st[2].breaks == 0, "routed on the device: %llu of 18 calls captured, %llu broken",
           (ull)st[2].captures, (ull)st[2].breaks);
    for (int i = 0; i < 3; i++) te_close(e[i]), free(lg[i]);
#endif
}
