/* test_gen_random.c — gen-random's Qwen3 files, read back with the project's GGUF parser: qwen3
 * (no biases, per-head q/k norms around 1, key_length/value_length) and qwen3moe (an F32 router,
 * 3-D expert tensors of the requested type, the expert keys, no dense FFN), for the tiny test
 * shapes and the real shapes at one layer; the shape table's head_dim is what `plan` uses. These
 * are the names, shapes and keys the model loader binds. The qwen2/llama files: test_gguf.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/cmds.h"
#include "../tools/shapes.h"
#include "base/version.h"
#include "gguf/gguf.h"
#include "gguf/gguf_random.h"
#include "t.h"

/* the tensor called name with this type and shape (n_dims entries of ne), or 0 */
static int has(const gguf_file *f, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1,
               uint64_t ne2) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) { fprintf(stderr, "    no tensor %s\n", name); return 0; }
    int ok = t->type == type && t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 &&
             t->nbytes == ne0 / ggml_blck_size(type) * ggml_type_size(type) * ne1 * ne2;
    if (!ok)
        fprintf(stderr, "    %s: %s %u dims %llu x %llu x %llu, %llu bytes\n", name, ggml_type_name(t->type), t->n_dims,
                (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                (unsigned long long)t->nbytes);
    return ok;
}
static int u32_is(const gguf_file *f, const char *key, uint32_t want) {
    char err[256];
    uint32_t v;
    return gguf_get_u32(f, key, &v, err, sizeof err) == 0 && v == want;
}
static int arch_is(const gguf_file *f, const char *arch) {
    char err[256];
    gguf_str s;
    return gguf_get_str(f, "general.architecture", &s, err, sizeof err) == 0 && gguf_str_eq(s, arch);
}
/* no tensor of layer il has this suffix */
static int absent(const gguf_file *f, int il, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return gguf_find_tensor(f, name) == NULL;
}

/* gen-random SHAPE TYPE [--layers N] into the test folder, opened; 0 on success */
static int gen(const char *shape, const char *type, const char *layers, char *path, size_t cap, gguf_file *f) {
    char err[512];
    snprintf(path, cap, "%s/%s-%s.gguf", t_tmpdir(), shape, type);
    char *argv[] = {"gen-random", "--shape", (char *)shape, "--type", (char *)type, "-o", path, "--seed", "5",
                    layers ? "--layers" : NULL, (char *)layers, NULL};
    if (cmd_gen_random(layers ? 11 : 9, argv) != 0) return -1;
    if (gguf_open(path, f, err, sizeof err)) { fprintf(stderr, "    %s\n", err); return -1; }
    return 0;
}

/* the attention of a qwen3 layer: E wide, Q = heads x hd, KV = kv heads x hd; q/k norms of hd */
static void check_qwen3_attn(const gguf_file *f, int il, uint32_t E, uint32_t Q, uint32_t KV, uint32_t hd,
                             uint32_t tq, uint32_t tk, uint32_t tv, uint32_t to) {
    char n[96];
#define N(x) (snprintf(n, sizeof n, "blk.%d." x, il), n)
    CHECK(has(f, N("attn_norm.weight"), GGML_F32, 1, E, 1, 1));
    CHECK(has(f, N("attn_q.weight"), tq, 2, E, Q, 1));
    CHECK(has(f, N("attn_k.weight"), tk, 2, E, KV, 1));
    CHECK(has(f, N("attn_v.weight"), tv, 2, E, KV, 1));
    CHECK(has(f, N("attn_output.weight"), to, 2, Q, E, 1));
    CHECK(has(f, N("attn_q_norm.weight"), GGML_F32, 1, hd, 1, 1));
    CHECK(has(f, N("attn_k_norm.weight"), GGML_F32, 1, hd, 1, 1));
    CHECK(has(f, N("ffn_norm.weight"), GGML_F32, 1, E, 1, 1));
#undef N
    CHECK(absent(f, il, "attn_q.bias") && absent(f, il, "attn_k.bias") && absent(f, il, "attn_v.bias"));
}

