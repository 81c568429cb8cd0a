/* test_kv_shared.c — one KV pool and one T0 budget for many sequences.
 *
 *   - kv_policy_share_t0 (pure): the cross-sequence split of T0 equals a brute-force ranking of all
 *     candidates by normalised score; it is blind to the scale of a sequence's raw scores (a long,
 *     old sequence competes with a short one on the share of attention its tokens get, not on its
 *     age); the higher-scored tokens get T0;
 *   - the fixture model: sequences of different lengths that join and leave between steps decode
 *     together under one absolute budget; T0 never holds more than the budget at any step, summed over
 *     all of them; with nothing evicted every sequence's logits are bit-identical, step by step, to
 *     the same sequence run alone with `full`; a sequence that cannot be admitted is refused with the
 *     numbers and nothing is half-admitted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "eval/eval.h"
#include "base/json.h"
#include "kv/kv_state.h"
#include "kv/kv_policy.h"
#include "t.h"

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}
static double unif(uint64_t *s) { return (double)(rng(s) >> 11) * (1.0 / 9007199254740992.0); }

/* ---- the pure split ---- */

typedef struct { double v; int seq, rank; } cand_t;

static int cand_cmp(const void *a, const void *b) {
    const cand_t *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    if (x->seq != y->seq) return x->seq - y->seq;
    return x->rank - y->rank;
}

/* The split by sorting every candidate: what kv_policy_share_t0 must equal. */
static void brute_split(const kv_share_seq *s, int n, int room0, int *room) {
    int total = 0;
    for (int i = 0; i < n; i++) total += s[i].n_cand, room[i] = 0;
    cand_t *c = malloc((size_t)(total > 0 ? total : 1) * sizeof *c);
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < s[i].n_cand; r++) c[k++] = (cand_t){s[i].score[s[i].order[r]] * s[i].norm, i, r};
    qsort(c, (size_t)total, sizeof *c, cand_cmp);
    for (int j = 0; j < room0 && j < total; j++) room[c[j].seq]++;
    free(c);
}

typedef struct {
    double score[512];
    int32_t order[512], scratch[512];
    int len, n_cand;
} fake_seq;

/* A sequence of len positions whose candidates are all but the last few; raw scores = profile x
 * scale (scale stands for its number of decode steps), ties included. */
static void fake_init(fake_seq *f, int len, double scale, uint64_t *s) {
    f->len = len;
    for (int i = 0; i < len; i++) f->score[i] = scale * (double)(rng(s) % 7) * unif(s);
    f->n_cand = len - len / 8;
    for (int i = 0; i < f->n_cand; i++) f->order[i] = i;
    kv_rank(f->score, f->order, f->n_cand, f->scratch);
}

static kv_share_seq share_of(const fake_seq *f) {
    double sum = 0;
    for (int i = 0; i < f->len; i++) sum += f->score[i];
    return (kv_share_seq){f->score, f->order, f->n_cand, sum > 0 ? f->len / sum : 0};
}

TEST(kv_share_matches_brute_force) {
    uint64_t s = 11;
    static fake_seq f[6];
    for (int it = 0; it < 200; it++) {
        int n = 1 + (int)(rng(&s) % 6);
        kv_share_seq sh[6];
        for (int i = 0; i < n; i++) {
            fake_init(&f[i], 8 + (int)(rng(&s) % 500), 1.0 + 100 * unif(&s), &s);
            sh[i] = share_of(&f[i]);
        }
        int total = 0;
        for (int i = 0; i < n; i++) total += sh[i].n_cand;
        int room0 = (int)(rng(&s) % (uint64_t)(total + 20));
        int got[6], want[6];
        char scratch[6 * 64];
        REQUIRE(kv_share_scratch_item() * 6 <= sizeof scratch);
        kv_policy_share_t0(sh, n, room0, got, scratch);
        brute_split(sh, n, room0, want);
        int sum = 0;
        for (int i = 0; i < n; i++) {
            REQUIRE(got[i] == want[i]);
            sum += got[i];
        }
        CHECK(sum == (room0 < total ? room0 : total));
    }
}

/* Fairness: a sequence with 10x the decode steps has 10x the raw scores; normalised, it competes on
 * the share of attention its tokens get. Two sequences with the same profile split T0 in proportion
 * to their candidates whatever their scales; a token with a high share wins over low-share ones of
 * an older, longer sequence. */
