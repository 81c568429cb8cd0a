/* test_baselines.c — the eviction baselines (src/kv/baselines.h) on hand-worked cases whose keep
 * sets are written out below with the reason, plus randomised budget invariants, keep-all at a
 * budget >= n, and the tie rule (higher score first, then lower position). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/baselines.h"
#include "t.h"

/* keep[0..n-1] equals the set want[0..nw-1]. */
static int keep_is(const uint8_t *keep, int n, const int *want, int nw) {
    uint8_t w[256] = {0};
    for (int i = 0; i < nw; i++) w[want[i]] = 1;
    for (int j = 0; j < n; j++)
        if ((keep[j] != 0) != (w[j] != 0)) {
            fprintf(stderr, "    keep mismatch at %d: got {", j);
            for (int k = 0; k < n; k++)
                if (keep[k]) fprintf(stderr, " %d", k);
            fprintf(stderr, " }\n");
            return 0;
        }
    return 1;
}
#define KEEP_IS(keep, n, ...)                                                                \
    CHECK(keep_is(keep, n, (const int[]){__VA_ARGS__},                                       \
                  (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int))))

static int count(const uint8_t *keep, int n) {
    int c = 0;
    for (int j = 0; j < n; j++) c += keep[j] != 0;
    return c;
}

/* xorshift: reproducible without libc rand state */
static uint32_t rng_next(uint32_t *s) {
    uint32_t x = *s;
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    return *s = x;
}
static float rng_unit(uint32_t *s) { return (float)(rng_next(s) >> 8) / 16777216.0f; }
static int rng_int(uint32_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint32_t)(hi - lo + 1)); }

/* A random softmax-like row over the positions j < n that `held` marks (NULL: all). */
static void rand_att(uint32_t *s, float *row, int n, const uint8_t *held) {
    double z = 0;
    for (int j = 0; j < n; j++) {
        row[j] = (!held || held[j]) ? rng_unit(s) * rng_unit(s) + 1e-3f : 0;
        z += row[j];
    }
    for (int j = 0; j < n; j++) row[j] = (float)(row[j] / z);
}

TEST(baselines_budget_from_ratio) {
    CHECK(kv_bl_budget_from_ratio(1.0, 37) == 37);  /* ratio 1.0 keeps everything */
    CHECK(kv_bl_budget_from_ratio(2.0, 37) == 37);
    CHECK(kv_bl_budget_from_ratio(0.5, 7) == 3);    /* floor */
    CHECK(kv_bl_budget_from_ratio(0.29, 100) == 29); /* 0.29*100 = 28.999999999999996 in double */
    CHECK(kv_bl_budget_from_ratio(0.0, 10) == 0);
    CHECK(kv_bl_budget_from_ratio(-1.0, 10) == 0);
}

TEST(baselines_streaming_hand) {
    uint8_t keep[16];
    char err[128];
    /* n=10, budget 6, sinks 2: the 2 sinks {0,1} and the last 6-2=4 positions {6,7,8,9}. */
    REQUIRE(kv_bl_streaming_select(10, 6, 2, keep, err, sizeof err) == 0);
    KEEP_IS(keep, 10, 0, 1, 6, 7, 8, 9);
    /* default sinks 4, budget 5: sinks {0..3} and only the newest token {9}. */
    REQUIRE(kv_bl_streaming_select(10, 5, 4, keep, err, sizeof err) == 0);
    KEEP_IS(keep, 10, 0, 1, 2, 3, 9);
    /* budget >= n: everything, even with budget <= sinks */
    REQUIRE(kv_bl_streaming_select(3, 3, 4, keep, err, sizeof err) == 0);
    KEEP_IS(keep, 3, 0, 1, 2);
    /* budget that cannot hold the sinks plus one recent token is refused (authors' assert) */
    memset(keep, 7, sizeof keep);
    CHECK(kv_bl_streaming_select(10, 4, 4, keep, err, sizeof err) == -1);
    CHECK(strstr(err, "sink") != NULL);
    CHECK(keep[0] == 7); /* untouched on error */
}

