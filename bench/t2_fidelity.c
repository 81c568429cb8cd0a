/* t2_fidelity.c — how far a lossy KV configuration (a T2 codec, an eviction budget) moves the
 * model's next-token distribution, step by step, on real reasoning chains: a quick proxy for the
 * long accuracy runs, used to screen T2 codecs before spending an eval on them. Not a speed benchmark
 * and not a test.
 *
 *   build/bench/t2_fidelity MODEL.gguf DATA.jsonl [--task gsm8k] [--n 16] [--offset 0]
 *       [--max-tokens 512] [--t0 0.3] [--t2 R] [--evict R] [--window N] [-t 2] CONFIG...
 *
 * CONFIG is POLICY[:CODEC] (quant:q4bh, hierarchy:q8bh, evict), or POLICY:f32 for the policy with
 * an f32 cache instead of f16 (full:f32: how far rounding alone moves the distribution). One session
 * decodes the problems greedily with the full cache: that is the reference chain. Every CONFIG session is fed the same
 * tokens (teacher forcing: its own mistakes never steer it), all sessions in lock step, the first
 * n problems of DATA decoded together. At each decode step and for each CONFIG it compares the logits
 * with the reference's: whether the top token is the same, and KL(reference || config) of the
 * softmax distributions (nats). Reported per CONFIG: steps compared, top-1 agreement, mean and 99th
 * percentile KL, over all steps and over the steps where the config held some tokens outside T0/T1
 * (the only steps it can differ on, through the lossy tiers).
 *
 * The prompt is built as `tierkv eval` builds it (the chat template's own system turn, the task's
 * user turn). Every number printed is measured in this run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/path.h"
#include "eval/eval.h"
#include "tierkv.h"

enum { MAX_CFG = 8 };

typedef struct {
    const char *label;
    tkv_session *e;
    float *logits;              /* [n x n_vocab] */
    double kl_sum, kl_lossy_sum;
    long steps, agree, steps_lossy, agree_lossy;
    double *kl;                 /* every step's KL, for the percentile: [n x max_tokens] */
    long n_kl;
} config;

static void usage(FILE *f) {
    fprintf(f, "usage: t2_fidelity MODEL.gguf DATA.jsonl [--task gsm8k|math|arc] [--n N] [--offset K]\n"
               "       [--max-tokens M] [--t0 R] [--t2 R] [--evict R] [--window N] [-t THREADS] POLICY[:CODEC|:f32]...\n");
}

/* log-softmax normaliser of x[n] in double. */
static double log_sum_exp(const float *x, int n) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, x[i]);
    for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

