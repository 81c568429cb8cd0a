/* api.h — the routes: POST /v1/chat/completions and /v1/completions (OpenAI's shapes, streamed by
 * server-sent events or whole), POST /tokenize and /detokenize (llama-server's; tokenize.h), GET
 * /v1/models, /health and /metrics. A completion is parsed
 * (request.h), handed to the worker as a job (503 with Retry-After at once when the worker is
 * full), and answered from the job's text as it grows; a client that hangs up while it waits or
 * streams cancels the job (the engine frees its sequence at its next step).
 * Not done here: the transport (http.c), tokens (worker.c). */
#ifndef TKV_SERVE_API_H
#define TKV_SERVE_API_H
#include <stdatomic.h>
#include <stdint.h>

#include "serve/http.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/worker.h"

typedef struct {
    const char *model;      /* the name in responses and /v1/models */
    long long created;      /* the server's start, for /v1/models */
    serve_limits lim;
    serve_worker *w;
    int timeout_s;          /* the HTTP inactivity timeout (serve_http_opts) */
    serve_metrics metrics;
    atomic_ullong next_id;  /* response ids */
    uint64_t id_salt;
} serve_api;

/* serve_http_handler and serve_http_count for ctx = serve_api. */
enum MHD_Result serve_api_handle(void *ctx, struct MHD_Connection *c, const char *method, const char *url, const char *body,
                                 size_t n);
void serve_api_count(void *ctx, const char *url, int status);

#endif
