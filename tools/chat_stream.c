/* chat_stream.c — printing an answer with its reasoning apart (see chat_stream.h). */
#include "chat_stream.h"

#include <stdio.h>
#include <string.h>

#define FAINT "\033[2m"
#define PLAIN "\033[0m"

void chat_stream_init(chat_stream *s, const char *open, const char *close, int by, int tty) {
    memset(s, 0, sizeof *s);
    serve_think_init(&s->think, open, close, by);
    s->open = open, s->close = close, s->by = by;
    s->tty = tty;
}

static void put(chat_stream *s, const char *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) s->werr = 1;
}

static void reasoning_open(chat_stream *s) {
    if (s->in_reasoning) return;
    const char *m = s->tty ? FAINT : "[thinking]\n";
    put(s, m, strlen(m));
    s->in_reasoning = 1;
}

/* The answer starts on a line of its own after the reasoning in both forms. */
static void reasoning_close(chat_stream *s) {
    if (!s->in_reasoning) return;
    const char *m = s->tty ? PLAIN "\n" : "\n[/thinking]\n";
    put(s, m, strlen(m));
    s->in_reasoning = 0;
}

static int emit(chat_stream *s) {
    if (s->r.n) reasoning_open(s), put(s, s->r.p, s->r.n);
    if (s->c.n) reasoning_close(s), put(s, s->c.p, s->c.n);
    s->r.n = s->c.n = 0;
    if (fflush(stdout)) s->werr = 1;
    return s->werr ? -1 : 0;
}

int chat_stream_feed(chat_stream *s, const char *p, size_t n) {
    serve_think_feed(&s->think, p, n, &s->r, &s->c);
    return emit(s);
}

int chat_stream_end(chat_stream *s) {
    serve_think_flush(&s->think, &s->r, &s->c);
    emit(s);
    if (s->in_reasoning) reasoning_close(s); /* which ends the line */
    else put(s, "\n", 1);
    if (fflush(stdout)) s->werr = 1;
    serve_think_init(&s->think, s->open, s->close, s->by); /* the next answer starts afresh */
    return s->werr ? -1 : 0;
}

void chat_stream_free(chat_stream *s) {
    tkv_buf_free(&s->r);
    tkv_buf_free(&s->c);
}