TEST(kv_share_normalised_fairly) {
    uint64_t s = 5;
    static fake_seq a, b;
    fake_init(&a, 400, 1.0, &s);
    b = a; /* same profile, 10x the steps */
    for (int i = 0; i < b.len; i++) b.score[i] *= 10.0;
    kv_share_seq sh[2] = {share_of(&a), share_of(&b)};
    int room[2];
    char scratch[256];
    kv_policy_share_t0(sh, 2, 300, room, scratch);
    CHECK(room[0] == 150 && room[1] == 150);
    /* unnormalised, the older sequence would take everything */
    kv_share_seq raw[2] = {sh[0], sh[1]};
    raw[0].norm = raw[1].norm = 1;
    kv_policy_share_t0(raw, 2, 300, room, scratch);
    CHECK(room[1] > room[0] + 100);
    /* a short sequence with 10 tokens that get far more than their share: they get T0 first */
    static fake_seq c;
    c.len = 50;
    for (int i = 0; i < 50; i++) c.score[i] = i < 10 ? 5.0 : 0.1;
    c.n_cand = 50;
    for (int i = 0; i < 50; i++) c.order[i] = i;
    kv_rank(c.score, c.order, 50, c.scratch);
    kv_share_seq sh3[2] = {share_of(&b), share_of(&c)};
    kv_policy_share_t0(sh3, 2, 10, room, scratch);
    CHECK(room[1] == 10 && room[0] == 0);
    kv_policy_share_t0(sh3, 2, 0, room, scratch);
    CHECK(room[0] == 0 && room[1] == 0);
}

/* ---- the fixture model ---- */

#define FIXTURE "fixtures/models/qwen2-Q4_K_M.gguf"

typedef struct {
    int start;     /* the step at which it joins */
    int n_prompt;
    int n_gen;     /* steps it decodes, then it leaves */
    int seq;       /* its id in the shared session, -1 when not live */
    int done;
    int32_t tok;   /* next input token (its own greedy choice) */
    float *ref;    /* [n_gen + 1][V] logits of the sequence run alone with full */
    int pos_gen;
} run_seq;

static void prompt_ids(int32_t *p, int n, int salt, int vocab) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)(((int64_t)(i + 1) * (7919 + salt * 104729) + 13 * salt) % vocab);
}

/* The sequence alone, policy full: its logits after the prompt and after each greedy step. */
static int run_alone(tkv_model *m, run_seq *r, int salt, int V, char *err, size_t errlen) {
    tkv_session_params p;
    tkv_session_params_default(&p);
    p.max_seqs = 1;
    p.max_ctx = r->n_prompt + r->n_gen + 1;
    tkv_session *s;
    if (tkv_session_open(m, &p, &s, err, errlen)) return -1;
    int32_t prompt[256];
    prompt_ids(prompt, r->n_prompt, salt, V);
    int seq, rc = tkv_seq_open(s, p.max_ctx, r->n_prompt, &seq, err, errlen);
    if (!rc) rc = tkv_prefill(s, seq, prompt, r->n_prompt, r->ref, 0, err, errlen);
    for (int g = 0; g < r->n_gen && !rc; g++) {
        int32_t t = tkv_argmax(r->ref + (size_t)g * V, V);
        rc = tkv_decode(s, &seq, &t, 1, r->ref + (size_t)(g + 1) * V, err, errlen);
    }
    tkv_session_close(s);
    return rc;
}

/* unpin: the prompt is not pinned in T0 (--unpin-prompt): it competes for the shared T0 too, and
 * some prompt token must have waited in T1 at some step (none pinned). */
