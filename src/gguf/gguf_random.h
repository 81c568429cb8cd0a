/* gguf_random.h — random tensor data of a ggml type, for the speed tools (gen-random writes it into
 * a GGUF, bench-ops times the backend's ops on it). Deterministic from the caller's seed. */
#ifndef TKV_GGUF_RANDOM_H
#define TKV_GGUF_RANDOM_H
#include <stdint.h>

/* xorshift64*: the next value, and a float uniform in [-1, 1) */
uint64_t gguf_rng_next(uint64_t *s);
float gguf_rng_unif(uint64_t *s);
/* The state n calls of gguf_rng_next would leave after state s, in O(log n): the update is linear
 * over GF(2), so it is a product of kept powers of its matrix. Lets a writer fill the pieces of one
 * stream on several threads and give the bytes of the sequential walk. */
uint64_t gguf_rng_skip(uint64_t s, uint64_t n);
/* Fills n elements (a whole number of blocks) of ggml type t for a matrix with n_in inputs: random
 * quant bytes whose f16 scales give every element a standard deviation of about 0.5/sqrt(n_in) (a
 * matmul of an O(1) activation stays O(1), nothing becomes NaN or inf); F32/F16/BF16 uniform. */
void gguf_fill_random(uint32_t t, uint8_t *buf, uint64_t n, uint64_t n_in, uint64_t *rng);
/* How many values that call draws from rng: one an element for F32/F16/BF16, one per 8 bytes (the
 * last partial) of the blocks for the quantised types. */
uint64_t gguf_fill_draws(uint32_t t, uint64_t n);

#endif
