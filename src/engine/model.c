/* model.c (engine) — tkv_model: a GGUF file opened for inference. Binds the weights (src/model),
 * loads the tokenizer, picks the CPU kernels and starts the thread pool. Read-only once open. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"

void tkv_model_params_default(tkv_model_params *p) {
    memset(p, 0, sizeof *p);
    p->n_threads = 2;
}

static int parse_kernels(const char *k, cpu_isa *out, char *err, size_t errlen) {
    cpu_isa best = cpu_detect_isa();
    if (!k || !strcmp(k, "auto")) { *out = best; return 0; }
    for (int i = 0; i <= CPU_ISA_AVX512; i++)
        if (!strcmp(k, cpu_isa_name((cpu_isa)i))) {
            if (i > (int)best)
                return tkv_errf(err, errlen, "kernel variant %s is not supported by this CPU (best: %s)", k, cpu_isa_name(best));
            *out = (cpu_isa)i;
            return 0;
        }
    return tkv_errf(err, errlen, "unknown kernels '%s' (auto, generic, avx2, avx512)", k);
}

int tkv_model_open(const char *path, const tkv_model_params *p, tkv_model **out, char *err, size_t errlen) {
    *out = NULL;
    tkv_model_params d;
    if (!p) tkv_model_params_default(&d), p = &d;
    if (p->n_threads < 1 || p->n_threads > 256) return tkv_errf(err, errlen, "threads must be 1..256 (got %d)", p->n_threads);
    if (p->backend && strcmp(p->backend, "cpu"))
        return tkv_errf(err, errlen, "backend '%s' is not available in this build (cpu)", p->backend);
    cpu_isa isa = CPU_ISA_GENERIC;
    if (parse_kernels(p->kernels, &isa, err, errlen)) return -1;
    tkv_model *m = tkv_xcalloc(1, sizeof *m);
    m->p = *p;
    m->isa = isa;
    if (p->vocab_only) {
        if (gguf_open(path, &m->vocab_file, err, errlen)) { free(m); return -1; }
        m->file = &m->vocab_file;
    } else {
        if (model_open(path, p->mmap_weights, !p->keep_layout, &m->m, err, errlen)) { free(m); return -1; }
        m->file = &m->m->file;
    }
    m->vocab = tok_load(m->file, err, errlen);
    if (!m->vocab) { tkv_model_close(m); return -1; }
    if (!p->vocab_only) m->pool = pool_init(p->n_threads);
    *out = m;
    return 0;
}

void tkv_model_close(tkv_model *m) {
    if (!m) return;
    if (m->pool) pool_free(m->pool);
    tok_free(m->vocab);
    model_close(m->m);
    if (m->file == &m->vocab_file) gguf_free(&m->vocab_file);
    free(m);
}

void tkv_model_get_info(const tkv_model *m, tkv_model_info *o) {
    memset(o, 0, sizeof *o);
    if (!m->m) { /* vocabulary only */
        o->n_vocab = tok_n_vocab(m->vocab);
        o->backend = "none";
        o->kernels = "none";
        return;
    }
    const model_config *c = &m->m->cfg;
    snprintf(o->arch, sizeof o->arch, "%s", c->arch);
    o->n_vocab = c->n_vocab;
    o->n_layer = c->n_layer;
    o->n_embd = c->n_embd;
    o->n_head = c->n_head;
    o->n_head_kv = c->n_head_kv;
    o->head_dim = c->head_dim;
    o->n_ff = c->n_ff;
    o->n_ctx_train = c->n_ctx_train;
    o->weight_bytes = m->m->weight_bytes;
    o->backend = "cpu";
    o->kernels = cpu_isa_name(m->isa);
}