static void join_leave(int unpin) {
    const char *path = t_shared(FIXTURE);
    FILE *probe = fopen(path, "rb");
    if (!probe) SKIP("fixture model missing");
    fclose(probe);
    char err[512];
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = 1;
    tkv_model *m;
    REQUIRE(tkv_model_open(path, &mp, &m, err, sizeof err) == 0);
    tkv_model_info info;
    tkv_model_get_info(m, &info);
    int V = info.n_vocab;
    enum { NS = 5 };
    run_seq rs[NS] = {
        {0, 40, 150, -1, 0, 0, NULL, 0}, {0, 12, 60, -1, 0, 0, NULL, 0}, {20, 70, 120, -1, 0, 0, NULL, 0},
        {50, 8, 90, -1, 0, 0, NULL, 0}, {65, 100, 40, -1, 0, 0, NULL, 0},
    };
    for (int i = 0; i < NS; i++) {
        rs[i].ref = malloc((size_t)(rs[i].n_gen + 1) * V * sizeof(float));
        REQUIRE(run_alone(m, &rs[i], i, V, err, sizeof err) == 0);
    }
    /* the shared session: hierarchy, one T0 budget smaller than what the live sequences hold, window
     * 16 so that tokens move; nothing evicted, no T2: every logit must equal the one alone */
    tkv_session_params p;
    tkv_session_params_default(&p);
    p.max_seqs = 4;
    p.max_ctx = 300;
    p.kv.policy = TKV_POLICY_HIERARCHY;
    p.kv.window = 16;
    p.kv.delta = 8;
    p.kv.unpin_prompt = unpin;
    int64_t tb = 0;
    {   /* bytes of one T0 token of this model */
        tkv_session_params pp;
        tkv_session_params_default(&pp);
        pp.max_seqs = 1;
        pp.max_ctx = 8;
        tkv_session *probe_s;
        REQUIRE(tkv_session_open(m, &pp, &probe_s, err, sizeof err) == 0);
        tb = tkv_token_bytes(probe_s, 0);
        tkv_session_close(probe_s);
    }
    const int64_t budget_tokens = 260;
    p.kv.t0_budget_bytes = (uint64_t)(budget_tokens * tb);
    tkv_session *s;
    REQUIRE(tkv_session_open(m, &p, &s, err, sizeof err) == 0);
    kv_cache *kv = engine_kv(s);
    float *lg = malloc((size_t)NS * V * sizeof(float));
    int32_t prompt[256];
    int seqs[NS], toks[NS], who[NS], refused = 0, mismatches = 0, max_live = 0, moved_up = 0, prompt_in_t1 = 0;
    for (int step = 0; step < 400; step++) {
        /* joins (between steps) */
        for (int i = 0; i < NS; i++) {
            run_seq *r = &rs[i];
            if (r->done || r->seq >= 0 || step < r->start) continue;
            int rc = tkv_seq_open(s, r->n_prompt + r->n_gen + 1, r->n_prompt, &r->seq, err, sizeof err);
            if (rc == TKV_EFULL) { /* waits for a sequence to leave: nothing held meanwhile */
                refused++;
                CHECK(r->seq == -1 && (strstr(err, "reserve") || strstr(err, "are live")));
                continue;
            }
            REQUIRE(rc == 0);
            prompt_ids(prompt, r->n_prompt, i, V);
            REQUIRE(tkv_prefill(s, r->seq, prompt, r->n_prompt, lg, 0, err, sizeof err) == 0);
            mismatches += memcmp(lg, r->ref, (size_t)V * sizeof(float)) != 0;
            r->tok = tkv_argmax(lg, V);
            r->pos_gen = 0;
        }
        int nb = 0;
        for (int i = 0; i < NS; i++)
            if (rs[i].seq >= 0) seqs[nb] = rs[i].seq, toks[nb] = rs[i].tok, who[nb++] = i;
        if (nb > max_live) max_live = nb;
        if (!nb) {
            int all = 1;
            for (int i = 0; i < NS; i++) all &= rs[i].done;
            if (all) break;
            continue;
        }
        REQUIRE(tkv_decode(s, seqs, (const int32_t *)toks, nb, lg, err, sizeof err) == 0);
        for (int b = 0; b < nb; b++) {
            run_seq *r = &rs[who[b]];
            r->pos_gen++;
            if (memcmp(lg + (size_t)b * V, r->ref + (size_t)r->pos_gen * V, (size_t)V * sizeof(float))) {
                if (mismatches++ == 0) fprintf(stderr, "    sequence %d differs at its step %d\n", who[b], r->pos_gen);
            }
            r->tok = tkv_argmax(r->ref + (size_t)r->pos_gen * V, V);
            if (r->pos_gen == r->n_gen) { /* leaves: its slots go back at once */
                tkv_seq_close(s, r->seq);
                r->seq = -1;
                r->done = 1;
            }
        }
        kv_stats st;
        kv_get_stats(kv, -1, &st);
        CHECKF(st.bytes[0] <= budget_tokens * tb, "step %d: T0 holds %lld bytes, budget %lld", step, (long long)st.bytes[0],
               (long long)(budget_tokens * tb));
        if (kv_check(kv, err, sizeof err)) {
            fprintf(stderr, "    step %d: %s\n", step, err);
            CHECK(0);
            break;
        }
        moved_up = st.bytes_moved_up > 0;
        for (int i = 0; i < NS; i++)
            for (int q = 0; rs[i].seq >= 0 && q < rs[i].n_prompt; q++) prompt_in_t1 += kv_token_tier(kv, rs[i].seq, q) == 1;
    }
    tkv_sync(s);
    kv_stats st;
    kv_get_stats(kv, -1, &st);
    printf("    %d sequences, up to %d live at once, %d admissions deferred; T0 peak %lld of %lld bytes; moved down %.1f KiB, up %.1f KiB\n",
           NS, max_live, refused, (long long)st.peak_t0_bytes, (long long)(budget_tokens * tb), st.bytes_moved_down / 1024.0,
           st.bytes_moved_up / 1024.0);
    CHECK(mismatches == 0);
    for (int i = 0; i < NS; i++) CHECK(rs[i].done);
    CHECK(max_live >= 3 && refused > 0);
    CHECK(st.peak_t0_bytes <= budget_tokens * tb && st.t0_budget_bytes == budget_tokens * tb);
    CHECK(st.bytes_moved_down > 0 && moved_up && st.tokens[0] == 0 && st.live_seqs == 0);
    CHECK(st.tokens_evicted == 0);
    CHECKF(unpin ? prompt_in_t1 > 0 : prompt_in_t1 == 0, "prompt tokens in T1 (summed over steps): %d", prompt_in_t1);
    /* never admitted: more than the whole budget (prompt 280 + window 16 > 260) */
    int q;
    CHECK(tkv_seq_open(s, 300, 280, &q, err, sizeof err) == TKV_ERR && strstr(err, "whole hbm budget") && q == -1);
    tkv_session_close(s);
    for (int i = 0; i < NS; i++) free(rs[i].ref);
    free(lg);
    tkv_model_close(m);
}

