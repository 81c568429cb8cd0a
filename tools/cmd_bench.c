/* cmd_bench.c — `tierkv bench`: prefill and decode tokens/s at several context depths, and the
 * aggregate decode speed of several sequences decoded together, as CSV or JSON. Token ids are
 * drawn from a fixed-seed generator: speed does not depend on them. Each number is the median of
 * --reps repetitions. KV flags apply, so `--policy hierarchy --hbm-ratio 0.5` measures the
 * hierarchy's cost against a `--policy full` run of the same command. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/hugemem.h"
#include "base/json.h"
#include "base/workers.h"
#include "cmds.h"
#include "common.h"
#include "out.h"
#include "kv_flags.h"
#include "base/clock.h"

#define MAX_DEPTHS 16
#define MAX_REPS 32
#define PAR_PROMPT 128 /* prompt of each sequence in the --parallel run */

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv bench [-m MODEL.gguf] [options]\n"
            "  -p, --n-prompt N     prefill tokens timed at each depth (default 512; 0 skips prefill)\n"
            "  -n, --n-gen N        decode steps timed at each depth (default 32; 0 skips decode)\n"
            "  -d, --depths LIST    context depths, comma-separated (default 0,1024,4096)\n"
            "      --parallel N     also time N sequences decoding together (aggregate tok/s)\n"
            "      --reps N         repetitions; the median is reported (default 3)\n"
            "      --depth-generated  the context of each depth is appended as generated tokens (scored and\n"
            "                       tiered like a chain of thought) instead of a protected prompt\n"
            "      --parallel-depth run the --parallel sequences at each depth (default: once, at a 128-token prompt)\n"
            "      --json           JSON lines instead of CSV\n"
            "      --stats-json FILE write the KV statistics (total and per sequence) as JSON at the end\n"
            "      --membw          also measure memory read bandwidth on the bench threads and print\n"
            "                       the decode floor it sets: weight bytes per token / bandwidth at depth 0,\n"
            "                       bandwidth / (weight bytes + depth x KV bytes per position) at a depth\n"
            "      --int8-peak      also measure the int8 peak of the CPU kernels' instructions on the bench\n"
            "                       threads and print prefill and batched decode as a share of it (2 int8\n"
            "                       operations per weight and token)\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int32_t rand_tok(int V) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int32_t)(rng_state % (uint64_t)(V > 1000 ? 1000 : V)) + (V > 2000 ? 1000 : 0);
}

/* An expert FFN's reads over `steps` decode steps of n_seq tokens: bytes read per step, against
 * what the routing allows (n_seq * experts per token at most; all experts at most where the host
 * groups the tokens by expert, while a backend that routes reads each token's own). */
static void report_experts(int json, const char *test, const tkv_model_info *info, uint64_t bytes, int steps, int n_seq) {
    if (!info->n_expert || steps < 1) return;
    double per = (double)bytes / steps, one = (double)info->expert_bytes;
    int most = n_seq * info->n_expert_used < info->n_expert ? n_seq * info->n_expert_used : info->n_expert;
    if (json) {
        struct json_out j;
        out_json_begin(&j);
        json_out_key(&j, "test"), json_out_str(&j, "experts");
        json_out_key(&j, "of"), json_out_str(&j, test);
        json_out_key(&j, "sequences"), json_out_int(&j, n_seq);
        json_out_key(&j, "expert_bytes_per_step"), json_out_fixed(&j, per, 0);
        json_out_key(&j, "experts_read_per_step"), json_out_fixed(&j, per / one, 2);
        json_out_key(&j, "experts_routed_at_most"), json_out_int(&j, most);
        json_out_key(&j, "experts"), json_out_int(&j, info->n_expert);
        out_json_end(&j);
    } else
        printf("# experts %s: %.1f MB of expert weights read per step = %.2f experts of %d (once a step for all "
               "their tokens where the host routes, once a token where the backend does; %d tokens x %d routed: at "
               "most %d on the host)\n",
               test, per / 1e6, per / one, info->n_expert, n_seq, info->n_expert_used, most);
}

/* Bytes a decode step read back from a backend that is not host memory, its reads (each a wait for
 * the device), the bytes split attention sent up (the host's partial results), and the seconds the
 * host spent blocked on the device (the rest of a step is the host's own work); none on the CPU: no
 * row */
