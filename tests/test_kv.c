/* test_kv.c — the memory hierarchy on synthetic data (no model): policy ranking and budgets, option
 * validation, the int8 codec bound, and a randomized run checking every invariant after each step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/half.h"
#include "base/json.h"
#include "codec/kvq.h"
#include "kv/baselines.h"
#include "kv/kv.h"
#include "kv/kv_policy.h"
#include "kv/kv_state.h"
#include "t.h"

/* ---- helpers ---- */

/* A CPU backend for every cache of this file (opened once, kept to the end). */
static be_backend *cpu(void) {
    static be_backend *b;
    char err[256];
    if (!b) TKV_ASSERT(be_open(&(be_params){.name = "cpu", .n_threads = 1}, &b, err, sizeof err) == 0);
    return b;
}

/* A cache with all o->n_seq sequences added (ids 0..n_seq-1), each of o->n_ctx positions, as the
 * tests below drive them; NULL with a message when the options or an admission are refused. */
static kv_cache *kv_open_all(const kv_options *o, char *err, size_t errlen) {
    kv_cache *kv = kv_init(o, cpu(), err, errlen);
    for (int q = 0; kv && q < o->n_seq; q++) {
        int id;
        if (kv_seq_add(kv, o->n_ctx, 0, &id, err, errlen) || id != q) {
            kv_free(kv);
            return NULL;
        }
    }
    return kv;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}
static float rng_f(uint64_t *s) { return (float)((rng_next(s) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

/* The value the forward "wrote" for (seq, layer, pos, K|V, d): a pure function, so any cache can be
 * checked against it at any time. */
static float val(int seq, int layer, int pos, int which, int d) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)seq << 48) ^ ((uint64_t)layer << 36) ^ ((uint64_t)pos << 8) ^
                 ((uint64_t)which << 4) ^ (uint64_t)d * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31; h *= 0x94D049BB133111EBull; h ^= h >> 29;
    return (float)((int)(h % 20001) - 10000) / 1000.0f * (1.0f + (float)(d % 4));
}

static void shape(kv_options *o, int L, int H, int Hkv, int hd, int nseq, int nctx) {
    kv_options_default(o);
    o->n_layer = L; o->n_head = H; o->n_head_kv = Hkv; o->head_dim = hd; o->n_seq = nseq; o->n_ctx = nctx;
}

static void write_token(kv_cache *kv, const kv_options *o, int seq, int pos) {
    int kd = o->n_head_kv * o->head_dim;
    float k[256], v[256];
    for (int l = 0; l < o->n_layer; l++) {
        for (int d = 0; d < kd; d++) { k[d] = val(seq, l, pos, 0, d); v[d] = val(seq, l, pos, 1, d); }
        kv_put(kv, seq, l, pos, k, v);
    }
}

/* Views of f32 and f16 caches alike: is position p present, and its K (which 0) or V value d. */
static int vhas(const kv_view *v, int p) { return v->k16 ? v->k16[p] != NULL : v->k[p] != NULL; }
static float vget(const kv_view *v, int which, int p, int d) {
    if (v->k16) return tkv_f16_to_f32((which ? v->v16 : v->k16)[p][d]);
    return (which ? v->v : v->k)[p][d];
}
/* the rows of p in a and b hold the same bits (kd values) */
static int vsame(const kv_view *a, const kv_view *b, int p, int kd) {
    size_t n = (size_t)kd * (a->k16 ? 2 : 4);
    const void *ak = a->k16 ? (const void *)a->k16[p] : (const void *)a->k[p], *bk = b->k16 ? (const void *)b->k16[p] : (const void *)b->k[p];
    const void *av = a->k16 ? (const void *)a->v16[p] : (const void *)a->v[p], *bv = b->k16 ? (const void *)b->v16[p] : (const void *)b->v[p];
    return !a->k16 == !b->k16 && !memcmp(ak, bk, n) && !memcmp(av, bv, n);
}

/* Feeds synthetic attention (a skewed, deterministic distribution) for the query at q_pos. */
static void observe_all(kv_cache *kv, const kv_options *o, int seq, int q_pos, float *att, uint64_t *rng) {
    for (int l = 0; l < o->n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, seq, l, &v);
        for (int h = 0; h < o->n_head; h++) {
            float sum = 0;
            for (int j = 0; j <= q_pos; j++) {
                float a = vhas(&v, j) ? fabsf(rng_f(rng)) * (float)((j * 7 + h) % 5 + 1) : 0.0f;
                att[h * o->n_ctx + j] = a;
                sum += a;
            }
            for (int j = 0; j <= q_pos; j++) att[h * o->n_ctx + j] /= sum > 0 ? sum : 1;
        }
        kv_observe(kv, seq, l, q_pos, att, o->n_ctx);
    }
}

/* ---- names, ranking, caps ---- */

TEST(kv_policy_names) {
    for (int p = 0; p < KV_POLICY_COUNT; p++) {
        kv_policy_kind k;
        CHECK(kv_policy_parse(kv_policy_name((kv_policy_kind)p), &k) == 0 && k == (kv_policy_kind)p);
    }
    kv_policy_kind k;
    CHECK(kv_policy_parse("lru", &k) == -1);
    CHECK(kv_policy_parse("h2o", &k) == 0 && k == KV_POLICY_H2O);
}

TEST(kv_rank_ties_later_wins) {
    double score[6] = {0.5, 0.9, 0.5, 0.1, 0.5, 0.9};
    int32_t idx[6] = {0, 1, 2, 3, 4, 5}, scratch[6];
    kv_rank(score, idx, 6, scratch);
    int32_t want[6] = {5, 1, 4, 2, 0, 3};
    for (int i = 0; i < 6; i++) CHECK(idx[i] == want[i]);
    kv_rank(score, idx, 0, scratch); /* empty: nothing to do */
}

TEST(kv_select_fill_and_empty_tiers) {
    enum { N = 10 };
    double score[N] = {9, 1, 2, 3, 4, 5, 6, 7, 8, 0};
    uint8_t tier[N] = {0}, prot[N] = {0}, target[N];
    int32_t order[N], scratch[N];
    prot[0] = 1; prot[9] = 1; /* sink and newest */
    tier[1] = 3;              /* evicted already: stays evicted */
    kv_select_in in = {.n = N, .score = score, .tier = tier, .prot = prot, .order = order, .scratch = scratch};
    in.cap[0] = 2; in.cap[1] = 0; in.cap[2] = 3; /* empty T1; the remaining 2 candidates are evicted */
    kv_select_out out = {.target = target};
    kv_select_ranked(&in, &out);
    uint8_t want[N] = {0, 3, 3, 3, 2, 2, 2, 0, 0, 0};
    for (int i = 0; i < N; i++) CHECKF(target[i] == want[i], "pos %d: tier %d want %d", i, target[i], want[i]);
    /* all caps zero: every candidate evicted, protected untouched */
    in.cap[0] = in.cap[1] = in.cap[2] = 0;
    kv_select_ranked(&in, &out);
    for (int i = 0; i < N; i++) CHECK(target[i] == (prot[i] ? 0 : 3));
}

/* a ranks before b: higher score, then the later position (kv_rank's order) */
static int ranks_above(const double *score, int a, int b) { return score[a] != score[b] ? score[a] > score[b] : a > b; }

/* The ranked fill against a plain top-down fill (no exact candidates), and with exact candidates (an
 * unpinned prompt) the rules they add, on random scores, tiers and caps: an exact candidate is never T2
 * nor evicted; the evicted are the lowest-ranked other candidates, as many as the top-down fill evicts
 * while there are that many; T2 ranks below every other lossy-able T0/T1 candidate; T0 holds the
 * top-ranked of what is left, as many as the fill gives it. */