/* q/k norm weights are 1 + 0.25 u, not all 1; the other norms are exactly 1 */
static void check_norm_values(const gguf_file *f) {
    const char *qk[] = {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight"};
    for (int i = 0; i < 2; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, qk[i]);
        REQUIRE(t);
        int off_one = 0, in_range = 1;
        for (uint64_t j = 0; j < t->ne[0]; j++) {
            float x;
            memcpy(&x, t->data + 4 * j, 4);
            off_one += x != 1.0f;
            in_range &= x >= 0.75f && x <= 1.25f;
        }
        CHECKF(in_range && off_one > (int)t->ne[0] / 2, "%s: %d of %llu differ from 1", qk[i], off_one,
               (unsigned long long)t->ne[0]);
    }
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_norm.weight");
    REQUIRE(t);
    float x;
    memcpy(&x, t->data + 4 * (t->ne[0] - 1), 4);
    CHECK(x == 1.0f);
}

TEST(gen_random_test_qwen3) {
    char path[512];
    gguf_file f;
    REQUIRE(gen("test-qwen3", "F16", NULL, path, sizeof path, &f) == 0);
    CHECK(arch_is(&f, "qwen3"));
    CHECK(u32_is(&f, "qwen3.block_count", 2) && u32_is(&f, "qwen3.embedding_length", 256));
    CHECK(u32_is(&f, "qwen3.attention.head_count", 4) && u32_is(&f, "qwen3.attention.head_count_kv", 2));
    CHECK(u32_is(&f, "qwen3.attention.key_length", 128) && u32_is(&f, "qwen3.attention.value_length", 128));
    CHECK(u32_is(&f, "qwen3.rope.dimension_count", 128) && u32_is(&f, "qwen3.feed_forward_length", 512));
    CHECK(u32_is(&f, "qwen3.context_length", 4096) && u32_is(&f, "general.file_type", 1));
    CHECK(gguf_find(&f, "qwen3.expert_count") == NULL && gguf_find(&f, "tokenizer.chat_template") == NULL);
    CHECK(f.n_tensors == 1 + 2 * 11 + 2);
    CHECK(has(&f, "token_embd.weight", GGML_F16, 2, 256, 1024, 1));
    CHECK(has(&f, "output.weight", GGML_F16, 2, 256, 1024, 1)); /* untied */
    CHECK(has(&f, "output_norm.weight", GGML_F32, 1, 256, 1, 1));
    for (int il = 0; il < 2; il++) {
        /* head_dim 128 x 4 heads: q is 512 wide, twice n_embd */
        check_qwen3_attn(&f, il, 256, 512, 256, 128, GGML_F16, GGML_F16, GGML_F16, GGML_F16);
        char n[64];
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", il);
        CHECK(has(&f, n, GGML_F16, 2, 256, 512, 1));
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", il);
        CHECK(has(&f, n, GGML_F16, 2, 256, 512, 1));
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", il);
        CHECK(has(&f, n, GGML_F16, 2, 512, 256, 1));
        CHECK(absent(&f, il, "ffn_gate_inp.weight"));
    }
    check_norm_values(&f);
    gguf_free(&f);
    remove(path);
}

