/* cmd_eval.c — `tierkv eval`: runs a benchmark task end to end through the engine (src/eval/harness.h):
 * chat-templated prompts, greedy decoding (or K sampled chains per problem) with continuous batching, one JSON line per problem in
 * --out (resumable), a summary for people on stdout and, with --summary-json, as JSON.
 * This main resolves flags and environment (TIERKV_DATA) into harness options; nothing else. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "cmds.h"
#include "common.h"
#include "eval/harness.h"
#include "kv_flags.h"
#include "out.h"

static const struct { const char *name; enum eval_task task; const char *file; } tasks[] = {
    {"gsm8k", EVAL_GSM8K, "gsm8k_test.jsonl"},
    {"math500", EVAL_MATH, "math500_test.jsonl"},
    {"math", EVAL_MATH, "math500_test.jsonl"},
    {"math-l5", EVAL_MATH, "math_level5_test.jsonl"},
    {"arc", EVAL_ARC, "arc_challenge_test.jsonl"},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv eval [-m MODEL.gguf] --task gsm8k|math500|math-l5|arc [options]\n"
            "      --task NAME         the benchmark (math is math500)\n"
            "      --data FILE         the task's JSONL (default: $TIERKV_DATA/FILE, else data/FILE, where FILE is\n"
            "                          gsm8k_test.jsonl, math500_test.jsonl, math_level5_test.jsonl, arc_challenge_test.jsonl)\n"
            "      --n N               problems to run (default: all)\n"
            "      --offset K          skip the first K problems of the file (default 0)\n"
            "      --spread            the N problems at evenly spaced positions of the file (after --offset)\n"
            "                          instead of the first N: a file sorted by subject (MATH level 5: its\n"
            "                          first 200 are all Algebra) is then sampled in proportion\n"
            "      --max-tokens N      generated tokens per problem at most (default 1024)\n"
            "      --parallel P        problems decoded together (default 8)\n"
            "      --out FILE          results JSONL, one line per problem; ids already there are skipped (resume)\n"
            "      --summary-json FILE write the summary as JSON\n"
            "      --system TEXT       system prompt (default: the chat template's own, e.g. Qwen's)\n"
            "      --no-system         no system turn at all\n"
            "      --no-prefix-cache   prefill every prompt whole (default: a prefix all prompts share is prefilled\n"
            "                          once and copied, for policies that do not score the prompt)\n"
            "      --template NAME     chat template: chatml, deepseek-r1, llama3, llama3.1, qwen3 (default: from the model file)\n"
            "      --samples K         chains per problem, 1..64 (default 1), chain k seeded seed + k: the summary\n"
            "                          gives pass@1, maj@K and pass@K; needs --temp above 0\n"
            SAMPLING_USAGE
            "      --quiet             no progress line\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

/* The command line as one string, for the summary (arguments with spaces quoted; absolute paths
 * shortened to their file names, so that summaries carry no paths of the machine that ran them). */
static char *join_args(int argc, char **argv) {
    size_t n = 16;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) * 2 + 3;
    char *s = tkv_xmalloc(n), *p = s;
    p += sprintf(p, "tierkv");
    for (int i = 0; i < argc; i++) {
        const char *arg = recorded_arg(argv[i]);
        int q = !*arg || strpbrk(arg, " \t\n'\"\\$") != NULL;
        *p++ = ' ';
        if (q) *p++ = '\'';
        for (const char *c = arg; *c; c++) {
            if (q && *c == '\'') { memcpy(p, "'\\''", 4); p += 4; }
            else *p++ = *c;
        }
        if (q) *p++ = '\'';
    }
    *p = 0;
    return s;
}

/* Whether a file can be written at path (checked before the run, not after an hour of it): an
 * existing path must not be a directory and must be writable, a new one needs a writable directory. */
static int check_writable(const char *flag, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (!*path) return tkv_errf(err, errlen, "%s: an empty path", flag);
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return tkv_errf(err, errlen, "%s %s: is a directory", flag, path);
        if (access(path, W_OK)) return tkv_errf(err, errlen, "%s %s: cannot be written: %s", flag, path, strerror(errno));
        return 0;
    }
    if (errno != ENOENT) return tkv_errf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    if (stat(dir, &st) != 0) return tkv_errf(err, errlen, "%s %s: directory %s: %s", flag, path, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return tkv_errf(err, errlen, "%s %s: %s is not a directory", flag, path, dir);
    if (access(dir, W_OK | X_OK)) return tkv_errf(err, errlen, "%s %s: directory %s cannot be written: %s", flag, path, dir, strerror(errno));
    return 0;
}

