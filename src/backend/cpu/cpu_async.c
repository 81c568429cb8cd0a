/* cpu_async.c — the test backend "cpu-async": the CPU backend with a GPU's ordering, so that the
 * races a GPU would show can fail a test on a machine without one.
 *
 * Three things differ from "cpu", each as the CUDA backend behaves:
 *   - copy_moves only queues its moves (per layer, in submission order, from any thread); copy_wait
 *     (layer) makes them due, and they run at the next op that touches the pools or waits for the
 *     device (kv_write, kv_read, attention, read, host_sync), as a copy stream's work is only known
 *     done once the compute queue has waited for it, and by the host once it has waited for that. A
 *     slot freed or read before its layer's copy_wait therefore holds the old bytes, or gets
 *     overwritten before the copy reads it: exactly the reuse races of a GPU; and a host pool's
 *     record the host reads or writes itself after copy_wait but before host_sync is as it was
 *     before the moves.
 *   - attention keeps a copy of the tables (slot tables, lengths, keep masks) it was given with a
 *     nonzero tables_gen, and a later call with the same tables_gen reads that copy instead of what it
 *     is given, as the CUDA backend reuses its device image (backend.h: the producer promises they
 *     are the same). A producer that breaks the promise gets the stale tables a GPU would read.
 *   - upload_pinned copies at once (the queue is this thread) but keeps a copy of its source and, at
 *     the next read, counts a hazard when the source changed meanwhile: a GPU's DMA, queued, could
 *     have read the new bytes (cpu_async_hazards).
 *   - a move may run before compute ops queued ahead of it, as a copy stream's does unless it was
 *     told to wait (copy_after_compute): each T0/T1/T2 record (tier, layer, slot) kv_write wrote or
 *     attention read since the last wait for the device (read, kv_read) or copy_after_compute is
 *     marked, and a move submitted meanwhile that reads a written record, or writes a written or read
 *     one, counts (cpu_async_order_hazards). STAGE is left out: the STAGE event orders its
 *     write-after-read (attention records it, copy_moves into STAGE waits on it).
 * And matmul adds the outputs' biases (matmul_bias), as the CUDA backend's does, so the forward's
 * path for such a backend runs here. step_begin/step_end count the calls bracketed and, as the CUDA
 * backend's graph capture ends early there, each wait inside a bracket (read, kv_read, copy_wait):
 * a break (cpu_async_steps). Everything else is the CPU backend's, bit for bit. Moves still
 * queued when the backend closes are dropped (the KV module fences every layer before it frees its
 * pools). Not for production use. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/clock.h"
#include "base/err.h"
#include "gguf/gguf.h"

typedef struct {
    const be_kv_pools *p;
    int first, n; /* moves[first .. first + n) of the layer's queue */
} pending_call;

typedef struct {
    be_move *moves;
    int n_moves, cap_moves;
    pending_call *calls;
    int n_calls, cap_calls;
} layer_queue;

/* one tier's marks: [layer][slot] epochs of kv_write's writes (w) and attention's reads (r); a mark
 * equal to the backend's epoch stands */
typedef struct {
    uint32_t *w, *r;
    int n_layer;
    int64_t n_slot;
} tier_marks;

typedef struct {
    cpu_be cpu; /* first: the CPU ops cast the backend to cpu_be */
    be_ops ops;
    pthread_mutex_t mu;
    layer_queue *q; /* [n_q] */
    int n_q;
    /* the tables of the last attention call with a nonzero tables_gen */
    uint64_t gen;
    int n_tok;
    int32_t **slots;
    int *n_pos;
    uint8_t **keep;
    int cap_tok;
    void **weights; /* the matrices' copies (prepare_weight) */
    int n_weights, cap_weights;
    /* upload_pinned since the last read: each source, and a copy of its bytes then */
    struct pinned_up { const void *src; void *copy; size_t bytes; } *ups;
    int n_ups, cap_ups;
    uint64_t hazards;
    tier_marks marks[BE_T2 + 1]; /* under mu (copy_moves comes from the transfer thread) */
    uint32_t epoch;              /* a wait for the device or copy_after_compute starts the next */
    uint64_t order_hazards;
    int in_step;                   /* between step_begin and step_end, no wait yet */
    uint64_t steps, breaks;
    double wait_s;                 /* in read and kv_read (host_wait_seconds) */
    /* the layers' queues whose copy_wait has come, in that order: they run at the next op that
     * touches the pools or waits for the device (kv_write, kv_read, attention, read, host_sync), as
     * a copy stream may still be running them while the host goes on; the host reading or writing a
     * host pool's record itself before host_sync sees the bytes from before the moves */
    struct due { int layer; layer_queue q; } *due;
    int n_due, cap_due;
} async_be;

