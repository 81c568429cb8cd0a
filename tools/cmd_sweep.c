/* cmd_sweep.c — `tierkv sweep`: runs a grid of eval configurations (policy x T0 ratio x eviction
 * ratio) on the same problems, each through `tierkv eval` in this process with its own results file
 * in --dir (so a killed sweep resumes), then writes DIR/sweep.tsv (the columns scripts/plot.sh reads,
 * then more) and DIR/mcnemar.tsv (paired tests on the same problem ids), and calls scripts/plot.sh
 * when gnuplot is installed.
 *
 * The grid: `full` runs once; `hierarchy` runs every T0 ratio x eviction ratio; every other policy
 * runs every T0 ratio as its budget (--hbm-ratio) with no eviction ratio. Flags the sweep does not
 * know are passed to every eval unchanged (model, task, --n, --max-tokens, --parallel ...). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/path.h"
#include "cmds.h"
#include "common.h"
#include "eval/eval.h"
#include "eval/harness.h"
#include "base/json.h"
#include "eval/stats.h"
#include "out.h"

#define MAX_LIST 32
#define MAX_CFG 1024

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv sweep --dir DIR [grid flags] EVAL-FLAGS...\n"
            "      --dir DIR           results per configuration, sweep.tsv, mcnemar.tsv, plots/\n"
            "      --policies LIST     default full,hierarchy,evict,quant,streaming,h2o,rkv\n"
            "      --t0 LIST           T0 ratios (baselines: their budget ratio), default 0.3,0.5,0.7\n"
            "      --evict LIST        eviction ratios for hierarchy, default 0,0.03,0.1\n"
            "      --tokens LIST       T0 budgets in tokens per sequence (--t0-tokens) instead of the --t0 ratios\n"
            "      --tag TAG           appended to every configuration's name but full's (e.g. pp for runs with\n"
            "                          --protect-prompt, t2-q8bh for --t2-codec q8bh), so variants share a dir and\n"
            "                          pair with its full run\n"
            "      --dry-run           list the configurations and their eval commands, run nothing\n"
            "      --no-plot           do not call scripts/plot.sh\n"
            "      --table-only        run nothing: rebuild sweep.tsv, mcnemar.tsv and the plots from the\n"
            "                          configurations of the grid that have results in DIR (the others are left out)\n"
            "      --plot-script FILE  plot.sh to call (default: ../scripts/plot.sh next to the binary's folder,\n"
            "                          else scripts/plot.sh)\n"
            "  EVAL-FLAGS: any `tierkv eval` flags but --out, --summary-json and the KV budget flags, e.g.\n"
            "  -m MODEL --task gsm8k --n 100 --max-tokens 1024 --parallel 8\n");
}

struct cfg {
    char name[96];
    char policy[32];
    double t0, ev;   /* -1: not given */
    int tokens;      /* 1: t0 is --t0-tokens (tokens per sequence), not a ratio */
    int ok;          /* 1: ran (or was complete) and its summary was read */
    int skip;        /* --table-only and no results: not part of the table */
    struct harness_summary s;
    double tok_per_s; /* NAN when the last invocation ran nothing */
    double budget;    /* --max-tokens */
    char **ids;
    size_t n_ids;
    struct harness_results res;
};

/* A comma-separated list of ratios in [0, 1]: NaN, an empty item, a value given twice, more than
 * MAX_LIST values and a list too long to hold are refused, never cut or skipped. */
static int parse_list(const char *s, double *out, int *n, const char *flag) {
    *n = 0;
    char buf[512];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "tierkv sweep: %s: the list is longer than %zu characters\n", flag, sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", s);
    for (char *t = buf, *end; t; t = end) {
        end = strchr(t, ',');
        if (end) *end++ = 0;
        double v;
        /* !(v >= 0 && v <= 1) also refuses NaN, which no comparison is true for */
        if (*n == MAX_LIST || parse_double(t, &v) || !(v >= 0 && v <= 1)) {
            fprintf(stderr, "tierkv sweep: bad %s value '%s' (ratios 0..1, at most %d)\n", flag, t, MAX_LIST);
            return -1;
        }
        for (int k = 0; k < *n; k++)
            if (out[k] == v) { fprintf(stderr, "tierkv sweep: %s value '%s' is given twice\n", flag, t); return -1; }
        out[(*n)++] = v;
    }
    return 0;
}

