/* pretok.h - the pre-tokenizer: splits a fragment of code points into "words" the way llama.cpp's
 * hand-written scanners for the gpt-2 and llama3/qwen2 regexes do (FORMATS.md 5.4). Every code
 * point lands in exactly one word; nothing is dropped. No regex engine, no allocation. */
#ifndef TKV_PRETOK_H
#define TKV_PRETOK_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    TOK_PRE_GPT2 = 0,   /* "gpt-2" */
    TOK_PRE_LLAMA3 = 1, /* "llama-bpe", "llama3", "llama-v3", "falcon3": digits in runs of up to 3 */
    TOK_PRE_QWEN2 = 2,  /* "qwen2", "deepseek-r1-qwen", "megrez": digits one at a time */
} tok_pre;

/* Maps a tokenizer.ggml.pre value to tok_pre; -1 if the name is not one we implement. */
int tok_pre_from_name(const char *name, size_t len);

/* Per code point class bits used by the scanners. */
enum { TOK_F_L = 1, TOK_F_N = 2, TOK_F_WS = 4 };
uint8_t tok_cp_flags(uint32_t cp);

/* Splits cps[0..n) (with fl[i] = tok_cp_flags(cps[i])) into words. Writes each word's end index
 * (exclusive) to ends[], which needs room for n entries, and returns the number of words. */
size_t tok_pretok_split(tok_pre pre, const uint32_t *cps, const uint8_t *fl, size_t n, uint32_t *ends);

#endif
