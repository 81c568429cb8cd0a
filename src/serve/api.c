/* api.c — the routes (see api.h). Every response is counted in the metrics by endpoint and status.
 *
 * A completion's life on its HTTP thread: parse → submit its choices (one job each) → wait until
 * they run (or one is refused: then the error's status, e.g. 400 for a prompt over the context, 413
 * for one the T0 budget can never hold) → stream chunks as text arrives, or wait for the end and
 * answer once. The inactivity
 * timeout is off while the engine works (a queued request may wait long) and back on for the last
 * bytes, so a client that stops reading is dropped. */
#include "serve/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/buf.h"
#include "serve/response.h"
#include "serve/tokenize.h"

static int endpoint_of(const char *url) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) return SERVE_EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return SERVE_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return SERVE_EP_MODELS;
    if (!strcmp(url, "/health")) return SERVE_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return SERVE_EP_METRICS;
    if (!strcmp(url, "/tokenize")) return SERVE_EP_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return SERVE_EP_DETOKENIZE;
    return SERVE_EP_OTHER;
}

void serve_api_count(void *ctx, const char *url, int status) {
    serve_api *a = ctx;
    serve_metrics_count(&a->metrics, endpoint_of(url), status);
}

static enum MHD_Result reply(serve_api *a, struct MHD_Connection *c, int ep, int status, const char *ctype, char *body) {
    serve_metrics_count(&a->metrics, ep, status);
    return serve_http_reply(c, status, ctype, body, NULL, NULL);
}

static enum MHD_Result reply_error(serve_api *a, struct MHD_Connection *c, int ep, const serve_error *e) {
    serve_metrics_count(&a->metrics, ep, e->status);
    return serve_http_reply_error(c, e);
}

static int fd_gone(void *p) { return serve_http_peer_gone(*(int *)p); }

/* ---- the choices of one request ----
 * A request with n choices of each of its P prompts (completions may list several) is P x n jobs,
 * choice i of prompt p at index p * n + i and seeded seed + i, handed to the worker together; with
 * more than one they share a signal, so one waiter follows them all. */

struct choices {
    serve_job **j;
    int n;
    int per;           /* choices per prompt */
    serve_signal *sig; /* n > 1 */
};

/* The jobs of req (which is freed). */
static void choices_make(struct choices *ch, serve_request *req) {
    int per = ch->per = req->n > 0 ? req->n : 1;
    ch->n = per * (req->n_more + 1);
    ch->j = tkv_xcalloc((size_t)ch->n, sizeof *ch->j);
    ch->sig = ch->n > 1 ? serve_signal_new() : NULL;
    for (int k = 0; k < ch->n; k++) {
        serve_request r;
        serve_request_copy(req, k / per, (uint64_t)(k % per), &r);
        ch->j[k] = serve_job_new(&r);
        ch->j[k]->index = k;
        if (ch->sig) serve_signal_ref(ch->sig), ch->j[k]->sig = ch->sig;
    }
    serve_request_free(req);
}

static void choices_cancel(struct choices *ch) {
    for (int i = 0; i < ch->n; i++) atomic_store(&ch->j[i]->cancelled, 1);
}

static void choices_free(struct choices *ch) {
    for (int i = 0; i < ch->n; i++) serve_job_unref(ch->j[i]);
    free(ch->j);
    serve_signal_unref(ch->sig);
    memset(ch, 0, sizeof *ch);
}

/* Waits until every choice reached min_phase (or ended); -1 when the client left (all cancelled). */
static int choices_wait(struct choices *ch, int min_phase, int *fd) {
    for (int i = 0; i < ch->n; i++) {
        serve_job *j = ch->j[i];
        pthread_mutex_lock(&j->mu);
        int gone = serve_job_wait_locked(j, min_phase, NULL, NULL, fd_gone, fd);
        int failed = j->phase == JOB_DONE && j->err.status;
        pthread_mutex_unlock(&j->mu);
        if (gone) {
            choices_cancel(ch);
            return -1;
        }
        if (failed) return 0; /* the answer is that error: the others need not be waited for */
    }
    return 0;
}