/* H2O on one head with exact binary fractions, so sums are exact and the tie below is a tie. */
TEST(baselines_h2o_hand) {
    kv_bl_h2o s;
    char err[128];
    REQUIRE(kv_bl_h2o_init(&s, 8, err, sizeof err) == 0);
    static const float rows[6][6] = {
        {1},
        {0.5f, 0.5f},
        {0.25f, 0.5f, 0.25f},
        {0.25f, 0.125f, 0.125f, 0.5f},
        {0.25f, 0.25f, 0.25f, 0.125f, 0.125f},
        {0.25f, 0.25f, 0.125f, 0.125f, 0.125f, 0.125f},
    };
    for (int q = 0; q < 6; q++) kv_bl_h2o_accumulate(&s, rows[q], 8, 1, q + 1, KV_BL_GQA_MEAN);
    /* column sums: 2.5, 1.625, 0.75, 0.75, 0.25, 0.125 */
    CHECK(s.score[0] == 2.5f && s.score[1] == 1.625f && s.score[2] == 0.75f &&
          s.score[3] == 0.75f && s.score[4] == 0.25f && s.score[5] == 0.125f);
    CHECK(s.n == 6 && s.n_kept == 6);
    /* budget 5, recent = 5/2 = 2 -> {4,5} protected. One eviction among {0,1,2,3}: 2 and 3 tie
     * at 0.75, the tie rule evicts the higher position, 3. */
    int recent = kv_bl_h2o_recent(5, 0.5);
    CHECK(recent == 2);
    CHECK(kv_bl_h2o_enforce(&s, 5, recent, err, sizeof err) == 1);
    KEEP_IS(s.keep, 6, 0, 1, 2, 4, 5);
    CHECK(s.score[3] == 0);
    /* decode step q=6 (position 3 is evicted: its weight is 0 and must not count) */
    const float r6[7] = {0.5f, 0, 0.125f, 0.25f /* ignored: evicted */, 0.125f, 0.125f, 0.125f};
    kv_bl_h2o_accumulate(&s, r6, 8, 1, 7, KV_BL_GQA_MEAN);
    CHECK(s.score[3] == 0);
    /* scores 3.0, 1.625, 0.875, -, 0.375, 0.25, 0.125; recent {5,6}; the lowest outside the
     * window is 4 (0.375), just out of the window: the older heavy hitter 2 stays. */
    CHECK(kv_bl_h2o_enforce(&s, 5, 2, err, sizeof err) == 1);
    KEEP_IS(s.keep, 7, 0, 1, 2, 5, 6);
    /* budget >= held: nothing evicted */
    CHECK(kv_bl_h2o_enforce(&s, 7, 3, err, sizeof err) == 0);
    CHECK(kv_bl_h2o_enforce(&s, 0, 0, err, sizeof err) == -1);
    CHECK(kv_bl_h2o_enforce(&s, 4, 5, err, sizeof err) == -1); /* recent > budget */
    kv_bl_h2o_free(&s);
}

/* GQA: two q heads share the kv head. Head 0 is peaked on 0, head 1 on 2, both give 0.375 to 1.
 * MEAN: 0.25, 0.375, 0.25 -> evict 2 (tie 0/2: higher position). MAX: 0.5, 0.375, 0.5 -> evict 1. */
TEST(baselines_h2o_gqa) {
    const float att[2][4] = {{0.5f, 0.375f, 0, 0.125f}, {0, 0.375f, 0.5f, 0.125f}};
    char err[128];
    for (int g = 0; g < 2; g++) {
        kv_bl_h2o s;
        REQUIRE(kv_bl_h2o_init(&s, 4, err, sizeof err) == 0);
        kv_bl_gqa gqa = g ? KV_BL_GQA_MAX : KV_BL_GQA_MEAN;
        kv_bl_h2o_accumulate(&s, &att[0][0], 4, 2, 4, gqa);
        CHECK(kv_bl_h2o_enforce(&s, 3, 1, err, sizeof err) == 1);
        if (gqa == KV_BL_GQA_MEAN) KEEP_IS(s.keep, 4, 0, 1, 3);
        else KEEP_IS(s.keep, 4, 0, 2, 3);
        kv_bl_h2o_free(&s);
    }
}

