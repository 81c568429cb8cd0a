/* t_ref.c — see t_ref.h. */
#include "t_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "t_engine.h"


/* minimal reader for the fixture JSON: integer fields and integer arrays */
static int json_int(const char *s, const char *key, int *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(s, pat);
    if (!p) return -1;
    p = strchr(p + strlen(pat), ':');
    if (!p) return -1;
    *out = atoi(p + 1);
    return 0;
}

static int json_arr(const char *s, const char *key, int32_t **out, int *n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(s, pat);
    if (!p || !(p = strchr(p, '['))) return -1;
    int cap = 64, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    p++;
    while (*p && *p != ']') {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        if (k == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[k++] = (int32_t)x;
        p = end;
    }
    *out = v;
    *n = k;
    return 0;
}

int load_ref(const char *json_path, const char *logits_path, ref_data *r) {
    memset(r, 0, sizeof *r);
    char *j = t_slurp(json_path);
    if (!j) return -1;
    int ok = !json_int(j, "n_vocab", &r->n_vocab) && !json_int(j, "n_prompt", &r->n_prompt) &&
             !json_int(j, "first_logit_pos", &r->first) && !json_int(j, "rows", &r->rows) &&
             !json_arr(j, "prompt", &r->prompt, &r->n_prompt) && !json_arr(j, "greedy", &r->greedy, &r->n_greedy);
    free(j);
    if (!ok) return -1;
    size_t len;
    r->logits = (float *)t_slurp_n(logits_path, &len);
    if (!r->logits || len != (size_t)r->rows * r->n_vocab * 4) return -1;
    return 0;
}

void free_ref(ref_data *r) { free(r->prompt); free(r->greedy); free(r->logits); }


void compare_row(const float *ours, const float *ref, int V, double tol, cmp_stats *s) {
    int a = 0, b = -1;
    for (int i = 1; i < V; i++) if (ref[i] > ref[a]) a = i;
    for (int i = 0; i < V; i++) if (i != a && (b < 0 || ref[i] > ref[b])) b = i;
    int ours_top = 0;
    for (int i = 1; i < V; i++) if (ours[i] > ours[ours_top]) ours_top = i;
    double ss = 0;
    for (int i = 0; i < V; i++) {
        double d = fabs((double)ours[i] - ref[i]);
        if (!(d <= s->max_diff)) s->max_diff = d; /* NaN propagates */
        ss += d * d;
    }
    s->rms += ss / V;
    s->rows++;
    if (ref[a] - ref[b] > 2 * tol) {
        s->top1_checked++;
        if (ours_top != a) s->top1_mismatch++;
    }
}

int run_compare(const char *model_path, const ref_data *r, double tol, int threads, int f16, cmp_stats *s) {
    return run_compare_on(NULL, model_path, r, tol, threads, f16, s);
}

int run_compare_on(const char *backend, const char *model_path, const ref_data *r, double tol, int threads, int f16,
                   cmp_stats *s) {
    memset(s, 0, sizeof *s);
    te_options o;
    te_options_default(&o);
    if (backend) o.backend = backend;
    o.kv.f16 = f16;
    o.n_threads = threads;
    o.n_ctx = r->n_prompt + r->n_greedy + 8;
    char err[512];
    te_engine *e;
    if (te_open(model_path, &o, &e, err, sizeof err)) { fprintf(stderr, "  %s\n", err); return -1; }
    int V = r->n_vocab;
    if (te_n_vocab(e) != V) { te_close(e); return -1; }
    float *all = malloc((size_t)r->n_prompt * V * sizeof(float));
    if (te_prefill(e, 0, r->prompt, r->n_prompt, all, 1, err, sizeof err)) { fprintf(stderr, "  %s\n", err); free(all); te_close(e); return -1; }
    int row = 0;
    for (int p = r->first; p < r->n_prompt; p++, row++) compare_row(all + (size_t)p * V, r->logits + (size_t)row * V, V, tol, s);
    for (int g = 0; g < r->n_greedy; g++, row++) {
        int seq = 0;
        if (te_decode(e, &seq, &r->greedy[g], 1, all, err, sizeof err)) { fprintf(stderr, "  %s\n", err); break; }
        compare_row(all, r->logits + (size_t)row * V, V, tol, s);
    }
    s->rms = sqrt(s->rms / (s->rows ? s->rows : 1));
    free(all);
    te_close(e);
    return 0;
}

const char *t_gen_model(const char *shape, const char *type) {
    static char paths[8][512];
    static int n;
    char path[512];
    snprintf(path, sizeof path, "%s/gen-%s-%s.gguf", t_tmpdir(), shape, type);
    for (int i = 0; i < n; i++)
        if (!strcmp(paths[i], path)) return paths[i];
    char *argv[] = {(char *)t_bin(), "gen-random", "--shape", (char *)shape, "--type", (char *)type, "--seed", "7",
                    "-o", path, NULL};
    char *err = NULL;
    int st = t_spawn(argv, NULL, 120, &err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        CHECKF(0, "gen-random --shape %s --type %s failed: %s", shape, type, err ? err : "");
        free(err);
        return NULL;
    }
    free(err);
    if (n == 8) n = 0; /* only the last eight are remembered; an older one is made again */
    snprintf(paths[n], sizeof paths[n], "%s", path);
    return paths[n++];
}
