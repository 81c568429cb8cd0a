/* test_limits.c — resource limits: a model, forward buffers or a KV sequence that cannot fit in the
 * memory available is refused with the numbers before anything large is allocated, and what is
 * refused leaves nothing behind. The machine is made small with TIERKV_MEM_AVAILABLE (base/meminfo),
 * which every check reads at the moment it runs. Needs the fixture model (skips without it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/meminfo.h"
#include "t.h"
#include "tierkv.h"

#define FIXTURE "fixtures/models/qwen2-Q8_0.gguf"

static void set_avail(uint64_t bytes) {
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)bytes);
    setenv("TIERKV_MEM_AVAILABLE", v, 1);
}

TEST(limits_mem_available_override) {
    set_avail(12345);
    CHECK(tkv_mem_available() == 12345);
    setenv("TIERKV_MEM_AVAILABLE", "-5", 1); /* not a byte count: the machine's own number */
    CHECK(tkv_mem_available() != (uint64_t)-5);
    unsetenv("TIERKV_MEM_AVAILABLE");
    uint64_t a = tkv_mem_available();
    CHECK(a > 0);
}

TEST(limits_model_refused_when_the_rewrite_cannot_fit) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture model missing: " FIXTURE);
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    tkv_model *m = NULL;
    char err[512] = "";
    set_avail(1000);
    CHECK(tkv_model_open(t_shared(FIXTURE), &mp, &m, err, sizeof err) == TKV_ERR && !m);
    CHECKF(strstr(err, "reordering the weights") && strstr(err, "MiB available") && strstr(err, "--keep-layout"), "%s", err);
    mp.keep_layout = 1; /* runs the mapped file as it is: nothing to hold beyond the page cache */
    CHECKF(tkv_model_open(t_shared(FIXTURE), &mp, &m, err, sizeof err) == 0, "%s", err);
    tkv_model_close(m);
    unsetenv("TIERKV_MEM_AVAILABLE");
}

TEST(limits_forward_buffers_refused) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture model missing: " FIXTURE);
    tkv_model *m = NULL;
    char err[512] = "";
    REQUIRE(tkv_model_open(t_shared(FIXTURE), NULL, &m, err, sizeof err) == 0);
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_ctx = 1 << 20; /* the attention-weights buffer alone is ATT_SUB x heads x 1M floats */
    tkv_session *s = NULL;
    set_avail(64u << 20);
    CHECK(tkv_session_open(m, &sp, &s, err, sizeof err) == TKV_ERR && !s);
    CHECKF(strstr(err, "forward: the buffers for a batch of 64 and a context of 1048576 need") && strstr(err, "64.0 MiB available"),
           "%s", err);
    sp.max_ctx = 4096;
    CHECKF(tkv_session_open(m, &sp, &s, err, sizeof err) == 0, "%s", err);
    tkv_session_close(s);
    unsetenv("TIERKV_MEM_AVAILABLE");
    tkv_model_close(m);
}

TEST(limits_kv_sequence_admission_by_memory) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture model missing: " FIXTURE);
    tkv_model *m = NULL;
    char err[512] = "";
    REQUIRE(tkv_model_open(t_shared(FIXTURE), NULL, &m, err, sizeof err) == 0);
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_ctx = 8192;
    tkv_session *s = NULL;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    /* one sequence of 4096 positions at full length: K and V in f16 over every layer, and metadata */
    uint64_t one = 4096ull * ((uint64_t)mi.n_layer * 2 * mi.n_head_kv * mi.head_dim * 2 + 64);
    set_avail(one + one / 2);
    int a = -1, b = -1, c = -1;
    CHECKF(tkv_seq_open(s, 4096, 4, &a, err, sizeof err) == 0, "%s", err);
    CHECK(tkv_seq_open(s, 4096, 4, &b, err, sizeof err) == TKV_EFULL && b == -1); /* fits once a leaves */
    CHECKF(strstr(err, "may need") && strstr(err, "the 1 live sequences may take"), "%s", err);
    CHECK(tkv_seq_open(s, 1024, 4, &c, err, sizeof err) == 0); /* a shorter one fits beside it */
    tkv_seq_close(s, c);
    tkv_seq_close(s, a);
    CHECKF(tkv_seq_open(s, 4096, 4, &b, err, sizeof err) == 0, "%s", err);
    int32_t ids[4] = {1, 2, 3, 4};
    float *logits = malloc((size_t)mi.n_vocab * sizeof(float));
    CHECKF(tkv_prefill(s, b, ids, 4, logits, 0, err, sizeof err) == 0, "%s", err); /* what is admitted runs */
    tkv_seq_close(s, b);
    set_avail(one / 2); /* alone and still too long: bad input, not a retry */
    CHECK(tkv_seq_open(s, 4096, 4, &b, err, sizeof err) == TKV_ERR && b == -1);
    CHECKF(strstr(err, "a sequence of 4096 positions may need") && !strstr(err, "live sequences"), "%s", err);
    unsetenv("TIERKV_MEM_AVAILABLE");
    free(logits);
    tkv_session_close(s);
    tkv_model_close(m);
}