/* R-KV keys: k0 = k1 = k3 = e1 (a repeated thought), k2 = e2, k4 = e3, k5 = e4. Cosines are 1
 * within {0,1,3}, 0 otherwise. Each row zeroes its most recent near-duplicate: row 0 -> col 3,
 * row 1 -> col 3, row 3 -> col 1; rows 2, 4, 5 have none and zero col 0 (already 0). Left: S[0][1],
 * S[1][0], S[3][0] = 1. Column means over 6 rows: 1/3, 1/6, 0, 0, 0, 0; redundancy = softmax:
 * red0 = e^(1/3)/Z = 0.2122, red1 = e^(1/6)/Z = 0.1796, red2 = red3 = 1/Z = 0.1520
 * (Z = e^(1/3) + e^(1/6) + 4). The newest copy (3) counts as non-redundant, the older copies
 * (0, 1) as redundant. */
static float rkv_keys[6][4] = {{1, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0},
                               {1, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};

static int rkv_run(const kv_bl_rkv_opts *o, int budget, const float *imp, const uint8_t *held,
                   uint8_t *keep) {
    const float *rows[6];
    for (int j = 0; j < 6; j++) rows[j] = rkv_keys[j];
    static unsigned char scratch[4096];
    char err[128];
    int rc = kv_bl_rkv_select(o, 6, budget, imp, rows, 0, 4, held, keep, scratch, sizeof scratch,
                              err, sizeof err);
    if (rc) fprintf(stderr, "    (expected when the test says refused) %s\n", err);
    return rc;
}

TEST(baselines_rkv_hand) {
    kv_bl_rkv_opts o;
    kv_bl_rkv_opts_default(&o);
    CHECK(o.window == 8 && o.kernel == 7 && o.lambda == 0.1 && o.sim_threshold == 0.5 &&
          o.interval == 128 && o.gqa == KV_BL_GQA_MAX);
    o.window = 2; /* window = positions {4,5}; candidates {0,1,2,3}; budget 4 -> keep 2 of them */
    o.kernel = 1;
    uint8_t keep[6];
    /* equal importance: redundancy decides. final = 0.1*0.25 - 0.9*red: 2 and 3 tie on top
     * (-0.112), 0 and 1 (older copies of 3) go. */
    const float flat[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    REQUIRE(rkv_run(&o, 4, flat, NULL, keep) == 0);
    KEEP_IS(keep, 6, 2, 3, 4, 5);
    /* strong importance on 0 outweighs its redundancy: 0.1*2 - 0.9*0.2122 = +0.009 > -0.112;
     * the second slot is the 2/3 tie, lower position first -> 2. */
    const float peak0[4] = {2, 0, 0, 0};
    REQUIRE(rkv_run(&o, 4, peak0, NULL, keep) == 0);
    KEEP_IS(keep, 6, 0, 2, 4, 5);
    /* lambda 1 (importance only = the R-KV paper's decode-time SnapKV), kernel 1: top 2 of
     * 0.1, 0.4, 0.3, 0.2 -> {1, 2}. */
    o.lambda = 1;
    const float imp[4] = {0.1f, 0.4f, 0.3f, 0.2f};
    REQUIRE(rkv_run(&o, 4, imp, NULL, keep) == 0);
    KEEP_IS(keep, 6, 1, 2, 4, 5);
    /* kernel 3 max-pool: 0.4, 0.4, 0.4, 0.3 -> three-way tie, lower positions -> {0, 1} */
    o.kernel = 3;
    REQUIRE(rkv_run(&o, 4, imp, NULL, keep) == 0);
    KEEP_IS(keep, 6, 0, 1, 4, 5);
    /* an already evicted position (1) is never brought back; the pool runs over the held list
     * 0, 2, 3 (0.1, 0.3, 0.2 -> 0.3, 0.3, 0.3): tie, lower positions -> {0, 2} */
    const uint8_t held[6] = {1, 0, 1, 1, 1, 1};
    REQUIRE(rkv_run(&o, 4, imp, held, keep) == 0);
    KEEP_IS(keep, 6, 0, 2, 4, 5);
    /* holding <= budget: keep = held */
    REQUIRE(rkv_run(&o, 5, imp, held, keep) == 0);
    KEEP_IS(keep, 6, 0, 2, 3, 4, 5);
    /* budget <= window is refused; an evicted window position is refused */
    CHECK(rkv_run(&o, 2, imp, NULL, keep) == -1);
    const uint8_t nowin[6] = {1, 1, 1, 1, 0, 1};
    CHECK(rkv_run(&o, 3, imp, nowin, keep) == -1);
}

/* Importance of one window query: per q head renormalised over the held non-window positions,
 * combined over the group, divided by the window. n_obs = 4, position 2 evicted.
 * h0 = .2 .2 - .4 (sum .8)  -> .25 .25 - .5 ;  h1 = .1 .3 - .1 (sum .5) -> .2 .6 - .2
 * MAX: .25 .6 0 .5 -> /2 -> .125 .3 0 .25 ;  MEAN: .225 .425 0 .35 -> /2 -> .1125 .2125 0 .175 */
TEST(baselines_rkv_observe) {
    const float att[2][6] = {{0.2f, 0.2f, 0, 0.4f, 0.1f, 0.1f}, {0.1f, 0.3f, 0, 0.1f, 0.25f, 0.25f}};
    const uint8_t held[4] = {1, 1, 0, 1};
    kv_bl_rkv_opts o;
    kv_bl_rkv_opts_default(&o);
    o.window = 2;
    float imp[4] = {0};
    kv_bl_rkv_observe(&o, imp, &att[0][0], 6, 2, 4, held);
    CHECK(fabsf(imp[0] - 0.125f) < 1e-6f && fabsf(imp[1] - 0.3f) < 1e-6f && imp[2] == 0 &&
          fabsf(imp[3] - 0.25f) < 1e-6f);
    o.gqa = KV_BL_GQA_MEAN;
    memset(imp, 0, sizeof imp);
    kv_bl_rkv_observe(&o, imp, &att[0][0], 6, 2, 4, held);
    CHECK(fabsf(imp[0] - 0.1125f) < 1e-6f && fabsf(imp[1] - 0.2125f) < 1e-6f && imp[2] == 0 &&
          fabsf(imp[3] - 0.175f) < 1e-6f);
}

/* Compression points: prompt end, then every 128 with the authors' one-token shift. */
TEST(baselines_rkv_schedule) {
    kv_bl_rkv_opts o;
    kv_bl_rkv_opts_default(&o);
    CHECK(kv_bl_rkv_due(&o, 100, 100));
    CHECK(!kv_bl_rkv_due(&o, 99, 100) && !kv_bl_rkv_due(&o, 128, 100));
    CHECK(kv_bl_rkv_due(&o, 129, 100) && kv_bl_rkv_due(&o, 257, 100));
    CHECK(!kv_bl_rkv_due(&o, 129, 128)); /* 1 token after the prompt-end compression: skipped */
    CHECK(kv_bl_rkv_window_end(&o, 92, 100) == 100 && kv_bl_rkv_window_end(&o, 99, 100) == 100);
    CHECK(kv_bl_rkv_window_end(&o, 91, 100) == 0);
    CHECK(kv_bl_rkv_window_end(&o, 121, 100) == 129 && kv_bl_rkv_window_end(&o, 128, 100) == 129);
    CHECK(kv_bl_rkv_window_end(&o, 120, 100) == 0 && kv_bl_rkv_window_end(&o, 129, 100) == 0);
    char err[128];
    CHECK(kv_bl_rkv_opts_check(&o, err, sizeof err) == 0);
    o.kernel = 4;
    CHECK(kv_bl_rkv_opts_check(&o, err, sizeof err) == -1);
}

static int snap_run(const kv_bl_snapkv_opts *o, int n, int budget, const float *acc, int stride,
                    int group, uint8_t *keep) {
    static unsigned char scratch[4096];
    char err[128];
    int rc = kv_bl_snapkv_select(o, n, budget, acc, stride, group, keep, scratch, sizeof scratch,
                                 err, sizeof err);
    if (rc) fprintf(stderr, "    (expected when the test says refused) %s\n", err);
    return rc;
}

/* SnapKV, prompt of 8, window 2 ({6,7}), budget 4: the top 2 of the prefix 0..5 by pooled votes. */
TEST(baselines_snapkv_hand) {
    kv_bl_snapkv_opts o;
    kv_bl_snapkv_opts_default(&o);
    CHECK(o.window == 32 && o.kernel == 7 && o.pool == KV_BL_POOL_MAX && o.gqa == KV_BL_GQA_MAX);
    o.window = 2;
    uint8_t keep[8];
    /* kernel 1: votes .5 .1 .3 .2 .9 0 -> {4, 0} */
    const float a[6] = {0.5f, 0.1f, 0.3f, 0.2f, 0.9f, 0};
    o.kernel = 1;
    REQUIRE(snap_run(&o, 8, 4, a, 6, 1, keep) == 0);
    KEEP_IS(keep, 8, 0, 4, 6, 7);
    /* kernel 3 max: .5 .5 .3 .9 .9 .9 -> tie among 3, 4, 5, lower first -> {3, 4}: the pool keeps
     * the neighbourhood of a hit */
    o.kernel = 3;
    REQUIRE(snap_run(&o, 8, 4, a, 6, 1, keep) == 0);
    KEEP_IS(keep, 8, 3, 4, 6, 7);
    /* max vs avg (zero padding, divide by 3): votes .9 .1 .1 .4 .4 .4
     * max: .9 .9 .9 .4 .4 .4 -> {0, 1};  avg: .333 .367 .2 .3 .4 .267 -> {4, 1} */
    const float b[6] = {0.9f, 0.1f, 0.1f, 0.4f, 0.4f, 0.4f};
    REQUIRE(snap_run(&o, 8, 4, b, 6, 1, keep) == 0);
    KEEP_IS(keep, 8, 0, 1, 6, 7);
    o.pool = KV_BL_POOL_AVG;
    REQUIRE(snap_run(&o, 8, 4, b, 6, 1, keep) == 0);
    KEEP_IS(keep, 8, 1, 4, 6, 7);
    /* GQA, budget 3 (one prefix slot), kernel 1: h0 peaks on 0 (.8), h1 on 2 (.6, h0 .3).
     * MAX: 0 -> .8 beats 2 -> .6: keep 0.  MEAN: 0 -> .4, 2 -> .45: keep 2. */
    const float g[2][6] = {{0.8f, 0, 0.3f, 0, 0, 0}, {0, 0, 0.6f, 0, 0, 0.1f}};
    o.kernel = 1;
    o.pool = KV_BL_POOL_MAX;
    REQUIRE(snap_run(&o, 8, 3, &g[0][0], 6, 2, keep) == 0);
    KEEP_IS(keep, 8, 0, 6, 7);
    o.gqa = KV_BL_GQA_MEAN;
    REQUIRE(snap_run(&o, 8, 3, &g[0][0], 6, 2, keep) == 0);
    KEEP_IS(keep, 8, 2, 6, 7);
    /* prompt <= budget: all kept; budget <= window refused */
    REQUIRE(snap_run(&o, 8, 8, a, 6, 1, keep) == 0);
    CHECK(count(keep, 8) == 8);
    CHECK(snap_run(&o, 8, 2, a, 6, 1, keep) == -1);
    /* observe sums the window queries per q head */
    float acc[2][3] = {{0}};
    const float q1[2][4] = {{0.5f, 0.25f, 0.25f, 9}, {0.125f, 0.125f, 0.75f, 9}};
    kv_bl_snapkv_observe(&acc[0][0], 3, &q1[0][0], 4, 2, 3);
    kv_bl_snapkv_observe(&acc[0][0], 3, &q1[0][0], 4, 2, 3);
    CHECK(acc[0][0] == 1.0f && acc[0][2] == 0.5f && acc[1][2] == 1.5f);
}

/* Tie rule: with all scores equal, the lowest positions are kept (and H2O evicts the highest). */
TEST(baselines_ties_deterministic) {
    uint8_t keep[16], keep2[16];
    float flat[16];
    for (int j = 0; j < 16; j++) flat[j] = 0.5f;
    kv_bl_snapkv_opts so;
    kv_bl_snapkv_opts_default(&so);
    so.window = 4;
    REQUIRE(snap_run(&so, 16, 7, flat, 16, 1, keep) == 0);
    KEEP_IS(keep, 16, 0, 1, 2, 12, 13, 14, 15);
    REQUIRE(snap_run(&so, 16, 7, flat, 16, 1, keep2) == 0);
    CHECK(memcmp(keep, keep2, 16) == 0);
    kv_bl_h2o s;
    char err[128];
    REQUIRE(kv_bl_h2o_init(&s, 16, err, sizeof err) == 0);
    float row[16];
    for (int j = 0; j < 16; j++) row[j] = 1.0f / 16;
    for (int q = 0; q < 16; q++) kv_bl_h2o_accumulate(&s, row, 16, 1, q + 1, KV_BL_GQA_MEAN);
    /* scores differ (older positions saw more queries); make them equal to test the tie */
    for (int j = 0; j < 16; j++) s.score[j] = 1;
    CHECK(kv_bl_h2o_enforce(&s, 6, 2, err, sizeof err) == 10);
    KEEP_IS(s.keep, 16, 0, 1, 2, 3, 14, 15);
    for (int j = 0; j < 16; j++) s.score[j] = s.keep[j] ? 1 : 0;
    CHECK(kv_bl_h2o_evict_one(&s, 2) == 3); /* one at a time agrees with the batch path */
    kv_bl_h2o_free(&s);
}

/* Budget >= n keeps everything, whatever the scores. */
TEST(baselines_budget_ge_n_keeps_all) {
    uint32_t rs = 12345;
    char err[128];
    for (int n = 1; n <= 40; n += 3) {
        uint8_t keep[64];
        REQUIRE(kv_bl_streaming_select(n, n, 4, keep, err, sizeof err) == 0);
        CHECK(count(keep, n) == n);
        float acc[64];
        for (int j = 0; j < n; j++) acc[j] = rng_unit(&rs);
        kv_bl_snapkv_opts so;
        kv_bl_snapkv_opts_default(&so);
        REQUIRE(snap_run(&so, n, n + (n & 1), acc, 64, 1, keep) == 0);
        CHECK(count(keep, n) == n);
        kv_bl_h2o s;
        REQUIRE(kv_bl_h2o_init(&s, n, err, sizeof err) == 0);
        float row[64];
        for (int q = 0; q < n; q++) {
            rand_att(&rs, row, q + 1, NULL);
            kv_bl_h2o_accumulate(&s, row, 64, 1, q + 1, KV_BL_GQA_MEAN);
            CHECK(kv_bl_h2o_enforce(&s, n, kv_bl_h2o_recent(n, 0.5), err, sizeof err) == 0);
        }
        CHECK(s.n_kept == n);
        kv_bl_h2o_free(&s);
        kv_bl_rkv_opts ro;
        kv_bl_rkv_opts_default(&ro);
        static float keys[64][8];
        const float *rows[64];
        for (int j = 0; j < n; j++) {
            for (int d = 0; d < 8; d++) keys[j][d] = rng_unit(&rs) - 0.5f;
            rows[j] = keys[j];
        }
        static unsigned char scratch[8192];
        REQUIRE(kv_bl_rkv_select(&ro, n, n, acc, rows, 0, 8, NULL, keep, scratch, sizeof scratch,
                                 err, sizeof err) == 0);
        CHECK(count(keep, n) == n);
    }
}

/* Randomised runs: no policy ever holds more than the budget after its selection, the protected
 * tokens (sinks, recent/observation windows) are always held, and evictions are final. */
TEST(baselines_random_budget) {
    uint32_t rs = 0x9e3779b9u;
    char err[128];
    enum { N = 96, G = 2, D = 8 };
    static float att[G][N], acc[G][N], imp[N], keys[N][D];
    static unsigned char scratch[1 << 15];
    const float *rows[N];
    for (int trial = 0; trial < 20; trial++) {
        int n = rng_int(&rs, 1, N);
        uint8_t keep[N], prev[N];
        /* StreamingLLM: at every length */
        int sinks = rng_int(&rs, 0, 4), budget = rng_int(&rs, sinks + 1, sinks + 20);
        for (int m = 1; m <= n; m++) {
            REQUIRE(kv_bl_streaming_select(m, budget, sinks, keep, err, sizeof err) == 0);
            CHECK(count(keep, m) <= budget);
            CHECK(count(keep, m) == (m < budget ? m : budget));
            for (int j = 0; j < m && j < sinks; j++) CHECK(keep[j]);
            CHECK(keep[m - 1]);
            if (m > 1)
                for (int j = 0; j < m - 1; j++) CHECK(!(keep[j] && !prev[j])); /* final */
            memcpy(prev, keep, (size_t)m);
        }
        /* H2O: a decode run with two q heads per kv head */
        kv_bl_h2o s;
        REQUIRE(kv_bl_h2o_init(&s, N, err, sizeof err) == 0);
        int hb = rng_int(&rs, 1, 24), rec = kv_bl_h2o_recent(hb, 0.5);
        kv_bl_gqa gqa = trial & 1 ? KV_BL_GQA_MAX : KV_BL_GQA_MEAN;
        for (int q = 0; q < n; q++) {
            memcpy(prev, s.keep, (size_t)q);
            for (int h = 0; h < G; h++) rand_att(&rs, att[h], q + 1, NULL);
            for (int h = 0; h < G; h++)
                for (int j = 0; j < q; j++) att[h][j] *= s.keep[j]; /* evicted: 0 */
            kv_bl_h2o_accumulate(&s, &att[0][0], N, G, q + 1, gqa);
            REQUIRE(kv_bl_h2o_enforce(&s, hb, rec, err, sizeof err) >= 0);
            CHECK(s.n_kept <= hb && s.n_kept == count(s.keep, q + 1));
            for (int j = q + 1 - rec; j <= q; j++) CHECK(j < 0 || s.keep[j]);
            for (int j = 0; j < q; j++) CHECK(!(s.keep[j] && !prev[j]));
        }
        kv_bl_h2o_free(&s);
        /* SnapKV at the end of a prompt of n */
        kv_bl_snapkv_opts so;
        kv_bl_snapkv_opts_default(&so);
        so.window = rng_int(&rs, 1, 8);
        so.pool = trial & 2 ? KV_BL_POOL_AVG : KV_BL_POOL_MAX;
        int sb = rng_int(&rs, so.window + 1, so.window + 30);
        for (int h = 0; h < G; h++)
            for (int j = 0; j < N; j++) acc[h][j] = rng_unit(&rs);
        REQUIRE(kv_bl_snapkv_select(&so, n, sb, &acc[0][0], N, G, keep, scratch, sizeof scratch,
                                    err, sizeof err) == 0);
        CHECK(count(keep, n) == (n < sb ? n : sb));
        for (int j = n - so.window; j < n; j++) CHECK(j < 0 || keep[j]);
        /* R-KV: grow a sequence, compress at the due points */
        kv_bl_rkv_opts ro;
        kv_bl_rkv_opts_default(&ro);
        ro.window = rng_int(&rs, 1, 4);
        ro.interval = rng_int(&rs, ro.window, 16);
        ro.lambda = trial % 3 == 0 ? 1.0 : 0.1;
        int rb = rng_int(&rs, ro.window + 1, ro.window + 24);
        int n_prompt = rng_int(&rs, 1, n);
        uint8_t held[N];
        for (int j = 0; j < n; j++) {
            for (int d = 0; d < D; d++) keys[j][d] = (float)rng_int(&rs, -1, 1); /* near-dups */
            rows[j] = keys[j];
            held[j] = 1;
        }
        for (int m = n_prompt; m <= n; m++) {
            if (!kv_bl_rkv_due(&ro, m, n_prompt)) continue;
            int held_before = count(held, m);
            for (int j = 0; j < m; j++) imp[j] = held[j] ? rng_unit(&rs) : 0;
            REQUIRE(kv_bl_rkv_select(&ro, m, rb, imp, rows, 0, D, held, keep, scratch,
                                     sizeof scratch, err, sizeof err) == 0);
            CHECK(count(keep, m) == (held_before < rb ? held_before : rb));
            for (int j = 0; j < m; j++) CHECK(!(keep[j] && !held[j]));
            for (int j = m - ro.window; j < m; j++) CHECK(j < 0 || keep[j]);
            memcpy(held, keep, (size_t)m);
        }
    }
}
