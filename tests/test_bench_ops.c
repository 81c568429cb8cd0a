/* test_bench_ops.c — `tierkv bench-ops` on the CPU backend with a tiny shape (qwen2.5-0.5b, 1 rep,
 * depth 256): one JSON line per per-layer matmul with its name, shape, type, a positive time and
 * bandwidth, then one per depth for attention; a wrong flag, shape or type is refused with status 2;
 * a shape's head_dim (test-qwen3's 128, not n_embd / n_head) sets the attention matrices; --cold
 * MIB times each matrix over as many copies as make MIB MiB (one copy without it).
 * Checks the tool's output, not its speed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/json.h"
#include "t.h"

static double num(const struct json_value *o, const char *key) {
    const struct json_value *v = json_get(o, key);
    return v && v->type == JSON_NUMBER ? v->u.num : -1;
}

/* Runs `tierkv bench-ops ARGS --json` into a file named `name` under the test's directory; its text
 * (malloc'd), or NULL after a failed check when the run failed. */
static char *run_json(char **args, const char *name, int timeout_s) {
    char out[600], *argv[40];
    snprintf(out, sizeof out, "%s/%s", t_tmpdir(), name);
    int n = 0;
    argv[n++] = (char *)t_bin(), argv[n++] = "bench-ops";
    for (int i = 0; args[i] && n < 38; i++) argv[n++] = args[i];
    argv[n++] = "--json", argv[n] = NULL;
    char *err = NULL;
    int st = t_spawn(argv, out, timeout_s, &err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, stderr: %s", st, err ? err : "");
    free(err);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t_slurp(out) : NULL;
}

TEST(bench_ops_cpu_json) {
    char *args[] = {"--backend", "cpu", "--shape", "qwen2.5-0.5b", "--type", "BF16", "--depths", "256,300", "--reps", "1",
                    "-t", "1", NULL};
    char *text = run_json(args, "bench-ops.jsonl", 120);
    REQUIRE(text);
    /* qwen2.5-0.5b: n_embd 896, 14 heads of 64, 2 kv heads, n_ff 4864 */
    static const struct { const char *name; int n_in, n_out; } want[] = {
        {"attn_q", 896, 896}, {"attn_k", 896, 128}, {"attn_v", 896, 128}, {"attn_output", 896, 896},
        {"ffn_gate", 896, 4864}, {"ffn_up", 896, 4864}, {"ffn_down", 4864, 896},
    };
    int n_mm = 0, n_att = 0, bad = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        struct json_doc *d;
        char jerr[200];
        if (json_parse(line, strlen(line), NULL, &d, jerr, sizeof jerr)) {
            fprintf(stderr, "    not JSON: %s (%s)\n", line, jerr);
            bad++;
            continue;
        }
        const struct json_value *o = json_root(d);
        const char *op = json_get_str(o, "op");
        if (op && !strcmp(op, "matmul") && n_mm < 7) {
            const char *name = json_get_str(o, "name"), *type = json_get_str(o, "type");
            int ok = name && !strcmp(name, want[n_mm].name) && type && !strcmp(type, "BF16") &&
                     num(o, "n_in") == want[n_mm].n_in && num(o, "n_out") == want[n_mm].n_out && num(o, "us") > 0 &&
                     num(o, "gb_s") > 0;
            if (!ok) fprintf(stderr, "    unexpected matmul line %d: %s\n", n_mm, line);
            bad += !ok;
            n_mm++;
        } else if (op && !strcmp(op, "attention") && n_att < 2) {
            int ok = num(o, "depth") == (n_att ? 300 : 256) && num(o, "us_per_layer") > 0;
            if (!ok) fprintf(stderr, "    unexpected attention line: %s\n", line);
            bad += !ok;
            n_att++;
        } else {
            fprintf(stderr, "    unexpected line: %s\n", line);
            bad++;
        }
        json_free(d);
    }
    CHECKF(n_mm == 7 && n_att == 2 && bad == 0 && lines == 9, "%d matmul lines, %d attention lines, %d bad of %d", n_mm,
           n_att, bad, lines);
    free(text);
}

TEST(bench_ops_refuses_bad_flags) {
    /* qwen3-30b-a3b: a mixture of experts, whose expert matmuls bench-ops does not time */
    static const char *cases[][2] = {{"--shape", "no-such-model"}, {"--type", "Q9_9"}, {"--depths", "256,,3"},
                                     {"--reps", "0"}, {"--frobnicate", "1"}, {"--shape", "qwen3-30b-a3b"},
                                     {"--cold", "-1"}, {"--cold", "lots"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {(char *)t_bin(), "bench-ops", "--shape", "qwen2.5-0.5b", (char *)cases[i][0], (char *)cases[i][1],
                        NULL};
        char *err = NULL;
        int st = t_spawn(argv, NULL, 60, &err);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2 && err && *err, "%s %s: status %d, stderr: %s", cases[i][0],
               cases[i][1], st, err ? err : "");
        free(err);
    }
}

/* a shape whose head_dim is not n_embd / n_head (test-qwen3: 256 wide, 4 heads of 128): q is 512 wide */
TEST(bench_ops_head_dim) {
    char *args[] = {"--backend", "cpu", "--shape", "test-qwen3", "--type", "F32", "--depths", "16", "--reps", "1", "-t", "1",
                    NULL};
    char *text = run_json(args, "bench-ops-hd.jsonl", 60);
    REQUIRE(text);
    CHECKF(strstr(text, "\"name\":\"attn_q\",\"n_in\":256,\"n_out\":512") &&
           strstr(text, "\"name\":\"attn_k\",\"n_in\":256,\"n_out\":256") &&
           strstr(text, "\"name\":\"attn_output\",\"n_in\":512,\"n_out\":256") && strstr(text, "\"depth\":16"),
           "%s", text);
    free(text);
}

/* --cold 1: test-qwen3's F32 attn_q (256 x 512, 512 KiB) is called over 2 copies, attn_k (256 x 256,
 * 256 KiB) over 4; without --cold every matrix is one copy */
TEST(bench_ops_cold_copies) {
    for (int cold = 0; cold < 2; cold++) {
        char *args[] = {"--backend", "cpu", "--shape", "test-qwen3", "--type", "F32", "--depths", "16", "--reps", "3",
                        "-t", "1", cold ? "--cold" : NULL /* ends here */, "1", NULL};
        char *text = run_json(args, cold ? "bench-ops-cold.jsonl" : "bench-ops-warm.jsonl", 60);
        REQUIRE(text);
        const char *q = strstr(text, "\"name\":\"attn_q\""), *k = strstr(text, "\"name\":\"attn_k\"");
        REQUIRE(q && k);
        const char *cq = strstr(q, "\"copies\":"), *ck = strstr(k, "\"copies\":");
        REQUIRE(cq && ck);
        CHECKF(atoi(cq + 9) == (cold ? 2 : 1) && atoi(ck + 9) == (cold ? 4 : 1), "cold %d: %s", cold, text);
        free(text);
    }
}