TEST(kv_select_exact_candidates) {
    enum { N = 40 };
    double score[N];
    uint8_t tier[N], prot[N], exact[N], target[N], plain[N];
    int32_t order[N], scratch[N];
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)(r % N);
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            score[i] = (double)((r >> 33) % 7); /* ties on purpose */
            tier[i] = (r >> 20) % 11 == 0 ? 3 : 0;
            prot[i] = tier[i] != 3 && (r >> 24) % 6 == 0;
            exact[i] = (r >> 28) % 3 == 0;
        }
        kv_select_in in = {.n = n, .score = score, .tier = tier, .prot = prot, .order = order, .scratch = scratch};
        for (int t = 0; t < 3; t++) in.cap[t] = (int)((r >> (40 + 6 * t)) % (N / 2)) - 2;
        /* the plain top-down fill */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (tier[i] != 3 && !prot[i]) order[m++] = i;
        for (int a = 1; a < m; a++) /* insertion sort by rank */
            for (int b = a; b > 0 && ranks_above(score, order[b], order[b - 1]); b--) {
                int32_t x = order[b]; order[b] = order[b - 1]; order[b - 1] = x;
            }
        int k = 0, cnt[4] = {0, 0, 0, 0};
        for (int i = 0; i < n; i++) plain[i] = tier[i] == 3 ? 3 : 0;
        for (int t = 0; t < 3; t++)
            for (int c = 0; c < in.cap[t] && k < m; c++) plain[order[k++]] = (uint8_t)t, cnt[t]++;
        for (; k < m; k++) plain[order[k]] = 3, cnt[3]++;
        kv_select_out out = {.target = target};
        kv_select_ranked(&in, &out);
        for (int i = 0; i < n; i++) CHECKF(target[i] == plain[i], "trial %d pos %d: tier %d, plain fill %d", trial, i, target[i], plain[i]);
        /* with exact candidates */
        in.exact = exact;
        kv_select_ranked(&in, &out);
        int got[4] = {0, 0, 0, 0}, lossy_ok = 0;
        for (int i = 0; i < n; i++) {
            if (tier[i] == 3) { CHECK(target[i] == 3); continue; }
            if (prot[i]) { CHECK(target[i] == 0); continue; }
            got[target[i]]++;
            lossy_ok += !exact[i];
            CHECKF(!exact[i] || target[i] <= 1, "trial %d: exact candidate %d in T%d", trial, i, target[i]);
        }
        CHECKF(got[3] == (cnt[3] < lossy_ok ? cnt[3] : lossy_ok), "trial %d: %d evicted, want %d", trial, got[3], cnt[3]);
        int rest = lossy_ok - got[3];
        CHECKF(got[2] == (cnt[2] < rest ? cnt[2] : rest), "trial %d: %d in T2, want %d", trial, got[2], cnt[2]);
        int upper = m - got[3] - got[2];
        CHECKF(got[0] == (cnt[0] < upper ? cnt[0] : upper), "trial %d: %d in T0, want %d", trial, got[0], cnt[0]);
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                if (tier[a] == 3 || tier[b] == 3 || prot[a] || prot[b] || !ranks_above(score, a, b)) continue;
                int ta = target[a], tb = target[b];
                /* a ranks above b: b holds the better tier only when a is lossy and b exact, or
                 * a went to T2 while b (exact or not) stays lossless above it, never T0 over T1 */
                if (ta == 0) continue;
                if (ta == 1) CHECKF(tb != 0, "trial %d: %d in T1 above %d in T0", trial, a, b);
                if (ta == 2) CHECKF(tb >= 2 || exact[b], "trial %d: %d in T2 above lossless non-exact %d", trial, a, b);
                if (ta == 3) CHECKF(tb == 3 || exact[b], "trial %d: %d evicted above kept non-exact %d", trial, a, b);
            }
    }
}

TEST(kv_policy_caps_per_kind) {
    int cap[3];
    kv_policy_caps(kv_policy_ops_of(KV_POLICY_HIERARCHY), 100, 30, 20, 10, cap);
    CHECK(cap[0] == 30 && cap[1] == 40 && cap[2] == 20);
    kv_policy_caps(kv_policy_ops_of(KV_POLICY_HIERARCHY), 10, 30, 20, 10, cap); /* fewer candidates than room */
    CHECK(cap[0] == 10 && cap[1] == 0);
    kv_policy_caps(kv_policy_ops_of(KV_POLICY_EVICT), 100, 30, 0, 0, cap);
    CHECK(cap[0] == 30 && cap[1] == 0 && cap[2] == 0);
    kv_policy_caps(kv_policy_ops_of(KV_POLICY_QUANT), 100, 30, 0, 10, cap);
    CHECK(cap[0] == 30 && cap[1] == 0 && cap[2] == 60);
    kv_policy_caps(kv_policy_ops_of(KV_POLICY_HIERARCHY), 100, -5, 0, 0, cap); /* negative room rounds to 0 */
    CHECK(cap[0] == 0 && cap[1] == 100);
}

/* the registry: every kind has its table, named once; a ranked policy selects, an own-budget one has
 * hooks, and the name parses back to the kind */
TEST(kv_policy_registry) {
    for (int k = 0; k < KV_POLICY_COUNT; k++) {
        const kv_policy_ops *o = kv_policy_ops_of((kv_policy_kind)k);
        REQUIRE(o != NULL);
        CHECKF(o->kind == (kv_policy_kind)k, "registry slot %d holds kind %d", k, (int)o->kind);
        kv_policy_kind back;
        CHECK(kv_policy_parse(o->name, &back) == 0 && back == (kv_policy_kind)k);
        CHECKF(kv_ops_ranked(o) == (o->select != NULL), "%s", o->name);
        CHECKF(o->own_budget == (o->hooks != NULL) && (!o->own_budget || o->limit_rule), "%s", o->name);
        CHECKF(!o->host_caps || kv_ops_ranked(o), "%s", o->name);
        for (int j = 0; j < k; j++) CHECK(strcmp(kv_policy_ops_of((kv_policy_kind)j)->name, o->name) != 0);
    }
    CHECK(kv_policy_ops_of(KV_POLICY_COUNT) == NULL);
}

/* ---- options ---- */

static int init_fails(kv_options *o, const char *needle) {
    char err[512] = "";
    kv_cache *kv = kv_open_all(o, err, sizeof err);
    if (kv) { kv_free(kv); return 0; }
    if (needle && !strstr(err, needle)) { fprintf(stderr, "    message: %s\n", err); return 0; }
    return 1;
}

TEST(kv_options_refused) {
    kv_options o;
    shape(&o, 2, 4, 2, 8, 1, 64);
    o.policy = KV_POLICY_HIERARCHY;
    CHECK(init_fails(&o, "needs a T0 budget"));
    o.t0_ratio = 0.6; o.t2_ratio = 0.3; o.evict_ratio = 0.2;
    CHECK(init_fails(&o, "do not add up"));
    o.t0_ratio = 1.5; o.t2_ratio = o.evict_ratio = -1;
    CHECK(init_fails(&o, "[0, 1]"));
    o.t0_ratio = NAN;
    CHECK(init_fails(&o, "[0, 1]"));
    o.t0_ratio = 0.5; o.t0_budget_bytes = 1 << 20;
    CHECK(init_fails(&o, "not both"));
    o.t0_ratio = -1; o.t0_budget_bytes = 10 * 2 * 2 * 16 * 4; /* 10 tokens < sinks 4 + window 64 */
    CHECK(init_fails(&o, "fewer than the 68 protected"));
    o.t0_budget_bytes = 0; o.t0_ratio = 0.5; o.policy = KV_POLICY_EVICT; o.t2_ratio = 0.2;
    CHECK(init_fails(&o, "no T2"));
    o.t2_ratio = -1; o.delta = 0;
    CHECK(init_fails(&o, "delta"));
    o.delta = 64; o.n_head = 3;
    CHECK(init_fails(&o, "multiple"));
    o.n_head = 4;
    char err[256];
    for (int p = 0; p < KV_POLICY_COUNT; p++) { /* an unpinned prompt waits in T1: hierarchy only */
        o.policy = (kv_policy_kind)p, o.unpin_prompt = 1;
        if (p == KV_POLICY_HIERARCHY) {
            kv_cache *h = kv_open_all(&o, err, sizeof err);
            CHECKF(h != NULL, "hierarchy with an unpinned prompt: %s", err);
            if (h) kv_free(h);
        } else {
            CHECKF(init_fails(&o, "cannot unpin the prompt"), "policy %s", kv_policy_name(o.policy));
        }
    }
    o.policy = KV_POLICY_EVICT, o.unpin_prompt = 0;
    kv_cache *kv = kv_open_all(&o, err, sizeof err);
    CHECK(kv != NULL);
    kv_free(kv);
}

