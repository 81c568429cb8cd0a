/* model.c — configuration from GGUF metadata and weight binding (see model.h).
 * Everything is validated here, before any forward runs: names, types, shapes, and where the data
 * lies (every tensor read in place starts on a 32-byte boundary, as GGUF's default alignment puts
 * it: kernels and float rows read it directly). Norms and biases are F32, F16 or BF16 (a vector in
 * a quantised type is a broken file, not a format to run). A missing tensor is reported together
 * with every other missing one, so a user fixes a file in one go. */
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/err.h"
#include "base/half.h"

static int get_u32_opt(const gguf_file *f, const char *key, uint32_t *out, uint32_t def, char *err, size_t errlen) {
    if (!gguf_find(f, key)) { *out = def; return 0; }
    return gguf_get_u32(f, key, out, err, errlen);
}

static int get_f32_opt(const gguf_file *f, const char *key, float *out, float def, char *err, size_t errlen) {
    if (!gguf_find(f, key)) { *out = def; return 0; }
    return gguf_get_f32(f, key, out, err, errlen);
}

int model_config_from_gguf(const gguf_file *f, model_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    gguf_str arch;
    if (gguf_get_str(f, "general.architecture", &arch, err, errlen)) return -1;
    int moe = gguf_str_eq(arch, "qwen3moe");
    if (gguf_str_eq(arch, "qwen2")) c->rope_neox = 1;
    else if (gguf_str_eq(arch, "llama")) c->rope_neox = 0;
    else if (gguf_str_eq(arch, "qwen3") || moe) c->rope_neox = 1, c->qk_norm = 1;
    else return tkv_errf(err, errlen, "model: unsupported architecture '%.*s' (supported: qwen2, llama, qwen3, qwen3moe)",
                         (int)(arch.len > 40 ? 40 : arch.len), arch.ptr);
    memcpy(c->arch, arch.ptr, arch.len);
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", c->arch, suffix), key)
    uint32_t v;
    if (gguf_get_u32(f, KEY("embedding_length"), &v, err, errlen)) return -1;
    c->n_embd = (int)v;
    if (gguf_get_u32(f, KEY("block_count"), &v, err, errlen)) return -1;
    c->n_layer = (int)v;
    if (gguf_get_u32(f, KEY("feed_forward_length"), &v, err, errlen)) return -1;
    c->n_ff = (int)v;
    if (gguf_get_u32(f, KEY("attention.head_count"), &v, err, errlen)) return -1;
    c->n_head = (int)v;
    if (get_u32_opt(f, KEY("attention.head_count_kv"), &v, (uint32_t)c->n_head, err, errlen)) return -1;
    c->n_head_kv = (int)v;
    if (get_u32_opt(f, KEY("context_length"), &v, 4096, err, errlen)) return -1;
    c->n_ctx_train = (int)v;
    if (gguf_get_f32(f, KEY("attention.layer_norm_rms_epsilon"), &c->rms_eps, err, errlen)) return -1;
    if (get_f32_opt(f, KEY("rope.freq_base"), &c->rope_base, 10000.0f, err, errlen)) return -1;
    if (c->n_layer < 1 || c->n_layer > 4096) return tkv_errf(err, errlen, "model: block_count %d out of range", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 1 << 20) return tkv_errf(err, errlen, "model: embedding_length %d out of range", c->n_embd);
    if (c->n_ff < 1 || c->n_ff > 1 << 22) return tkv_errf(err, errlen, "model: feed_forward_length %d out of range", c->n_ff);
    if (c->n_head < 1 || c->n_head > 4096 || c->n_head_kv < 1 || c->n_head % c->n_head_kv != 0)
        return tkv_errf(err, errlen, "model: head counts %d/%d (kv heads must divide heads, both 1..4096)", c->n_head, c->n_head_kv);
    /* the head dimension is the file's key_length; without one, embedding / heads */
    if (!gguf_find(f, KEY("attention.key_length")) && c->n_embd % c->n_head != 0)
        return tkv_errf(err, errlen, "model: %d heads do not divide embedding %d and the file has no key_length", c->n_head, c->n_embd);
    if (get_u32_opt(f, KEY("attention.key_length"), &v, (uint32_t)(c->n_embd / c->n_head), err, errlen)) return -1;
    if (v < 2 || v > 1024 || v % 2) return tkv_errf(err, errlen, "model: key_length %u unsupported (an even 2..1024)", v);
    c->head_dim = (int)v;
    if (get_u32_opt(f, KEY("attention.value_length"), &v, (uint32_t)c->head_dim, err, errlen)) return -1;
    if ((int)v != c->head_dim) return tkv_errf(err, errlen, "model: value_length %u != key_length %d (unsupported)", v, c->head_dim);
    if (get_u32_opt(f, KEY("rope.dimension_count"), &v, (uint32_t)c->head_dim, err, errlen)) return -1;
    if ((int)v != c->head_dim) return tkv_errf(err, errlen, "model: rope.dimension_count %u != head_dim %d (unsupported)", v, c->head_dim);
    if (moe) {
        if (gguf_get_u32(f, KEY("expert_count"), &v, err, errlen)) return -1;
        c->n_expert = (int)v;
        if (gguf_get_u32(f, KEY("expert_used_count"), &v, err, errlen)) return -1;
        c->n_expert_used = (int)v;
        if (gguf_get_u32(f, KEY("expert_feed_forward_length"), &v, err, errlen)) return -1;
        c->n_ff_exp = (int)v;
        if (c->n_expert < 1 || c->n_expert > 1024 || c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
            return tkv_errf(err, errlen, "model: %d experts, %d used per token (1 <= used <= experts <= 1024)", c->n_expert,
                            c->n_expert_used);
        if (c->n_ff_exp < 1 || c->n_ff_exp > 1 << 22)
            return tkv_errf(err, errlen, "model: expert_feed_forward_length %d out of range", c->n_ff_exp);
    }
    if (!(c->rms_eps > 0) || !isfinite(c->rms_eps) || !(c->rope_base > 0) || !isfinite(c->rope_base))
        return tkv_errf(err, errlen, "model: bad rms epsilon %g or rope base %g (both must be finite and > 0)",
                        (double)c->rms_eps, (double)c->rope_base);
    c->rope_scale = 1.0f;
    gguf_str st;
    if (gguf_find(f, KEY("rope.scaling.type"))) {
        if (gguf_get_str(f, key, &st, err, errlen)) return -1;
        if (gguf_str_eq(st, "linear")) {
            float fac;
            if (get_f32_opt(f, KEY("rope.scaling.factor"), &fac, 1.0f, err, errlen)) return -1;
            if (!(fac > 0) || !isfinite(fac)) return tkv_errf(err, errlen, "model: bad rope.scaling.factor %g", (double)fac);
            c->rope_scale = 1.0f / fac;
        } else if (!gguf_str_eq(st, "none")) {
            return tkv_errf(err, errlen, "model: rope scaling '%.*s' is not supported (none, linear)",
                            (int)(st.len > 32 ? 32 : st.len), st.ptr);
        }
    }
#undef KEY
    uint32_t et;
    uint64_t n;
    const uint8_t *d;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &d, err, errlen)) return -1;
    if (n < 1 || n > 1u << 24) return tkv_errf(err, errlen, "model: tokenizer.ggml.tokens holds %llu tokens (1..16777216)", (unsigned long long)n);
    c->n_vocab = (int)n;
    return 0;
}

