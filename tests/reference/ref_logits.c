/* ref_logits.c — writes a reference engine's logits for a fixed token sequence, in the format of
 * the shared fixture models (fixtures/models/README.md): NAME.json (prompt, greedy, n_vocab,
 * n_prompt, first_logit_pos, rows, kv_type, threads) and NAME.logits.f32 (rows x n_vocab floats:
 * the prompt's logits from first_logit_pos on, computed in one batch, then one row per greedy step,
 * the logits after feeding that step's token).
 *
 * Built by make-qwen3-refs.sh against a llama.cpp-family engine's public C API (llama.h), outside
 * the project's build: this file is the project's own; the engine is not part of the repository.
 *
 * usage: ref_logits MODEL.gguf OUT_PREFIX N_PROMPT FIRST_LOGIT_POS N_GREEDY SEED|@IDS_FILE
 * (@IDS_FILE: the prompt ids read from a file, whitespace-separated, instead of drawn from a seed) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

/* the prompt: ids drawn uniformly from [0, n_vocab) by xorshift64* from seed */
static int32_t next_id(uint64_t *s, int n_vocab) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (int32_t)(((*s * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)n_vocab);
}

static int argmax(const float *v, int n) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[a]) a = i;
    return a;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s MODEL.gguf OUT_PREFIX N_PROMPT FIRST_LOGIT_POS N_GREEDY SEED\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *out = argv[2];
    int n_prompt = atoi(argv[3]), first = atoi(argv[4]), n_greedy = atoi(argv[5]);
    uint64_t seed = argv[6][0] == '@' ? 1 : strtoull(argv[6], NULL, 10) | 1;
    FILE *idf = argv[6][0] == '@' ? fopen(argv[6] + 1, "r") : NULL;
    if (argv[6][0] == '@' && !idf) {
        perror(argv[6] + 1);
        return 2;
    }
    if (n_prompt < 1 || first < 0 || first >= n_prompt || n_greedy < 0) {
        fprintf(stderr, "bad counts\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "%s: cannot load\n", path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_greedy + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F16; /* f16: this engine refuses an f32 V cache without flash attention */
    cp.type_v = GGML_TYPE_F16;
    cp.flash_attn = false;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    int V = llama_n_vocab(model);
    int32_t *ids = malloc(sizeof *ids * (size_t)(n_prompt + n_greedy));
    for (int i = 0; i < n_prompt; i++)
        if (idf ? fscanf(idf, "%d", &ids[i]) != 1 || ids[i] < 0 || ids[i] >= V : (ids[i] = next_id(&seed, V), 0)) {
            fprintf(stderr, "%s: fewer than %d ids in 0..%d\n", argv[6] + 1, n_prompt, V - 1);
            return 2;
        }
    if (idf) fclose(idf);

    char name[1024];
    snprintf(name, sizeof name, "%s.logits.f32", out);
    FILE *lf = fopen(name, "wb");
    if (!lf) {
        perror(name);
        return 1;
    }
    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    b.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i >= first;
    }
    if (llama_decode(ctx, b)) {
        fprintf(stderr, "decode failed\n");
        return 1;
    }
    int rows = 0, next = 0;
    for (int i = first; i < n_prompt; i++, rows++) {
        const float *lg = llama_get_logits_ith(ctx, i);
        fwrite(lg, sizeof(float), (size_t)V, lf);
        if (i == n_prompt - 1) next = argmax(lg, V);
    }
    for (int g = 0; g < n_greedy; g++, rows++) {
        ids[n_prompt + g] = next;
        b.n_tokens = 1;
        b.token[0] = next;
        b.pos[0] = n_prompt + g;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        if (llama_decode(ctx, b)) {
            fprintf(stderr, "decode failed at step %d\n", g);
            return 1;
        }
        const float *lg = llama_get_logits_ith(ctx, 0);
        fwrite(lg, sizeof(float), (size_t)V, lf);
        next = argmax(lg, V);
    }
    if (fclose(lf)) {
        perror(name);
        return 1;
    }
    snprintf(name, sizeof name, "%s.json", out);
    FILE *jf = fopen(name, "w");
    if (!jf) {
        perror(name);
        return 1;
    }
    fprintf(jf, "{\"n_vocab\": %d, \"n_prompt\": %d, \"first_logit_pos\": %d, \"rows\": %d, \"kv_type\": \"f16\", \"threads\": 1,\n \"prompt\": [",
            V, n_prompt, first, rows);
    for (int i = 0; i < n_prompt; i++) fprintf(jf, "%s%d", i ? "," : "", ids[i]);
    fprintf(jf, "],\n \"greedy\": [");
    for (int g = 0; g < n_greedy; g++) fprintf(jf, "%s%d", g ? "," : "", ids[n_prompt + g]);
    fprintf(jf, "]}\n");
    fclose(jf);
    llama_batch_free(b);
    llama_free(ctx);
    llama_free_model(model);
    free(ids);
    return 0;
}
