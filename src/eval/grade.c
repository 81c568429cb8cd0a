/* grade.c — one grading path per task (see eval.h for which steps, GRADING.md for why). */
#include <stdlib.h>
#include <string.h>

#include "eval/equal.h"
#include "eval/eval.h"
#include "eval/extract.h"
#include "eval/normalize.h"
#include "eval/pystr.h"

static char *qwen_strip2(const char *s) {
    char *a = eval_qwen_strip(s, 0);
    char *b = eval_qwen_strip(a, 0);
    free(a);
    return b;
}

void eval_grade(enum eval_task task, const char *output, const char *gold, int n_choices, struct eval_verdict *v) {
    memset(v, 0, sizeof *v);
    if (!output) output = "";
    if (!gold) gold = "";
    char *text = eval_strip_think(output, &v->think_closed);
    if (task == EVAL_ARC) {
        char *letter = eval_arc_extract(text, n_choices);
        v->pred = letter ? letter : ps_dup("");
        v->gold = ps_strip_take(ps_dup(gold));
        v->correct = letter && !strcmp(v->pred, v->gold);
        v->strict = -1;
        free(text);
        return;
    }
    /* E2 applies N3 once; the pipeline applies it again (run_execute / parse_ground_truth). */
    char *e2 = eval_qwen_extract(text);
    v->pred = eval_qwen_strip(e2, 0);
    free(e2);
    v->gold = qwen_strip2(gold);
    v->correct = eval_math_equal_how(v->pred, v->gold, &v->via_percent);
    if (task == EVAL_MATH) {
        char *e1 = eval_boxed_answer(text);
        v->strict = e1 && eval_hendrycks_is_equiv(e1, gold);
        free(e1);
    } else {
        char *f = eval_gsm8k_flexible(text), *fp = eval_gsm8k_norm(f), *fg = eval_gsm8k_norm(gold);
        v->strict = strcmp(f, "[invalid]") && !strcmp(fp, fg);
        free(f);
        free(fp);
        free(fg);
    }
    free(text);
}

void eval_verdict_free(struct eval_verdict *v) {
    free(v->pred);
    free(v->gold);
    v->pred = v->gold = NULL;
}
