/* engine.h — the structs behind include/tierkv.h, for the engine's own files and for tests that look
 * inside a session (tests/ may include this; tools/ and src/eval/ use tierkv.h only).
 *
 * Owns: a tkv_model is the loaded model (weights bound and prepared for its backend, its GGUF
 * metadata, tokenizer) and the backend; a tkv_session the KV cache (its pools in the backend's
 * memory), the forward and the per-call index arrays. A sequence id is the KV cache's. */
#ifndef TKV_ENGINE_H
#define TKV_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
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
    be_backend *be;    /* NULL when vocab_only */
    tkv_model_params p;
    uint64_t ident;    /* the file's identity: FNV-1a of its header (metadata and tensor table) and size */
};

struct tkv_session {
    tkv_model *model;
    kv_cache *kv;
    fwd *fw;
    be_backend *host;     /* the split attention's host part when the model's backend is not the CPU */
    tkv_session_params p;
    int32_t *tok;         /* [max_batch] */
    int *seq, *pos;
    uint8_t *prompt, *want;
};

/* The public KV parameters as the KV module's options (shape filled in by the caller). */
void engine_kv_options(const tkv_kv_params *p, kv_options *o);
/* The same, with the names checked (an unknown T2 codec); no T2 codec given: the default of the
 * backend named (NULL: the CPU's). */
int engine_kv_options_checked(const tkv_kv_params *p, const char *backend, kv_options *o, char *err, size_t errlen);
/* The KV cache of a session (tests look inside it). */
kv_cache *engine_kv(tkv_session *s);

#endif