TEST(gen_random_test_qwen3moe) {
    char path[512];
    gguf_file f;
    REQUIRE(gen("test-qwen3moe", "q4_k_m", NULL, path, sizeof path, &f) == 0); /* types in any case */
    CHECK(arch_is(&f, "qwen3moe"));
    CHECK(u32_is(&f, "qwen3moe.block_count", 2) && u32_is(&f, "qwen3moe.embedding_length", 256));
    CHECK(u32_is(&f, "qwen3moe.attention.key_length", 128) && u32_is(&f, "qwen3moe.attention.value_length", 128));
    CHECK(u32_is(&f, "qwen3moe.expert_count", 8) && u32_is(&f, "qwen3moe.expert_used_count", 2));
    CHECK(u32_is(&f, "qwen3moe.expert_feed_forward_length", 128) && u32_is(&f, "qwen3moe.feed_forward_length", 512));
    CHECK(u32_is(&f, "qwen3moe.rope.dimension_count", 128) && u32_is(&f, "general.file_type", 15));
    CHECK(gguf_find(&f, "qwen3.block_count") == NULL);
    CHECK(f.n_tensors == 1 + 2 * 12 + 1);
    CHECK(gguf_find_tensor(&f, "output.weight") == NULL);
    CHECK(has(&f, "token_embd.weight", GGML_Q6_K, 2, 256, 1024, 1)); /* tied: the output's type */
    for (int il = 0; il < 2; il++) {
        /* exactly 8 experts: llama.cpp's Q4_K_M puts attn_k/attn_v in Q8_0 and attn_output in Q5_K */
        check_qwen3_attn(&f, il, 256, 512, 256, 128, GGML_Q4_K, GGML_Q8_0, GGML_Q8_0, GGML_Q5_K);
        char n[64];
        snprintf(n, sizeof n, "blk.%d.ffn_gate_inp.weight", il);
        CHECK(has(&f, n, GGML_F32, 2, 256, 8, 1));
        snprintf(n, sizeof n, "blk.%d.ffn_gate_exps.weight", il);
        CHECK(has(&f, n, GGML_Q4_K, 3, 256, 128, 8));
        snprintf(n, sizeof n, "blk.%d.ffn_up_exps.weight", il);
        CHECK(has(&f, n, GGML_Q4_K, 3, 256, 128, 8));
        /* rows of 128: Q4_K falls back to Q5_0 and, in a "more bits" layer (the last), Q6_K to Q8_0 */
        snprintf(n, sizeof n, "blk.%d.ffn_down_exps.weight", il);
        CHECK(has(&f, n, il ? GGML_Q8_0 : GGML_Q5_0, 3, 128, 256, 8));
        CHECK(absent(&f, il, "ffn_gate.weight") && absent(&f, il, "ffn_up.weight") && absent(&f, il, "ffn_down.weight"));
        CHECK(absent(&f, il, "ffn_gate_inp_shexp.weight") && absent(&f, il, "ffn_up_shexp.weight"));
    }
    /* the tensors tile the data section in order: each starts where the previous one's padding ends */
    uint64_t at = 0;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        CHECK(f.tensors[i].offset == at);
        at = (f.tensors[i].offset + f.tensors[i].nbytes + 31) / 32 * 32;
    }
    CHECK(f.data_start + at == f.size);
    check_norm_values(&f);
    gguf_free(&f);
    remove(path);
}

/* The real shapes at one layer: Qwen3-0.6B (tied; n_embd 1024 but q 2048 wide) and Qwen3-30B-A3B
 * (128 experts: none of the 8-expert rules; about 0.8 GiB written, then removed). */
