/* gguf_random.h — random tensor data of a ggml type, for the speed tools (gen-random writes it into
 * a GGUF, bench-ops times the backend's ops on it). Deterministic from the caller's seed. */
#ifndef TKV_GGUF_RANDOM_H
#define TKV_GGUF_RANDOM_H
#include <stdint.h>

/* xorshift64*: the next value, and a float uniform in [-1, 1) */
uint64_t gguf_rng_next(uint64_t *s);
float gguf_rng_unif(uint64_t *s);
/* Fills n elements (a whole number of blocks) of ggml type t for a matrix with n_in inputs: random
 * quant bytes whose f16 scales give every element a standard deviation of about 0.5/sqrt(n_in) (a
 * matmul of an O(1) activation stays O(1), nothing becomes NaN or inf); F32/F16/BF16 uniform. */
void gguf_fill_random(uint32_t t, uint8_t *buf, uint64_t n, uint64_t n_in, uint64_t *rng);

#endif
