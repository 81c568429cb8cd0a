/* chat_stream.h — how tierkv chat prints an answer as it is generated: the reasoning of formats
 * that mark it (DeepSeek-R1's and Qwen3's <think> ... </think>) apart from the answer, dimmed on a terminal
 * (ANSI faint) and between "[thinking]" and "[/thinking]" lines otherwise, so that piped output
 * stays plain text that a script can still split. The split itself is the server's
 * (serve/reasoning.h), so both say the same about where reasoning ends. Every feed is flushed: the
 * user sees each token as it comes. Writes to stdout only. */
#ifndef TKV_TOOLS_CHAT_STREAM_H
#define TKV_TOOLS_CHAT_STREAM_H
#include <stddef.h>

#include "base/buf.h"
#include "serve/reasoning.h"

typedef struct {
    serve_think think;
    const char *open, *close; /* the markers (the chat format's strings), to start each answer anew */
    int by;             /* who opens the block: TKV_THINK_* */
    int tty;            /* 1: stdout is a terminal (ANSI faint); 0: [thinking] lines */
    int in_reasoning;   /* 1: the reasoning block is open on stdout */
    int werr;           /* 1: a write to stdout failed (sticky) */
    tkv_buf r, c;       /* scratch: what one feed releases to reasoning and to the answer */
} chat_stream;

/* open/close: the format's markers (NULL: none, everything is answer), kept by pointer (they must
 * outlive s); by as tkv_chat_reasoning says. */
void chat_stream_init(chat_stream *s, const char *open, const char *close, int by, int tty);
/* Prints what a detokenized piece releases; 0, or -1 once stdout has failed. */
int chat_stream_feed(chat_stream *s, const char *p, size_t n);
/* The end of the answer (also one cut short): held bytes out, an open reasoning block closed, a
 * newline; 0 or -1 as above. The state is ready for the next answer. */
int chat_stream_end(chat_stream *s);
void chat_stream_free(chat_stream *s);

#endif
