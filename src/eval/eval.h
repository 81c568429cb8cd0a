/* eval.h — the evaluation module's interface for tools: load a task file, build the user turn,
 * grade one model output. Statistics are in stats.h, JSON in json.h.
 *
 * Grading paths (one per task, GRADING.md §3):
 *   gsm8k  E0 (after the last </think>) -> E2 Qwen extract_answer -> N3 twice -> N4 math_equal
 *          against N3x2(gold). N4 also accepts pred == gold*100 or gold/100 (Qwen quirk, kept).
 *          Cross-check ("strict"): lm-eval flexible-extract exact match.
 *   math   same path with the MATH gold `answer`. Cross-check: E1 + hendrycks is_equiv (N1).
 *   arc    E0 -> letter from the last \boxed{}, else "Answer: X", else the last standalone
 *          capital letter -> compare with answer_letter (A.. by position). No cross-check. */
#ifndef TKV_EVAL_EVAL_H
#define TKV_EVAL_EVAL_H
#include <stddef.h>

enum eval_task { EVAL_GSM8K, EVAL_MATH, EVAL_ARC };

/* "gsm8k", "math" (MATH-500, Level 5, full), "arc" -> task; -1 and a message otherwise. */
int eval_task_parse(const char *name, enum eval_task *out, char *err, size_t errlen);
const char *eval_task_name(enum eval_task t);

struct eval_item {
    char *id;
    char *question;
    char *answer;     /* gold: gsm8k `answer`, MATH `answer`, ARC `answer_letter` */
    int n_choices;    /* ARC only, else 0 */
    char **choices;   /* [n_choices] choice texts in file order (ARC) */
    int level;        /* MATH level 1-5, else 0 */
};

struct eval_set {
    enum eval_task task;
    struct eval_item *items; /* [n] in file order */
    size_t n;
};

/* Reads a JSONL data file (schemas in data/SOURCES.md). Blank lines are skipped; a bad line fails
 * the load with "PATH:LINE: problem", and so does an id given twice (naming both lines). */
int eval_load(enum eval_task task, const char *path, struct eval_set *out, char *err, size_t errlen);
void eval_set_free(struct eval_set *s);

/* The user turn for one item (heap string). GSM8K/MATH: the question, "\n", then
 * "Please reason step by step, and put your final answer within \boxed{}." (the R1 / Qwen2.5-Math
 * boxed prompt). ARC: question, lettered choices "A. text" one per line, and a request to reason
 * and answer with \boxed{LETTER}. The chat template is applied by the model's tokenizer, not here. */
char *eval_build_prompt(enum eval_task task, const struct eval_item *it);

struct eval_verdict {
    char *pred;       /* extracted, normalised prediction ("" if nothing was found) */
    char *gold;       /* normalised gold */
    int correct;      /* 0/1 on the task's main path */
    int strict;       /* 0/1 cross-check (see above), -1 where there is none */
    int think_closed; /* 1 if the output contained </think> (0 usually means truncated) */
    int via_percent;  /* 1 if correct only by math_equal's percentage rule (pred = gold*100 or /100) */
};

/* Grades one output against gold (the raw gold answer; for ARC the gold letter A..).
 * n_choices: ARC only (0 = letters up to E). Cannot fail; free with eval_verdict_free. */
void eval_grade(enum eval_task task, const char *output, const char *gold, int n_choices,
                struct eval_verdict *v);
void eval_verdict_free(struct eval_verdict *v);

/* ---- helpers for tools reading JSONL ---- */

/* Reads a whole text or JSONL file into a NUL-terminated heap buffer. Refused with a message: a
 * path that is not a regular file (a directory, a device such as /dev/zero, a FIFO: nothing is read
 * from it), a file over EVAL_MAX_FILE bytes, and a file holding a NUL byte (text never does: a
 * prompt with one would be cut there, and JSON cannot hold one). */
#define EVAL_MAX_FILE ((size_t)256 << 20)
int eval_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen);
/* Iterates lines of buf: returns 1 with [*line, *line+*n) (no '\n', a trailing '\r' removed) and
 * advances *pos; 0 at the end. */
int eval_next_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n);

#endif
