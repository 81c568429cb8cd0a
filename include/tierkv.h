/* tierkv.h — the public API: open a model, make a session (one KV hierarchy holding n_seq
 * sequences, a thread pool and the forward's buffers), feed prompts, decode tokens.
 * Errors: functions return 0 on success and -1 with a message in (err, errlen). Nothing exits. */
#ifndef TIERKV_H
#define TIERKV_H
#include <stddef.h>
#include <stdint.h>

#include "kv/kv.h"

typedef struct tkv_engine tkv_engine;

typedef struct {
    int n_threads;       /* default 2 */
    int n_ctx;           /* positions per sequence, default 4096 */
    int n_seq;           /* sequences decoded together, default 1 */
    int max_batch;       /* prefill chunk, default 64 */
    int isa;             /* -1: best from cpuid; else a cpu_isa value (0 generic, 1 avx2, 2 avx512) */
    int mmap_weights;    /* 1: map the file; 0 (default): copy it into huge-page memory when the
                            kernel allows and memory suffices (gguf_load, GGUF_AUTO) */
    int keep_layout;     /* 1: run the weights in the file's layouts; 0 (default): Q4_K, Q6_K, Q5_0
                            and Q8_0 matrices are reordered at load (Q4_KX, ...), which the
                            batched kernels run faster */
    kv_options kv;       /* policy and budgets; the shape fields are filled from the model */
} tkv_options;

void tkv_options_default(tkv_options *o);

int tkv_engine_open(const char *model_path, const tkv_options *o, tkv_engine **out, char *err, size_t errlen);
void tkv_engine_close(tkv_engine *e);

/* Model facts. */
int tkv_n_vocab(const tkv_engine *e);
const char *tkv_isa_name(const tkv_engine *e);
struct model;
const struct model *tkv_model_of(const tkv_engine *e);
kv_cache *tkv_kv_of(tkv_engine *e);

/* Appends n prompt tokens to sequence seq (chunked by max_batch). If logits is not NULL it
 * receives the logits of the last token; with all_logits, of every token (n x n_vocab). */
int tkv_prefill(tkv_engine *e, int seq, const int32_t *tokens, int n, float *logits, int all_logits,
                char *err, size_t errlen);
/* One decode step for n sequences at once: token tokens[i] appended to sequence seqs[i];
 * logits (n x n_vocab) receives the next-token logits of each. */
int tkv_decode(tkv_engine *e, const int *seqs, const int32_t *tokens, int n, float *logits, char *err, size_t errlen);
/* Forgets a sequence. */
void tkv_seq_reset(tkv_engine *e, int seq);
int tkv_seq_len(const tkv_engine *e, int seq);

#endif
