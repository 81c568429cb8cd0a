/* conns.c — open connections and the deadline for their requests (see conns.h): a list under one
 * lock, and a watcher thread that walks it every tick. The list is as long as the connections open
 * (bounded by the server's limit on them); a walk costs microseconds. */
#include "serve/conns.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"
#include "base/err.h"

struct serve_conn {
    int fd;
    double t0;     /* monotonic: the connection's start, or its last answer */
    int busy;      /* a request is being answered */
    int reaped;    /* shut down already */
    serve_conn *prev, *next;
};

struct serve_conns {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    serve_conn *head;
    double deadline, tick;
    int stop;
};

static void *watch(void *arg) {
    serve_conns *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        double now = tkv_now_s();
        for (serve_conn *c = s->head; c; c = c->next)
            if (!c->busy && !c->reaped && now - c->t0 > s->deadline) {
                shutdown(c->fd, SHUT_RDWR); /* its thread then sees the end and closes it */
                c->reaped = 1;
            }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(s->tick * 1e9);
        ts.tv_sec += ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&s->wake, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

serve_conns *serve_conns_start(double deadline_s, double tick_s) {
    serve_conns *s = tkv_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->deadline = deadline_s, s->tick = tick_s;
    if (pthread_create(&s->thread, NULL, watch, s)) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

void serve_conns_stop(serve_conns *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    TKV_ASSERT(!s->head); /* every connection told its end first */
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

serve_conn *serve_conns_add(serve_conns *s, int fd) {
    serve_conn *c = tkv_xcalloc(1, sizeof *c);
    c->fd = fd;
    c->t0 = tkv_now_s();
    c->busy = fd < 0; /* a socket unknown cannot be shut down: never watched */
    pthread_mutex_lock(&s->lock);
    c->next = s->head;
    if (s->head) s->head->prev = c;
    s->head = c;
    pthread_mutex_unlock(&s->lock);
    return c;
}

void serve_conns_remove(serve_conns *s, serve_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&s->lock);
    if (c->prev) c->prev->next = c->next;
    else s->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&s->lock);
    free(c);
}

void serve_conns_busy(serve_conns *s, serve_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&s->lock);
    c->busy = 1;
    pthread_mutex_unlock(&s->lock);
}

void serve_conns_idle(serve_conns *s, serve_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&s->lock);
    c->busy = c->fd < 0;
    c->t0 = tkv_now_s();
    pthread_mutex_unlock(&s->lock);
}

double serve_conns_age(serve_conns *s, const serve_conn *c) {
    if (!c) return 0;
    pthread_mutex_lock(&s->lock);
    double t0 = c->t0;
    pthread_mutex_unlock(&s->lock);
    return tkv_now_s() - t0;
}