typedef struct {
    gguf_file *f;
    char missing[1024];
    size_t mlen;
    int n_missing;
    char *err;
    size_t errlen;
    int bad;
} binder;

static const gguf_tensor *find(binder *b, const char *name, int required) {
    const gguf_tensor *t = gguf_find_tensor(b->f, name);
    if (!t && required) {
        b->n_missing++;
        if (b->mlen + strlen(name) + 3 < sizeof b->missing)
            b->mlen += (size_t)snprintf(b->missing + b->mlen, sizeof b->missing - b->mlen, "%s%s", b->mlen ? ", " : "", name);
    }
    return t;
}

/* Tensors are read where they lie: their data must start on a 32-byte boundary. */
#define TENSOR_ALIGN 32
static int aligned(binder *b, const gguf_tensor *t, const char *name) {
    if ((uintptr_t)t->data % TENSOR_ALIGN == 0) return 1;
    b->bad = 1;
    tkv_errf(b->err, b->errlen,
             "model: tensor '%s': its data at byte %llu of the file is not %d-byte aligned (general.alignment %llu); "
             "tierkv reads tensors in place and needs %d",
             name, (unsigned long long)(t->data - b->f->bytes), TENSOR_ALIGN, (unsigned long long)b->f->alignment, TENSOR_ALIGN);
    return 0;
}

