/* test_gpu_plan.c — bench/gpu.sh --dry-run, --dry-run --quick and --dry-run --sanitize: each exits 0,
 * lists its jobs with their estimated seconds, and its planned work sums under the run's limit (300 s
 * full and sanitize, 120 s quick; the GPU is lent 15 minutes with the machine's start, so a fix and a
 * rerun must fit), with this build's folder as the prebuilt binary. The dry run touches no GPU and
 * builds nothing. Run from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

static void dry_run(const char *args, int limit, const char *const *want_jobs) {
    if (access("bench/gpu.sh", X_OK)) SKIP("no bench/gpu.sh (run from the repository root)");
    if (system("python3 -c '' >/dev/null 2>&1")) SKIP("python3 missing");
    char cmd[1800], out[600], dir[512];
    /* the binary under test stands for the prebuilt one a GPU run carries (its folder has both) */
    snprintf(dir, sizeof dir, "%s", t_bin());
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(out, sizeof out, "%s/gpu-plan.txt", t_tmpdir());
    snprintf(cmd, sizeof cmd, "BIN_DIR=%s OUT=%s/gpu-out bench/gpu.sh %s >%s 2>&1", dir, t_tmpdir(), args, out);
    int st = system(cmd);
    char *o = t_slurp(out);
    REQUIRE(o);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gpu.sh %s: status %d: %s", args, st, o);
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
                                       "BF16 gen-random", "BF16 full d=2048", "Q8_0", "prefill 2048", NULL};
    dry_run("--dry-run", 300, jobs);
}

TEST(gpu_plan_quick) {
    static const char *const jobs[] = {"preflight", "binary:", "CUDA op checks", "token check", "full d=2048", NULL};
    dry_run("--dry-run --quick", 120, jobs);
}

TEST(gpu_plan_sanitize) {
    static const char *const jobs[] = {"preflight", "binary:", "memcheck: the kernels", "racecheck", "synccheck",
                                       "memcheck: the engines", "initcheck", NULL};
    dry_run("--dry-run --sanitize", 300, jobs);
}
