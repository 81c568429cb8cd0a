/* test_vs_llamacpp.c — bench/vs-llamacpp.sh on the fixture model against stand-in engines: a
 * llama.cpp and an ik_llama.cpp whose llama-bench and llama-batched-bench are small shell scripts
 * (written here into the test's folder) that answer --help as the real tools do, refuse a run without
 * their engine's flags (llama.cpp: -fa; ik_llama.cpp: -rtr, -fa, -o json, never jsonl) and print
 * fixed numbers in the real formats (llama.cpp's JSON lines and its batched table on stdout,
 * ik_llama.cpp's JSON array and its table on stderr). Checks the table's columns and names, every
 * engine cell against the stand-in's number for that test, every ratio against the cells it divides,
 * with and without TIERKV_OLD, the old one-engine call, LLAMA_DIRS with a label and "-" for no
 * engine, that the tg rows' floor falls with depth and tierkv/floor divides tierkv by it ("-" in the
 * other rows), and that no engine's llama.log is left where the script runs. Tiny settings (NPP=16
 * NGEN=4 DEPTHS="0 32" PARALLEL=2 REPS=1); run from the repository root; needs bash and the shared
 * fixtures (skips without them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#define MODEL "fixtures/models/qwen2-Q8_0.gguf"

/* the stand-in's body; the file starts with KIND=llama|ik TOOL=bench|batched */
static const char stand_in[] =
    "# A stand-in for one tool of a llama.cpp-family engine (KIND llama or ik, TOOL bench or batched): the\n"
    "# --help lines the script reads, its flags checked, fixed numbers in the real tool's output format.\n"
    "for a in \"$@\"; do [ \"$a\" = --help ] && help=1; done\n"
    "if [ -n \"${help:-}\" ]; then\n"
    "  case $KIND.$TOOL in\n"
    "    llama.bench) printf '%s\\n' 'usage: llama-bench [options]' '' 'options:' \\\n"
    "      '  -fa, --flash-attn <0|1>                   (default: 0)' \\\n"
    "      '  -o, --output <csv|json|jsonl|md|sql>      (default: md)' ;;\n"
    "    ik.bench) printf '%s\\n' 'usage: llama-bench [options]' '' 'options:' \\\n"
    "      '  -fa, --flash-attn <0|1>             (default: 1)' \\\n"
    "      '  -o, --output <csv|json|md|sql>      (default: md)' \\\n"
    "      '  -rtr, --run-time-repack <0|1>       (default: 0)' ;;\n"
    "    llama.batched) printf '%s\\n' '----- common params -----' '' \\\n"
    "      '-fa,   --flash-attn                     enable Flash Attention (default: disabled)' ;;\n"
    "    ik.batched) printf '%s\\n' 'usage: llama-batched-bench [options]' \\\n"
    "      '  -no-fa, --no-flash-attn         disable Flash Attention (default: enabled)' \\\n"
    "      '  -fa, --flash-attn (auto|on|off|0|1)' \\\n"
    "      '  -rtr,   --run-time-repack       repack tensors if interleaved variant is available' ;;\n"
    "  esac\n"
    "  exit 0\n"
    "fi\n"
    "if [ \"$1\" = --version ]; then printf 'version: 1 (stand-in)\\nbuilt with cc\\n' >&2; exit 0; fi\n"
    "p=512 n=128 o=md fa=0 rtr=0 npp=0 ntg=0 npl=0\n"
    "while [ $# -gt 0 ]; do\n"
    "  case $TOOL.$1 in\n"
    "    bench.-p) p=$2; shift ;;\n"
    "    bench.-n) n=$2; shift ;;\n"
    "    bench.-o) o=$2; shift ;;\n"
    "    bench.-fa) fa=$2; shift ;;\n"
    "    bench.-rtr) rtr=$2; shift ;;\n"
    "    batched.-npp) npp=$2; shift ;;\n"
    "    batched.-ntg) ntg=$2; shift ;;\n"
    "    batched.-npl) npl=$2; shift ;;\n"
    "    batched.-rtr) rtr=1 ;;\n"
    "    batched.-fa) if [ $KIND = ik ]; then fa=$2; shift; else fa=on; fi ;;\n"
    "  esac\n"
    "  shift\n"
    "done\n"
    "want() { echo \"stand-in $KIND $TOOL: $1\" >&2; exit 1; }\n"
    "if [ $TOOL = bench ]; then\n"
    "  if [ $KIND = ik ] && [ \"$o\" = jsonl ]; then\n"
    "    echo 'usage: llama-bench [options]'; echo 'error: invalid parameter for argument: -o' >&2; exit 1\n"
    "  fi\n"
    "  [ \"$fa\" = 1 ] || want \"-fa 1 expected\"\n"
    "  if [ $KIND = llama ]; then\n"
    "    [ \"$o\" = jsonl ] || want \"-o jsonl expected\"\n"
    "    ts=$((100 + n)); [ \"$p\" -gt 0 ] && ts=$((500 + p))\n"
    "    printf '{\"build_commit\": \"unknown\", \"build_number\": 0, \"backends\": \"CPU\", \"n_threads\": 2, '\n"
    "    printf '\"type_k\": \"f16\", \"flash_attn\": true, \"n_prompt\": %d, \"n_gen\": %d, \"avg_ns\": 376871, ' \"$p\" \"$n\"\n"
    "    printf '\"stddev_ns\": 0, \"avg_ts\": %d.000000, \"stddev_ts\": 0.000000, \"samples_ns\": [ 376871 ],' \"$ts\"\n"
    "    printf '\"samples_ts\": [ %d ]}\\n' \"$ts\"\n"
    "  else\n"
    "    [ \"$o\" = json ] || want \"-o json expected\"\n"
    "    [ \"$rtr\" = 1 ] || want \"-rtr 1 expected\"\n"
    "    ts=$((300 + n)); [ \"$p\" -gt 0 ] && ts=$((700 + p))\n"
    "    printf '[\\n  {\\n    \"build_commit\": \"unknown\",\\n    \"flash_attn\": true,\\n    \"repack\": true,\\n'\n"
    "    printf '    \"n_prompt\": %d,\\n    \"n_gen\": %d,\\n    \"avg_ns\": 343281,\\n    \"stddev_ns\": 0,\\n' \"$p\" \"$n\"\n"
    "    printf '    \"avg_ts\": %d.000000,\\n    \"stddev_ts\": 0.000000,\\n    \"samples_ns\": [ 343281 ],\\n' \"$ts\"\n"
    "    printf '    \"samples_ts\": [ %d ]\\n  }\\n]\\n' \"$ts\"\n"
    "  fi\n"
    "  exit 0\n"
    "fi\n"
    "[ \"$fa\" = on ] || want \"-fa (on) expected\"\n"
    "if [ $KIND = ik ]; then [ \"$rtr\" = 1 ] || want \"-rtr expected\"; base=2000; else base=1000; fi\n"
    "table() {\n"
    "  printf '\\nmain: n_kv_max = 256, n_batch = 2048, n_ubatch = 512, flash_attn = 1, n_threads = 2\\n\\n'\n"
    "  printf '|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\\n'\n"
    "  printf '|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\\n'\n"
    "  printf '| %5d | %6d | %4d | %6d |    0.001 |   999.99 |    0.001 | %8.2f |    0.002 |   888.88 |\\n\\n' \\\n"
    "    \"$npp\" \"$ntg\" \"$npl\" $(((npp + ntg) * npl)) $((base + npp + 100 * npl))\n"
    "}\n"
    "echo 'llama_init_from_model: flash_attn    = 1' >&2\n"
    "if [ $KIND = ik ]; then echo '[1796431513] main: n_kv_max = 256' >>llama.log; fi # as ik_llama.cpp does\n"
    "if [ $KIND = ik ]; then table >&2; else table; fi\n"
    "echo 'llama_perf_context_print:        load time =       5.85 ms' >&2\n";

