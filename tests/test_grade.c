/* test_grade.c — the grader against every row of data/grading_vectors, the statistics against
 * hand-computed values, the task loaders and prompts, and `tierkv grade` end to end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/equal.h"
#include "eval/eval.h"
#include "eval/extract.h"
#include "base/json.h"
#include "eval/normalize.h"
#include "eval/stats.h"
#include "t.h"

static int same(const char *a, const char *b) { return a && b ? !strcmp(a, b) : a == b; }

/* Calls fn(row) for each line of a shared JSONL file; returns the row count or -1 if absent. */
typedef void (*row_fn)(const struct json_value *row, long *ok, long *all);
static long each_row(const char *rel, row_fn fn, long *ok, long *all) {
    char *buf, err[256];
    size_t len, pos = 0, n;
    const char *line;
    long rows = 0;
    if (eval_read_file(t_shared(rel), &buf, &len, err, sizeof err)) return -1;
    while (eval_next_line(buf, len, &pos, &line, &n)) {
        if (!n) continue;
        struct json_doc *d;
        if (json_parse(line, n, NULL, &d, err, sizeof err)) { CHECKF(0, "%s: %s", rel, err); continue; }
        fn(json_root(d), ok, all);
        json_free(d);
        rows++;
    }
    free(buf);
    return rows;
}

static void check_col(const struct json_value *row, const char *key, const char *got, long *ok, long *all) {
    const char *want = json_get_str(row, key);
    (*all)++;
    if (same(want, got)) (*ok)++;
    else CHECKF(0, "%s %s: want [%s] got [%s]", json_get_str(row, "id"), key, want, got);
}

static void norm_row(const struct json_value *r, long *ok, long *all) {
    const char *a = json_get_str(r, "answer");
    char *h = eval_hendrycks_strip(a), *p = eval_prm800k_normalize(a);
    char *q1 = eval_qwen_strip(a, 0), *q2 = eval_qwen_strip(q1, 0);
    check_col(r, "hendrycks_strip_string", h ? h : a, ok, all); /* the vector keeps the raw answer on an exception */
    check_col(r, "prm800k_normalize_answer", p, ok, all);
    check_col(r, "qwen25math_strip_string", q1, ok, all);
    check_col(r, "qwen25math_strip_string_x2", q2, ok, all);
    free(h); free(p); free(q1); free(q2);
}

static void boxed_row(const struct json_value *r, long *ok, long *all) {
    const char *t = json_get_str(r, "text");
    char *e1 = eval_boxed_answer(t), *e2 = eval_qwen_extract(t);
    check_col(r, "hendrycks_remove_boxed_last_boxed", e1, ok, all);
    check_col(r, "qwen25math_extract_answer_math", e2, ok, all);
    free(e1); free(e2);
}

static void gsm8k_row(const struct json_value *r, long *ok, long *all) {
    const char *t = json_get_str(r, "text"), *h = strstr(t, "####");
    char *body = strndup(t, h ? (size_t)(h - t) : strlen(t)); /* the rationale minus its #### line */
    char *s = eval_gsm8k_strict(t), *sn = eval_gsm8k_norm(s);
    char *f = eval_gsm8k_flexible(body), *fn = eval_gsm8k_norm(f), *q = eval_qwen_extract(body);
    check_col(r, "strict_match", s, ok, all);
    check_col(r, "strict_match_norm", sn, ok, all);
    check_col(r, "flexible_extract_on_body", f, ok, all);
    check_col(r, "flexible_extract_on_body_norm", fn, ok, all);
    check_col(r, "qwen25math_extract_answer_gsm8k_on_body", q, ok, all);
    (*all)++; /* strict = gold for every row (GRADING.md) */
    if (same(sn, json_get_str(r, "answer"))) (*ok)++;
    free(body); free(s); free(sn); free(f); free(fn); free(q);
}

static void equiv_row(const struct json_value *r, long *ok, long *all) {
    const char *a = json_get_str(r, "a"), *b = json_get_str(r, "b");
    const struct json_value *want = json_get(r, "is_equiv");
    char *sa = eval_hendrycks_strip(a), *sb = eval_hendrycks_strip(b);
    check_col(r, "strip_a", sa, ok, all);
    check_col(r, "strip_b", sb, ok, all);
    (*all)++;
    int eq = eval_hendrycks_is_equiv(a, b);
    if (want && eq == (want->type == JSON_TRUE)) (*ok)++;
    else CHECKF(0, "is_equiv(%s, %s) = %d", a, b, eq);
    free(sa); free(sb);
}