/* One absolute T0 budget for all live sequences: a sequence's prompt may grow into what the others'
 * reservations (their prompt, sinks and window) leave of it, and no further; the refusal names the
 * numbers and leaves the sequence as it was. */
TEST(kv_abs_budget_prompt_too_long) {
    kv_options o;
    shape(&o, 2, 4, 2, 8, 2, 256);
    o.policy = KV_POLICY_HIERARCHY;
    o.sinks = 2; o.window = 8;
    o.f16 = 0;
    int64_t tb = 2 * 2 * 16 * 4; /* layers x K,V x kv_dim x f32 */
    o.t0_budget_bytes = (uint64_t)(40 * tb); /* 40 tokens for both sequences */
    char err[512];
    kv_cache *kv = kv_open_all(&o, err, sizeof err); /* each reserves sinks 2 + window 8 = 10 */
    REQUIRE(kv);
    int pos = 0, rc = 0;
    for (; pos < 40 && rc == 0; pos++) rc = kv_append(kv, 0, pos, 1, err, sizeof err);
    /* 40 - 10 (the other sequence) = 30 for this one: 22 prompt tokens + window 8; the 23rd fails */
    CHECK(rc == -1 && pos == 23);
    CHECK(strstr(err, "does not fit in T0") != NULL && strstr(err, "40 tokens") != NULL);
    CHECK(kv_seq_len(kv, 0) == 22);
    kv_stats st;
    kv_get_stats(kv, -1, &st);
    CHECK(st.t0_budget_bytes == 40 * tb);
    REQUIRE(kv_check(kv, err, sizeof err) == 0);
    /* a third sequence cannot be admitted while the two hold their reservations */
    kv_seq_remove(kv, 1);
    int id;
    CHECK(kv_seq_add(kv, 256, 9, &id, err, sizeof err) == -2 && strstr(err, "reserve 30 of the 40"));
    CHECK(kv_seq_add(kv, 256, 0, &id, err, sizeof err) == 0 && id == 1); /* 30 + 10 = 40 fits exactly */
    CHECK(kv_seq_add(kv, 300, 0, &id, err, sizeof err) == -1 && strstr(err, "1..256"));
    kv_free(kv);
}

/* A ratio that rounds to zero (or below the protected tokens) is raised to them. */
TEST(kv_budget_raised_to_protected) {
    kv_options o;
    shape(&o, 1, 2, 1, 8, 1, 128);
    o.policy = KV_POLICY_EVICT;
    o.t0_ratio = 0.001; o.sinks = 2; o.window = 4; o.delta = 4; o.sync_transfers = 1;
    char err[256];
    kv_cache *kv = kv_open_all(&o, err, sizeof err);
    REQUIRE(kv);
    float *att = calloc((size_t)o.n_head * o.n_ctx, sizeof(float));
    uint64_t rng = 7;
    for (int p = 0; p < 40; p++) {
        int prompt = p < 10;
        REQUIRE(kv_append(kv, 0, p, prompt, err, sizeof err) == 0);
        write_token(kv, &o, 0, p);
        if (!prompt) { observe_all(kv, &o, 0, p, att, &rng); kv_step_end(kv, 0); }
        REQUIRE(kv_check(kv, err, sizeof err) == 0);
    }
    kv_stats st;
    kv_get_stats(kv, 0, &st);
    CHECK(st.budget_raised > 0);
    CHECK(st.tokens[0] == 10 + 4);          /* prompt (covers the sinks) + window */
    CHECK(st.tokens[3] == 40 - 14);         /* evict policy: everything else is gone */
    CHECK(st.t0_budget_bytes == 14 * kv_token_bytes(kv, 0));
    free(att);
    kv_free(kv);
}

/* Policy sink: T0 holds the prompt, the sinks and the window and nothing else, from the first
 * decode step on (no budget, none accepted); what leaves the window is evicted at once; the plan
 * without a cache says the same. */
TEST(kv_policy_sink) {
    kv_options o;
    shape(&o, 1, 2, 1, 8, 1, 128);
    o.policy = KV_POLICY_SINK;
    o.sinks = 2; o.window = 4; o.delta = 4; o.sync_transfers = 1;
    o.t0_ratio = 0.5;
    CHECK(init_fails(&o, "does not apply"));
    o.t0_ratio = -1; o.t2_ratio = 0.2;
    CHECK(init_fails(&o, "no T2"));
    o.t2_ratio = -1;
    char err[256];
    kv_cache *kv = kv_open_all(&o, err, sizeof err);
    REQUIRE(kv);
    float *att = calloc((size_t)o.n_head * o.n_ctx, sizeof(float));
    uint64_t rng = 11;
    for (int p = 0; p < 60; p++) {
        int prompt = p < 10;
        REQUIRE(kv_append(kv, 0, p, prompt, err, sizeof err) == 0);
        write_token(kv, &o, 0, p);
        if (!prompt) { observe_all(kv, &o, 0, p, att, &rng); kv_step_end(kv, 0); }
        REQUIRE(kv_check(kv, err, sizeof err) == 0);
        if (p >= 10) {
            kv_stats st;
            kv_get_stats(kv, 0, &st);
            int want0 = 10 + (p + 1 - 10 < 4 ? p + 1 - 10 : 4);
            CHECKF(st.tokens[0] == want0 && st.tokens[3] == p + 1 - want0, "at %d: T0 %lld, evicted %lld", p,
                   (long long)st.tokens[0], (long long)st.tokens[3]);
        }
    }
    kv_stats st;
    kv_get_stats(kv, 0, &st);
    CHECK(st.budget_raised == 0 && st.tokens[1] == 0 && st.tokens[2] == 0);
    free(att);
    kv_free(kv);
    kv_plan_result pr;
    REQUIRE(kv_plan(&o, 1, 128, 10, &pr, err, sizeof err) == 0);
    CHECKF(pr.t0 == 10 + 4 && pr.t3 == 128 - 14 && pr.t1 == 0 && pr.t2 == 0, "plan: t0 %lld t3 %lld", (long long)pr.t0,
           (long long)pr.t3);
}

/* A copied prompt prefix holds the source's rows bit for bit, as prompt tokens; what cannot be
 * copied (policies that score the prompt, a busy destination, too long a prefix) is refused. */
