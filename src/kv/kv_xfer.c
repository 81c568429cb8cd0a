/* kv_xfer.c — transfer engine thread (see kv_xfer.h). One mutex guards the queue and the per-sequence
 * progress; the copies themselves run unlocked. */
#include "kv/kv_xfer.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/err.h"
#include "base/clock.h"

struct kv_xfer {
    xfer_layer_fn run_layer;
    void *ctx;
    int n_layer, n_seq;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work;     /* queue became non-empty or stop */
    pthread_cond_t progress; /* some layer finished */
    int *queue;              /* ring of n_seq sequence ids */
    int q_head, q_len;
    int *done;               /* [seq] layers finished of the last submitted batch (n_layer = all) */
    double *secs;            /* [seq] engine seconds of the last batch */
    int stop;
};

static void *engine_main(void *arg) {
    kv_xfer *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (x->q_len == 0 && !x->stop) pthread_cond_wait(&x->work, &x->mu);
        if (x->q_len == 0 && x->stop) break;
        int seq = x->queue[x->q_head];
        x->q_head = (x->q_head + 1) % x->n_seq;
        x->q_len--;
        pthread_mutex_unlock(&x->mu);
        double t0 = tkv_now_s();
        for (int l = 0; l < x->n_layer; l++) {
            x->run_layer(x->ctx, seq, l);
            pthread_mutex_lock(&x->mu);
            x->done[seq] = l + 1;
            if (l + 1 == x->n_layer) x->secs[seq] = tkv_now_s() - t0;
            pthread_cond_broadcast(&x->progress);
            pthread_mutex_unlock(&x->mu);
        }
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

kv_xfer *xfer_init(xfer_layer_fn run_layer, void *ctx, int n_layer, int n_seq) {
    kv_xfer *x = tkv_xcalloc(1, sizeof *x);
    x->run_layer = run_layer;
    x->ctx = ctx;
    x->n_layer = n_layer;
    x->n_seq = n_seq;
    x->queue = tkv_xcalloc((size_t)n_seq, sizeof(int));
    x->done = tkv_xcalloc((size_t)n_seq, sizeof(int));
    x->secs = tkv_xcalloc((size_t)n_seq, sizeof(double));
    for (int s = 0; s < n_seq; s++) x->done[s] = n_layer;
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
    free(x->queue);
    free(x->done);
    free(x->secs);
    free(x);
}

void xfer_submit(kv_xfer *x, int seq) {
    pthread_mutex_lock(&x->mu);
    TKV_ASSERT(x->done[seq] == x->n_layer && x->q_len < x->n_seq);
    x->done[seq] = 0;
    x->secs[seq] = 0;
    x->queue[(x->q_head + x->q_len) % x->n_seq] = seq;
    x->q_len++;
    pthread_cond_signal(&x->work);
    pthread_mutex_unlock(&x->mu);
}

double xfer_wait_layer(kv_xfer *x, int seq, int layer) {
    pthread_mutex_lock(&x->mu);
    double t0 = 0;
    if (x->done[seq] <= layer) {
        t0 = tkv_now_s();
        while (x->done[seq] <= layer) pthread_cond_wait(&x->progress, &x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return t0 > 0 ? tkv_now_s() - t0 : 0.0;
}

int xfer_finished(kv_xfer *x, int seq) {
    pthread_mutex_lock(&x->mu);
    int f = x->done[seq] == x->n_layer;
    pthread_mutex_unlock(&x->mu);
    return f;
}

double xfer_batch_seconds(kv_xfer *x, int seq) {
    pthread_mutex_lock(&x->mu);
    double s = x->secs[seq];
    pthread_mutex_unlock(&x->mu);
    return s;
}