static async_be *ab(be_backend *b) { return (async_be *)(void *)b; }

static void *grow(void *p, int *cap, int need, size_t item) {
    if (need <= *cap) return p;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *n = realloc(p, (size_t)c * item);
    TKV_ASSERT(n);
    *cap = c;
    return n;
}

/* ---- the order of moves after compute ---- */

/* room in m for (layer, slot) */
static void marks_fit(tier_marks *m, int layer, int64_t slot) {
    if (layer < m->n_layer && slot < m->n_slot) return;
    int nl = layer + 1 > m->n_layer ? layer + 1 : m->n_layer;
    int64_t ns = m->n_slot;
    while (ns <= slot) ns = ns ? 2 * ns : 1024;
    uint32_t *w = tkv_xcalloc((size_t)nl * (size_t)ns, sizeof *w), *r = tkv_xcalloc((size_t)nl * (size_t)ns, sizeof *r);
    for (int l = 0; l < m->n_layer; l++) {
        memcpy(w + (size_t)l * ns, m->w + (size_t)l * m->n_slot, (size_t)m->n_slot * sizeof *w);
        memcpy(r + (size_t)l * ns, m->r + (size_t)l * m->n_slot, (size_t)m->n_slot * sizeof *r);
    }
    free(m->w), free(m->r);
    m->w = w, m->r = r, m->n_layer = nl, m->n_slot = ns;
}

/* the mark of reference ref at a call's layer (the pool's record layer), NULL for STAGE; wr 1: the
 * write marks, 0: the read marks */
static uint32_t *mark_of(async_be *a, const be_kv_pools *p, int32_t ref, int layer, int wr) {
    int tier = BE_SLOT_TIER(ref);
    if (tier > BE_T2) return NULL;
    int ls = p->pool[tier].layers > 0 ? p->pool[tier].layers : 1;
    tier_marks *m = &a->marks[tier];
    marks_fit(m, layer % ls, BE_SLOT_IDX(ref));
    return (wr ? m->w : m->r) + (size_t)(layer % ls) * (size_t)m->n_slot + (size_t)BE_SLOT_IDX(ref);
}

/* everything queued so far is ordered before what comes next */
static void marks_clear(async_be *a) {
    pthread_mutex_lock(&a->mu);
    if (++a->epoch == 0) { /* wrapped: old marks could stand again */
        for (int t = 0; t <= BE_T2; t++) free(a->marks[t].w), free(a->marks[t].r), a->marks[t] = (tier_marks){0};
        a->epoch = 1;
    }
    pthread_mutex_unlock(&a->mu);
}

/* (under mu) */
static void mark_rows(async_be *a, const be_kv_pools *p, int layer, const int32_t *refs, int n, int wr) {
    for (int i = 0; i < n; i++) {
        uint32_t *m = refs[i] == BE_SLOT_NONE ? NULL : mark_of(a, p, refs[i], layer, wr);
        if (m) *m = a->epoch;
    }
}

/* the moves submitted now against the marks (under mu) */
static void check_order(async_be *a, const be_kv_pools *p, const be_move *moves, int n, int layer) {
    for (int i = 0; i < n; i++) {
        const uint32_t *sw = mark_of(a, p, moves[i].src, layer, 1);
        const uint32_t *dw = mark_of(a, p, moves[i].dst, layer, 1), *dr = mark_of(a, p, moves[i].dst, layer, 0);
        a->order_hazards += (sw && *sw == a->epoch) || (dw && *dw == a->epoch) || (dr && *dr == a->epoch);
    }
}

uint64_t cpu_async_order_hazards(const be_backend *b) {
    async_be *a = (async_be *)(void *)(uintptr_t)b;
    pthread_mutex_lock(&a->mu);
    uint64_t n = a->order_hazards;
    pthread_mutex_unlock(&a->mu);
    return n;
}

static void async_copy_after_compute(be_backend *b) { marks_clear(ab(b)); }

void cpu_async_copy_order(be_backend *b, int on) { ab(b)->ops.copy_after_compute = on ? async_copy_after_compute : NULL; }