TEST(gen_random_qwen3_real_shapes) {
    char path[512];
    gguf_file f;
    REQUIRE(gen("qwen3-0.6b", "Q4_K_M", "1", path, sizeof path, &f) == 0);
    CHECK(arch_is(&f, "qwen3") && u32_is(&f, "qwen3.block_count", 1) && u32_is(&f, "qwen3.attention.key_length", 128));
    CHECK(u32_is(&f, "qwen3.context_length", 40960) && u32_is(&f, "qwen3.feed_forward_length", 3072));
    CHECK(f.n_tensors == 1 + 11 + 1 && gguf_find_tensor(&f, "output.weight") == NULL);
    CHECK(has(&f, "token_embd.weight", GGML_Q6_K, 2, 1024, 151936, 1));
    check_qwen3_attn(&f, 0, 1024, 2048, 1024, 128, GGML_Q4_K, GGML_Q4_K, GGML_Q6_K, GGML_Q4_K);
    CHECK(has(&f, "blk.0.ffn_gate.weight", GGML_Q4_K, 2, 1024, 3072, 1));
    CHECK(has(&f, "blk.0.ffn_down.weight", GGML_Q6_K, 2, 3072, 1024, 1));
    gguf_free(&f);
    remove(path);

    REQUIRE(gen("qwen3-30b-a3b", "Q4_K_M", "1", path, sizeof path, &f) == 0);
    CHECK(arch_is(&f, "qwen3moe") && u32_is(&f, "qwen3moe.block_count", 1));
    CHECK(u32_is(&f, "qwen3moe.embedding_length", 2048) && u32_is(&f, "qwen3moe.feed_forward_length", 6144));
    CHECK(u32_is(&f, "qwen3moe.attention.head_count", 32) && u32_is(&f, "qwen3moe.attention.head_count_kv", 4));
    CHECK(u32_is(&f, "qwen3moe.expert_count", 128) && u32_is(&f, "qwen3moe.expert_used_count", 8));
    CHECK(u32_is(&f, "qwen3moe.expert_feed_forward_length", 768) && u32_is(&f, "qwen3moe.attention.key_length", 128));
    CHECK(f.n_tensors == 1 + 12 + 2);
    CHECK(has(&f, "token_embd.weight", GGML_Q4_K, 2, 2048, 151936, 1));
    CHECK(has(&f, "output.weight", GGML_Q6_K, 2, 2048, 151936, 1));
    check_qwen3_attn(&f, 0, 2048, 4096, 512, 128, GGML_Q4_K, GGML_Q4_K, GGML_Q6_K, GGML_Q4_K);
    CHECK(has(&f, "blk.0.ffn_gate_inp.weight", GGML_F32, 2, 2048, 128, 1));
    CHECK(has(&f, "blk.0.ffn_gate_exps.weight", GGML_Q4_K, 3, 2048, 768, 128));
    CHECK(has(&f, "blk.0.ffn_up_exps.weight", GGML_Q4_K, 3, 2048, 768, 128));
    CHECK(has(&f, "blk.0.ffn_down_exps.weight", GGML_Q6_K, 3, 768, 2048, 128)); /* as ffn_down: more bits */
    gguf_free(&f);
    remove(path);
}

/* Rows whose files carry no key_length must have head_dim = n_embd / n_head (what loaders then
 * derive); experts all set or all 0. */
TEST(gen_random_shape_table) {
    for (size_t i = 0; i < shapes_n; i++) {
        const model_shape *s = &shapes_table[i];
        int qwen3 = !strncmp(s->arch, "qwen3", 5), moe = !strcmp(s->arch, "qwen3moe");
        CHECKF(s->head_dim > 0 && s->n_head % s->n_head_kv == 0 && s->n_layer > 0, "%s", s->name);
        CHECKF(qwen3 || s->head_dim * s->n_head == s->n_embd, "%s: head_dim %u", s->name, s->head_dim);
        CHECKF(moe ? s->n_expert > 0 && s->n_expert_used > 0 && s->n_expert_used <= s->n_expert && s->n_ff_exp > 0
                   : !s->n_expert && !s->n_expert_used && !s->n_ff_exp, "%s: experts", s->name);
        CHECK(shapes_find(s->name) == s);
    }
    CHECK(shapes_find("qwen3-8b") && shapes_find("qwen3-8b")->head_dim == 128 && !shapes_find("qwen3-8b")->tied);
}

/* plan --shape takes head_dim from the table: Qwen3-0.6B's is 128, not 1024 / 16 */
TEST(gen_random_plan_head_dim) {
    FILE *saved = stdout;
    char *out = NULL;
    size_t n = 0;
    stdout = open_memstream(&out, &n);
    REQUIRE(stdout);
    char *argv[] = {"plan", "--shape", "qwen3-0.6b", "--policy", "full", NULL};
    int rc = cmd_plan(5, argv);
    char *argv2[] = {"plan", "--shape", "qwen3-30b-a3b", "--policy", "full", NULL};
    int rc2 = cmd_plan(5, argv2);
    fclose(stdout);
    stdout = saved;
    CHECK(rc == 0 && rc2 == 0);
    /* 2 x 28 layers x 8 kv heads x 128 x 2 bytes; 2 x 48 x 4 x 128 x 2 */
    CHECKF(out && strstr(out, "qwen3-0.6b (28 layers, 8 kv heads, head dim 128)") && strstr(out, "per token: 114688 "),
           "%s", out ? out : "");
    CHECKF(out && strstr(out, "qwen3-30b-a3b (48 layers, 4 kv heads, head dim 128)") && strstr(out, "per token: 98304 "),
           "%s", out ? out : "");
    free(out);
}

