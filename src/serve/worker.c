/* worker.c — the engine thread (see worker.h).
 *
 * Invariants: only the engine thread touches the model (but for its tokenizer, which reads the
 * immutable vocabulary: /tokenize and /detokenize call it from HTTP threads), the chat template,
 * the session and the scheduler; HTTP threads touch the inbox, the counters n_pending/n_running and the published
 * snapshot, all under w->mu, and the jobs under each job's own lock. A job the worker accepted
 * holds one reference until the scheduler ends it (or preparation refuses it). */
#include "serve/worker.h"
#include "serve/jsonc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/err.h"
#include "sched/sched.h"
#include "serve/reasoning.h"

/* Engine-side state of one job. */
struct wjob {
    serve_worker *w;
    serve_job *job;
    int32_t *ids;
    int n_ids;
    int stale_from, stale_to; /* an earlier turn's reasoning kept in ids (--history-thinking keep) */
    tkv_sampler *smp;
    tkv_stop *stop;
    tkv_detok detok;
    serve_think think;
    char *piece, *shown; /* one token's text, and what the stop filter releases of it */
    int stopped;         /* a stop string matched: the rest of the text is dropped */
    int got_first;
    int started;         /* on_start was called: counted as running, not pending */
    jc_schema *schema;   /* response_format json_object / json_schema: the grammar the text follows */
    jc_state *jst;
    const char *jc_close; /* reasoning first (DeepSeek-R1, Qwen3 thinking): the grammar starts after this marker */
    char tail[32];       /* the last bytes generated while waiting for it */
    int n_tail;
    uint16_t *counts;    /* frequency/presence penalties: each token's count among the generated, */
    int32_t *seen;       /* and the distinct ones generated, in order */
    int n_seen;
};

struct serve_worker {
    tkv_model *m;
    tkv_session *s;
    tkv_chat *chat;
    serve_worker_opts o;
    sched *sc;
    int V;
    jc_vocab jv;          /* each token's bytes, for structured output's masks */
    size_t piece_cap;
    pthread_t th;
    int started;
    pthread_mutex_t mu;   /* guards the fields down to snap */
    pthread_cond_t cv;    /* new job, stop */
    serve_job *in_head, *in_tail;
    int n_pending;        /* handed in, not yet running nor ended */
    int n_running;
    int stop;
    serve_snapshot snap;
    /* engine thread only */
    tkv_buf tr, tc;     /* one token's reasoning and content */
    double rate_t;
    int64_t rate_tok;
    double rate;
    uint64_t seeds;
    int64_t refused, failed, cancelled, ttft_n;
    double ttft_sum;
};

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void wjob_free(struct wjob *wj) {
    if (!wj) return;
    jc_state_free(wj->jst);
    jc_free(wj->schema);
    free(wj->counts);
    free(wj->seen);
    free(wj->ids);
    tkv_sampler_close(wj->smp);
    tkv_stop_close(wj->stop);
    free(wj->piece);
    free(wj->shown);
    free(wj);
}

/* The chat format a request renders with: thinking on, or off (NULL when the format has no switch). */
static tkv_chat *job_chat(const serve_worker *w, const serve_request *r) {
    return r->think_off ? w->o.chat_think_off : w->chat;
}

