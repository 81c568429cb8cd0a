/* test_layers.c — the dependency rules of ARCHITECTURE.md, checked on the sources (the suite runs
 * from the repository root; skipped elsewhere): the public header includes system headers only; the
 * forward includes no CPU-backend header; tools/, src/eval/, src/sched/ and src/serve/ reach the
 * engine through the public API alone (no header of src/kv/, src/model/, src/backend/ or src/engine/);
 * bench/ programs include no header of src/kv/, src/model/ or a backend implementation. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

/* 1 when the quoted include at p ("name"...) names one of allowed[0..n) exactly */
static int allowed_include(const char *p, const char *const *allowed, int n) {
    for (int i = 0; i < n; i++) {
        size_t l = strlen(allowed[i]);
        if (!strncmp(p + 1, allowed[i], l) && p[1 + l] == '"') return 1;
    }
    return 0;
}

/* The first project include of path that starts with one of the banned prefixes and is not one of
 * the allowed headers (NULL: none). */
static const char *bad_include(const char *path, const char *const *banned, int n_banned, const char *const *allowed,
                               int n_allowed, int system_only, char *line, size_t cap) {
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
        if (*p == '"' && allowed_include(p, allowed, n_allowed)) continue;
        for (int i = 0; i < n_banned && !hit && *p == '"'; i++)
            if (!strncmp(p + 1, banned[i], strlen(banned[i]))) hit = line;
    }
    fclose(f);
    return hit;
}

/* Calls fn on every .c and .h file of dir (not below); returns how many it flagged, -1 without dir. */
static int each_source(const char *dir, int (*fn)(const char *path, void *ctx), void *ctx) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int flagged = 0;
    char path[1024];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 3 || (strcmp(e->d_name + l - 2, ".c") && strcmp(e->d_name + l - 2, ".h"))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        flagged += fn(path, ctx) != 0;
    }
    closedir(d);
    return flagged;
}

struct banned_set {
    const char *const *banned, *const *allowed;
    int n, n_allowed, verbose;
};

static int flag_banned(const char *path, void *ctx) {
    const struct banned_set *b = ctx;
    char line[512];
    if (!bad_include(path, b->banned, b->n, b->allowed, b->n_allowed, 0, line, sizeof line)) return 0;
    if (b->verbose) fprintf(stderr, "    %s: %s", path, line);
    return 1;
}

static int check_dir_but(const char *dir, const char *const *banned, int n, const char *const *allowed, int n_allowed,
                         int verbose) {
    struct banned_set b = {banned, allowed, n, n_allowed, verbose};
    return each_source(dir, flag_banned, &b);
}

static int check_dir(const char *dir, const char *const *banned, int n, int verbose) {
    struct banned_set b = {banned, NULL, n, 0, verbose};
    return each_source(dir, flag_banned, &b);
}

TEST(layers_include_rules) {
    FILE *probe = fopen("include/tierkv.h", "r");
    if (!probe) SKIP("not run from the repository root");
    fclose(probe);
    char line[512];
    CHECKF(!bad_include("include/tierkv.h", NULL, 0, NULL, 0, 1, line, sizeof line), "include/tierkv.h includes %s", line);
    static const char *const cpu[] = {"backend/cpu/"};
    CHECKF(!bad_include("src/model/forward.c", cpu, 1, NULL, 0, 0, line, sizeof line), "forward.c includes %s", line);
    CHECKF(!bad_include("src/model/forward.h", cpu, 1, NULL, 0, 0, line, sizeof line), "forward.h includes %s", line);
    static const char *const inner[] = {"kv/", "model/", "backend/", "engine/"};
    CHECK(check_dir("tools", inner, 4, 1) == 0);
    CHECK(check_dir("src/eval", inner, 4, 1) == 0);
    CHECK(check_dir("src/sched", inner, 4, 1) == 0);
    CHECK(check_dir("src/serve", inner, 4, 1) == 0);
    /* bench/ programs: the public API, backend.h, the codecs, and engine/engine.h to look inside a
     * session (the one internal header they may use); kernel timing goes through `tierkv bench-ops`.
     * One backend header besides: the CUDA backend's host planner (cuda_plan.h: pure functions of
     * plain data, no CUDA), which bench/move_plan.c times on the host. */
    static const char *const bench[] = {"kv/", "model/", "backend/cpu/", "backend/cuda/"};
    static const char *const bench_ok[] = {"backend/cuda/cuda_plan.h"};
    CHECK(check_dir_but("bench", bench, 4, bench_ok, 1, 1) == 0);
    static const char *const cuda_dir[] = {"backend/cuda/"};
    CHECK(check_dir_but("bench", cuda_dir, 1, NULL, 0, 0) > 0); /* the exception is what lets it pass */
    /* and a rule broken on purpose is seen */
    static const char *const base[] = {"base/"};
    CHECK(check_dir("src/eval", base, 1, 0) > 0);
}