TEST(kv_copy_prefix) {
    for (int f16 = 0; f16 < 2; f16++) {
        kv_options o;
        shape(&o, 2, 4, 2, 8, 3, 64);
        o.f16 = f16;
        o.policy = KV_POLICY_HIERARCHY;
        o.t0_ratio = 0.5; o.sinks = 1; o.window = 2; o.sync_transfers = 1;
        char err[256];
        kv_cache *kv = kv_open_all(&o, err, sizeof err);
        REQUIRE(kv);
        CHECK(kv_policy_copies_prefix(KV_POLICY_HIERARCHY) && kv_policy_copies_prefix(KV_POLICY_FULL));
        for (int p = 0; p < 10; p++) {
            REQUIRE(kv_append(kv, 0, p, 1, err, sizeof err) == 0);
            write_token(kv, &o, 0, p);
        }
        CHECK(kv_seq_copy_prefix(kv, 0, 1, 11, err, sizeof err) == -1 && strstr(err, "cannot copy 11"));
        REQUIRE(kv_seq_copy_prefix(kv, 0, 1, 7, err, sizeof err) == 0);
        CHECK(kv_seq_len(kv, 1) == 7);
        CHECK(kv_seq_copy_prefix(kv, 0, 1, 3, err, sizeof err) == -1); /* not empty */
        for (int l = 0; l < 2; l++) {
            kv_view a, b;
            kv_view_layer(kv, 0, l, &a);
            kv_view_layer(kv, 1, l, &b);
            for (int p = 0; p < 7; p++) CHECKF(vsame(&a, &b, p, 16), "f16 %d layer %d pos %d", f16, l, p);
        }
        for (int p = 0; p < 7; p++) CHECK(kv_token_tier(kv, 1, p) == 0);
        REQUIRE(kv_check(kv, err, sizeof err) == 0);
        kv_free(kv);
    }
    kv_options o;
    shape(&o, 1, 2, 1, 8, 2, 32);
    o.policy = KV_POLICY_H2O;
    o.t0_ratio = 0.5;
    char err[256];
    kv_cache *kv = kv_open_all(&o, err, sizeof err);
    REQUIRE(kv);
    CHECK(!kv_policy_copies_prefix(KV_POLICY_H2O) && !kv_policy_copies_prefix(KV_POLICY_SNAPKV));
    REQUIRE(kv_append(kv, 0, 0, 1, err, sizeof err) == 0);
    write_token(kv, &o, 0, 0);
    CHECK(kv_seq_copy_prefix(kv, 0, 1, 1, err, sizeof err) == -1 && strstr(err, "scores the prompt"));
    kv_free(kv);
    /* an unpinned prompt may leave T0, and shared rows never move: no prefix is shared */
    o.policy = KV_POLICY_HIERARCHY, o.unpin_prompt = 1;
    kv = kv_open_all(&o, err, sizeof err);
    REQUIRE(kv);
    REQUIRE(kv_append(kv, 0, 0, 1, err, sizeof err) == 0);
    write_token(kv, &o, 0, 0);
    kv_step_end(kv, 0);
    CHECK(kv_seq_copy_prefix(kv, 0, 1, 1, err, sizeof err) == -1 && strstr(err, "unpinned prompt"));
    kv_free(kv);
}

/* ---- T2 codec ---- */

TEST(kv_t2_roundtrip_bound) {
    uint64_t rng = 42;
    enum { HD = 64, G = 4 };
    float x[G * HD], y[G * HD], sc[G];
    int8_t q[G * HD];
    for (int it = 0; it < 200; it++) {
        float mag = powf(10.0f, (float)(it % 9) - 4.0f);
        for (int i = 0; i < G * HD; i++) x[i] = rng_f(&rng) * mag * (i % 17 == 0 ? 30.0f : 1.0f);
        if (it % 10 == 0) memset(x + HD, 0, HD * sizeof(float)); /* an all-zero head */
        kvq_q8h_encode(x, G, HD, q, sc);
        kvq_q8h_decode(q, sc, G, HD, y);
        for (int g = 0; g < G; g++) {
            float amax = 0;
            for (int i = 0; i < HD; i++) amax = fmaxf(amax, fabsf(x[g * HD + i]));
            float bound = amax / 254.0f * (1.0f + 1e-5f) + 1e-30f;
            for (int i = 0; i < HD; i++) CHECK(fabsf(x[g * HD + i] - y[g * HD + i]) <= bound);
            if (amax == 0) CHECK(sc[g] == 0);
        }
    }
}

/* ---- randomized runs ---- */

typedef struct {
    kv_policy_kind policy;
    double hbm, t2, ev;
    uint64_t budget_tokens; /* absolute, per sequence; 0 = ratio */
    int staged, sync, delta, sinks, window;
} run_cfg;

/* Checks every row of every view against val() (exact in T0/T1, within the codec bound in T2). */
static int check_views(kv_cache *kv, const kv_options *o, int seq, uint8_t *was_evicted) {
    int bad = 0;
    for (int l = 0; l < o->n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, seq, l, &v);
        CHECK(!v.k16 == !o->f16 && !v.k == !!o->f16);
        for (int p = 0; p < v.n; p++) {
            int t = kv_token_tier(kv, seq, p);
            if (!vhas(&v, p)) {
                bad += t != 3 || (v.k16 ? v.v16[p] != NULL : v.v[p] != NULL);
                was_evicted[p] = 1;
                continue;
            }
            bad += was_evicted[p]; /* evicted tokens never come back */
            for (int w = 0; w < 2; w++) {
                for (int g = 0; g < o->n_head_kv; g++) {
                    float amax = 0;
                    for (int d = g * o->head_dim; d < (g + 1) * o->head_dim; d++) amax = fmaxf(amax, fabsf(val(seq, l, p, w, d)));
                    for (int d = g * o->head_dim; d < (g + 1) * o->head_dim; d++) {
                        /* an f16 cache holds the value rounded once to fp16 */
                        float want = o->f16 ? tkv_f16_to_f32(tkv_f32_to_f16(val(seq, l, p, w, d))) : val(seq, l, p, w, d);
                        float r = vget(&v, w, p, d);
                        /* a token that went through T2 keeps dequantised values, even back in T0/T1 (f16:
                         * plus one more rounding to fp16, at most amax / 2048) */
                        bad += fabsf(r - want) > amax * (1.0f / 254.0f + (o->f16 ? 1.0f / 1024.0f : 0.0f)) * 1.0001f;
                        if (t != 2 && o->policy == KV_POLICY_HIERARCHY && o->t2_ratio <= 0) bad += r != want;
                    }
                }
            }
        }
    }
    return bad;
}

static void random_run(const run_cfg *c, uint64_t seed, int steps, int check_each, int f16) {
    kv_options o;
    shape(&o, 3, 4, 2, 16, 2, 200);
    o.f16 = f16;
    o.policy = c->policy;
    o.t0_ratio = c->budget_tokens ? -1 : c->hbm;
    o.t2_ratio = c->t2;
    o.evict_ratio = c->ev;
    o.delta = c->delta; o.sinks = c->sinks; o.window = c->window;
    o.staged = c->staged; o.sync_transfers = c->sync;
    char err[512];
    kv_cache *probe = NULL;
    if (c->budget_tokens) {
        kv_options p = o;
        p.policy = KV_POLICY_FULL;
        probe = kv_open_all(&p, err, sizeof err);
        o.t0_budget_bytes = c->budget_tokens * (uint64_t)kv_token_bytes(probe, 0) * (uint64_t)o.n_seq;
        kv_free(probe);
    }
    kv_cache *kv = kv_open_all(&o, err, sizeof err);
    if (!kv) { fprintf(stderr, "    %s\n", err); CHECK(kv != NULL); return; }
    float *att = calloc((size_t)o.n_head * o.n_ctx, sizeof(float));
    uint8_t *gone[2] = {calloc((size_t)o.n_ctx, 1), calloc((size_t)o.n_ctx, 1)};
    uint64_t rng = seed;
    int prompt_len[2] = {10 + (int)(rng_next(&rng) % 20), 5 + (int)(rng_next(&rng) % 10)};
    int64_t peak_budget = 0;
    for (int step = 0; step < steps; step++) {
        int seq = (int)(rng_next(&rng) % 2);
        int pos = kv_seq_len(kv, seq);
        if (pos >= o.n_ctx) continue;
        int prompt = pos < prompt_len[seq];
        if (kv_append(kv, seq, pos, prompt, err, sizeof err) != 0) { fprintf(stderr, "    %s\n", err); CHECK(0); break; }
        write_token(kv, &o, seq, pos);
        observe_all(kv, &o, seq, pos, att, &rng);
        if (!prompt) kv_step_end(kv, seq);
        if (check_each || step == steps - 1) {
            if (kv_check(kv, err, sizeof err)) { fprintf(stderr, "    step %d: %s\n", step, err); CHECK(0); break; }
            int bad = check_views(kv, &o, seq, gone[seq]);
            CHECKF(bad == 0, "step %d seq %d: %d bad rows", step, seq, bad);
            if (bad) break;
        }
        kv_stats st;
        kv_get_stats(kv, seq, &st);
        if (st.t0_budget_bytes > peak_budget) peak_budget = st.t0_budget_bytes;
        CHECK(st.bytes[0] <= st.t0_budget_bytes);
    }
    kv_sync(kv);
    kv_stats st;
    kv_get_stats(kv, -1, &st);
    if (o.policy != KV_POLICY_FULL) CHECK(st.retiers > 0);
    if (c->budget_tokens) CHECK(st.peak_t0_bytes <= (int64_t)o.t0_budget_bytes);
    int n;
    kv_retier_log(kv, &n);
    CHECK(n == st.retiers);
    free(att); free(gone[0]); free(gone[1]);
    kv_free(kv);
}