/* The prompt's ids: the chat template over the messages, or the text, or the given ids. */
static int encode(serve_worker *w, const serve_request *r, struct wjob *wj, serve_error *e) {
    char msg[256];
    if (r->kind == SERVE_CHAT) {
        tkv_chat *chat = job_chat(w, r);
        if (!chat)
            return serve_error_set(e, 400, "invalid_request_error", "chat_template_kwargs", "unsupported_value",
                                   "enable_thinking false: this model's chat format (%s) has no thinking switch (qwen3 has)",
                                   tkv_chat_name(w->chat));
        int tool_turns = 0, n_calls = 0;
        for (int i = 0; i < r->n_msgs; i++) {
            tool_turns += r->msgs[i].n_tool_calls > 0 || !strcmp(r->msgs[i].role, "tool");
            n_calls += r->msgs[i].n_tool_calls;
        }
        if ((r->n_tools || tool_turns) && !tkv_chat_has_tools(w->chat))
            return serve_error_set(e, 400, "invalid_request_error", r->n_tools ? "tools" : "messages", "unsupported_value",
                                   "this model's chat template (%s) has no tool calls (Qwen2.5's ChatML, Llama 3.1 and Qwen3 have)",
                                   tkv_chat_name(w->chat));
        tkv_chat_msg *cm = tkv_xmalloc((size_t)r->n_msgs * sizeof *cm);
        tkv_chat_call *calls = tkv_xmalloc((size_t)(n_calls ? n_calls : 1) * sizeof *calls), *at = calls;
        for (int i = 0; i < r->n_msgs; i++) {
            const serve_msg *sm = &r->msgs[i];
            for (int k = 0; k < sm->n_tool_calls; k++) at[k] = (tkv_chat_call){sm->tool_calls[k].name, sm->tool_calls[k].arguments};
            cm[i] = (tkv_chat_msg){.role = sm->role, .content = sm->content, .tool_calls = sm->n_tool_calls ? at : NULL,
                                   .n_tool_calls = sm->n_tool_calls, .reasoning_content = sm->reasoning_content};
            at += sm->n_tool_calls;
        }
        wj->n_ids = tkv_chat_encode_tools(chat, cm, r->n_msgs, (const char *const *)r->tools, r->n_tools, 1, &wj->ids, msg,
                                          sizeof msg);
        free(calls);
        free(cm);
        if (wj->n_ids < 0) return serve_error_set(e, 400, "invalid_request_error", "messages", "invalid_value", "%s", msg);
    } else if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= w->V)
                return serve_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value",
                                       "token id %d (at %d) is out of the vocabulary (0..%d)", r->prompt_ids[i], i, w->V - 1);
        wj->n_ids = r->n_prompt_ids;
        wj->ids = tkv_xmalloc((size_t)(wj->n_ids ? wj->n_ids : 1) * sizeof(int32_t));
        memcpy(wj->ids, r->prompt_ids, (size_t)wj->n_ids * sizeof(int32_t));
    } else {
        size_t len = strlen(r->prompt);
        wj->n_ids = tkv_tokenize_alloc(w->m, r->prompt, len, TKV_TOK_ADD_SPECIAL, &wj->ids);
        if (wj->n_ids < 0) return serve_error_set(e, 413, "invalid_request_error", "prompt", "prompt_too_large", "the prompt is too large to tokenize");
    }
    const char *param = r->kind == SERVE_CHAT ? "messages" : "prompt";
    if (wj->n_ids < 1) return serve_error_set(e, 400, "invalid_request_error", param, "invalid_value", "the prompt is empty after tokenization");
    if (wj->n_ids >= w->o.ctx)
        return serve_error_set(e, 400, "invalid_request_error", param, "context_length_exceeded",
                               "the prompt is %d tokens; this server's context is %d positions (--ctx), which must also hold "
                               "at least one generated token",
                               wj->n_ids, w->o.ctx);
    return 0;
}

