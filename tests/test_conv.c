/* test_conv.c — a conversation's next turn without recomputing the last (tkv_seq_take, tkv_seq_idle),
 * on the fixture model: turn 2's logits, from the kept sequence taken over (after it waited idle in
 * T1 for the hierarchy), equal bit for bit those of the whole transcript prefilled from scratch with
 * policy full; the cache stays consistent (kv_check) at every stage; an idle sequence holds no T0
 * and reserves none of a byte budget; refusals leave both sequences as they were. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "base/version.h"
#include "kv/kv_rec.h"
#include "kv/kv_state.h"
#include "sched/conv.h"
#include "t.h"

#define FIXTURE "fixtures/models/qwen2-Q4_K_M.gguf"

enum { P1 = 40, G1 = 90, P2 = 24, G2 = 70 };

static tkv_model *open_model(char *err, size_t n) {
    const char *path = t_need(FIXTURE);
    if (!path) return NULL;
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = 1;
    tkv_model *m = NULL;
    if (tkv_model_open(path, &mp, &m, err, n)) return NULL;
    return m;
}

/* The fixture model and its vocabulary size, or NULL: skipped without the fixture, failed otherwise. */
static tkv_model *fixture(int *V) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (!m && !t_is_skipped()) t_fail(__FILE__, __LINE__, err);
    if (m && V) {
        tkv_model_info mi;
        tkv_model_get_info(m, &mi);
        *V = mi.n_vocab;
    }
    return m;
}

static void ids(int32_t *p, int n, int salt, int V) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)(((int64_t)(i + 1) * (7919 + salt * 104729) + 13 * salt) % V);
}

/* The session parameters the tests start from: policy, sequences, context. */
static tkv_session_params params(tkv_policy pol, int seqs, int ctx) {
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = seqs;
    sp.max_ctx = ctx;
    sp.kv.policy = pol;
    return sp;
}

/* Bytes of one token's f16 K and V rows, every layer: a byte budget in tokens. */
static uint64_t f16_token_bytes(const tkv_model *m) {
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    return (uint64_t)mi.n_layer * 2 * (uint64_t)mi.n_head_kv * (uint64_t)mi.head_dim * 2;
}

static int check_kv(tkv_session *s) {
    char err[256];
    if (kv_check(engine_kv(s), err, sizeof err)) {
        fprintf(stderr, "kv_check: %s\n", err);
        return -1;
    }
    return 0;
}

/* Greedy decoding from logits row `l` for g steps, writing each step's logits to out[g][V] and the
 * tokens to tok[g] (tok[0] = the argmax of l). */
static int greedy(tkv_session *s, int seq, const float *l, int g, int V, int32_t *tok, float *out, char *err, size_t n) {
    const float *row = l;
    for (int i = 0; i < g; i++) {
        tok[i] = tkv_argmax(row, V);
        if (tkv_decode(s, &seq, &tok[i], 1, out + (size_t)i * V, err, n)) return -1;
        row = out + (size_t)i * V;
    }
    return 0;
}

/* Turn 1 (P1 prompt, G1 greedy tokens), then turn 2 (the last sampled token and P2 new prompt tokens,
 * G2 greedy tokens) on a kept sequence taken over; against the whole transcript from scratch (full). */
