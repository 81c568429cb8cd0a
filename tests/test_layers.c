/* test_layers.c — the dependency rules of ARCHITECTURE.md, checked on the sources (the suite runs
 * from the repository root; skipped elsewhere): the public header includes system headers only; the
 * forward includes no CPU-backend header; tools/, src/eval/, src/sched/ and src/serve/ reach the
 * engine through the public API alone (no header of src/kv/, src/model/, src/backend/ or src/engine/). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

/* The first project include of path that starts with one of the banned prefixes (NULL: none). */
static const char *bad_include(const char *path, const char *const *banned, int n_banned, int system_only, char *line,
                               size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    const char *hit = NULL;
    while (!hit && fgets(line, (int)cap, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "#include", 8)) continue;
        p += 8;
        while (*p == ' ') p++;
        if (system_only && *p == '"') hit = line;
        for (int i = 0; i < n_banned && !hit && *p == '"'; i++)
            if (!strncmp(p + 1, banned[i], strlen(banned[i]))) hit = line;
    }
    fclose(f);
    return hit;
}

static int check_dir(const char *dir, const char *const *banned, int n, int verbose) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int bad = 0;
    char path[1024], line[512];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 3 || (strcmp(e->d_name + l - 2, ".c") && strcmp(e->d_name + l - 2, ".h"))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (bad_include(path, banned, n, 0, line, sizeof line)) {
            if (verbose) fprintf(stderr, "    %s: %s", path, line);
            bad++;
        }
    }
    closedir(d);
    return bad;
}

TEST(layers_include_rules) {
    FILE *probe = fopen("include/tierkv.h", "r");
    if (!probe) SKIP("not run from the repository root");
    fclose(probe);
    char line[512];
    CHECKF(!bad_include("include/tierkv.h", NULL, 0, 1, line, sizeof line), "include/tierkv.h includes %s", line);
    static const char *const cpu[] = {"backend/cpu/"};
    CHECKF(!bad_include("src/model/forward.c", cpu, 1, 0, line, sizeof line), "forward.c includes %s", line);
    CHECKF(!bad_include("src/model/forward.h", cpu, 1, 0, line, sizeof line), "forward.h includes %s", line);
    static const char *const inner[] = {"kv/", "model/", "backend/", "engine/"};
    CHECK(check_dir("tools", inner, 4, 1) == 0);
    CHECK(check_dir("src/eval", inner, 4, 1) == 0);
    CHECK(check_dir("src/sched", inner, 4, 1) == 0);
    CHECK(check_dir("src/serve", inner, 4, 1) == 0);
    /* and a rule broken on purpose is seen */
    static const char *const base[] = {"base/"};
    CHECK(check_dir("src/eval", base, 1, 0) > 0);
}