TEST(kv_random_hierarchy_invariants) {
    run_cfg cs[] = {
        {KV_POLICY_HIERARCHY, 0.3, -1, -1, 0, 0, 1, 8, 4, 8},
        {KV_POLICY_HIERARCHY, 0.2, 0.3, 0.2, 0, 1, 0, 5, 2, 4},
        {KV_POLICY_HIERARCHY, -1, 0.3, -1, 24, 0, 0, 6, 4, 6},
        {KV_POLICY_EVICT, 0.25, -1, -1, 0, 0, 1, 7, 4, 8},
        {KV_POLICY_EVICT, -1, -1, -1, 40, 0, 0, 3, 1, 1},
        {KV_POLICY_QUANT, 0.25, -1, 0.1, 0, 1, 1, 4, 4, 4},
        {KV_POLICY_QUANT, -1, -1, -1, 50, 0, 0, 9, 0, 0},
        {KV_POLICY_HIERARCHY, 0.0, -1, -1, 0, 1, 0, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) random_run(&cs[i], 1000 + i, 240, 1, 0);
    /* the same with fp16 T0/T1 rows */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) random_run(&cs[i], 1000 + i, 240, 1, 1);
}

/* The same run in two caches that differ in one mechanism option must give identical views. */
static void compare_runs(kv_options a, kv_options b, int steps, int *n_diff, int *n_t1) {
    char err[256];
    kv_cache *ka = kv_open_all(&a, err, sizeof err), *kb = kv_open_all(&b, err, sizeof err);
    *n_diff = 1; *n_t1 = 0;
    if (!ka || !kb) { kv_free(ka); kv_free(kb); return; }
    *n_diff = 0;
    float *att = calloc((size_t)a.n_head * a.n_ctx, sizeof(float));
    uint64_t ra = 5, rb = 5;
    int kd = a.n_head_kv * a.head_dim;
    for (int pos = 0; pos < steps; pos++) {
        int prompt = pos < 12;
        if (kv_append(ka, 0, pos, prompt, err, sizeof err) || kv_append(kb, 0, pos, prompt, err, sizeof err)) { *n_diff = 1; break; }
        write_token(ka, &a, 0, pos);
        write_token(kb, &b, 0, pos);
        for (int l = 0; l < a.n_layer; l++) {
            kv_view va, vb;
            kv_view_layer(ka, 0, l, &va);
            kv_view_layer(kb, 0, l, &vb);
            for (int p = 0; p < va.n; p++) {
                if (vhas(&va, p) != vhas(&vb, p)) { (*n_diff)++; continue; }
                if (vhas(&va, p) && !vsame(&va, &vb, p, kd)) (*n_diff)++;
                if (l == 0 && kv_token_tier(ka, 0, p) == 1) (*n_t1)++;
            }
        }
        observe_all(ka, &a, 0, pos, att, &ra);
        observe_all(kb, &b, 0, pos, att, &rb);
        if (!prompt) { kv_step_end(ka, 0); kv_step_end(kb, 0); }
    }
    free(att);
    kv_free(ka);
    kv_free(kb);
}

/* both element types: f16 (the default) and f32 */
TEST(kv_staged_equals_in_place) {
    for (int f16 = 0; f16 < 2; f16++) {
        kv_options a;
        shape(&a, 3, 4, 2, 16, 1, 160);
        a.policy = KV_POLICY_HIERARCHY; a.t0_ratio = 0.2; a.t2_ratio = 0.2; a.delta = 5; a.window = 8; a.sync_transfers = 1;
        a.f16 = f16;
        kv_options b = a;
        b.staged = 1;
        int diff, t1;
        compare_runs(a, b, 150, &diff, &t1);
        CHECKF(diff == 0, "f16 %d", f16);
        CHECK(t1 > 0);
    }
}

TEST(kv_async_equals_sync) {
    for (int f16 = 0; f16 < 2; f16++) {
        kv_options a;
        shape(&a, 4, 4, 2, 16, 1, 160);
        a.policy = KV_POLICY_HIERARCHY; a.t0_ratio = 0.25; a.t2_ratio = 0.25; a.evict_ratio = 0.1; a.delta = 3; a.window = 4;
        a.sync_transfers = 1;
        a.f16 = f16;
        kv_options b = a;
        b.sync_transfers = 0;
        int diff, t1;
        compare_runs(a, b, 150, &diff, &t1);
        CHECKF(diff == 0, "f16 %d", f16);
        CHECK(t1 > 0);
    }
}

/* Fake attention over the views: the full cache and the hierarchy (0% eviction, no T2) must give
 * identical bits, because T0 and T1 hold identical values visited in the same order. */
static void attend(const kv_view *v, const float *q, int n_head, int n_head_kv, int hd, float *out, float *w) {
    int group = n_head / n_head_kv;
    for (int h = 0; h < n_head; h++) {
        int g = h / group;
        float mx = -INFINITY;
        for (int j = 0; j < v->n; j++) {
            if (!vhas(v, j)) { w[h * v->n + j] = -INFINITY; continue; }
            float s = 0;
            for (int d = 0; d < hd; d++) s += q[h * hd + d] * vget(v, 0, j, g * hd + d);
            s /= sqrtf((float)hd);
            w[h * v->n + j] = s;
            if (s > mx) mx = s;
        }
        float sum = 0;
        for (int j = 0; j < v->n; j++) { float e = vhas(v, j) ? expf(w[h * v->n + j] - mx) : 0; w[h * v->n + j] = e; sum += e; }
        for (int d = 0; d < hd; d++) out[h * hd + d] = 0;
        for (int j = 0; j < v->n; j++) {
            w[h * v->n + j] /= sum;
            if (!vhas(v, j)) continue;
            for (int d = 0; d < hd; d++) out[h * hd + d] += w[h * v->n + j] * vget(v, 1, j, g * hd + d);
        }
    }
}