int cmd_eval(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    c.sp.max_ctx = 0; /* sized by the harness from the prompts unless --ctx is given */
    struct harness_opts o;
    memset(&o, 0, sizeof o);
    o.n = -1;
    o.max_tokens = 1024;
    o.parallel = 8;
    o.samples = 1;
    tkv_sampling_default(&o.sampling);
    o.sampling.temperature = 0; /* greedy unless --temp */
    const char *task_name = NULL, *summary_json = NULL;
    int quiet = 0;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&c, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv eval: %s\n", err); usage(stderr); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "--no-system")) { o.no_system = 1; continue; }
        if (!strcmp(a, "--no-prefix-cache")) { o.no_prefix_cache = 1; continue; }
        if (!strcmp(a, "--spread")) { o.spread = 1; continue; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "tierkv eval: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        long lv;
        if (!strcmp(a, "--task")) task_name = v;
        else if (!strcmp(a, "--data")) o.data_path = v;
        else if (!strcmp(a, "--out")) o.out_path = v;
        else if (!strcmp(a, "--summary-json")) summary_json = v;
        else if (!strcmp(a, "--system")) o.system = v;
        else if (!strcmp(a, "--template")) o.template_name = v;
        else if (!strcmp(a, "--n") || !strcmp(a, "-n")) {
            if (parse_int(v, 0, 1L << 30, &lv)) { fprintf(stderr, "tierkv eval: bad --n '%s'\n", v); return 2; }
            o.n = lv;
        } else if (!strcmp(a, "--offset")) {
            if (parse_int(v, 0, 1L << 30, &lv)) { fprintf(stderr, "tierkv eval: bad --offset '%s'\n", v); return 2; }
            o.offset = lv;
        } else if (!strcmp(a, "--max-tokens")) {
            if (parse_int(v, 1, 1 << 20, &lv)) { fprintf(stderr, "tierkv eval: bad --max-tokens '%s' (1..1048576)\n", v); return 2; }
            o.max_tokens = (int)lv;
        } else if (!strcmp(a, "--parallel")) {
            if (parse_int(v, 1, 256, &lv)) { fprintf(stderr, "tierkv eval: bad --parallel '%s' (1..256)\n", v); return 2; }
            o.parallel = (int)lv;
        } else if (!strcmp(a, "--samples")) {
            if (parse_int(v, 1, HARNESS_MAX_SAMPLES, &lv)) {
                fprintf(stderr, "tierkv eval: bad --samples '%s' (1..%d)\n", v, HARNESS_MAX_SAMPLES);
                return 2;
            }
            o.samples = (int)lv;
        } else {
            int sr = sampling_parse(a, v, &o.sampling, err, sizeof err);
            if (sr < 0) { fprintf(stderr, "tierkv eval: %s\n", err); return 2; }
            if (!sr) { fprintf(stderr, "tierkv eval: unknown flag %s\n", a); usage(stderr); return 2; }
        }
    }
    if (o.samples > 1 && o.sampling.temperature <= 0) {
        fprintf(stderr, "tierkv eval: --samples %d needs --temp above 0 (greedy chains are all the same)\n", o.samples);
        return 2;
    }
    if (!task_name) { fprintf(stderr, "tierkv eval: --task is required\n"); usage(stderr); return 2; }
    const char *file = NULL;
    for (size_t k = 0; k < sizeof tasks / sizeof tasks[0]; k++)
        if (!strcmp(task_name, tasks[k].name)) o.task = tasks[k].task, file = tasks[k].file;
    if (!file) { fprintf(stderr, "tierkv eval: unknown task '%s' (gsm8k, math500, math-l5, arc)\n", task_name); return 2; }
    if (o.system && o.no_system) { fprintf(stderr, "tierkv eval: --system and --no-system exclude each other\n"); return 2; }
    o.task_label = !strcmp(task_name, "math") ? "math500" : task_name;
    if ((summary_json && check_writable("--summary-json", summary_json, err, sizeof err)) ||
        (o.out_path && check_writable("--out", o.out_path, err, sizeof err))) {
        fprintf(stderr, "tierkv eval: %s\n", err);
        return 1;
    }

    char data_buf[4096];
    if (!o.data_path) {
        const char *dir = getenv("TIERKV_DATA");
        snprintf(data_buf, sizeof data_buf, "%s/%s", dir && *dir ? dir : "data", file);
        if (access(data_buf, R_OK)) {
            fprintf(stderr, "tierkv eval: no data file for %s: %s is not readable; give --data FILE or set TIERKV_DATA=DIR\n",
                    task_name, data_buf);
            return 1;
        }
        o.data_path = data_buf;
    }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv eval: %s\n", err); return 1; }
    o.model_path = c.model_path;
    o.mp = c.mp;
    o.sp = c.sp;
    /* results record the codec a T2 configuration ran, also when it is the backend's default */
    if (!o.sp.kv.t2_codec && tkv_kv_uses_t2(&o.sp.kv)) o.sp.kv.t2_codec = tkv_t2_codec_default(o.mp.backend);
    o.progress = quiet ? NULL : stderr;
    o.progress_tty = isatty(2);

    struct harness_summary s;
    char **ids = NULL;
    size_t n_ids = 0;
    if (harness_run(&o, &s, &ids, &n_ids, err, sizeof err)) { fprintf(stderr, "tierkv eval: %s\n", err); return 1; }
    printf("model             %s\ntask              %s (%s)\npolicy            %s\n", o.model_path, o.task_label, o.data_path,
           tkv_policy_name(o.sp.kv.policy));
    harness_summary_print(stdout, &s);
    fflush(stdout);
    int rc = 0;
    if (summary_json && !s.run_problems && harness_summary_unchanged(summary_json, &s, ids, n_ids)) {
        if (!quiet) fprintf(stderr, "tierkv eval: %s kept: it records these %ld problems already\n", summary_json, s.n);
    } else if (summary_json) {
        char *cmd = join_args(argc, argv);
        if (harness_summary_write_json(summary_json, &o, &s, ids, n_ids, cmd, err, sizeof err)) {
            fprintf(stderr, "tierkv eval: %s\n", err);
            rc = 1;
        }
        free(cmd);
    }
    harness_ids_free(ids, n_ids);
    return out_finish("eval") ? 1 : rc;
}
