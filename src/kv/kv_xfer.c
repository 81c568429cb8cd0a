/* kv_xfer.c — transfer engine thread (see kv_xfer.h). One mutex guards the pending flag and the
 * progress; the copies themselves run unlocked. */
#include "kv/kv_xfer.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/clock.h"
#include "base/err.h"

struct kv_xfer {
    xfer_layer_fn run_layer;
    void *ctx;
    int n_layer;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* a batch was submitted, or stop */
    pthread_cond_t progress; /* some layer finished */
    int pending;             /* a submitted batch not started yet */
    int done;                /* layers finished of the last submitted batch (n_layer = all) */
    double secs;             /* engine seconds of the last batch */
    int stop;
};

static void *engine_main(void *arg) {
    kv_xfer *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->pending && !x->stop) pthread_cond_wait(&x->work, &x->mu);
        if (!x->pending && x->stop) break;
        x->pending = 0;
        pthread_mutex_unlock(&x->mu);
        double t0 = tkv_now_s();
        for (int l = 0; l < x->n_layer; l++) {
            x->run_layer(x->ctx, l);
            pthread_mutex_lock(&x->mu);
            x->done = l + 1;
            if (l + 1 == x->n_layer) x->secs = tkv_now_s() - t0;
            pthread_cond_broadcast(&x->progress);
            pthread_mutex_unlock(&x->mu);
        }
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

kv_xfer *xfer_init(xfer_layer_fn run_layer, void *ctx, int n_layer) {
    kv_xfer *x = tkv_xcalloc(1, sizeof *x);
    x->run_layer = run_layer;
    x->ctx = ctx;
    x->n_layer = n_layer;
    x->done = n_layer;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->work, NULL);
    pthread_cond_init(&x->progress, NULL);
    TKV_ASSERT(pthread_create(&x->thread, NULL, engine_main, x) == 0);
    return x;
}

void xfer_free(kv_xfer *x) {
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    x->stop = 1;
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
    pthread_join(x->thread, NULL);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->work);
    pthread_cond_destroy(&x->progress);
    free(x);
}

void xfer_submit(kv_xfer *x) {
    pthread_mutex_lock(&x->mu);
    TKV_ASSERT(x->done == x->n_layer && !x->pending);
    x->done = 0;
    x->secs = 0;
    x->pending = 1;
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
}

double xfer_wait_layer(kv_xfer *x, int layer) {
    pthread_mutex_lock(&x->mu);
    double t0 = 0;
    if (x->done <= layer) {
        t0 = tkv_now_s();
        while (x->done <= layer) pthread_cond_wait(&x->progress, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return t0 > 0 ? tkv_now_s() - t0 : 0.0;
}

int xfer_finished(kv_xfer *x) {
    pthread_mutex_lock(&x->mu);
    int f = x->done == x->n_layer;
    pthread_mutex_unlock(&x->mu);
    return f;
}

double xfer_batch_seconds(kv_xfer *x) {
    pthread_mutex_lock(&x->mu);
    double s = x->secs;
    pthread_mutex_unlock(&x->mu);
    return s;
}