/* n_slices matrices [n_in, n_out] from one tensor: a 2-D one (n_slices 1) or the slices of a 3-D
 * expert tensor [n_in, n_out, n_slices], one expert's rows contiguous. Each slice must start on the
 * alignment the kernels read in place (checked as a tensor's is). */
static void bind_slices(binder *b, model_mat *m, const char *name, int64_t n_in, int64_t n_out, int n_slices, int required) {
    memset(m, 0, (size_t)n_slices * sizeof *m);
    const gguf_tensor *t = find(b, name, required);
    if (!t || b->bad || !aligned(b, t, name)) return;
    if (t->ne[0] != (uint64_t)n_in || t->ne[1] != (uint64_t)n_out || t->ne[2] != (uint64_t)n_slices || t->ne[3] != 1) {
        b->bad = 1;
        char want[64];
        if (n_slices > 1) snprintf(want, sizeof want, "[%lld, %lld, %d]", (long long)n_in, (long long)n_out, n_slices);
        else snprintf(want, sizeof want, "[%lld, %lld]", (long long)n_in, (long long)n_out);
        tkv_errf(b->err, b->errlen, "model: tensor '%s' has shape [%llu, %llu, %llu], expected %s", name,
                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2], want);
        return;
    }
    uint32_t blck = ggml_type_supported(t->type) ? ggml_blck_size(t->type) : 0;
    if (!blck || n_in % blck) {
        b->bad = 1;
        tkv_errf(b->err, b->errlen, "model: tensor '%s' has type %s, which tierkv cannot run with rows of %lld", name,
                 ggml_type_name(t->type), (long long)n_in);
        return;
    }
    uint64_t bytes = (uint64_t)n_out * (uint64_t)(n_in / blck) * ggml_type_size(t->type);
    if (n_slices > 1 && bytes % TENSOR_ALIGN) {
        b->bad = 1;
        tkv_errf(b->err, b->errlen, "model: tensor '%s': one expert's %llu bytes are not a multiple of %d; tierkv reads "
                 "each expert in place and needs it aligned", name, (unsigned long long)bytes, TENSOR_ALIGN);
        return;
    }
    for (int e = 0; e < n_slices; e++)
        m[e] = (model_mat){.data = t->data + (uint64_t)e * bytes, .type = t->type, .n_in = n_in, .n_out = n_out};
}

static void bind_mat(binder *b, model_mat *m, const char *name, int64_t n_in, int64_t n_out, int required) {
    bind_slices(b, m, name, n_in, n_out, 1, required);
}

static const float *bind_vec(binder *b, model *mdl, const char *name, int64_t n, int required) {
    const gguf_tensor *t = find(b, name, required);
    if (!t || b->bad || !aligned(b, t, name)) return NULL;
    if (t->ne[0] != (uint64_t)n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        b->bad = 1;
        tkv_errf(b->err, b->errlen, "model: tensor '%s' has %llu elements, expected %lld", name,
                 (unsigned long long)t->ne[0], (long long)n);
        return NULL;
    }
    if (t->type == GGML_F32) return (const float *)t->data; /* data_start and offsets are 32-aligned */
    if (t->type != GGML_F16 && t->type != GGML_BF16) {
        b->bad = 1;
        tkv_errf(b->err, b->errlen, "model: vector '%s' has type %s (norms and biases are F32, F16 or BF16)", name,
                 ggml_type_name(t->type));
        return NULL;
    }
    float *v = tkv_xmalloc((size_t)n * sizeof(float));
    const uint16_t *h = (const uint16_t *)(const void *)t->data;
    for (int64_t i = 0; i < n; i++) v[i] = t->type == GGML_F16 ? tkv_f16_to_f32(h[i]) : tkv_bf16_to_f32(h[i]);
    mdl->owned = realloc(mdl->owned, (size_t)(mdl->n_owned + 1) * sizeof(float *));
    TKV_ASSERT(mdl->owned);
    mdl->owned[mdl->n_owned++] = v;
    return v;
}

