/* move_plan.c — the host time the CUDA backend spends planning a decode step's staging copies
 * (cuda_plan.h), the way it planned them before and the way it plans them now, in the same run.
 * Host code only: no GPU is needed, and the planner is the one the backend links.
 *
 *   build/bench/move_plan [--depths N,N,...] [--layers L] [--steps S] [--rounds R] [--batch]
 *
 * Defaults: depths 8192,32768; 28 layers (a 7B: 4 kv heads of 128, f16 records of 2 KiB, chunks of
 * 256 slots); 100 steps; 5 rounds. Each step stages T1's rows (half the depth: T0 holds 50%, and one
 * T1 slot in 97 is free) into their STAGE mirrors, in STAGE slot order as the KV cache lists them,
 * for every layer, and one move of the list changes from one step to the next (the list a
 * re-tiering or a demotion gives). Addresses are made up: planning reads none of the records.
 *   before: what cu_copy_moves did before 9b629d3: the list's groups found once a step by the pass
 *           over its sorted records (cu_group_moves_sorted; at the other layers its one-entry cache
 *           compared the list and copied the phases), then cu_runs_of per group at every layer;
 *   now:    cu_plan_moves_cached, which plans a list once (its groups in O(n) when no move reads
 *           another's destination and the destinations increase, as staging's) and moves its runs
 *           to the other layers.
 * With --batch, a batch of one tier move comes before each layer's staging list every other step (a
 * demotion making room in T0, which the transfer thread sends layer by layer): the old cache's one
 * entry then held the batch, and the staging list was grouped again at every layer of those steps.
 * That is the worst case: how the transfer thread's layers fall between the forward's depends on
 * their pace (it may be done with all layers before the forward's first).
 * The two alternate, `before` first in odd rounds; printed: the median of the rounds' ms per step
 * for each, and before / now. Both answers are checked equal at every layer of the first step. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_plan.h"

#define MAX_DEPTHS 8
#define MAX_ROUNDS 64

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    be_kv_pools p;
    be_move *mv, *mv_old; /* the list; the old cache's copy of the last list it grouped */
    int n, n_old, g_old, batch;
    uint8_t *phase;
    int *starts, *run_starts;
    cu_move_run *runs;
    uint64_t *ws;
    cu_group_cache cache;
} setup;

static int setup_init(setup *s, int depth, int layers) {
    memset(s, 0, sizeof *s);
    const int shift = 8, n_chunks = (depth >> shift) + 2;
    s->p.n_layer = layers, s->p.n_head_kv = 4, s->p.head_dim = 128;
    for (int t = 0; t < BE_N_POOLS; t++) {
        be_kv_pool *q = &s->p.pool[t];
        q->fmt = BE_KV_F16;
        q->mem = t == BE_T1 || t == BE_T2 ? BE_MEM_PINNED : BE_MEM_DEVICE;
        q->layers = t == BE_STAGE ? 2 : layers;
        q->chunk_shift = shift;
        q->n_chunks = n_chunks;
        q->record_bytes = be_kv_record_bytes(BE_KV_F16, 4, 128);
        q->chunks = malloc((size_t)n_chunks * sizeof *q->chunks);
        if (!q->chunks) return -1;
        for (int c = 0; c < n_chunks; c++) /* one address range per pool and chunk, never read */
            q->chunks[c] = (void *)(uintptr_t)(((uint64_t)(t + 1) << 44) + ((uint64_t)c << 34));
    }
    s->n = depth / 2;
    s->mv = malloc((size_t)s->n * sizeof *s->mv);
    s->mv_old = malloc((size_t)s->n * sizeof *s->mv_old);
    s->phase = malloc(2 * (size_t)s->n); /* the second half: the old cache's hand-out (groups_before) */
    s->starts = malloc(((size_t)s->n + 1) * sizeof *s->starts);
    s->run_starts = malloc(((size_t)s->n + 1) * sizeof *s->run_starts);
    s->runs = malloc((size_t)s->n * sizeof *s->runs);
    s->ws = malloc(CU_MOVE_WS_WORDS(s->n) * sizeof *s->ws);
    if (!s->mv || !s->mv_old || !s->phase || !s->starts || !s->run_starts || !s->runs || !s->ws) return -1;
    for (int k = 0, slot = 0; k < s->n; slot++) {
        if (slot % 97 == 5) continue; /* a free T1 slot */
        s->mv[k++] = (be_move){BE_SLOT(BE_T1, slot), BE_SLOT(BE_STAGE, slot)};
    }
    return 0;
}

static void setup_free(setup *s) {
    for (int t = 0; t < BE_N_POOLS; t++) free(s->p.pool[t].chunks);
    free(s->mv), free(s->mv_old), free(s->phase), free(s->starts), free(s->run_starts), free(s->runs), free(s->ws);
    cu_group_cache_free(&s->cache);
}

/* the step's change: the last move reads another T1 slot each step (a list no step had before: the
 * list planned once a step, not kept from an earlier one) */
static void next_step(setup *s, int step) {
    s->mv[s->n - 1].src = BE_SLOT(BE_T1, BE_SLOT_IDX(s->mv[s->n - 2].src) + 1 + step % 256);
}

/* the old one-entry group cache: grouped again unless the list is the last one it grouped */
static int groups_before(setup *s, const be_move *mv, int n, int layer) {
    if (n == s->n_old && !memcmp(mv, s->mv_old, (size_t)n * sizeof *mv)) {
        memcpy(s->phase + s->n, s->phase, (size_t)n); /* its phases handed out (kept apart: copied) */
        return s->g_old;
    }
    s->g_old = cu_group_moves_sorted(&s->p, mv, n, layer, s->phase, s->starts, s->ws);
    memcpy(s->mv_old, mv, (size_t)n * sizeof *mv), s->n_old = n;
    return s->g_old;
}

