/* shapes.c — the known models' shapes (see shapes.h). */
#include "shapes.h"

#include <string.h>


/* MODELS.md "Shapes" and the Qwen3 configs (config.json: hidden_size, num_attention_heads,
 * num_key_value_heads, head_dim, intermediate_size, max_position_embeddings; for 30B-A3B also
 * num_experts, num_experts_per_tok, moe_intermediate_size); eps 1e-6 for the Qwen family as
 * FORMATS.md 4.2 says. */
const model_shape shapes_table[] = {
    /* name                  arch        layers embd heads kv  hd   ff     vocab   ctx     theta  eps   tied experts */
    {"qwen2.5-0.5b",         "qwen2",    24,    896, 14,   2,  64,  4864,  151936, 32768,  1e6f, 1e-6f, 1, 0, 0, 0},
    {"qwen2.5-coder-1.5b",   "qwen2",    28,   1536, 12,   2,  128, 8960,  151936, 32768,  1e6f, 1e-6f, 0, 0, 0, 0},
    {"r1-distill-qwen-1.5b", "qwen2",    28,   1536, 12,   2,  128, 8960,  151936, 131072, 1e4f, 1e-6f, 0, 0, 0, 0},
    {"r1-distill-qwen-7b",   "qwen2",    28,   3584, 28,   4,  128, 18944, 152064, 131072, 1e4f, 1e-6f, 0, 0, 0, 0},
    {"r1-distill-qwen-14b",  "qwen2",    48,   5120, 40,   8,  128, 13824, 152064, 131072, 1e6f, 1e-6f, 0, 0, 0, 0},
    {"r1-distill-qwen-32b",  "qwen2",    64,   5120, 40,   8,  128, 27648, 152064, 131072, 1e6f, 1e-6f, 0, 0, 0, 0},
    {"llama-70b",            "llama",    80,   8192, 64,   8,  128, 28672, 128256, 131072, 5e5f, 1e-5f, 0, 0, 0, 0},
    {"qwen3-0.6b",           "qwen3",    28,   1024, 16,   8,  128, 3072,  151936, 40960,  1e6f, 1e-6f, 1, 0, 0, 0},
    {"qwen3-8b",             "qwen3",    36,   4096, 32,   8,  128, 12288, 151936, 40960,  1e6f, 1e-6f, 0, 0, 0, 0},
    /* n_ff 6144 is what its files carry in feed_forward_length; its experts are 768 wide */
    {"qwen3-30b-a3b",        "qwen3moe", 48,   2048, 32,   4,  128, 6144,  151936, 40960,  1e6f, 1e-6f, 0, 128, 8, 768},
    /* tiny fixtures: head_dim 128 with n_embd / n_head = 64, as Qwen3-0.6B; 8 experts of 128 (not a
     * multiple of 256: the K mix falls back there, as it does on real files with such rows) */
    {"test-qwen3",           "qwen3",    2,     256, 4,    2,  128, 512,   1024,   4096,   1e6f, 1e-6f, 0, 0, 0, 0},
    {"test-qwen3moe",        "qwen3moe", 2,     256, 4,    2,  128, 512,   1024,   4096,   1e6f, 1e-6f, 1, 8, 2, 128},
};
const size_t shapes_n = sizeof shapes_table / sizeof shapes_table[0];

const model_shape *shapes_find(const char *name) {
    for (size_t i = 0; name && i < shapes_n; i++)
        if (!strcmp(shapes_table[i].name, name)) return &shapes_table[i];
    return NULL;
}
