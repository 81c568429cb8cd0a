/* sampler.h - picking the next token from logits, and stopping. Order (as llama.cpp's default
 * chain): repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 is
 * greedy (argmax after the penalty). The PRNG is our own (xoshiro256**, seeded by splitmix64), so a
 * seed gives the same tokens on every platform. Buffers are allocated at init: sampling allocates
 * nothing. The stop-string matcher holds back streamed text that may be the start of a stop string. */
#ifndef TKV_SAMPLER_H
#define TKV_SAMPLER_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off; keeps p >= min_p * p_max */
    float repeat_penalty; /* 1: off; logit > 0 is divided by it, else multiplied */
    int repeat_last_n;    /* how much history the penalty looks at; < 0: all of it */
    uint64_t seed;
} sampler_opts;

/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1 (off), last_n 64, seed 0 */
sampler_opts sampler_defaults(void);

typedef struct {
    sampler_opts o;
    int n_vocab;
    uint64_t rng[4];  /* xoshiro256** state */
    struct sampler_cand { float l; int32_t id; } *cand; /* [n_vocab] surviving candidates */
    float *tmp;       /* [n_vocab] scratch: logits for the top-k selection, then probabilities */
    uint8_t *seen;    /* [n_vocab] penalty: ids already penalised in this call */
} sampler;

void sampler_init(sampler *s, const sampler_opts *o, int n_vocab);
void sampler_free(sampler *s);
/* Returns the next token. logits[0..n_vocab) is modified (the penalty is applied in place);
 * history holds the ids seen so far (prompt and generated), most recent last. */
int32_t sampler_sample(sampler *s, float *logits, int n_vocab, const int32_t *history, int n_hist);
/* Uniform double in [0, 1) from the sampler's PRNG (exposed for tests). */
double sampler_uniform(sampler *s);

/* Stop strings over streamed text. Feed decoded text; text that cannot be part of a stop string is
 * released, text that may be the start of one is held. When a stop string appears, everything before
 * it is released, the rest dropped, and feed returns 1. */
typedef struct {
    const char *const *stops; /* not owned */
    int n_stops;
    size_t max_len;           /* longest stop string */
    char *held;               /* [max_len] text that may begin a stop string */
    size_t n_held;
    int stopped;
} stop_matcher;

void stop_init(stop_matcher *m, const char *const *stops, int n_stops);
void stop_free(stop_matcher *m);
/* Writes the released text to out (room for n + max_len bytes) and its length to *out_n.
 * Returns 1 once a stop string has matched (then further feeds release nothing). */
int stop_feed(stop_matcher *m, const char *s, size_t n, char *out, size_t *out_n);
/* End of generation without a stop: releases the held text (at most max_len bytes). */
size_t stop_flush(stop_matcher *m, char *out);

#endif
