/* test_kv_flags.c — the shared KV flag parser (tools/kv_flags.c) and `tierkv plan` on named shapes. */
#include <stdio.h>
#include <string.h>

#include "../tools/cmds.h"
#include "../tools/kv_flags.h"
#include "t.h"

static int parse1(tkv_kv_params *o, const char *a, const char *b, int *consumed_to) {
    char *argv[3] = {(char *)a, (char *)b, NULL};
    int i = 0;
    char err[256];
    int r = kv_flags_parse(o, b ? 2 : 1, argv, &i, err, sizeof err);
    *consumed_to = i;
    return r;
}

TEST(kv_flags_parse_values) {
    tkv_kv_params o;
    tkv_kv_params_default(&o);
    int to;
    CHECK(parse1(&o, "--policy", "hierarchy", &to) == 1 && to == 1 && o.policy == TKV_POLICY_HIERARCHY);
    CHECK(parse1(&o, "--hbm-ratio=0.25", NULL, &to) == 1 && to == 0 && o.t0_ratio == 0.25);
    CHECK(parse1(&o, "--hbm-ratio", "1.5", &to) == -1);
    CHECK(parse1(&o, "--t2-ratio", "-0.1", &to) == -1);
    CHECK(parse1(&o, "--hbm-budget", "256MiB", &to) == 1 && o.t0_budget_bytes == 256ull << 20);
    CHECK(parse1(&o, "--hbm-budget", "1.5GB", &to) == 1 && o.t0_budget_bytes == 1500000000ull);
    CHECK(parse1(&o, "--hbm-budget", "4096", &to) == 1 && o.t0_budget_bytes == 4096);
    CHECK(parse1(&o, "--hbm-budget", "100tok", &to) == -1);
    CHECK(parse1(&o, "--hbm-budget", "lots", &to) == -1);
    CHECK(parse1(&o, "--delta", "0", &to) == -1);
    CHECK(parse1(&o, "--window", "16", &to) == 1 && o.window == 16);
    CHECK(parse1(&o, "--staged", NULL, &to) == 1 && o.staged == 1);
    CHECK(parse1(&o, "--stage-t2", NULL, &to) == 1 && o.stage_t2 == 1);
    CHECK(parse1(&o, "--sync-transfers", NULL, &to) == 1 && o.sync_transfers == 1);
    CHECK(parse1(&o, "--unpin-prompt", NULL, &to) == 1 && o.unpin_prompt == 1);
    CHECK(parse1(&o, "--unpin-prompt=1", NULL, &to) == -1);
    CHECK(o.host_scores == 0 && parse1(&o, "--host-scores", NULL, &to) == 1 && o.host_scores == 1);
    CHECK(parse1(&o, "--host-scores=0", NULL, &to) == -1);
    /* sessions share prompt prefixes only with the prompt pinned (eval and serve ask this) */
    o.policy = TKV_POLICY_HIERARCHY;
    CHECK(!tkv_kv_shares_prefix(&o));
    o.unpin_prompt = 0;
    CHECK(tkv_kv_shares_prefix(&o));
    CHECK(parse1(&o, "--policy", "lru", &to) == -1);
    CHECK(parse1(&o, "--temperature", "0.7", &to) == 0 && to == 0);
    CHECK(parse1(&o, "--sinks", NULL, &to) == -1);
    /* decimal only: strtod alone takes leading blanks and hex floats */
    CHECK(parse1(&o, "--hbm-ratio", "0x1p-1", &to) == -1);
    CHECK(parse1(&o, "--hbm-ratio", " 0.5", &to) == -1);
    CHECK(parse1(&o, "--delta", " 8", &to) == -1);
    CHECK(parse1(&o, "--hbm-budget", "0x100", &to) == -1);
    CHECK(parse1(&o, "--hbm-budget", " 4096", &to) == -1);
    CHECK(parse1(&o, "--evict-ratio", "3e-2", &to) == 1 && o.evict_ratio == 3e-2);
    CHECK(strstr(kv_flags_usage(), "--hbm-budget") != NULL);
}

TEST(kv_plan_shapes) {
    FILE *keep = stdout;
    stdout = fopen("/dev/null", "w");
    char *ok[] = {"plan", "--shape", "llama-70b", "--batch", "4", "--ctx", "8192", "--hbm-ratio", "0.2", "--t2-ratio", "0.3", NULL};
    char *bad_shape[] = {"plan", "--shape", "gpt-5", NULL};
    char *too_small[] = {"plan", "--shape", "qwen2.5-0.5b", "--hbm-budget", "1KB", NULL};
    int r1 = cmd_plan(11, ok), r2 = cmd_plan(3, bad_shape), r3 = cmd_plan(5, too_small);
    fclose(stdout);
    stdout = keep;
    CHECK(r1 == 0);
    CHECK(r2 == 2);
    CHECK(r3 == 1);
}

/* Which options put tokens in T2 (when the codec matters), and the codec a backend uses by default:
 * a codec each backend can store (CUDA's records: q8h only). */
TEST(kv_t2_default_and_use) {
    tkv_kv_params p;
    tkv_kv_params_default(&p);
    CHECK(!tkv_kv_uses_t2(&p));
    p.policy = TKV_POLICY_QUANT;
    CHECK(tkv_kv_uses_t2(&p));
    p.policy = TKV_POLICY_HIERARCHY;
    CHECK(!tkv_kv_uses_t2(&p));
    p.t2_ratio = 0.4;
    CHECK(tkv_kv_uses_t2(&p));
    p.policy = TKV_POLICY_EVICT;
    CHECK(!tkv_kv_uses_t2(&p));
    CHECK(!strcmp(tkv_t2_codec_default("cuda"), "q8h") && !strcmp(tkv_t2_codec_default("cpu"), "q8bh"));
    CHECK(tkv_t2_codec_known(tkv_t2_codec_default("cpu")) && !strcmp(tkv_t2_codec_default(NULL), tkv_t2_codec_default("cpu")));
}
