/* model.c (engine) — tkv_model: a GGUF file opened for inference. Binds the weights (src/model),
 * opens its backend (which picks its kernels and threads) and prepares the weights for it, loads
 * the tokenizer. Read-only once open. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/meminfo.h"
#include "base/version.h"
#include "engine/engine.h"

void tkv_model_params_default(tkv_model_params *p) {
    memset(p, 0, sizeof *p);
    p->n_threads = 2;
}

/* A backend that reorders the weights in place (the CPU's, unless --keep-layout) turns a file
 * mapping into private memory as large as the file: refused, with the numbers, when that is more
 * than the memory available (a copy read by gguf_load already holds its memory). */
static int rewrite_fits(const tkv_model *m, char *err, size_t errlen) {
    const gguf_file *f = &m->m->file;
    if (!m->be->ops->unified || m->p.keep_layout || f->copied) return 0;
    uint64_t avail = tkv_mem_available();
    if (f->map_size <= avail) return 0;
    return tkv_errf(err, errlen,
                    "model: reordering the weights for the %s kernels needs %.1f MiB of memory, %.1f MiB available "
                    "(--keep-layout runs the file's own layout from the page cache)",
                    m->be->ops->name, tkv_mib(f->map_size), tkv_mib(avail));
}

int tkv_model_open(const char *path, const tkv_model_params *p, tkv_model **out, char *err, size_t errlen) {
    *out = NULL;
    tkv_model_params d;
    if (!p) tkv_model_params_default(&d), p = &d;
    if (p->n_threads < 1 || p->n_threads > 256) return tkv_errf(err, errlen, "threads must be 1..256 (got %d)", p->n_threads);
    tkv_model *m = tkv_xcalloc(1, sizeof *m);
    m->p = *p;
    if (p->vocab_only) {
        if (gguf_open(path, &m->vocab_file, err, errlen)) { free(m); return -1; }
        m->file = &m->vocab_file;
    } else {
        be_params bp = {.name = p->backend, .n_threads = p->n_threads, .kernels = p->kernels, .keep_layout = p->keep_layout,
                        .device = p->device};
        if (be_open(&bp, &m->be, err, errlen)) { free(m); return -1; }
        /* A backend whose weights live in memory of its own (a GPU's; cpu-async's copy) reads the file
         * once, at prepare: a copy into huge pages first would be a second pass over the file and as
         * much host memory again (the first GPU runs: 4-7 s of every 15 GB load before the upload). */
        int map = p->mmap_weights || !m->be->ops->unified;
        if (model_open(path, map, &m->m, err, errlen) || rewrite_fits(m, err, errlen) ||
            model_prepare(m->m, m->be, err, errlen)) {
            tkv_model_close(m);
            return -1;
        }
        m->file = &m->m->file;
    }
    /* the header only: the weights may be reordered in place at load (the data is not the file's) */
    uint64_t head = m->file->data_start < m->file->size ? m->file->data_start : m->file->size;
    m->ident = tkv_fnv1a64(m->file->bytes, (size_t)head) ^ (m->file->size * 0x9E3779B97F4A7C15ull);
    m->vocab = tok_load(m->file, err, errlen);
    if (!m->vocab) { tkv_model_close(m); return -1; }
    *out = m;
    return 0;
}

int tkv_model_check(const char *path, char *err, size_t errlen) {
    gguf_file f;
    char why[512];
    if (gguf_open(path, &f, err, errlen)) return TKV_ERR;
    int rc = 0;
    if (f.n_tensors || gguf_find(&f, "tokenizer.ggml.model") || gguf_find(&f, "tokenizer.ggml.tokens")) {
        tok_vocab *v = tok_load(&f, why, sizeof why); /* first, as tkv_model_open reads it first */
        if (!v) rc = tkv_errf(err, errlen, "the vocabulary does not load: %s", why);
        tok_free(v);
    }
    if (!rc && f.n_tensors) {
        model *m = NULL;
        if (model_bind(&f, &m, why, sizeof why)) rc = tkv_errf(err, errlen, "not a model tierkv can run: %s", why);
        model_close(m); /* model_bind takes the file on success */
    }
    gguf_free(&f);
    return rc;
}

void tkv_model_close(tkv_model *m) {
    if (!m) return;
    tok_free(m->vocab);
    model_close(m->m);
    be_close(m->be);
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
    o->weight_macs = m->m->weight_macs;
    o->n_expert = c->n_expert;
    o->n_expert_used = c->n_expert_used;
    o->expert_bytes = m->m->expert_bytes;
    o->backend = m->be->ops->name;
    o->kernels = m->be->ops->describe(m->be);
    o->weights_copied = m->m->file.copied;
}
