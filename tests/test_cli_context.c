/* test_cli_context.c — `tierkv run` and the model's trained context, through the built binary
 * (t_bin, no shell). Without -c the context is the model's context_length (4096 in the fixture):
 * generation stops there with "stop: context" and exit 0 however large -n is (before, -n 3000000
 * asked for three million positions and ran until killed), and a prompt longer than it is refused.
 * An explicit -c above context_length is allowed, with a warning naming both numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "t.h"

#define MODEL "fixtures/models/qwen2-Q8_0.gguf"
#define LIMIT_S 60 /* the fixture generates its 4094 tokens in about 2 s */

/* Runs `tierkv run -m MODEL` with the given extra arguments; the exit status (-1: a signal), stderr in *err. */
static int run_model(const char *model, const char *const *extra, char **err) {
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)t_bin();
    argv[n++] = "run";
    argv[n++] = "-m";
    argv[n++] = (char *)model;
    for (; *extra && n < 31; extra++) argv[n++] = (char *)*extra;
    argv[n] = NULL;
    int st = t_spawn(argv, NULL, LIMIT_S, err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(cli_run_stops_at_model_context) {
    const char *m = t_need(MODEL);
    if (!m) return;
    const char *extra[] = {"-p", "hi", "-n", "3000000", "--ignore-eos", NULL};
    char *err = NULL;
    int rc = run_model(m, extra, &err);
    const char *e = err ? err : "";
    CHECKF(rc == 0, "exit %d (-1: killed after %d s); stderr: %.300s", rc, LIMIT_S, e);
    CHECKF(strstr(e, "stop: context") != NULL, "no 'stop: context' in: %.300s", e);
    /* "hi" is 2 tokens: 4094 more fill the 4096 positions */
    CHECKF(strstr(e, "generated 4094 tokens") != NULL, "not 4094 tokens: %.300s", e);
    free(err);
}

TEST(cli_run_prompt_longer_than_model_context) {
    const char *m = t_need(MODEL);
    if (!m) return;
    char ids[600];
    snprintf(ids, sizeof ids, "%s/ids-4097.txt", t_tmpdir());
    FILE *f = fopen(ids, "w");
    REQUIRE(f);
    for (int i = 0; i < 4097; i++) fprintf(f, "%d ", 1 + i % 100);
    REQUIRE(fclose(f) == 0);
    const char *extra[] = {"--tokens", ids, "-n", "1", NULL};
    char *err = NULL;
    int rc = run_model(m, extra, &err);
    const char *e = err ? err : "";
    CHECKF(rc == 1, "exit %d; stderr: %.300s", rc, e);
    CHECKF(strstr(e, "4097 tokens") && strstr(e, "context_length 4096"), "stderr: %.300s", e);
    free(err);
}

TEST(cli_run_ctx_above_model_context_warns) {
    const char *m = t_need(MODEL);
    if (!m) return;
    const char *extra[] = {"-p", "hi", "-n", "2", "-c", "8192", NULL};
    char *err = NULL;
    int rc = run_model(m, extra, &err);
    const char *e = err ? err : "";
    CHECKF(rc == 0, "exit %d; stderr: %.300s", rc, e);
    CHECKF(strstr(e, "warning: --ctx 8192 is more than the model's context_length 4096"), "stderr: %.300s", e);
    free(err);
    const char *within[] = {"-p", "hi", "-n", "2", "-c", "4096", NULL};
    rc = run_model(m, within, &err);
    e = err ? err : "";
    CHECKF(rc == 0 && !strstr(e, "warning"), "exit %d; stderr: %.300s", rc, e);
    free(err);
}
