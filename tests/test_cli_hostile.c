/* test_cli_hostile.c — every command's flags against hostile input, through the built binary
 * (t_bin, no shell): unknown flags, missing values, NaN / inf / negative / huge / garbage numbers,
 * conflicting flags, unreadable and non-regular files, and stdout on /dev/full. Each case says the
 * exit status it wants: 2 (a usage error), 1 (a runtime error), or either ('E'); never a signal,
 * never 0 for a bad value, always a message on stderr, within TIME_LIMIT seconds.
 *
 * In argument strings: $M is a fixture model, $T the test directory, $D a small data file, $I a
 * token id file, '' an empty argument. Devices given as outputs (/dev/full) must still be there
 * afterwards: a command that failed to write must not remove what it did not create. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/version.h"
#include "t.h"

#define TIME_LIMIT 20
#define MODEL "fixtures/models/qwen2-Q8_0.gguf"

typedef struct {
    const char *args;  /* space-separated, with the $ names above */
    char want;         /* '1', '2' or 'E' (1 or 2) */
    int full_stdout;   /* 1: stdout is /dev/full */
    int limit_s;       /* 0: TIME_LIMIT */
} hcase;

/* The small files the cases read; made once per run. */
static const char *files_dir(void) {
    static char d[600];
    if (d[0]) return d;
    snprintf(d, sizeof d, "%s/hostile", t_tmpdir());
    mkdir(d, 0777);
    char p[700];
    snprintf(p, sizeof p, "%s/data.jsonl", d);
    FILE *f = fopen(p, "w");
    if (f) { fputs("{\"id\":\"a\",\"question\":\"1+1?\",\"answer\":\"2\"}\n", f); fclose(f); }
    snprintf(p, sizeof p, "%s/ids.txt", d);
    f = fopen(p, "w");
    if (f) { fputs("1 2 3\n", f); fclose(f); }
    snprintf(p, sizeof p, "%s/nul-ids.txt", d); /* "1<NUL>2 3": read as 1 before NULs were refused */
    f = fopen(p, "wb");
    if (f) { fwrite("1\0002 3\n", 1, 6, f); fclose(f); }
    return d;
}

/* Splits args into argv (bin first), substituting $M $T $D $I and ''. */
static int make_argv(const char *args, char *buf, size_t cap, char **argv, int max) {
    char model[700];
    snprintf(model, sizeof model, "%s", t_shared(MODEL));
    int n = 0;
    argv[n++] = (char *)t_bin();
    size_t o = 0;
    for (const char *p = args; *p && n < max - 1;) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t k = strcspn(p, " ");
        char tok[400];
        snprintf(tok, sizeof tok, "%.*s", (int)k, p);
        p += k;
        const char *v = tok;
        char tmp[1200];
        if (!strcmp(tok, "''")) v = "";
        else if (!strncmp(tok, "$M", 2)) snprintf(tmp, sizeof tmp, "%s%s", model, tok + 2), v = tmp;
        else if (!strncmp(tok, "$T", 2)) snprintf(tmp, sizeof tmp, "%s%s", files_dir(), tok + 2), v = tmp;
        else if (!strcmp(tok, "$D")) snprintf(tmp, sizeof tmp, "%s/data.jsonl", files_dir()), v = tmp;
        else if (!strcmp(tok, "$I")) snprintf(tmp, sizeof tmp, "%s/ids.txt", files_dir()), v = tmp;
        size_t l = strlen(v) + 1;
        if (o + l > cap) return -1;
        memcpy(buf + o, v, l);
        argv[n++] = buf + o;
        o += l;
    }
    argv[n] = NULL;
    return n;
}