/* ---- copies: queued per layer, due at copy_wait, run at the next op that needs them ---- */

static void run_queue(be_backend *b, layer_queue *q, int layer) {
    for (int i = 0; i < q->n_calls; i++) cpu_be_copy_moves(b, q->calls[i].p, q->moves + q->calls[i].first, q->calls[i].n, layer);
    free(q->moves);
    free(q->calls);
}

/* Runs the due queues (taken whole under the lock). */
static void run_due(be_backend *b) {
    async_be *a = ab(b);
    pthread_mutex_lock(&a->mu);
    struct due *d = a->due;
    int n = a->n_due;
    a->due = NULL;
    a->n_due = a->cap_due = 0;
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < n; i++) run_queue(b, &d[i].q, d[i].layer);
    free(d);
}

static void async_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                           const float *v) {
    run_due(b);
    pthread_mutex_lock(&ab(b)->mu);
    mark_rows(ab(b), p, layer, slots, n, 1);
    pthread_mutex_unlock(&ab(b)->mu);
    cpu_be_ops()->kv_write(b, p, layer, slots, n, k, v);
}

/* a wait for the device: inside a bracket, where the CUDA backend's capture would end; and every
 * op queued has run */
static void note_wait(async_be *a) {
    a->breaks += a->in_step;
    a->in_step = 0;
    marks_clear(a);
}

static void async_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer) {
    async_be *a = ab(b);
    if (n <= 0) return;
    TKV_ASSERT(layer >= 0);
    pthread_mutex_lock(&a->mu);
    check_order(a, p, moves, n, layer);
    if (layer >= a->n_q) {
        layer_queue *q = realloc(a->q, (size_t)(layer + 1) * sizeof *q);
        TKV_ASSERT(q);
        memset(q + a->n_q, 0, (size_t)(layer + 1 - a->n_q) * sizeof *q);
        a->q = q;
        a->n_q = layer + 1;
    }
    layer_queue *q = &a->q[layer];
    q->moves = grow(q->moves, &q->cap_moves, q->n_moves + n, sizeof *q->moves);
    q->calls = grow(q->calls, &q->cap_calls, q->n_calls + 1, sizeof *q->calls);
    memcpy(q->moves + q->n_moves, moves, (size_t)n * sizeof *moves);
    q->calls[q->n_calls++] = (pending_call){p, q->n_moves, n};
    q->n_moves += n;
    pthread_mutex_unlock(&a->mu);
}

static void async_step_begin(be_backend *b, int n_tok) {
    async_be *a = ab(b);
    TKV_ASSERT(!a->in_step && n_tok > 0); /* brackets do not nest */
    a->in_step = 1;
    a->steps++;
}

static void async_step_end(be_backend *b) { ab(b)->in_step = 0; }

void cpu_async_steps(const be_backend *b, uint64_t *steps, uint64_t *breaks) {
    const async_be *a = (const async_be *)(const void *)b;
    *steps = a->steps, *breaks = a->breaks;
}

static void async_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k,
                          float *v) {
    note_wait(ab(b));
    run_due(b);
    double t0 = tkv_now_s();
    cpu_be_ops()->kv_read(b, p, layer, slots, n, k, v);
    ab(b)->wait_s += tkv_now_s() - t0;
}

/* The layer's queued calls become due (they run, in order, before the next op that touches the
 * pools). The queue is taken whole under the lock; calls queued meanwhile (the transfer thread) wait
 * for the next copy_wait, as later stream work would. */
static void async_copy_wait(be_backend *b, int layer) {
    async_be *a = ab(b);
    note_wait(a);
    pthread_mutex_lock(&a->mu);
    if (layer >= 0 && layer < a->n_q && a->q[layer].n_calls > 0) {
        a->due = grow(a->due, &a->cap_due, a->n_due + 1, sizeof *a->due);
        a->due[a->n_due++] = (struct due){layer, a->q[layer]};
        memset(&a->q[layer], 0, sizeof a->q[layer]);
    }
    pthread_mutex_unlock(&a->mu);
}

/* The host waits for both queues: the due calls, then every layer's queued ones, run. */
static void async_host_sync(be_backend *b) {
    async_be *a = ab(b);
    note_wait(a);
    run_due(b);
    pthread_mutex_lock(&a->mu);
    int n = a->n_q;
    layer_queue *q = a->q;
    a->q = NULL;
    a->n_q = 0;
    pthread_mutex_unlock(&a->mu);
    for (int l = 0; l < n; l++) run_queue(b, &q[l], l);
    free(q);
}