/* A comma-separated list of token budgets (positive integers). */
static int parse_token_list(const char *s, double *out, int *n) {
    *n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long v;
        if (*n == MAX_LIST || parse_int(t, 1, 1 << 24, &v)) {
            fprintf(stderr, "tierkv sweep: bad --tokens value '%s' (positive token counts, at most %d)\n", t, MAX_LIST);
            return -1;
        }
        out[(*n)++] = (double)v;
    }
    if (!*n) { fprintf(stderr, "tierkv sweep: --tokens needs at least one value\n"); return -1; }
    return 0;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(tkv_xmalloc(n), s, n);
}

/* DIR/NAME.EXT as a heap string. */
static char *path_of(const char *dir, const struct cfg *c, const char *ext) {
    size_t n = strlen(dir) + strlen(c->name) + strlen(ext) + 2;
    char *p = tkv_xmalloc(n);
    snprintf(p, n, "%s/%s%s", dir, c->name, ext);
    return p;
}

/* Reads what sweep.tsv needs from a configuration's summary JSON and its results file. */
static int read_cfg(const char *dir, struct cfg *c, char *err, size_t errlen) {
    char *p = path_of(dir, c, ".summary.json");
    char *buf;
    size_t len;
    int rrc = eval_read_file(p, &buf, &len, err, errlen);
    free(p);
    if (rrc) return -1;
    struct json_doc *doc;
    int rc = json_parse(buf, len, NULL, &doc, err, errlen);
    free(buf);
    if (rc) return -1;
    const struct json_value *o = json_root(doc), *ids = json_get(o, "ids");
    const struct json_value *mt = json_get(o, "mean_tier_tokens");
    struct harness_summary *s = &c->s;
    int64_t iv;
    s->n = json_get_int(o, "n", &iv) ? (long)iv : 0;
    s->correct = json_get_int(o, "correct", &iv) ? (long)iv : 0;
#define NUM(key, dst)                                                          \
    do {                                                                       \
        const struct json_value *v_ = json_get(o, key);                        \
        dst = v_ && v_->type == JSON_NUMBER ? v_->u.num : NAN;                 \
    } while (0)
    NUM("accuracy", s->acc);
    NUM("ci_lo", s->ci_lo);
    NUM("ci_hi", s->ci_hi);
    NUM("mean_len", s->mean_len);
    NUM("max_len", s->max_len);
    NUM("length_share", s->length_share);
    NUM("mean_peak_t0_bytes", s->mean_peak_t0_bytes);
    NUM("mean_bytes_moved", s->mean_bytes_moved);
    NUM("mean_evicted", s->mean_evicted);
    NUM("tok_per_s", c->tok_per_s);
    NUM("max_tokens", c->budget);
#undef NUM
    for (size_t t = 0; t < 4; t++) {
        const struct json_value *v = json_at(mt, t);
        s->mean_tier_tokens[t] = v && v->type == JSON_NUMBER ? v->u.num : NAN;
    }
    c->n_ids = ids && ids->type == JSON_ARRAY ? ids->u.arr.n : 0;
    c->ids = tkv_xcalloc(c->n_ids + 1, sizeof(char *));
    for (size_t i = 0; i < c->n_ids; i++) {
        const struct json_value *v = json_at(ids, i);
        c->ids[i] = xstrdup(v && v->type == JSON_STRING ? v->u.str.s : "");
    }
    json_free(doc);
    p = path_of(dir, c, ".jsonl");
    rrc = harness_load(p, &c->res, NULL, err, errlen);
    free(p);
    if (rrc) return -1;
    harness_results_sort(&c->res);
    /* the eviction statistic comes from the per-problem records, which say where it is unknown:
     * summaries written before evicted_equiv existed hold an undercount for per-head baselines */
    struct harness_summary rec;
    harness_summarize(&c->res, c->ids, c->n_ids, 1, &rec);
    s->mean_evicted = rec.mean_evicted;
    return 0;
}

/* x in fmt, or NA when unknown, then the column separator */
static void put_num(FILE *f, double x, const char *fmt) {
    if (isnan(x)) fputs("NA", f);
    else fprintf(f, fmt, x);
    fputc('\t', f);
}

