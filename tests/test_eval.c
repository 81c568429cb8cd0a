/* test_eval.c — `tierkv eval` and `tierkv sweep` end to end on a fixture model (random weights, so
 * every answer is wrong; what is checked is the machinery): results file, resume after a kill, a
 * truncated last line, the summary JSON, continuous batching giving the outputs of one-at-a-time
 * decoding, and the sweep's grid, tables and plots. Runs the built binary (t_bin) in a shell. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/path.h"
#include "eval/eval.h"
#include "eval/harness.h"
#include "base/json.h"
#include "t.h"

#define FIXTURE "fixtures/models/qwen2-Q8_0.gguf"

static const char *const questions[5] = {
    "Tom has 3 apples and buys 2 more. How many apples does he have?",
    "A box holds 12 eggs. How many eggs are in 3 boxes?",
    "Sara reads 10 pages a day. How many pages does she read in a week?",
    "A pen costs $2. How much do 4 pens cost?",
    "There are 30 students and half of them are girls. How many boys are there?",
};
static const char *const answers[5] = {"5", "36", "70", "8", "15"};

/* A fresh directory under t_tmpdir() holding data.jsonl; NULL (test skipped) without the fixture. */
static const char *setup(const char *name) {
    static char dir[300];
    if (!t_need(FIXTURE)) return NULL;
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0777);
    char p[600];
    snprintf(p, sizeof p, "%s/data.jsonl", dir);
    FILE *f = fopen(p, "w");
    if (!f) { CHECKF(0, "cannot write %s", p); return NULL; }
    for (int i = 0; i < 5; i++)
        fprintf(f, "{\"id\": \"t-%d\", \"question\": \"%s\", \"answer\": \"%s\"}\n", i, questions[i], answers[i]);
    fclose(f);
    return dir;
}

/* Runs `tierkv eval` on the fixture with extra flags; returns the exit status. */
static int run_eval(const char *dir, const char *out, const char *extra) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s eval -m %s --task gsm8k --data %s/data.jsonl --template chatml -t 2 --out %s/%s --max-tokens 8 %s "
             ">%s/stdout.txt 2>%s/stderr.txt",
             t_bin(), t_shared(FIXTURE), dir, dir, out, extra, dir, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *dir, const char *name) {
    char p[1024], e[256], *buf;
    size_t len;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return eval_read_file(p, &buf, &len, e, sizeof e) ? NULL : buf;
}

static int n_lines(const char *dir, const char *name) {
    char *b = slurp(dir, name);
    int n = 0;
    for (char *c = b; c && *c; c++) n += *c == '\n';
    free(b);
    return b ? n : -1;
}

/* The "output" of (id t-i, sample k) lines, [5][4], NULL where missing (a line without "sample" is 0). */
static void sample_outputs(const char *dir, const char *name, char *out[5][4]) {
    char *b = slurp(dir, name);
    memset(out, 0, 5 * 4 * sizeof(char *));
    size_t pos = 0, n, len = b ? strlen(b) : 0;
    const char *line;
    while (b && eval_next_line(b, len, &pos, &line, &n)) {
        struct json_doc *d;
        if (json_parse(line, n, NULL, &d, NULL, 0)) continue;
        const char *id = json_get_str(json_root(d), "id"), *o = json_get_str(json_root(d), "output");
        int64_t k = 0;
        if (json_get(json_root(d), "sample") && !json_get_int(json_root(d), "sample", &k)) k = -1;
        if (id && o && k >= 0 && k < 4 && !strncmp(id, "t-", 2) && id[2] >= '0' && id[2] <= '4' && !id[3]) {
            free(out[id[2] - '0'][k]);
            out[id[2] - '0'][k] = strdup(o);
        }
        json_free(d);
    }
    free(b);
}

/* The "output" of each id t-0..t-4 in a results file (NULL where missing); free with free_outputs. */
static void outputs(const char *dir, const char *name, char *out[5]) {
    char *all[5][4];
    sample_outputs(dir, name, all);
    for (int i = 0; i < 5; i++) {
        out[i] = all[i][0];
        for (int k = 1; k < 4; k++) free(all[i][k]);
    }
}

static void free_outputs(char *o[5]) {
    for (int i = 0; i < 5; i++) free(o[i]);
}

TEST(eval_results_and_summary) {
    const char *dir = setup("e2e");
    if (!dir) return;
    char extra[700];
    snprintf(extra, sizeof extra, "--parallel 2 --summary-json %s/summary.json", dir);
    REQUIRE(run_eval(dir, "r.jsonl", extra) == 0);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    struct harness_results res;
    char p[600], e[256];
    snprintf(p, sizeof p, "%s/r.jsonl", dir);
    REQUIRE(harness_load(p, &res, stderr, e, sizeof e) == 0);
    CHECK(res.n == 5);
    for (size_t i = 0; i < res.n; i++) {
        CHECK(res.r[i].gen_tokens >= 1 && res.r[i].gen_tokens <= 8);
        CHECK(res.r[i].prompt_tokens > 0);
        CHECK(res.r[i].tier_tokens[0] >= res.r[i].prompt_tokens); /* policy full: everything in T0 */
        CHECK(res.r[i].peak_t0_bytes > 0);
    }
    harness_results_free(&res);
    char *s = slurp(dir, "summary.json");
    REQUIRE(s);
    struct json_doc *d;
    REQUIRE(json_parse(s, strlen(s), NULL, &d, e, sizeof e) == 0);
    int64_t n = -1;
    CHECK(json_get_int(json_root(d), "n", &n) && n == 5);
    CHECK(json_get(json_root(d), "ci_hi") != NULL);
    CHECK(json_get_str(json_root(d), "policy") && !strcmp(json_get_str(json_root(d), "policy"), "full"));
    json_free(d);
    free(s);
    char *so = slurp(dir, "stdout.txt");
    CHECK(so && strstr(so, "accuracy") && strstr(so, "Wilson 95%"));
    free(so);
}

/* --spread takes the n problems at evenly spaced positions after --offset, not the first n: of 5,
 * --n 2 runs positions 0 and 2, with --offset 1 positions 1 and 3; the summary lists those ids. */