static uint64_t mat_macs(const model_mat *m) { return m->data ? (uint64_t)m->n_in * (uint64_t)m->n_out : 0; }

static uint64_t mat_bytes(const model_mat *m) {
    if (!m->data) return 0;
    return (uint64_t)m->n_out * ggml_row_bytes(m->type, m->n_in);
}

int model_bind(gguf_file *f, model **out, char *err, size_t errlen) {
    model_config c;
    if (model_config_from_gguf(f, &c, err, errlen)) return -1;
    model *m = tkv_xcalloc(1, sizeof *m);
    m->cfg = c;
    m->layers = tkv_xcalloc((size_t)c.n_layer, sizeof(model_layer));
    binder b = {.f = f, .err = err, .errlen = errlen};
    int qwen = !strcmp(c.arch, "qwen2"); /* biases required */
    int64_t E = c.n_embd, Q = (int64_t)c.n_head * c.head_dim, KV = (int64_t)c.n_head_kv * c.head_dim, F = c.n_ff;
    bind_mat(&b, &m->tok_embd, "token_embd.weight", E, c.n_vocab, 1);
    m->output_norm = bind_vec(&b, m, "output_norm.weight", E, 1);
    if (gguf_find_tensor(f, "output.weight")) bind_mat(&b, &m->output, "output.weight", E, c.n_vocab, 1);
    else { m->output = m->tok_embd; m->tied_output = 1; }
    char name[96];
    for (int l = 0; l < c.n_layer && !b.bad; l++) {
        model_layer *L = &m->layers[l];
#define N(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
        L->attn_norm = bind_vec(&b, m, N("attn_norm.weight"), E, 1);
        bind_mat(&b, &L->wq, N("attn_q.weight"), E, Q, 1);
        bind_mat(&b, &L->wk, N("attn_k.weight"), E, KV, 1);
        bind_mat(&b, &L->wv, N("attn_v.weight"), E, KV, 1);
        bind_mat(&b, &L->wo, N("attn_output.weight"), Q, E, 1);
        L->bq = bind_vec(&b, m, N("attn_q.bias"), Q, qwen);
        L->bk = bind_vec(&b, m, N("attn_k.bias"), KV, qwen);
        L->bv = bind_vec(&b, m, N("attn_v.bias"), KV, qwen);
        L->bo = bind_vec(&b, m, N("attn_output.bias"), E, 0);
        if (c.qk_norm) {
            L->q_norm = bind_vec(&b, m, N("attn_q_norm.weight"), c.head_dim, 1);
            L->k_norm = bind_vec(&b, m, N("attn_k_norm.weight"), c.head_dim, 1);
        }
        L->ffn_norm = bind_vec(&b, m, N("ffn_norm.weight"), E, 1);
        if (c.n_expert) {
            int X = c.n_expert;
            int64_t FE = c.n_ff_exp;
            L->egate = tkv_xcalloc((size_t)X * 3, sizeof(model_mat));
            L->eup = L->egate + X;
            L->edown = L->egate + 2 * X;
            bind_mat(&b, &L->router, N("ffn_gate_inp.weight"), E, X, 1);
            bind_slices(&b, L->egate, N("ffn_gate_exps.weight"), E, FE, X, 1);
            bind_slices(&b, L->eup, N("ffn_up_exps.weight"), E, FE, X, 1);
            bind_slices(&b, L->edown, N("ffn_down_exps.weight"), FE, E, X, 1);
        } else {
            bind_mat(&b, &L->wgate, N("ffn_gate.weight"), E, F, 1);
            bind_mat(&b, &L->wup, N("ffn_up.weight"), E, F, 1);
            bind_mat(&b, &L->wdown, N("ffn_down.weight"), F, E, 1);
        }
#undef N
    }
    if (!b.bad && b.n_missing)
        tkv_errf(err, errlen, "model: %d required tensor%s missing: %s%s", b.n_missing, b.n_missing > 1 ? "s" : "",
                 b.missing, b.mlen + 40 >= sizeof b.missing ? ", ..." : "");
    if (b.bad || b.n_missing) {
        m->file = (gguf_file){0};
        model_close(m);
        return -1;
    }
    m->file = *f;
    memset(f, 0, sizeof *f);
    for (int l = 0; l < c.n_layer; l++) /* kept on the host: model_prepare may move the biases to a device */
        if (m->layers[l].bk) {
            if (!m->k_center) m->k_center = tkv_xcalloc((size_t)c.n_layer * (size_t)KV, sizeof(float));
            memcpy(m->k_center + (size_t)l * (size_t)KV, m->layers[l].bk, (size_t)KV * sizeof(float));
        }
    m->weight_bytes = mat_bytes(&m->output); /* the embedding lookup reads one row, not the matrix */
    m->weight_macs = mat_macs(&m->output);
    for (int l = 0; l < c.n_layer; l++) {
        model_layer *L = &m->layers[l];
        m->weight_macs += mat_macs(&L->wq) + mat_macs(&L->wk) + mat_macs(&L->wv) + mat_macs(&L->wo) + mat_macs(&L->wgate) +
                          mat_macs(&L->wup) + mat_macs(&L->wdown) + mat_macs(&L->router);
        if (c.n_expert)
            m->weight_macs += (uint64_t)c.n_expert_used * (mat_macs(&L->egate[0]) + mat_macs(&L->eup[0]) + mat_macs(&L->edown[0]));
        m->weight_bytes += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
                           mat_bytes(&L->wgate) + mat_bytes(&L->wup) + mat_bytes(&L->wdown) + mat_bytes(&L->router);
        if (c.n_expert) L->expert_bytes = mat_bytes(&L->egate[0]) + mat_bytes(&L->eup[0]) + mat_bytes(&L->edown[0]);
        m->expert_bytes += L->expert_bytes;
    }
    m->weight_bytes += (uint64_t)c.n_expert_used * m->expert_bytes;
    *out = m;
    return 0;
}