/* writes DIR/bin/llama-bench and DIR/bin/llama-batched-bench for one kind; 0 on success */
static int write_engine(const char *dir, const char *kind) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bin", dir);
    if (mkdir(dir, 0755) && access(dir, F_OK)) return -1;
    if (mkdir(path, 0755) && access(path, F_OK)) return -1;
    const char *tools[2][2] = {{"llama-bench", "bench"}, {"llama-batched-bench", "batched"}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/bin/%s", dir, tools[i][0]);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        fprintf(f, "#!/bin/sh\nKIND=%s TOOL=%s\n%s", kind, tools[i][1], stand_in);
        if (fclose(f) || chmod(path, 0755)) return -1;
    }
    return 0;
}

/* the stand-ins' numbers: llama-bench's avg_ts and llama-batched-bench's S_TG for each test */
static double stand_in_value(const char *kind, const char *test) {
    int ik = !strcmp(kind, "ik");
    if (!strcmp(test, "pp16")) return ik ? 716 : 516;  /* 700|500 + prompt */
    if (!strcmp(test, "tg@0")) return ik ? 304 : 104;  /* 300|100 + generated */
    if (!strcmp(test, "tg@32")) return ik ? 2132 : 1132; /* 2000|1000 + depth + 100 x sequences */
    if (!strcmp(test, "tgx2")) return ik ? 2328 : 1328; /* depth 128, 2 sequences */
    return -1;
}