TEST(eval_spread_selects_evenly) {
    const char *dir = setup("spread");
    if (!dir) return;
    const struct { const char *flags, *file; int want[5]; } cases[] = {
        {"--n 2 --spread", "a.jsonl", {1, 0, 1, 0, 0}},
        {"--offset 1 --n 2 --spread", "b.jsonl", {0, 1, 0, 1, 0}},
        {"--n 2", "c.jsonl", {1, 1, 0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char extra[700];
        snprintf(extra, sizeof extra, "%s --summary-json %s/%s.summary", cases[c].flags, dir, cases[c].file);
        REQUIRE(run_eval(dir, cases[c].file, extra) == 0);
        char *o[5];
        outputs(dir, cases[c].file, o);
        for (int i = 0; i < 5; i++) CHECKF((o[i] != NULL) == cases[c].want[i], "%s: t-%d", cases[c].flags, i);
        free_outputs(o);
        char name[64];
        snprintf(name, sizeof name, "%s.summary", cases[c].file);
        char *sj = slurp(dir, name);
        REQUIRE(sj);
        for (int i = 0; i < 5; i++) {
            char id[16];
            snprintf(id, sizeof id, "\"t-%d\"", i);
            CHECKF((strstr(sj, id) != NULL) == cases[c].want[i], "%s: summary and t-%d", cases[c].flags, i);
        }
        free(sj);
    }
}

/* `tierkv verify` on a file in which no line carries a check (JSON lines without one, plain text, no
 * lines at all) has verified nothing: exit 1 with a message saying so (before: exit 0, "0 intact").
 * A committed results file with checks still passes. Needs only the binary. */
TEST(verify_no_checked_line_fails) {
    const char *files[][2] = {{"plain.jsonl", "{\"id\":\"a\",\"correct\":true}\n{\"id\":\"b\"}\n"},
                              {"text.txt", "hello\nworld\n"},
                              {"empty.jsonl", ""}};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", t_tmpdir(), files[k][0]);
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fputs(files[k][1], f);
        REQUIRE(fclose(f) == 0);
        char *argv[] = {(char *)t_bin(), "verify", path, NULL}, *err = NULL;
        int st = t_spawn(argv, NULL, 10, &err);
        const char *e = err ? err : "";
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d; stderr: %.200s", files[k][0], st, e);
        CHECKF(strstr(e, *files[k][1] ? "no line carried a check" : "nothing to verify"), "%s: stderr: %.200s",
               files[k][0], e);
        free(err);
    }
    const char *checked = "results/gsm8k-1.5b-n200-v2/full.jsonl"; /* committed, with checks */
    if (access(checked, R_OK) == 0) {
        char *argv[] = {(char *)t_bin(), "verify", (char *)checked, NULL}, *err = NULL;
        int st = t_spawn(argv, NULL, 10, &err);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d; stderr: %.200s", checked, st, err ? err : "");
        free(err);
    }
}

/* Every line carries the build, the kernels and a check; an edited line is caught, an untouched one passes. */
TEST(eval_lines_checked_and_verified) {
    const char *dir = setup("verify");
    if (!dir) return;
    char extra[700];
    snprintf(extra, sizeof extra, "--parallel 2 --summary-json %s/summary.json", dir);
    REQUIRE(run_eval(dir, "r.jsonl", extra) == 0);
    char *b = slurp(dir, "r.jsonl");
    REQUIRE(b);
    size_t pos = 0, n, len = strlen(b);
    const char *line;
    int lines = 0;
    while (eval_next_line(b, len, &pos, &line, &n)) {
        lines++;
        CHECK(harness_verify_line(line, n) == 1);
        CHECK(memmem(line, n, "\"build\":\"", 9) != NULL);
        CHECK(memmem(line, n, "\"kernels\":\"cpu ", 15) != NULL); /* which kernels' float sums wrote it */
        char *copy = strndup(line, n);
        char *digit = strstr(copy, "\"gen_tokens\":") + 13; /* one changed number */
        *digit = *digit == '1' ? '2' : '1';
        CHECK(harness_verify_line(copy, n) == -1);
        free(copy);
    }
    CHECK(lines == 5);
    CHECK(harness_verify_line("{\"id\":\"x\"}", 10) == 0); /* written before checks existed */
    CHECK(harness_verify_line("{\"id\":\"x\",\"check\":\"00\"}", 22) == -1);
    /* the command line tool: intact file exit 0, an edited copy exit 1 naming the line */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s verify %s/r.jsonl >%s/v.txt 2>&1", t_bin(), dir, dir);
    CHECK(system(cmd) == 0);
    char *v = slurp(dir, "v.txt");
    CHECK(v && strstr(v, "5 lines, 5 intact, 0 unchecked, 0 altered"));
    free(v);
    snprintf(cmd, sizeof cmd, "sed '3s/\"correct\":false/\"correct\":true/' %s/r.jsonl > %s/e.jsonl && "
                              "%s verify %s/e.jsonl >%s/v2.txt 2>&1", dir, dir, t_bin(), dir, dir);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    v = slurp(dir, "v2.txt");
    CHECK(v && strstr(v, "e.jsonl:3:") && strstr(v, "1 altered"));
    free(v);
    free(b);
    char *s = slurp(dir, "summary.json");
    CHECK(s && strstr(s, "\"commit\":\"") && strstr(s, "\"build_flags\":\"") && strstr(s, "\"command\":\"tierkv eval"));
    free(s);
}

TEST(eval_resume_after_kill) {
    const char *dir = setup("resume");
    if (!dir) return;
    char extra[700];
    REQUIRE(run_eval(dir, "r.jsonl", "--n 3") == 0);
    CHECK(n_lines(dir, "r.jsonl") == 3);
    snprintf(extra, sizeof extra, "--n 5 --summary-json %s/s.json", dir);
    REQUIRE(run_eval(dir, "r.jsonl", extra) == 0);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    char *s = slurp(dir, "s.json"), e[256];
    REQUIRE(s);
    struct json_doc *d;
    REQUIRE(json_parse(s, strlen(s), NULL, &d, e, sizeof e) == 0);
    int64_t n = -1, ran = -1;
    CHECK(json_get_int(json_root(d), "n", &n) && n == 5);
    CHECK(json_get_int(json_root(d), "run_problems", &ran) && ran == 2);
    json_free(d);
    /* everything done: nothing runs, the summary still counts all */
    REQUIRE(run_eval(dir, "r.jsonl", "--n 5") == 0);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    char *so = slurp(dir, "stdout.txt");
    CHECK(so && strstr(so, "(0/5)") && strstr(so, "nothing left"));
    free(so);
    /* ... and a summary that records these problems is kept, with the throughput of the run that ran
     * them; another selection rewrites it */
    REQUIRE(run_eval(dir, "r.jsonl", extra) == 0);
    char *s2 = slurp(dir, "s.json");
    CHECK(s2 && s && !strcmp(s, s2));
    free(s2);
    snprintf(extra, sizeof extra, "--n 4 --summary-json %s/s.json", dir);
    REQUIRE(run_eval(dir, "r.jsonl", extra) == 0);
    s2 = slurp(dir, "s.json");
    REQUIRE(s2 && json_parse(s2, strlen(s2), NULL, &d, e, sizeof e) == 0);
    CHECK(json_get_int(json_root(d), "n", &n) && n == 4);
    CHECK(json_get_int(json_root(d), "run_problems", &ran) && ran == 0);
    json_free(d);
    free(s2);
    /* the same file under another configuration is refused, not mixed */
    CHECK(run_eval(dir, "r.jsonl", "--n 5 --max-tokens 4") == 1);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    char *se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "another configuration"));
    free(se);
    /* so is another KV element type (the file was written with the default, f16) */
    CHECK(run_eval(dir, "r.jsonl", "--n 5 --kv-type f32") == 1);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "kv type f16"));
    free(se);
    free(s);
}

