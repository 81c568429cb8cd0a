/* reasoning.h — splits a streamed completion into reasoning and answer (DeepSeek-R1's and Qwen3's
 * <think> … </think>). Pure: bytes in, bytes out; the markers and who opens the block come from
 * tkv_chat_reasoning.
 *
 * The text is fed as the detokenizer releases it, a token's piece at a time, so a marker may
 * arrive split over several pieces: bytes that may begin a marker are held until they are known
 * not to (at most the marker's length). Rules:
 *   - opened by the prompt (TKV_THINK_PROMPT_OPENS: R1's generation prompt ends with "<think>\n"):
 *     everything up to the first close marker is reasoning;
 *   - opened by the model (TKV_THINK_MODEL_OPENS: Qwen3 with thinking on writes "<think>\n" first):
 *     when the output begins (after optional whitespace) with the open marker, that block is
 *     reasoning; an open marker later in the answer is just text;
 *   - closed by the prompt (TKV_THINK_PROMPT_CLOSED: Qwen3 with thinking off): everything is answer;
 *   - the markers themselves and the whitespace right after each belong to neither part;
 *   - without markers (a format that has none) everything is answer.
 * Not done here: stop strings (applied before, on the raw text) and JSON. */
#ifndef TKV_SERVE_REASONING_H
#define TKV_SERVE_REASONING_H
#include <stddef.h>

#include "base/buf.h"
#include "tierkv.h"

enum { THINK_START, THINK_LEAD, THINK_IN, THINK_AFTER, THINK_OUT };

typedef struct {
    char open[32], close[32]; /* the markers ("" when the format has none) */
    size_t n_open, n_close;
    int state;                /* THINK_*: before any text, right after the open marker, in reasoning, right
                                 after the close marker, answer */
    char hold[64];            /* bytes that may begin a marker (or leading whitespace before the open one) */
    size_t n_hold;
} serve_think;

/* open/close NULL (or longer than 31 bytes): no split; by: a TKV_THINK_* value. */
void serve_think_init(serve_think *t, const char *open, const char *close, int by);
/* Appends what the bytes release to reasoning and content; returns 1 when any of them was taken
 * while in reasoning (the token counts as a reasoning token). */
int serve_think_feed(serve_think *t, const char *p, size_t n, tkv_buf *reasoning, tkv_buf *content);
/* The end of the text: held bytes go out to the part they were held in. */
void serve_think_flush(serve_think *t, tkv_buf *reasoning, tkv_buf *content);
/* 1 when the format has markers (a response then carries reasoning_content, also when the prompt
 * closed the block). */
int serve_think_enabled(const serve_think *t);

#endif
