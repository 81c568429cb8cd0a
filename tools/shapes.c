/* shapes.c — the known models' shapes (see shapes.h). */
#include "shapes.h"

#include <string.h>


/* MODELS.md "Shapes"; eps 1e-6 for the Qwen family as FORMATS.md 4.2 says. */
const model_shape shapes_table[] = {
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, 1e-6f, 1},
    {"qwen2.5-coder-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1e6f, 1e-6f, 0},
    {"r1-distill-qwen-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 131072, 1e4f, 1e-6f, 0},
    {"r1-distill-qwen-7b", "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 131072, 1e4f, 1e-6f, 0},
    {"r1-distill-qwen-14b", "qwen2", 48, 5120, 40, 8, 128, 13824, 152064, 131072, 1e6f, 1e-6f, 0},
    {"r1-distill-qwen-32b", "qwen2", 64, 5120, 40, 8, 128, 27648, 152064, 131072, 1e6f, 1e-6f, 0},
    {"llama-70b", "llama", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 5e5f, 1e-5f, 0},
};
const size_t shapes_n = sizeof shapes_table / sizeof shapes_table[0];

const model_shape *shapes_find(const char *name) {
    for (size_t i = 0; name && i < shapes_n; i++)
        if (!strcmp(shapes_table[i].name, name)) return &shapes_table[i];
    return NULL;
}