static void report_read_back(int json, const char *test, int depth, uint64_t bytes, uint64_t reads, uint64_t sent,
                             double wait_s, int steps) {
    if (!bytes || steps < 1) return;
    double per = (double)bytes / steps, rps = (double)reads / steps, up = (double)sent / steps, w = wait_s / steps;
    if (json) {
        struct json_out j;
        out_json_begin(&j);
        json_out_key(&j, "test"), json_out_str(&j, "read_back");
        json_out_key(&j, "of"), json_out_str(&j, test);
        json_out_key(&j, "depth"), json_out_int(&j, depth);
        json_out_key(&j, "bytes_per_step"), json_out_fixed(&j, per, 0);
        json_out_key(&j, "reads_per_step"), json_out_fixed(&j, rps, 1);
        json_out_key(&j, "sent_bytes_per_step"), json_out_fixed(&j, up, 0);
        json_out_key(&j, "host_wait_s_per_step"), json_out_fixed(&j, w, 6);
        out_json_end(&j);
    } else
        printf("# read back %s at depth %d: %.3f MB per step in %.1f reads (attention weights, split queries, logits); "
               "split sent %.3f MB per step up; the host blocked on the device %.3f ms per step\n",
               test, depth, per / 1e6, rps, up / 1e6, w * 1e3);
}

/* How long the model and the session took to open: the backend, the weights read or mapped and
 * prepared (on a GPU: uploaded), then the KV pools. A GPU run's jobs each load the model, so this is
 * the part of a job's wall time that measures nothing else. */
static void report_load(int json, double model_s, double session_s, const tkv_model_info *info) {
    if (json) {
        struct json_out j;
        out_json_begin(&j);
        json_out_key(&j, "test"), json_out_str(&j, "load");
        json_out_key(&j, "model_s"), json_out_fixed(&j, model_s, 3);
        json_out_key(&j, "session_s"), json_out_fixed(&j, session_s, 3);
        json_out_key(&j, "weights_copied"), json_out_int(&j, info->weights_copied);
        json_out_key(&j, "backend"), json_out_str(&j, info->backend);
        out_json_end(&j);
    } else
        printf("# load: the model in %.3f s (weights %s, %s backend), the session in %.3f s\n", model_s,
               info->weights_copied ? "copied into huge pages" : "mapped", info->backend, session_s);
    fflush(stdout);
}

/* the prefill and batched rows of this run, for --int8-peak */
#define MAX_ROWS 64
static struct { char name[32]; double tps; } rows[MAX_ROWS];
static int n_rows;

static void report(int json, const char *test, int depth, int n_tok, int n_seq, double tps, const common_opts *c, const char *isa) {
    if (json) {
        struct json_out j;
        out_json_begin(&j);
        json_out_key(&j, "test"), json_out_str(&j, test);
        json_out_key(&j, "depth"), json_out_int(&j, depth);
        json_out_key(&j, "tokens"), json_out_int(&j, n_tok);
        json_out_key(&j, "sequences"), json_out_int(&j, n_seq);
        json_out_key(&j, "tok_per_s"), json_out_fixed(&j, tps, 3);
        json_out_key(&j, "threads"), json_out_int(&j, c->mp.n_threads);
        json_out_key(&j, "kernels"), json_out_str(&j, isa);
        json_out_key(&j, "policy"), json_out_str(&j, tkv_policy_name(c->sp.kv.policy));
        json_out_key(&j, "hbm_ratio"), json_out_fixed(&j, c->sp.kv.t0_ratio, 3);
        json_out_key(&j, "evict_ratio"), json_out_fixed(&j, c->sp.kv.evict_ratio, 3);
        out_json_end(&j);
    } else
        printf("%s,%d,%d,%d,%.3f,%d,%s,%s,%.3f,%.3f\n", test, depth, n_tok, n_seq, tps, c->mp.n_threads, isa,
               tkv_policy_name(c->sp.kv.policy), c->sp.kv.t0_ratio, c->sp.kv.evict_ratio);
    fflush(stdout);
    if (n_rows < MAX_ROWS && (test[0] == 'p' || strchr(test, 'x'))) {
        snprintf(rows[n_rows].name, sizeof rows[n_rows].name, "%s@%d", test, depth);
        rows[n_rows++].tps = tps;
    }
}

