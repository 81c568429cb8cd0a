/* test_gpu_plan.c — bench/gpu.sh --dry-run, --dry-run --quick and --dry-run --sanitize: each exits 0,
 * lists its jobs with their estimated seconds, and its planned work sums under the run's limit (300 s
 * full and sanitize, 120 s quick; the GPU is lent 15 minutes with the machine's start, so a fix and a
 * rerun must fit), with this build's folder as the prebuilt binary. The dry run touches no GPU and
 * builds nothing. Also bench/gpu_targets.py's verdicts on issue 46's targets, on recorded device runs
 * and on made-up runs on either side of each threshold. Run from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

/* bench/gpu.sh ARGS with the binaries of BIN_DIR: everything it printed (malloc'd; NULL when
 * unreadable), after checking it exited 0 */
static char *gpu_sh(const char *bin_dir, const char *args) {
    char cmd[1800], out[600];
    snprintf(out, sizeof out, "%s/gpu-plan.txt", t_tmpdir());
    snprintf(cmd, sizeof cmd, "BIN_DIR='%s' OUT='%s/gpu-out' bench/gpu.sh %s >'%s' 2>&1", bin_dir, t_tmpdir(), args, out);
    int st = system(cmd);
    char *o = t_slurp(out);
    if (o) CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gpu.sh %s: status %d: %s", args, st, o);
    return o;
}

static void dry_run(const char *args, int limit, const char *const *want_jobs) {
    if (access("bench/gpu.sh", X_OK)) SKIP("no bench/gpu.sh (run from the repository root)");
    if (system("python3 -c '' >/dev/null 2>&1")) SKIP("python3 missing");
    char dir[512];
    /* the binary under test stands for the prebuilt one a GPU run carries (its folder has both) */
    snprintf(dir, sizeof dir, "%s", t_bin());
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    char *o = gpu_sh(dir, args);
    REQUIRE(o);
    for (int k = 0; want_jobs[k]; k++) CHECKF(strstr(o, want_jobs[k]), "gpu.sh %s: no job '%s' in:\n%s", args, want_jobs[k], o);
    const char *s = strstr(o, "\nsum: ");
    int sum = -1, budget = -1;
    CHECKF(s && sscanf(s, "\nsum: %d s of estimated work + %*d s margin, budget %d s", &sum, &budget) == 2,
           "gpu.sh %s: no sum line in:\n%s", args, o);
    CHECKF(sum > 0 && sum < limit && budget <= limit, "gpu.sh %s: %d s planned, budget %d (limit %d)", args, sum, budget, limit);
    /* every job line carries its estimate */
    int lines = 0;
    for (const char *p = o; (p = strstr(p, "s  (ends by ")); p++) lines++;
    CHECKF(lines >= 4, "gpu.sh %s: %d planned job lines", args, lines);
    printf("    gpu.sh %s: %d s planned of %d\n", args, sum, budget);
    free(o);
}

TEST(gpu_plan_full) {
    static const char *const jobs[] = {"preflight", "binary:", "CUDA op checks", "HBM and PCIe bandwidth", "token check", "bench-ops",
                                       "BF16 gen-random", "BF16 full d=2048", "Q8_0", "prefill 2048", "model files in", NULL};
    dry_run("--dry-run", 300, jobs);
}

TEST(gpu_plan_quick) {
    static const char *const jobs[] = {"preflight", "binary:", "CUDA op checks", "token check", "full d=2048", NULL};
    dry_run("--dry-run --quick", 120, jobs);
}

/* A carried binary: packed in BIN_DIR/carry.tar.xz alone, it is unpacked and used where the sources'
 * hash it prints is the tree's (scripts/sources-hash.sh), and called stale (rebuilt) where it is not. The
 * binaries are stand-in scripts that print a --version. */
