/* http.h — the HTTP transport, by libmicrohttpd (well kept, packaged by Debian, and it parses
 * HTTP/1.1 itself: this server never reads a request line or a header by hand). One thread per
 * connection (a blocked wait for tokens holds only its own connection), at most max_open of them
 * (libmicrohttpd closes more at once); of those, at most max_connections requests at a time
 * (headers arrived, not yet answered: one more is answered 429 with Retry-After). A connection that
 * has not brought a whole request within timeout_s of its start (or of its previous answer) is
 * shut down however slowly it trickles bytes (conns.h), so slow or idle connections hold neither a
 * request slot nor their socket for long. The listening socket binds to host (127.0.0.1 unless told
 * otherwise).
 *
 * Before a handler sees a request: the API key is checked (Authorization: Bearer, compared in
 * constant time; 401), the body is collected up to max_body (413 from the Content-Length at once;
 * a chunked body that passes it is read to its end and answered 413, or closed when it goes on
 * past twice the limit). /health needs no key.
 * Not done here: routes and JSON (api.c). */
#ifndef TKV_SERVE_HTTP_H
#define TKV_SERVE_HTTP_H
#include <stddef.h>
#include <microhttpd.h>

#include "serve/request.h"

typedef struct serve_http serve_http;

typedef struct {
    const char *host;     /* address or name to bind; NULL: 127.0.0.1 */
    int port;             /* 0: any free port (serve_http_port says which) */
    int max_connections;  /* requests at a time */
    int max_open;         /* open connections (>= max_connections) */
    size_t max_body;      /* bytes */
    int timeout_s;        /* for a whole request to arrive from its connection's start (and a client to
                             read its answer: libmicrohttpd's idle timeout) */
    const char *api_key;  /* NULL or "": no key */
} serve_http_opts;

/* A whole request with its body; queues a response on conn and returns MHD_YES (or MHD_NO to
 * drop the connection). It may block (the connection has its own thread). */
typedef enum MHD_Result (*serve_http_handler)(void *ctx, struct MHD_Connection *conn, const char *method, const char *url,
                                              const char *body, size_t n);
/* Told of every response this layer makes itself (401, 408, 413), for the metrics. */
typedef void (*serve_http_count)(void *ctx, const char *url, int status);

int serve_http_start(const serve_http_opts *o, serve_http_handler h, serve_http_count count, void *ctx, serve_http **out,
                     char *err, size_t errlen);
int serve_http_port(const serve_http *h);
/* Stops listening, waits for every connection thread. */
void serve_http_stop(serve_http *h);

/* Queues a response with body (malloc'd; taken) and one optional extra header. */
enum MHD_Result serve_http_reply(struct MHD_Connection *c, int status, const char *ctype, char *body, const char *hname,
                                 const char *hval);
enum MHD_Result serve_http_reply_error(struct MHD_Connection *c, const serve_error *e);
/* Queues a streamed response (text/event-stream) read from reader(cls, ...); done(cls) when it ends
 * for any reason. */
enum MHD_Result serve_http_reply_stream(struct MHD_Connection *c, MHD_ContentReaderCallback reader, void *cls,
                                        MHD_ContentReaderFreeCallback done);
/* The client's socket, to watch for a hang-up while a request waits (-1 if unknown). */
int serve_http_fd(struct MHD_Connection *c);
/* 1 when the peer on fd has closed its end (or the socket failed). */
int serve_http_peer_gone(int fd);
/* Sets the connection's inactivity timeout: 0 while the engine works (a queued request may wait
 * long without a byte moving), the server's timeout again for the last bytes. */
void serve_http_timeout(struct MHD_Connection *c, int seconds);
/* Equal strings in time that depends only on b's length (the key). */
int serve_http_const_eq(const char *a, size_t na, const char *b, size_t nb);

#endif
