/* harness.h — the evaluation driver behind `tierkv eval` and `tierkv sweep`: runs a task's problems
 * through the engine with continuous batching, keeps one JSON line per finished problem (so a killed
 * run resumes where it stopped), and reads such files back for summaries and paired comparisons.
 *
 * Continuous batching: `parallel` slots, each a sequence of one session. Every step the slots that
 * hold a problem pick their greedy token; the ones still going decode together in one tkv_decode
 * call. A slot whose problem ends (end-of-generation token or max_tokens) writes its line, closes its
 * sequence, and is refilled at once with the next problem (a new sequence, prefilled, then it joins
 * the next decode step). The public API only (include/tierkv.h). Greedy outputs do not
 * depend on `parallel` because the engine's batched decode gives each sequence the logits it gets alone.
 *
 * Samples: with --samples K (and a temperature above 0) each problem runs K chains, sample k seeded
 * seed + k; a line then carries "sample" (k) and the sampler's settings ("sampling"), and a problem's
 * K lines give pass@1 (the mean of its chains' correctness), maj@K (the answer most chains extracted,
 * ties to the earliest chain) and pass@K (any chain correct).
 *
 * A results line: {"id",["sample"],"task","model","prompt_tokens","output","pred","gold","correct","strict",
 * "gen_tokens","finish":"eog"|"length","seconds","kv":{tier tokens, peak T0 bytes, bytes moved,
 * evicted — of that sequence, for this problem only},"policy","hbm_ratio","t2_ratio","evict_ratio",
 * "hbm_budget_bytes","max_tokens","build","check"} (see harness_verify_line). Not done here: flags and environment (the tools read those). */
#ifndef TKV_EVAL_HARNESS_H
#define TKV_EVAL_HARNESS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eval/eval.h"
#include "tierkv.h"

#define HARNESS_MAX_SAMPLES 64

struct harness_opts {
    enum eval_task task;
    const char *task_label;    /* the name written into results ("gsm8k", "math500", ...) */
    const char *data_path;
    long offset, n;            /* items [offset, offset + n) of the data file; n < 0: to the end */
    int spread;                /* 1: the n items at evenly spaced positions of [offset, end) instead,
                                  offset + floor(k (size - offset) / n) for k < n: a file sorted by
                                  subject (MATH level 5) is then sampled in proportion */
    int max_tokens;            /* generated tokens per problem at most */
    int parallel;              /* sequence slots decoded together */
    const char *out_path;      /* results JSONL, appended to and resumed from; NULL: none */
    const char *system;        /* system prompt; NULL: the template's default */
    int no_system;             /* 1: no system turn at all (not even the template's default) */
    const char *template_name; /* NULL: the template named by the model file */
    const char *model_path;
    tkv_model_params mp;       /* threads, kernels, weights */
    tkv_session_params sp;     /* the KV options (sp.kv); max_seqs is set to parallel (+1 for a shared
                                  prefix), max_ctx to the longest prompt + max_tokens unless given */
    FILE *progress;            /* progress and warnings; NULL: quiet */
    int progress_tty;          /* 1: refresh one line in place with \r */
    int no_prefix_cache;       /* 1: prefill every prompt whole (default: a prefix all share is prefilled once) */
    int samples;               /* chains per problem (0 or 1: one) */
    tkv_sampling sampling;     /* temperature <= 0: greedy (then samples must be 1); chain k seeded seed + k */
};

/* What the summaries need of one results line. */
struct harness_rec {
    char *id;
    int sample;            /* the chain (0 for greedy lines and lines written before samples existed) */
    char *pred;            /* the extracted answer ("" if none) */
    char sampling[96];     /* harness_sampling_key of the line's sampler ("greedy") */
    int correct;
    int gen_tokens, prompt_tokens;
    int finish_length;    /* 1: stopped by max_tokens */
    double seconds;
    double tier_tokens[4]; /* T0, T1, T2, evicted at the end of the problem */
    double peak_t0_bytes, bytes_moved, tokens_evicted;
    char policy[24];       /* the configuration that produced it ("" if the line has none) */
    int max_tokens;
    double t0_ratio, t2_ratio, evict_ratio;
    int kv_f16;                 /* kv_type "f16" (absent: f32) */
    char kv_extra[96];          /* the other KV options as written (t2 codec, t0 tokens, ...), one key */
    double t0_share;            /* the T0 share held, mean over the problem's decode steps (NAN: not recorded) */
};