static int split_words(char *line, char **w, int max) {
    int n = 0;
    char *save = NULL;
    for (char *s = strtok_r(line, " \t", &save); s && n < max; s = strtok_r(NULL, " \t", &save)) w[n++] = s;
    return n;
}
static int is_number(const char *s) { return s[0] && strspn(s, "0123456789.") == strlen(s) && atof(s) > 0; }

struct engine { const char *label, *kind; };

/* runs the script with ENV and ARGS; checks its exit status, the engines' flags at the top, then the
 * table: columns tierkv, old (with_old), one per engine under its label, tierkv/LABEL per engine,
 * new/old (with_old); four rows pp16, tg@0, tg@32, tgx2 */
static void run_table(const char *env, const char *args, int with_old, const struct engine *eng, int neng) {
    char cmd[4096], out[600], err[600];
    snprintf(out, sizeof out, "%s/vs.out", t_tmpdir());
    snprintf(err, sizeof err, "%s/vs.err", t_tmpdir());
    /* the variables a caller's shell may hold are cleared: the stand-ins check the default flags */
    snprintf(cmd, sizeof cmd,
             "env -u LLAMA_DIRS -u TIERKV_OLD -u ROUNDS -u LOAD -u KV_TYPE -u LLAMACPP_BENCH_FLAGS "
             "-u LLAMACPP_BATCHED_FLAGS -u IK_BENCH_FLAGS -u IK_BATCHED_FLAGS NPP=16 NGEN=4 DEPTHS='0 32' PARALLEL=2 "
             "REPS=1 THREADS=1 TIERKV=%s %s timeout 300 bash bench/vs-llamacpp.sh %s >%s 2>%s",
             t_bin(), env, args, out, err);
    int had_log = access("llama.log", F_OK) == 0;
    int st = system(cmd);
    char *o = t_slurp(out), *e = t_slurp(err);
    REQUIRE(o && e);
    CHECKF(had_log || access("llama.log", F_OK), "vs-llamacpp.sh %s left llama.log behind", args);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "vs-llamacpp.sh %s: status %d\n%s%s", args, st, o, e);
    CHECKF(!strstr(e, "unbound variable"), "vs-llamacpp.sh %s: %s", args, e);
    const char *names[16];
    int ncol = 0;
    names[ncol++] = "tierkv";
    if (with_old) names[ncol++] = "old";
    char ratio_names[4][64];
    for (int i = 0; i < neng; i++) names[ncol++] = eng[i].label;
    for (int i = 0; i < neng; i++) {
        snprintf(ratio_names[i], sizeof ratio_names[i], "tierkv/%s", eng[i].label);
        names[ncol++] = ratio_names[i];
    }
    if (with_old) names[ncol++] = "new/old";
    names[ncol++] = "floor", names[ncol++] = "tierkv/floor";
    /* the engines' flags as the top of the output prints them */
    for (int i = 0; i < neng; i++) {
        char want[200];
        if (!strcmp(eng[i].kind, "ik"))
            snprintf(want, sizeof want, "# %s%s: llama-bench -rtr 1 -fa 1 -o json; llama-batched-bench -rtr -fa on\n",
                     eng[i].label, strcmp(eng[i].label, "ik_llama.cpp") ? " (ik_llama.cpp, version: 1 (stand-in))"
                                                                        : " (version: 1 (stand-in))");
        else
            snprintf(want, sizeof want, "# %s (version: 1 (stand-in)): llama-bench -fa 1 -o jsonl; llama-batched-bench -fa\n",
                     eng[i].label);
        CHECKF(strstr(o, want), "no line '%s' in:\n%s", want, o);
    }
    const char *tests[] = {"pp16", "tg@0", "tg@32", "tgx2"};
    int rows = 0, header = 0;
    double floor0 = 0;
    char *save = NULL;
    for (char *l = strtok_r(o, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *w[20];
        if (!strncmp(l, "model ", 6)) {
            int n = split_words(l, w, 20);
            header = 1;
            CHECKF(n == 2 + ncol, "header has %d words, want %d", n, 2 + ncol);
            for (int k = 0; k < ncol && 2 + k < n; k++)
                CHECKF(!strcmp(w[2 + k], names[k]), "column %d: %s, want %s", k, w[2 + k], names[k]);
            continue;
        }
        if (strncmp(l, "qwen2-Q8_0.gguf ", 16)) continue;
        int n = split_words(l, w, 20);
        REQUIRE(n == 2 + ncol);
        CHECKF(!strcmp(w[1], tests[rows < 4 ? rows : 3]), "row %d is %s", rows, w[1]);
        rows++;
        double tk = atof(w[2]);
        CHECKF(is_number(w[2]), "%s: tierkv '%s'", w[1], w[2]);
        if (with_old) CHECKF(is_number(w[3]), "%s: old '%s'", w[1], w[3]);
        int c = with_old ? 4 : 3;
        for (int i = 0; i < neng; i++) {
            double v = atof(w[c + i]), want = stand_in_value(eng[i].kind, w[1]);
            CHECKF(fabs(v - want) < 1e-6, "%s: %s %s, want %g", w[1], eng[i].label, w[c + i], want);
            double r = atof(w[c + neng + i]);
            CHECKF(fabs(r - tk / v) <= 0.0051, "%s: %s %s, want %.4f", w[1], names[c - 2 + neng + i], w[c + neng + i], tk / v);
        }
        if (with_old) {
            double r = atof(w[c + 2 * neng]), old = atof(w[3]);
            CHECKF(old > 0 && fabs(r - tk / old) <= 0.0051, "%s: new/old %s, want %.4f", w[1], w[c + 2 * neng], tk / old);
        }
        const char *fl = w[ncol], *share = w[ncol + 1];
        if (!strncmp(w[1], "tg@", 3)) {
            double f = atof(fl);
            CHECKF(is_number(fl) && f > 0, "%s: floor '%s'", w[1], fl);
            CHECKF(fabs(atof(share) - tk / f) <= 0.0051, "%s: tierkv/floor %s, want %.4f", w[1], share, tk / f);
            if (!strcmp(w[1], "tg@0")) floor0 = f;
            else CHECKF(f < floor0, "%s: floor %g not below depth 0's %g", w[1], f, floor0);
        } else
            CHECKF(!strcmp(fl, "-") && !strcmp(share, "n/a"), "%s: floor '%s' '%s', want - n/a", w[1], fl, share);
    }
    CHECK(header);
    CHECKF(rows == 4, "%d rows", rows);
    free(o);
    free(e);
}