static void turn2_exact(tkv_model *m, tkv_policy pol, double t0_ratio, uint64_t budget, int idle, int partial, int shared) {
    char err[512];
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    const int V = mi.n_vocab;
    int32_t *tr = malloc(sizeof(int32_t) * (P1 + G1 + 1 + P2 + G2 + 1)); /* the transcript */
    int32_t *t2 = malloc(sizeof(int32_t) * (G2 + 1));
    float *lg = malloc(sizeof(float) * (size_t)V * (G1 + 1));
    float *ref = malloc(sizeof(float) * (size_t)V * (G2 + 1));
    float *got = malloc(sizeof(float) * (size_t)V * (G2 + 1));
    tkv_session_params sp = params(pol, 3, 512);
    sp.kv.t0_ratio = t0_ratio;
    sp.kv.t0_budget_bytes = budget;
    sp.kv.delta = 16; /* several re-tierings per turn */
    sp.kv.window = 16;
    tkv_session *s;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    /* turn 1 */
    ids(tr, P1, 1, V);
    int a, b;
    REQUIRE(tkv_seq_open(s, P1 + G1, P1, &a, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, a, tr, P1, lg, 0, err, sizeof err) == 0);
    REQUIRE(greedy(s, a, lg, G1 - 1, V, tr + P1, lg + V, err, sizeof err) == 0);
    tr[P1 + G1 - 1] = tkv_argmax(lg + (size_t)(G1 - 1) * V, V); /* sampled, not decoded: the sequence ends before it */
    int held = tkv_seq_len(s, a);
    REQUIRE(held == P1 + G1 - 1);
    int c = -1; /* a prefix cache's entry sharing turn 1's prompt rows: they never move */
    if (shared) {
        REQUIRE(tkv_seq_open(s, P1, P1, &c, err, sizeof err) == 0);
        REQUIRE(tkv_seq_share_prefix(s, a, c, P1, err, sizeof err) == 0);
    }
    CHECK(check_kv(s) == 0);
    tkv_stats st;
    if (idle) {
        tkv_seq_idle(s, a);
        CHECK(check_kv(s) == 0);
        REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
        if (pol == TKV_POLICY_HIERARCHY) /* all in T1, exact, but what it shares */
            CHECK(st.tokens[0] == (shared ? P1 : 0) && st.tokens[1] == held - (shared ? P1 : 0));
        else CHECK(st.tokens[0] == held); /* no T1: it stays where it is */
    }
    /* turn 2: what it reuses, then its own prompt */
    int n_take = partial ? P1 : held;
    int np2 = partial ? 1 + P2 : (P1 + G1) - held + P2; /* partial: a new assistant turn after the prompt */
    int32_t *p2 = tr + n_take;
    ids(p2 + np2 - P2, P2, 2, V);
    int n_tr = n_take + np2;
    REQUIRE(tkv_seq_open(s, n_tr + G2, np2, &b, err, sizeof err) == 0);
    REQUIRE(tkv_seq_take(s, a, b, n_take, err, sizeof err) == 0);
    CHECK(tkv_seq_len(s, a) < 0);   /* closed */
    CHECK(tkv_seq_len(s, b) == n_take);
    CHECK(check_kv(s) == 0);
    REQUIRE(tkv_prefill(s, b, p2, np2, got, 0, err, sizeof err) == 0);
    REQUIRE(greedy(s, b, got, G2, V, t2, got + V, err, sizeof err) == 0);
    CHECK(check_kv(s) == 0);
    REQUIRE(tkv_stats_get(s, b, &st, err, sizeof err) == 0);
    if (t0_ratio > 0 && t0_ratio < 1) CHECK(st.tokens[1] > 0); /* the comparison went through T1 */
    tkv_session_close(s);
    /* the reference: the transcript from scratch, policy full */
    tkv_session_params_default(&sp);
    sp.max_seqs = 1;
    sp.max_ctx = 512;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    REQUIRE(tkv_seq_open(s, n_tr + G2, n_tr, &a, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, a, tr, n_tr, ref, 0, err, sizeof err) == 0);
    int32_t *t2r = malloc(sizeof(int32_t) * (G2 + 1));
    REQUIRE(greedy(s, a, ref, G2, V, t2r, ref + V, err, sizeof err) == 0);
    tkv_session_close(s);
    CHECK(memcmp(got, ref, sizeof(float) * (size_t)V * (G2 + 1)) == 0);
    CHECK(memcmp(t2, t2r, sizeof(int32_t) * G2) == 0);
    free(t2r);
    free(tr); free(t2); free(lg); free(ref); free(got);
}

TEST(conv_take_full_bit_exact) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    turn2_exact(m, TKV_POLICY_FULL, -1, 0, 0, 0, 0);
    turn2_exact(m, TKV_POLICY_FULL, -1, 0, 1, 1, 0); /* idle leaves full as it is; a partial take */
    tkv_model_close(m);
}

TEST(conv_take_hierarchy_idle_t1_bit_exact) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    turn2_exact(m, TKV_POLICY_HIERARCHY, 0.3, 0, 0, 0, 0);
    turn2_exact(m, TKV_POLICY_HIERARCHY, 0.3, 0, 1, 0, 0);
    turn2_exact(m, TKV_POLICY_HIERARCHY, 0.3, 0, 1, 1, 0);
    /* the prompt's rows shared with a prefix entry: pinned through the take (the budget is raised) */
    turn2_exact(m, TKV_POLICY_HIERARCHY, 0.3, 0, 1, 0, 1);
    turn2_exact(m, TKV_POLICY_HIERARCHY, 0.3, 0, 0, 0, 1);
    /* one byte budget for every sequence: 200 tokens of f16 rows */
    uint64_t tb = f16_token_bytes(m);
    turn2_exact(m, TKV_POLICY_HIERARCHY, -1, 200 * tb, 1, 0, 0);
    turn2_exact(m, TKV_POLICY_HIERARCHY, -1, 200 * tb, 0, 0, 0);
    turn2_exact(m, TKV_POLICY_HIERARCHY, -1, 300 * tb, 1, 0, 1);
    tkv_model_close(m);
}

