/* test_malformed.c — every malformed variant `tierkv mutate-gguf` makes of every fixture model
 * (every .gguf in $TIERKV_SHARED/fixtures/models) through the built binary (t_bin): `tierkv inspect F` and
 * `tierkv run -m F -p hi -n 2`, the whole load path. What each must do is in the generator's
 * manifest: "error" — both exit with status 1 (not 0, not a signal) and print a message that
 * contains the manifest's text (the tensor, key or problem); "no-model" — a file without tensors,
 * which inspect shows (0) and run refuses (1); "valid" — both exit 0. A command that runs past
 * TIME_LIMIT seconds is killed (an alarm set before exec) and fails the test: a hang is a failure.
 * Under `make asan` the binary reports leaks with another status, which fails the test too.
 * The variants that must fail are made --sparse (their tensor data a hole: what breaks them is in
 * their header and length), so a few thousand files cost megabytes. Two commands run at a time;
 * the variants of one fixture are deleted before the next is made, and those of a failed check are
 * kept in the test directory. */
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "t.h"
#include "t_ref.h"

#define TIME_LIMIT 30
#define MAX_JOBS 2

typedef struct {
    char file[200], expect[16], says[200];
    int failed;
} entry;

typedef struct {
    pid_t pid;
    int entry, cmd; /* cmd 0: inspect, 1: run */
    char log[1500];
} job;

/* Does text contain one of the '|'-separated alternatives of says ("" matches anything)? */
static int says_one_of(const char *text, const char *says) {
    if (!*says) return 1;
    char alt[200];
    for (const char *p = says; *p;) {
        size_t n = strcspn(p, "|");
        snprintf(alt, sizeof alt, "%.*s", (int)n, p);
        if (strstr(text, alt)) return 1;
        p += n + (p[n] == '|');
    }
    return 0;
}

static void judge(const char *fixture, entry *en, int cmd, int st, const char *log) {
    static const char *names[2] = {"inspect", "run"};
    char *text = t_slurp(log);
    const char *t = text ? text : "";
    int want = !strcmp(en->expect, "valid") ? 0 : !strcmp(en->expect, "no-model") ? cmd : 1;
    const char *why = NULL;
    char buf[64];
    if (WIFSIGNALED(st)) {
        snprintf(buf, sizeof buf, WTERMSIG(st) == SIGALRM ? "still running after %d s" : "killed by signal %d",
                 WTERMSIG(st) == SIGALRM ? TIME_LIMIT : WTERMSIG(st));
        why = buf;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != want) {
        snprintf(buf, sizeof buf, "exit status %d, want %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1, want);
        why = buf;
    } else if (strstr(t, "assertion failed") || strstr(t, "Sanitizer") || strstr(t, "runtime error")) {
        why = "a sanitizer or assertion report";
    } else if (want == 1 && !*t) {
        why = "no message";
    } else if (want == 1 && !says_one_of(t, en->says)) {
        why = "the message does not name the problem";
    }
    if (why) {
        en->failed = 1;
        CHECKF(0, "%s: %s: %s: %s (want '%s'): %.300s", fixture, en->file, names[cmd], why, en->says, t);
    }
    free(text);
}

static int read_manifest(const char *dir, entry **out) {
    char p[1200];
    snprintf(p, sizeof p, "%s/MANIFEST.tsv", dir);
    char *m = t_slurp(p);
    if (!m) return -1;
    int n = 0, cap = 256;
    entry *e = calloc((size_t)cap, sizeof *e);
    char *save = NULL;
    for (char *line = strtok_r(m, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "file\t", 5)) continue;
        char *f[4] = {line, NULL, NULL, NULL};
        for (int k = 1; k < 4 && f[k - 1]; k++) {
            char *tab = strchr(f[k - 1], '\t');
            if (tab) *tab = 0, f[k] = tab + 1;
        }
        if (!f[3]) continue;
        if (n == cap) e = realloc(e, (size_t)(cap *= 2) * sizeof *e);
        memset(&e[n], 0, sizeof e[n]);
        snprintf(e[n].file, sizeof e[n].file, "%s", f[0]);
        snprintf(e[n].expect, sizeof e[n].expect, "%s", f[1]);
        snprintf(e[n].says, sizeof e[n].says, "%s", f[2]);
        n++;
    }
    free(m);
    *out = e;
    return n;
}

