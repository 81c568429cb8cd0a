/* worker.h — the engine thread: the one thread that owns the session (include/tierkv.h allows one
 * at a time). HTTP threads hand jobs in through a bounded inbox and read their text from the job
 * (job.h); the engine thread tokenizes each job's prompt (chat template or text), checks it
 * against the context, and runs every job through the scheduler (src/sched), turning tokens into
 * text (detokenizer, stop strings, the reasoning split) as they come.
 *
 * Bounds: at most parallel + max_queue jobs are in the worker at once (decoding, waiting for a
 * sequence, or just handed in); one more is refused at once (serve_worker_submit returns -1 and
 * the HTTP side answers 503). Idle: with no job the thread sleeps on a condition variable.
 * Not done here: HTTP and JSON (api.c, http.c). */
#ifndef TKV_SERVE_WORKER_H
#define TKV_SERVE_WORKER_H
#include <stddef.h>

#include "serve/job.h"
#include "serve/metrics.h"
#include "tierkv.h"

typedef struct serve_worker serve_worker;

typedef struct {
    int parallel;        /* requests decoding together */
    int max_queue;       /* requests waiting beyond those */
    int prefix_entries;  /* prefix cache entries (0: off) */
    int conv_entries;    /* kept conversations (0: off) */
    int64_t conv_bytes;  /* their rows at most (0: no bound but their count) */
    const sched_park *park; /* their park store (NULL: none); outlives the worker */
    int keep_thinking;   /* --history-thinking keep: earlier turns' reasoning stays in a continued conversation */
    int ctx;             /* positions per request: prompt + max_tokens */
    int default_max_tokens; /* when a request gives none (capped by what the context leaves) */
    tkv_policy policy;
    tkv_chat *chat_think_off; /* the chat format with thinking off (chat_template_kwargs.enable_thinking
                                 false), outliving the worker; NULL: the format has no switch */
} serve_worker_opts;

/* Starts the engine thread on session s (which must hold parallel + prefix_entries + conv_entries sequences of ctx
 * positions); m and chat must outlive the worker. */
int serve_worker_start(tkv_model *m, tkv_session *s, tkv_chat *chat, const serve_worker_opts *o, serve_worker **out,
                       char *err, size_t errlen);
/* Ends every job (their clients get an error) and joins the thread; submissions fail from now on,
 * but the object stays valid (HTTP threads may still call it) until serve_worker_free. */
void serve_worker_stop(serve_worker *w);
void serve_worker_free(serve_worker *w);
/* Hands n jobs in together (the choices of one request; the worker takes a reference to each): all
 * or none, -1 when they do not fit or the worker is stopping (nothing taken). */
int serve_worker_submit(serve_worker *w, serve_job *const *jobs, int n);
/* The engine's numbers as of its last step. */
void serve_worker_snapshot(serve_worker *w, serve_snapshot *out);
/* The model, for its tokenizer only (which reads the immutable vocabulary: any thread may). */
const tkv_model *serve_worker_model(const serve_worker *w);

#endif