TEST(eval_truncated_last_line) {
    const char *dir = setup("trunc");
    if (!dir) return;
    REQUIRE(run_eval(dir, "r.jsonl", "--n 3") == 0);
    char p[600];
    snprintf(p, sizeof p, "%s/r.jsonl", dir);
    FILE *f = fopen(p, "a");
    REQUIRE(f);
    fputs("{\"id\":\"t-3\",\"task\":\"gsm8k\",\"output\":\"half a li", f); /* killed mid-write */
    fclose(f);
    REQUIRE(run_eval(dir, "r.jsonl", "--n 5") == 0);
    CHECK(n_lines(dir, "r.jsonl") == 5);
    char *o[5];
    outputs(dir, "r.jsonl", o);
    for (int i = 0; i < 5; i++) CHECK(o[i] != NULL);
    free_outputs(o);
    char *se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "truncated"));
    free(se);
}

/* A last line without its newline, in each form it can take: a complete record (kept, also with a
 * CR, with bad UTF-8, or a JSON line that is not a record), a record a killed run was writing (cut
 * off, said on stderr even under --quiet, also when cut inside a UTF-8 character), and a line
 * that is neither (refused, the file left byte for byte). */
static void write_bytes(const char *dir, const char *name, const char *a, size_t na, const char *b, size_t nb) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) { CHECKF(0, "cannot write %s", p); return; }
    fwrite(a, 1, na, f);
    fwrite(b, 1, nb, f);
    fclose(f);
}

TEST(eval_last_line_without_newline) {
    const char *dir = setup("tail");
    if (!dir) return;
    REQUIRE(run_eval(dir, "base.jsonl", "--n 2") == 0);
    char *base = slurp(dir, "base.jsonl");
    REQUIRE(base && n_lines(dir, "base.jsonl") == 2);
    size_t bn = strlen(base);
    static const struct { const char *tail; int keep_base_nl, rc, lines, removed; } cases[] = {
        {"", 0, 0, 3, 0},                                        /* the 2nd record lacks its newline only */
        {"\r", 0, 0, 3, 0},                                     /* ... a CRLF file */
        {"{\"note\":\"by hand\"}", 1, 0, 4, 0},              /* a JSON line that is no record */
        {"{\"id\":\"t-9\",\"output\":\"\xff\"}", 1, 0, 4, 0},  /* a record with bad UTF-8 */
        {"{\"id\":\"t-2\",\"task\":\"gsm8k\",\"output\":\"half a li", 1, 0, 3, 1}, /* killed mid-write */
        {"{\"id\":\"t-2\",\"output\":\"caf\xc3", 1, 0, 3, 1},  /* ... inside a UTF-8 character */
        {"{\"id\":\"", 1, 0, 3, 1},                             /* ... right after the id key */
        {"garbage", 1, 1, -1, 0},                                /* neither: refused */
        {"{\"output\":\"x", 1, 1, -1, 0},                        /* not a line of ours: refused */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_bytes(dir, "r.jsonl", base, cases[i].keep_base_nl ? bn : bn - 1, cases[i].tail, strlen(cases[i].tail));
        char *before = slurp(dir, "r.jsonl");
        int rc = run_eval(dir, "r.jsonl", "--n 3 --quiet");
        char *se = slurp(dir, "stderr.txt"), *after = slurp(dir, "r.jsonl");
        CHECKF(rc == cases[i].rc, "case %zu: exit %d, stderr: %s", i, rc, se ? se : "");
        if (cases[i].lines >= 0) CHECKF(n_lines(dir, "r.jsonl") == cases[i].lines, "case %zu: %d lines", i, n_lines(dir, "r.jsonl"));
        int removed = se && strstr(se, "removed a truncated last line");
        CHECKF(removed == cases[i].removed, "case %zu: stderr: %s", i, se ? se : "");
        if (cases[i].rc) CHECKF(se && strstr(se, "neither") && before && after && !strcmp(before, after), "case %zu: file changed", i);
        else {
            char *o[5];
            outputs(dir, "r.jsonl", o);
            for (int k = 0; k < 3; k++) CHECKF(o[k] != NULL, "case %zu: t-%d missing", i, k);
            free_outputs(o);
            if (!cases[i].removed) CHECKF(after && strstr(after, cases[i].tail), "case %zu: the last line was lost", i);
        }
        free(before);
        free(after);
        free(se);
    }
    free(base);
}

/* A results file written before kv_type was recorded ran with an f32 cache: it resumes with
 * --kv-type f32 and is refused under the default f16. */
TEST(eval_old_file_is_f32) {
    const char *dir = setup("oldkv");
    if (!dir) return;
    REQUIRE(run_eval(dir, "r.jsonl", "--n 2 --kv-type f32") == 0);
    char p[600];
    snprintf(p, sizeof p, "%s/r.jsonl", dir);
    char *s = slurp(dir, "r.jsonl");
    REQUIRE(s);
    int removed = 0;
    for (char *k; (k = strstr(s, "\"kv_type\":\"f32\",")) != NULL; removed++)
        memmove(k, k + strlen("\"kv_type\":\"f32\","), strlen(k + strlen("\"kv_type\":\"f32\",")) + 1);
    CHECK(removed == 2);
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    fputs(s, f);
    fclose(f);
    free(s);
    CHECK(run_eval(dir, "r.jsonl", "--n 3") == 1);
    char *se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "kv type f32"));
    free(se);
    CHECK(run_eval(dir, "r.jsonl", "--n 3 --kv-type f32") == 0);
    CHECK(n_lines(dir, "r.jsonl") == 3);
}