/* Runs both commands on every variant of dir, MAX_JOBS at a time. */
static void run_all(const char *fixture, const char *dir, entry *en, int n, long *n_cmds) {
    job jobs[MAX_JOBS];
    int active = 0, next = 0;
    char bin[1024];
    snprintf(bin, sizeof bin, "%s", t_bin());
    while (next < 2 * n || active) {
        while (active < MAX_JOBS && next < 2 * n) {
            job *j = &jobs[active];
            j->entry = next / 2;
            j->cmd = next % 2;
            next++;
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", dir, en[j->entry].file);
            snprintf(j->log, sizeof j->log, "%s/%s.%s.log", dir, en[j->entry].file, j->cmd ? "run" : "inspect");
            char *a0[] = {bin, "inspect", path, NULL};
            char *a1[] = {bin, "run", "-m", path, "-p", "hi", "-n", "2", "-t", "1", NULL};
            j->pid = t_start(j->cmd ? a1 : a0, NULL, j->log, TIME_LIMIT);
            if (j->pid < 0) { CHECKF(0, "fork failed"); return; }
            active++;
        }
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) { CHECKF(0, "wait failed"); return; }
        for (int k = 0; k < active; k++) {
            if (jobs[k].pid != pid) continue;
            judge(fixture, &en[jobs[k].entry], jobs[k].cmd, st, jobs[k].log);
            (*n_cmds)++;
            jobs[k] = jobs[--active];
            break;
        }
    }
}

typedef struct { long files, cmds, valid, fixtures; } mut_counts;

/* Every variant mutate-gguf makes of one model file, judged under root/BASENAME/. */
static void mutate_one(const char *path, const char *root, mut_counts *k) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char dir[1100], log[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, base);
    snprintf(log, sizeof log, "%s.mutate.log", dir);
    char *argv[] = {(char *)t_bin(), "mutate-gguf", (char *)path, "-o", dir, "--sparse", NULL};
    pid_t pid = t_start(argv, NULL, log, 300);
    int st;
    REQUIRE(pid > 0 && waitpid(pid, &st, 0) == pid);
    char *ml = t_slurp(log);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mutate-gguf %s: status %d: %s", base, st, ml ? ml : "");
    free(ml);
    entry *en = NULL;
    int n = read_manifest(dir, &en);
    CHECKF(n > 100, "%s: %d variants", base, n);
    if (n <= 0) { free(en); return; }
    run_all(base, dir, en, n, &k->cmds);
    for (int i = 0; i < n; i++) {
        k->valid += !strcmp(en[i].expect, "valid");
        if (en[i].failed) continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", dir, en[i].file);
        remove(p);
        snprintf(p, sizeof p, "%s/%s.inspect.log", dir, en[i].file);
        remove(p);
        snprintf(p, sizeof p, "%s/%s.run.log", dir, en[i].file);
        remove(p);
    }
    k->files += n;
    k->fixtures++;
    free(en);
}

static const char *malformed_root(const char *name) {
    static char root[600];
    snprintf(root, sizeof root, "%s/%s", t_tmpdir(), name);
    return mkdir(root, 0777) == 0 ? root : NULL;
}

static void print_counts(const mut_counts *k, const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("    %ld fixtures, %ld variants (%ld valid), %ld commands in %.1f s\n", k->fixtures, k->files, k->valid, k->cmds,
           (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9);
}

TEST(malformed_gguf_all_fixtures) {
    NEED("fixtures/models/qwen2-Q8_0.gguf");
    glob_t g;
    REQUIRE(glob(t_shared("fixtures/models/*.gguf"), 0, NULL, &g) == 0 && g.gl_pathc > 0);
    const char *root = malformed_root("malformed");
    REQUIRE(root);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mut_counts k = {0};
    for (size_t i = 0; i < g.gl_pathc; i++) mutate_one(g.gl_pathv[i], root, &k);
    globfree(&g);
    print_counts(&k, &t0);
    CHECK(k.fixtures >= 16);
}

/* The same for the qwen3 and qwen3moe files (no q/k/v biases, q/k norms, 3-D expert tensors). */
TEST(malformed_gguf_qwen3) {
    const char *files[] = {t_gen_model("test-qwen3", "Q8_0"), t_gen_model("test-qwen3moe", "Q4_K_M")};
    REQUIRE(files[0] && files[1]);
    const char *root = malformed_root("malformed-qwen3");
    REQUIRE(root);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mut_counts k = {0};
    for (int i = 0; i < 2; i++) mutate_one(files[i], root, &k);
    print_counts(&k, &t0);
    CHECK(k.fixtures == 2);
}
