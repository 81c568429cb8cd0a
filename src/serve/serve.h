/* serve.h — `tierkv serve` as a library call: an OpenAI-compatible HTTP server over one model and
 * one session. serve_start opens the session (parallel requests, plus the prefix cache's
 * sequences, under one T0 budget), the engine thread (worker.h) and the listener (http.h), and
 * returns; serve_stop ends every request and closes everything. The caller owns the model and
 * waits (for a signal) in between.
 *
 * The parts, one concern each: http.c (transport, limits, key), request.c (bytes -> request,
 * pure), response.c (JSON and SSE, pure), reasoning.c (the <think> split, pure), metrics.c
 * (Prometheus text), job.c (a request shared by two threads), worker.c (the engine thread),
 * api.c (the routes); the batching itself is src/sched/. */
#ifndef TKV_SERVE_H
#define TKV_SERVE_H
#include <stddef.h>

#include "serve/http.h"
#include "serve/request.h"
#include "tierkv.h"

typedef struct {
    tkv_model *model;          /* opened by the caller; outlives the server */
    const char *model_name;    /* in responses */
    const char *template_name; /* chat format; NULL: the file's (chatml when the file names none) */
    tkv_session_params sp;     /* KV flags, max_ctx (--ctx: prompt + generation per request), max_batch;
                                  max_seqs is set here */
    int parallel;              /* requests decoding together */
    int max_queue;             /* requests waiting for a sequence beyond those */
    int prefix_entries;        /* prefix cache entries (0: off) */
    int conv_entries;          /* kept conversations (0: off) */
    int64_t conv_bytes;        /* their rows in every tier at most (0: no bound but their count) */
    const char *park_dir;      /* kept conversations beyond those bounds, and all at stop, parked here
                                  (NULL: none; serve/park_dir.h) and restored by a request that continues one */
    int64_t park_bytes;        /* records parked at most (0: no bound) */
    int keep_thinking;         /* --history-thinking keep (1) or strip (0, the template's rule) */
    const char *park_store;    /* or a shared store, redis://HOST:PORT[/DB] (serve/park_redis.h): every
                                  conversation written as its request ends, for every replica */
    int default_max_tokens;    /* for requests that give none (0: what the context leaves) */
    serve_http_opts http;
    serve_limits lim;
    FILE *log;                 /* one line per notice; NULL: quiet */
} serve_opts;
void serve_opts_default(serve_opts *o);

typedef struct serve serve;
int serve_start(const serve_opts *o, serve **out, char *err, size_t errlen);
int serve_port(const serve *s);
void serve_stop(serve *s);

#endif
