/* fuzz_model.c — libFuzzer target for the load path after the parser: gguf_parse, then the
 * vocabulary (tok_load), the chat template (chat_template_from_gguf) and the model's configuration
 * and weight binding (model_bind) over the parsed bytes. Any input must load or fail with a
 * message; what loads must be consistent (every bound matrix inside the input, the vocabulary the
 * size the binder saw). Seeds: fuzz/corpus/fuzz_model (tiny valid models, fuzz/make_seeds.py).
 * Build: make fuzz. Run: make fuzz-run FUZZ_SECONDS=N (all targets) or
 * build-fuzz/fuzz_bin/fuzz_model build-fuzz/corpus/fuzz_model fuzz/corpus/fuzz_model -max_len=65536 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/chat.h"
#include "model/model.h"
#include "model/tokenizer.h"

static void check_mat(const model_mat *m, const uint8_t *lo, const uint8_t *hi) {
    if (!m->data) return;
    uint64_t bytes = (uint64_t)m->n_out * (uint64_t)(m->n_in / ggml_blck_size(m->type)) * ggml_type_size(m->type);
    TKV_ASSERT((const uint8_t *)m->data >= lo && (const uint8_t *)m->data + bytes <= hi);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a heap copy of exactly size bytes, 32-aligned as a mapping would be */
    uint8_t *buf = aligned_alloc(32, (size + 31) / 32 * 32 + 32);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    gguf_file f;
    char err[512] = "";
    if (gguf_parse(buf, size, &f, err, sizeof err) != 0) {
        TKV_ASSERT(err[0]);
        free(buf);
        return 0;
    }
    err[0] = 0;
    tok_vocab *v = tok_load(&f, err, sizeof err);
    TKV_ASSERT(v || err[0]);
    chat_template t;
    err[0] = 0;
    if (chat_template_from_gguf(&f, NULL, &t, err, sizeof err) != 0) TKV_ASSERT(err[0]);
    else TKV_ASSERT(t.kind != CHAT_UNKNOWN && strlen(t.default_system) < sizeof t.default_system);
    model *m = NULL;
    err[0] = 0;
    if (model_bind(&f, &m, err, sizeof err) != 0) {
        TKV_ASSERT(err[0] && m == NULL);
        gguf_free(&f);
    } else {
        const uint8_t *hi = buf + size;
        check_mat(&m->tok_embd, buf, hi);
        check_mat(&m->output, buf, hi);
        for (int l = 0; l < m->cfg.n_layer; l++) {
            const model_layer *L = &m->layers[l];
            const model_mat *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->wup, &L->wdown};
            for (int k = 0; k < 7; k++) check_mat(ms[k], buf, hi);
            check_mat(&L->router, buf, hi);
            for (int e = 0; e < m->cfg.n_expert; e++) /* every expert's slice inside the input */
                check_mat(&L->egate[e], buf, hi), check_mat(&L->eup[e], buf, hi), check_mat(&L->edown[e], buf, hi);
        }
        if (v) TKV_ASSERT(tok_n_vocab(v) == m->cfg.n_vocab);
        model_close(m);
    }
    tok_free(v);
    free(buf);
    return 0;
}