/* Under a byte budget that holds one sequence's reservation, an idle one gives it up. */
TEST(conv_idle_frees_the_byte_budget) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    tkv_session_params sp = params(TKV_POLICY_HIERARCHY, 2, 512);
    sp.kv.window = 16;
    sp.kv.delta = 16;
    tkv_session *s;
    int a, b;
    int32_t p[64];
    ids(p, 64, 3, mi.n_vocab);
    tkv_stats st;
    uint64_t tb = f16_token_bytes(m);
    sp.kv.t0_budget_bytes = tb * 100; /* a 60-token prompt + window 16 + sinks: one at a time */
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    REQUIRE(tkv_seq_open(s, 100, 60, &a, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, a, p, 60, NULL, 0, err, sizeof err) == 0);
    CHECK(tkv_seq_open(s, 100, 60, &b, err, sizeof err) == TKV_EFULL);
    tkv_seq_idle(s, a);
    CHECK(check_kv(s) == 0);
    REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
    CHECK(st.tokens[0] == 0 && st.tokens[1] == 60);
    CHECK(tkv_seq_open(s, 100, 60, &b, err, sizeof err) == 0);
    tkv_seq_close(s, b);
    /* taken over by a sequence of its own prompt: what it protects comes back to T0 */
    REQUIRE(tkv_seq_open(s, 100, 4, &b, err, sizeof err) == 0);
    REQUIRE(tkv_seq_take(s, a, b, 60, err, sizeof err) == 0);
    CHECK(check_kv(s) == 0);
    REQUIRE(tkv_prefill(s, b, p + 60, 4, NULL, 0, err, sizeof err) == 0);
    CHECK(check_kv(s) == 0);
    tkv_session_close(s);
    tkv_model_close(m);
}

TEST(conv_take_refusals) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    int32_t p[32];
    ids(p, 32, 4, mi.n_vocab);
    for (int pol = 0; pol < 2; pol++) {
        tkv_session_params sp = params(pol ? TKV_POLICY_H2O : TKV_POLICY_FULL, 3, 128);
        if (pol) sp.kv.t0_ratio = 0.5;
        tkv_session *s;
        REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
        int a, b, c;
        REQUIRE(tkv_seq_open(s, 64, 32, &a, err, sizeof err) == 0);
        REQUIRE(tkv_prefill(s, a, p, 32, NULL, 0, err, sizeof err) == 0);
        REQUIRE(tkv_seq_open(s, 64, 8, &b, err, sizeof err) == 0);
        REQUIRE(tkv_seq_open(s, 64, 8, &c, err, sizeof err) == 0);
        if (pol) {
            CHECK(tkv_seq_take(s, a, b, 32, err, sizeof err) == TKV_ERR && strstr(err, "state of its own"));
        } else {
            CHECK(tkv_seq_take(s, a, b, 33, err, sizeof err) == TKV_ERR && strstr(err, "cannot take 33"));
            CHECK(tkv_seq_take(s, a, a, 8, err, sizeof err) == TKV_ERR);
            REQUIRE(tkv_prefill(s, c, p, 2, NULL, 0, err, sizeof err) == 0);
            CHECK(tkv_seq_take(s, a, c, 8, err, sizeof err) == TKV_ERR); /* not empty */
        }
        CHECK(tkv_seq_len(s, a) == 32 && tkv_seq_len(s, b) == 0); /* nothing changed */
        CHECK(check_kv(s) == 0);
        tkv_session_close(s);
    }
    tkv_model_close(m);
}

/* Turn 1 of a conversation in s: its prompt tr[0..P1) (ids of salt), G1 greedy tokens after it (the last
 * one sampled, not decoded: the sequence ends before it), then turn 2's own P2 ids (salt + 1) after the
 * sampled one; the sequence in *a, the positions it holds returned (-1 on failure). lg: [G1 + 1][V]. */
static int turn1(tkv_session *s, int32_t *tr, float *lg, int V, int salt, int *a, char *err, size_t n) {
    ids(tr, P1, salt, V);
    if (tkv_seq_open(s, P1 + G1, P1, a, err, n) || tkv_prefill(s, *a, tr, P1, lg, 0, err, n) ||
        greedy(s, *a, lg, G1 - 1, V, tr + P1, lg + V, err, n))
        return -1;
    tr[P1 + G1 - 1] = tkv_argmax(lg + (size_t)(G1 - 1) * V, V);
    int held = tkv_seq_len(s, *a);
    ids(tr + held + 1, P2, salt + 1, V);
    return held;
}

/* ---- records: a sequence out of memory and back ---- */

/* Turn 1 in one session, saved; turn 2 in another session (a restart) from the record, against turn 2
 * in the first session from the kept sequence itself: the same logits bit for bit (T1 and T2 rows come
 * back as they were written). */
