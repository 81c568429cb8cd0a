/* metrics.h — the server's counters and GET /metrics in the Prometheus text format (version
 * 0.0.4): requests by endpoint and status, tokens, speed, queue, live sequences, and the KV
 * hierarchy's own numbers from tkv_stats_get(session, -1) (tokens and bytes per tier, the T0
 * budget and its peak, bytes moved, evictions, shared-prefix savings) with the prefix cache's.
 *
 * Threads: serve_metrics_count is called by any HTTP thread (a mutex); the engine-side numbers
 * come in a snapshot the worker publishes (serve_snapshot, copied under the worker's lock).
 * Rendering is pure: counters and snapshot in, text out. */
#ifndef TKV_SERVE_METRICS_H
#define TKV_SERVE_METRICS_H
#include <pthread.h>
#include <stdint.h>

#include "sched/sched.h"
#include "tierkv.h"

/* What the engine thread knows, as of its last step. */
typedef struct {
    int kv_ok;               /* 1: kv was read */
    tkv_stats kv;            /* the session: tkv_stats_get(s, -1) */
    int64_t token_bytes_t0;  /* bytes one token takes in T0 */
    sched_info si;
    int queued, running;     /* requests waiting for a sequence (with the inbox), decoding */
    double tokens_per_s;     /* generated tokens per second over the last few seconds */
    double ttft_sum;         /* seconds from arrival to the first token, summed */
    int64_t ttft_count;
    int64_t refused, failed, cancelled; /* jobs that ended so */
    int parallel, max_queue;
} serve_snapshot;

enum {
    SERVE_EP_CHAT, SERVE_EP_COMPLETIONS, SERVE_EP_MODELS, SERVE_EP_HEALTH, SERVE_EP_METRICS, SERVE_EP_TOKENIZE,
    SERVE_EP_DETOKENIZE, SERVE_EP_OTHER, SERVE_EP_COUNT
};

#define SERVE_MAX_STATUS 24
typedef struct {
    pthread_mutex_t mu;
    struct { int status; int64_t n[SERVE_EP_COUNT]; } by_status[SERVE_MAX_STATUS];
    int n_status;
    int64_t rejected_full;   /* 503: the queue was full */
    double t_start;          /* monotonic, for the uptime */
} serve_metrics;

void serve_metrics_init(serve_metrics *m);
void serve_metrics_free(serve_metrics *m);
/* One response sent: endpoint SERVE_EP_*, HTTP status. */
void serve_metrics_count(serve_metrics *m, int endpoint, int status);
/* The whole page (malloc'd, NUL-terminated). */
char *serve_metrics_render(serve_metrics *m, const serve_snapshot *s);

#endif