struct harness_results {
    struct harness_rec *r;
    size_t n, cap;
    int sorted; /* 1 after harness_results_sort: harness_find works */
};

/* Reads a results file (a missing file gives no records). A line that is not a JSON object with a
 * string "id" is skipped with a warning on `warn` (if not NULL). */
int harness_load(const char *path, struct harness_results *out, FILE *warn, char *err, size_t errlen);
void harness_results_free(struct harness_results *r);
void harness_results_sort(struct harness_results *r); /* by id; for harness_find */
const struct harness_rec *harness_find(const struct harness_results *r, const char *id); /* its sample 0 */
const struct harness_rec *harness_find_sample(const struct harness_results *r, const char *id, int sample);
/* The sampler's settings as one key for comparisons: "greedy" when temperature <= 0. */
void harness_sampling_key(const tkv_sampling *so, char *b, size_t n);

struct harness_summary {
    long n, correct;
    double acc, ci_lo, ci_hi;          /* Wilson 95% */
    double mean_len, max_len;          /* generated tokens */
    double length_share;               /* share stopped by max_tokens */
    double mean_tier_tokens[4], mean_peak_t0_bytes, mean_bytes_moved, mean_evicted;
    double mean_t0_share;              /* the T0 share held (NAN when no line recorded it) */
    int samples;                       /* chains per problem summarised (1: the fields above are per problem) */
    long n_samples;                    /* lines summarised (samples > 1: correct counts these) */
    double pass1, pass1_lo, pass1_hi;  /* mean chain correctness; normal 95% over the problems' means */
    long maj_correct, passk_correct;   /* problems whose majority answer is correct, with any chain correct */
    double majk, majk_lo, majk_hi;     /* maj@K, Wilson 95% */
    double passk, passk_lo, passk_hi;  /* pass@K, Wilson 95% */
    long run_problems, run_tokens;     /* done by this invocation */
    double run_seconds;                /* its wall time in the decode loop */
};

/* Summary over the records whose id is in ids[0..n_ids) (all records when ids is NULL), samples
 * 0..samples-1 of each (samples <= 1: sample 0; with ids NULL every record counts as a problem). */
void harness_summarize(const struct harness_results *r, char *const *ids, size_t n_ids, int samples,
                       struct harness_summary *s);
void harness_summary_print(FILE *f, const struct harness_summary *s);

/* Runs the problems of the selection that the results file does not hold yet. On success *s
 * summarises the whole selection and *sel_ids (if not NULL) receives its ids (free with
 * harness_ids_free). A last line without its newline is completed when it is whole JSON, cut off
 * with a warning (on stderr when progress is NULL) when it is one a killed run was writing, and
 * refused otherwise (the file untouched). A results file holding lines of another configuration (policy,
 * ratios, max_tokens) for this selection is refused: resuming must not mix configurations. */
int harness_run(const struct harness_opts *o, struct harness_summary *s, char ***sel_ids, size_t *n_sel,
                char *err, size_t errlen);
void harness_ids_free(char **ids, size_t n);

/* Every results line ends with "build" (the commit that wrote it, base/version.h) and "check": the
 * FNV-1a 64 (16 hex digits) of the line's bytes before `,"check":"`. An edit by hand that does not
 * recompute it is caught by harness_verify_line: 1 intact, 0 no check (written before checks
 * existed), -1 altered. harness_sign closes a json_out object with its check. */
struct json_out;
void harness_sign(struct json_out *j);
int harness_verify_line(const char *line, size_t n);

/* The summary as one JSON object (with the options that produced it, the command line `cmd` and the
 * selection's ids) written to path. */
int harness_summary_write_json(const char *path, const struct harness_opts *o, const struct harness_summary *s,
                               char *const *ids, size_t n_ids, const char *cmd, char *err, size_t errlen);

/* 1 when the summary at path already records s's counts and exactly these ids (in order), so an
 * invocation that ran nothing keeps it, with the throughput of the invocation that last ran. */
int harness_summary_unchanged(const char *path, const struct harness_summary *s, char *const *ids, size_t n_ids);

#endif