static void fake_attention_bit_exact(int f16) {
    enum { L = 3, H = 4, HKV = 2, HD = 16, CTX = 200, STEPS = 190 };
    kv_options f, h;
    shape(&f, L, H, HKV, HD, 1, CTX);
    f.f16 = f16;
    h = f;
    h.policy = KV_POLICY_HIERARCHY; h.t0_ratio = 0.4; h.delta = 4; h.window = 8; h.sinks = 2;
    char err[256];
    kv_cache *kf = kv_open_all(&f, err, sizeof err), *kh = kv_open_all(&h, err, sizeof err);
    REQUIRE(kf && kh);
    float q[H * HD], of[H * HD], oh[H * HD], *wf = malloc(sizeof(float) * H * CTX), *wh = malloc(sizeof(float) * H * CTX);
    uint64_t rng = 99;
    int mismatches = 0, t1_seen = 0;
    for (int pos = 0; pos < STEPS; pos++) {
        int prompt = pos < 16;
        REQUIRE(kv_append(kf, 0, pos, prompt, err, sizeof err) == 0 && kv_append(kh, 0, pos, prompt, err, sizeof err) == 0);
        for (int l = 0; l < L; l++) {
            float k[HKV * HD], v[HKV * HD];
            for (int d = 0; d < HKV * HD; d++) { k[d] = rng_f(&rng) * 3; v[d] = rng_f(&rng); }
            kv_put(kf, 0, l, pos, k, v);
            kv_put(kh, 0, l, pos, k, v);
            for (int d = 0; d < H * HD; d++) q[d] = rng_f(&rng) * 3;
            kv_view vf, vh;
            kv_view_layer(kf, 0, l, &vf);
            kv_view_layer(kh, 0, l, &vh);
            attend(&vf, q, H, HKV, HD, of, wf);
            attend(&vh, q, H, HKV, HD, oh, wh);
            mismatches += memcmp(of, oh, sizeof of) != 0 || memcmp(wf, wh, sizeof(float) * H * vf.n) != 0;
            kv_observe(kf, 0, l, pos, wf, vf.n);
            kv_observe(kh, 0, l, pos, wh, vh.n);
        }
        if (!prompt) { kv_step_end(kf, 0); kv_step_end(kh, 0); }
        for (int p = 0; p <= pos; p++) t1_seen += kv_token_tier(kh, 0, p) == 1;
    }
    CHECK(mismatches == 0);
    CHECK(t1_seen > 0);
    kv_stats st;
    kv_sync(kh);
    kv_get_stats(kh, 0, &st);
    CHECKF(st.bytes_moved_up > 0 && st.bytes_moved_down > 0 && st.tokens[3] == 0 && st.tokens[2] == 0, "up %lld down %lld t2 %lld t3 %lld", (long long)st.bytes_moved_up, (long long)st.bytes_moved_down, (long long)st.tokens[2], (long long)st.tokens[3]);
    struct json_out jo;
    json_out_init(&jo);
    kv_stats_json(&jo, &st);
    struct json_doc *doc = NULL;
    int64_t retiers = -1;
    CHECK(json_parse(jo.b.p, jo.b.n, NULL, &doc, NULL, 0) == 0 && json_get_int(json_root(doc), "retiers", &retiers) &&
          retiers == st.retiers);
    json_free(doc);
    json_out_free(&jo);
    free(wf); free(wh);
    kv_free(kf);
    kv_free(kh);
}

/* One layer's weights of a forward call (kv_attn_mass) update the scores over the backend's threads,
 * by position ranges; the scores must have the bits of kv_observe called token by token: three
 * generated tokens of one sequence in one call (their additions in token order), two other
 * sequences, a prompt token, depths past several ranges of 512, and a call where a sequence comes
 * back after another one (done on one thread). */
TEST(kv_observe_batch_same_bits) {
    enum { L = 3, H = 6, HKV = 2, CTX = 1300 }; /* 1 / (L H) is not a power of two: sums round */
    be_backend *b3;
    char err[256];
    REQUIRE(be_open(&(be_params){.name = "cpu", .n_threads = 3}, &b3, err, sizeof err) == 0);
    kv_options o;
    shape(&o, L, H, HKV, 16, 3, CTX);
    o.policy = KV_POLICY_HIERARCHY, o.t0_ratio = 0.5, o.delta = 1000000;
    kv_cache *kv[2];
    for (int c = 0; c < 2; c++) {
        kv[c] = kv_init(&o, b3, err, sizeof err);
        REQUIRE(kv[c]);
        for (int q = 0; q < 3; q++) {
            int id;
            REQUIRE(kv_seq_add(kv[c], CTX, 0, &id, err, sizeof err) == 0 && id == q);
        }
    }
    const int len[3] = {1200, 700, 6};
    for (int c = 0; c < 2; c++)
        for (int q = 0; q < 3; q++)
            for (int p = 0; p < len[q]; p++) {
                REQUIRE(kv_append(kv[c], q, p, p < 4 || (q == 2 && p == 4), err, sizeof err) == 0);
                write_token(kv[c], &o, q, p);
            }
    static const int seqs[2][6] = {{0, 0, 0, 1, 2, 2}, {0, 1, 0, 2, 2, 1}};
    static const int poss[2][6] = {{1197, 1198, 1199, 699, 4, 5}, {1150, 690, 1199, 5, 4, 699}};
    float *w = malloc(sizeof(float) * 6 * H * CTX);
    REQUIRE(w);
    uint64_t rng = 7;
    int diff = 0;
    for (int call = 0; call < 2; call++)
        for (int l = 0; l < L; l++) {
            for (size_t i = 0; i < (size_t)6 * H * CTX; i++) w[i] = fabsf(rng_f(&rng)) * (i % 3 ? 0.01f : 3.0f);
            kv_attn_mass(kv[0], l, seqs[call], poss[call], 6, w, CTX);
            for (int t = 0; t < 6; t++) kv_observe(kv[1], seqs[call][t], l, poss[call][t], w + (size_t)t * H * CTX, CTX);
            for (int q = 0; q < 3; q++)
                diff += memcmp(kv[0]->seq[q].score, kv[1]->seq[q].score, sizeof(double) * (size_t)len[q]) != 0;
        }
    CHECKF(diff == 0, "%d score arrays differ", diff);
    int moved = 0;
    for (int p = 0; p < 1200; p++) moved += kv[0]->seq[0].score[p] != 0.0;
    CHECKF(moved > 1100, "%d scores of sequence 0 were updated", moved); /* the ranges reached past 1024 */
    free(w);
    kv_free(kv[0]);
    kv_free(kv[1]);
    be_close(b3);
}

TEST(kv_fake_attention_bit_exact) {
    fake_attention_bit_exact(0);
    fake_attention_bit_exact(1); /* fp16 rows: T0 and T1 hold the same fp16 bits */
}

/* fp16 caches: T0/T1 rows take half the bytes of f32 ones (T2 is int8 either way) */
TEST(kv_f16_bytes) {
    kv_options a;
    shape(&a, 3, 4, 2, 16, 1, 160);
    a.f16 = 1;
    a.policy = KV_POLICY_HIERARCHY; a.t0_ratio = 0.25; a.t2_ratio = 0.25; a.evict_ratio = 0.1;
    char err[256];
    kv_options c = a;
    c.f16 = 0;
    kv_cache *k16 = kv_open_all(&a, err, sizeof err), *k32 = kv_open_all(&c, err, sizeof err);
    REQUIRE(k16 && k32);
    CHECK(kv_token_bytes(k16, 0) * 2 == kv_token_bytes(k32, 0) && kv_token_bytes(k16, 1) == kv_token_bytes(k16, 0));
    CHECK(kv_token_bytes(k16, 2) == kv_token_bytes(k32, 2) && kv_token_bytes(k16, 3) == 0);
    kv_free(k16);
    kv_free(k32);
}

/* Many sequences, async transfers, long run: only the final state is checked in full (< 1 s). */
TEST(kv_stress_async) {
    run_cfg c = {KV_POLICY_HIERARCHY, 0.2, 0.2, 0.1, 0, 1, 0, 2, 4, 4};
    random_run(&c, 77, 390, 0, 0);
}

/* ---- baselines top-k (heap select, no qsort) against the rule by brute force ---- */