/* NULL when the case behaves, else why not (a static buffer). */
static const char *run_case(const hcase *c, char *msg, size_t cap) {
    char buf[8192], *argv[64];
    if (make_argv(c->args, buf, sizeof buf, argv, 64) < 0) return "the case does not fit";
    char *err = NULL;
    int limit = c->limit_s ? c->limit_s : TIME_LIMIT;
    int st = t_spawn(argv, c->full_stdout ? "/dev/full" : NULL, limit, &err);
    const char *e = err ? err : "";
    const char *why = NULL;
    if (WIFSIGNALED(st)) {
        snprintf(msg, cap, WTERMSIG(st) == SIGALRM ? "still running after %d s" : "killed by signal %d",
                 WTERMSIG(st) == SIGALRM ? limit : WTERMSIG(st));
        why = msg;
    } else if (!WIFEXITED(st)) {
        why = "no exit status";
    } else {
        int rc = WEXITSTATUS(st);
        int ok = c->want == 'E' ? rc == 1 || rc == 2 : rc == c->want - '0';
        if (!ok) {
            snprintf(msg, cap, "exit status %d, want %s%s", rc, c->want == 'E' ? "1 or 2" : c->want == '1' ? "1" : "2",
                     rc == 0 ? " (taken as fine)" : "");
            why = msg;
        } else if (!*e) {
            why = "no message on stderr";
        } else if (strstr(e, "Sanitizer") || strstr(e, "runtime error") || strstr(e, "assertion failed")) {
            why = "a sanitizer or assertion report";
        }
    }
    if (why && why != msg) snprintf(msg, cap, "%s", why);
    if (why) {
        size_t l = strlen(msg);
        snprintf(msg + l, cap - l, "; stderr: %.200s", e);
        for (char *p = msg; *p; p++) if (*p == '\n') *p = ' ';
    }
    free(err);
    return why ? msg : NULL;
}

/* Without the shared folder the cases that read the fixture model ($M) are left out; the test is
 * skipped (naming the file) only when that leaves none. */
static int runnable(const hcase *cs, size_t n, int *have_model) {
    *have_model = access(t_shared(MODEL), R_OK) == 0;
    int k = 0;
    for (size_t i = 0; i < n; i++) k += *have_model || !strstr(cs[i].args, "$M");
    if (!k) t_need(MODEL);
    else if ((size_t)k < n) printf("    %zu cases need %s: left out\n", n - (size_t)k, t_shared(MODEL));
    return k;
}