/* Checks and prepares a job on the engine thread; NULL and *e filled when it is refused. */
static struct wjob *prepare(serve_worker *w, serve_job *j, int *max_tokens, serve_error *e) {
    const serve_request *r = &j->req;
    struct wjob *wj = tkv_xcalloc(1, sizeof *wj);
    wj->w = w;
    wj->job = j;
    if (encode(w, r, wj, e)) goto fail;
    /* the answer of a kept conversation, sent back as text: its own ids (scheduler's thread: here) */
    if (!r->no_cache && !(r->echo && r->logprobs) &&
        sched_conv_splice(w->sc, &wj->ids, &wj->n_ids, r->cache_salt, &wj->stale_from, &wj->stale_to) &&
        wj->n_ids >= w->o.ctx) {
        serve_error_set(e, 400, "invalid_request_error", r->kind == SERVE_CHAT ? "messages" : "prompt", "context_length_exceeded",
                        "the prompt is %d tokens; this server's context is %d positions (--ctx)", wj->n_ids, w->o.ctx);
        goto fail;
    }
    int room = w->o.ctx - wj->n_ids;
    if (r->max_tokens > room) {
        serve_error_set(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                        "the prompt (%d tokens) and max_tokens %d need %d positions; this server's context is %d (--ctx)",
                        wj->n_ids, r->max_tokens, wj->n_ids + r->max_tokens, w->o.ctx);
        goto fail;
    }
    *max_tokens = r->max_tokens > 0 ? r->max_tokens : (w->o.default_max_tokens < room ? w->o.default_max_tokens : room);
    tkv_sampling so;
    tkv_sampling_default(&so);
    so.temperature = (float)r->temperature;
    so.top_p = (float)r->top_p;
    so.top_k = r->top_k;
    so.min_p = (float)r->min_p;
    so.repeat_penalty = (float)r->repetition_penalty; /* vLLM's: over the prompt and the output */
    so.repeat_last_n = -1;
    so.seed = r->has_seed ? r->seed : mix64(++w->seeds ^ (uint64_t)time(NULL)); /* a choice's own (api.c) */
    char msg[256];
    if (tkv_sampler_open(&so, w->V, &wj->smp, msg, sizeof msg)) {
        serve_error_set(e, 400, "invalid_request_error", "", "invalid_value", "%s", msg);
        goto fail;
    }
    wj->stop = tkv_stop_open((const char *const *)r->stops, r->n_stops);
    tkv_detok_init(&wj->detok);
    const char *open = NULL, *close = NULL;
    int by = 0;
    if (r->kind == SERVE_CHAT) tkv_chat_reasoning(job_chat(w, r), &open, &close, &by);
    serve_think_init(&wj->think, open, close, by);
    wj->piece = tkv_xmalloc(w->piece_cap);
    wj->shown = tkv_xmalloc(tkv_stop_out_size(wj->stop, w->piece_cap) + 16);
    for (int i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= w->V) {
            serve_error_set(e, 400, "invalid_request_error", "logit_bias", "invalid_value",
                            "logit_bias: token id %d is out of the vocabulary (0..%d)", r->bias_ids[i], w->V - 1);
            goto fail;
        }
    if (r->frequency_penalty != 0 || r->presence_penalty != 0) {
        wj->counts = tkv_xcalloc((size_t)w->V, sizeof *wj->counts);
        wj->seen = tkv_xcalloc((size_t)*max_tokens + 1, sizeof *wj->seen);
    }
    if (r->json_mode) {
        json_t *sc = r->json_mode == 2 ? json_loads(r->json_schema, 0, NULL) : NULL;
        char why[200];
        wj->schema = jc_compile(sc, why, sizeof why); /* checked when the request was read */
        json_decref(sc);
        if (!wj->schema) {
            serve_error_set(e, 400, "invalid_request_error", "response_format", "unsupported_value", "json_schema: %s", why);
            goto fail;
        }
        wj->jst = jc_start(wj->schema);
        /* the reasoning comes first, unconstrained (the model's own "<think>" too: Qwen3 with thinking on) */
        if (close && by != TKV_THINK_PROMPT_CLOSED) wj->jc_close = close;
    }
    return wj;
fail:
    wjob_free(wj);
    return NULL;
}

/* Before each token: logit_bias, OpenAI's frequency and presence penalties, and structured output's
 * mask (the tokens the grammar does not allow now; not while the reasoning that comes first runs) */
static void con_mask(void *con, float *row) {
    struct wjob *wj = con;
    const serve_request *r = &wj->job->req;
    for (int i = 0; i < r->n_bias; i++) row[r->bias_ids[i]] += r->bias_vals[i];
    for (int i = 0; i < wj->n_seen; i++) { /* OpenAI's penalties over the tokens generated so far */
        int32_t t = wj->seen[i];
        row[t] -= (float)(r->frequency_penalty * wj->counts[t] + r->presence_penalty);
    }
    if (wj->jst && !wj->jc_close) jc_mask(wj->jst, &wj->w->jv, row);
}

