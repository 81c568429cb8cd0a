/* normalize.h — MATH answer normalisation, ported from the reference Python (GRADING.md §2).
 * All functions return a new heap string (free it) unless noted; inputs are UTF-8 C strings. */
#ifndef TKV_EVAL_NORMALIZE_H
#define TKV_EVAL_NORMALIZE_H
#include <stddef.h>

/* N1: hendrycks _strip_string. Returns NULL where the Python raises (two "\text{ " unit
 * markers, "\sqrt" or "\frac" at the very end of a split part). */
char *eval_hendrycks_strip(const char *s);
/* N1 is_equiv: normalised strings byte-equal; raw comparison if either normalisation raises. */
int eval_hendrycks_is_equiv(const char *a, const char *b);
/* prm800k normalize_answer: strip, unwrap a whole \text{...}, then N1 (on an exception: the
 * stripped/unwrapped answer). */
char *eval_prm800k_normalize(const char *s);
/* N3: Qwen2.5-Math strip_string (apply it twice for the pipeline's result, see GRADING.md). */
char *eval_qwen_strip(const char *s, int skip_unit);
/* The 264-entry unit list N3 uses (for tests). */
size_t eval_qwen_unit_count(void);
const char *eval_qwen_unit(size_t i, char *buf, size_t cap); /* writes entry i into buf */
/* word2number's word_to_num as Qwen uses it: the converted number, or a copy of s if w2n raises. */
char *eval_w2n_convert(const char *s);

#endif
