/* t.h — the test harness. TEST(name) { ... } registers a test; CHECK(cond) records a failure with
 * file:line and continues; REQUIRE(cond) fails and returns from the test. SKIP("why") ends a test
 * as skipped. The runner (tests/main.c) prints one line per test and "N passed, N failed, N skipped". */
#ifndef TKV_T_H
#define TKV_T_H
#include <stdio.h>

typedef void (*t_fn)(void);
void t_register(const char *name, t_fn fn);
void t_fail(const char *file, int line, const char *expr);
void t_skip(const char *why);
int t_is_skipped(void);
/* Path helpers: t_shared("fixtures/models/x.gguf") -> "$TIERKV_SHARED/fixtures/models/x.gguf" (static buffer ring). */
const char *t_shared(const char *rel);
/* The one way a test asks for a file of the shared folder (a fresh clone has none): its path
 * (t_shared) when it is readable, else NULL, and the test is marked skipped with one line naming the
 * missing file. NEED(rel) returns from the test in that case; t_need suits helpers that return a
 * value (their caller checks t_is_skipped). */
const char *t_need(const char *rel);
#define NEED(rel) do { if (!t_need(rel)) return; } while (0)
/* The same for a real model in the model cache ($TIERKV_HOME/models, else ~/.cache/tierkv/models). */
const char *t_need_model(const char *file);
/* An environment variable's value kept (malloc'd, NULL when unset) before a test changes it, and put
 * back (or unset again) by t_env_restore, which frees it. */
char *t_env_save(const char *var);
void t_env_restore(const char *var, char *saved);
/* What scripts/sources-hash.sh prints for the tree (run from the repository root) into out[64]; 0, or
 * -1 where the script is not there or printed no 16-digit hash. */
int t_sources_hash(char *out);
/* The tierkv binary under test ($TIERKV_BIN, default build/tierkv). */
const char *t_bin(void);
/* A fresh temporary directory for this test run. */
const char *t_tmpdir(void);
/* Starts argv[0] (no shell) with stdin from /dev/null, stdout to out_path (NULL: /dev/null) and
 * stderr to err_path, killed by SIGALRM after limit_s seconds (an alarm set before exec): a command
 * that hangs ends as a signal. Returns the pid (-1 if fork failed). */
int t_start(char *const argv[], const char *out_path, const char *err_path, int limit_s);
/* t_start and wait: returns the wait status; *err_text (malloc'd, may be NULL) holds its stderr. */
int t_spawn(char *const argv[], const char *out_path, int limit_s, char **err_text);
/* A whole file as a malloc'd NUL-terminated string, NULL if unreadable; t_slurp_n also gives its
 * length (len may be NULL), for files that may hold NUL bytes. */
char *t_slurp(const char *path);
char *t_slurp_n(const char *path, size_t *len);

#define TEST(name)                                                                 \
    static void test_##name(void);                                                 \
    __attribute__((constructor)) static void reg_##name(void) { t_register(#name, test_##name); } \
    static void test_##name(void)

#define CHECK(c) ((c) ? (void)0 : t_fail(__FILE__, __LINE__, #c))
#define REQUIRE(c) do { if (!(c)) { t_fail(__FILE__, __LINE__, #c); return; } } while (0)
#define SKIP(why) do { t_skip(why); return; } while (0)
#define CHECKF(c, ...) do { if (!(c)) { t_fail(__FILE__, __LINE__, #c); fprintf(stderr, "    "); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

#endif