static void save_load_exact(tkv_model *m, double t2_ratio) {
    char err[512];
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    const int V = mi.n_vocab;
    int32_t tr[P1 + G1 + 1 + P2];
    float *lg = malloc(sizeof(float) * (size_t)V * (G1 + 1));
    float *want = malloc(sizeof(float) * (size_t)V * (G2 + 1)), *got = malloc(sizeof(float) * (size_t)V * (G2 + 1));
    int32_t t2a[G2], t2b[G2];
    tkv_session_params sp = params(TKV_POLICY_HIERARCHY, 2, 512);
    sp.kv.t0_ratio = 0.3;
    sp.kv.t2_ratio = t2_ratio;
    sp.kv.delta = 16;
    sp.kv.window = 16;
    tkv_session *s;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    int a, b, held = turn1(s, tr, lg, V, 5, &a, err, sizeof err);
    REQUIRE(held == P1 + G1 - 1);
    tkv_seq_idle(s, a);
    tkv_stats st;
    REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
    if (t2_ratio > 0) CHECK(st.tokens[2] > 0);
    void *rec;
    size_t len;
    REQUIRE(tkv_seq_save(s, a, tr, held, 77, &rec, &len, err, sizeof err) == 0);
    /* the record's index head */
    uint64_t salt;
    int32_t *toks;
    int n;
    CHECK(tkv_record_need(rec, 10) == 64 && tkv_record_need(rec, len) == 64 + 4 * (size_t)held);
    REQUIRE(tkv_record_peek(m, rec, tkv_record_need(rec, len), &salt, &toks, &n, err, sizeof err) == 0);
    CHECK(salt == 77 && n == held && memcmp(toks, tr, sizeof(int32_t) * (size_t)held) == 0);
    free(toks);
    /* turn 2 here, from the kept sequence */
    REQUIRE(tkv_seq_open(s, held + 1 + P2 + G2, 1 + P2, &b, err, sizeof err) == 0);
    REQUIRE(tkv_seq_take(s, a, b, held, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, b, tr + held, 1 + P2, want, 0, err, sizeof err) == 0);
    REQUIRE(greedy(s, b, want, G2, V, t2a, want + V, err, sizeof err) == 0);
    tkv_session_close(s);
    /* turn 2 in a new session, from the record */
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    REQUIRE(tkv_seq_open(s, held, 0, &a, err, sizeof err) == 0);
    REQUIRE(tkv_seq_load(s, a, rec, len, err, sizeof err) == 0);
    CHECK(tkv_seq_len(s, a) == held);
    CHECK(check_kv(s) == 0);
    REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
    if (t2_ratio > 0) CHECK(st.tokens[2] > 0);
    REQUIRE(tkv_seq_open(s, held + 1 + P2 + G2, 1 + P2, &b, err, sizeof err) == 0);
    REQUIRE(tkv_seq_take(s, a, b, held, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, b, tr + held, 1 + P2, got, 0, err, sizeof err) == 0);
    REQUIRE(greedy(s, b, got, G2, V, t2b, got + V, err, sizeof err) == 0);
    CHECK(check_kv(s) == 0);
    CHECK(memcmp(got, want, sizeof(float) * (size_t)V * (G2 + 1)) == 0);
    CHECK(memcmp(t2a, t2b, sizeof t2a) == 0);
    /* a loaded record is refused whole when it is not intact, and nothing changes */
    int c;
    REQUIRE(tkv_seq_open(s, held, 0, &c, err, sizeof err) == 0);
    uint8_t *bad = malloc(len);
    for (size_t cut = 0; cut < len; cut += len / 97 + 1) { /* truncated */
        CHECK(tkv_seq_load(s, c, rec, cut, err, sizeof err) == TKV_ERR);
        CHECK(tkv_seq_len(s, c) == 0);
    }
    for (size_t at = 0; at < len; at += len / 61 + 1) { /* a flipped byte anywhere */
        memcpy(bad, rec, len);
        bad[at] ^= 0x10;
        CHECK(tkv_seq_load(s, c, bad, len, err, sizeof err) == TKV_ERR);
        CHECK(tkv_seq_len(s, c) == 0);
    }
    memcpy(bad, rec, len);
    bad[8] = 2; /* another version, checksum made good again */
    uint64_t h = tkv_fnv1a64(bad, len - 8);
    for (int i = 0; i < 8; i++) bad[len - 8 + i] = (uint8_t)(h >> (8 * i));
    CHECK(tkv_seq_load(s, c, bad, len, err, sizeof err) == TKV_ERR && strstr(err, "version 2"));
    free(bad);
    CHECK(check_kv(s) == 0);
    tkv_session_close(s);
    free(rec);
    free(lg), free(want), free(got);
}

TEST(conv_record_restart_bit_exact) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    save_load_exact(m, -1);
    save_load_exact(m, 0.2); /* T2 rows too: written and read back as their records */
    tkv_model_close(m);
}

/* One backend's run for record_async: turn 1 on a, idle, saved (*rec); then sequence b decodes, and
 * after every step a record of a is loaded into c and c is closed again. b's logits into lg [G2 + 1][V];
 * the steps whose batches moved rows counted in *moved. */