static void con_accept(void *con, int32_t tok) {
    struct wjob *wj = con;
    if (wj->counts && tok >= 0 && tok < wj->w->V) {
        if (!wj->counts[tok]) wj->seen[wj->n_seen++] = tok;
        if (wj->counts[tok] < UINT16_MAX) wj->counts[tok]++;
    }
    if (!wj->jst) return;
    const char *b = NULL;
    int n = tkv_token_piece(wj->w->m, tok, 0, &b);
    if (n <= 0) return;
    if (!wj->jc_close) { (void)jc_feed(wj->jst, b, (size_t)n); return; } /* the mask let only such bytes through */
    for (int i = 0; i < n; i++) { /* the last bytes, to see the close marker across tokens */
        if (wj->n_tail == (int)sizeof wj->tail) memmove(wj->tail, wj->tail + 1, sizeof wj->tail - 1), wj->n_tail--;
        wj->tail[wj->n_tail++] = b[i];
        size_t k = strlen(wj->jc_close);
        if ((size_t)wj->n_tail >= k && !memcmp(wj->tail + wj->n_tail - k, wj->jc_close, k)) {
            wj->jc_close = NULL; /* the answer, in the grammar, starts with the next byte (this token's
                                    unmasked rest may not fit it: then the mask starts from where it stops) */
            for (int j = i + 1; j < n && jc_feed(wj->jst, b + j, 1) == 0; j++) {}
            return;
        }
    }
}

/* Text released by the stop filter: split, appended to the job, its readers woken. */
static void emit(struct wjob *wj, const char *p, size_t n, int count_token) {
    serve_worker *w = wj->w;
    w->tr.n = w->tc.n = 0;
    int reasoning = serve_think_feed(&wj->think, p, n, &w->tr, &w->tc);
    serve_job *j = wj->job;
    pthread_mutex_lock(&j->mu);
    if (w->tr.n) tkv_buf_add(&j->reasoning, w->tr.p, w->tr.n);
    if (w->tc.n) tkv_buf_add(&j->content, w->tc.p, w->tc.n);
    if (count_token) {
        j->usage.completion_tokens++;
        j->usage.reasoning_tokens += reasoning;
    }
    if (j->req.stream) serve_job_wake_locked(j); /* a whole answer's waiter wakes only when it is done */
    pthread_mutex_unlock(&j->mu);
}

static void emit_flush(struct wjob *wj) {
    serve_worker *w = wj->w;
    w->tr.n = w->tc.n = 0;
    serve_think_flush(&wj->think, &w->tr, &w->tc);
    serve_job *j = wj->job;
    pthread_mutex_lock(&j->mu);
    if (w->tr.n) tkv_buf_add(&j->reasoning, w->tr.p, w->tr.n);
    if (w->tc.n) tkv_buf_add(&j->content, w->tc.p, w->tc.n);
    pthread_mutex_unlock(&j->mu);
}

/* a token's bytes appended to the job's (mu held) */
static serve_lp_tok lp_tok(serve_worker *w, serve_job *j, int32_t id, float logprob) {
    const char *b = NULL;
    int n = tkv_token_piece(w->m, id, 0, &b);
    if (n < 0) n = 0;
    serve_lp_tok t = {(uint32_t)j->lp_bytes.n, (uint32_t)n, logprob};
    if (n) tkv_buf_add(&j->lp_bytes, b, (size_t)n);
    return t;
}

/* the token's log-probability, kept for the answer before its text is (the stream sends both) */
static void keep_logprob(serve_worker *w, serve_job *j, int32_t tok, const sched_logprob *lp) {
    pthread_mutex_lock(&j->mu);
    if (j->n_lps == j->cap_lps) {
        j->cap_lps = j->cap_lps ? 2 * j->cap_lps : 64;
        serve_lp *grown = realloc(j->lps, (size_t)j->cap_lps * sizeof *j->lps);
        TKV_ASSERT(grown);
        j->lps = grown;
    }
    serve_lp *p = &j->lps[j->n_lps++];
    p->tok = lp_tok(w, j, tok, lp->logprob);
    p->n_top = lp->n_top < SERVE_MAX_TOP_LOGPROBS ? lp->n_top : SERVE_MAX_TOP_LOGPROBS;
    for (int k = 0; k < p->n_top; k++) p->top[k] = lp_tok(w, j, lp->top_id[k], lp->top_logprob[k]);
    pthread_mutex_unlock(&j->mu);
}

/* an echoed prompt's token: its log-probability given the tokens before it (none for the first) */
static void on_prompt(void *user, int pos, int32_t tok, const sched_logprob *lp) {
    struct wjob *wj = user;
    (void)pos;
    sched_logprob none = {.logprob = 0, .n_top = 0};
    keep_logprob(wj->w, wj->job, tok, lp ? lp : &none);
    if (!lp) {
        pthread_mutex_lock(&wj->job->mu);
        wj->job->lps[wj->job->n_lps - 1].n_top = -1;
        pthread_mutex_unlock(&wj->job->mu);
    }
}