static int write_tsv(const char *dir, struct cfg *cf, int n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/sweep.tsv", dir);
    FILE *f = fopen(p, "w");
    if (!f) { fprintf(stderr, "tierkv sweep: cannot write %s\n", p); return -1; }
    fprintf(f, "# tierkv sweep: one row per configuration. t0_ratio/evict_ratio: the flags given (full: 1 and 0;\n"
               "# baselines: evict_ratio 0, their budget is t0_ratio). budget: --max-tokens. mean_evicted_tokens:\n"
               "# positions whose K/V can no longer be read at the end, averaged over (layer, kv head) rows (the\n"
               "# per-head baselines drop different positions per row); evicted_share: that / mean final length.\n"
               "# NA: not measured in the last invocation, or by a version that did not record it.\n");
    fprintf(f, "policy\tt0_ratio\tevict_ratio\tbudget\tn\tcorrect\taccuracy\tci_lo\tci_hi\tmean_len\tmax_len\tlength_share\t"
               "mean_t0_tokens\tmean_t1_tokens\tmean_t2_tokens\tmean_evicted_tokens\tevicted_share\tpeak_t0_mib\tmoved_mib\t"
               "tok_per_s\tname\n");
    for (int i = 0; i < n; i++) {
        struct cfg *c = &cf[i];
        if (c->skip) continue;
        if (!c->ok) { fprintf(f, "# %s: failed, no row\n", c->name); continue; }
        const struct harness_summary *s = &c->s;
        double tot = 0;
        for (int t = 0; t < 4; t++) tot += s->mean_tier_tokens[t];
        fprintf(f, "%s\t%g\t%g\t%.0f\t%ld\t%ld\t", c->policy, c->t0 < 0 ? 1.0 : c->t0, c->ev < 0 ? 0.0 : c->ev, c->budget,
                s->n, s->correct);
        put_num(f, s->acc, "%.4f");
        put_num(f, s->ci_lo, "%.4f");
        put_num(f, s->ci_hi, "%.4f");
        put_num(f, s->mean_len, "%.1f");
        put_num(f, s->max_len, "%.0f");
        put_num(f, s->length_share, "%.4f");
        for (int t = 0; t < 3; t++) put_num(f, s->mean_tier_tokens[t], "%.1f");
        put_num(f, s->mean_evicted, "%.1f");
        put_num(f, tot > 0 ? s->mean_evicted / tot : NAN, "%.4f");
        put_num(f, s->mean_peak_t0_bytes / 1048576.0, "%.3f");
        put_num(f, s->mean_bytes_moved / 1048576.0, "%.3f");
        put_num(f, c->tok_per_s, "%.2f");
        fprintf(f, "%s\n", c->name);
    }
    return fclose(f) ? -1 : 0;
}

/* One McNemar row: A and B paired on A's selection ids that both results files hold. */
static void mcnemar_row(FILE *f, const char *kind, const struct cfg *a, const struct cfg *b) {
    long n = 0, ka = 0, kb = 0, only_a = 0, only_b = 0;
    for (size_t i = 0; i < a->n_ids; i++) {
        const struct harness_rec *x = harness_find(&a->res, a->ids[i]), *y = harness_find(&b->res, a->ids[i]);
        if (!x || !y) continue;
        n++;
        ka += x->correct;
        kb += y->correct;
        only_a += x->correct && !y->correct;
        only_b += !x->correct && y->correct;
    }
    fprintf(f, "%s\t%s\t%s\t%ld\t%ld\t%ld\t%ld\t%ld\t%.6g\n", kind, a->name, b->name, n, ka, kb, only_a, only_b,
            eval_mcnemar_exact(only_a, only_b));
}

