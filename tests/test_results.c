/* test_results.c — scripts/results.sh on a made-up results directory (tests/results_test.py): the
 * cliff table (published against prompt-protected baselines), the T2 table, runs in progress kept
 * out of the tables, build provenance, line checks and the percentage-rule count. Needs python3
 * (skips without it); with the binary built it also checks what `tierkv verify` and `grade` add. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

TEST(results_doc) {
    if (system("python3 -c 'import json' >/dev/null 2>&1")) SKIP("python3 missing");
    char cmd[2048];
    int have_bin = access(t_bin(), X_OK) == 0;
    snprintf(cmd, sizeof cmd, "python3 tests/results_test.py --tmp %s %s%s", t_tmpdir(), have_bin ? "--bin " : "",
             have_bin ? t_bin() : "");
    int st = system(cmd);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "results_test.py exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