TEST(eval_parallel_matches_serial) {
    const char *dir = setup("par");
    if (!dir) return;
    REQUIRE(run_eval(dir, "p1.jsonl", "--parallel 1") == 0);
    REQUIRE(run_eval(dir, "p2.jsonl", "--parallel 2") == 0);
    REQUIRE(run_eval(dir, "p4.jsonl", "--parallel 4") == 0);
    char *a[5], *b[5], *c[5];
    outputs(dir, "p1.jsonl", a);
    outputs(dir, "p2.jsonl", b);
    outputs(dir, "p4.jsonl", c);
    for (int i = 0; i < 5; i++) {
        REQUIRE(a[i] && b[i] && c[i]);
        CHECKF(!strcmp(a[i], b[i]), "t-%d: parallel 1 '%s' vs parallel 2 '%s'", i, a[i], b[i]);
        CHECKF(!strcmp(a[i], c[i]), "t-%d: parallel 1 '%s' vs parallel 4 '%s'", i, a[i], c[i]);
    }
    free_outputs(a), free_outputs(b), free_outputs(c);
}

/* A prompt prefix all problems share (here a long system prompt) is prefilled once and copied into
 * each slot: the outputs are those of prefilling every prompt whole, for the reference cache and for
 * the hierarchy with eviction (whose scores ignore the prompt's own attention). */
TEST(eval_prefix_cache_same_outputs) {
    const char *dir = setup("prefix");
    if (!dir) return;
    const char *sys = "--system 'You are a careful assistant. Think about each quantity, write every step, check the "
                      "arithmetic twice and give one final number.'";
    const char *pol[2] = {"", "--policy hierarchy --hbm-ratio 0.3 --evict-ratio 0.1 --window 2 --sinks 1 --delta 1"};
    for (int k = 0; k < 2; k++) {
        char ex[512];
        snprintf(ex, sizeof ex, "%s %s --parallel 2 --max-tokens 12", sys, pol[k]);
        REQUIRE(run_eval(dir, k ? "h1.jsonl" : "f1.jsonl", ex) == 0);
        char *se = slurp(dir, "stderr.txt");
        CHECKF(se && strstr(se, "prompt tokens are shared"), "policy %d: the prefix was not shared", k);
        free(se);
        snprintf(ex, sizeof ex, "%s %s --parallel 2 --max-tokens 12 --no-prefix-cache", sys, pol[k]);
        REQUIRE(run_eval(dir, k ? "h2.jsonl" : "f2.jsonl", ex) == 0);
        se = slurp(dir, "stderr.txt");
        CHECK(se && !strstr(se, "prompt tokens are shared"));
        free(se);
        char *a[5], *b[5];
        outputs(dir, k ? "h1.jsonl" : "f1.jsonl", a);
        outputs(dir, k ? "h2.jsonl" : "f2.jsonl", b);
        for (int i = 0; i < 5; i++) {
            REQUIRE(a[i] && b[i]);
            CHECKF(!strcmp(a[i], b[i]), "policy %d t-%d: shared prefix '%s' vs whole prompt '%s'", k, i, a[i], b[i]);
        }
        free_outputs(a), free_outputs(b);
    }
    /* H2O scores the prompt's own attention: every prompt is prefilled whole */
    char ex[512];
    snprintf(ex, sizeof ex, "%s --policy h2o --hbm-ratio 0.5 --parallel 2 --max-tokens 4", sys);
    REQUIRE(run_eval(dir, "o.jsonl", ex) == 0);
    char *se = slurp(dir, "stderr.txt");
    CHECK(se && !strstr(se, "prompt tokens are shared"));
    free(se);
}

TEST(eval_bad_flags_and_missing_data) {
    const char *dir = setup("flags");
    if (!dir) return;
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s eval --bogus >/dev/null 2>&1", t_bin());
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    snprintf(cmd, sizeof cmd, "%s eval --task nope -m %s >/dev/null 2>&1", t_bin(), t_shared(FIXTURE));
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    /* no --data, no $TIERKV_DATA, no data/ here: the error names the flag */
    char bin[4096], model[4096];
    REQUIRE(realpath(t_bin(), bin) && realpath(t_shared(FIXTURE), model));
    snprintf(cmd, sizeof cmd, "cd %s && TIERKV_DATA= %s eval --task gsm8k -m %s 2>&1", dir, bin, model);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    char buf[4096] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(buf, "--data") != NULL);
    /* a data file that is not JSONL fails cleanly */
    CHECK(run_eval(dir, "r.jsonl", "--data /dev/null/none") == 1);
}

TEST(eval_sweep_dry_run) {
    if (access(t_bin(), X_OK)) SKIP("built binary missing");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s sweep --dir %s/never --dry-run -m x.gguf --task gsm8k --n 10", t_bin(), t_tmpdir());
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    static char buf[32768];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    int st = pclose(p);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* full once, hierarchy 3 x 3, evict/quant/streaming/h2o/rkv 3 each */
    CHECK(strstr(buf, "25 configurations") != NULL);
    CHECK(strstr(buf, "hierarchy_t0-0.5_ev-0.03") && strstr(buf, "--evict-ratio 0.03"));
    CHECK(strstr(buf, "h2o_t0-0.7") && strstr(buf, "--policy h2o --hbm-ratio 0.7"));
    CHECK(strstr(buf, "--task gsm8k --n 10") != NULL);
    char d[600];
    snprintf(d, sizeof d, "%s/never", t_tmpdir());
    CHECK(access(d, F_OK) != 0); /* a dry run creates nothing */
}

/* The grid's ratio lists refuse what is no ratio (NaN in any spelling, inf, out of [0, 1]), empty
 * items, values given twice, and lists too long to hold; ratios in range are taken. */