/* 1 when the file names a policy other than full by its kind (KV_POLICY_X or TKV_POLICY_X) */
static int names_policy_kind(const char *path) {
    static const char *const kinds[] = {"HIERARCHY", "EVICT", "QUANT", "STREAMING", "H2O", "RKV", "SNAPKV"};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024], tok[64];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f))
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && !hit; k++) {
            snprintf(tok, sizeof tok, "KV_POLICY_%s", kinds[k]);
            for (const char *p = strstr(line, tok); p && !hit; p = strstr(p + 1, tok)) {
                char next = p[strlen(tok)];
                hit = !(next == '_' || (next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9'));
            }
        }
    fclose(f);
    return hit;
}

struct kind_scan {
    const char *const *allowed;
    size_t n_allowed;
    int bad, seen;
};

static int flag_kind(const char *path, void *ctx) {
    struct kind_scan *k = ctx;
    if (!names_policy_kind(path)) return 0;
    k->seen++;
    int ok = !strncmp(path, "src/kv/policy_", 14);
    for (size_t i = 0; i < k->n_allowed && !ok; i++) ok = !strcmp(path, k->allowed[i]);
    if (!ok) fprintf(stderr, "    %s names a policy kind\n", path), k->bad++;
    return !ok;
}

/* The engine asks a policy's table, never its kind: outside the policy's own file (policy_*.c, the
 * baselines' kv_baselines.c), the registry (kv_policy.c), the enum (kv.h) and its public mirror's
 * check (engine/text.c), no file under src/ names a policy kind other than full. */
TEST(layers_policy_identity) {
    FILE *probe = fopen("include/tierkv.h", "r");
    if (!probe) SKIP("not run from the repository root");
    fclose(probe);
    static const char *const dirs[] = {"src/base",  "src/gguf",  "src/backend", "src/backend/cpu", "src/backend/cuda",
                                       "src/codec", "src/model", "src/kv", "src/engine", "src/eval", "src/sched", "src/serve"};
    static const char *const allowed[] = {"src/kv/kv.h", "src/kv/kv_policy.c", "src/kv/kv_baselines.c",
                                          "src/engine/text.c"};
    struct kind_scan k = {allowed, sizeof allowed / sizeof allowed[0], 0, 0};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) (void)each_source(dirs[i], flag_kind, &k);
    int bad = k.bad, seen = k.seen;
    CHECK(bad == 0);
    CHECK(seen > 0); /* the scan sees the allowed files: it can fail */
}

/* ---- no include circle inside src/kv ----
 * A module is a file name without its extension (kv_plan.c and kv_plan.h are one); module A depends
 * on B when one of A's files includes "kv/B.h". Each file declares its functions in its own header,
 * so a circle of includes is a circle of calls. kv.h is the exception: the module's interface for the
 * rest of the engine, with the types every file uses and the functions several files define, it is
 * a module of its own ("kv.h", at the bottom: it includes no header of src/kv). */
enum { MAX_MOD = 64 };

struct kv_graph {
    char name[MAX_MOD][64];
    unsigned char dep[MAX_MOD][MAX_MOD];
    int n;
};

