/* cmd_bench_ops.c — `tierkv bench-ops`: the backend's decode kernels alone (tkv_bench_ops, tierkv.h)
 * on random data of a known model's shape (tools/shapes.h): each per-layer matmul for one token or
 * --tokens N (µs per call, GB/s = the matrix's bytes / time: its read rate, once per call) and one layer's attention at each depth (µs per layer).
 * Timing, as tkv_bench_ops does it: wall clock around --reps calls ended by one read of the output,
 * which waits for the backend's queue (not event-timed kernels: a time includes the host's launch
 * cost per call where that exceeds the device's). One JSON object per line with --json, else a
 * table. Not a test: `make test` runs it once on the CPU with a tiny shape to check its output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cmds.h"
#include "common.h"
#include "gguf/gguf.h"
#include "out.h"
#include "shapes.h"
#include "tierkv.h"

#define MAX_DEPTHS 16

typedef struct {
    int json, reps;
    const char *backend, *type;
    const char *last_op; /* the table's header is printed when the op changes */
} printer;

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv bench-ops [--backend cpu|cuda] [--shape NAME] [--type T] [--depths N,N,...] [--reps N]\n"
                 "                        [--tokens N] [--cold MIB] [-t N] [--device N] [--json]\n"
                 "  times the backend's matmuls (one token, or N: a prefill batch) and one layer's attention on random data of a\n"
                 "  model's shape (defaults: cpu, r1-distill-qwen-7b, BF16, 2048,8192,32768, 20 reps, 2 threads)\n"
                 "  --cold MIB  each matmul over copies of its matrix totalling MIB MiB (at most 256 copies; column\n"
                 "              `copies`), called in turn: weights read from memory, as in a decode step (default 0:\n"
                 "              one copy, in cache where it fits)\n"
                 "  shapes:");
    for (size_t i = 0; i < shapes_n; i++) fprintf(out, " %s", shapes_table[i].name);
    fprintf(out, "\n  types: F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q6_K ... (what the backend's prepare_weight takes)\n");
}

/* the fields every JSON line ends with, and the line */
static void end_line(struct json_out *j, const printer *pr) {
    json_out_key(j, "reps"), json_out_int(j, pr->reps);
    json_out_key(j, "backend"), json_out_str(j, pr->backend);
    out_json_end(j);
}

static void print_row(void *ctx, const tkv_bench_ops_row *r) {
    printer *pr = ctx;
    if (!strcmp(r->op, "matmul")) {
        double gbs = (double)r->bytes / (r->us * 1e-6) / 1e9;
        if (pr->json) {
            struct json_out j;
            out_json_begin(&j);
            json_out_key(&j, "op"), json_out_str(&j, "matmul");
            json_out_key(&j, "name"), json_out_str(&j, r->name);
            json_out_key(&j, "n_in"), json_out_int(&j, r->n_in);
            json_out_key(&j, "n_out"), json_out_int(&j, r->n_out);
            json_out_key(&j, "type"), json_out_str(&j, pr->type);
            json_out_key(&j, "us"), json_out_fixed(&j, r->us, 1);
            json_out_key(&j, "gb_s"), json_out_fixed(&j, gbs, 1);
            json_out_key(&j, "bytes"), json_out_int(&j, r->bytes);
            json_out_key(&j, "tokens"), json_out_int(&j, r->n_tok);
            json_out_key(&j, "copies"), json_out_int(&j, r->copies);
            end_line(&j, pr);
        } else {
            if (!pr->last_op || strcmp(pr->last_op, r->op)) printf("  %-12s %7s %7s %10s %9s %7s\n", "matmul", "n_in", "n_out", "us", "GB/s", "copies");
            printf("  %-12s %7lld %7lld %10.1f %9.1f %7d\n", r->name, (long long)r->n_in, (long long)r->n_out, r->us, gbs, r->copies);
        }
    } else {
        if (pr->json) {
            struct json_out j;
            out_json_begin(&j);
            json_out_key(&j, "op"), json_out_str(&j, "attention");
            json_out_key(&j, "depth"), json_out_int(&j, r->depth);
            json_out_key(&j, "us_per_layer"), json_out_fixed(&j, r->us, 1);
            json_out_key(&j, "kv"), json_out_str(&j, "f16");
            end_line(&j, pr);
        } else {
            if (!pr->last_op || strcmp(pr->last_op, r->op)) printf("\n  %-12s %9s\n", "attention", "us/layer");
            printf("  %-12d %9.1f\n", r->depth, r->us);
        }
    }
    pr->last_op = r->op;
    fflush(stdout);
}