/* KL(p || q) for logits a (p) and b (q). */
static double kl_div(const float *a, const float *b, int n) {
    double la = log_sum_exp(a, n), lb = log_sum_exp(b, n), kl = 0;
    for (int i = 0; i < n; i++) {
        double lp = (double)a[i] - la, lq = (double)b[i] - lb;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether seq holds any token outside the exact tiers (T2 or evicted). */
static int lossy_now(tkv_session *e, int seq) {
    tkv_stats st;
    char err[256];
    if (tkv_stats_get(e, seq, &st, err, sizeof err)) return 0;
    return st.tokens[2] + st.tokens[3] > 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *data_path = NULL, *task_name = "gsm8k";
    int n = 16, offset = 0, max_tokens = 512, window = -1, threads = 2, n_cfg = 0;
    double t0 = 0.3, t2 = -1, evict = -1;
    const char *cfg_arg[MAX_CFG];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (a[0] == '-' && !v) { usage(stderr); return 2; }
        if (!strcmp(a, "--task")) task_name = v, i++;
        else if (!strcmp(a, "--n")) n = atoi(v), i++;
        else if (!strcmp(a, "--offset")) offset = atoi(v), i++;
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v), i++;
        else if (!strcmp(a, "--t0")) t0 = atof(v), i++;
        else if (!strcmp(a, "--t2")) t2 = atof(v), i++;
        else if (!strcmp(a, "--evict")) evict = atof(v), i++;
        else if (!strcmp(a, "--window")) window = atoi(v), i++;
        else if (!strcmp(a, "-t")) threads = atoi(v), i++;
        else if (a[0] == '-') { fprintf(stderr, "t2_fidelity: unknown option %s\n", a); usage(stderr); return 2; }
        else if (!model_path) model_path = a;
        else if (!data_path) data_path = a;
        else if (n_cfg < MAX_CFG) cfg_arg[n_cfg++] = a;
        else { fprintf(stderr, "t2_fidelity: at most %d configurations\n", MAX_CFG); return 2; }
    }
    if (!model_path || !data_path || !n_cfg || n < 1 || n > 64 || offset < 0 || max_tokens < 1 || threads < 1) {
        usage(stderr);
        return 2;
    }
    char err[512];
    enum eval_task task;
    struct eval_set set;
    if (eval_task_parse(task_name, &task, err, sizeof err) || eval_load(task, data_path, &set, err, sizeof err)) {
        fprintf(stderr, "t2_fidelity: %s\n", err);
        return 1;
    }
    if ((size_t)offset >= set.n) { fprintf(stderr, "t2_fidelity: --offset %d: the set has %zu problems\n", offset, set.n); return 2; }
    if ((size_t)(offset + n) > set.n) n = (int)set.n - offset;

    tkv_model_params mp;
    tkv_model_params_default(&mp);
    mp.n_threads = threads;
    tkv_model *m;
    if (tkv_model_open(model_path, &mp, &m, err, sizeof err)) { fprintf(stderr, "t2_fidelity: %s\n", err); return 1; }
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    int V = mi.n_vocab;

    /* prompts, as tierkv eval builds them */
    tkv_chat *ct;
    if (tkv_chat_open(m, NULL, 0, &ct, err, sizeof err)) { fprintf(stderr, "t2_fidelity: %s\n", err); return 1; }
    int32_t **ids = tkv_xcalloc((size_t)n, sizeof *ids);
    int *n_ids = tkv_xcalloc((size_t)n, sizeof *n_ids), max_prompt = 0;
    for (int p = 0; p < n; p++) {
        char *user = eval_build_prompt(task, &set.items[offset + p]);
        tkv_chat_msg msg = {.role = "user", .content = user};
        n_ids[p] = tkv_chat_encode(ct, &msg, 1, 1, &ids[p], err, sizeof err);
        free(user);
        if (n_ids[p] < 1) { fprintf(stderr, "t2_fidelity: %s\n", err); return 1; }
        if (n_ids[p] > max_prompt) max_prompt = n_ids[p];
    }
    tkv_chat_close(ct);

    /* sessions: [0] the reference (full), [1..] the configurations */
    config cf[MAX_CFG + 1] = {{0}};
    int n_s = n_cfg + 1;
    for (int c = 0; c < n_s; c++) {
        tkv_session_params sp;
        tkv_session_params_default(&sp);
        sp.max_seqs = n;
        sp.max_ctx = max_prompt + max_tokens + 1;
        sp.max_batch = n > 64 ? n : 64;
        char pol[64] = "full";
        const char *codec = NULL;
        if (c > 0) {
            snprintf(pol, sizeof pol, "%s", cfg_arg[c - 1]);
            char *colon = strchr(pol, ':');
            if (colon) *colon = 0, codec = cfg_arg[c - 1] + (colon - pol) + 1;
        }
        if (tkv_policy_parse(pol, &sp.kv.policy)) { fprintf(stderr, "t2_fidelity: unknown policy '%s'\n", pol); return 2; }
        if (c > 0) {
            sp.kv.t0_ratio = t0;
            sp.kv.t2_ratio = t2;
            sp.kv.evict_ratio = evict;
            if (window >= 0) sp.kv.window = window;
            /* ":f32" is no codec: the same policy with an f32 cache (full:f32, rounding's own divergence) */
            if (codec && !strcmp(codec, "f32")) sp.kv.f16 = 0, codec = NULL;
            sp.kv.t2_codec = codec;
        }
        cf[c].label = c ? cfg_arg[c - 1] : "full";
        if (tkv_session_open(m, &sp, &cf[c].e, err, sizeof err)) {
            fprintf(stderr, "t2_fidelity: %s: %s\n", cf[c].label, err);
            return 1;
        }
        cf[c].logits = tkv_xmalloc((size_t)n * V * sizeof(float));
        cf[c].kl = tkv_xmalloc((size_t)n * max_tokens * sizeof(double));
    }

    /* prefill every problem in every session */
    int *seq = tkv_xmalloc((size_t)n_s * n * sizeof(int));
    int32_t *next = tkv_xmalloc((size_t)n * sizeof(int32_t));
    int *gen = tkv_xcalloc((size_t)n, sizeof(int)), *done = tkv_xcalloc((size_t)n, sizeof(int));
    for (int c = 0; c < n_s; c++)
        for (int p = 0; p < n; p++) {
            int *s = &seq[c * n + p];
            if (tkv_seq_open(cf[c].e, n_ids[p] + max_tokens + 1, n_ids[p], s, err, sizeof err) ||
                tkv_prefill(cf[c].e, *s, ids[p], n_ids[p], cf[c].logits + (size_t)p * V, 0, err, sizeof err)) {
                fprintf(stderr, "t2_fidelity: %s: %s\n", cf[c].label, err);
                return 1;
            }
        }
    for (int p = 0; p < n; p++) next[p] = tkv_argmax(cf[0].logits + (size_t)p * V, V);

    /* lock-step greedy decode of the reference, teacher-forced in the others */
    int *bseq = tkv_xmalloc((size_t)n * sizeof(int)), *bidx = tkv_xmalloc((size_t)n * sizeof(int));
    int32_t *btok = tkv_xmalloc((size_t)n * sizeof(int32_t));
    long total_steps = 0;
    for (;;) {
        int nb = 0;
        for (int p = 0; p < n; p++) {
            if (done[p]) continue;
            if (tkv_token_is_eog(m, next[p]) || gen[p] >= max_tokens) { done[p] = 1; continue; }
            bidx[nb] = p, btok[nb] = next[p], nb++;
        }
        if (!nb) break;
        for (int c = 0; c < n_s; c++) {
            for (int b = 0; b < nb; b++) bseq[b] = seq[c * n + bidx[b]];
            if (tkv_decode(cf[c].e, bseq, btok, nb, cf[c].logits, err, sizeof err)) {
                fprintf(stderr, "t2_fidelity: %s: %s\n", cf[c].label, err);
                return 1;
            }
        }
        for (int b = 0; b < nb; b++) {
            const float *ref = cf[0].logits + (size_t)b * V;
            int32_t top = tkv_argmax(ref, V);
            for (int c = 1; c < n_s; c++) {
                config *x = &cf[c];
                const float *y = x->logits + (size_t)b * V;
                double kl = kl_div(ref, y, V);
                int same = tkv_argmax(y, V) == top;
                x->steps++, x->agree += same, x->kl_sum += kl;
                if (lossy_now(x->e, seq[c * n + bidx[b]])) x->steps_lossy++, x->agree_lossy += same, x->kl_lossy_sum += kl;
                x->kl[x->n_kl++] = kl;
            }
            next[bidx[b]] = top;
            gen[bidx[b]]++;
        }
        total_steps += nb;
    }

    printf("t2_fidelity: %s, %s, problems %d..%d, %ld reference tokens, max %d, T0 %g, T2 %g, evict %g, window %d\n",
           tkv_file_name(model_path), task_name, offset, offset + n - 1, total_steps, max_tokens, t0, t2, evict, window);
    printf("| config | steps | top-1 agree | KL mean | KL p99 | lossy steps | top-1 agree there | KL mean there |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int c = 1; c < n_s; c++) {
        config *x = &cf[c];
        qsort(x->kl, (size_t)x->n_kl, sizeof(double), cmp_double);
        double p99 = x->n_kl ? x->kl[(long)floor(0.99 * (double)(x->n_kl - 1))] : 0;
        printf("| %s | %ld | %.4f | %.3e | %.3e | %ld | ", x->label, x->steps, x->steps ? (double)x->agree / x->steps : 0,
               x->steps ? x->kl_sum / x->steps : 0, p99, x->steps_lossy);
        if (x->steps_lossy)
            printf("%.4f | %.3e |\n", (double)x->agree_lossy / x->steps_lossy, x->kl_lossy_sum / x->steps_lossy);
        else printf("— | — |\n"); /* nothing outside T0/T1 (full:f32): no such steps */
    }
    for (int c = 0; c < n_s; c++) tkv_session_close(cf[c].e), free(cf[c].logits), free(cf[c].kl);
    for (int p = 0; p < n; p++) free(ids[p]);
    free(ids), free(n_ids), free(seq), free(next), free(gen), free(done), free(bseq), free(bidx), free(btok);
    tkv_model_close(m);
    eval_set_free(&set);
    return 0;
}