/* Keeps copies of a's tables under its tables_gen. */
static void remember_tables(async_be *s, const be_attn *a) {
    if (a->n_tok > s->cap_tok) {
        int c = a->n_tok;
        s->slots = realloc(s->slots, (size_t)c * sizeof *s->slots);
        s->keep = realloc(s->keep, (size_t)c * sizeof *s->keep);
        s->n_pos = realloc(s->n_pos, (size_t)c * sizeof *s->n_pos);
        TKV_ASSERT(s->slots && s->keep && s->n_pos);
        for (int t = s->cap_tok; t < c; t++) s->slots[t] = NULL, s->keep[t] = NULL;
        s->cap_tok = c;
    }
    size_t keep_bytes = (size_t)a->n_head_kv * (size_t)a->keep_stride;
    for (int t = 0; t < a->n_tok; t++) {
        s->n_pos[t] = a->n_pos[t];
        free(s->slots[t]);
        s->slots[t] = tkv_xmalloc((size_t)(a->n_pos[t] > 0 ? a->n_pos[t] : 1) * sizeof(int32_t));
        memcpy(s->slots[t], a->slots[t], (size_t)a->n_pos[t] * sizeof(int32_t));
        free(s->keep[t]);
        s->keep[t] = NULL;
        if (a->keep && a->keep[t]) {
            s->keep[t] = tkv_xmalloc(keep_bytes ? keep_bytes : 1);
            memcpy(s->keep[t], a->keep[t], keep_bytes);
        }
    }
    s->n_tok = a->n_tok;
    s->gen = a->tables_gen;
}

/* marks the records of the tiers a reads (every position of its tables: a kernel may read a masked
 * one's slot) */
static void mark_reads(async_be *s, const be_attn *a) {
    unsigned tiers = a->tiers ? a->tiers : 0xfu;
    pthread_mutex_lock(&s->mu);
    for (int t = 0; t < a->n_tok; t++)
        for (int j = 0; j < a->n_pos[t]; j++) {
            int32_t r = a->slots[t][j];
            if (r != BE_SLOT_NONE && ((tiers >> BE_SLOT_TIER(r)) & 1u)) mark_rows(s, a->pools, a->layer, &r, 1, 0);
        }
    pthread_mutex_unlock(&s->mu);
}

static void async_attention(be_backend *b, const be_attn *a, void *scratch) {
    async_be *s = ab(b);
    run_due(b);
    if (!a->tables_gen) {
        mark_reads(s, a);
        cpu_be_attention(b, a, scratch);
        return;
    }
    if (a->tables_gen != s->gen || a->n_tok != s->n_tok) remember_tables(s, a);
    be_attn c = *a;
    c.slots = (const int32_t *const *)s->slots;
    c.n_pos = s->n_pos;
    c.keep = a->keep ? (const uint8_t *const *)s->keep : NULL;
    mark_reads(s, &c);
    cpu_be_attention(b, &c, scratch);
}

/* The matrix copied into the backend's own memory, then prepared as "cpu" prepares it */
static int async_prepare_weight(be_backend *b, be_mat *m, int role, char *err, size_t errlen) {
    async_be *a = ab(b);
    uint32_t blk = ggml_blck_size(m->type);
    if (!blk || m->n_in % blk)
        return tkv_errf(err, errlen, "weights of type %s with rows of %lld elements cannot be copied", ggml_type_name(m->type),
                        (long long)m->n_in);
    size_t bytes = (size_t)ggml_row_bytes(m->type, m->n_in) * (size_t)m->n_out;
    void *copy = tkv_xmalloc(bytes ? bytes : 1);
    memcpy(copy, m->data, bytes);
    a->weights = grow(a->weights, &a->cap_weights, a->n_weights + 1, sizeof *a->weights);
    a->weights[a->n_weights++] = copy;
    m->data = copy;
    return cpu_be_ops()->prepare_weight(b, m, role, err, errlen);
}

static void async_upload_pinned(be_backend *b, void *dst, const void *src, size_t bytes) {
    async_be *a = ab(b);
    memcpy(dst, src, bytes);
    a->ups = grow(a->ups, &a->cap_ups, a->n_ups + 1, sizeof *a->ups);
    struct pinned_up *u = &a->ups[a->n_ups++];
    u->src = src, u->bytes = bytes, u->copy = tkv_xmalloc(bytes ? bytes : 1);
    memcpy(u->copy, src, bytes);
}