static void run_vectors(const char *rel, row_fn fn, long expect_rows) {
    NEED(rel);
    long ok = 0, all = 0, rows = each_row(rel, fn, &ok, &all);
    REQUIRE(rows >= 0);
    printf("    %s: %ld rows, %ld/%ld checks pass\n", rel, rows, ok, all);
    CHECK(rows == expect_rows);
    CHECK(ok == all);
}

TEST(grade_vectors_normalization) {
    run_vectors("data/grading_vectors/math_answer_normalization.jsonl", norm_row, 5000);
}
TEST(grade_vectors_boxed_extraction) {
    run_vectors("data/grading_vectors/math_boxed_extraction.jsonl", boxed_row, 5000);
}
TEST(grade_vectors_gsm8k_extraction) {
    run_vectors("data/grading_vectors/gsm8k_extraction.jsonl", gsm8k_row, 1319);
}
TEST(grade_vectors_is_equiv) {
    run_vectors("data/grading_vectors/hendrycks_is_equiv_tests.jsonl", equiv_row, 16);
}

TEST(grade_vectors_unit_texts) {
    char *buf, err[256], unit[64];
    size_t len;
    NEED("data/grading_vectors/qwen25math_unit_texts.json");
    REQUIRE(eval_read_file(t_shared("data/grading_vectors/qwen25math_unit_texts.json"), &buf, &len, err, sizeof err) == 0);
    struct json_doc *d;
    REQUIRE(json_parse(buf, len, NULL, &d, err, sizeof err) == 0);
    const struct json_value *a = json_root(d);
    REQUIRE(a->type == JSON_ARRAY && a->u.arr.n == eval_qwen_unit_count());
    long ok = 0;
    for (size_t i = 0; i < a->u.arr.n; i++) ok += same(json_at(a, i)->u.str.s, eval_qwen_unit(i, unit, sizeof unit));
    printf("    qwen25math_unit_texts.json: %ld/%zu entries match\n", ok, a->u.arr.n);
    CHECK(ok == (long)a->u.arr.n);
    json_free(d);
    free(buf);
}