/* Each prefill and batched row as a share of the int8 peak: tok/s x 2 x multiply-adds per token. */
static int report_int8_peak(int json, const common_opts *c, const tkv_model_info *info) {
    double peak;
    const char *isa;
    char err[256];
    if (tkv_cpu_int8_peak(c->mp.kernels, c->mp.n_threads, 0.5, &peak, &isa, err, sizeof err)) {
        fprintf(stderr, "tierkv bench: --int8-peak: %s\n", err);
        return -1;
    }
    if (json) {
        struct json_out j;
        out_json_begin(&j);
        json_out_key(&j, "test"), json_out_str(&j, "int8_peak");
        json_out_key(&j, "kernels"), json_out_str(&j, isa);
        json_out_key(&j, "threads"), json_out_int(&j, c->mp.n_threads);
        json_out_key(&j, "gops"), json_out_fixed(&j, peak / 1e9, 1);
        json_out_key(&j, "macs_per_token"), json_out_fixed(&j, (double)info->weight_macs, 0);
        out_json_end(&j);
    } else
        printf("# int8 peak: %.1f GOPS on %d threads (%s kernels' instructions); %.0f M multiply-adds per token\n", peak / 1e9,
               c->mp.n_threads, isa, info->weight_macs / 1e6);
    for (int i = 0; i < n_rows && peak > 0; i++) {
        double share = rows[i].tps * 2.0 * (double)info->weight_macs / peak;
        if (json) {
            struct json_out j;
            out_json_begin(&j);
            json_out_key(&j, "test"), json_out_str(&j, "int8_share");
            json_out_key(&j, "of"), json_out_str(&j, rows[i].name);
            json_out_key(&j, "share"), json_out_fixed(&j, share, 4);
            out_json_end(&j);
        } else
            printf("# int8 peak share %s: %.1f%% (%.1f GOPS)\n", rows[i].name, 100 * share, rows[i].tps * 2.0 * info->weight_macs / 1e9);
    }
    return 0;
}

typedef struct { const uint64_t *buf; size_t n; uint64_t sums[64]; } bw_job;

/* Reads its share of the buffer with four independent sums (bandwidth-bound, not add-bound). */
static void bw_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    bw_job *J = ctx;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = i0; i + 3 < i1; i += 4) {
        a += J->buf[i];
        b += J->buf[i + 1];
        c += J->buf[i + 2];
        d += J->buf[i + 3];
    }
    J->sums[tid & 63] += a ^ b ^ c ^ d;
}

/* Read bandwidth in bytes/s over a buffer far larger than the caches, median of 5 passes. The
 * buffer gets the pages the weights get: huge pages when advised (the default load), else 4 KiB. */