static int on_token(void *user, int32_t tok, const sched_logprob *lp) {
    struct wjob *wj = user;
    serve_worker *w = wj->w;
    if (lp) keep_logprob(w, wj->job, tok, lp);
    if (!wj->got_first) {
        wj->got_first = 1;
        w->ttft_sum += tkv_now_s() - wj->job->t_submit;
        w->ttft_n++;
    }
    size_t np = tkv_detok_token(&wj->detok, w->m, tok, 0, wj->piece), ns = 0;
    wj->stopped = tkv_stop_feed(wj->stop, wj->piece, np, wj->shown, &ns);
    emit(wj, wj->shown, ns, 1);
    return wj->stopped;
}

static int on_cancelled(void *user) {
    struct wjob *wj = user;
    return atomic_load_explicit(&wj->job->cancelled, memory_order_relaxed);
}

static void on_start(void *user, int cached) {
    struct wjob *wj = user;
    serve_worker *w = wj->w;
    wj->started = 1;
    pthread_mutex_lock(&w->mu);
    w->n_pending--;
    w->n_running++;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&wj->job->mu);
    wj->job->usage.cached_tokens = cached;
    wj->job->phase = JOB_RUNNING;
    serve_job_wake_locked(wj->job);
    pthread_mutex_unlock(&wj->job->mu);
}

static void publish(serve_worker *w, int idle);

static void on_end(void *user, const sched_end *e) {
    struct wjob *wj = user;
    serve_worker *w = wj->w;
    serve_job *j = wj->job;
    int late_stop = 0; /* a stop string completed by the bytes the detokenizer still held */
    if (e->why == SCHED_EOG || e->why == SCHED_LENGTH) { /* the text held back goes out */
        size_t np = tkv_detok_flush(&wj->detok, wj->piece), ns = 0;
        late_stop = tkv_stop_feed(wj->stop, wj->piece, np, wj->shown, &ns);
        if (!late_stop) {
            emit(wj, wj->shown, ns, 0);
            ns = tkv_stop_flush(wj->stop, wj->shown);
        }
        emit(wj, wj->shown, ns, 0);
    }
    if (e->why == SCHED_EOG && e->gen_tokens > 0) { /* the end-of-generation token counts as generated */
        pthread_mutex_lock(&j->mu);
        j->usage.completion_tokens++;
        pthread_mutex_unlock(&j->mu);
    }
    emit_flush(wj);
    pthread_mutex_lock(&w->mu);
    if (wj->started) w->n_running--;
    else w->n_pending--;
    pthread_mutex_unlock(&w->mu);
    serve_error err = {0};
    switch (e->why) {
    case SCHED_REFUSED:
        w->refused++;
        serve_error_set(&err, 413, "invalid_request_error", "", "kv_budget_exceeded", "%s", e->msg);
        break;
    case SCHED_FAILED:
        w->failed++;
        serve_error_set(&err, 500, "server_error", "", NULL, "%s", e->msg);
        break;
    case SCHED_CANCELLED:
        w->cancelled++;
        serve_error_set(&err, 503, "server_error", "", NULL, "%s",
                        atomic_load(&j->cancelled) ? "cancelled" : "the server is stopping");
        break;
    default: break;
    }
    /* /metrics shows what this request left (a kept conversation, its tiers) before its client
     * hears it ended: a client that asks right after its answer does not read the step before */
    publish(w, 0);
    pthread_mutex_lock(&j->mu);
    j->usage.prompt_tokens = wj->n_ids;
    j->usage.cached_tokens = e->cached_tokens;
    j->finish = e->why == SCHED_LENGTH && !late_stop ? "length" : "stop";
    if (err.status) j->err = err;
    j->phase = JOB_DONE;
    serve_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    wjob_free(wj);
    serve_job_unref(j);
}

/* echo: the prompt's text, as its tokens spell it, begins the content (mu held) */
static void echo_prompt(serve_worker *w, struct wjob *wj) {
    tkv_detok d;
    tkv_detok_init(&d);
    for (int i = 0; i < wj->n_ids; i++)
        tkv_buf_add(&wj->job->content, wj->piece, tkv_detok_token(&d, w->m, wj->ids[i], 0, wj->piece));
    tkv_buf_add(&wj->job->content, wj->piece, tkv_detok_flush(&d, wj->piece));
}

