/* main.c — the one test runner: runs every registered test (or those whose name contains one of
 * the arguments) and ends with "N passed, N failed, N skipped". Exit status 1 if any failed. */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "t.h"

#define MAX_TESTS 1024
static struct { const char *name; t_fn fn; } tests[MAX_TESTS];
static int n_tests, cur_failures, cur_skipped;
static char skip_why[1200];

void t_register(const char *name, t_fn fn) {
    if (n_tests < MAX_TESTS) { tests[n_tests].name = name; tests[n_tests].fn = fn; n_tests++; }
}
void t_fail(const char *file, int line, const char *expr) {
    cur_failures++;
    if (cur_failures <= 20) fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, expr);
}
void t_skip(const char *why) { cur_skipped = 1; snprintf(skip_why, sizeof skip_why, "%s", why); }
int t_is_skipped(void) { return cur_skipped; }

const char *t_shared(const char *rel) {
    static char ring[8][1024];
    static int k;
    const char *root = getenv("TIERKV_SHARED");
    if (!root) root = "../shared";
    char *b = ring[k++ & 7];
    snprintf(b, 1024, "%s/%s", root, rel);
    return b;
}
static const char *need_path(const char *path, const char *what) {
    if (access(path, R_OK) == 0) return path;
    if (!cur_skipped) {
        char why[1200];
        snprintf(why, sizeof why, "needs %s (%s)", path, what);
        t_skip(why);
    }
    return NULL;
}
const char *t_need(const char *rel) { return need_path(t_shared(rel), "the shared fixtures: make test SHARED=DIR"); }
const char *t_need_model(const char *file) {
    static char path[1024];
    const char *home = getenv("TIERKV_HOME"), *h = getenv("HOME");
    if (home) snprintf(path, sizeof path, "%s/models/%s", home, file);
    else snprintf(path, sizeof path, "%s/.cache/tierkv/models/%s", h ? h : ".", file);
    return need_path(path, "a real model: scripts/fetch-model.sh");
}
char *t_env_save(const char *var) {
    const char *v = getenv(var);
    return v ? strdup(v) : NULL;
}
void t_env_restore(const char *var, char *saved) {
    if (saved) setenv(var, saved, 1);
    else unsetenv(var);
    free(saved);
}
int t_sources_hash(char *out) {
    out[0] = 0;
    FILE *p = access("scripts/sources-hash.sh", R_OK) ? NULL : popen("sh scripts/sources-hash.sh", "r");
    if (!p) return -1;
    int ok = fscanf(p, "%63s", out) == 1;
    pclose(p);
    return ok && strlen(out) == 16 ? 0 : -1;
}
const char *t_bin(void) { const char *b = getenv("TIERKV_BIN"); return b ? b : "build/tierkv"; }
static char tmp_dir[256]; /* created on first use; removed when every test passed */
const char *t_tmpdir(void) {
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/tierkv-test-XXXXXX");
        if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); exit(2); }
    }
    return tmp_dir;
}

int t_start(char *const argv[], const char *out_path, const char *err_path, int limit_s) {
    pid_t pid = fork();
    if (pid != 0) return (int)pid;
    int in = open("/dev/null", O_RDONLY), out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);
    int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (in < 0 || out < 0 || err < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    alarm((unsigned)limit_s); /* survives exec */
    execv(argv[0], argv);
    _exit(127);
}

char *t_slurp(const char *path) { return t_slurp_n(path, NULL); }

char *t_slurp_n(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (size_t k; (k = fread(b + n, 1, cap - 1 - n, f)) > 0;) {
        n += k;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    b[n] = 0;
    fclose(f);
    if (len) *len = n;
    return b;
}

int t_spawn(char *const argv[], const char *out_path, int limit_s, char **err_text) {
    static int k;
    char log[600];
    snprintf(log, sizeof log, "%s/spawn-%d.err", t_tmpdir(), k++);
    int st = -1, pid = t_start(argv, out_path, log, limit_s);
    if (pid > 0 && waitpid(pid, &st, 0) != pid) st = -1;
    if (err_text) *err_text = t_slurp(log);
    remove(log);
    return st;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int passed = 0, failed = 0, skipped = 0;
    /* run in name order so output is stable whatever the link order */
    const char *names[MAX_TESTS];
    for (int i = 0; i < n_tests; i++) names[i] = tests[i].name;
    qsort(names, (size_t)n_tests, sizeof names[0], cmp_name);
    for (int k = 0; k < n_tests; k++) {
        int i = 0;
        while (strcmp(tests[i].name, names[k]) != 0) i++;
        /* an argument selects the tests whose names contain it; "=NAME" the test NAME alone */
        int want = argc <= 1;
        for (int a = 1; a < argc; a++)
            if (argv[a][0] == '=' ? !strcmp(tests[i].name, argv[a] + 1) : strstr(tests[i].name, argv[a]) != NULL)
                want = 1;
        if (!want) continue;
        cur_failures = 0; cur_skipped = 0; skip_why[0] = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (cur_failures) { failed++; printf("FAIL %s (%d checks failed, %.0f ms)\n", tests[i].name, cur_failures, ms); }
        else if (cur_skipped) { skipped++; printf("skip %s: %s\n", tests[i].name, skip_why); }
        else { passed++; printf("ok   %s (%.0f ms)\n", tests[i].name, ms); }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (tmp_dir[0]) {
        if (failed) printf("test files kept in %s\n", tmp_dir);
        else nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    return failed ? 1 : 0;
}