static void record_run(const char *backend, void **rec, size_t *len, float *lg, int *moved) {
    char err[512];
    const char *path = t_need(FIXTURE);
    if (!path) return;
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = 1;
    mp.backend = backend;
    tkv_model *m;
    REQUIRE(tkv_model_open(path, &mp, &m, err, sizeof err) == 0);
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    const int V = mi.n_vocab;
    tkv_session_params sp = params(TKV_POLICY_HIERARCHY, 3, 512);
    sp.kv.t0_ratio = 0.3;
    sp.kv.t2_ratio = 0.2;
    sp.kv.delta = 8;
    sp.kv.window = 8;
    sp.kv.stage_t2 = 1; /* cpu-async reads no T2 in place (a GPU's data path): both stage it */
    tkv_session *s;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    int32_t tr[P1 + G1 + 1 + P2];
    float *l1 = malloc(sizeof(float) * (size_t)V * (G1 + 1));
    int a, b, c, held = turn1(s, tr, l1, V, 5, &a, err, sizeof err);
    REQUIRE(held == P1 + G1 - 1);
    tkv_seq_idle(s, a); /* its T0 rows go to T1 by a batch of moves */
    REQUIRE(tkv_seq_save(s, a, tr, held, 3, rec, len, err, sizeof err) == 0);
    tkv_seq_close(s, a);
    int32_t p[P1];
    ids(p, P1, 11, V);
    REQUIRE(tkv_seq_open(s, P1 + G2 + 1, P1, &b, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, b, p, P1, lg, 0, err, sizeof err) == 0);
    *moved = 0;
    for (int i = 0; i < G2; i++) {
        int32_t t = tkv_argmax(lg + (size_t)i * V, V);
        tkv_stats st0, st1;
        REQUIRE(tkv_stats_get(s, b, &st0, err, sizeof err) == 0);
        REQUIRE(tkv_decode(s, &b, &t, 1, lg + (size_t)(i + 1) * V, err, sizeof err) == 0);
        /* a batch may have started after the step: loading c takes slots its copies read */
        REQUIRE(tkv_seq_open(s, held, 0, &c, err, sizeof err) == 0);
        REQUIRE(tkv_seq_load(s, c, *rec, *len, err, sizeof err) == 0);
        tkv_seq_close(s, c);
        REQUIRE(tkv_stats_get(s, b, &st1, err, sizeof err) == 0);
        *moved += st1.bytes_moved_up + st1.bytes_moved_down + st1.bytes_moved_host >
                  st0.bytes_moved_up + st0.bytes_moved_down + st0.bytes_moved_host;
    }
    CHECK(check_kv(s) == 0);
    tkv_session_close(s);
    tkv_model_close(m);
    free(l1);
}

/* On "cpu-async", where the host sees a copy done only after host_sync (as with a GPU's copy stream),
 * against "cpu": a record saved right after the sequence went idle holds the rows its moves put in T1
 * (the same bytes), and a record loaded after a batch started leaves that batch's copies the rows they
 * read (the decoding sequence's logits the same bits). */
TEST(conv_record_async_copies) {
    if (!t_need(FIXTURE)) return;
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    REQUIRE(m);
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    tkv_model_close(m);
    const size_t V = (size_t)mi.n_vocab;
    void *rec[2] = {NULL, NULL};
    size_t len[2] = {0, 0};
    float *lg[2] = {malloc(sizeof(float) * V * (G2 + 1)), malloc(sizeof(float) * V * (G2 + 1))};
    int moved[2];
    record_run("cpu", &rec[0], &len[0], lg[0], &moved[0]);
    record_run("cpu-async", &rec[1], &len[1], lg[1], &moved[1]);
    if (rec[0] && rec[1]) {
        CHECKF(len[0] == len[1] && memcmp(rec[0], rec[1], len[0]) == 0, "the record saved after idle differs on cpu-async");
        CHECKF(memcmp(lg[0], lg[1], sizeof(float) * V * (G2 + 1)) == 0,
               "loading records beside a batch changed the other sequence's logits on cpu-async");
        CHECKF(moved[0] > 0 && moved[0] == moved[1], "steps with moves: %d on cpu, %d on cpu-async", moved[0], moved[1]);
        printf("    %d of %d steps moved rows; records of %zu bytes\n", moved[1], G2, len[1]);
    }
    free(rec[0]), free(rec[1]), free(lg[0]), free(lg[1]);
}

