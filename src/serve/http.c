/* http.c — libmicrohttpd glue (see http.h): the daemon, the body collection with its limits, the
 * API key, and the response helpers.
 *
 * Invariants: a connection's state (struct conn) lives from its first callback to MHD's
 * completion notice, which frees it; exactly one response is queued per request (a request refused
 * early has `replied` set and its remaining upload is discarded). */
#include "serve/http.h"

#include <netdb.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/buf.h"
#include "serve/conns.h"
#include "serve/response.h"

struct serve_http {
    struct MHD_Daemon *d;
    serve_http_opts o;
    char *api_key;
    serve_http_handler h;
    serve_http_count count;
    void *ctx;
    int port;
    atomic_int requests;  /* requests being read or answered now (headers arrived, not completed) */
    serve_conns *conns;   /* every open connection, and the deadline for its request */
};

struct conn {
    tkv_buf body;
    size_t seen;  /* body bytes received (kept in body up to max_body) */
    int replied;  /* a response is queued */
};

/* the registry's record of the connection a request came on */
static serve_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? (serve_conn *)ci->socket_context : NULL;
}

int serve_http_const_eq(const char *a, size_t na, const char *b, size_t nb) {
    volatile unsigned char d = na != nb;
    for (size_t i = 0; i < nb; i++) d |= (unsigned char)((i < na ? (unsigned char)a[i] : 0) ^ (unsigned char)b[i]);
    return d == 0;
}

enum MHD_Result serve_http_reply(struct MHD_Connection *c, int status, const char *ctype, char *body, const char *hname,
                                 const char *hval) {
    size_t n = body ? strlen(body) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE
                                                                                                : MHD_RESPMEM_PERSISTENT);
    if (!r) { free(body); return MHD_NO; }
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result serve_http_reply_error(struct MHD_Connection *c, const serve_error *e) {
    const char *hn = NULL, *hv = NULL;
    if (e->status == 401) hn = "WWW-Authenticate", hv = "Bearer";
    if (e->status == 503 || e->status == 429) hn = "Retry-After", hv = "1";
    return serve_http_reply(c, e->status, "application/json", serve_json_error(e), hn, hv);
}

enum MHD_Result serve_http_reply_stream(struct MHD_Connection *c, MHD_ContentReaderCallback reader, void *cls,
                                        MHD_ContentReaderFreeCallback done) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, cls, done);
    if (!r) { done(cls); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

int serve_http_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

int serve_http_peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void serve_http_timeout(struct MHD_Connection *c, int seconds) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)seconds);
}

static enum MHD_Result refuse(serve_http *h, struct MHD_Connection *c, struct conn *st, const char *url, int status,
                              const char *code, const char *msg) {
    serve_error e;
    serve_error_set(&e, status, "invalid_request_error", "", code, "%s", msg);
    st->replied = 1;
    serve_conns_busy(h->conns, conn_of(c)); /* answered: its deadline no longer runs */
    if (h->count) h->count(h->ctx, url, status);
    return serve_http_reply_error(c, &e);
}