TEST(eval_sweep_grid_values) {
    static const char *bad[] = {"nan", "NaN", "-nan", "0.3,nan", "nan,0.3", "inf", "-inf", "1e400", "-0.1", "1.0000001",
                                "0.5,,0.3", "0.5,", ",0.5", "", "0.3,0.3", "abc", "0.5x"};
    static const char *good[] = {"0", "1", "0.3,0.5,0.7", "0.25,0.75", "-0"};
    char cmd[4096], longlist[700];
    for (int flag = 0; flag < 2; flag++) {
        const char *f = flag ? "--evict" : "--t0";
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            snprintf(cmd, sizeof cmd, "%s sweep --dir %s/never %s '%s' --dry-run -m x.gguf --task gsm8k >/dev/null 2>&1", t_bin(), t_tmpdir(), f, bad[i]);
            int st = system(cmd);
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s '%s': status %d", f, bad[i], st);
        }
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            snprintf(cmd, sizeof cmd, "%s sweep --dir %s/never %s '%s' --dry-run -m x.gguf --task gsm8k >/dev/null 2>&1", t_bin(), t_tmpdir(), f, good[i]);
            int st = system(cmd);
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s '%s': status %d", f, good[i], st);
        }
        size_t n = 0;
        while (n + 8 < sizeof longlist - 1) n += (size_t)snprintf(longlist + n, sizeof longlist - n, "%s0.0001", n ? "," : "");
        snprintf(cmd, sizeof cmd, "%s sweep --dir %s/never %s '%s' --dry-run -m x.gguf --task gsm8k >/dev/null 2>&1", t_bin(), t_tmpdir(), f, longlist);
        int st = system(cmd);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s of %zu characters: status %d", f, n, st);
    }
}

TEST(eval_sweep_tiny) {
    const char *dir = setup("sweep");
    if (!dir) return;
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s sweep --dir %s/out --policies full,hierarchy --t0 0.5 --evict 0 -m %s --task gsm8k --data %s/data.jsonl "
             "--template chatml --max-tokens 8 --n 3 -t 2 --quiet >%s/sweep.txt 2>&1",
             t_bin(), dir, t_shared(FIXTURE), dir, dir);
    int st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "see %s/sweep.txt", dir);
    char first[8192];
    snprintf(first, sizeof first, "%s", cmd);
    char out[600];
    snprintf(out, sizeof out, "%s/out", dir);
    char *tsv = slurp(out, "sweep.tsv");
    REQUIRE(tsv);
    CHECK(strstr(tsv, "policy\tt0_ratio\tevict_ratio\tbudget\tn\tcorrect\taccuracy\tci_lo\tci_hi\tmean_len") != NULL);
    CHECK(strstr(tsv, "\nfull\t1\t0\t8\t3\t") != NULL);
    CHECK(strstr(tsv, "\nhierarchy\t0.5\t0\t8\t3\t") != NULL);
    free(tsv);
    char *mc = slurp(out, "mcnemar.tsv");
    REQUIRE(mc);
    CHECK(strstr(mc, "vs_full\thierarchy_t0-0.5_ev-0\tfull\t3\t") != NULL);
    free(mc);
    CHECK(n_lines(out, "full.jsonl") == 3);
    char png[700];
    /* --table-only over a larger grid runs nothing and lists only the configurations with results */
    snprintf(cmd, sizeof cmd,
             "%s sweep --dir %s/out --policies full,hierarchy,h2o --t0 0.3,0.5 --evict 0,0.1 --table-only --no-plot -m %s "
             "--task gsm8k --data %s/data.jsonl --template chatml --max-tokens 8 --n 3 -t 2 --quiet >%s/table.txt 2>&1",
             t_bin(), dir, t_shared(FIXTURE), dir, dir);
    st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "see %s/table.txt", dir);
    tsv = slurp(out, "sweep.tsv");
    REQUIRE(tsv);
    CHECK(strstr(tsv, "\nfull\t1\t0\t8\t3\t") != NULL && strstr(tsv, "\nhierarchy\t0.5\t0\t8\t3\t") != NULL);
    CHECK(strstr(tsv, "h2o") == NULL && strstr(tsv, "hierarchy\t0.3") == NULL);
    free(tsv);
    snprintf(png, sizeof png, "%s/h2o_t0-0.3.jsonl", out);
    CHECK(access(png, F_OK) != 0);
    char *cmds = slurp(out, "sweep.cmd");
    REQUIRE(cmds);
    CHECK(strstr(cmds, "--table-only") == NULL); /* the record of what ran is left alone */
    /* the model by its file name only: no directory of this machine in a results file */
    const char *mbase = strrchr(FIXTURE, '/') ? strrchr(FIXTURE, '/') + 1 : FIXTURE;
    char mflag[300];
    snprintf(mflag, sizeof mflag, " -m %s ", mbase);
    CHECK(strstr(cmds, mflag) != NULL);
    CHECK(strstr(cmds, t_shared(FIXTURE)) == NULL);
    CHECK(strstr(cmds, t_tmpdir()) == NULL); /* --dir and --data were absolute: their file names */
    CHECK(strstr(cmds, " --data data.jsonl ") != NULL);
    free(cmds);
    /* the same sweep again (a queue resumed) runs nothing and records no second line */
    st = system(first);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "see %s/sweep.txt", dir);
    CHECK(n_lines(out, "sweep.cmd") == 1);
    /* a number a summary does not hold is written NA and the columns stay aligned; the eviction
     * statistic comes from the per-problem records, not from the summary */
    snprintf(cmd, sizeof cmd, "sed -i -e 's/\"tok_per_s\"/\"tok_per_x\"/' -e 's/\"mean_evicted\": *[0-9.]*/\"mean_evicted\":99/' "
             "%s/full.summary.json && "
             "%s sweep --dir %s --policies full,hierarchy --t0 0.5 --evict 0 --table-only --no-plot -m %s "
             "--task gsm8k --data %s/data.jsonl --template chatml --max-tokens 8 --n 3 -t 2 --quiet >%s/table2.txt 2>&1",
             out, t_bin(), out, t_shared(FIXTURE), dir, dir);
    st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "see %s/table2.txt", dir);
    tsv = slurp(out, "sweep.tsv");
    REQUIRE(tsv);
    int rows = 0, header_tabs = -1;
    for (char *line = strtok(tsv, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        int tabs = 0;
        for (char *c = line; *c; c++) tabs += *c == '\t';
        if (header_tabs < 0) header_tabs = tabs;
        else {
            CHECKF(tabs == header_tabs, "sweep.tsv row with %d tabs, header %d: %s", tabs, header_tabs, line);
            rows++;
        }
        if (!strncmp(line, "full\t", 5))
            CHECKF(strstr(line, "\tNA\tfull") != NULL && strstr(line, "\t99") == NULL, "full row: %s", line);
    }
    CHECK(rows == 2);
    free(tsv);
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) SKIP("gnuplot not installed: plots not checked");
    snprintf(png, sizeof png, "%s/plots/acc_vs_evict.png", out);
    CHECK(access(png, R_OK) == 0);
}

/* The one reader of text and JSONL files (eval_read_file) refuses what is no text file, with a
 * message and at once: directories, devices (/dev/zero would never end), FIFOs (nothing is waited
 * for), files over the cap (a sparse one, so nothing is written), and files holding a NUL byte
 * (a prompt would be cut there); every command that reads such a file says so and exits 1. */