/* A record of another model (the same shape, another file) is refused by its identity. */
TEST(conv_record_other_model) {
    char err[512];
    tkv_model *m = open_model(err, sizeof err);
    if (t_is_skipped()) return;
    REQUIRE(m);
    const char *other = t_need("fixtures/models/qwen2-Q8_0.gguf");
    if (!other) { tkv_model_close(m); return; }
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = 1;
    tkv_model *m2;
    REQUIRE(tkv_model_open(other, &mp, &m2, err, sizeof err) == 0);
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = 1;
    sp.max_ctx = 64;
    tkv_session *s, *s2;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    REQUIRE(tkv_session_open(m2, &sp, &s2, err, sizeof err) == 0);
    int a, b;
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(tkv_seq_open(s, 8, 8, &a, err, sizeof err) == 0);
    REQUIRE(tkv_prefill(s, a, p, 8, NULL, 0, err, sizeof err) == 0);
    void *rec;
    size_t len;
    REQUIRE(tkv_seq_save(s, a, p, 8, 0, &rec, &len, err, sizeof err) == 0);
    REQUIRE(tkv_seq_open(s2, 8, 0, &b, err, sizeof err) == 0);
    CHECK(tkv_seq_load(s2, b, rec, len, err, sizeof err) == TKV_ERR && strstr(err, "another model"));
    uint64_t salt;
    int32_t *toks;
    int n;
    CHECK(tkv_record_peek(m2, rec, len, &salt, &toks, &n, err, sizeof err) == TKV_ERR && !toks);
    free(rec);
    CHECK(tkv_seq_save(s, a, p, 7, 0, &rec, &len, err, sizeof err) == TKV_ERR && !rec); /* not its length */
    tkv_session_close(s), tkv_session_close(s2);
    tkv_model_close(m), tkv_model_close(m2);
}

/* The fuzz target's seeds are whole records (so it starts past the checks), and a tier the record
 * has no format for is refused. */
TEST(conv_record_seeds_parse) {
    const char *names[] = {"fuzz/corpus/fuzz_kv_rec/exact", "fuzz/corpus/fuzz_kv_rec/tiers", "fuzz/corpus/fuzz_kv_rec/note"};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(names[i], "rb");
        if (!f) SKIP("fuzz/corpus not found (run from the repository root)");
        uint8_t buf[4096];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        kv_rec r;
        char err[256];
        CHECKF(kv_rec_parse(buf, n, &r, err, sizeof err) == 0, "%s: %s", names[i], err);
        CHECK(r.n == (uint32_t)(i == 2 ? 3 : i ? 5 : 4) && kv_rec_token(&r, 1) == 101 && kv_rec_score(&r, 2) == 0.5);
        CHECK(i == 2 ? r.note_len == 45 && !memcmp(r.note, "{\"messages\"", 11) : !r.note);
        if (i == 1) {
            buf[KV_REC_HEAD + 4 * 5 + 2] = 2; /* a position in T2 of the first record's kind */
            buf[48] = 0xFF, buf[49] = 0xFF, buf[50] = 0xFF, buf[51] = 0xFF;
            CHECK(kv_rec_parse(buf, n, &r, err, sizeof err) == -1);
        }
    }
}

/* ---- an earlier turn's reasoning kept (--history-thinking keep) ---- */

/* R1's template drops an answer's reasoning from the transcript the client sends back, Qwen3's drops
 * it once a later user message follows; keep mode splices the kept conversation's own ids in,
 * reasoning included, and says where it lies. R1's prompt opened the block ("<think>\n" is the
 * prompt's), Qwen3's model opens it itself (the generated text begins with it). */
