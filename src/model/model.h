/* model.h — a loaded qwen2/llama/qwen3/qwen3moe model: its configuration, read from GGUF metadata alone, and its
 * weights bound to the loaded file's bytes (no copies, except norms/biases stored in F16 or BF16),
 * then prepared for a backend (model_prepare: the CPU reorders some matrices in place for its
 * kernels, a GPU copies them to the device).
 *
 * Architecture (one graph for all four, FORMATS.md section 4; the differences below it):
 *   x = embed(token)
 *   per layer:  h = rmsnorm(x)·attn_norm;  q,k,v = Wq h+bq, Wk h+bk, Wv h+bv;  rope(q,k) at pos
 *               KV cache <- k (after RoPE), v;  o = attention(q, K[0..pos], V[0..pos]);  x += Wo o (+bo)
 *               h = rmsnorm(x)·ffn_norm;  x += Wdown(silu(Wgate h) ⊙ Wup h)
 *   logits = Wout(rmsnorm(x)·output_norm)     (Wout = output.weight, or token_embd when tied)
 * qwen2: NeoX (half-split) RoPE, q/k/v biases required. llama: adjacent-pair RoPE, biases optional.
 * qwen3: qwen2's NeoX RoPE without biases; q and k are RMS-normed per head (attn_q_norm, attn_k_norm,
 *        [head_dim] each) before RoPE; the head dimension is the file's key_length (not n_embd/n_head).
 * qwen3moe: qwen3's attention; the FFN is a mixture of experts: router probabilities
 *        p = softmax(Wrouter h), the n_expert_used largest taken and renormalised to sum to one (as
 *        Qwen3-MoE does; the file has no key for it), x += sum_k w_k Wdown_k(silu(Wgate_k h) ⊙ Wup_k h). */
#ifndef TKV_MODEL_H
#define TKV_MODEL_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"

typedef struct {
    char arch[16];        /* "qwen2", "llama", "qwen3" or "qwen3moe" */
    int n_layer;
    int n_embd;
    int n_head, n_head_kv, head_dim;
    int n_ff;
    int n_vocab;
    int n_ctx_train;
    float rms_eps;
    float rope_base;
    int rope_neox;        /* 1: pairs (i, i+hd/2) (qwen2); 0: pairs (2i, 2i+1) (llama) */
    float rope_scale;     /* linear RoPE scaling: theta *= rope_scale (1 = none) */
    int qk_norm;          /* 1: per-head RMSNorm of q and k before RoPE (qwen3, qwen3moe) */
    int n_expert;         /* experts of the FFN (0: a dense FFN) */
    int n_expert_used;    /* experts each token is routed to */
    int n_ff_exp;         /* rows of each expert's gate and up matrices */
} model_config;

/* n_out rows of n_in elements, ggml type `type` (after model_prepare: the backend's) */
typedef be_mat model_mat;

typedef struct {
    const float *attn_norm;            /* [n_embd] */
    model_mat wq, wk, wv, wo;          /* wq: (n_head*hd) x n_embd; wk, wv: (n_head_kv*hd) x n_embd; wo: n_embd x (n_head*hd) */
    const float *bq, *bk, *bv, *bo;    /* biases or NULL */
    const float *q_norm, *k_norm;      /* [head_dim] each, or NULL (cfg.qk_norm) */
    const float *ffn_norm;             /* [n_embd] */
    model_mat wgate, wup, wdown;       /* gate, up: n_ff x n_embd; down: n_embd x n_ff (dense FFN) */
    model_mat router;                  /* n_expert x n_embd (expert FFN) */
    model_mat *egate, *eup, *edown;    /* [n_expert] each: gate, up n_ff_exp x n_embd; down n_embd x
                                          n_ff_exp (slices of the file's 3-D expert tensors) */
    uint64_t expert_bytes;             /* bytes of one expert's three matrices in the file */
} model_layer;

typedef struct model {
    model_config cfg;
    gguf_file file;
    model_mat tok_embd;                /* n_vocab x n_embd */
    model_mat output;                  /* n_vocab x n_embd (= tok_embd when tied) */
    int tied_output;
    const float *output_norm;          /* [n_embd] */
    model_layer *layers;               /* [n_layer] */
    float *k_center;                   /* [n_layer][n_head_kv * head_dim] the K biases as host f32 (zeros
                                          for a layer without one), the centre of the centred T2
                                          formats (backend.h); NULL when no layer has a K bias */
    float **owned;                     /* vectors converted to f32 at load */
    int n_owned;
    uint64_t weight_bytes;             /* bytes the forward reads for one token: every matrix, but of an
                                          expert FFN only the n_expert_used experts a token is routed to */
    uint64_t expert_bytes;             /* bytes of one expert's three matrices, summed over the layers */
    uint64_t weight_macs;              /* multiply-adds of one token's matrix products (the matrices of
                                          weight_bytes) */
} model;

/* Reads the configuration from metadata; errors name the missing or bad key. */
int model_config_from_gguf(const gguf_file *f, model_config *c, char *err, size_t errlen);
/* Opens (gguf_load: a huge-page copy when possible; mmap_only maps the file), parses and binds:
 * names, shapes, block sizes and the norm/bias types are checked here, the weight types by the
 * backend at model_prepare. Errors list every missing tensor, or name a bad shape or type. */
int model_open(const char *path, int mmap_only, model **out, char *err, size_t errlen);
/* Hands every matrix and vector to the backend (prepare_weight / prepare_vector). The model's pages
 * are made writable for it on a unified backend (the CPU reorders Q4_K, Q6_K, Q5_0, Q8_0 matrices in
 * place, not an untied embedding, which is only looked up; under mmap_only the written pages stop
 * being shared with the page cache) and read-only again after. */
int model_prepare(model *m, be_backend *be, char *err, size_t errlen);
/* Binds a file already parsed (takes ownership of *f on success). */
int model_bind(gguf_file *f, model **out, char *err, size_t errlen);
void model_close(model *m);

#endif