TEST(eval_text_files_refused) {
    char d[600], fifo[700], big[700], link[700], nul[3][700], ok[700], err[512], *buf;
    size_t len;
    snprintf(d, sizeof d, "%s/readers", t_tmpdir());
    REQUIRE(mkdir(d, 0777) == 0);
    snprintf(fifo, sizeof fifo, "%s/fifo", d);
    REQUIRE(mkfifo(fifo, 0666) == 0);
    snprintf(big, sizeof big, "%s/big.jsonl", d);
    FILE *f = fopen(big, "w");
    REQUIRE(f && ftruncate(fileno(f), (off_t)EVAL_MAX_FILE + 1) == 0);
    fclose(f);
    static const char *nul_text[3] = {"\0abc", "{\"a\":1}\n{\"b\":\0}\n", "tail\0"};
    static const size_t nul_len[3] = {4, 16, 5};
    for (int i = 0; i < 3; i++) {
        snprintf(nul[i], sizeof nul[i], "%s/nul%d.txt", d, i);
        f = fopen(nul[i], "wb");
        REQUIRE(f);
        fwrite(nul_text[i], 1, nul_len[i], f);
        fclose(f);
    }
    snprintf(ok, sizeof ok, "%s/ok.txt", d);
    f = fopen(ok, "w");
    REQUIRE(f);
    fputs("hello\n", f);
    fclose(f);
    snprintf(link, sizeof link, "%s/link.txt", d);
    REQUIRE(symlink(ok, link) == 0);
    const struct { const char *path, *word; } bad[] = {
        {d, "directory"}, {"/dev/zero", "character device"}, {"/dev/null", "character device"}, {fifo, "FIFO"},
        {big, "over the limit"}, {nul[0], "byte 0 is a NUL"}, {nul[1], ":2: byte 13 is a NUL"}, {nul[2], "byte 4 is a NUL"},
        {"/nonexistent/x.jsonl", "No such file"},
    };
    const size_t nbad = sizeof bad / sizeof bad[0];
    for (size_t i = 0; i < nbad; i++)
        CHECKF(eval_read_file(bad[i].path, &buf, &len, err, sizeof err) == -1 && strstr(err, bad[i].word) && strstr(err, bad[i].path),
               "%s: '%s'", bad[i].path, err);
    CHECK(eval_read_file(link, &buf, &len, err, sizeof err) == 0 && len == 6 && !strcmp(buf, "hello\n"));
    free(buf);
    /* through the commands (a time limit: a hang is a failure) */
    const char *model = t_need("fixtures/models/qwen2-Q8_0.gguf");
    char cmds[8][300];
    int nc = 0;
    snprintf(cmds[nc++], 300, "grade --task gsm8k --in");
    snprintf(cmds[nc++], 300, "verify");
    snprintf(cmds[nc++], 300, "eval --task gsm8k -m /nonexistent.gguf --data");
    if (model) {
        snprintf(cmds[nc++], 300, "tokenize -m %s -f", model);
        snprintf(cmds[nc++], 300, "detokenize -m %s -f", model);
        snprintf(cmds[nc++], 300, "run -m %s -n 1 -f", model);
    }
    for (int c = 0; c < nc; c++) {
        for (size_t i = 0; i < nbad; i++) {
            char cmd[4096], log[700];
            snprintf(log, sizeof log, "%s/cmd.log", d);
            snprintf(cmd, sizeof cmd, "timeout 20 %s %s '%s' >'%s' 2>&1", t_bin(), cmds[c], bad[i].path, log);
            int st = system(cmd);
            char *out = NULL;
            size_t on = 0;
            if (eval_read_file(log, &out, &on, err, sizeof err)) out = NULL;
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1 && out && strstr(out, bad[i].word), "tierkv %s %s: status %d: %s", cmds[c],
                   bad[i].path, st, out ? out : "");
            free(out);
        }
    }
}

/* An id given twice in a data file would be run and counted twice: the load is refused, naming the
 * id and both lines, whatever lies between them (blank lines count as lines); distinct ids that are
 * near each other load. */
TEST(eval_duplicate_ids_refused) {
    static const struct { enum eval_task task; const char *text, *want; } cases[] = {
        {EVAL_GSM8K, "{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"a\",\"question\":\"r\",\"answer\":\"2\"}\n",
         ":2: id 'a' was already given at line 1"},
        {EVAL_GSM8K, "{\"id\":\"x\",\"question\":\"q\",\"answer\":\"1\"}\n\n{\"id\":\"y\",\"question\":\"q\",\"answer\":\"1\"}\n\n"
                     "{\"id\":\"x\",\"question\":\"q\",\"answer\":\"1\"}\n", ":5: id 'x' was already given at line 1"},
        {EVAL_MATH, "{\"id\":\"b\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"c\",\"question\":\"q\",\"answer\":\"1\"}\n"
                    "{\"id\":\"c\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"b\",\"question\":\"q\",\"answer\":\"1\"}\n",
         ":3: id 'c' was already given at line 2"},
        {EVAL_MATH, "{\"id\":\"t\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"t\",\"question\":\"q\",\"answer\":\"1\"}\n"
                    "{\"id\":\"t\",\"question\":\"q\",\"answer\":\"1\"}\n", ":2: id 't' was already given at line 1"},
        {EVAL_ARC, "{\"id\":\"k\",\"question\":\"q\",\"answer_letter\":\"A\",\"choices\":{\"text\":[\"x\",\"y\"]}}\n"
                   "{\"id\":\"k\",\"question\":\"q\",\"answer_letter\":\"B\",\"choices\":{\"text\":[\"x\",\"y\"]}}\n",
         ":2: id 'k' was already given at line 1"},
        {EVAL_GSM8K, "{\"id\":\"\\u00e9\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"\xc3\xa9\",\"question\":\"q\",\"answer\":\"1\"}\n",
         ":2: id '\xc3\xa9' was already given at line 1"},
        {EVAL_GSM8K, "{\"id\":\"A\",\"question\":\"q\",\"answer\":\"1\"}\n{\"id\":\"a\",\"question\":\"q\",\"answer\":\"1\"}\n"
                     "{\"id\":\"a \",\"question\":\"q\",\"answer\":\"1\"}\n", NULL},
    };
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/dup.jsonl", t_tmpdir());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fputs(cases[i].text, f);
        fclose(f);
        struct eval_set s;
        int rc = eval_load(cases[i].task, path, &s, err, sizeof err);
        if (cases[i].want) CHECKF(rc == -1 && strstr(err, cases[i].want) && strstr(err, path), "case %zu: '%s'", i, rc ? err : "loaded");
        else {
            CHECKF(rc == 0 && s.n == 3, "case %zu: %s", i, err);
            if (rc == 0) eval_set_free(&s);
        }
    }
    /* through the command: refused before anything runs */
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(cases[1].text, f);
    fclose(f);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s eval --task gsm8k -m /nonexistent.gguf --data %s 2>&1", t_bin(), path);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    char out[2048];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(out, ":5: id 'x' was already given at line 1"), "%s", out);
}

