/* fuzz_grade.c — libFuzzer target for answer extraction and grading (src/eval/extract.c, grade.c,
 * equal.c, normalize.c) on arbitrary text. Input: the model output and the gold answer, split at the
 * first 0x00 byte (no 0x00: the whole input is both). Every extractor and normaliser runs on both,
 * every task grades the pair, and equivalence runs in both orders. Checks: nothing crashes or reads
 * out of bounds (ASan), verdicts are 0/1 and the same when graded twice, and a string equals itself
 * under hendrycks is_equiv. Seeds: fuzz/corpus/fuzz_grade. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "eval/equal.h"
#include "eval/eval.h"
#include "eval/extract.h"
#include "eval/normalize.h"

static void drop(char *s) { free(s); }

static void extractors(const char *s) {
    int found;
    drop(eval_strip_think(s, &found));
    drop(eval_last_boxed(s));
    drop(eval_remove_boxed(s));
    drop(eval_boxed_answer(s));
    drop(eval_qwen_extract(s));
    drop(eval_gsm8k_strict(s));
    drop(eval_gsm8k_flexible(s));
    drop(eval_gsm8k_norm(s));
    for (int n = 0; n <= 6; n += 3) drop(eval_arc_extract(s, n));
    drop(eval_hendrycks_strip(s));
    drop(eval_prm800k_normalize(s));
    drop(eval_qwen_strip(s, 0));
    drop(eval_qwen_strip(s, 1));
    drop(eval_w2n_convert(s));
    drop(eval_choice_answer_clean(s));
    double x;
    eval_latex_number(s, &x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0; /* the regex-like scans are quadratic in places; long texts only slow the search */
    char *a = malloc(size + 1);
    memcpy(a, data, size);
    a[size] = 0;
    const char *out = a, *gold = a + strlen(a) < a + size ? a + strlen(a) + 1 : a;
    extractors(out);
    if (gold != out) extractors(gold);
    for (int task = EVAL_GSM8K; task <= EVAL_ARC; task++) {
        struct eval_verdict v1, v2;
        eval_grade((enum eval_task)task, out, gold, task == EVAL_ARC ? 4 : 0, &v1);
        eval_grade((enum eval_task)task, out, gold, task == EVAL_ARC ? 4 : 0, &v2);
        TKV_ASSERT(v1.pred && v1.gold && (v1.correct == 0 || v1.correct == 1));
        TKV_ASSERT(v1.correct == v2.correct && v1.strict == v2.strict && !strcmp(v1.pred, v2.pred));
        eval_verdict_free(&v1);
        eval_verdict_free(&v2);
    }
    int e1 = eval_math_equal(out, gold), e2 = eval_math_equal(gold, out);
    TKV_ASSERT((e1 == 0 || e1 == 1) && (e2 == 0 || e2 == 1));
    eval_hendrycks_is_equiv(out, gold);
    TKV_ASSERT(eval_hendrycks_is_equiv(out, out));
    free(a);
    return 0;
}
