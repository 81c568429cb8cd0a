/* api.c — the routes (see api.h). Every response is counted in the metrics by endpoint and status.
 *
 * A completion's life on its HTTP thread: parse → submit → wait until the job runs (or is refused:
 * then the error's status, e.g. 400 for a prompt over the context, 413 for one the T0 budget can
 * never hold) → stream chunks as text arrives, or wait for the end and answer once. The inactivity
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

/* ---- streaming ---- */

struct stream {
    serve_api *a;
    serve_job *j;
    struct MHD_Connection *c;
    int fd;
    serve_resp_meta meta;
    char id[48];
    tkv_buf out;       /* SSE bytes not yet handed to MHD, from off */
    size_t off;
    size_t seen_c, seen_r; /* the job's text already sent */
    int sent_role, finished;
    int seen_lp;           /* log-probabilities already sent */
    size_t lp_text_off;    /* their tokens' characters (completions' text_offset) */
};

/* The job's log-probabilities not yet sent, copied (with the bytes they point into) while mu is held:
 * the engine may grow the job's arrays after. */
struct lp_slice {
    serve_lp *v;
    int n;
    tkv_buf bytes;
};

static void lp_slice_take(struct stream *st, serve_job *j, struct lp_slice *s) {
    memset(s, 0, sizeof *s);
    if (!j->req.logprobs || j->n_lps <= st->seen_lp) return;
    s->n = j->n_lps - st->seen_lp;
    s->v = tkv_xmalloc((size_t)s->n * sizeof *s->v);
    memcpy(s->v, j->lps + st->seen_lp, (size_t)s->n * sizeof *s->v);
    uint32_t base = s->v[0].tok.off;
    if (j->lp_bytes.n > base) tkv_buf_add(&s->bytes, j->lp_bytes.p + base, j->lp_bytes.n - base);
    for (int i = 0; i < s->n; i++) {
        s->v[i].tok.off -= base;
        for (int k = 0; k < s->v[i].n_top; k++) s->v[i].top[k].off -= base;
    }
}

/* the slice as a chunk's logprobs, once: the first chunk that carries text (or the last) takes it */
static const serve_lps *lp_slice_use(struct stream *st, struct lp_slice *s, serve_lps *out) {
    if (!s->n) return NULL;
    *out = (serve_lps){s->v, s->n, s->bytes.p ? s->bytes.p : "", st->lp_text_off};
    st->seen_lp += s->n;
    for (int i = 0; i < s->n; i++) st->lp_text_off += serve_lp_chars(s->bytes.p, &s->v[i].tok);
    s->n = 0;
    return out;
}