static int write_mcnemar(const char *dir, struct cfg *cf, int n, const double *ev, int n_ev) {
    char p[4096];
    snprintf(p, sizeof p, "%s/mcnemar.tsv", dir);
    FILE *f = fopen(p, "w");
    if (!f) { fprintf(stderr, "tierkv sweep: cannot write %s\n", p); return -1; }
    fprintf(f, "# paired on the same problem ids. only_a: A correct and B wrong; only_b: the reverse.\n"
               "# p_exact: McNemar's exact two-sided p-value (1 when there are no discordant pairs).\n"
               "# t0_at_evict=E: hierarchy at two T0 ratios, same eviction ratio E (H0: T0 ratio makes no difference).\n"
               "# vs_full: each configuration against full.\n");
    fprintf(f, "comparison\ta\tb\tn_paired\ta_correct\tb_correct\tonly_a\tonly_b\tp_exact\n");
    for (int e = 0; e < n_ev; e++) {
        char kind[64];
        snprintf(kind, sizeof kind, "t0_at_evict=%g", ev[e]);
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (cf[i].ok && cf[j].ok && !strcmp(cf[i].policy, "hierarchy") && !strcmp(cf[j].policy, "hierarchy") &&
                    cf[i].ev == ev[e] && cf[j].ev == ev[e])
                    mcnemar_row(f, kind, &cf[i], &cf[j]);
    }
    const struct cfg *full = NULL;
    for (int i = 0; i < n; i++)
        if (cf[i].ok && !strcmp(cf[i].policy, "full")) full = &cf[i];
    for (int i = 0; full && i < n; i++)
        if (cf[i].ok && &cf[i] != full) mcnemar_row(f, "vs_full", &cf[i], full);
    return fclose(f) ? -1 : 0;
}

/* plot.sh: --plot-script, else ../scripts/plot.sh next to the binary's folder, else scripts/plot.sh. */
static int find_plot(const char *given, char *out, size_t n) {
    if (given) { snprintf(out, n, "%s", given); return access(out, R_OK) ? -1 : 0; }
    char exe[2048];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *s = strrchr(exe, '/');
        if (s) {
            *s = 0;
            snprintf(out, n, "%s/../scripts/plot.sh", exe);
            if (!access(out, R_OK)) return 0;
        }
    }
    snprintf(out, n, "scripts/plot.sh");
    return access(out, R_OK) ? -1 : 0;
}

/* Single-quotes s for sh. */
static void sh_quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    if (k + 1 < n) out[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') { memcpy(out + k, "'\\''", 4); k += 4; }
        else out[k++] = *s;
    }
    if (k + 1 < n) out[k++] = '\'';
    out[k] = 0;
}

/* " ARG", quoted for sh when needed. */
static void put_arg(FILE *f, const char *a) {
    char q[4096];
    if (*a && !strpbrk(a, " \t\n'\"\\$*?;&|<>()")) fprintf(f, " %s", a);
    else sh_quote(q, sizeof q, a), fprintf(f, " %s", q);
}

/* The command, one line per distinct invocation, in DIR/sweep.cmd for scripts/results.sh: as eval's
 * summaries record theirs (recorded_arg), with the model, wherever it lies, by its file name, as
 * the summaries name it. The same command run again (a queue resumed) adds no line. */
static void record_command(const char *dir, int argc, char **argv) {
    char *line = NULL, *cp = tkv_xmalloc(strlen(dir) + 16), *have = NULL;
    size_t len = 0, cap = 0;
    FILE *m = open_memstream(&line, &len);
    if (!m) { free(cp); return; }
    fputs("tierkv", m);
    for (int i = 0; i < argc; i++) {
        int model = i > 0 && (!strcmp(argv[i - 1], "-m") || !strcmp(argv[i - 1], "--model"));
        put_arg(m, model ? tkv_file_name(argv[i]) : recorded_arg(argv[i]));
    }
    fputc('\n', m);
    fclose(m);
    sprintf(cp, "%s/sweep.cmd", dir);
    FILE *f = fopen(cp, "r");
    int seen = 0;
    ssize_t k;
    while (f && !seen && (k = getline(&have, &cap, f)) > 0) seen = (size_t)k == len && !memcmp(have, line, len);
    if (f) fclose(f);
    if (!seen && (f = fopen(cp, "a"))) fwrite(line, 1, len, f), fclose(f);
    free(have);
    free(line);
    free(cp);
}