static void keep_case(const char *vocab, const char *tmpl, int want_by) {
    const char *path = t_need(vocab);
    if (!path) return;
    char err[512];
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.vocab_only = 1;
    tkv_model *m;
    REQUIRE(tkv_model_open(path, &mp, &m, err, sizeof err) == 0);
    tkv_chat *ct;
    REQUIRE(tkv_chat_open(m, tmpl, 0, &ct, err, sizeof err) == 0);
    const char *open_mk, *close_mk;
    int by;
    tkv_chat_reasoning(ct, &open_mk, &close_mk, &by);
    REQUIRE(close_mk && by == want_by);
    int model_opens = by == TKV_THINK_MODEL_OPENS;
    tkv_chat_msg t1[1] = {{.role = "user", .content = "What is 2+2? Answer in one short sentence, please."}};
    int32_t *p1, *gen, *p2;
    int n1 = tkv_chat_encode(ct, t1, 1, 1, &p1, err, sizeof err);
    const char *think = "Two and two make four.", *visible = "The answer is 4.";
    char out_text[256];
    snprintf(out_text, sizeof out_text, "%s%s%s\n\n%s", model_opens ? "<think>\n" : "", think, close_mk, visible);
    int ng = tkv_tokenize_alloc(m, out_text, strlen(out_text), TKV_TOK_PARSE_SPECIAL, &gen);
    REQUIRE(n1 > 16 && ng > 4);
    tkv_chat_msg t2[3] = {t1[0], {.role = "assistant", .content = visible}, {.role = "user", .content = "And 3+3?"}};
    int n2 = tkv_chat_encode(ct, t2, 3, 1, &p2, err, sizeof err);
    REQUIRE(n2 > n1);
    conv_cache c;
    conv_init(&c, 4, 16, 0);
    c.e[0].seq = -1;
    c.e[0].n = n1 + ng;
    c.e[0].tokens = malloc(sizeof(int32_t) * (size_t)c.e[0].n);
    memcpy(c.e[0].tokens, p1, sizeof(int32_t) * (size_t)n1);
    memcpy(c.e[0].tokens + n1, gen, sizeof(int32_t) * (size_t)ng);
    c.e[0].used = 1;
    c.n = 1;
    int32_t *ids;
    int sf, st;
    CHECK(conv_splice(&c, m, p2, n2, 0, NULL, &ids, &sf, &st) == 0 && !ids); /* strip: the template's rule */
    int nn = conv_splice(&c, m, p2, n2, 0, close_mk, &ids, &sf, &st);
    REQUIRE(nn > c.e[0].n && ids);
    CHECK(memcmp(ids, c.e[0].tokens, sizeof(int32_t) * (size_t)c.e[0].n) == 0);
    size_t len;
    char *kept = tkv_detokenize(m, ids + sf, st - sf, 1, &len), *ans = tkv_detokenize(m, ids + st, c.e[0].n - st, 1, &len);
    char want[256];
    snprintf(want, sizeof want, "%s\n%s%s\n\n", open_mk, think, close_mk); /* the prompt's or the model's "<think>\n" */
    CHECKF(kept && !strcmp(kept, want), "kept: %s", kept ? kept : "-");
    CHECKF(ans && !strcmp(ans, visible), "answer: %s", ans ? ans : "-");
    char *rest = tkv_detokenize(m, ids + c.e[0].n, nn - c.e[0].n, 1, &len);
    CHECK(rest && strstr(rest, "And 3+3?") && !strstr(rest, visible));
    free(kept), free(ans), free(rest), free(ids);
    /* a transcript whose answer differs is not spliced */
    tkv_chat_msg t3[3] = {t1[0], {.role = "assistant", .content = "The answer is 5."}, t2[2]};
    int32_t *p3;
    int n3 = tkv_chat_encode(ct, t3, 3, 1, &p3, err, sizeof err);
    CHECK(conv_splice(&c, m, p3, n3, 0, close_mk, &ids, &sf, &st) == 0);
    free(p3);
    free(c.e[0].tokens);
    free(c.e);
    free(p1), free(gen), free(p2);
    tkv_chat_close(ct);
    tkv_model_close(m);
}

TEST(conv_splice_keeps_r1_reasoning) {
    keep_case("fixtures/tokenizer/extra/vocab-r1-distill-qwen-7b.gguf", "deepseek-r1", TKV_THINK_PROMPT_OPENS);
}

/* (Qwen2.5's vocabulary: Qwen3's <|im_start|> and <|im_end|>, its <think> written as text) */
TEST(conv_splice_keeps_qwen3_reasoning) {
    keep_case("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf", "qwen3", TKV_THINK_MODEL_OPENS);
}

/* Stale positions rank below every other: the first out of T0 (hierarchy) and the first evicted
 * (evict), whatever their scores. Each run twice, the second without marking them: there the same
 * positions (the best scored) do hold T0, so the first run's result is the marking's. */