/* Waits for more of the job and renders it as SSE events into st->out; -1 when the client left. */
static int stream_fill(struct stream *st) {
    serve_job *j = st->j;
    tkv_buf r = {0}, t = {0};
    pthread_mutex_lock(&j->mu);
    if (serve_job_wait_locked(j, JOB_DONE, &st->seen_c, &st->seen_r, fd_gone, &st->fd)) {
        pthread_mutex_unlock(&j->mu);
        return -1;
    }
    if (j->reasoning.n > st->seen_r) tkv_buf_add(&r, j->reasoning.p + st->seen_r, j->reasoning.n - st->seen_r);
    if (j->content.n > st->seen_c) tkv_buf_add(&t, j->content.p + st->seen_c, j->content.n - st->seen_c);
    st->seen_r = j->reasoning.n;
    st->seen_c = j->content.n;
    int done = j->phase == JOB_DONE;
    struct lp_slice ls;
    if (r.n || t.n || done) lp_slice_take(st, j, &ls);
    else memset(&ls, 0, sizeof ls);
    serve_lps lv;
    int want_lp = j->req.logprobs;
    serve_error err = j->err;
    const char *finish = j->finish;
    serve_usage u = j->usage;
    int usage = j->req.include_usage;
    pthread_mutex_unlock(&j->mu);
    serve_text none = {NULL, 0};
    char *ev;
    if (!st->sent_role && st->meta.kind == SERVE_CHAT) {
        ev = serve_sse_chunk(&st->meta, 1, none, none, NULL, usage, NULL);
        tkv_buf_adds(&st->out, ev);
        free(ev);
    }
    st->sent_role = 1;
    if (r.n) {
        ev = serve_sse_chunk(&st->meta, 0, (serve_text){r.p, r.n}, none, NULL, usage, lp_slice_use(st, &ls, &lv));
        tkv_buf_adds(&st->out, ev);
        free(ev);
    }
    if (t.n) {
        ev = serve_sse_chunk(&st->meta, 0, none, (serve_text){t.p, t.n}, NULL, usage, lp_slice_use(st, &ls, &lv));
        tkv_buf_adds(&st->out, ev);
        free(ev);
    }
    tkv_buf_free(&r);
    tkv_buf_free(&t);
    if (!done) {
        free(ls.v);
        tkv_buf_free(&ls.bytes);
        return 0;
    }
    /* the last chunk: the log-probabilities left ("content": [] when none, as a stream asked for them) */
    const serve_lps *last = lp_slice_use(st, &ls, &lv);
    if (!last && want_lp) lv = (serve_lps){NULL, 0, "", st->lp_text_off}, last = &lv;
    if (err.status) ev = serve_sse_error(&err);
    else ev = serve_sse_chunk(&st->meta, 0, none, none, finish, usage, last);
    free(ls.v);
    tkv_buf_free(&ls.bytes);
    tkv_buf_adds(&st->out, ev);
    free(ev);
    if (usage && !err.status) {
        ev = serve_sse_usage(&st->meta, &u);
        tkv_buf_adds(&st->out, ev);
        free(ev);
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
    if (!st->finished) atomic_store(&st->j->cancelled, 1); /* the client left mid-stream */
    serve_job_unref(st->j);
    tkv_buf_free(&st->out);
    free(st);
}

/* ---- completions ---- */

static enum MHD_Result completion(serve_api *a, struct MHD_Connection *c, int ep, const char *body, size_t n) {
    enum serve_kind kind = ep == SERVE_EP_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
    serve_request req;
    serve_error e;
    if (serve_request_parse(body, n, kind, &a->lim, &req, &e)) return reply_error(a, c, ep, &e);
    serve_job *j = serve_job_new(&req);
    if (serve_worker_submit(a->w, j)) {
        serve_job_unref(j);
        serve_snapshot sn;
        serve_worker_snapshot(a->w, &sn);
        serve_error_set(&e, 503, "server_error", "", "server_busy",
                        "the server is full: %d requests running and %d waiting (--parallel %d, --max-queue %d); retry later",
                        sn.running, sn.queued, sn.parallel, sn.max_queue);
        return reply_error(a, c, ep, &e);
    }
    int fd = serve_http_fd(c);
    serve_http_timeout(c, 0);
    pthread_mutex_lock(&j->mu);
    int gone = serve_job_wait_locked(j, JOB_RUNNING, NULL, NULL, fd_gone, &fd);
    if (!gone && j->phase == JOB_DONE && j->err.status) {
        e = j->err;
        pthread_mutex_unlock(&j->mu);
        serve_job_unref(j);
        serve_http_timeout(c, a->timeout_s);
        return reply_error(a, c, ep, &e);
    }
    pthread_mutex_unlock(&j->mu);
    char id[48];
    unsigned long long k = atomic_fetch_add(&a->next_id, 1);
    snprintf(id, sizeof id, "%s-%016llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(a->id_salt ^ (k * 0x9E3779B97F4A7C15ull)));
    if (!gone && j->req.stream) {
        struct stream *st = tkv_xcalloc(1, sizeof *st);
        st->a = a;
        st->j = j; /* the reference moves to the stream */
        st->c = c;
        st->fd = fd;
        memcpy(st->id, id, sizeof id);
        st->meta = (serve_resp_meta){st->id, j->created, a->model, kind};
        serve_metrics_count(&a->metrics, ep, 200);
        return serve_http_reply_stream(c, stream_read, st, stream_done);
    }
    if (!gone) {
        pthread_mutex_lock(&j->mu);
        gone = serve_job_wait_locked(j, JOB_DONE, NULL, NULL, fd_gone, &fd);
        pthread_mutex_unlock(&j->mu);
    }
    if (gone) { /* the client hung up: the job is cancelled, the connection dropped */
        serve_job_unref(j);
        serve_metrics_count(&a->metrics, ep, 499);
        return MHD_NO;
    }
    serve_http_timeout(c, a->timeout_s);
    /* done: the engine no longer writes to the job */
    if (j->err.status) {
        e = j->err;
        serve_job_unref(j);
        return reply_error(a, c, ep, &e);
    }
    serve_resp_meta meta = {id, j->created, a->model, kind};
    serve_lps lps = {j->lps, j->n_lps, j->lp_bytes.p ? j->lp_bytes.p : "", 0};
    char *out = serve_json_completion(&meta, (serve_text){j->content.p, j->content.n}, (serve_text){j->reasoning.p, j->reasoning.n},
                                      j->with_reasoning, j->finish, &j->usage, j->req.logprobs ? &lps : NULL);
    serve_job_unref(j);
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
