/* forward.h — THE forward pass of qwen2/llama/qwen3/qwen3moe, over a batch of tokens that may belong to several
 * sequences (prefill chunks, or one decode token per sequence), on any backend (backend/backend.h).
 * Owns the activation buffers (allocated once at init in the backend's memory: nothing allocates
 * inside a step) and reads/writes K and V only through the KV cache interface (kv/kv.h), so tiering
 * never changes this file. */
#ifndef TKV_FORWARD_H
#define TKV_FORWARD_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "kv/kv.h"
#include "model/model.h"

typedef struct {
    int max_batch;   /* tokens per fwd_run call (prefill chunk size) */
    int n_ctx;       /* the longest sequence (the KV cache's n_ctx) */
    int split;       /* 1: attention in two parts (T0 and STAGE on the backend, T1 on the host backend),
                        merged by log-sum-exp; needs a host backend */
    int split_decode; /* with split: only calls that add one token to each of their sequences (decode
                        steps) are split; the others (prefill chunks) attend as the KV cache is
                        opened (staged T1: its rows cross once per chunk instead of being read by
                        the host for every sub-batch) */
} fwd_options;

typedef struct fwd fwd;

/* host: a CPU backend for the split attention's T1 part (may be the same as be), or NULL */
fwd *fwd_init(const model *m, kv_cache *kv, be_backend *be, be_backend *host, const fwd_options *o, char *err,
              size_t errlen);
void fwd_free(fwd *f);

/* Runs n tokens: token i of sequence seq[i] at position pos[i] (positions must continue each
 * sequence). is_prompt[i] marks prompt tokens (NULL: none is); after the forward, kv_batch_end ends
 * the call (a decode step for every sequence that had a non-prompt token). Logits of the rows with
 * want[i] (NULL: the last row only) are written in row order, n_vocab floats each, into logits.
 * Returns -1 with a message on bad input (n > max_batch, bad token id, position mismatch, full cache). */
int fwd_run(fwd *f, const int32_t *tokens, const int *seq, const int *pos, const uint8_t *is_prompt,
            const uint8_t *want, int n, float *logits, char *err, size_t errlen);

/* Seconds spent in attention (including fences) since init: for benchmarks. */
double fwd_attention_seconds(const fwd *f);
/* Bytes of expert matrices read since init (an expert FFN: each expert a call routes any token to
 * is read once per layer; where the backend routes, each token's experts, once per token, which a
 * backend grouping a prompt chunk's pairs by expert reads fewer times): for benchmarks. 0 for a
 * dense model. */
uint64_t fwd_expert_bytes(const fwd *f);
/* Bytes read back from a backend that is not host memory since init (attention weights, split
 * attention's queries, logits, router logits), and in *reads (if not NULL) the
 * reads, each of which waits for the device: for benchmarks. 0 on the CPU. */
uint64_t fwd_read_back_bytes(const fwd *f, uint64_t *reads);
/* Bytes split attention uploaded to a backend that is not host memory since init (0 otherwise). */
uint64_t fwd_split_sent_bytes(const fwd *f);

#endif