/* the stand-ins under the test's folder; the command line's model; NULL when the test skipped */
static const char *setup(char *ll, char *ik, size_t cap) {
    if (access("bench/vs-llamacpp.sh", R_OK)) { t_skip("no bench/vs-llamacpp.sh (run from the repository root)"); return NULL; }
    if (system("bash -c true >/dev/null 2>&1")) { t_skip("bash missing"); return NULL; }
    const char *model = t_need(MODEL);
    if (!model) return NULL;
    if (access(t_bin(), X_OK)) { t_skip("tierkv not built"); return NULL; }
    snprintf(ll, cap, "%s/stand-in-llama", t_tmpdir());
    snprintf(ik, cap, "%s/stand-in-ik", t_tmpdir());
    if (write_engine(ll, "llama") || write_engine(ik, "ik")) { t_fail(__FILE__, __LINE__, "stand-ins not written"); return NULL; }
    return model;
}

TEST(vs_llamacpp_two_engines) {
    char ll[512], ik[512], args[2048];
    const char *model = setup(ll, ik, sizeof ll);
    if (!model) return;
    const struct engine e[] = {{"llama.cpp", "llama"}, {"ik_llama.cpp", "ik"}};
    snprintf(args, sizeof args, "%s %s -- %s", ll, ik, model);
    run_table("", args, 0, e, 2);
    char env[1200];
    snprintf(env, sizeof env, "TIERKV_OLD=%s", t_bin()); /* the same build stands for the earlier one */
    run_table(env, args, 1, e, 2);
}

TEST(vs_llamacpp_call_forms) {
    char ll[512], ik[512], args[2048], env[1200];
    const char *model = setup(ll, ik, sizeof ll);
    if (!model) return;
    /* the old form: one build directory, then the models */
    const struct engine one[] = {{"llama.cpp", "llama"}};
    snprintf(args, sizeof args, "%s %s", ll, model);
    run_table("", args, 0, one, 1);
    /* LLAMA_DIRS with a label, every argument a model */
    const struct engine lab[] = {{"ik", "ik"}, {"llama.cpp", "llama"}};
    snprintf(env, sizeof env, "LLAMA_DIRS='%s=ik %s'", ik, ll);
    run_table(env, model, 0, lab, 2);
    /* "-": no engine, new against old alone */
    snprintf(env, sizeof env, "TIERKV_OLD=%s", t_bin());
    snprintf(args, sizeof args, "- %s", model);
    run_table(env, args, 1, NULL, 0);
    /* "-" without TIERKV_OLD: refused with a reason */
    char cmd[2048], err[600];
    snprintf(err, sizeof err, "%s/vs-none.err", t_tmpdir());
    snprintf(cmd, sizeof cmd, "env -u TIERKV_OLD -u LLAMA_DIRS bash bench/vs-llamacpp.sh - %s >/dev/null 2>%s", model, err);
    int st = system(cmd);
    char *e = t_slurp(err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) != 0, "'-' without TIERKV_OLD: status %d", st);
    CHECKF(e && strstr(e, "TIERKV_OLD"), "'-' without TIERKV_OLD: %s", e ? e : "(no stderr)");
    free(e);
}