/* A job from the inbox: prepared and queued in the scheduler, or refused at once. */
static void take(serve_worker *w, serve_job *j) {
    serve_error e = {0};
    int max_tokens = 0;
    struct wjob *wj = atomic_load(&j->cancelled) ? NULL : prepare(w, j, &max_tokens, &e);
    if (!wj) {
        if (!e.status) serve_error_set(&e, 503, "server_error", "", NULL, "cancelled");
        pthread_mutex_lock(&w->mu);
        w->n_pending--;
        pthread_mutex_unlock(&w->mu);
        serve_job_fail(j, &e);
        serve_job_unref(j);
        return;
    }
    {
        pthread_mutex_lock(&j->mu);
        j->with_reasoning = serve_think_enabled(&wj->think);
        j->usage.prompt_tokens = wj->n_ids;
        if (j->req.echo) echo_prompt(w, wj);
        pthread_mutex_unlock(&j->mu);
    }
    serve_job_set_phase(j, JOB_QUEUED);
    sched_job sj = {.prompt = wj->ids, .n_prompt = wj->n_ids, .max_tokens = max_tokens, .sampler = wj->smp, .user = wj,
                    .logprobs = j->req.logprobs, .top_logprobs = j->req.top_logprobs,
                    .prompt_logprobs = j->req.echo && j->req.logprobs, .salt = j->req.cache_salt,
                    .no_cache = j->req.no_cache, .stale_from = wj->stale_from, .stale_to = wj->stale_to};
    if (wj->jst || wj->counts || j->req.n_bias) sj.mask = con_mask, sj.accept = con_accept, sj.con = wj;
    sched_submit(w->sc, &sj);
}

/* The numbers /metrics shows, read on the engine thread and copied under the lock. */
static void publish(serve_worker *w, int idle) {
    serve_snapshot sn = {0};
    sn.kv_ok = tkv_stats_get(w->s, -1, &sn.kv, NULL, 0) == 0;
    sn.token_bytes_t0 = tkv_token_bytes(w->s, 0);
    sched_info_get(w->sc, &sn.si);
    double now = tkv_now_s();
    if (idle) w->rate = 0, w->rate_t = now, w->rate_tok = sn.si.gen_tokens;
    else if (now - w->rate_t >= 2.0) {
        w->rate = (double)(sn.si.gen_tokens - w->rate_tok) / (now - w->rate_t);
        w->rate_t = now;
        w->rate_tok = sn.si.gen_tokens;
    }
    sn.tokens_per_s = w->rate;
    sn.ttft_sum = w->ttft_sum;
    sn.ttft_count = w->ttft_n;
    sn.refused = w->refused, sn.failed = w->failed, sn.cancelled = w->cancelled;
    sn.parallel = w->o.parallel;
    sn.max_queue = w->o.max_queue;
    pthread_mutex_lock(&w->mu);
    sn.queued = w->n_pending;
    sn.running = w->n_running;
    w->snap = sn;
    pthread_mutex_unlock(&w->mu);
}

static void *engine_main(void *arg) {
    serve_worker *w = arg;
    int published_idle = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (!w->stop && !w->in_head && !sched_has_work(w->sc)) {
            if (!published_idle) { /* settled numbers once, then sleep until a job or stop comes */
                pthread_mutex_unlock(&w->mu);
                tkv_sync(w->s);
                publish(w, 1);
                pthread_mutex_lock(&w->mu);
                published_idle = 1;
                continue;
            }
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        if (w->stop) break;
        published_idle = 0;
        serve_job *in = w->in_head;
        w->in_head = w->in_tail = NULL;
        pthread_mutex_unlock(&w->mu);
        while (in) {
            serve_job *next = in->next;
            in->next = NULL;
            take(w, in);
            in = next;
        }
        sched_step(w->sc);
        publish(w, 0);
        pthread_mutex_lock(&w->mu);
    }
    serve_job *in = w->in_head;
    w->in_head = w->in_tail = NULL;
    pthread_mutex_unlock(&w->mu);
    while (in) { /* never looked at: told the server is stopping */
        serve_job *next = in->next;
        serve_error e;
        serve_error_set(&e, 503, "server_error", "", NULL, "the server is stopping");
        serve_job_fail(in, &e);
        serve_job_unref(in);
        in = next;
    }
    return NULL;
}

