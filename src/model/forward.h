/* forward.h — THE forward pass of qwen2/llama on the CPU, over a batch of tokens that may belong to
 * several sequences (prefill chunks, or one decode token per sequence). Owns the scratch buffers
 * (allocated once at init: nothing allocates inside a step) and reads/writes K and V only through
 * the KV cache interface (kv/kv.h), so tiering never changes this file. */
#ifndef TKV_FORWARD_H
#define TKV_FORWARD_H
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/ops.h"
#include "base/pool.h"
#include "kv/kv.h"
#include "model/model.h"

typedef struct {
    int max_batch;   /* tokens per fwd_run call (prefill chunk size) */
    int n_ctx;       /* positions per sequence (must match the KV cache) */
    int n_seq;       /* sequences (must match the KV cache) */
    cpu_isa isa;     /* kernel variant */
} fwd_options;

typedef struct fwd fwd;

fwd *fwd_init(const model *m, kv_cache *kv, tkv_pool *pool, const fwd_options *o, char *err, size_t errlen);
void fwd_free(fwd *f);

/* Runs n tokens: token i of sequence seq[i] at position pos[i] (positions must continue each
 * sequence). is_prompt[i] marks prompt tokens (NULL: none is); after the forward, kv_step_end is
 * called for every sequence that had a non-prompt token. Logits of the rows with want[i] (NULL: the
 * last row only) are written in row order, n_vocab floats each, into logits.
 * Returns -1 with a message on bad input (n > max_batch, bad token id, position mismatch, full cache). */
int fwd_run(fwd *f, const int32_t *tokens, const int *seq, const int *pos, const uint8_t *is_prompt,
            const uint8_t *want, int n, float *logits, char *err, size_t errlen);

/* Seconds spent in attention (including fences) since init: for benchmarks. */
double fwd_attention_seconds(const fwd *f);

#endif