TEST(conv_stale_ranked_last) {
    char err[512];
    int V;
    tkv_model *m = fixture(&V);
    if (!m) return;
    for (int pol = 0; pol < 2; pol++) {
        for (int marked = 1; marked >= 0; marked--) {
            tkv_session_params sp = params(pol ? TKV_POLICY_EVICT : TKV_POLICY_HIERARCHY, 1, 256);
            sp.kv.t0_ratio = 0.75;
            sp.kv.delta = 8;
            sp.kv.window = 8;
            sp.kv.sinks = 2;
            tkv_session *s;
            REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
            int32_t p[8];
            ids(p, 8, 9, V);
            int a;
            float *lg = malloc(sizeof(float) * (size_t)V * 200);
            int32_t toks[200];
            REQUIRE(tkv_seq_open(s, 200, 8, &a, err, sizeof err) == 0);
            REQUIRE(tkv_prefill(s, a, p, 8, lg, 0, err, sizeof err) == 0);
            REQUIRE(greedy(s, a, lg, 80, V, toks, lg + V, err, sizeof err) == 0);
            /* the 8 best-scored generated positions outside the window */
            kv_cache *kv = engine_kv(s);
            kv_seq *q = &kv->seq[a];
            tkv_stats st0;
            tkv_sync(s);
            REQUIRE(tkv_stats_get(s, a, &st0, err, sizeof err) == 0);
            int len = tkv_seq_len(s, a), pick[8], np = 0;
            for (int k = 0; k < 8; k++) {
                int best = -1;
                for (int i = 8; i < len - 8; i++) {
                    int taken = 0;
                    for (int u = 0; u < np; u++) taken |= pick[u] == i;
                    if (!taken && (best < 0 || q->score[i] > q->score[best])) best = i;
                }
                pick[np++] = best;
                if (marked) tkv_seq_set_stale(s, a, best, best + 1);
            }
            REQUIRE(greedy(s, a, lg + (size_t)80 * V, 16, V, toks + 80, lg + (size_t)81 * V, err, sizeof err) == 0);
            tkv_sync(s);
            CHECK(check_kv(s) == 0);
            int in_t0 = 0, evicted = 0;
            for (int k = 0; k < np; k++) in_t0 += kv_token_tier(kv, a, pick[k]) == 0, evicted += kv_token_tier(kv, a, pick[k]) == 3;
            tkv_stats st;
            REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
            if (marked && !pol) {
                CHECKF(in_t0 == 0, "hierarchy: %d stale positions still in T0", in_t0);
            } else if (marked) { /* the evicted are stale ones first */
                int64_t since = st.tokens[3] - st0.tokens[3], want = since < np ? since : np;
                CHECKF(since > 0 && evicted == want, "evict: %d stale of the %lld evicted since", evicted, (long long)since);
            } else {
                CHECKF(in_t0 == np, "policy %d unmarked: only %d of the best %d in T0", pol, in_t0, np);
            }
            free(lg);
            tkv_session_close(s);
        }
    }
    tkv_model_close(m);
}

/* An idle conversation squeezed to T2 (--conv-host-budget): its rows go to the int8 codec through the
 * planner (consistent cache), the take-over works, and turn 2's logits stay within the codec's
 * deviation of the exact ones: the first token agrees and the largest logit difference over the
 * first steps is bounded (measured on this fixture: see the message). */
TEST(conv_idle_compressed_to_t2) {
    char err[512];
    int V;
    tkv_model *m = fixture(&V);
    if (!m) return;
    float *got = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
    int32_t tr[P1 + G1 + 1 + P2];
    float *lg = malloc(sizeof(float) * (size_t)V * (G1 + 1));
    for (int squeeze = 0; squeeze < 2; squeeze++) {
        tkv_session_params sp = params(TKV_POLICY_HIERARCHY, 2, 512);
        sp.kv.t0_ratio = 0.3;
        sp.kv.delta = 16;
        sp.kv.window = 16;
        tkv_session *s;
        REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
        int a, b, held = turn1(s, tr, lg, V, 7, &a, err, sizeof err);
        REQUIRE(held == P1 + G1 - 1);
        tkv_seq_idle(s, a);
        CHECK(tkv_seq_idle_compress(s, -1) == 0);
        if (squeeze) {
            CHECK(tkv_seq_idle_compress(s, a) == held);
            CHECK(check_kv(s) == 0);
            tkv_stats st;
            REQUIRE(tkv_stats_get(s, a, &st, err, sizeof err) == 0);
            CHECK(st.tokens[0] == 0 && st.tokens[1] == 0 && st.tokens[2] == held);
            CHECK(tkv_seq_idle_compress(s, a) == 0); /* nothing left in T1 */
        }
        REQUIRE(tkv_seq_open(s, held + 1 + P2 + 1, 1 + P2, &b, err, sizeof err) == 0);
        CHECK(tkv_seq_idle_compress(s, b) == 0); /* not idle */
        REQUIRE(tkv_seq_take(s, a, b, held, err, sizeof err) == 0);
        CHECK(check_kv(s) == 0);
        REQUIRE(tkv_prefill(s, b, tr + held, 1 + P2, squeeze ? got : want, 0, err, sizeof err) == 0);
        tkv_session_close(s);
    }
    float maxd = 0, lo = want[0], hi = want[0];
    for (int v = 0; v < V; v++) {
        maxd = fabsf(got[v] - want[v]) > maxd ? fabsf(got[v] - want[v]) : maxd;
        lo = want[v] < lo ? want[v] : lo, hi = want[v] > hi ? want[v] : hi;
    }
    /* measured on the fixture (random weights): 0.71 of a logit range of 51.5; bounded at 10% of the range */
    CHECKF(tkv_argmax(got, V) == tkv_argmax(want, V) && maxd < 0.1f * (hi - lo),
           "turn 2 from int8 rows: top-1 %d vs %d, max |dlogit| %g of a range %g", tkv_argmax(got, V), tkv_argmax(want, V),
           (double)maxd, (double)(hi - lo));
    CHECKF(maxd > 0, "int8 rows gave the exact logits: the squeeze did nothing");
    free(got), free(want), free(lg);
    tkv_model_close(m);
}
