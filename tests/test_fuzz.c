/* test_fuzz.c — the fuzz corpora as regression tests: every input in fuzz/corpus/TARGET (the seeds
 * and each input that once crashed a target, kept there after its fix) runs through the target
 * built without libFuzzer ($TIERKV_FUZZ_REPLAY/TARGET, made by `make test` with this build's
 * compiler and sanitizers: under make asan the corpora run under ASan too). Targets that read a
 * vocabulary from the shared folder need it. Run from the repository root. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

static const char *replay_dir(void) {
    const char *d = getenv("TIERKV_FUZZ_REPLAY");
    return d ? d : "build/fuzz-replay";
}

static void replay(const char *target, const char *need) {
    if (need) NEED(need);
    char dir[300], bin[600], cmd[1400], out[512] = "";
    snprintf(dir, sizeof dir, "fuzz/corpus/%s", target);
    snprintf(bin, sizeof bin, "%s/%s", replay_dir(), target);
    DIR *d = opendir(dir);
    if (!d) SKIP("no fuzz/corpus (run from the repository root)");
    long files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) files += e->d_name[0] != '.';
    closedir(d);
    REQUIRE(access(bin, X_OK) == 0);
    snprintf(cmd, sizeof cmd, "timeout 300 %s %s 2>&1", bin, dir);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    char want[64];
    snprintf(want, sizeof want, "replayed %ld inputs", files);
    printf("    %s: %ld inputs\n", target, files);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, want), "%s: status %d: %s", target, st, out);
}

TEST(fuzz_corpus_gguf) { replay("fuzz_gguf", NULL); }
TEST(fuzz_corpus_model) { replay("fuzz_model", NULL); }
TEST(fuzz_corpus_json) { replay("fuzz_json", NULL); }
TEST(fuzz_corpus_grade) { replay("fuzz_grade", NULL); }
TEST(fuzz_corpus_tokenizer) { replay("fuzz_tokenizer", "fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf"); }
TEST(fuzz_corpus_kv_rec) { replay("fuzz_kv_rec", NULL); }
TEST(fuzz_corpus_chat) { replay("fuzz_chat", "fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"); }
TEST(fuzz_corpus_serve_request) {
#ifdef TKV_NO_SERVE
    SKIP("built with SERVE=0: no server, no fuzz_serve_request");
#else
    replay("fuzz_serve_request", NULL);
#endif
}

/* Every target has a corpus, and every corpus a test above. */
TEST(fuzz_targets_all_replayed) {
    static const char *known[] = {"fuzz_gguf", "fuzz_model", "fuzz_json", "fuzz_grade", "fuzz_tokenizer", "fuzz_chat",
                                  "fuzz_serve_request", "fuzz_kv_rec"};
    DIR *d = opendir("fuzz");
    if (!d) SKIP("no fuzz/ (run from the repository root)");
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".c") || !strcmp(e->d_name, "replay_main.c")) continue;
        int found = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            found |= strlen(known[k]) == n - 2 && !strncmp(known[k], e->d_name, n - 2);
        CHECKF(found, "fuzz/%s has no replay test", e->d_name);
        char dir[300];
        snprintf(dir, sizeof dir, "fuzz/corpus/%.*s", (int)(n - 2), e->d_name);
        CHECKF(access(dir, R_OK) == 0, "%s is missing", dir);
    }
    closedir(d);
}
