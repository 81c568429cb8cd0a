/* workers.c — persistent worker threads woken per job by a generation counter (see workers.h).
 * Workers spin briefly before sleeping on a condition variable, because decode issues thousands of
 * short jobs per second and a futex wake costs more than a short spin. */
#include "base/workers.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/err.h"

struct tkv_workers {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* n-1 workers */
    pthread_mutex_t mu;          /* guards sleeping / wake */
    pthread_cond_t cv;
    atomic_uint gen;             /* job generation; workers run when it changes */
    atomic_int pending;          /* workers still running the current job */
    atomic_int quit;
    tkv_work_fn fn;              /* current job */
    void *ctx;
    int64_t n_items, grain;
    int64_t chunk;               /* grains per claimed chunk */
    atomic_int_fast64_t next;    /* next chunk to claim */
};

typedef struct { tkv_workers *workers; int tid; } worker_arg;

/* Chunks are claimed from a shared counter, so a thread that the OS delays (these machines are
 * shared) leaves its work to the others instead of holding up the whole job. Which thread runs a
 * chunk never changes what the chunk computes. */
static void run_chunks(tkv_workers *p, int tid) {
    int64_t n = p->n_items, g = p->grain, per = p->chunk;
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        int64_t i0 = c * per * g, i1 = i0 + per * g;
        if (i0 >= n) return;
        if (i1 > n) i1 = n;
        p->fn(p->ctx, i0, i1, tid);
    }
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    tkv_workers *p = wa->workers;
    int tid = wa->tid;
    free(wa);
    unsigned seen = 0; /* the generation at workers_init: a job posted before this thread runs is still seen as new */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->quit)) {
            if (++spins < 20000) continue;
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        run_chunks(p, tid);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

tkv_workers *workers_init(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    tkv_workers *p = tkv_xcalloc(1, sizeof *p);
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->quit, 0);
    p->threads = tkv_xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = tkv_xmalloc(sizeof *wa);
        wa->workers = p;
        wa->tid = i;
        int rc = pthread_create(&p->threads[i], NULL, worker, wa);
        TKV_ASSERT(rc == 0);
    }
    return p;
}

void workers_free(tkv_workers *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int workers_threads(const tkv_workers *p) { return p ? p->n : 1; }

void workers_for_grain(tkv_workers *p, int64_t n, int64_t grain, tkv_work_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    /* about 4 chunks per thread: small enough to balance, large enough to keep rows together */
    int64_t grains = (n + grain - 1) / grain;
    p->chunk = (grains + 4 * p->n - 1) / (4 * p->n);
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, 0);
    /* Wait for the workers' last chunks. Spin a little (they usually end within microseconds of
     * each other), then yield: on a shared machine a worker may have been descheduled, and
     * spinning would hold the core it could run on (measured: 20% of an evaluation's cycles went
     * to this loop while another job shared the two cores). */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;) {
        if (++spins < 2000) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        sched_yield();
    }
}

void workers_for(tkv_workers *p, int64_t n, tkv_work_fn fn, void *ctx) { workers_for_grain(p, n, 1, fn, ctx); }