/* The first error among ended choices (status 0: none). */
static serve_error choices_error(struct choices *ch) {
    serve_error e = {0};
    for (int i = 0; i < ch->n && !e.status; i++) {
        pthread_mutex_lock(&ch->j[i]->mu);
        if (ch->j[i]->phase == JOB_DONE) e = ch->j[i]->err;
        pthread_mutex_unlock(&ch->j[i]->mu);
    }
    return e;
}

/* The request's usage: each prompt once (cached: what every choice of it took from the prefix
 * cache), the completions summed. */
static serve_usage choices_usage(struct choices *ch) {
    serve_usage u = {0};
    int cached = 0;
    for (int i = 0; i < ch->n; i++) {
        serve_job *j = ch->j[i];
        pthread_mutex_lock(&j->mu);
        if (i % ch->per == 0) u.prompt_tokens += j->usage.prompt_tokens, cached = j->usage.cached_tokens;
        if (j->usage.cached_tokens < cached) cached = j->usage.cached_tokens;
        u.completion_tokens += j->usage.completion_tokens;
        u.reasoning_tokens += j->usage.reasoning_tokens;
        pthread_mutex_unlock(&j->mu);
        if (i % ch->per == ch->per - 1) u.cached_tokens += cached;
    }
    return u;
}

/* ---- streaming ---- */

struct choice_state {
    size_t seen_c, seen_r; /* the job's text already seen (waits are for more than this) */
    size_t sent_c;         /* of it, the content sent (less while a tool call may be starting) */
    int sent_role, finished;
    int seen_lp;           /* log-probabilities already sent */
    size_t lp_text_off;    /* their tokens' characters (completions' text_offset) */
};

struct stream {
    serve_api *a;
    struct choices ch;
    struct choice_state *cs; /* [ch.n] */
    struct MHD_Connection *c;
    int fd;
    serve_resp_meta meta;
    char id[48];
    tkv_buf out;       /* SSE bytes not yet handed to MHD, from off */
    size_t off;
    int finished;      /* every choice's last chunk (or an error) and [DONE] are in out */
    int include_usage, want_lp;
};

/* The job's log-probabilities not yet sent, copied (with the bytes they point into) while mu is held:
 * the engine may grow the job's arrays after. */
struct lp_slice {
    serve_lp *v;
    int n;
    tkv_buf bytes;
};

static void lp_slice_take(struct choice_state *cs, serve_job *j, struct lp_slice *s) {
    memset(s, 0, sizeof *s);
    if (!j->req.logprobs || j->n_lps <= cs->seen_lp) return;
    s->n = j->n_lps - cs->seen_lp;
    s->v = tkv_xmalloc((size_t)s->n * sizeof *s->v);
    memcpy(s->v, j->lps + cs->seen_lp, (size_t)s->n * sizeof *s->v);
    uint32_t base = s->v[0].tok.off;
    if (j->lp_bytes.n > base) tkv_buf_add(&s->bytes, j->lp_bytes.p + base, j->lp_bytes.n - base);
    for (int i = 0; i < s->n; i++) {
        s->v[i].tok.off -= base;
        for (int k = 0; k < s->v[i].n_top; k++) s->v[i].top[k].off -= base;
    }
}

/* the slice as a chunk's logprobs, once: the first chunk that carries text (or the last) takes it */
static const serve_lps *lp_slice_use(struct choice_state *cs, struct lp_slice *s, serve_lps *out) {
    if (!s->n) return NULL;
    *out = (serve_lps){s->v, s->n, s->bytes.p ? s->bytes.p : "", cs->lp_text_off};
    cs->seen_lp += s->n;
    for (int i = 0; i < s->n; i++) cs->lp_text_off += serve_lp_chars(s->bytes.p, &s->v[i].tok);
    s->n = 0;
    return out;
}

static void add_event(struct stream *st, char *ev) {
    tkv_buf_adds(&st->out, ev);
    free(ev);
}

/* Renders what choice i has that was not sent yet as SSE events into st->out, waiting for more
 * first when `wait` (the one choice of an n = 1 request). Returns 1 when something was rendered,
 * 0 when nothing was new, -1 when the client left, 2 when the choice ended with an error (*err). */
