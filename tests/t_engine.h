/* t_engine.h — a model and a session opened together with n_seq sequences live from the start, for
 * the tests that drive the forward pass: one call opens what the public API opens in three steps
 * (tkv_model_open, tkv_session_open, tkv_seq_open), and sequence i of the helper is the session's
 * sequence handed out i-th. The KV options are the KV module's own (tests look inside the cache). */
#ifndef TKV_T_ENGINE_H
#define TKV_T_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "kv/kv.h"
#include "model/model.h"
#include "tierkv.h"

typedef struct {
    int n_threads;    /* default 2 */
    int n_ctx;        /* positions of each sequence, default 4096 */
    int n_seq;        /* sequences opened at the start, default 1 */
    int max_batch;    /* default 64 */
    int isa;          /* -1: auto; 0 generic, 1 avx2, 2 avx512 */
    int mmap_weights, keep_layout;
    int split;        /* split attention (tkv_kv_params.split) */
    const char *backend; /* NULL: "cpu"; "cpu-async" (a GPU's ordering, backend/cpu/cpu_async.c) */
    kv_options kv;
} te_options;

typedef struct te_engine te_engine;

void te_options_default(te_options *o);
int te_open(const char *path, const te_options *o, te_engine **out, char *err, size_t errlen);
void te_close(te_engine *e);
int te_n_vocab(const te_engine *e);
int te_prefill(te_engine *e, int seq, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
int te_decode(te_engine *e, const int *seqs, const int32_t *tokens, int n, float *logits, char *err, size_t errlen);
/* Closes sequence seq and opens it again, empty. */
void te_seq_reset(te_engine *e, int seq);
kv_cache *te_kv(te_engine *e);
const model *te_model(const te_engine *e);
tkv_session *te_session(te_engine *e);

#endif