static void carried(const char *hash, const char *want1, const char *want2) {
    char dir[600], cmd[4000];
    snprintf(dir, sizeof dir, "%s/carry-bin", t_tmpdir());
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s/p' && cd '%s/p' && "
             "printf '#!/bin/sh\\necho tierkv 0123456789ab\\necho built with: cc -O2 +cuda\\necho sources: %s\\n' >tierkv && "
             "printf '#!/bin/sh\\nexit 0\\n' >tierkv-tests && chmod +x tierkv tierkv-tests && "
             "tar -cJf ../carry.tar.xz tierkv tierkv-tests && cd .. && rm -rf p",
             dir, dir, dir, hash);
    REQUIRE(system(cmd) == 0);
    char *o = gpu_sh(dir, "--dry-run --quick");
    REQUIRE(o);
    CHECKF(strstr(o, "binaries unpacked from") && strstr(o, want1) && strstr(o, want2), "hash %s: wanted '%s' and '%s' in:\n%s",
           hash, want1, want2, o);
    free(o);
}

TEST(gpu_plan_carried_binary) {
    if (access("bench/gpu.sh", X_OK) || access("scripts/sources-hash.sh", R_OK))
        SKIP("no bench/gpu.sh or scripts/sources-hash.sh (run from the repository root)");
    if (system("python3 -c '' >/dev/null 2>&1") || system("xz --version >/dev/null 2>&1")) SKIP("python3 or xz missing");
    char hash[64];
    REQUIRE(t_sources_hash(hash) == 0);
    carried(hash, "binary: prebuilt", "  CUDA op checks");
    carried("0000000000000000", "DIFFERS: the binary's sources hash to 0000000000000000", "binary: build (stale prebuilt)");
}

TEST(gpu_plan_sanitize) {
    static const char *const jobs[] = {"preflight", "binary:", "memcheck: the kernels", "racecheck", "synccheck",
                                       "memcheck: the engines", "initcheck", NULL};
    dry_run("--dry-run --sanitize", 300, jobs);
}

/* bench/gpu_targets.py's verdicts: `python3 bench/gpu_targets.py FILE --json`, the line of target
 * `name` (NULL when there is none); the caller frees it */
static char *target_line(const char *jsonl, const char *name) {
    char cmd[1400], out[600];
    snprintf(out, sizeof out, "%s/targets.out", t_tmpdir());
    snprintf(cmd, sizeof cmd, "python3 bench/gpu_targets.py '%s' --json >'%s' 2>&1", jsonl, out);
    if (system(cmd) != 0) return NULL;
    char *o = t_slurp(out), *line = NULL;
    char key[160];
    snprintf(key, sizeof key, "\"target\": \"%s\"", name);
    const char *p = o ? strstr(o, key) : NULL;
    if (p) {
        const char *b = p, *e = strchr(p, '\n');
        while (b > o && b[-1] != '\n') b--;
        line = strndup(b, e ? (size_t)(e - b) : strlen(b));
    }
    free(o);
    return line;
}

static void want_verdict(const char *jsonl, const char *name, const char *verdict, const char *why) {
    char *l = target_line(jsonl, name);
    char v[64];
    snprintf(v, sizeof v, "\"verdict\": \"%s\"", verdict);
    CHECKF(l && strstr(l, v) && (!why || strstr(l, why)), "%s: %s: want %s (%s), got %s", jsonl, name, verdict,
           why ? why : "", l ? l : "(no line)");
    free(l);
}

/* A GPU run's rows of the 7B as gpu.sh writes them (model, mode, test, depth, tok/s, HBM bound %,
 * wait %), with the run's T0 share in its first meta line. */
static void write_run(const char *path, double ratio, double bf16_8k_pct, double staged_8k_wait, double split_32k) {
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "{\"kind\": \"meta\", \"script\": \"bench/gpu.sh\", \"hbm_ratio\": %g}\n", ratio);
#define ROW(ty, mode, test, d, tok, pct, wait)                                                              \
    fprintf(f,                                                                                             \
            "{\"kind\": \"result\", \"model\": \"r1-distill-qwen-7b %s\", \"mode\": \"%s\", \"rc\": 0, "           \
            "\"test\": \"%s\", \"depth\": %d, \"tok_s\": %g, \"hbm_bound_pct\": %g, \"wait_pct\": %g}\n",           \
            ty, mode, test, d, tok, pct, wait)
    ROW("BF16", "full", "tg32", 2048, 230.0, 76.0, 0.0);
    ROW("BF16", "full", "tg32", 8192, 228.0, bf16_8k_pct, 0.0);
    ROW("Q8_0", "full", "tg32", 2048, 380.0, 66.0, 0.0);
    ROW("Q8_0", "full", "tg32", 8192, 370.0, 64.0, 0.0);
    ROW("BF16", "prefill", "pp2048", 0, 4600.0, 0.0, 0.0);  /* 10.4x 442.2 */
    ROW("Q8_0", "prefill", "pp2048", 0, 4000.0, 0.0, 0.0);  /* 9.6x 417.9 */
    ROW("Q8_0", "staged", "tg32", 8192, 350.0, 60.0, staged_8k_wait); /* 94.6% of 370 */
    ROW("Q8_0", "split", "tg32", 8192, 200.0, 35.0, 1.0);
    ROW("Q8_0", "staged", "tg32", 32768, 120.0, 20.0, 3.0);
    ROW("Q8_0", "split", "tg32", 32768, split_32k, 20.0, 1.0);