static int authorized(const serve_http *h, struct MHD_Connection *c) {
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a || strncmp(a, "Bearer ", 7)) return 0;
    a += 7;
    return serve_http_const_eq(a, strlen(a), h->api_key, strlen(h->api_key));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **req_cls) {
    (void)version;
    serve_http *h = cls;
    struct conn *st = *req_cls;
    if (!st) { /* headers only: the checks that need no body */
        st = tkv_xcalloc(1, sizeof *st);
        *req_cls = st;
        if (atomic_fetch_add(&h->requests, 1) + 1 > h->o.max_connections) {
            char msg[128];
            snprintf(msg, sizeof msg, "too many requests at once (at most %d, --max-connections); retry later",
                     h->o.max_connections);
            return refuse(h, c, st, url, 429, "too_many_connections", msg);
        }
        if (h->api_key && strcmp(url, "/health") && !authorized(h, c))
            return refuse(h, c, st, url, 401, "invalid_api_key", "a valid API key is needed: Authorization: Bearer KEY");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->o.max_body) {
            char msg[96];
            snprintf(msg, sizeof msg, "the body is larger than this server's limit of %zu bytes", h->o.max_body);
            return refuse(h, c, st, url, 413, "body_too_large", msg);
        }
        return MHD_YES;
    }
    if (st->replied) { /* refused already: what is left of the upload is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        /* libmicrohttpd takes a response only on the first call or once the upload is complete:
         * an upload past the limit (chunked, so no Content-Length said so) is read and dropped, up to
         * as much again, and answered 413 at its end; beyond that, or past the timeout, closed */
        if (serve_conns_age(h->conns, conn_of(c)) > h->o.timeout_s) return MHD_NO; /* a body trickled in too slowly */
        st->seen += n;
        if (st->seen > h->o.max_body) {
            tkv_buf_free(&st->body);
            return st->seen > 2 * h->o.max_body + 65536 ? MHD_NO : MHD_YES;
        }
        tkv_buf_add(&st->body, upload, n);
        return MHD_YES;
    }
    if (st->seen > h->o.max_body) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than this server's limit of %zu bytes", h->o.max_body);
        return refuse(h, c, st, url, 413, "body_too_large", msg);
    }
    st->replied = 1;
    serve_conns_busy(h->conns, conn_of(c));
    return h->h(h->ctx, c, method, url, tkv_buf_str(&st->body), st->body.n);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    serve_http *h = cls;
    struct conn *st = *req_cls;
    if (!st) return;
    atomic_fetch_sub(&h->requests, 1);
    serve_conns_idle(h->conns, conn_of(c)); /* kept alive: the next request's deadline starts now */
    tkv_buf_free(&st->body);
    free(st);
    *req_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode what) {
    serve_http *h = cls;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) *socket_ctx = serve_conns_add(h->conns, serve_http_fd(c));
    else serve_conns_remove(h->conns, *socket_ctx), *socket_ctx = NULL;
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("[serve] http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int serve_http_start(const serve_http_opts *o, serve_http_handler handler, serve_http_count count, void *ctx,
                     serve_http **out, char *err, size_t errlen) {
    *out = NULL;
    if (o->port < 0 || o->port > 65535 || o->max_connections < 1 || o->max_open < o->max_connections || o->timeout_s < 1)
        return tkv_errf(err, errlen, "http: port %d, requests %d, open connections %d, timeout %d s out of range (open "
                        "connections at least the requests)", o->port, o->max_connections, o->max_open, o->timeout_s);
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai;
    const char *host = o->host ? o->host : "127.0.0.1";
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai) return tkv_errf(err, errlen, "http: cannot resolve --host '%s': %s", host, gai_strerror(gai));
    serve_http *h = tkv_xcalloc(1, sizeof *h);
    h->o = *o;
    h->api_key = o->api_key && *o->api_key ? strdup(o->api_key) : NULL;
    h->h = handler;
    h->count = count;
    h->ctx = ctx;
    atomic_init(&h->requests, 0);
    h->conns = serve_conns_start(o->timeout_s, 0.25);
    if (!h->conns) {
        freeaddrinfo(ai);
        free(h->api_key);
        free(h);
        return tkv_errf(err, errlen, "http: cannot start the connection watcher thread");
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, log_mhd, h, /* first, so that every message goes here */
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            /* open connections; requests beyond max_connections are told 429 */
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_open,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)2 << 20,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        serve_conns_stop(h->conns);
        free(h->api_key);
        free(h);
        return tkv_errf(err, errlen, "http: cannot listen on %s:%d (in use, or not an address of this machine)", host, o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    *out = h;
    return 0;
}

int serve_http_port(const serve_http *h) { return h->port; }

void serve_http_stop(serve_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    serve_conns_stop(h->conns);
    free(h->api_key);
    free(h);
}