static int module_of(struct kv_graph *g, const char *name, size_t len) {
    if (len >= sizeof g->name[0]) len = sizeof g->name[0] - 1;
    for (int i = 0; i < g->n; i++)
        if (strlen(g->name[i]) == len && !strncmp(g->name[i], name, len)) return i;
    if (g->n == MAX_MOD) return -1;
    memcpy(g->name[g->n], name, len);
    g->name[g->n][len] = 0;
    return g->n++;
}

static int add_includes(const char *path, void *ctx) {
    struct kv_graph *g = ctx;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int from = module_of(g, base, strcmp(base, "kv.h") ? strcspn(base, ".") : 4);
    FILE *f = fopen(path, "r");
    if (!f || from < 0) {
        if (f) fclose(f);
        return 1;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "#include \"kv/", 13)) continue;
        p += 13;
        int to = module_of(g, p, strncmp(p, "kv.h\"", 5) ? strcspn(p, ".") : 4);
        if (to >= 0 && to != from) g->dep[from][to] = 1;
    }
    fclose(f);
    return 0;
}

/* 1 when a circle passes through module u (colour: 0 unseen, 1 on the path, 2 done); the circle's
 * modules are printed when verbose. */
static int circle_from(const struct kv_graph *g, int u, unsigned char *colour, int verbose) {
    colour[u] = 1;
    for (int v = 0; v < g->n; v++) {
        if (!g->dep[u][v] || colour[v] == 2) continue;
        if (colour[v] == 1 || circle_from(g, v, colour, verbose)) {
            if (verbose) fprintf(stderr, "    include circle through %s -> %s\n", g->name[u], g->name[v]);
            return 1;
        }
    }
    colour[u] = 2;
    return 0;
}

static int has_circle(const struct kv_graph *g, int verbose) {
    unsigned char colour[MAX_MOD] = {0};
    for (int u = 0; u < g->n; u++)
        if (!colour[u] && circle_from(g, u, colour, verbose)) return 1;
    return 0;
}

TEST(layers_kv_no_circles) {
    static struct kv_graph g;
    memset(&g, 0, sizeof g);
    if (each_source("src/kv", add_includes, &g) < 0) SKIP("not run from the repository root");
    CHECK(g.n > 10);
    CHECK(!has_circle(&g, 1));
    /* the layers ARCHITECTURE.md names: the state and the mechanism include nothing above them */
    int pool = module_of(&g, "kv_pool", 7), plan = module_of(&g, "kv_plan", 7), view = module_of(&g, "kv_view", 7);
    CHECK(pool >= 0 && plan >= 0 && view >= 0 && g.dep[plan][view] && !g.dep[view][plan] && !g.dep[pool][plan]);
    int api = module_of(&g, "kv.h", 4);
    for (int v = 0; v < g.n; v++) CHECKF(!g.dep[api][v], "kv.h includes kv/%s.h", g.name[v]);
    /* and a circle added on purpose is seen */
    g.dep[pool][plan] = 1;
    CHECK(has_circle(&g, 0));
}

/* The seam depends on no implementation: backend.c (the record formats) and split.c (generic over
 * two backends) include no header of backend/cpu/ or backend/cuda/; open.c is the one file that may. */
TEST(layers_backend_seam) {
    FILE *probe = fopen("src/backend/backend.c", "r");
    if (!probe) SKIP("not run from the repository root");
    fclose(probe);
    char line[512];
    static const char *const impl[] = {"backend/cpu/", "backend/cuda/"};
    CHECKF(!bad_include("src/backend/backend.c", impl, 2, NULL, 0, 0, line, sizeof line), "backend.c includes %s", line);
    CHECKF(!bad_include("src/backend/split.c", impl, 2, NULL, 0, 0, line, sizeof line), "split.c includes %s", line);
    CHECK(bad_include("src/backend/open.c", impl, 2, NULL, 0, 0, line, sizeof line) != NULL); /* the rule can fail */
    /* the T2 codecs sit above the backends: they include none of them */
    static const char *const be[] = {"backend/"};
    CHECK(check_dir("src/codec", be, 1, 1) == 0);
}
