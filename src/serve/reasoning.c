/* reasoning.c — the reasoning/answer splitter (see reasoning.h). A byte-at-a-time state machine:
 * the pieces are a few bytes each and the hold is at most a marker long, so no search is needed.
 * Invariant: in THINK_IN, hold[0..n_hold) is a proper prefix of the close marker. */
#include "serve/reasoning.h"

#include <string.h>

void serve_think_init(serve_think *t, const char *open, const char *close, int by) {
    memset(t, 0, sizeof *t);
    t->state = THINK_OUT;
    if (!open || !close || !*open || !*close || strlen(open) >= sizeof t->open || strlen(close) >= sizeof t->close) return;
    memcpy(t->open, open, strlen(open) + 1);
    memcpy(t->close, close, strlen(close) + 1);
    t->n_open = strlen(open);
    t->n_close = strlen(close);
    t->state = by == TKV_THINK_PROMPT_OPENS ? THINK_IN : by == TKV_THINK_PROMPT_CLOSED ? THINK_OUT : THINK_START;
}

int serve_think_enabled(const serve_think *t) { return t->n_close > 0; }

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* THINK_START: the hold is leading whitespace, then maybe a prefix of the open marker. */
static void start_byte(serve_think *t, char c, tkv_buf *content) {
    t->hold[t->n_hold++] = c;
    size_t ws = 0;
    while (ws < t->n_hold && is_ws(t->hold[ws])) ws++;
    size_t k = t->n_hold - ws; /* bytes after the whitespace */
    if (k == 0 && t->n_hold < sizeof t->hold) return;
    if (k > 0 && k <= t->n_open && !memcmp(t->hold + ws, t->open, k)) {
        if (k == t->n_open) t->state = THINK_LEAD, t->n_hold = 0; /* the whitespace and the marker go */
        else if (t->n_hold == sizeof t->hold) goto answer;
        return;
    }
answer:
    tkv_buf_add(content, t->hold, t->n_hold);
    t->n_hold = 0;
    t->state = THINK_OUT;
}

static void in_byte(serve_think *t, char c, tkv_buf *reasoning) {
    t->hold[t->n_hold++] = c;
    /* drop bytes from the front until the hold is a prefix of the marker again */
    size_t cut = 0;
    while (cut < t->n_hold && memcmp(t->hold + cut, t->close, t->n_hold - cut)) cut++;
    if (cut) {
        tkv_buf_add(reasoning, t->hold, cut);
        memmove(t->hold, t->hold + cut, t->n_hold - cut);
        t->n_hold -= cut;
    }
    if (t->n_hold == t->n_close) t->n_hold = 0, t->state = THINK_AFTER;
}

int serve_think_feed(serve_think *t, const char *p, size_t n, tkv_buf *reasoning, tkv_buf *content) {
    int touched = t->state == THINK_IN;
    size_t i = 0;
    while (i < n) {
        switch (t->state) {
        case THINK_OUT: /* the rest goes out as it is */
            tkv_buf_add(content, p + i, n - i);
            return touched;
        case THINK_START: start_byte(t, p[i++], content); break;
        case THINK_IN: in_byte(t, p[i++], reasoning); touched = 1; break;
        case THINK_LEAD: /* the whitespace after the open marker goes too */
            touched = 1;
            if (is_ws(p[i])) i++;
            else t->state = THINK_IN;
            break;
        case THINK_AFTER:
            if (is_ws(p[i])) i++;
            else t->state = THINK_OUT;
            break;
        }
        if (t->state == THINK_IN || t->state == THINK_LEAD) touched = 1;
    }
    return touched;
}

void serve_think_flush(serve_think *t, tkv_buf *reasoning, tkv_buf *content) {
    if (t->state == THINK_IN) tkv_buf_add(reasoning, t->hold, t->n_hold);
    else if (t->state == THINK_START) tkv_buf_add(content, t->hold, t->n_hold);
    t->n_hold = 0;
}
