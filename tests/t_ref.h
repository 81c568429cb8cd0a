/* t_ref.h — reference logits (the fixture format of fixtures/models/README.md: NAME.json and
 * NAME.logits.f32) and the comparison of the engine's logits with them, for the tests of the forward
 * pass against a reference engine. */
#ifndef TKV_T_REF_H
#define TKV_T_REF_H
#include <stdint.h>

typedef struct {
    int n_vocab, n_prompt, first, rows, n_greedy;
    int32_t *prompt, *greedy;
    float *logits;
} ref_data;

typedef struct {
    double max_diff, rms;
    int top1_checked, top1_mismatch, rows;
} cmp_stats;

/* Loads a reference (-1 when a file is missing or malformed; r zeroed or partly filled: free_ref). */
int load_ref(const char *json_path, const char *logits_path, ref_data *r);
void free_ref(ref_data *r);
/* Adds one row's differences to s; the top-1 token is compared where the reference's margin
 * between its first two logits exceeds 2 tol. */
void compare_row(const float *ours, const float *ref, int V, double tol, cmp_stats *s);
/* Runs the reference prompt, then teacher-forces the reference greedy tokens, comparing every row
 * (an f16 KV cache when f16); -1 when the model does not open or run. run_compare_on runs it on the
 * named backend ("cuda"; NULL: the CPU). */
int run_compare(const char *model_path, const ref_data *r, double tol, int threads, int f16, cmp_stats *s);
int run_compare_on(const char *backend, const char *model_path, const ref_data *r, double tol, int threads, int f16,
                   cmp_stats *s);

/* A model made by `tierkv gen-random --shape SHAPE --type TYPE --seed 7` in this run's temporary
 * directory (made once per run), for tests of shapes that have no stored file; NULL when it cannot be
 * made (a test failure is recorded). */
const char *t_gen_model(const char *shape, const char *type);

#endif
