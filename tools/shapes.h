/* shapes.h — the shapes of the known models (MODELS.md) and random weights of a given type, for the
 * speed tools: gen-random writes them into a GGUF, bench-ops times the backend's ops on them.
 * Random weights only: nothing here loads or checks a real model. */
#ifndef TKV_TOOLS_SHAPES_H
#define TKV_TOOLS_SHAPES_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name, *arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float theta, eps;
    int tied; /* no output.weight: logits use token_embd */
} model_shape;

extern const model_shape shapes_table[];
extern const size_t shapes_n;
/* the shape called name, or NULL */
const model_shape *shapes_find(const char *name);

/* xorshift64*: the next value, and a float uniform in [-1, 1) */
uint64_t shapes_rng_next(uint64_t *s);
float shapes_rng_unif(uint64_t *s);
/* Fills n elements (a whole number of blocks) of ggml type t for a matrix with n_in inputs: random
 * quant bytes whose f16 scales give every element a standard deviation of about 0.5/sqrt(n_in) (a
 * matmul of an O(1) activation stays O(1), nothing becomes NaN or inf); F32/F16/BF16 uniform. */
void shapes_fill(uint32_t t, uint8_t *buf, uint64_t n, uint64_t n_in, uint64_t *rng);

#endif
