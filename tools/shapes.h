/* shapes.h — the shapes of the known models (MODELS.md), for the speed tools that work on random
 * weights (gen-random, bench-ops; the weights themselves: gguf/gguf_random.h) and for `plan`.
 * head_dim is given, not derived: Qwen3's is 128 while n_embd / n_head may be 64 (Qwen3-0.6B); for
 * qwen2 and llama rows it equals n_embd / n_head (their files carry no key_length). A mixture of
 * experts (qwen3moe) has n_expert > 0: each layer's FFN is n_expert experts of width n_ff_exp, of
 * which n_expert_used run per token; n_ff is then only the value its files carry in
 * feed_forward_length. The rows named test-* are tiny fixtures for tests, not real models. */
#ifndef TKV_TOOLS_SHAPES_H
#define TKV_TOOLS_SHAPES_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name, *arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv;
    uint32_t head_dim;                          /* K and V width of one head */
    uint32_t n_ff, n_vocab, n_ctx;
    float theta, eps;
    int tied;                                   /* no output.weight: logits use token_embd */
    uint32_t n_expert, n_expert_used, n_ff_exp; /* mixture of experts; all 0 for a dense model */
} model_shape;

extern const model_shape shapes_table[];
extern const size_t shapes_n;
/* the shape called name, or NULL */
const model_shape *shapes_find(const char *name);

#endif
