/* job.c — the shared completion request (see job.h). */
#include "serve/job.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/err.h"

/* A lock and a condition whose timed waits count on the monotonic clock. */
static void sync_init(pthread_mutex_t *mu, pthread_cond_t *cv) {
    pthread_mutex_init(mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* refs += d under mu; 1 when that was the last reference */
static int refs_add(pthread_mutex_t *mu, int *refs, int d) {
    pthread_mutex_lock(mu);
    int last = (*refs += d) == 0;
    pthread_mutex_unlock(mu);
    return last;
}

serve_signal *serve_signal_new(void) {
    serve_signal *s = tkv_xcalloc(1, sizeof *s);
    sync_init(&s->mu, &s->cv);
    s->refs = 1;
    return s;
}

void serve_signal_ref(serve_signal *s) { refs_add(&s->mu, &s->refs, 1); }

void serve_signal_unref(serve_signal *s) {
    if (!s || !refs_add(&s->mu, &s->refs, -1)) return;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

unsigned long serve_signal_gen(serve_signal *s) {
    pthread_mutex_lock(&s->mu);
    unsigned long g = s->gen;
    pthread_mutex_unlock(&s->mu);
    return g;
}

/* t + 200 ms: how often a waiter asks whether its client is still there */
static struct timespec plus_200ms(struct timespec t) {
    t.tv_nsec += 200 * 1000 * 1000;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

int serve_signal_wait(serve_signal *s, unsigned long seen, int (*gone)(void *), void *gctx) {
    pthread_mutex_lock(&s->mu);
    while (s->gen == seen) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until = plus_200ms(until);
        int rc = 0;
        while (s->gen == seen && rc == 0) rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
        if (s->gen == seen && gone && gone(gctx)) {
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void serve_job_wake_locked(serve_job *j) {
    pthread_cond_broadcast(&j->cv);
    if (!j->sig) return;
    pthread_mutex_lock(&j->sig->mu);
    j->sig->gen++;
    pthread_cond_broadcast(&j->sig->cv);
    pthread_mutex_unlock(&j->sig->mu);
}

serve_job *serve_job_new(serve_request *req) {
    serve_job *j = tkv_xcalloc(1, sizeof *j);
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->created = (long long)time(NULL);
    j->t_submit = tkv_now_s();
    atomic_init(&j->cancelled, 0);
    sync_init(&j->mu, &j->cv);
    j->refs = 1;
    return j;
}

void serve_job_ref(serve_job *j) { refs_add(&j->mu, &j->refs, 1); }

void serve_job_unref(serve_job *j) {
    if (!j || !refs_add(&j->mu, &j->refs, -1)) return;
    serve_request_free(&j->req);
    tkv_buf_free(&j->content);
    tkv_buf_free(&j->reasoning);
    free(j->lps);
    tkv_buf_free(&j->lp_bytes);
    serve_signal_unref(j->sig);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void serve_job_set_phase(serve_job *j, int phase) {
    pthread_mutex_lock(&j->mu);
    if (phase > j->phase) j->phase = phase;
    serve_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

void serve_job_fail(serve_job *j, const serve_error *e) {
    pthread_mutex_lock(&j->mu);
    j->err = *e;
    j->phase = JOB_DONE;
    serve_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

static int ready(const serve_job *j, int min_phase, const size_t *seen_c, const size_t *seen_r) {
    if (j->phase >= min_phase || j->phase == JOB_DONE) return 1;
    return seen_c && seen_r && (j->content.n > *seen_c || j->reasoning.n > *seen_r);
}

int serve_job_wait_locked(serve_job *j, int min_phase, const size_t *seen_c, const size_t *seen_r, int (*gone)(void *),
                          void *gctx) {
    /* the client is asked about every 200 ms of waiting, however often the engine wakes us (it
     * broadcasts on every token of every reader's job) */
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!ready(j, min_phase, seen_c, seen_r)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
            if (gone && gone(gctx)) {
                atomic_store(&j->cancelled, 1);
                return -1;
            }
            next = plus_200ms(now);
        }
        pthread_cond_timedwait(&j->cv, &j->mu, &next);
    }
    return 0;
}