/* --summary-json and --out are checked before anything runs (the summary used to fail only after
 * the whole eval): a missing directory, a directory, a path under a file, an empty path. Nothing
 * is written: the results file of the run that was refused does not exist. */
TEST(eval_output_paths_checked_first) {
    const char *dir = setup("outpaths");
    if (!dir) return;
    char file[600];
    snprintf(file, sizeof file, "%s/data.jsonl", dir);
    const char *bad[][2] = {{"/nonexistent/dir/s.json", "No such file"}, {"", "empty path"}, {NULL, "is a directory"},
                            {NULL, "Not a directory"}};
    char isdir[600], under[700];
    snprintf(isdir, sizeof isdir, "%s", dir);
    snprintf(under, sizeof under, "%s/x.json", file);
    bad[2][0] = isdir;
    bad[3][0] = under;
    for (int flag = 0; flag < 2; flag++) {
        for (int i = 0; i < 4; i++) {
            char extra[1600], out[64];
            snprintf(out, sizeof out, "never-%d-%d.jsonl", flag, i);
            if (flag == 0) snprintf(extra, sizeof extra, "--summary-json '%s'", bad[i][0]);
            else snprintf(extra, sizeof extra, "--out '%s'", bad[i][0]); /* the later --out wins */
            CHECKF(run_eval(dir, out, extra) == 1, "%s", extra);
            char *se = slurp(dir, "stderr.txt");
            CHECKF(se && strstr(se, bad[i][1]) && strstr(se, flag ? "--out" : "--summary-json"), "%s: %s", extra, se ? se : "");
            CHECKF(!se || !strstr(se, "[eval]"), "%s: the run started", extra);
            free(se);
            char p[700];
            snprintf(p, sizeof p, "%s/%s", dir, out);
            CHECKF(access(p, F_OK) != 0, "%s: %s was written", extra, out);
        }
    }
}

/* What results files and the API name a file by (base/path.h). */
TEST(base_file_name) {
    CHECK(!strcmp(tkv_file_name("/a/b/model.gguf"), "model.gguf"));
    CHECK(!strcmp(tkv_file_name("model.gguf"), "model.gguf"));
    CHECK(!strcmp(tkv_file_name("dir/"), "dir/"));
    CHECK(!strcmp(tkv_file_name("/"), "/"));
    CHECK(!strcmp(tkv_file_name(NULL), ""));
}

/* A T2 configuration records the codec it ran also when none was asked for (the backend's default,
 * which has changed once: a line without a codec means q8h); a configuration without T2 records none,
 * so its lines compare with lines written before codecs were recorded. Resuming the q8h file with
 * the default codec is refused, naming both. */
TEST(eval_t2_codec_recorded) {
    const char *dir = setup("t2codec");
    if (!dir) return;
    REQUIRE(run_eval(dir, "d.jsonl", "--n 2 --policy quant --hbm-ratio 0.3") == 0);
    REQUIRE(run_eval(dir, "q.jsonl", "--n 2 --policy quant --hbm-ratio 0.3 --t2-codec q8h") == 0);
    REQUIRE(run_eval(dir, "f.jsonl", "--n 2") == 0);
    char want[64];
    snprintf(want, sizeof want, "\"t2_codec\":\"%s\"", tkv_t2_codec_default("cpu"));
    char *d = slurp(dir, "d.jsonl"), *q = slurp(dir, "q.jsonl"), *f = slurp(dir, "f.jsonl");
    CHECKF(d && strstr(d, want), "no %s in the default run's lines", want);
    CHECK(f && !strstr(f, "t2_codec"));
    free(d), free(q), free(f);
    CHECK(run_eval(dir, "q.jsonl", "--n 3 --policy quant --hbm-ratio 0.3") == 1);
    char *e = slurp(dir, "stderr.txt");
    CHECKF(e && strstr(e, "another configuration") && strstr(e, "q8h"), "%s", e ? e : "(no stderr)");
    free(e);
}

/* The generated text of every line, in file order ("output" up to the next key). */
static int outputs_equal(const char *a, const char *b) {
    for (;;) {
        const char *x = strstr(a, "\"output\":"), *y = strstr(b, "\"output\":");
        if (!x || !y) return !x && !y;
        const char *xe = strstr(x, "\",\""), *ye = strstr(y, "\",\"");
        if (!xe || !ye || xe - x != ye - y || memcmp(x, y, (size_t)(xe - x))) return 0;
        a = xe, b = ye;
    }
}

/* --unpin-prompt: recorded in the lines (a file of pinned runs refuses to be resumed with it), and with
 * eviction the same texts as the prompt pinned at another T0 share (the T0 share changes no output). */
TEST(eval_unpinned_prompt_recorded) {
    const char *dir = setup("unpin");
    if (!dir) return;
    const char *common = "--n 3 --parallel 1 --policy hierarchy --evict-ratio 0.1 --window 8 --delta 8 --max-tokens 64";
    char a[512], b[512];
    snprintf(a, sizeof a, "%s --hbm-ratio 0.5", common);
    snprintf(b, sizeof b, "%s --hbm-ratio 0.1 --unpin-prompt", common);
    REQUIRE(run_eval(dir, "p.jsonl", a) == 0);
    REQUIRE(run_eval(dir, "u.jsonl", b) == 0);
    char *p = slurp(dir, "p.jsonl"), *u = slurp(dir, "u.jsonl");
    REQUIRE(p && u);
    CHECK(strstr(u, "\"unpin_prompt\":true") && !strstr(p, "unpin_prompt"));
    CHECK(strstr(p, "\"tokens_evicted\":0,") == NULL); /* something was evicted in every line */
    CHECKF(outputs_equal(p, u), "texts differ:\n%s\n%s", p, u);
    free(p), free(u);
    CHECK(run_eval(dir, "p.jsonl", "--n 4 --parallel 1 --policy hierarchy --evict-ratio 0.1 --window 8 --delta 8 "
                                   "--max-tokens 64 --hbm-ratio 0.5 --unpin-prompt") == 1);
    char *e = slurp(dir, "stderr.txt");
    CHECKF(e && strstr(e, "another configuration"), "%s", e ? e : "(no stderr)");
    free(e);
}