static double measure_read_bandwidth(int threads, int huge) {
    size_t bytes = (size_t)512 << 20;
    bw_job J = {.n = bytes / 8};
    size_t len = 0;
    uint64_t *buf = huge ? tkv_huge_alloc(bytes, &len) : NULL;
    if (!buf) buf = tkv_xaligned(64, bytes), len = 0;
    for (size_t i = 0; i < J.n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    J.buf = buf;
    tkv_workers *workers = workers_init(threads);
    double s[5];
    for (int r = 0; r < 5; r++) {
        double t0 = tkv_now_s();
        workers_for_grain(workers, (int64_t)J.n, 4096, bw_task, &J);
        s[r] = (double)bytes / (tkv_now_s() - t0);
    }
    workers_free(workers);
    if (len) tkv_huge_free(buf, len);
    else free(buf);
    return median(s, 5);
}

/* Closes *seq if open and opens a fresh sequence of n_ctx positions in its place. */
static int reopen(tkv_session *e, int *seq, int n_ctx, int n_prompt, char *err, size_t errlen) {
    if (*seq >= 0) tkv_seq_close(e, *seq);
    *seq = -1;
    return tkv_seq_open(e, n_ctx, n_prompt, seq, err, errlen);
}

/* Opens the --parallel run's n sequences at their largest size and closes them again, so that a
 * budget they do not fit is refused before anything is timed, not after the single-sequence tests. */
static int parallel_fits(tkv_session *e, int *seqs, int n, int n_ctx, int n_prompt, char *err, size_t errlen) {
    int rc = 0;
    for (int q = 0; q < n && !rc; q++) rc = reopen(e, &seqs[q], n_ctx, n_prompt, err, errlen);
    for (int q = 0; q < n; q++) {
        if (seqs[q] >= 0) tkv_seq_close(e, seqs[q]);
        seqs[q] = -1;
    }
    return rc;
}

int cmd_bench(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    long n_prompt = 512, n_gen = 32, reps = 3, parallel = 0;
    int depths[MAX_DEPTHS] = {0, 1024, 4096}, n_depths = 3, json = 0, membw = 0, depth_gen = 0, par_depth = 0, int8_peak = 0;
    const char *stats_json = NULL;
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&c, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv bench: %s\n", err); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--membw")) { membw = 1; continue; }
        if (!strcmp(a, "--int8-peak")) { int8_peak = 1; continue; }
        if (!strcmp(a, "--depth-generated")) { depth_gen = 1; continue; }
        if (!strcmp(a, "--parallel-depth")) { par_depth = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "tierkv bench: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--stats-json")) stats_json = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (parse_int(v, 0, 1 << 20, &n_prompt)) { fprintf(stderr, "tierkv bench: bad %s '%s'\n", a, v); return 2; }
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (parse_int(v, 0, 1 << 20, &n_gen)) { fprintf(stderr, "tierkv bench: bad %s '%s'\n", a, v); return 2; }
        } else if (!strcmp(a, "--reps")) {
            if (parse_int(v, 1, MAX_REPS, &reps)) { fprintf(stderr, "tierkv bench: --reps wants 1..%d\n", MAX_REPS); return 2; }
        } else if (!strcmp(a, "--parallel")) {
            if (parse_int(v, 0, 4096, &parallel)) { fprintf(stderr, "tierkv bench: bad --parallel '%s'\n", v); return 2; }
        } else if (!strcmp(a, "-d") || !strcmp(a, "--depths")) {
            n_depths = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                long d;
                if (n_depths == MAX_DEPTHS || parse_int(tok, 0, 1 << 20, &d)) { fprintf(stderr, "tierkv bench: bad --depths '%s'\n", v); return 2; }
                depths[n_depths++] = (int)d;
            }
            if (!n_depths) { fprintf(stderr, "tierkv bench: empty --depths\n"); return 2; }
        } else { fprintf(stderr, "tierkv bench: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv bench: %s\n", err); return 1; }
    int max_depth = 0;
    for (int k = 0; k < n_depths; k++) if (depths[k] > max_depth) max_depth = depths[k];
    long need = max_depth + (n_prompt > n_gen * reps ? n_prompt : n_gen * reps) + 1;
    if (parallel > 1 && need < PAR_PROMPT + n_gen + 1) need = PAR_PROMPT + n_gen + 1; /* tokens the parallel run reads */
    if (parallel > 1 && par_depth && need < max_depth + n_gen + 2) need = max_depth + n_gen + 2;
    int dflags = depth_gen ? TKV_PREFILL_GENERATED : 0;
    if (c.ctx_given && need > c.sp.max_ctx) {
        fprintf(stderr, "tierkv bench: the runs need %ld positions, more than --ctx %d\n", need, c.sp.max_ctx);
        return 1;
    }
    c.sp.max_ctx = (int)need;
    int n_seq = parallel > 1 ? (int)parallel : 1;
    c.sp.max_seqs = n_seq;
    FILE *fj = NULL;
    if (stats_json && !(fj = fopen(stats_json, "w"))) {
        fprintf(stderr, "tierkv bench: cannot write --stats-json '%s': %s\n", stats_json, strerror(errno));
        return 1;
    }
    tkv_model *m = NULL;
    tkv_session *e = NULL;
    int32_t *toks = NULL, *step = NULL;
    float *logits = NULL;
    int *seqs = NULL;
    int rc = 1;
    double t_open = tkv_now_s();
    int open_rc = tkv_model_open(c.model_path, &c.mp, &m, err, sizeof err);
    double t_model = tkv_now_s();
    if (open_rc || tkv_session_open(m, &c.sp, &e, err, sizeof err)) {
        fprintf(stderr, "tierkv bench: %s\n", err);
        goto done;
    }
    tkv_model_info info;
    tkv_model_get_info(m, &info);
    double load_model_s = t_model - t_open, load_session_s = tkv_now_s() - t_model;
    int V = info.n_vocab;
    toks = tkv_xmalloc((size_t)need * sizeof(int32_t));
    logits = tkv_xmalloc((size_t)V * (size_t)n_seq * sizeof(float));
    seqs = tkv_xmalloc((size_t)n_seq * sizeof(int));
    step = tkv_xmalloc((size_t)n_seq * sizeof(int32_t));
    for (int k = 0; k < n_seq; k++) seqs[k] = -1;
    if (parallel > 1 && n_gen > 0) {
        int pl = par_depth ? (max_depth > 0 ? max_depth : 1) : PAR_PROMPT;
        if (parallel_fits(e, seqs, n_seq, pl + (int)n_gen + 1, par_depth && dflags ? 0 : pl, err, sizeof err)) goto fail;
    }
    double samples[MAX_REPS];
    /* after the checks that refuse a run (stdout stays empty then), before the first timed row */
    report_load(json, load_model_s, load_session_s, &info);
    if (!json) printf("test,depth,tokens,sequences,tok_per_s,threads,kernels,policy,hbm_ratio,evict_ratio\n");
    for (int k = 0; k < n_depths; k++) {
        int d = depths[k];
        for (int t = 0; t < need; t++) toks[t] = rand_tok(V);
        if (n_prompt > 0) {
            for (int r = 0; r < reps; r++) {
                if (reopen(e, &seqs[0], (int)need, d + (int)n_prompt, err, sizeof err)) goto fail;
                if (d > 0 && tkv_prefill_ex(e, seqs[0], toks, d, dflags, NULL, 0, err, sizeof err)) goto fail;
                double t0 = tkv_now_s();
                if (tkv_prefill(e, seqs[0], toks + d, (int)n_prompt, logits, 0, err, sizeof err)) goto fail;
                samples[r] = n_prompt / (tkv_now_s() - t0);
            }
            char name[32];
            snprintf(name, sizeof name, "pp%ld", n_prompt);
            report(json, name, d, (int)n_prompt, 1, median(samples, (int)reps), &c, info.kernels);
        }
        if (n_gen > 0) {
            /* the context is prefilled once; the repetitions then decode one after another, so
             * repetition r starts at depth d + 1 + r*n_gen (a small drift, against re-prefilling
             * thousands of tokens per repetition) */
            if (reopen(e, &seqs[0], (int)need, depth_gen ? 0 : d, err, sizeof err)) goto fail;
            if (d > 0 && tkv_prefill_ex(e, seqs[0], toks, d, dflags, NULL, 0, err, sizeof err)) goto fail;
            int at = d;
            /* one untimed step warms caches and the worker threads */
            if (tkv_decode(e, &seqs[0], &toks[at++], 1, logits, err, sizeof err)) goto fail;
            uint64_t xb = tkv_expert_bytes_read(e), rn0, rb = tkv_read_back_bytes(e, &rn0), sb = tkv_split_sent_bytes(e);
            double hw = tkv_host_wait_seconds(e);
            for (int r = 0; r < reps; r++) {
                double t0 = tkv_now_s();
                for (int st = 0; st < n_gen; st++)
                    if (tkv_decode(e, &seqs[0], &toks[at++], 1, logits, err, sizeof err)) goto fail;
                samples[r] = n_gen / (tkv_now_s() - t0);
            }
            char name[32];
            snprintf(name, sizeof name, "tg%ld", n_gen);
            report(json, name, d, (int)n_gen, 1, median(samples, (int)reps), &c, info.kernels);
            report_experts(json, name, &info, tkv_expert_bytes_read(e) - xb, (int)(reps * n_gen), 1);
            uint64_t rn1, rb1 = tkv_read_back_bytes(e, &rn1);
            report_read_back(json, name, d, rb1 - rb, rn1 - rn0, tkv_split_sent_bytes(e) - sb, tkv_host_wait_seconds(e) - hw,
                             (int)(reps * n_gen));
        }
    }
    for (int k = 0; parallel > 1 && n_gen > 0 && k < (par_depth ? n_depths : 1); k++) {
        /* every sequence gets its context (a short prompt, or each depth), then all decode together */
        int pl = par_depth ? (depths[k] > 0 ? depths[k] : 1) : PAR_PROMPT;
        int pflags = par_depth ? dflags : 0;
        uint64_t xb = 0, rb = 0, rn = 0, sb = 0;
        double hw = 0;
        for (int r = 0; r < reps; r++) {
            for (int q = 0; q < n_seq; q++) {
                if (reopen(e, &seqs[q], pl + (int)n_gen + 1, pflags ? 0 : pl, err, sizeof err)) goto fail;
                if (tkv_prefill_ex(e, seqs[q], toks, pl, pflags, NULL, 0, err, sizeof err)) goto fail;
            }
            double t0 = tkv_now_s();
            uint64_t xb0 = tkv_expert_bytes_read(e), rn0, rb0 = tkv_read_back_bytes(e, &rn0), sb0 = tkv_split_sent_bytes(e);
            double hw0 = tkv_host_wait_seconds(e);
            for (int g = 0; g < n_gen; g++) {
                /* each sequence its own token (an expert FFN routes them as it would distinct requests) */
                for (int q = 0; q < n_seq; q++) step[q] = toks[(pl + g + (long)q * 7919) % need];
                if (tkv_decode(e, seqs, step, n_seq, logits, err, sizeof err)) goto fail;
            }
            samples[r] = (double)n_gen * n_seq / (tkv_now_s() - t0);
            xb += tkv_expert_bytes_read(e) - xb0;
            uint64_t rn1, rb1 = tkv_read_back_bytes(e, &rn1);
            rb += rb1 - rb0, rn += rn1 - rn0, sb += tkv_split_sent_bytes(e) - sb0, hw += tkv_host_wait_seconds(e) - hw0;
        }
        char name[32];
        snprintf(name, sizeof name, "tg%ld_x%d", n_gen, n_seq);
        report(json, name, pl, (int)n_gen, n_seq, median(samples, (int)reps), &c, info.kernels);
        report_experts(json, name, &info, xb, (int)(reps * n_gen), n_seq);
        report_read_back(json, name, pl, rb, rn, sb, hw, (int)(reps * n_gen));
    }
    if (membw) {
        double bw = measure_read_bandwidth(c.mp.n_threads, info.weights_copied);
        double wb = (double)info.weight_bytes;
        /* the T0 record of every layer (K and V of each kv head) that one position adds to a step's reads */
        double kvp = (double)tkv_token_bytes(e, 0);
        if (json) {
            struct json_out j;
            out_json_begin(&j);
            json_out_key(&j, "test"), json_out_str(&j, "membw");
            json_out_key(&j, "read_gb_per_s"), json_out_fixed(&j, bw / 1e9, 2);
            json_out_key(&j, "weight_bytes"), json_out_fixed(&j, wb, 0);
            json_out_key(&j, "decode_floor_tok_per_s"), json_out_fixed(&j, bw / wb, 2);
            json_out_key(&j, "kv_bytes_per_position"), json_out_fixed(&j, kvp, 0);
            json_out_key(&j, "threads"), json_out_int(&j, c.mp.n_threads);
            out_json_end(&j);
        } else
            printf("# membw: %.2f GB/s read on %d threads (%s pages); weights %.0f MB per token -> decode at most %.2f tok/s;"
                   " at depth D: %.2f GB/s / (weights + D x %.0f B of KV)\n",
                   bw / 1e9, c.mp.n_threads, info.weights_copied ? "huge" : "4 KiB", wb / 1e6, bw / wb, bw / 1e9,
                   kvp);
    }
    if (int8_peak && report_int8_peak(json, &c, &info)) goto fail;
    if (fj) {
        tkv_sync(e);
        int jerr = tkv_stats_write_json(fj, e);
        jerr |= fclose(fj) != 0;
        fj = NULL;
        if (jerr) { fprintf(stderr, "tierkv bench: writing --stats-json '%s' failed\n", stats_json); goto done; }
    }
    rc = fflush(stdout) || ferror(stdout) ? 1 : 0;
    if (rc) fprintf(stderr, "tierkv bench: writing to stdout failed\n");
    goto done;
fail:
    fprintf(stderr, "tierkv bench: %s\n", err);
done:
    if (fj) fclose(fj);
    free(toks);
    free(logits);
    free(seqs);
    free(step);
    tkv_session_close(e);
    tkv_model_close(m);
    return rc;
}
