/* equal.h — answer equivalence N4 (Qwen2.5-Math math_equal) with a numeric stand-in for sympy. */
#ifndef TKV_EVAL_EQUAL_H
#define TKV_EVAL_EQUAL_H

/* 1 if pred and ref (both already N3-normalised) are equal by math_equal steps 1-8, or both
 * evaluate (eval_latex_number) to numbers within rel 1e-4. NULL on either side: 0. Note step 3
 * also accepts pred == ref*100 or ref/100 (Qwen's include_percentage default). */
int eval_math_equal(const char *pred, const char *ref);
/* The same, and *via_percent (may be NULL) = 1 when the two are equal only by that percentage rule
 * (counted apart in results: a 50 graded right against 0.5 is the grader's choice, not the model's). */
int eval_math_equal_how(const char *pred, const char *ref, int *via_percent);
/* Evaluates a LaTeX arithmetic expression; 1 and *out on success, 0 if it is not pure arithmetic. */
int eval_latex_number(const char *s, double *out);
/* Qwen grader.py choice_answer_clean (last \b[A-E]\b of the upper-cased text, else the text). */
char *eval_choice_answer_clean(const char *pred);

#endif