/* "2048,8192" -> depths; -1 on a bad list */
static int parse_depths(const char *s, int *out) {
    int n = 0;
    const char *at = s;
    while (*at) {
        char num[32];
        size_t len = strcspn(at, ",");
        long d;
        if (len == 0 || len >= sizeof num || n == MAX_DEPTHS) return -1;
        memcpy(num, at, len), num[len] = 0;
        if (parse_int(num, 1, 1 << 24, &d)) return -1;
        out[n++] = (int)d;
        at += len + (at[len] == ',');
    }
    return n ? n : -1;
}

int cmd_bench_ops(int argc, char **argv) {
    const char *backend = "cpu", *shape_name = "r1-distill-qwen-7b", *type_name = "BF16", *depth_list = "2048,8192,32768";
    long reps = 20, threads = 2, device = 0, tokens = 1, cold = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "bench-ops: %s needs a value\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--type")) type_name = v;
        else if (!strcmp(a, "--depths")) depth_list = v;
        else if (!strcmp(a, "--reps")) { if (parse_int(v, 1, 100000, &reps)) { fprintf(stderr, "bench-ops: bad --reps '%s'\n", v); return 2; } }
        else if (!strcmp(a, "--tokens")) { if (parse_int(v, 1, 4096, &tokens)) { fprintf(stderr, "bench-ops: bad --tokens '%s' (1..4096)\n", v); return 2; } }
        else if (!strcmp(a, "--cold")) { if (parse_int(v, 0, 65536, &cold)) { fprintf(stderr, "bench-ops: bad --cold '%s' (0..65536 MiB)\n", v); return 2; } }
        else if (!strcmp(a, "-t")) { if (parse_int(v, 1, 256, &threads)) { fprintf(stderr, "bench-ops: bad -t '%s'\n", v); return 2; } }
        else if (!strcmp(a, "--device")) { if (parse_int(v, 0, 64, &device)) { fprintf(stderr, "bench-ops: bad --device '%s'\n", v); return 2; } }
        else { fprintf(stderr, "bench-ops: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    const model_shape *s = shapes_find(shape_name);
    if (!s) { fprintf(stderr, "bench-ops: unknown shape '%s'\n", shape_name); usage(stderr); return 2; }
    if (s->n_expert) { /* its FFN rows would be the dense n_ff's, which the model does not have */
        fprintf(stderr, "bench-ops: %s is a mixture of experts: its expert matmuls are not timed yet\n", s->name);
        return 2;
    }
    if (ggml_type_by_name(type_name) < 0) { fprintf(stderr, "bench-ops: unknown type '%s'\n", type_name); usage(stderr); return 2; }
    int depths[MAX_DEPTHS], n_depths = parse_depths(depth_list, depths);
    if (n_depths < 0) { fprintf(stderr, "bench-ops: bad --depths '%s' (up to %d positive counts, comma-separated)\n", depth_list, MAX_DEPTHS); return 2; }
    char err[512], desc[256] = "";
    printer pr = {.json = json, .reps = (int)reps, .backend = backend, .type = type_name};
    tkv_bench_ops_params p = {.backend = backend, .n_threads = (int)threads, .device = (int)device,
                              .n_embd = (int)s->n_embd, .n_head = (int)s->n_head, .n_head_kv = (int)s->n_head_kv,
                              .head_dim = (int)s->head_dim, .n_ff = (int)s->n_ff, .type = type_name,
                              .depths = depths, .n_depths = n_depths, .reps = (int)reps,
                              .seed = 0x9e3779b97f4a7c15ull, .n_tok = (int)tokens, .cold_mib = (int)cold};
    fprintf(stderr, "bench-ops: %s backend, %s, %s weights, %ld token(s) per matmul, %ld reps, wall clock over the reps "
            "ended by a read; %s\n", backend, s->name, type_name, tokens, reps,
            cold ? "weights cycled over copies (from memory)" : "one copy per matrix (cache-resident where it fits)");
    if (tkv_bench_ops(&p, print_row, &pr, desc, sizeof desc, err, sizeof err)) {
        fprintf(stderr, "bench-ops: %s\n", err);
        return 1;
    }
    fprintf(stderr, "bench-ops: kernels %s\n", desc);
    return 0;
}