/* gguf_rng_skip(s, n) is the state after n calls of gguf_rng_next, and gguf_fill_draws counts the
 * calls gguf_fill_random makes, for every type (the pieces gen-random fills on its threads start
 * where these say). */
TEST(gen_random_rng_skip) {
    uint64_t s0 = 0x9E3779B97F4A7C15ull * 5 + 0x1234567ull, s = s0, done = 0;
    const uint64_t at[] = {0, 1, 2, 63, 64, 65, 1000, 4096, 123457};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        while (done < at[i]) gguf_rng_next(&s), done++;
        CHECKF(gguf_rng_skip(s0, at[i]) == s, "skip %llu", (unsigned long long)at[i]);
    }
    CHECK(gguf_rng_skip(s0, 1) != s0 && gguf_rng_skip(gguf_rng_skip(s0, 7), 9) == gguf_rng_skip(s0, 16));
    const uint32_t types[] = {GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q4_0, GGML_Q5_0, GGML_Q5_1,
                              GGML_Q4_K, GGML_Q5_K, GGML_Q6_K};
    uint8_t *buf = malloc(3 * 256 * 4);
    REQUIRE(buf);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (uint64_t nblk = 1; nblk <= 3; nblk++) {
            uint64_t n = nblk * (uint64_t)ggml_blck_size(types[i]), r = s0;
            gguf_fill_random(types[i], buf, n, n, &r);
            CHECKF(r == gguf_rng_skip(s0, gguf_fill_draws(types[i], n)), "%s x %llu", ggml_type_name(types[i]),
                   (unsigned long long)n);
        }
    free(buf);
}

/* FNV-1a of a file, or 0 */
static uint64_t file_hash(const char *path) {
    size_t n;
    char *b = t_slurp_n(path, &n);
    uint64_t h = b ? tkv_fnv1a64(b, n) : 0;
    free(b);
    return h;
}

/* gen-random fills its chunks on threads, each from where the one sequential walk reaches it: the
 * file is the same for any -t, and the same bytes as the sequential writer made before threads
 * (hashes taken from its files: the 0.5B one has 18 chunks of token_embd alone, so the pieces of
 * one tensor start mid-stream). */
TEST(gen_random_threads_same_bytes) {
    static const struct { const char *shape, *type, *layers, *seed; uint64_t hash; } C[] = {
        {"qwen2.5-0.5b", "Q4_K_M", "1", "3", 0x53896c13d4576f68ull},
        {"test-qwen3moe", "F16", "2", "5", 0xf02cb64a59660536ull},
        {"test-qwen3moe", "BF16", "2", "5", 0x13bbd9b4a5afc25cull},
        {"test-qwen3moe", "Q4_K_M", "2", "5", 0x93ca060b0ddcc208ull},
        {"test-qwen3moe", "Q8_0", "2", "5", 0x688e7ecef0e3e609ull},
    };
    const char *threads[] = {"1", "3"};
    char path[512];
    snprintf(path, sizeof path, "%s/threads.gguf", t_tmpdir());
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
        for (int k = 0; k < 2; k++) {
            remove(path);
            char *argv[] = {"gen-random", "--shape", (char *)C[i].shape, "--type", (char *)C[i].type,
                            "--layers", (char *)C[i].layers, "--seed", (char *)C[i].seed,
                            "-t", (char *)threads[k], "-o", path, NULL};
            REQUIRE(cmd_gen_random(13, argv) == 0);
            uint64_t h = file_hash(path);
            CHECKF(h == C[i].hash, "%s %s -t %s: hash %016llx, want %016llx", C[i].shape, C[i].type, threads[k],
                   (unsigned long long)h, (unsigned long long)C[i].hash);
        }
    remove(path);
    char *bad[] = {"gen-random", "--shape", "test-qwen3", "--type", "F16", "-t", "0", "-o", path, NULL};
    CHECK(cmd_gen_random(9, bad) == 2 && access(path, F_OK) != 0);
}