TEST(kv_bl_topk_matches_rank_rule) {
    enum { M = 300 };
    uint64_t rng = 99;
    float score[M];
    int pos[M];
    uint8_t keep[M + 7], want[M + 7];
    double pairs[M]; /* kv_bl_pair_bytes() == 8: float + int */
    REQUIRE(kv_bl_pair_bytes() <= sizeof pairs[0]);
    for (int it = 0; it < 200; it++) {
        int m = 1 + (int)(rng_next(&rng) % M), k = (int)(rng_next(&rng) % (m + 2));
        for (int i = 0; i < m; i++) {
            uint64_t r = rng_next(&rng);
            score[i] = r % 11 == 0 ? NAN : (float)(r % 5) * 0.25f; /* many ties */
            pos[i] = i + 3;
        }
        for (int i = m - 1; i > 0; i--) { /* distinct, shuffled */
            int j = (int)(rng_next(&rng) % (uint64_t)(i + 1)), t = pos[i];
            pos[i] = pos[j];
            pos[j] = t;
        }
        memset(keep, 0, sizeof keep);
        kv_bl_keep_topk(score, pos, m, k, keep, pairs);
        memset(want, 0, sizeof want);
        for (int i = 0; i < m; i++) {
            int before = 0;
            for (int j = 0; j < m; j++) {
                int in = isnan(score[i]), jn = isnan(score[j]);
                before += jn != in ? in : (!in && score[j] != score[i]) ? score[j] > score[i] : pos[j] < pos[i];
            }
            want[pos[i]] = (uint8_t)(before < k);
        }
        REQUIRE(memcmp(keep, want, sizeof keep) == 0);
    }
}

/* The quant cache the T2 tests drive: 2 layers, 2 kv heads of 32, T0 20% (2 sinks, a window of 4),
 * re-tiered every 3 steps, the T2 codec named, keys centred on `centre` when not NULL. */
static void t2_test_options(kv_options *o, int f16, const char *codec, const float *centre) {
    shape(o, 2, 4, 2, 32, 1, 120);
    o->f16 = f16;
    o->policy = KV_POLICY_QUANT;
    o->t0_ratio = 0.2; o->sinks = 2; o->window = 4; o->delta = 3; o->sync_transfers = 1;
    o->k_center = centre;
    TKV_ASSERT(be_kv_t2_parse(codec, &o->t2_fmt) == 0);
}

/* 100 tokens (8 of them a prompt) through that cache, put() writing each one's rows, observed and
 * re-tiered as decode steps; NULL when the cache refuses the options or ends inconsistent. */
static kv_cache *t2_test_run(const kv_options *o, void (*put)(kv_cache *kv, const kv_options *o, int pos)) {
    char err[256];
    kv_cache *kv = kv_open_all(o, err, sizeof err);
    float *att = calloc((size_t)o->n_head * o->n_ctx, sizeof(float));
    uint64_t rng = 17;
    for (int p = 0; kv && p < 100; p++) {
        TKV_ASSERT(kv_append(kv, 0, p, p < 8, err, sizeof err) == 0);
        put(kv, o, p);
        observe_all(kv, o, 0, p, att, &rng);
        if (p >= 8) kv_step_end(kv, 0);
    }
    free(att);
    if (kv && kv_check(kv, err, sizeof err)) kv_free(kv), kv = NULL;
    return kv;
}

static void put_plain(kv_cache *kv, const kv_options *o, int pos) { write_token(kv, o, 0, pos); }

/* Every T2 codec through the cache: tokens demoted to T2 read back (dequantised, then rounded to the
 * cache's element type) within the codec's stated bound (kvq_error_bound, plus one fp16 rounding of
 * an f16 cache); the bytes per token follow the format's record size. */
TEST(kv_t2_codecs_in_cache) {
    static const char *const names[] = {"q8h", "q8b", "q8bh", "q4bh", "q8bhc", "q4bhc"}; /* no centre: as their twins */
    for (int f16 = 0; f16 < 2; f16++)
        for (int c = 0; c < 6; c++) {
            kv_options o;
            t2_test_options(&o, f16, names[c], NULL);
            kv_cache *kv = t2_test_run(&o, put_plain);
            REQUIRE(kv);
            int kd = o.n_head_kv * o.head_dim, in_t2 = 0, bad = 0;
            kvq_codec kc = KVQ_Q8H, vcod = KVQ_Q8H;
            int ki, vi;
            if (be_kv_fmt_codecs(o.t2_fmt, &ki, &vi)) kc = (kvq_codec)ki, vcod = (kvq_codec)vi;
            for (int l = 0; l < o.n_layer; l++) {
                kv_view v;
                kv_view_layer(kv, 0, l, &v);
                for (int p = 0; p < v.n; p++) {
                    if (kv_token_tier(kv, 0, p) != 2) continue;
                    in_t2 += l == 0;
                    for (int w = 0; w < 2; w++) {
                        /* T2 encodes what T0 held: an f16 cache's rows rounded once (<= amax/2048 each),
                         * and the staged row is rounded to fp16 again */
                        float x[256], x16[256];
                        double amax = 0;
                        for (int d = 0; d < kd; d++) {
                            x[d] = val(0, l, p, w, d), amax = fmax(amax, fabsf(x[d]));
                            x16[d] = f16 ? tkv_f16_to_f32(tkv_f32_to_f16(x[d])) : x[d];
                        }
                        double bound = kvq_error_bound(w ? vcod : kc, x16, o.n_head_kv, o.head_dim) * (1 + 1e-4) +
                                       (f16 ? amax / 1024 : 0) + 1e-30;
                        for (int d = 0; d < kd; d++) bad += fabs((double)vget(&v, w, p, d) - x[d]) > bound;
                    }
                }
            }
            CHECKF(in_t2 > 50 && bad == 0, "%s f16 %d: %d tokens in T2, %d values out of bound", names[c], f16, in_t2, bad);
            CHECK(kv_token_bytes(kv, 2) == o.n_layer * (int64_t)be_kv_record_bytes(o.t2_fmt, o.n_head_kv, o.head_dim));
            kv_free(kv);
        }
}

/* Keys that are mostly a constant offset per channel (as a Qwen2 model's early layers: the K bias is
 * hundreds of times what varies between tokens), through the T2 codecs with and without the centre.
 * The centred formats stay within their stated bound, taken on K - centre (backend.h: kvq's bound on
 * the residual, plus 2^-22 (|x| + |c|) for the subtraction and the add back); the uncentred ones
 * within theirs on K. With the centre the largest key error is far below the uncentred one's, and a
 * cache without a centre stores the centred formats exactly as their twins. */
static float centre_val(int l, int d) { return (d % 7 == 0 ? 300.0f : 20.0f) * (float)(l + 1) * (d % 2 ? -1.0f : 1.0f); }

static void put_centred(kv_cache *kv, const kv_options *o, int pos) {
    int kd = o->n_head_kv * o->head_dim;
    for (int l = 0; l < o->n_layer; l++) {
        float k[64], v[64];
        for (int d = 0; d < kd; d++) k[d] = centre_val(l, d) + val(0, l, pos, 0, d) * 0.01f, v[d] = val(0, l, pos, 1, d);
        kv_put(kv, 0, l, pos, k, v);
    }
}