/* --samples K: K sampled chains per problem, chain k seeded seed + k (the same command gives the same
 * chains again; the chains of a problem differ), a line per chain with its "sample", the summary's
 * pass@1 / maj@K / pass@K; a larger K resumes and runs only the new chains; another temperature in
 * the same file is refused; K > 1 without a temperature is refused before anything runs. */
TEST(eval_samples) {
    const char *dir = setup("samples");
    if (!dir) return;
    char extra[700];
    snprintf(extra, sizeof extra, "--samples 3 --temp 1.5 --seed 11 --parallel 4 --summary-json %s/s.json", dir);
    REQUIRE(run_eval(dir, "a.jsonl", extra) == 0);
    CHECK(n_lines(dir, "a.jsonl") == 15);
    REQUIRE(run_eval(dir, "b.jsonl", "--samples 3 --temp 1.5 --seed 11 --parallel 2") == 0);
    char *a[5][4], *b[5][4];
    sample_outputs(dir, "a.jsonl", a);
    sample_outputs(dir, "b.jsonl", b);
    int differ = 0;
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 3; k++) {
            CHECKF(a[i][k] && b[i][k] && !strcmp(a[i][k], b[i][k]), "t-%d sample %d not reproduced", i, k);
            if (k && a[i][k] && a[i][0]) differ += strcmp(a[i][k], a[i][0]) != 0;
        }
    CHECK(differ > 0); /* the chains are not one chain three times */
    char *s = slurp(dir, "s.json"), e[256];
    struct json_doc *d;
    REQUIRE(s && json_parse(s, strlen(s), NULL, &d, e, sizeof e) == 0);
    int64_t v = -1;
    CHECK(json_get_int(json_root(d), "samples", &v) && v == 3);
    CHECK(json_get_int(json_root(d), "n", &v) && v == 5);
    CHECK(json_get_int(json_root(d), "n_samples", &v) && v == 15);
    CHECK(json_get(json_root(d), "pass_at_1") && json_get(json_root(d), "maj_at_k") && json_get(json_root(d), "pass_at_k"));
    const struct json_value *sm = json_get(json_root(d), "sampling");
    CHECK(sm && json_get_str(sm, "seed") && !strcmp(json_get_str(sm, "seed"), "11"));
    json_free(d);
    free(s);
    char *so = slurp(dir, "stdout.txt");
    CHECK(so && strstr(so, "pass@1") && strstr(so, "maj@3") && strstr(so, "pass@3"));
    free(so);
    /* four chains: only the fourth of each runs, the first three are kept */
    REQUIRE(run_eval(dir, "a.jsonl", "--samples 4 --temp 1.5 --seed 11 --parallel 4") == 0);
    CHECK(n_lines(dir, "a.jsonl") == 20);
    char *a4[5][4];
    sample_outputs(dir, "a.jsonl", a4);
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++) CHECKF(a4[i][k] && (k == 3 || !strcmp(a4[i][k], a[i][k])), "t-%d sample %d", i, k);
    /* another temperature, or greedy, in the same file: refused, nothing appended */
    CHECK(run_eval(dir, "a.jsonl", "--samples 4 --temp 0.7 --seed 11") == 1);
    CHECK(run_eval(dir, "a.jsonl", "") == 1);
    char *se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "another configuration") && strstr(se, "sampling"));
    free(se);
    CHECK(n_lines(dir, "a.jsonl") == 20);
    CHECK(run_eval(dir, "c.jsonl", "--samples 2") == 2);
    se = slurp(dir, "stderr.txt");
    CHECK(se && strstr(se, "--temp"));
    free(se);
    CHECK(run_eval(dir, "c.jsonl", "--samples 65 --temp 1") == 2);
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++) free(a[i][k]), free(b[i][k]), free(a4[i][k]);
}

/* maj@K, pass@K and pass@1 from lines written by hand: the majority is the most frequent non-empty
 * answer, ties to the earliest chain, graded as that chain was. */
TEST(eval_samples_summary) {
    char p[600], e[256];
    snprintf(p, sizeof p, "%s/maj.jsonl", t_tmpdir());
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    /* a: 7 7 8 8 (tie: 7, first; 7 correct) -> maj right, pass right, 2/4
     * b: "" 9 9 3 (9 wrong twice, 3 right) -> maj wrong, pass right, 1/4
     * c: 1 1 1 1 all wrong -> maj wrong, pass wrong, 0/4
     * d: 8 7 8 7 (tie: 8, first; 8 wrong) -> maj wrong, pass right, 2/4 */
    const char *rows[][4] = {{"7", "7", "8", "8"}, {"", "9", "9", "3"}, {"1", "1", "1", "1"}, {"8", "7", "8", "7"}};
    const int good[][4] = {{1, 1, 0, 0}, {0, 0, 0, 1}, {0, 0, 0, 0}, {0, 1, 0, 1}};
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 4; k++)
            fprintf(f, "{\"id\":\"%c\",\"sample\":%d,\"pred\":\"%s\",\"correct\":%s,\"gen_tokens\":5}\n", 'a' + q, k, rows[q][k],
                    good[q][k] ? "true" : "false");
    fclose(f);
    struct harness_results res;
    REQUIRE(harness_load(p, &res, stderr, e, sizeof e) == 0);
    harness_results_sort(&res);
    char *ids[4] = {"a", "b", "c", "d"};
    struct harness_summary s = {0};
    harness_summarize(&res, ids, 4, 4, &s);
    CHECK(s.n == 4 && s.n_samples == 16 && s.samples == 4);
    CHECK(s.maj_correct == 1 && s.passk_correct == 3 && s.correct == 5);
    CHECK(fabs(s.pass1 - 5.0 / 16.0) < 1e-12 && fabs(s.majk - 0.25) < 1e-12 && fabs(s.passk - 0.75) < 1e-12);
    CHECK(s.pass1_lo < s.pass1 && s.pass1 < s.pass1_hi);
    /* one chain each: what the summary always said */
    harness_summarize(&res, ids, 4, 1, &s);
    CHECK(s.n == 4 && s.correct == 1 && fabs(s.acc - 0.25) < 1e-12 && s.samples == 1);
    harness_results_free(&res);
}
