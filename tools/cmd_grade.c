/* cmd_grade.c — `tierkv grade --task gsm8k|math|arc --in OUTPUTS.jsonl`: grades saved model
 * outputs without a model. Each input line is a JSON object with "id", "output" and the gold
 * "answer" (for ARC: "answer_letter", or "answer" plus "choices" {"label","text"} to map an
 * original label to its letter), or, as in the results files `tierkv eval` writes, "gold" (the
 * normalised gold, which grades the same: normalising is idempotent). Prints one tab-separated
 * verdict per line (id, extracted answer, gold, correct 0/1), then "via_percent: K" (correct answers right only by the grader's percentage
 * rule: 700 for 7), "wilson95: [lo, hi]" and last "accuracy: 0.9950 (199/200)".
 * A bad line is reported with its number on stderr and counted, never fatal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"
#include "base/json.h"
#include "eval/stats.h"
#include "cmds.h"
#include "out.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tierkv grade --task gsm8k|math|arc --in OUTPUTS.jsonl\n"
            "  each line: {\"id\": ..., \"output\": MODEL_TEXT, \"answer\": GOLD}; a results file of\n"
            "  tierkv eval (\"gold\" instead of \"answer\") is graded as it is\n"
            "  ARC: \"answer_letter\": \"B\", or \"answer\" with \"choices\": {\"label\": [...], \"text\": [...]}\n"
            "  prints: id<TAB>extracted<TAB>gold<TAB>correct, then 'via_percent: K' (right only by the\n"
            "  percentage rule, 700 for 7), 'wilson95: [lo, hi]' and last 'accuracy: A (k/n)'\n"
            "  exit status: 0 ok, 1 input file unreadable or bad lines, 2 usage error\n");
}

/* Prints s on one line: tabs and newlines would break the columns, so they become spaces. */
static void put_field(const char *s) {
    for (; *s; s++) putchar(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s);
}

/* ARC gold: answer_letter, else answer mapped through choices.label, else answer itself. */
static int arc_gold(const struct json_value *o, char *letter, int *n_choices) {
    const struct json_value *labels = json_get(json_get(o, "choices"), "label");
    const struct json_value *texts = json_get(json_get(o, "choices"), "text");
    *n_choices = labels && labels->type == JSON_ARRAY ? (int)labels->u.arr.n
               : texts && texts->type == JSON_ARRAY ? (int)texts->u.arr.n : 0;
    if (*n_choices > 26) *n_choices = 0;
    const char *al = json_get_str(o, "answer_letter");
    if (al) { snprintf(letter, 8, "%s", al); return 0; }
    const char *ans = json_get_str(o, "answer");
    if (!ans) ans = json_get_str(o, "gold"); /* eval's results: the letter */
    if (!ans) return -1;
    for (int k = 0; labels && k < *n_choices; k++) {
        const struct json_value *l = json_at(labels, (size_t)k);
        if (l && l->type == JSON_STRING && !strcmp(l->u.str.s, ans)) {
            snprintf(letter, 8, "%c", 'A' + k);
            return 0;
        }
    }
    snprintf(letter, 8, "%s", ans);
    return 0;
}

int cmd_grade(int argc, char **argv) {
    const char *task_name = NULL, *in = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--task") && i + 1 < argc) task_name = argv[++i];
        else if (!strcmp(argv[i], "--in") && i + 1 < argc) in = argv[++i];
        else {
            fprintf(stderr, "tierkv grade: bad argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    char err[512];
    enum eval_task task;
    if (!task_name || !in) {
        fprintf(stderr, "tierkv grade: --task and --in are required\n");
        usage(stderr);
        return 2;
    }
    if (eval_task_parse(task_name, &task, err, sizeof err)) {
        fprintf(stderr, "tierkv grade: %s\n", err);
        usage(stderr);
        return 2;
    }
    char *buf;
    size_t len, pos = 0, ln = 0, n;
    const char *line;
    if (eval_read_file(in, &buf, &len, err, sizeof err)) {
        fprintf(stderr, "tierkv grade: %s\n", err);
        return 1;
    }
    long total = 0, correct = 0, bad = 0, via_pct = 0;
    while (eval_next_line(buf, len, &pos, &line, &n)) {
        ln++;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t')) k++;
        if (k == n) continue;
        struct json_doc *doc;
        if (json_parse(line, n, NULL, &doc, err, sizeof err)) {
            fprintf(stderr, "%s:%zu: %s\n", in, ln, err);
            bad++;
            continue;
        }
        const struct json_value *o = json_root(doc);
        const char *id = json_get_str(o, "id"), *output = json_get_str(o, "output");
        const char *gold = json_get_str(o, "answer");
        if (!gold) gold = json_get_str(o, "gold"); /* a results file of tierkv eval */
        char letter[8];
        int n_choices = 0;
        const char *problem = o->type != JSON_OBJECT ? "line is not a JSON object"
                            : !output ? "missing string field 'output'" : NULL;
        if (!problem && task == EVAL_ARC) {
            if (arc_gold(o, letter, &n_choices)) problem = "missing string field 'answer_letter', 'answer' or 'gold'";
            gold = letter;
        } else if (!problem && !gold) problem = "missing string field 'answer' or 'gold'";
        if (problem) {
            fprintf(stderr, "%s:%zu: %s\n", in, ln, problem);
            bad++;
            json_free(doc);
            continue;
        }
        char idbuf[32];
        int64_t idnum;
        if (!id) {
            if (json_get_int(o, "id", &idnum)) snprintf(idbuf, sizeof idbuf, "%lld", (long long)idnum);
            else snprintf(idbuf, sizeof idbuf, "line-%zu", ln);
            id = idbuf;
        }
        struct eval_verdict v;
        eval_grade(task, output, gold, n_choices, &v);
        put_field(id);
        putchar('\t');
        put_field(v.pred);
        putchar('\t');
        put_field(v.gold);
        printf("\t%d\n", v.correct);
        total++;
        correct += v.correct;
        via_pct += v.correct && v.via_percent;
        eval_verdict_free(&v);
        json_free(doc);
    }
    free(buf);
    struct eval_summary s;
    eval_summarize(correct, total, &s);
    printf("via_percent: %ld\n", via_pct);
    printf("wilson95: [%.4f, %.4f]\n", s.ci_lo, s.ci_hi);
    printf("accuracy: %.4f (%ld/%ld)\n", s.acc, correct, total);
    if (out_finish("grade")) return 1;
    if (bad) {
        fprintf(stderr, "tierkv grade: %ld bad line%s skipped\n", bad, bad == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