static void run_cases(const hcase *cs, size_t n) {
    int have_model;
    if (!runnable(cs, n, &have_model)) return;
    char msg[600];
    for (size_t i = 0; i < n; i++) {
        if (!have_model && strstr(cs[i].args, "$M")) continue;
        const char *why = run_case(&cs[i], msg, sizeof msg);
        CHECKF(!why, "tierkv %s%s: %s", cs[i].args, cs[i].full_stdout ? " >/dev/full" : "", why);
    }
    struct stat st; /* a failed write must not remove what the command did not create */
    CHECKF(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "/dev/full is no longer a device after these cases");
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- run ---- */

static const hcase run_ok[] = {
    {"run -m $M -p hi -n 2 --bogus", '2', 0, 0},
    {"run -m $M -p hi -n", '2', 0, 0},
    {"run -m $M -p hi -n -1", '2', 0, 0},
    {"run -m $M -p hi -n 16777217", '2', 0, 0},
    {"run -m $M -p hi -n 1e3", '2', 0, 0},
    {"run -m $M -p hi -n 2 --temp inf", '2', 0, 0},
    {"run -m $M -p hi -n 2 --temp -1", '2', 0, 0},
    {"run -m $M -p hi -n 2 --temp abc", '2', 0, 0},
    {"run -m $M -p hi -n 2 --top-p -1", '2', 0, 0},
    {"run -m $M -p hi -n 2 --top-k -1", '2', 0, 0},
    {"run -m $M -p hi -n 2 --top-k 1.5", '2', 0, 0},
    {"run -m $M -p hi -n 2 --repeat-last-n -2", '2', 0, 0},
    {"run -m $M -p hi -n 2 --repeat-penalty 0", '2', 0, 0},
    {"run -m $M -p hi -n 2 --ctx 4k", '2', 0, 0},
    {"run -m $M -p hi -n 2 --ctx 0", '2', 0, 0},
    {"run -m $M -p hi -n 2 -t 0", '2', 0, 0},
    {"run -m $M -p hi -n 2 -t 1e3", '2', 0, 0},
    {"run -m $M -p hi -n 2 --batch 0", '2', 0, 0},
    {"run -m $M -p hi -n 2 --isa quantum", '2', 0, 0},
    {"run -m $M -p hi -n 2 --hbm-ratio nan", '2', 0, 0},
    {"run -m $M -p hi -n 2 --hbm-ratio 2", '2', 0, 0},
    {"run -m $M -p hi -n 2 --evict-ratio -0.1", '2', 0, 0},
    {"run -m $M -p hi -n 2 --hbm-budget -5", '2', 0, 0},
    {"run -m $M -p hi -n 2 --hbm-budget 1e30", '2', 0, 0},
    {"run -m $M -p hi -n 2 --delta 0", '2', 0, 0},
    {"run -m $M -p hi -n 2 --policy nope", '2', 0, 0},
    {"run -m $M -p hi -n 2 --kv-type f8", '2', 0, 0},
    {"run -m $M -p hi -n 2 --stop ''", '2', 0, 0},
    {"run -m $M -p hi -f $D", '2', 0, 0},
    {"run -m $M --tokens $I --chat", '2', 0, 0},
    {"run -m $M -n 2", '2', 0, 0},
    {"run -m $M -f /dev/zero -n 2", '1', 0, 0},
    {"run -m $M -f $T -n 2", '1', 0, 0},
    {"run -m $M -f /nonexistent/p.txt -n 2", '1', 0, 0},
    {"run -m /dev/zero -p hi -n 2", '1', 0, 0},
    {"run -m $T -p hi -n 2", '1', 0, 0},
    {"run -m /nonexistent.gguf -p hi -n 2", '1', 0, 0},
    {"run -m $M --tokens /dev/zero -n 2", '1', 0, 0},
    {"run -m $M --tokens $T -n 2", '1', 0, 0},
    {"run -m $M --tokens $D -n 2", '1', 0, 0},
    {"run -m $M --tokens $T/nul-ids.txt -n 2", '1', 0, 0},
    {"run -m $M -p hi -n 2 --chat --template nope", '1', 0, 0},
    {"run -m $M -p hi -n 2 --stats-json /nonexistent/x.json", '1', 0, 0},
    {"run -m $M -p hi -n 2 --temp nan", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --repeat-penalty nan", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --min-p 2", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --top-p 1.5", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --seed -1", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --seed 99999999999999999999999", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --system x", 'E', 0, 0},
    {"run -m $M -p hi -n 2 --template chatml", 'E', 0, 0},
    {"run -m $M -p hi -n 16777216 -c 4096", 'E', 0, 5}, /* without -c: stops at the model's context */
    {"run -m $M -p hi -n 2 --stats-json /dev/full", '1', 0, 0},
    {"run -m $M -p hi -n 2", '1', 1, 0},
};
TEST(cli_hostile_run) { run_cases(run_ok, N(run_ok)); }


/* ---- logits, bench, plan ---- */

static const hcase lbp_ok[] = {
    {"logits -m $M --tokens $I -o $T/o.f32 --bogus", '2', 0, 0},
    {"logits -m $M --tokens $I -o", '2', 0, 0},
    {"logits -m $M --tokens $I", '2', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32 --greedy -1", '2', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32 --greedy nan", '2', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32 --first-pos 5", '2', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32 --ctx 4k", '2', 0, 0},
    {"logits -m $M --tokens $I -o /dev/full", '1', 0, 0},
    {"logits -m $M --tokens $I -o /nonexistent/o.f32", '1', 0, 0},
    {"logits -m $M --tokens /dev/zero -o $T/o.f32", '1', 0, 0},
    {"logits -m $M --tokens $T -o $T/o.f32", '1', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32 --feed /dev/zero", '1', 0, 0},
    {"logits -m $M --tokens $T/nul-ids.txt -o $T/o.f32", '1', 0, 0},
    {"bench -m $M --bogus", '2', 0, 0},
    {"bench -m $M -p -1", '2', 0, 0},
    {"bench -m $M -n nan", '2', 0, 0},
    {"bench -m $M -d 0,4k", '2', 0, 0},
    {"bench -m $M -d ,,", '2', 0, 0},
    {"bench -m $M --reps 0", '2', 0, 0},
    {"bench -m $M --parallel -1", '2', 0, 0},
    {"bench -m /dev/zero -p 4 -n 2 -d 0 --reps 1", '1', 0, 0},
    {"plan --bogus", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --batch", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --batch abc", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --ctx -5", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --ctx 99999999999999999999", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --hbm-ratio nan", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --hbm-ratio 0x1p-1", '2', 0, 0},
    {"plan --shape nope", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b -m $M", '2', 0, 0},
    {"plan -m /dev/zero", '1', 0, 0},
    {"logits -m $M --tokens $I -o $T/o.f32", '1', 1, 0},
    {"bench -m $M -p 4 -n 2 -d 0 --reps 1", '1', 1, 0},
    {"plan --shape r1-distill-qwen-7b --ctx 4k", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b --batch 2x", '2', 0, 0},
    {"plan --shape r1-distill-qwen-7b", '1', 1, 0},
};
TEST(cli_hostile_logits_bench_plan) { run_cases(lbp_ok, N(lbp_ok)); }


/* ---- eval, sweep, grade, verify ---- */

static const hcase eval_ok[] = {
    {"eval -m $M --task gsm8k --data $D --bogus", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --n", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --n -1", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --n nan", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --max-tokens 0", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --max-tokens 1e9", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --parallel 1e3", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --offset -3", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --ctx 4k", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --hbm-ratio inf", '2', 0, 0},
    {"eval -m $M --task gsm8k --data $D --system x --no-system", '2', 0, 0},
    {"eval -m $M --task nope --data $D", '2', 0, 0},
    {"eval -m $M --data $D", '2', 0, 0},
    {"eval -m $M --task gsm8k --data /dev/zero", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $T", '1', 0, 0},
    {"eval -m /dev/zero --task gsm8k --data $D --max-tokens 2", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --template nope --max-tokens 2", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --out /dev/full --max-tokens 2 --template chatml", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --out $T --max-tokens 2 --template chatml", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --summary-json /dev/full --max-tokens 2 --template chatml --quiet", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --summary-json /nonexistent/s.json --max-tokens 2", '1', 0, 0},
    {"eval -m $M --task gsm8k --data $D --max-tokens 2 --template chatml --quiet", '1', 1, 0},
    {"sweep --bogus", '2', 0, 0},
    {"sweep --dir $T/sw --policies nope --dry-run -m x --task gsm8k", '2', 0, 0},
    {"sweep --dir $T/sw --t0 nan --dry-run -m x --task gsm8k", '2', 0, 0},
    {"sweep --dir $T/sw --evict -1 --dry-run -m x --task gsm8k", '2', 0, 0},
    {"sweep --dir $T/sw --dry-run -m x --task gsm8k --out x", '2', 0, 0},
    {"sweep --dir $T/sw --dry-run -m x --task gsm8k --summary-json x", '2', 0, 0},
    {"sweep --dir /dev/null/x -m $M --task gsm8k --data $D --n 1 --max-tokens 2 --policies full --no-plot", '1', 0, 0},
    {"sweep --dir $T/sw --dry-run -m x --task gsm8k", '1', 1, 0},
    {"grade --task gsm8k", '2', 0, 0},
    {"grade --in $D", '2', 0, 0},
    {"grade --task gsm8k --in", '2', 0, 0},
    {"grade --task nope --in $D", '2', 0, 0},
    {"grade --task gsm8k --in $D --bogus", '2', 0, 0},
    {"grade --task gsm8k --in /dev/zero", '1', 0, 0},
    {"grade --task gsm8k --in $T", '1', 0, 0},
    {"grade --task gsm8k --in /nonexistent/x.jsonl", '1', 0, 0},
    {"grade --task gsm8k --in $D", '1', 0, 0}, /* no output field: a bad line */
    {"grade --task gsm8k --in results/gsm8k-1.5b-n200/full.jsonl", '1', 1, 0},
    {"verify", '2', 0, 0},
    {"verify --bogus", '2', 0, 0},
    {"verify /dev/zero", '1', 0, 0},
    {"verify $T", '1', 0, 0},
    {"verify $D", '1', 0, 0}, /* no line carries a check: nothing verified */
    {"verify results/gsm8k-1.5b-n200-v2/full.jsonl", '1', 1, 0}, /* checked lines, so the write error is what fails */
};
TEST(cli_hostile_eval_sweep_grade_verify) { run_cases(eval_ok, N(eval_ok)); }

/* ---- inspect, gen-random, tokenize, detokenize, mutate-gguf ---- */

static const hcase files_ok[] = {
    {"inspect", '2', 0, 0},
    {"inspect --bogus $M", '2', 0, 0},
    {"inspect $M $M", '2', 0, 0},
    {"inspect /dev/zero", '1', 0, 0},
    {"inspect $T", '1', 0, 0},
    {"inspect /nonexistent.gguf", '1', 0, 0},
    {"inspect $M", '1', 1, 0},
    {"inspect $M --json", '1', 1, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o $T/g.gguf --layers 0", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o $T/g.gguf --layers 1e3", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o $T/g.gguf --layers nan", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o $T/g.gguf --seed -1", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o $T/g.gguf --seed 99999999999999999999999", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 -o", '2', 0, 0},
    {"gen-random --shape nope --type Q4_0 -o $T/g.gguf", '2', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 --layers 1 -o $T", '1', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 --layers 1 -o /dev/full", '1', 0, 0},
    {"gen-random --shape qwen2.5-0.5b --type Q4_0 --layers 1 -o $T/g2.gguf", '1', 1, 0},
    {"tokenize -m $M", '2', 0, 0},
    {"tokenize -m $M -p hi -f $D", '2', 0, 0},
    {"tokenize -p hi", '2', 0, 0},
    {"tokenize -m $M -p hi --bogus", '2', 0, 0},
    {"tokenize -m $M -p", '2', 0, 0},
    {"tokenize -m /dev/zero -p hi", '1', 0, 0},
    {"tokenize -m $M -f /dev/zero", '1', 0, 0},
    {"tokenize -m $M -f $T", '1', 0, 0},
    {"tokenize -m $M -p hi", '1', 1, 0},
    {"detokenize -m $M", '2', 0, 0},
    {"detokenize -m $M -p 1 --bos", '2', 0, 0},
    {"detokenize -m $M -p 1,x,2", '1', 0, 0},
    {"detokenize -m $M -p -1", '1', 0, 0},
    {"detokenize -m $M -p 99999999999999999999", '1', 0, 0},
    {"detokenize -m $M -p 5000", '1', 0, 0},
    {"detokenize -m $M -f /dev/zero", '1', 0, 0},
    {"detokenize -m $M -p 1,2", '1', 1, 0},
    {"mutate-gguf", '2', 0, 0},
    {"mutate-gguf $M", '2', 0, 0},
    {"mutate-gguf $M -o", '2', 0, 0},
    {"mutate-gguf $M -o $T/mg --seed -1", '2', 0, 0},
    {"mutate-gguf $M -o $T/mg --seed abc", '2', 0, 0},
    {"mutate-gguf $M -o $T/mg --bogus", '2', 0, 0},
    {"mutate-gguf /dev/zero -o $T/mg", '1', 0, 0},
    {"mutate-gguf $M -o /dev/full/x", '1', 0, 0},
    {"mutate-gguf $M -o $T/mg --only valid-copy", '1', 1, 0},
};
TEST(cli_hostile_files_and_text) { run_cases(files_ok, N(files_ok)); }

/* Unknown commands and the dispatcher itself. */
static const hcase main_ok[] = {
    {"", '2', 0, 0},
    {"nope", '2', 0, 0},
    {"--bogus", '2', 0, 0},
    {"''", '2', 0, 0},
};
TEST(cli_hostile_dispatch) { run_cases(main_ok, N(main_ok)); }

/* A model path that is a FIFO, a directory or a socket is refused by what it is, quickly, by every
 * command that opens a model (before 2026-12 a FIFO was opened for reading and waited on for a writer
 * that never came). Each command must exit 1 within LIMIT_S with the path's kind in its message. */
TEST(cli_model_not_regular_file) {
    enum { LIMIT_S = 5 };
    char dir[700], fifo[720], sock[720];
    snprintf(dir, sizeof dir, "%s/nonreg", t_tmpdir());
    mkdir(dir, 0777);
    snprintf(fifo, sizeof fifo, "%s/model.gguf", dir);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    snprintf(sock, sizeof sock, "%s/s.gguf", dir);
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int have_sock = sfd >= 0 && strlen(sock) < sizeof sa.sun_path;
    if (have_sock) {
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        have_sock = bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0;
    }
    const struct { const char *path, *kind; } paths[] = {{fifo, "is a FIFO, not a regular file"},
                                                          {dir, "is a directory, not a regular file"},
                                                          {sock, "is a socket, not a regular file"}};
    const char *cmds[][12] = {{"run", "-m", "@", "-p", "hi", "-n", "2"},
                              {"run", "-m", "@", "-p", "hi", "-n", "2", "--mmap"},
                              {"tokenize", "-m", "@", "-p", "hi"},
                              {"inspect", "@"},
                              {"bench", "-m", "@", "-p", "4", "-n", "2", "-d", "0", "--reps", "1"},
                              {"plan", "-m", "@"},
                              {"mutate-gguf", "@", "-o", "@out"}};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        if (p == 2 && !have_sock) { printf("    no unix socket could be made: the socket case is left out\n"); break; }
        for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
            char *argv[16], out[760];
            snprintf(out, sizeof out, "%s/mg", dir);
            int n = 0;
            argv[n++] = (char *)t_bin();
            for (int k = 0; cmds[c][k]; k++)
                argv[n++] = !strcmp(cmds[c][k], "@") ? (char *)paths[p].path : !strcmp(cmds[c][k], "@out") ? out : (char *)cmds[c][k];
            argv[n] = NULL;
            char *err = NULL;
            int st = t_spawn(argv, NULL, LIMIT_S, &err);
            const char *e = err ? err : "";
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(e, paths[p].kind),
                   "tierkv %s on %s: %s %d; stderr: %.200s", cmds[c][0], paths[p].kind,
                   WIFSIGNALED(st) ? "signal (still running after the limit?)" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), e);
            free(err);
        }
    }
    if (sfd >= 0) close(sfd);
}

/* A SERVE=0 build keeps `serve` as a command that says why it cannot run (exit 2), never an
 * "unknown command"; a build with the server is checked by test_serve.c. */
TEST(cli_serve_absent_in_serve0_build) {
#ifndef TKV_NO_SERVE
    SKIP("built with the server (SERVE=1)");
#else
    char buf[2048], *argv[8];
    if (make_argv("serve -m $M --port 0", buf, sizeof buf, argv, 8) < 0) REQUIRE(0);
    char *err = NULL;
    int st = t_spawn(argv, NULL, TIME_LIMIT, &err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
    CHECKF(err && strstr(err, "this build has no server (built with SERVE=0"), "stderr: %s", err ? err : "");
    free(err);
#endif
}

/* `tierkv --version` names the build: the commit on its first line, the compiler and flags on its
 * second (what results files record as build_flags), the sources' hash on its third (what gpu.sh
 * compares with the tree: scripts/sources-hash.sh, run here again when the script is at hand). */
TEST(cli_version_names_build) {
    char out[700], *argv[] = {(char *)t_bin(), "--version", NULL};
    snprintf(out, sizeof out, "%s/version.txt", t_tmpdir());
    char *err = NULL;
    int st = t_spawn(argv, out, TIME_LIMIT, &err);
    free(err);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) SKIP("tierkv binary not built");
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    char *text = t_slurp(out);
    REQUIRE(text);
    char commit[64] = "", flags[400] = "", sources[64] = "";
    CHECKF(sscanf(text, "tierkv %63s\nbuilt with: %399[^\n]\nsources: %63s", commit, flags, sources) == 3,
           "--version printed: %s", text);
    CHECKF(strlen(commit) >= 7 && strstr(flags, "-O"), "commit '%s', flags '%s'", commit, flags);
    CHECKF(!strcmp(sources, tkv_build_sources()), "the binary's sources '%s', these tests' '%s'", sources,
           tkv_build_sources());
    char now[64];
    if (!access("scripts/sources-hash.sh", R_OK)) /* from the repository root, on the tree these tests were built from */
        CHECKF(t_sources_hash(now) == 0 && !strcmp(now, sources), "scripts/sources-hash.sh says '%s', the binary '%s'",
               now, sources);
    /* `make test` names the binary built beside these tests: the same stamp (a CUDA build's "+cuda nvcc
     * 13.0 sm_90 compute_90", SERVE=0's "+noserve") */
    if (getenv("TIERKV_BIN"))
        CHECKF(!strcmp(flags, tkv_build_flags()), "the binary says '%s', these tests '%s'", flags, tkv_build_flags());
    free(text);
}

/* bench --parallel N under a budget the N sequences do not fit: refused with the numbers before
 * anything is timed (stdout empty), not after the single-sequence runs (before 2026-12: their rows
 * were printed first). 256 KiB holds 256 tokens of this fixture's 1 KiB; 16 sequences need 131 each. */
TEST(cli_hostile_bench_parallel_refused_first) {
    NEED(MODEL);
    char buf[8192], *argv[64], out[700];
    if (make_argv("bench -m $M -p 4 -n 2 --reps 1 -d 0 --parallel 16 --policy hierarchy --hbm-budget 256KiB "
                  "--evict-ratio 0", buf, sizeof buf, argv, 64) < 0)
        REQUIRE(0);
    snprintf(out, sizeof out, "%s/bench-refused.csv", files_dir());
    char *err = NULL;
    int st = t_spawn(argv, out, TIME_LIMIT, &err);
    char *o = t_slurp(out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
    CHECKF(err && strstr(err, "T0 is taken"), "stderr: %s", err ? err : "");
    CHECKF(o && !*o, "stdout before the refusal: %.200s", o ? o : "(unreadable)");
    free(o);
    free(err);
}