#undef ROW
    /* the token check's 2-layer file is not the 7B: its rows are left out (counted, 5% would fail Q8_0) */
    fprintf(f, "{\"kind\": \"result\", \"model\": \"r1-distill-qwen-7b/2L Q8_0\", \"mode\": \"full\", \"rc\": 0, "
               "\"test\": \"tg32\", \"depth\": 4096, \"tok_s\": 1700, \"hbm_bound_pct\": 5.0, \"wait_pct\": 0}\n");
    fclose(f);
}

TEST(gpu_targets_verdicts) {
    if (access("bench/gpu_targets.py", R_OK)) SKIP("no bench/gpu_targets.py (run from the repository root)");
    if (system("python3 -c '' >/dev/null 2>&1")) SKIP("python3 missing");
    /* recorded device runs: the first kernels' BF16 decode at 51-52% of the bound, staged at 8192 a sixth of full */
    const char *rec = "results/bench/gpu-h200-7426164/gpu.jsonl";
    const char *var = "results/bench/gpu-h200-variants-7426164/gpu.jsonl";
    if (!access(rec, R_OK)) {
        want_verdict(rec, "decode BF16", "not met", "lowest 51.4%");
        want_verdict(rec, "decode Q8_0", "not measured", NULL);
        want_verdict(rec, "T0 50% at 8K", "not met", "16.9% of full's 152.3");
        want_verdict(rec, "split vs staged", "not measured", NULL);
    }
    char path[600];
    if (!access(var, R_OK)) {
        want_verdict(var, "prefill 2K BF16", "not met", "1.03x the baseline's 442.2");
        /* the same run as if on an H100: the verdict says the baseline's GPU was another */
        char cmd[1400];
        snprintf(path, sizeof path, "%s/h100.jsonl", t_tmpdir());
        snprintf(cmd, sizeof cmd, "sed 's/NVIDIA H200/NVIDIA H100 80GB HBM3/' '%s' >'%s'", var, path);
        REQUIRE(system(cmd) == 0);
        want_verdict(path, "prefill 2K BF16", "not met", "the baseline ran on NVIDIA H200, this run on NVIDIA H100 80GB HBM3");
    }
    snprintf(path, sizeof path, "%s/run.jsonl", t_tmpdir());
    write_run(path, 0.5, 71.0, 2.0, 150.0);
    want_verdict(path, "decode BF16", "met", "lowest 71.0%");
    want_verdict(path, "decode Q8_0", "met", "lowest 64.0%");
    want_verdict(path, "prefill 2K BF16", "met", "10.40x");
    want_verdict(path, "prefill 2K Q8_0", "not met", "9.57x");
    want_verdict(path, "T0 50% at 8K", "met", "94.6% of full's 370.0");
    want_verdict(path, "split vs staged", "met", "split 150.0, staged 120.0");
    /* each threshold on its other side */
    write_run(path, 0.5, 69.9, 5.0, 119.0);
    want_verdict(path, "decode BF16", "not met", "lowest 69.9%");
    want_verdict(path, "T0 50% at 8K", "not met", NULL); /* a copy wait of 5% */
    want_verdict(path, "split vs staged", "not met", "split 119.0");
    write_run(path, 0.3, 71.0, 2.0, 150.0);
    want_verdict(path, "T0 50% at 8K", "not measured", "T0 share is 0.3");
    want_verdict(path, "split vs staged", "not measured", "T0 share is 0.3");
}
