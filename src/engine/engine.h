/* engine.h — the structs behind include/tierkv.h, for the engine's own files and for tests that look
 * inside a session (tests/ may include this; tools/ and src/eval/ use tierkv.h only).
 *
 * Owns: a tkv_model is the loaded model (weights bound and prepared, its GGUF file, tokenizer) and
 * the CPU thread pool; a tkv_session the KV cache, the forward and the per-call index arrays; a
 * sequence id is an index into the session's slots. */
#ifndef TKV_ENGINE_H
#define TKV_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/ops.h"
#include "base/pool.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "tierkv.h"

struct tkv_model {
    model *m;          /* NULL when opened vocab_only */
    gguf_file *file;   /* the metadata: m->file, or vocab_file */
    gguf_file vocab_file;
    tok_vocab *vocab;
    tkv_pool *pool;
    cpu_isa isa;
    tkv_model_params p;
};

typedef struct {
    int open;          /* 1 while the sequence is live */
    kv_stats base;     /* the slot's counters when the sequence opened (kv counters are per slot) */
} tkv_seq_slot;

struct tkv_session {
    tkv_model *model;
    kv_cache *kv;
    fwd *fw;
    tkv_session_params p;
    tkv_seq_slot *seqs;   /* [max_seqs] */
    kv_stats closed;      /* counters of closed sequences */
    int n_open;
    int32_t *tok;         /* [max_batch] */
    int *seq, *pos;
    uint8_t *prompt, *want;
};

/* The public KV parameters as the KV module's options (shape filled in by the caller). */
void engine_kv_options(const tkv_kv_params *p, kv_options *o);
/* The KV cache of a session (tests look inside it). */
kv_cache *engine_kv(tkv_session *s);

#endif