TEST(grade_w2n) {
    static const char *const cases[][2] = {
        {"two million twenty three thousand and forty nine", "2023049"}, {"one", "1"}, {"007", "7"},
        {"seven point five", "7.5"}, {"hundred", "100"}, {"a", "a"}, {"x and y", "x and y"},
        {"thousand thousand", "thousand thousand"}, {"twenty-one", "21"}, {"-5", "-5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r = eval_w2n_convert(cases[i][0]);
        CHECKF(!strcmp(r, cases[i][1]), "w2n(%s) = %s, want %s", cases[i][0], r, cases[i][1]);
        free(r);
    }
}

TEST(grade_math_equal) {
    static const struct { const char *p, *r; int eq; } cases[] = {
        {"18", "18", 1}, {"18.0", "18", 1}, {"0.5", "\\frac{1}{2}", 1}, {"\\frac{1}{2}", "0.5", 1},
        {"1800", "18", 1}, /* Qwen include_percentage quirk */
        {"17", "18", 0}, {"\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", 1}, {"2\\sqrt{2}", "\\sqrt{8}", 1},
        {"(1,2)", "(1, 2)", 1}, {"(1,2)", "(2,1)", 0}, {"[1,2]", "[1,2.0]", 1},
        {"x=3", "3", 1}, {"3", "y=3", 1}, {"\\pi", "3.14159265", 1}, {"", "1", 0}, {"b", "B", 1},
        {"\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2.0\\end{pmatrix}", 1},
        {"x+1", "1+x", 0}, /* symbolic only: the numeric stand-in does not know variables */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = eval_math_equal(cases[i].p, cases[i].r);
        CHECKF(got == cases[i].eq, "math_equal(%s, %s) = %d", cases[i].p, cases[i].r, got);
    }
    /* which equalities rest on the percentage rule alone */
    static const struct { const char *p, *r; int eq, pct; } how[] = {
        {"1800", "18", 1, 1}, {"0.18", "18", 1, 1}, {"18", "18.0", 1, 0}, {"17", "18", 0, 0},
        {"x=1800", "18", 1, 1}, {"(1800,2)", "(18,2)", 1, 1}, {"(1800,3)", "(18,2)", 0, 0}, {"18", "18", 1, 0},
    };
    for (size_t i = 0; i < sizeof how / sizeof how[0]; i++) {
        int pct = -1, got = eval_math_equal_how(how[i].p, how[i].r, &pct);
        CHECKF(got == how[i].eq && pct == how[i].pct, "math_equal_how(%s, %s) = %d via_percent %d", how[i].p,
               how[i].r, got, pct);
    }
    double v;
    CHECK(eval_latex_number("\\frac{3}{4}+2^{3}-\\sqrt[3]{27}", &v) && fabs(v - 5.75) < 1e-12);
    CHECK(eval_latex_number("2(3+4)\\cdot 2", &v) && fabs(v - 28) < 1e-12);
    CHECK(!eval_latex_number("2x", &v));
    CHECK(!eval_latex_number("((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1", &v));
}

TEST(grade_pipeline) {
    struct eval_verdict v;
    eval_grade(EVAL_MATH, "<think>maybe \\boxed{3}</think>\n\nSo the answer is $\\boxed{\\dfrac{1}{2}}$.", "\\frac12", 0, &v);
    CHECK(v.correct == 1 && v.strict == 1 && v.think_closed == 1);
    CHECK(!strcmp(v.pred, "\\frac{1}{2}"));
    eval_verdict_free(&v);
    eval_grade(EVAL_MATH, "<think>long reasoning cut by the budget \\boxed{7}", "7", 0, &v);
    CHECK(v.think_closed == 0 && v.correct == 1); /* no </think>: the whole text is graded */
    eval_verdict_free(&v);
    eval_grade(EVAL_GSM8K, "<think>...</think>She pays $1,250 in total. \\boxed{1250}", "1250", 0, &v);
    CHECK(v.correct == 1 && v.strict == 1 && v.via_percent == 0);
    eval_verdict_free(&v);
    eval_grade(EVAL_GSM8K, "<think>...</think>The share is \\boxed{25}", "0.25", 0, &v);
    CHECK(v.correct == 1 && v.via_percent == 1 && v.strict == 0); /* right only by the percentage rule */
    eval_verdict_free(&v);
    eval_grade(EVAL_GSM8K, "</think>The answer is 12.", "13", 0, &v);
    CHECK(v.correct == 0 && !strcmp(v.pred, "12"));
    eval_verdict_free(&v);
    eval_grade(EVAL_ARC, "<think>A is wrong</think>The answer is \\boxed{\\text{C}}", "C", 4, &v);
    CHECK(v.correct == 1 && !strcmp(v.pred, "C") && v.strict == -1);
    eval_verdict_free(&v);
    eval_grade(EVAL_ARC, "</think>**Answer: b**", "B", 4, &v);
    CHECK(v.correct == 1);
    eval_verdict_free(&v);
    eval_grade(EVAL_ARC, "</think>I pick E then D", "D", 4, &v); /* E is not among 4 choices */
    CHECK(v.correct == 1);
    eval_verdict_free(&v);
    eval_grade(EVAL_ARC, "</think>no letter here", "A", 4, &v);
    CHECK(v.correct == 0 && !strcmp(v.pred, ""));
    eval_verdict_free(&v);
}

TEST(grade_stats_wilson) {
    double lo, hi;
    eval_wilson(0, 10, EVAL_Z95, &lo, &hi); /* z^2/(n+z^2) = 3.8415/13.8415 */
    CHECK(lo == 0 && fabs(hi - 0.277533) < 1e-5);
    eval_wilson(5, 10, EVAL_Z95, &lo, &hi); /* 0.5 -+ 1.96*sqrt(0.025+0.009604)/1.38415 */
    CHECK(fabs(lo - 0.236593) < 1e-5 && fabs(hi - 0.763407) < 1e-5);
    eval_wilson(10, 10, EVAL_Z95, &lo, &hi);
    CHECK(fabs(lo - 0.722467) < 1e-5 && hi == 1);
    eval_wilson(0, 0, EVAL_Z95, &lo, &hi);
    CHECK(lo == 0 && hi == 1);
}

TEST(grade_stats_mcnemar) {
    CHECK(fabs(eval_mcnemar_exact(10, 2) - 79.0 / 2048) < 1e-12); /* 2*(1+12+66)/4096 = 0.03857 */
    CHECK(fabs(eval_mcnemar_exact(2, 10) - 79.0 / 2048) < 1e-12);
    CHECK(fabs(eval_mcnemar_exact(5, 0) - 2.0 / 32) < 1e-12);
    CHECK(eval_mcnemar_exact(3, 3) == 1 && eval_mcnemar_exact(0, 0) == 1);
    CHECK(fabs(eval_mcnemar_exact(0, 20) - 2.0 / 1048576) < 1e-15);
    double chi2, p = eval_mcnemar_chi2(10, 2, &chi2); /* (8-1)^2/12 = 4.0833, p = 0.04331 */
    CHECK(fabs(chi2 - 49.0 / 12) < 1e-12 && fabs(p - 0.043308) < 1e-5);
    CHECK(eval_mcnemar_chi2(0, 0, NULL) == 1);
    double x[] = {3, 9, 1, 7}, mean, max;
    eval_mean_max(x, 4, &mean, &max);
    CHECK(mean == 5 && max == 9);
    struct eval_summary s;
    eval_summarize(199, 200, &s);
    CHECK(fabs(s.acc - 0.995) < 1e-12 && s.ci_lo > 0.97 && s.ci_hi < 1);
}

TEST(grade_load_tasks) {
    static const struct { enum eval_task t; const char *file; size_t n; } sets[] = {
        {EVAL_GSM8K, "data/gsm8k_test.jsonl", 1319}, {EVAL_MATH, "data/math500_test.jsonl", 500},
        {EVAL_MATH, "data/math_level5_test.jsonl", 1324}, {EVAL_ARC, "data/arc_challenge_test.jsonl", 1172},
    };
    char err[512];
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) NEED(sets[k].file);
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        struct eval_set s;
        if (eval_load(sets[k].t, t_shared(sets[k].file), &s, err, sizeof err)) {
            CHECKF(0, "%s", err);
            continue;
        }
        CHECKF(s.n == sets[k].n, "%s: %zu items", sets[k].file, s.n);
        if (sets[k].t == EVAL_ARC) {
            int five = 0;
            for (size_t i = 0; i < s.n; i++) five += s.items[i].n_choices == 5;
            CHECK(five == 3);
            char *p = eval_build_prompt(EVAL_ARC, &s.items[0]);
            CHECK(strstr(p, "\nA. ") && strstr(p, "\nD. ") && strstr(p, "\\boxed{}"));
            free(p);
        } else {
            /* each gold answer (the first 300, to keep the test short) is graded correct against a
             * boxed copy of itself */
            long ok = 0, m = s.n < 300 ? (long)s.n : 300;
            for (long i = 0; i < m; i++) {
                char out[4096];
                snprintf(out, sizeof out, "</think>\\boxed{%s}", s.items[i].answer);
                struct eval_verdict v;
                eval_grade(sets[k].t, out, s.items[i].answer, 0, &v);
                ok += v.correct;
                eval_verdict_free(&v);
            }
            CHECKF(ok == m, "%s: self-grading %ld/%ld", sets[k].file, ok, m);
            char *p = eval_build_prompt(sets[k].t, &s.items[0]);
            size_t ql = strlen(s.items[0].question);
            CHECK(!strncmp(p, s.items[0].question, ql) &&
                  !strcmp(p + ql, "\nPlease reason step by step, and put your final answer within \\boxed{}."));
            free(p);
        }
        eval_set_free(&s);
    }
    struct eval_set s;
    CHECK(eval_load(EVAL_GSM8K, "/nonexistent/x.jsonl", &s, err, sizeof err) != 0 && strstr(err, "/nonexistent"));
    enum eval_task t;
    CHECK(eval_task_parse("math", &t, err, sizeof err) == 0 && t == EVAL_MATH);
    CHECK(eval_task_parse("mmlu", &t, err, sizeof err) != 0);
}

