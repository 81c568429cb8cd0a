/* job.h — one completion request as the HTTP thread that received it and the engine thread that
 * runs it share it. The HTTP side creates it from a parsed request, hands it to the worker, and
 * waits on it; the engine side appends the text as it is generated and marks it done.
 *
 * Invariants: the request is not changed after submission; every field below `mu` is read and
 * written under mu, and each change is broadcast on cv; text only grows (readers keep offsets);
 * `cancelled` only goes 0 -> 1 (an atomic, read by the engine once per step without the lock);
 * the job is freed when its last reference (one per side) goes.
 * Not done here: tokens, the model, sockets (the waiter is given a callback that says whether
 * its client is still there). */
#ifndef TKV_SERVE_JOB_H
#define TKV_SERVE_JOB_H
#include <pthread.h>
#include <stdatomic.h>

#include "base/buf.h"
#include "serve/request.h"
#include "serve/response.h"

enum { JOB_NEW, JOB_QUEUED, JOB_RUNNING, JOB_DONE };

/* The choices of one request (n > 1) are jobs of their own; one waiter follows them all through a
 * shared signal: a counter the engine bumps (under the signal's lock) whenever it wakes one of
 * them, so a waiter that read the counter before looking at the jobs cannot miss a change.
 * Lock order: a job's mu, then the signal's. */
typedef struct serve_signal {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long gen;
    int refs;
} serve_signal;
serve_signal *serve_signal_new(void);
void serve_signal_ref(serve_signal *s);
void serve_signal_unref(serve_signal *s);
unsigned long serve_signal_gen(serve_signal *s);
/* Waits until the counter differs from seen; gone(gctx) is asked about every 200 ms, -1 when the
 * client left (0 otherwise). */
int serve_signal_wait(serve_signal *s, unsigned long seen, int (*gone)(void *), void *gctx);

typedef struct serve_job {
    serve_request req;     /* parsed; owned */
    long long created;     /* seconds since the epoch, for the response objects */
    double t_submit;       /* monotonic */
    atomic_int cancelled;  /* 1: the client is gone; the engine ends the job at its next step */
    struct serve_job *next; /* the worker's inbox */
    int index;             /* the choice this job is in the answer (prompt p's choice i: p * n + i) */
    serve_signal *sig;     /* the request's signal when it has several choices (a reference), or NULL */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    int phase;             /* JOB_*: handed over, accepted and waiting for a sequence, running, done */
    serve_error err;       /* err.status != 0 when done: refused or failed (the message for the client) */
    tkv_buf content, reasoning;
    int with_reasoning;    /* the format has reasoning markers (the response carries reasoning_content) */
    const char *finish;    /* when done without error: "stop" or "length" */
    serve_lp *lps;         /* req.logprobs: one per generated token (not the end-of-generation one) */
    int n_lps, cap_lps;
    tkv_buf lp_bytes;      /* the tokens' bytes the lps point into */
    serve_usage usage;
} serve_job;

/* A job holding req (moved in: *req is emptied), one reference. */
serve_job *serve_job_new(serve_request *req);
void serve_job_ref(serve_job *j);
void serve_job_unref(serve_job *j);
/* Wakes the job's waiters (and its signal's). Call with mu held. */
void serve_job_wake_locked(serve_job *j);
/* Engine side: sets phase (and wakes the waiters). */
void serve_job_set_phase(serve_job *j, int phase);
/* Engine side: ends the job with an error for the client (status, type, message). */
void serve_job_fail(serve_job *j, const serve_error *e);
/* HTTP side: waits until phase >= min_phase, or (when seen_c/seen_r are not NULL) more text than
 * that. gone(gctx) is asked every ~200 ms; when it says the client left, the job is cancelled
 * and -1 returned (the engine is not asleep while it holds a job: it sees the flag at its next
 * step). 0 otherwise. Call with mu held. */
int serve_job_wait_locked(serve_job *j, int min_phase, const size_t *seen_c, const size_t *seen_r, int (*gone)(void *),
                          void *gctx);

#endif
