/* shapes.h — the shapes of the known models (MODELS.md), for the speed tools that work on random
 * weights (gen-random, bench-ops; the weights themselves: gguf/gguf_random.h) and for `plan`.
 * head_dim is given, not derived: a model's head may be wider than n_embd / n_head (Qwen3); where a
 * model's files carry no key_length (qwen2, llama) it equals n_embd / n_head. */
#ifndef TKV_TOOLS_SHAPES_H
#define TKV_TOOLS_SHAPES_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name, *arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv;
    uint32_t head_dim; /* K and V width of one head */
    uint32_t n_ff, n_vocab, n_ctx;
    float theta, eps;
    int tied; /* no output.weight: logits use token_embd */
} model_shape;

extern const model_shape shapes_table[];
extern const size_t shapes_n;
/* the shape called name, or NULL */
const model_shape *shapes_find(const char *name);

#endif