static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(grade_cmd) {
    FILE *probe = fopen(t_bin(), "rb");
    if (!probe) SKIP("tierkv binary not built");
    fclose(probe);
    char path[512], cmd[1400], out[8192];
    snprintf(path, sizeof path, "%s/grade_in.jsonl", t_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("{\"id\": \"a\", \"output\": \"</think>\\\\boxed{18}\", \"answer\": \"18\"}\n", f);
    fputs("{\"id\": \"b\", \"output\": \"</think>so 17\", \"answer\": \"18\"}\n", f);
    fputs("{\"id\": \"c\", \"output\": \"unterminated\n", f);
    fputs("\n", f);
    fputs("{\"id\": \"d\", \"answer\": \"1\"}\n", f);
    fputs("{\"id\": \"e\", \"output\": \"</think>\\\\boxed{40}\", \"answer\": \"0.4\"}\n", f);
    fputs("{\"id\": \"f\", \"output\": \"</think>so 3\", \"gold\": \"3\"}\n", f); /* eval's own results */
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s grade --task gsm8k --in %s 2>&1", t_bin(), path);
    int rc = run(cmd, out, sizeof out);
    CHECK(rc == 1); /* bad lines make the status 1, but every good line is graded */
    CHECK(strstr(out, "a\t18\t18\t1\n") && strstr(out, "b\t17\t18\t0\n"));
    CHECK(strstr(out, ":3: json: unterminated string"));
    CHECK(strstr(out, ":5: missing string field 'output'"));
    CHECK(strstr(out, "e\t40\t0.4\t1\n")); /* right only by the percentage rule, and counted so */
    CHECK(strstr(out, "via_percent: 1\n") && strstr(out, "accuracy: 0.7500 (3/4)\n"));
    CHECK(strstr(out, "f\t3\t3\t1\n"));
    snprintf(cmd, sizeof cmd, "%s grade --task nope --in %s 2>&1", t_bin(), path);
    CHECK(run(cmd, out, sizeof out) == 2 && strstr(out, "usage:"));
    snprintf(cmd, sizeof cmd, "%s grade --bogus 2>&1", t_bin());
    CHECK(run(cmd, out, sizeof out) == 2);
    snprintf(cmd, sizeof cmd, "%s grade --help", t_bin());
    CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "usage:"));
}