/* The queue has run: each upload_pinned source must still hold what it held when it was queued */
static void check_uploads(async_be *a) {
    for (int i = 0; i < a->n_ups; i++) {
        a->hazards += memcmp(a->ups[i].src, a->ups[i].copy, a->ups[i].bytes) != 0;
        free(a->ups[i].copy);
    }
    a->n_ups = 0;
}

uint64_t cpu_async_hazards(const be_backend *b) { return ((const async_be *)(const void *)b)->hazards; }

/* A DMA into the caller's buffer (the CPU backend hands back its own memory) */
static const void *async_read(be_backend *b, const void *src, size_t bytes, void *host_tmp) {
    note_wait(ab(b));
    run_due(b);
    double t0 = tkv_now_s();
    check_uploads(ab(b));
    memcpy(host_tmp, src, bytes);
    ab(b)->wait_s += tkv_now_s() - t0;
    return host_tmp;
}

/* a GPU's host waits in its reads for the device; here the reads' own copies are the whole wait */
static double async_host_wait_seconds(be_backend *b) { return ab(b)->wait_s; }

static void async_close(be_backend *b) {
    async_be *a = ab(b);
    for (int l = 0; l < a->n_q; l++) {
        free(a->q[l].moves);
        free(a->q[l].calls);
    }
    free(a->q);
    for (int i = 0; i < a->n_due; i++) free(a->due[i].q.moves), free(a->due[i].q.calls);
    free(a->due);
    for (int t = 0; t < a->cap_tok; t++) free(a->slots[t]), free(a->keep[t]);
    free(a->slots);
    free(a->keep);
    free(a->n_pos);
    for (int i = 0; i < a->n_weights; i++) free(a->weights[i]);
    free(a->weights);
    check_uploads(a);
    free(a->ups);
    for (int t = 0; t <= BE_T2; t++) free(a->marks[t].w), free(a->marks[t].r);
    pthread_mutex_destroy(&a->mu);
    cpu_be_ops()->close(b); /* frees the workers and the struct itself (cpu is its first member) */
}

/* matmul adding the outputs' biases, as the CUDA backend's does (matmul_bias): the CPU's product,
 * then its add_bias on each output row, the bits of the caller's add_bias */
static void async_matmul(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                         void *scratch) {
    const be_ops *cpu = cpu_be_ops();
    cpu->matmul(b, outs, n_outs, n_in, x, n_tok, scratch);
    for (int i = 0; i < n_outs; i++)
        for (int64_t t = 0; outs[i].bias && t < n_tok; t++)
            cpu->add_bias(b, outs[i].y + t * outs[i].y_stride, outs[i].bias, 1, (int)outs[i].w->n_out);
}

int cpu_async_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    async_be *a = tkv_xcalloc(1, sizeof *a);
    if (cpu_be_init(&a->cpu, p, err, errlen)) {
        free(a);
        return -1;
    }
    a->ops = *cpu_be_ops();
    a->ops.name = "cpu-async";
    a->ops.attn_t2_fmts = 0; /* a GPU's data path: T2 rows staged */
    a->ops.close = async_close;
    a->ops.copy_moves = async_copy_moves;
    a->ops.copy_wait = async_copy_wait;
    a->ops.copy_after_compute = async_copy_after_compute;
    a->ops.host_sync = async_host_sync;
    a->ops.kv_write = async_kv_write;
    a->ops.attention = async_attention;
    a->ops.unified = 0; /* device memory apart: the callers' GPU paths */
    a->ops.read = async_read;
    a->ops.upload_pinned = async_upload_pinned;
    a->ops.prepare_weight = async_prepare_weight;
    a->ops.matmul = async_matmul;
    a->ops.matmul_bias = 1; /* the biases in the product, as on a GPU */
    a->ops.kv_read = async_kv_read;
    a->ops.step_begin = async_step_begin;
    a->ops.step_end = async_step_end;
    a->ops.host_wait_seconds = async_host_wait_seconds;
    a->cpu.base.ops = &a->ops;
    pthread_mutex_init(&a->mu, NULL);
    a->epoch = 1;
    *out = &a->cpu.base;
    return 0;
}