/* Every matrix, in order: tok_embd, output (NULL when tied: it shares tok_embd's rows), then per
 * layer q, k, v, o and the FFN's: gate, up, down, or the router and each expert's gate, up, down. */
enum { LAYER_MATS = 7 };
static int n_mats(const model *m) {
    return 2 + m->cfg.n_layer * (LAYER_MATS + (m->cfg.n_expert ? 1 + 3 * m->cfg.n_expert - 3 : 0));
}

static model_mat *mat_at(model *m, int i, char *name, size_t n) {
    static const char *lm[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    static const char *em[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    if (i == 0) return snprintf(name, n, "token_embd.weight"), &m->tok_embd;
    if (i == 1) return snprintf(name, n, "output.weight"), m->tied_output ? NULL : &m->output;
    int per = (n_mats(m) - 2) / m->cfg.n_layer, l = (i - 2) / per, k = (i - 2) % per;
    model_layer *L = &m->layers[l];
    model_mat *own[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->wup, &L->wdown};
    if (!m->cfg.n_expert || k < 4) return snprintf(name, n, "blk.%d.%s.weight", l, lm[k]), own[k];
    if (k == 4) return snprintf(name, n, "blk.%d.ffn_gate_inp.weight", l), &L->router;
    int e = (k - 5) / 3, r = (k - 5) % 3;
    snprintf(name, n, "blk.%d.%s.weight (expert %d)", l, em[r], e);
    return (r == 0 ? L->egate : r == 1 ? L->eup : L->edown) + e;
}

/* Vector i of 1 + 8 * n_layer and its length: output_norm, then per layer its two norms, the four
 * biases and the two q/k norms (NULL where the model has none). */
enum { LAYER_VECS = 8 };
static const float **vec_at(model *m, int i, int64_t *len) {
    const model_config *c = &m->cfg;
    *len = c->n_embd;
    if (i == 0) return &m->output_norm;
    model_layer *L = &m->layers[(i - 1) / LAYER_VECS];
    const float **lv[LAYER_VECS] = {&L->attn_norm, &L->ffn_norm, &L->bq, &L->bk, &L->bv, &L->bo, &L->q_norm, &L->k_norm};
    int64_t lens[LAYER_VECS] = {c->n_embd, c->n_embd, (int64_t)c->n_head * c->head_dim,
                                (int64_t)c->n_head_kv * c->head_dim, (int64_t)c->n_head_kv * c->head_dim, c->n_embd,
                                c->head_dim, c->head_dim};
    *len = lens[(i - 1) % LAYER_VECS];
    return lv[(i - 1) % LAYER_VECS];
}

int model_prepare(model *m, be_backend *be, char *err, size_t errlen) {
    if (be->ops->unified && !m->file.map) return tkv_errf(err, errlen, "model: the weights are not in pages of the model's own");
    if (m->cfg.n_expert && !be->ops->combine_rows)
        return tkv_errf(err, errlen, "model: the %s backend does not run a mixture-of-experts FFN (%s, %d experts); "
                        "the CPU backend does", be->ops->name, m->cfg.arch, m->cfg.n_expert);
    int writable = be->ops->unified;
    /* the pages are the model's own (a copy, or a MAP_PRIVATE mapping), read-only: made writable
     * for the backend's rewrite and read-only again */
    if (writable && mprotect(m->file.map, (size_t)m->file.map_size, PROT_READ | PROT_WRITE) != 0)
        return tkv_errf(err, errlen, "model: cannot make the weights writable to reorder them: %s (--keep-layout runs the file's layout)",
                        strerror(errno));
    int rc = 0, n = n_mats(m);
    char name[96], perr[256];
    for (int i = 0; i < n && !rc; i++) {
        model_mat *w = mat_at(m, i, name, sizeof name);
        if (!w || !w->data) continue;
        int role = i > 0 ? BE_W_MATMUL : m->tied_output ? BE_W_EMBED_AND_OUTPUT : BE_W_EMBED;
        if (be->ops->prepare_weight(be, w, role, perr, sizeof perr)) rc = tkv_errf(err, errlen, "model: %s: %s", name, perr);
    }
    if (m->tied_output) m->output = m->tok_embd;
    for (int i = 0; i < 1 + LAYER_VECS * m->cfg.n_layer && !rc; i++) {
        int64_t len;
        const float **v = vec_at(m, i, &len);
        if (!*v) continue;
        const float *d = be->ops->prepare_vector(be, *v, len, perr, sizeof perr);
        if (!d) rc = tkv_errf(err, errlen, "model: a norm or bias vector: %s", perr);
        else *v = d;
    }
    if (writable && mprotect(m->file.map, (size_t)m->file.map_size, PROT_READ) != 0 && !rc)
        rc = tkv_errf(err, errlen, "model: cannot make the weights read-only again: %s", strerror(errno));
    return rc;
}

int model_open(const char *path, int mmap_only, model **out, char *err, size_t errlen) {
    gguf_file f;
    if (gguf_load(path, mmap_only ? GGUF_MMAP : GGUF_AUTO, &f, err, errlen)) return -1;
    if (model_bind(&f, out, err, errlen)) {
        gguf_free(&f);
        return -1;
    }
    return 0;
}

void model_close(model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->k_center);
    for (int l = 0; m->layers && l < m->cfg.n_layer; l++) free(m->layers[l].egate);
    free(m->layers);
    gguf_free(&m->file);
    free(m);
}