/* the runs of every group into out, one group after another; returns their number */
static int plan_before(setup *s, const be_move *mv, int n, int layer, cu_move_run *out) {
    int g = groups_before(s, mv, n, layer), total = 0;
    for (int k = 0; k < g; k++)
        total += cu_runs_of(&s->p, mv + s->starts[k], s->starts[k + 1] - s->starts[k], layer, s->phase + s->starts[k],
                            out + total);
    return total;
}

static int plan_now(setup *s, const be_move *mv, int n, int layer) {
    int g = cu_plan_moves_cached(&s->cache, &s->p, mv, n, layer, s->phase, s->starts, s->runs, s->run_starts, s->ws);
    return s->run_starts[g];
}

/* ms per step of `steps` steps of every layer (runs: the staging lists' runs, added up) */
static double time_steps(setup *s, int now, int layers, int steps, long *runs) {
    static const be_move demote = {BE_SLOT(BE_T0, 7), BE_SLOT(BE_T1, 3)};
    double t0 = now_s();
    for (int step = 0; step < steps; step++) {
        next_step(s, step);
        int batch = s->batch && step % 2;
        for (int l = 0; l < layers; l++) {
            if (batch) (void)(now ? plan_now(s, &demote, 1, l) : plan_before(s, &demote, 1, l, s->runs));
            *runs += now ? plan_now(s, s->mv, s->n, l) : plan_before(s, s->mv, s->n, l, s->runs);
        }
    }
    return (now_s() - t0) * 1e3 / steps;
}

/* the two answers at every layer of one step: the same runs, group after group */
static int answers_equal(setup *s, int layers) {
    cu_move_run *a = malloc((size_t)s->n * sizeof *a);
    int ok = a != NULL;
    for (int l = 0; ok && l < layers; l++) {
        int na = plan_before(s, s->mv, s->n, l, a), nb = plan_now(s, s->mv, s->n, l);
        ok = na == nb;
        for (int r = 0; ok && r < na; r++)
            ok = a[r].src == s->runs[r].src && a[r].dst == s->runs[r].dst && a[r].n == s->runs[r].n &&
                 a[r].phase == s->runs[r].phase;
    }
    free(a);
    return ok;
}

static int parse_int(const char *flag, const char *v, int lo, int hi) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "move_plan: %s wants an integer in [%d, %d], got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv) {
    int depths[MAX_DEPTHS] = {8192, 32768}, n_depths = 2, layers = 28, steps = 100, rounds = 5, batch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch")) {
            batch = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "move_plan: unknown or incomplete argument '%s' (--depths, --layers, --steps, --rounds, --batch)\n", a);
            return 2;
        }
        if (!strcmp(a, "--depths")) {
            n_depths = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (n_depths == MAX_DEPTHS) {
                    fprintf(stderr, "move_plan: at most %d depths\n", MAX_DEPTHS);
                    return 2;
                }
                depths[n_depths++] = parse_int("--depths", tok, 512, 1 << 20);
            }
            if (!n_depths) return fprintf(stderr, "move_plan: --depths is empty\n"), 2;
        } else if (!strcmp(a, "--layers")) layers = parse_int(a, v, 1, 1024);
        else if (!strcmp(a, "--steps")) steps = parse_int(a, v, 1, 100000);
        else if (!strcmp(a, "--rounds")) rounds = parse_int(a, v, 1, MAX_ROUNDS);
        else {
            fprintf(stderr, "move_plan: unknown argument '%s' (--depths, --layers, --steps, --rounds, --batch)\n", a);
            return 2;
        }
        i++;
    }
    printf("# staging plan per decode step, %d layers, T1 = half the depth, %d steps x %d rounds (medians)%s\n", layers,
           steps, rounds, batch ? "; a one-move batch between the layers' lists every other step" : "");
    printf("%8s %8s %10s %14s %12s %8s\n", "depth", "moves", "runs/layer", "before ms/step", "now ms/step", "ratio");
    for (int d = 0; d < n_depths; d++) {
        setup s;
        int bad = setup_init(&s, depths[d], layers);
        s.batch = batch;
        if (bad) {
            fprintf(stderr, "move_plan: out of host memory at depth %d\n", depths[d]);
            setup_free(&s);
            return 1;
        }
        if (!answers_equal(&s, layers)) {
            fprintf(stderr, "move_plan: the cached plan differs from the per-layer plan at depth %d\n", depths[d]);
            setup_free(&s);
            return 1;
        }
        double before[MAX_ROUNDS], now[MAX_ROUNDS];
        long runs = 0;
        for (int r = 0; r < rounds; r++) {
            int first_now = r % 2; /* before first in odd rounds (1st, 3rd, ...) */
            for (int k = 0; k < 2; k++) {
                int which = k ^ first_now;
                double ms = time_steps(&s, which, layers, steps, &runs);
                if (which) now[r] = ms;
                else before[r] = ms;
            }
        }
        qsort(before, (size_t)rounds, sizeof *before, cmp_double);
        qsort(now, (size_t)rounds, sizeof *now, cmp_double);
        double mb = before[rounds / 2], mn = now[rounds / 2];
        printf("%8d %8d %10ld %14.3f %12.3f %7.1fx\n", depths[d], s.n, runs / ((long)2 * rounds * steps * layers), mb, mn,
               mb / mn);
        setup_free(&s);
    }
    return 0;
}