TEST(kv_shared_budget_join_leave_bit_exact) { join_leave(0); }
TEST(kv_shared_budget_unpinned_prompt_bit_exact) { join_leave(1); }

/* `tierkv bench --parallel N --policy hierarchy --hbm-budget SIZE --stats-json F`: the peak T0 of all
 * sequences together is at most SIZE, under the field names scripts read (total.peak_t0_bytes,
 * total.t0_budget_bytes). */
TEST(kv_shared_bench_stats_json) {
    const char *path = t_shared("fixtures/models/qwen2-Q8_0.gguf");
    FILE *probe = fopen(path, "rb");
    if (!probe) SKIP("fixture model missing");
    fclose(probe);
    /* qwen2 fixture, f16: 2 layers x K,V x 2 kv heads x 64 x 2 bytes = 1024 bytes per token; four
     * sequences of a 128-token prompt reserve 4 x (128 + window 8) = 544 tokens and grow to 4 x 153 */
    const long budget = 560 * 1024;
    char cmd[2048], out[512];
    snprintf(out, sizeof out, "%s/bench-stats.json", t_tmpdir());
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -p 0 -n 24 -d 0 --parallel 4 --reps 1 -t 1 --policy hierarchy --hbm-budget %ld --window 8 "
             "--delta 8 --stats-json %s > /dev/null 2>&1",
             t_bin(), path, budget, out);
    REQUIRE(system(cmd) == 0);
    char *buf, err[256];
    size_t len;
    REQUIRE(eval_read_file(out, &buf, &len, err, sizeof err) == 0);
    struct json_doc *d;
    REQUIRE(json_parse(buf, len, NULL, &d, err, sizeof err) == 0);
    const struct json_value *total = json_get(json_root(d), "total");
    int64_t peak = -1, bud = -1, down = -1;
    CHECK(json_get_int(total, "peak_t0_bytes", &peak) && json_get_int(total, "t0_budget_bytes", &bud));
    CHECK(json_get_int(total, "bytes_moved_down", &down) && down > 0);
    int64_t stall = -1; /* the CPU's copies are synchronous: no device stall to time */
    CHECK(json_get_int(total, "copy_stall_seconds", &stall) && stall == 0);
    printf("    peak T0 %lld of %ld bytes, moved down %lld\n", (long long)peak, budget, (long long)down);
    CHECK(peak > 0 && peak <= budget && bud == budget);
    json_free(d);
    free(buf);
}