int cmd_sweep(int argc, char **argv) {
    const char *dir = NULL, *plot_script = NULL, *tag = NULL;
    const char *pol_list = "full,hierarchy,evict,quant,streaming,h2o,rkv";
    double t0[MAX_LIST] = {0.3, 0.5, 0.7}, ev[MAX_LIST] = {0, 0.03, 0.1};
    int n_t0 = 3, n_ev = 3, dry = 0, no_plot = 0, table_only = 0, tokens = 0;
    char **pass = tkv_xcalloc((size_t)argc + 1, sizeof(char *));
    int n_pass = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); free(pass); return 0; }
        if (!strcmp(a, "--dry-run")) { dry = 1; continue; }
        if (!strcmp(a, "--no-plot")) { no_plot = 1; continue; }
        if (!strcmp(a, "--table-only")) { table_only = 1; continue; }
        int grid = !strcmp(a, "--dir") || !strcmp(a, "--policies") || !strcmp(a, "--t0") || !strcmp(a, "--evict") ||
                   !strcmp(a, "--plot-script") || !strcmp(a, "--tag") || !strcmp(a, "--tokens");
        if (grid) {
            if (i + 1 >= argc) { fprintf(stderr, "tierkv sweep: %s needs a value\n", a); usage(stderr); free(pass); return 2; }
            const char *v = argv[++i];
            if (!strcmp(a, "--dir")) dir = v;
            else if (!strcmp(a, "--tag")) {
                for (const char *c = v; *c; c++)
                    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '.')) {
                        fprintf(stderr, "tierkv sweep: --tag wants [a-z0-9.-], got '%s'\n", v);
                        free(pass);
                        return 2;
                    }
                tag = v;
            }
            else if (!strcmp(a, "--policies")) pol_list = v;
            else if (!strcmp(a, "--tokens")) {
                if (parse_token_list(v, t0, &n_t0)) { free(pass); return 2; }
                tokens = 1;
            }
            else if (!strcmp(a, "--plot-script")) plot_script = v;
            else if (parse_list(v, !strcmp(a, "--t0") ? t0 : ev, !strcmp(a, "--t0") ? &n_t0 : &n_ev, a)) { free(pass); return 2; }
            continue;
        }
        static const char *const owned[] = {"--out", "--summary-json", "--policy", "--hbm-ratio", "--hbm-budget", "--evict-ratio",
                                            "--t0-tokens"};
        for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++)
            if (!strncmp(a, owned[k], strlen(owned[k])) && (a[strlen(owned[k])] == 0 || a[strlen(owned[k])] == '=')) {
                fprintf(stderr, "tierkv sweep: %s is set by the sweep for each configuration\n", owned[k]);
                usage(stderr);
                free(pass);
                return 2;
            }
        pass[n_pass++] = argv[i];
    }
    if (!dir) { fprintf(stderr, "tierkv sweep: --dir is required\n"); usage(stderr); free(pass); return 2; }

    /* the grid */
    static struct cfg cf[MAX_CFG];
    int n = 0;
    char pbuf[512];
    snprintf(pbuf, sizeof pbuf, "%s", pol_list);
    for (char *save = NULL, *p = strtok_r(pbuf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        tkv_policy kind;
        if (tkv_policy_parse(p, &kind)) { fprintf(stderr, "tierkv sweep: unknown policy '%s'\n", p); free(pass); return 2; }
        int is_full = kind == TKV_POLICY_FULL, is_h = kind == TKV_POLICY_HIERARCHY;
        for (int i = 0; i < (is_full ? 1 : n_t0); i++)
            for (int j = 0; j < (is_h ? n_ev : 1); j++) {
                if (n == MAX_CFG) { fprintf(stderr, "tierkv sweep: more than %d configurations\n", MAX_CFG); free(pass); return 2; }
                struct cfg *c = &cf[n++];
                memset(c, 0, sizeof *c);
                const char *pn = tkv_policy_name(kind);
                c->t0 = is_full ? -1 : t0[i];
                c->ev = is_h ? ev[j] : -1;
                snprintf(c->policy, sizeof c->policy, "%s", pn);
                if (is_full) snprintf(c->name, sizeof c->name, "%s", pn);
                else if (is_h) snprintf(c->name, sizeof c->name, "%s_%s-%g_ev-%g", pn, tokens ? "tok" : "t0", c->t0, c->ev);
                else snprintf(c->name, sizeof c->name, "%s_%s-%g", pn, tokens ? "tok" : "t0", c->t0);
                c->tokens = tokens;
                if (tag && !is_full) { /* full is the reference every tagged configuration pairs with */
                    size_t l = strlen(c->name);
                    snprintf(c->name + l, sizeof c->name - l, "_%s", tag);
                }
                for (int k = 0; k < n - 1; k++)
                    if (!strcmp(cf[k].name, c->name)) { n--; break; } /* a policy listed twice */
            }
    }

    /* per configuration: eval argv = pass-through + policy flags + its files */
    int rc = 0;
    if (!dry && mkdir(dir, 0777) && access(dir, W_OK)) { fprintf(stderr, "tierkv sweep: cannot create %s\n", dir); free(pass); return 1; }
    if (dry) printf("%d configurations:\n", n);
    else if (!table_only) record_command(dir, argc, argv);
    for (int i = 0; i < n; i++) {
        struct cfg *c = &cf[i];
        char t0s[32], evs[32];
        snprintf(t0s, sizeof t0s, "%g", c->t0);
        snprintf(evs, sizeof evs, "%g", c->ev);
        char *outp = path_of(dir, c, ".jsonl"), *sump = path_of(dir, c, ".summary.json");
        char *av[16 + MAX_CFG];
        int ac = 0;
        av[ac++] = "eval";
        for (int k = 0; k < n_pass && ac < 4 + MAX_CFG; k++) av[ac++] = pass[k];
        av[ac++] = "--policy", av[ac++] = c->policy;
        if (c->t0 >= 0) av[ac++] = c->tokens ? "--t0-tokens" : "--hbm-ratio", av[ac++] = t0s;
        if (c->ev >= 0) av[ac++] = "--evict-ratio", av[ac++] = evs;
        av[ac++] = "--out", av[ac++] = outp, av[ac++] = "--summary-json", av[ac++] = sump;
        av[ac] = NULL;
        if (dry) {
            printf("%-28s tierkv", c->name);
            for (int k = 0; k < ac; k++) put_arg(stdout, av[k]);
            printf("\n");
            free(outp);
            free(sump);
            continue;
        }
        if (table_only) {
            char err[1024];
            int have = access(sump, R_OK) == 0;
            free(outp);
            free(sump);
            if (!have) { c->skip = 1; continue; }
            if (read_cfg(dir, c, err, sizeof err)) fprintf(stderr, "[sweep] %s: %s\n", c->name, err), rc = 1;
            else c->ok = 1;
            continue;
        }
        fprintf(stderr, "[sweep] %d/%d %s\n", i + 1, n, c->name);
        fflush(stdout);
        int erc = cmd_eval(ac, av);
        free(outp);
        free(sump);
        if (erc == 2) { fprintf(stderr, "tierkv sweep: the eval flags were refused; stopping\n"); free(pass); return 2; }
        char err[1024];
        if (erc) fprintf(stderr, "[sweep] %s failed (exit %d); going on\n", c->name, erc), rc = 1;
        else if (read_cfg(dir, c, err, sizeof err)) fprintf(stderr, "[sweep] %s: %s\n", c->name, err), rc = 1;
        else c->ok = 1;
    }
    free(pass);
    if (dry) return out_finish("sweep");

    if (write_tsv(dir, cf, n) || write_mcnemar(dir, cf, n, ev, n_ev)) rc = 1;
    printf("[sweep] wrote %s/sweep.tsv and %s/mcnemar.tsv\n", dir, dir);
    if (!no_plot) {
        char ps[4096];
        if (system("command -v gnuplot >/dev/null 2>&1") != 0) printf("[sweep] gnuplot is not installed: no plots (apt-get install -y gnuplot-nox)\n");
        else if (find_plot(plot_script, ps, sizeof ps)) printf("[sweep] scripts/plot.sh not found: no plots (give --plot-script FILE)\n");
        else {
            char cmd[16384], q1[4096], q2[4096], q3[4096], tsv[4096], pd[4096];
            snprintf(tsv, sizeof tsv, "%s/sweep.tsv", dir);
            snprintf(pd, sizeof pd, "%s/plots", dir);
            sh_quote(q1, sizeof q1, ps);
            sh_quote(q2, sizeof q2, tsv);
            sh_quote(q3, sizeof q3, pd);
            snprintf(cmd, sizeof cmd, "bash %s %s %s >/dev/null", q1, q2, q3);
            if (system(cmd) != 0) { fprintf(stderr, "tierkv sweep: plot.sh failed\n"); rc = 1; }
            else printf("[sweep] plots in %s/\n", pd);
        }
    }
    for (int i = 0; i < n; i++) {
        if (cf[i].ids) harness_ids_free(cf[i].ids, cf[i].n_ids);
        harness_results_free(&cf[i].res);
    }
    return out_finish("sweep") ? 1 : rc;
}