static void t2_key_error(const char *name, int centred_cache, double *worst_out, float *k_out, int *n_out) {
    static float centre[2 * 64];
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 64; d++) centre[l * 64 + d] = centre_val(l, d);
    kv_options o;
    t2_test_options(&o, 0, name, centred_cache ? centre : NULL);
    int kd = o.n_head_kv * o.head_dim;
    kv_cache *kv = t2_test_run(&o, put_centred);
    REQUIRE(kv);
    int ki, vi, in_t2 = 0, bad = 0;
    REQUIRE(be_kv_fmt_codecs(o.t2_fmt, &ki, &vi));
    int centred = centred_cache && be_kv_fmt_centred(o.t2_fmt);
    double worst = 0;
    for (int l = 0; l < o.n_layer; l++) {
        kv_view v;
        kv_view_layer(kv, 0, l, &v);
        for (int p = 0; p < v.n; p++) {
            if (kv_token_tier(kv, 0, p) != 2) continue;
            in_t2 += l == 0;
            float x[64], r[64];
            for (int d = 0; d < kd; d++) {
                x[d] = centre_val(l, d) + val(0, l, p, 0, d) * 0.01f;
                r[d] = centred ? x[d] - centre_val(l, d) : x[d];
            }
            double b = kvq_error_bound((kvq_codec)ki, r, o.n_head_kv, o.head_dim) * (1 + 1e-4) + 1e-30;
            for (int d = 0; d < kd; d++) {
                double e = fabs((double)vget(&v, 0, p, d) - x[d]);
                double bd = b + (centred ? 0x1p-22 * (fabs(x[d]) + fabs(centre_val(l, d))) : 0);
                bad += e > bd;
                worst = fmax(worst, e);
                if (k_out && l == 0 && *n_out < 100 * 64) k_out[(*n_out)++] = vget(&v, 0, p, d);
            }
        }
    }
    CHECKF(in_t2 > 50 && bad == 0, "%s (centre %d): %d tokens in T2, %d key values out of bound", name, centred_cache, in_t2, bad);
    kv_free(kv);
    if (worst_out) *worst_out = worst;
}

TEST(kv_t2_centred_keys) {
    double e4 = 0, e4c = 1, e8 = 0, e8c = 1;
    t2_key_error("q4bh", 1, &e4, NULL, NULL);
    t2_key_error("q4bhc", 1, &e4c, NULL, NULL);
    t2_key_error("q8bh", 1, &e8, NULL, NULL);
    t2_key_error("q8bhc", 1, &e8c, NULL, NULL);
    CHECKF(e4c * 50 < e4 && e8c * 50 < e8, "largest key error: q4bh %g, q4bhc %g; q8bh %g, q8bhc %g", e4, e4c, e8, e8c);
    static float a[100 * 64], b[100 * 64];
    int na = 0, nb = 0;
    t2_key_error("q4bh", 0, NULL, a, &na);
    t2_key_error("q4bhc", 0, NULL, b, &nb);
    CHECK(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof(float)) == 0);
}

/* A backend that cannot store a T2 format is refused it when the cache opens, with a message naming
 * the backend and the format (the CUDA backend's records are F32, F16 and Q8_HEAD only); a policy
 * without T2 opens on it whatever the T2 codec. */
TEST(kv_backend_refuses_t2_format) {
    be_ops ops = *cpu()->ops;
    ops.name = "narrow";
    ops.kv_fmts = 1u << BE_KV_F32 | 1u << BE_KV_F16 | 1u << BE_KV_Q8_HEAD;
    be_backend narrow = {&ops};
    kv_options o;
    shape(&o, 2, 4, 2, 32, 1, 64);
    o.policy = KV_POLICY_QUANT;
    o.t0_ratio = 0.5;
    REQUIRE(be_kv_t2_parse("q4bhc", &o.t2_fmt) == 0);
    char err[256] = "";
    kv_cache *kv = kv_init(&o, &narrow, err, sizeof err);
    CHECKF(!kv && strstr(err, "narrow") && strstr(err, "q4bhc") && strstr(err, "q8h"), "%s", err);
    kv_free(kv);
    REQUIRE(be_kv_t2_parse("q8h", &o.t2_fmt) == 0);
    kv = kv_init(&o, &narrow, err, sizeof err);
    CHECKF(kv != NULL, "%s", err);
    kv_free(kv);
    o.policy = KV_POLICY_EVICT;
    REQUIRE(be_kv_t2_parse("q4bhc", &o.t2_fmt) == 0);
    kv = kv_init(&o, &narrow, err, sizeof err);
    CHECKF(kv != NULL, "%s", err);
    kv_free(kv);
}

/* The list of T2 codec names that messages print holds every T2 format, in enum order, each parsing
 * back to its format. */
TEST(kv_t2_codec_names_complete) {
    char list[128];
    snprintf(list, sizeof list, "%s", be_kv_t2_names());
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, ", ", &save); t; t = strtok_r(NULL, ", ", &save), n++) {
        be_kv_fmt f;
        CHECKF(be_kv_t2_parse(t, &f) == 0 && f == (be_kv_fmt)(BE_KV_Q8_HEAD + n), "'%s' is #%d", t, n);
    }
    CHECK(n == BE_KV_N_FMT - BE_KV_Q8_HEAD);
}

/* A STAGE chunk that cannot be had (the device memory is out) leaves the pools as they were: the tier
 * chunk it would have mirrored is given back, so no slot is handed out without its mirror, and the
 * sequence is refused with the backend's message; once memory is there again the same sequence opens,
 * STAGE holding a chunk for each chunk of T1 and T2. The backend: the CPU's ops, whose allocations of
 * a STAGE chunk's size fail while `stage_out` is set (only the pools' alloc and free run on it). */
static int stage_out;
static size_t stage_chunk_bytes;
static void *stage_limited_alloc(be_backend *b, size_t bytes, be_mem mem, char *err, size_t errlen) {
    (void)b;
    if (stage_out && bytes == stage_chunk_bytes) {
        snprintf(err, errlen, "limited: no device memory for %zu bytes", bytes);
        return NULL;
    }
    return cpu()->ops->alloc(cpu(), bytes, mem, err, errlen);
}
static void stage_limited_free(be_backend *b, void *p, be_mem mem) {
    (void)b;
    cpu()->ops->free(cpu(), p, mem);
}

TEST(kv_stage_out_of_memory_rolls_back) {
    be_ops ops = *cpu()->ops;
    ops.name = "limited";
    ops.alloc = stage_limited_alloc;
    ops.free = stage_limited_free;
    be_backend limited = {&ops};
    kv_options o;
    shape(&o, 2, 4, 2, 32, 2, 600);
    o.policy = KV_POLICY_HIERARCHY;
    o.t0_ratio = 0.5, o.t2_ratio = 0.2, o.staged = 1, o.stage_t2 = 1;
    char err[256] = "";
    kv_cache *kv = kv_init(&o, &limited, err, sizeof err);
    REQUIRE(kv != NULL);
    const be_kv_pool *st = &kv->pools.pool[BE_STAGE], *t1 = &kv->pools.pool[BE_T1], *t2 = &kv->pools.pool[BE_T2];
    stage_chunk_bytes = ((size_t)1 << st->chunk_shift) * (size_t)st->layers * st->record_bytes;
    int q0 = -1, q1 = -1;
    REQUIRE(kv_seq_add(kv, o.n_ctx, 0, &q0, err, sizeof err) == 0);
    int n1 = t1->n_chunks, n2 = t2->n_chunks, ns = st->n_chunks;
    CHECKF(ns == n1 + n2 && n1 > 0 && n2 > 0, "STAGE %d chunks for T1's %d and T2's %d", ns, n1, n2);
    stage_out = 1;
    int rc = kv_seq_add(kv, o.n_ctx, 0, &q1, err, sizeof err);
    stage_out = 0;
    CHECKF(rc != 0 && strstr(err, "no device memory"), "rc %d: %s", rc, err);
    CHECKF(t1->n_chunks == n1 && t2->n_chunks == n2 && st->n_chunks == ns, "after the refusal: T1 %d, T2 %d, STAGE %d chunks",
           t1->n_chunks, t2->n_chunks, st->n_chunks);
    CHECKF(kv_check(kv, err, sizeof err) == 0, "%s", err);
    REQUIRE(kv_seq_add(kv, o.n_ctx, 0, &q1, err, sizeof err) == 0);
    CHECKF(t1->n_chunks > n1 && st->n_chunks == t1->n_chunks + t2->n_chunks, "T1 %d, T2 %d, STAGE %d chunks",
           t1->n_chunks, t2->n_chunks, st->n_chunks);
    CHECKF(kv_check(kv, err, sizeof err) == 0, "%s", err);
    kv_free(kv); /* (no token written: the stand-in backend lends the CPU's alloc and free alone) */
}