static void vocab_free(jc_vocab *v) {
    free((void *)v->piece);
    free(v->len);
    free(v->eog);
}

int serve_worker_start(tkv_model *m, tkv_session *s, tkv_chat *chat, const serve_worker_opts *o, serve_worker **out,
                       char *err, size_t errlen) {
    *out = NULL;
    if (o->parallel < 1 || o->max_queue < 0 || o->ctx < 2 || o->default_max_tokens < 1)
        return tkv_errf(err, errlen, "worker: bad options (parallel %d, max_queue %d, ctx %d)", o->parallel, o->max_queue, o->ctx);
    serve_worker *w = tkv_xcalloc(1, sizeof *w);
    w->m = m;
    w->s = s;
    w->chat = chat;
    w->o = *o;
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    w->V = mi.n_vocab;
    w->jv.n = w->V;
    w->jv.piece = tkv_xcalloc((size_t)w->V, sizeof *w->jv.piece);
    w->jv.len = tkv_xcalloc((size_t)w->V, sizeof *w->jv.len);
    w->jv.eog = tkv_xcalloc((size_t)w->V, 1);
    for (int t = 0; t < w->V; t++) {
        w->jv.len[t] = tkv_token_piece(m, t, 0, &w->jv.piece[t]);
        if (w->jv.len[t] < 0) w->jv.len[t] = 0;
        w->jv.eog[t] = (uint8_t)tkv_token_is_eog(m, t);
    }
    w->piece_cap = tkv_detok_out_size(m) + 16;
    sched_params sp;
    sched_params_default(&sp);
    sp.max_live = o->parallel;
    sp.prefix_entries = o->prefix_entries;
    sp.conv_entries = o->conv_entries;
    sp.conv_bytes = o->conv_bytes;
    sp.park = o->park;
    const char *open_mk = NULL, *close_mk = NULL;
    int by = 0;
    tkv_chat_reasoning(chat, &open_mk, &close_mk, &by);
    if (o->keep_thinking) sp.keep_thinking = close_mk; /* serve_start refuses keep for a format without markers */
    sp.policy = o->policy;
    sched_callbacks cb = {.on_token = on_token, .cancelled = on_cancelled, .on_start = on_start, .on_end = on_end,
                          .on_prompt = on_prompt};
    if (sched_init(m, s, &sp, &cb, &w->sc, err, errlen)) { vocab_free(&w->jv), free(w); return -1; }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->rate_t = tkv_now_s();
    publish(w, 1);
    if (pthread_create(&w->th, NULL, engine_main, w)) {
        sched_free(w->sc);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        vocab_free(&w->jv);
        free(w);
        return tkv_errf(err, errlen, "worker: cannot start the engine thread");
    }
    w->started = 1;
    *out = w;
    return 0;
}

void serve_worker_stop(serve_worker *w) {
    if (!w || !w->started) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    w->started = 0;
    sched_free(w->sc); /* the jobs left end (their waiters are told); the engine thread is gone */
    w->sc = NULL;
}

void serve_worker_free(serve_worker *w) {
    if (!w) return;
    serve_worker_stop(w);
    tkv_buf_free(&w->tr);
    tkv_buf_free(&w->tc);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    vocab_free(&w->jv);
    free(w);
}

int serve_worker_submit(serve_worker *w, serve_job *const *jobs, int n) {
    pthread_mutex_lock(&w->mu);
    if (w->stop || w->n_pending + w->n_running + n > w->o.parallel + w->o.max_queue) {
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        serve_job *j = jobs[i];
        serve_job_ref(j);
        j->next = NULL;
        if (w->in_tail) w->in_tail->next = j;
        else w->in_head = j;
        w->in_tail = j;
        w->n_pending++;
    }
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

const tkv_model *serve_worker_model(const serve_worker *w) { return w->m; }

void serve_worker_snapshot(serve_worker *w, serve_snapshot *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->snap;
    out->queued = w->n_pending;
    out->running = w->n_running;
    pthread_mutex_unlock(&w->mu);
}
