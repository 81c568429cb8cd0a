/* extract.h — pulling the final answer out of a model's text (GRADING.md §0, §1).
 * Every function returns a new heap string (free it), or NULL where the reference returns None. */
#ifndef TKV_EVAL_EXTRACT_H
#define TKV_EVAL_EXTRACT_H

/* E0: the text after the last "</think>" with leading whitespace removed; the whole text if
 * there is none (*found = 0; found may be NULL). */
char *eval_strip_think(const char *text, int *found);

/* E1: hendrycks last_boxed_only_string ("\boxed{...}" or "\fbox{...}" incl. the command), and
 * remove_boxed (the inside of "\boxed{...}", NULL otherwise). */
char *eval_last_boxed(const char *text);
char *eval_remove_boxed(const char *boxed);
/* remove_boxed(last_boxed_only_string(text)) */
char *eval_boxed_answer(const char *text);

/* E2: Qwen2.5-Math extract_answer(text, data_name) for data_name "math" or "gsm8k" (both use the
 * unit list; N3 is applied once inside, as in the reference). */
char *eval_qwen_extract(const char *text);

/* E3: lm-eval gsm8k filters. strict: first "#### (-?[0-9.,]+)"; flexible: last match of
 * "(-?[$0-9.,]{2,})|(-?[0-9]+)". Both return "[invalid]" when nothing matches. norm applies the
 * exact_match ignore-regexes (",", "$", ".*#### ", trailing ".") and lower-cases. */
char *eval_gsm8k_strict(const char *text);
char *eval_gsm8k_flexible(const char *text);
char *eval_gsm8k_norm(const char *s);

/* ARC (GRADING.md §3): letter from the last \boxed{}, else simple-evals "Answer: X", else the last
 * standalone capital letter. Letters are limited to the first n_choices (A.. ; 0 means 5).
 * Returns the upper-case letter, or NULL if none was found. */
char *eval_arc_extract(const char *text, int n_choices);

#endif
