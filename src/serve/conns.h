/* conns.h — the server's open connections and their deadline: a connection must bring a whole
 * request within the deadline counted from its start (or from the end of its previous request, on
 * a kept-alive connection), however slowly it trickles bytes in; one that does not is shut down by
 * a watcher thread. libmicrohttpd's own timeout is an idle timeout, which a client sending one byte
 * a second never meets (a slowloris). Requests being answered are not watched here (their handler
 * owns their time).
 *
 * Invariant: a registered socket is open: libmicrohttpd tells of a closed connection (serve_conns_remove)
 * before it closes the socket, and the watcher shuts a socket down only under the lock, so it never
 * touches a number the kernel has handed to a newer connection.
 * Not done here: the HTTP itself (http.c). */
#ifndef TKV_SERVE_CONNS_H
#define TKV_SERVE_CONNS_H

typedef struct serve_conns serve_conns;
typedef struct serve_conn serve_conn;

/* deadline_s: seconds a connection has to bring its request; the watcher looks every tick_s */
serve_conns *serve_conns_start(double deadline_s, double tick_s);
void serve_conns_stop(serve_conns *s); /* after every connection is gone */

serve_conn *serve_conns_add(serve_conns *s, int fd); /* a new connection (its clock starts) */
void serve_conns_remove(serve_conns *s, serve_conn *c);
/* its request's headers arrived: not watched until serve_conns_idle */
void serve_conns_busy(serve_conns *s, serve_conn *c);
/* its request was answered: watched again, its clock restarted */
void serve_conns_idle(serve_conns *s, serve_conn *c);
/* seconds since its clock started */
double serve_conns_age(serve_conns *s, const serve_conn *c);
#endif