static int fill_choice(struct stream *st, int i, int wait, serve_error *err) {
    serve_job *j = st->ch.j[i];
    struct choice_state *cs = &st->cs[i];
    tkv_buf r = {0}, t = {0};
    pthread_mutex_lock(&j->mu);
    if (wait && serve_job_wait_locked(j, JOB_DONE, &cs->seen_c, &cs->seen_r, fd_gone, &st->fd)) {
        pthread_mutex_unlock(&j->mu);
        return -1;
    }
    int done = j->phase == JOB_DONE;
    /* with tools, text that may be the start of a call waits; at the end the calls are read */
    size_t upto = j->content.n;
    serve_tool_calls calls = {0};
    if (j->req.n_tools && !done) upto = serve_tools_visible(j->content.p, j->content.n);
    else if (j->req.n_tools && !j->err.status &&
             serve_tools_extract(j->content.p, j->content.n, j->req.tool_names, j->req.n_tools, j->req.parallel_tool_calls, &calls))
        upto = calls.content_len;
    if (j->reasoning.n > cs->seen_r) tkv_buf_add(&r, j->reasoning.p + cs->seen_r, j->reasoning.n - cs->seen_r);
    if (upto > cs->sent_c) tkv_buf_add(&t, j->content.p + cs->sent_c, upto - cs->sent_c), cs->sent_c = upto;
    cs->seen_r = j->reasoning.n;
    cs->seen_c = j->content.n;
    struct lp_slice ls;
    if (r.n || t.n || done) lp_slice_take(cs, j, &ls);
    else memset(&ls, 0, sizeof ls);
    *err = j->err;
    const char *finish = j->finish;
    pthread_mutex_unlock(&j->mu);
    int usage = st->include_usage, produced = r.n || t.n || done;
    serve_text none = {NULL, 0};
    serve_lps lv;
    if (produced && !cs->sent_role && st->meta.kind == SERVE_CHAT)
        add_event(st, serve_sse_chunk(&st->meta, i, 1, none, none, NULL, usage, NULL));
    if (produced) cs->sent_role = 1;
    if (r.n) add_event(st, serve_sse_chunk(&st->meta, i, 0, (serve_text){r.p, r.n}, none, NULL, usage, lp_slice_use(cs, &ls, &lv)));
    if (t.n) add_event(st, serve_sse_chunk(&st->meta, i, 0, none, (serve_text){t.p, t.n}, NULL, usage, lp_slice_use(cs, &ls, &lv)));
    tkv_buf_free(&r);
    tkv_buf_free(&t);
    if (done && err->status) { /* the stream's end says the error (stream_fill) */
        free(ls.v);
        tkv_buf_free(&ls.bytes);
        serve_tool_calls_free(&calls);
        return 2;
    }
    if (done) { /* the last chunk: the log-probabilities left ("content": [] when none, as they were asked for) */
        if (calls.n) add_event(st, serve_sse_tool_calls(&st->meta, i, &calls, usage)), finish = "tool_calls";
        const serve_lps *last = lp_slice_use(cs, &ls, &lv);
        if (!last && st->want_lp) lv = (serve_lps){NULL, 0, "", cs->lp_text_off}, last = &lv;
        add_event(st, serve_sse_chunk(&st->meta, i, 0, none, none, finish, usage, last));
        cs->finished = 1;
    }
    serve_tool_calls_free(&calls);
    free(ls.v);
    tkv_buf_free(&ls.bytes);
    return produced;
}

