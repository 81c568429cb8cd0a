/* replay_main.c — runs a libFuzzer target's LLVMFuzzerTestOneInput over files and directories of
 * inputs without libFuzzer (any compiler, any sanitizer), so the committed corpora and every crash
 * found so far (fuzz/corpus/<target>/) are regression tests of `make test` (tests/test_fuzz.c).
 * Usage: REPLAY PATH...; exit 0 when every input ran (a failing check aborts, as under libFuzzer). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    if (!b) return -1;
    /* an exact-size copy, so ASan sees a read one past the end */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, b, n);
    free(b);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    long n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) { fprintf(stderr, "replay: %s: no such file\n", argv[i]); return 1; }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i])) return 1;
            n++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char **names = NULL;
        size_t k = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (k + 1) * sizeof *names);
            names[k] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
            sprintf(names[k++], "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, k, sizeof *names, cmp);
        for (size_t j = 0; j < k; j++) {
            if (replay_file(names[j])) return 1;
            free(names[j]);
            n++;
        }
        free(names);
    }
    printf("replayed %ld inputs\n", n);
    return 0;
}
