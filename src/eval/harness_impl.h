/* harness_impl.h — what the harness's two files share (harness_results.c: results files and
 * summaries; harness.c: the run). Not for use outside src/eval. */
#ifndef TKV_EVAL_HARNESS_IMPL_H
#define TKV_EVAL_HARNESS_IMPL_H
#include <stddef.h>
#include <stdio.h>

#include "eval/harness.h"
#include "base/json.h"

/* A file killed mid-write ends without '\n': repairs it before appending (see harness_run). */
int harness_repair_tail(const char *path, FILE *warn, char *err, size_t errlen);
/* The configuration keys of a line and of a summary (policy, budgets, cache type, the options
 * beyond the defaults, max_tokens). */
void harness_out_config(struct json_out *j, const struct harness_opts *o);
/* The KV options beyond the defaults, as a line writes them, and as one key for comparisons. */
void harness_out_kv_extra(struct json_out *j, const tkv_kv_params *kv);
void harness_kv_extra_key(const tkv_kv_params *kv, char *b, size_t n);
/* The record of a line just written, added to r (a line that does not parse is skipped). */
void harness_push_line(struct harness_results *r, const char *line, size_t n);

#endif