/* `tierkv grade` reads the results files `tierkv eval` writes ("gold", no "answer"): over every
 * results file in the repository, each line's verdict equals the "correct" eval recorded. */
static int grade_file_matches(const char *path, const char *task, long *lines, long *agree) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s grade --task %s --in '%s' 2>&1", t_bin(), task, path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 20, n = 0;
    char *out = malloc(cap);
    for (size_t k; (k = fread(out + n, 1, cap - 1 - n, p)) > 0;) {
        n += k;
        if (n + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[n] = 0;
    int st = pclose(p);
    char *buf, err[256];
    size_t len, pos = 0, ln;
    const char *line;
    if (eval_read_file(path, &buf, &len, err, sizeof err)) { free(out); return -1; }
    while (eval_next_line(buf, len, &pos, &line, &ln)) {
        struct json_doc *d;
        if (!ln || json_parse(line, ln, NULL, &d, err, sizeof err)) continue;
        const struct json_value *o = json_root(d);
        const struct json_value *c = json_get(o, "correct");
        const char *id = json_get_str(o, "id");
        if (id && c) {
            char want[300];
            snprintf(want, sizeof want, "\n%s\t", id);
            char *at = strstr(out, want) ? strstr(out, want) : (!strncmp(out, want + 1, strlen(want + 1)) ? out - 1 : NULL);
            char *eol = at ? strchr(at + 1, '\n') : NULL;
            (*lines)++;
            if (eol && eol[-1] == (c->type == JSON_TRUE ? '1' : '0')) (*agree)++;
            else CHECKF(0, "%s: %s graded otherwise than eval did (%.60s)", path, id, at ? at + 1 : "not graded");
        }
        json_free(d);
    }
    free(buf);
    free(out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(grade_takes_eval_results) {
    FILE *ls = popen("ls results/*/*.jsonl 2>/dev/null", "r");
    REQUIRE(ls);
    char path[1024];
    long files = 0, lines = 0, agree = 0;
    while (fgets(path, sizeof path, ls)) {
        path[strcspn(path, "\n")] = 0;
        /* finished configurations only (a summary beside the file): a run in the background may be
         * writing the others, or not have written a line yet */
        char sum[1100];
        snprintf(sum, sizeof sum, "%.*s.summary.json", (int)(strlen(path) - strlen(".jsonl")), path);
        if (access(sum, R_OK)) continue;
        /* the task eval wrote into the first line: gsm8k, math500 or arc */
        char task[16] = "", *head = NULL, e[256];
        size_t hn;
        struct json_doc *d;
        if (eval_read_file(path, &head, &hn, e, sizeof e) == 0 && json_parse(head, strcspn(head, "\n"), NULL, &d, e, sizeof e) == 0) {
            const char *t = json_get_str(json_root(d), "task");
            snprintf(task, sizeof task, "%s", !t ? "" : !strncmp(t, "math", 4) ? "math" : t);
            json_free(d);
        }
        free(head);
        CHECKF(task[0], "%s: no task in its first line", path);
        CHECKF(grade_file_matches(path, task, &lines, &agree) == 0, "grade --in %s failed", path);
        files++;
    }
    pclose(ls);
    printf("    %ld results files, %ld lines, %ld verdicts equal eval's\n", files, lines, agree);
    if (!files) SKIP("no results/*/*.jsonl (run from the repository root)");
    CHECK(lines > 1000 && agree == lines);

    /* hand-made lines of each task: gold only (eval's files), answer only, both (answer wins) */
    static const struct { const char *task, *line; const char *want; } cases[] = {
        {"gsm8k", "{\"id\":\"g1\",\"output\":\"so \\\\boxed{1,000}\",\"gold\":\"1000\"}", "g1\t1,000\t1000\t1"},
        {"gsm8k", "{\"id\":\"g2\",\"output\":\"so \\\\boxed{7}\",\"gold\":\"8\"}", "g2\t7\t8\t0"},
        {"gsm8k", "{\"id\":\"g3\",\"output\":\"\\\\boxed{5}\",\"answer\":\"5\",\"gold\":\"9\"}", "g3\t5\t5\t1"},
        {"math", "{\"id\":\"m1\",\"output\":\"\\\\boxed{\\\\frac{1}{2}}\",\"gold\":\"\\\\frac{1}{2}\"}", "m1\t\\frac{1}{2}\t\\frac{1}{2}\t1"},
        {"math", "{\"id\":\"m2\",\"output\":\"\\\\boxed{0.5}\",\"gold\":\"\\\\frac12\"}", "\t1"},
        {"arc", "{\"id\":\"a1\",\"output\":\"\\\\boxed{B}\",\"gold\":\"B\"}", "a1\tB\tB\t1"},
        {"arc", "{\"id\":\"a2\",\"output\":\"\\\\boxed{C}\",\"gold\":\"B\"}", "a2\tC\tB\t0"},
        {"arc", "{\"id\":\"a3\",\"output\":\"Answer: D\",\"answer_letter\":\"D\",\"gold\":\"A\"}", "a3\tD\tD\t1"},
    };
    char in[600], cmd[1400], out[4096];
    snprintf(in, sizeof in, "%s/grade_gold.jsonl", t_tmpdir());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(in, "w");
        REQUIRE(f);
        fprintf(f, "%s\n", cases[i].line);
        fclose(f);
        snprintf(cmd, sizeof cmd, "%s grade --task %s --in %s 2>&1", t_bin(), cases[i].task, in);
        CHECKF(run(cmd, out, sizeof out) == 0 && strstr(out, cases[i].want), "%s: got '%s'", cases[i].line, out);
    }
    /* neither answer nor gold: a bad line, named */
    FILE *f = fopen(in, "w");
    REQUIRE(f);
    fputs("{\"id\":\"x\",\"output\":\"\\\\boxed{1}\"}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s grade --task gsm8k --in %s 2>&1", t_bin(), in);
    CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, ":1: missing string field 'answer' or 'gold'"));
}