/* Waits for more of the choices and renders it into st->out; -1 when the client left. */
static int stream_fill(struct stream *st) {
    serve_error err = {0};
    int failed = 0, left = 0;
    if (st->ch.n == 1) {
        int rc = fill_choice(st, 0, 1, &err);
        if (rc < 0) return -1;
        failed = rc == 2;
    } else {
        for (;;) { /* every choice's news, else a wait for the next */
            unsigned long g = serve_signal_gen(st->ch.sig);
            int produced = 0;
            left = 0;
            for (int i = 0; i < st->ch.n && !failed; i++) {
                if (st->cs[i].finished) continue;
                int rc = fill_choice(st, i, 0, &err);
                if (rc < 0) return -1;
                failed = rc == 2;
                produced |= rc == 1;
                left += !st->cs[i].finished;
            }
            if (produced || failed || !left) break;
            if (serve_signal_wait(st->ch.sig, g, fd_gone, &st->fd)) return -1;
        }
    }
    if (failed) { /* one choice failed: the stream ends with its error, the others are cancelled */
        choices_cancel(&st->ch);
        add_event(st, serve_sse_error(&err));
    } else {
        for (int i = 0; i < st->ch.n; i++)
            if (!st->cs[i].finished) return 0;
        if (st->include_usage) {
            serve_usage u = choices_usage(&st->ch);
            add_event(st, serve_sse_usage(&st->meta, &u));
        }
    }
    tkv_buf_adds(&st->out, "data: [DONE]\n\n");
    st->finished = 1;
    serve_http_timeout(st->c, st->a->timeout_s); /* the last bytes: a client that stops reading is dropped */
    return 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *st = cls;
    while (st->off >= st->out.n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.n = st->off = 0;
        if (stream_fill(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = st->out.n - st->off < max ? st->out.n - st->off : max;
    memcpy(buf, st->out.p + st->off, k);
    st->off += k;
    return (ssize_t)k;
}

static void stream_done(void *cls) {
    struct stream *st = cls;
    if (!st->finished) choices_cancel(&st->ch); /* the client left mid-stream */
    choices_free(&st->ch);
    free(st->cs);
    tkv_buf_free(&st->out);
    free(st);
}

/* ---- completions ---- */

static enum MHD_Result completion(serve_api *a, struct MHD_Connection *c, int ep, const char *body, size_t n) {
    enum serve_kind kind = ep == SERVE_EP_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
    serve_request req;
    serve_error e;
    if (serve_request_parse(body, n, kind, &a->lim, &req, &e)) return reply_error(a, c, ep, &e);
    struct choices ch;
    choices_make(&ch, &req);
    if (serve_worker_submit(a->w, ch.j, ch.n)) {
        choices_free(&ch);
        serve_snapshot sn;
        serve_worker_snapshot(a->w, &sn);
        serve_error_set(&e, 503, "server_error", "", "server_busy",
                        "the server is full: %d requests running and %d waiting (--parallel %d, --max-queue %d); retry later",
                        sn.running, sn.queued, sn.parallel, sn.max_queue);
        return reply_error(a, c, ep, &e);
    }
    int fd = serve_http_fd(c);
    serve_http_timeout(c, 0);
    int gone = choices_wait(&ch, JOB_RUNNING, &fd);
    if (!gone && (e = choices_error(&ch)).status) {
        choices_cancel(&ch);
        choices_free(&ch);
        serve_http_timeout(c, a->timeout_s);
        return reply_error(a, c, ep, &e);
    }
    char id[48];
    unsigned long long k = atomic_fetch_add(&a->next_id, 1);
    snprintf(id, sizeof id, "%s-%016llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(a->id_salt ^ (k * 0x9E3779B97F4A7C15ull)));
    serve_job *j0 = ch.j[0];
    if (!gone && j0->req.stream) {
        struct stream *st = tkv_xcalloc(1, sizeof *st);
        st->a = a;
        st->ch = ch; /* the references move to the stream */
        st->cs = tkv_xcalloc((size_t)ch.n, sizeof *st->cs);
        st->c = c;
        st->fd = fd;
        st->include_usage = j0->req.include_usage;
        st->want_lp = j0->req.logprobs;
        memcpy(st->id, id, sizeof id);
        st->meta = (serve_resp_meta){st->id, j0->created, a->model, kind};
        serve_metrics_count(&a->metrics, ep, 200);
        return serve_http_reply_stream(c, stream_read, st, stream_done);
    }
    if (!gone) gone = choices_wait(&ch, JOB_DONE, &fd);
    if (gone) { /* the client hung up: the jobs are cancelled, the connection dropped */
        choices_free(&ch);
        serve_metrics_count(&a->metrics, ep, 499);
        return MHD_NO;
    }
    serve_http_timeout(c, a->timeout_s);
    /* done: the engine no longer writes to the jobs */
    if ((e = choices_error(&ch)).status) {
        choices_cancel(&ch);
        choices_free(&ch);
        return reply_error(a, c, ep, &e);
    }
    serve_resp_meta meta = {id, j0->created, a->model, kind};
    serve_choice *cv = tkv_xcalloc((size_t)ch.n, sizeof *cv);
    serve_lps *lps = tkv_xcalloc((size_t)ch.n, sizeof *lps);
    serve_tool_calls *calls = tkv_xcalloc((size_t)ch.n, sizeof *calls);
    for (int i = 0; i < ch.n; i++) {
        serve_job *j = ch.j[i];
        lps[i] = (serve_lps){j->lps, j->n_lps, j->lp_bytes.p ? j->lp_bytes.p : "", 0};
        cv[i] = (serve_choice){(serve_text){j->content.p, j->content.n}, (serve_text){j->reasoning.p, j->reasoning.n},
                               j->finish, j->req.logprobs ? &lps[i] : NULL, NULL};
        if (j->req.n_tools && serve_tools_extract(j->content.p, j->content.n, j->req.tool_names, j->req.n_tools,
                                                  j->req.parallel_tool_calls, &calls[i]))
            cv[i].content.n = calls[i].content_len, cv[i].calls = &calls[i], cv[i].finish = "tool_calls";
    }
    serve_usage u = choices_usage(&ch);
    char *out = serve_json_completion(&meta, cv, ch.n, j0->with_reasoning, &u);
    for (int i = 0; i < ch.n; i++) serve_tool_calls_free(&calls[i]);
    free(calls);
    free(cv);
    free(lps);
    choices_free(&ch);
    return reply(a, c, ep, 200, "application/json", out);
}

/* ---- tokens ---- */

static enum MHD_Result tokens(serve_api *a, struct MHD_Connection *c, int ep, const char *body, size_t n) {
    int detok = ep == SERVE_EP_DETOKENIZE;
    serve_tok_request r;
    serve_error e;
    if (serve_tok_parse(body, n, detok, &a->lim, &r, &e)) return reply_error(a, c, ep, &e);
    char *out = serve_tok_answer(serve_worker_model(a->w), &r, detok, &e);
    serve_tok_request_free(&r);
    if (!out) return reply_error(a, c, ep, &e);
    return reply(a, c, ep, 200, "application/json", out);
}

/* ---- routes ---- */

enum MHD_Result serve_api_handle(void *ctx, struct MHD_Connection *c, const char *method, const char *url, const char *body,
                                 size_t n) {
    serve_api *a = ctx;
    int ep = endpoint_of(url);
    int post = ep == SERVE_EP_CHAT || ep == SERVE_EP_COMPLETIONS || ep == SERVE_EP_TOKENIZE || ep == SERVE_EP_DETOKENIZE;
    serve_error e;
    if (ep == SERVE_EP_OTHER) {
        serve_error_set(&e, 404, "invalid_request_error", "", "not_found", "no route %.64s %.200s", method, url);
        return reply_error(a, c, ep, &e);
    }
    if (strcmp(method, post ? "POST" : "GET")) {
        serve_metrics_count(&a->metrics, ep, 405);
        serve_error_set(&e, 405, "invalid_request_error", "", "method_not_allowed", "%.200s takes %s", url, post ? "POST" : "GET");
        return serve_http_reply(c, 405, "application/json", serve_json_error(&e), "Allow", post ? "POST" : "GET");
    }
    if (ep == SERVE_EP_TOKENIZE || ep == SERVE_EP_DETOKENIZE) return tokens(a, c, ep, body, n);
    if (post) return completion(a, c, ep, body, n);
    if (ep == SERVE_EP_HEALTH) return reply(a, c, ep, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (ep == SERVE_EP_MODELS) return reply(a, c, ep, 200, "application/json", serve_json_models(a->model, a->created));
    serve_snapshot sn;
    serve_worker_snapshot(a->w, &sn);
    return reply(a, c, ep, 200, "text/plain; version=0.0.4; charset=utf-8", serve_metrics_render(&a->metrics, &sn));
}
