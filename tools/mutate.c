/* mutate.c — the machinery of mutate-gguf (see mutate.h): the input's layout, edits, writing a
 * variant (in full, or --sparse: the tensor data of a variant that must fail left as a hole). */
#include "mutate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"

uint64_t mut_rng(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* ---- the input's layout ---- */

int mut_layout_init(mut_layout *L, const uint8_t *b, size_t size, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->b = b;
    L->size = size;
    if (gguf_parse(b, size, &L->f, err, errlen)) return -1;
    const gguf_file *f = &L->f;
    gguf_str arch;
    char e[64];
    if (gguf_get_str(f, "general.architecture", &arch, e, sizeof e) || arch.len >= sizeof L->arch || !f->n_tensors)
        return tkv_errf(err, errlen, "mutate-gguf: the input must be a model (general.architecture and tensors)");
    memcpy(L->arch, arch.ptr, arch.len);
    size_t nk = (size_t)f->n_kv, nt = (size_t)f->n_tensors;
    L->kv_at = tkv_xcalloc(nk, sizeof(size_t));
    L->kv_type_at = tkv_xcalloc(nk, sizeof(size_t));
    L->kv_end = tkv_xcalloc(nk, sizeof(size_t));
    L->ti_at = tkv_xcalloc(nt, sizeof(size_t));
    L->ti_dims_at = tkv_xcalloc(nt, sizeof(size_t));
    L->ti_type_at = tkv_xcalloc(nt, sizeof(size_t));
    L->ti_off_at = tkv_xcalloc(nt, sizeof(size_t));
    L->ti_end = tkv_xcalloc(nt, sizeof(size_t));
    for (size_t i = 0; i < nk; i++) {
        const gguf_kv *kv = &f->kv[i];
        L->kv_at[i] = (size_t)((const uint8_t *)kv->key.ptr - b) - 8;
        L->kv_type_at[i] = (size_t)((const uint8_t *)kv->key.ptr - b) + (size_t)kv->key.len;
        L->kv_end[i] = (size_t)(kv->data - b) + (size_t)kv->size;
    }
    for (size_t i = 0; i < nt; i++) {
        const gguf_tensor *t = &f->tensors[i];
        L->ti_at[i] = (size_t)((const uint8_t *)t->name.ptr - b) - 8;
        L->ti_dims_at[i] = (size_t)((const uint8_t *)t->name.ptr - b) + (size_t)t->name.len + 4;
        L->ti_type_at[i] = L->ti_dims_at[i] + 8 * (size_t)t->n_dims;
        L->ti_off_at[i] = L->ti_type_at[i] + 4;
        L->ti_end[i] = L->ti_off_at[i] + 8;
        if (t->offset + t->nbytes > L->max_end) L->max_end = t->offset + t->nbytes;
    }
    L->info_end = L->ti_end[nt - 1];
    return 0;
}

void mut_layout_free(mut_layout *L) {
    free(L->kv_at); free(L->kv_type_at); free(L->kv_end);
    free(L->ti_at); free(L->ti_dims_at); free(L->ti_type_at); free(L->ti_off_at); free(L->ti_end);
    gguf_free(&L->f);
}

int mut_find_kv(const mut_layout *L, const char *key) {
    for (uint64_t i = 0; i < L->f.n_kv; i++)
        if (gguf_str_eq(L->f.kv[i].key, key)) return (int)i;
    return -1;
}
int mut_find_tensor(const mut_layout *L, const char *name) {
    for (uint64_t i = 0; i < L->f.n_tensors; i++)
        if (gguf_str_eq(L->f.tensors[i].name, name)) return (int)i;
    return -1;
}
const char *mut_arch_key(const mut_layout *L, const char *suffix) {
    static char k[8][96];
    static int r;
    char *s = k[r++ & 7];
    snprintf(s, 96, "%s.%s", L->arch, suffix);
    return s;
}

/* Whether the binder needs this tensor (model.c): output.weight may be absent (tied), biases are
 * required for qwen2's q/k/v only, names it does not know are never read. */
int mut_required_tensor(const mut_layout *L, gguf_str name) {
    char n[80];
    snprintf(n, sizeof n, "%.*s", (int)(name.len < 70 ? name.len : 70), name.ptr);
    static const char *const sfx[] = {".attn_norm.weight", ".attn_q.weight", ".attn_k.weight", ".attn_v.weight",
                                      ".attn_output.weight", ".ffn_norm.weight", ".ffn_gate.weight", ".ffn_up.weight",
                                      ".ffn_down.weight", ".attn_q.bias", ".attn_k.bias", ".attn_v.bias"};
    /* required by the architectures that have them (qwen3: q/k norms; qwen3moe: the expert FFN) */
    static const char *const own[] = {".attn_q_norm.weight", ".attn_k_norm.weight", ".ffn_gate_inp.weight",
                                      ".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight"};
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "output_norm.weight")) return 1;
    if (strncmp(n, "blk.", 4)) return 0;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        size_t a = strlen(n), s = strlen(own[i]);
        if (a > s && !strcmp(n + a - s, own[i])) return 1;
    }
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        size_t a = strlen(n), s = strlen(sfx[i]);
        if (a > s && !strcmp(n + a - s, sfx[i])) return i < 9 || !strcmp(L->arch, "qwen2");
    }
    return 0;
}

/* ---- writing one variant ---- */

static int mut_wants(const mut_ctx *m, const char *name) { return !m->only || strstr(name, m->only); }

/* Writes the parts, then extends the file with a hole to `total` bytes. */
static int write_all(const char *path, const tkv_buf *parts, int n, uint64_t total, char *err, size_t errlen) {
    FILE *f = fopen(path, "wb");
    if (!f) return tkv_errf(err, errlen, "mutate-gguf: cannot create '%s': %s", path, strerror(errno));
    uint64_t done = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i].n && fwrite(parts[i].u, 1, parts[i].n, f) != parts[i].n) break;
        done += parts[i].n;
    }
    int bad = ferror(f) || fflush(f) || (done < total && ftruncate(fileno(f), (off_t)total));
    if (fclose(f) != 0 || bad) {
        remove(path);
        return tkv_errf(err, errlen, "mutate-gguf: cannot write '%s': %s", path, strerror(errno));
    }
    return 0;
}

/* base[0..n) with the edits (sorted by position, not overlapping) applied, appended to out. */
static void apply(const uint8_t *base, size_t n, mut_edit *e, int ne, tkv_buf *out) {
    for (int i = 1; i < ne; i++)
        for (int k = i; k > 0 && e[k].at < e[k - 1].at; k--) {
            mut_edit t = e[k];
            e[k] = e[k - 1];
            e[k - 1] = t;
        }
    size_t pos = 0;
    for (int i = 0; i < ne; i++) {
        TKV_ASSERT(e[i].at >= pos && e[i].at + e[i].del <= n);
        tkv_buf_add(out, base + pos, e[i].at - pos);
        tkv_buf_add(out, e[i].ins.u, e[i].ins.n);
        pos = e[i].at + e[i].del;
    }
    tkv_buf_add(out, base + pos, n - pos);
}

void mut_edits_free(mut_edit *e, int ne) {
    for (int i = 0; i < ne; i++) free(e[i].ins.u);
}

/* Emits a variant. hdr: the edits apply to the header (bytes before the tensor data) and the data
 * section follows, padded to the input's alignment (pad_to overrides it; 1: no padding), so
 * header-size changes keep every tensor's data where its offset says. !hdr: the edits apply to the
 * whole file as it is. */
int mut_emit(mut_ctx *m, const char *name, const char *expect, const char *says, const char *what, mut_edit *e, int ne, int hdr,
                uint64_t pad_to) {
    int rc = 0;
    if (mut_wants(m, name)) {
        const mut_layout *L = m->L;
        tkv_buf parts[3] = {0};
        int sparse = m->sparse && strcmp(expect, "valid");
        uint64_t total = 0;
        if (hdr) {
            apply(L->b, L->info_end, e, ne, &parts[0]);
            uint64_t al = pad_to ? pad_to : L->f.alignment, end = parts[0].n;
            static const uint8_t zero[64];
            for (uint64_t k = (al - end % al) % al; k > 0;) {
                size_t c = k < sizeof zero ? (size_t)k : sizeof zero;
                tkv_buf_add(&parts[1], zero, c);
                k -= c;
            }
            parts[2].u = (uint8_t *)L->b + L->f.data_start; /* borrowed */
            parts[2].n = L->size - (size_t)L->f.data_start;
            total = parts[0].n + parts[1].n + parts[2].n;
            if (sparse) parts[2].n = 0;
        } else if (!sparse) {
            apply(L->b, L->size, e, ne, &parts[0]);
            total = parts[0].n;
        } else {
            /* the same length; real bytes only before the data: edits there apply, the others
             * (cuts of the file) only change its length */
            size_t n = (size_t)L->f.data_start;
            total = L->size;
            mut_edit in[MUT_MAX_EDITS];
            int k = 0;
            for (int i = 0; i < ne; i++) {
                total = total + e[i].ins.n - e[i].del;
                if (e[i].at >= n) continue;
                in[k] = e[i];
                if (in[k].at + in[k].del > n) in[k].del = n - in[k].at;
                k++;
            }
            apply(L->b, n, in, k, &parts[0]);
            if (parts[0].n > total) parts[0].n = (size_t)total;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gguf", m->dir, name);
        rc = write_all(path, parts, 3, total, m->err, sizeof m->err);
        free(parts[0].u);
        free(parts[1].u);
        if (!rc) {
            fprintf(m->manifest, "%s.gguf\t%s\t%s\t%s\n", name, expect, says, what);
            m->n_written++;
        }
    }
    mut_edits_free(e, ne);
    return rc;
}

/* Convenience: one edit that overwrites k bytes at `at` with the little-endian v. */
mut_edit mut_patch(size_t at, uint64_t v, int k) {
    mut_edit e = {.at = at, .del = (size_t)k};
    tkv_buf_le(&e.ins, v, k);
    return e;
}
mut_edit mut_splice(size_t at, size_t del, const void *p, size_t n) {
    mut_edit e = {.at = at, .del = del};
    tkv_buf_add(&e.ins, p, n);
    return e;
}

/* ---- the families ---- */

/* The whole value of key `key` (type and value bytes) replaced by type t and the encoded value v. */
mut_edit mut_retype(const mut_layout *L, int k, uint32_t t, const tkv_buf *v) {
    mut_edit e = {.at = L->kv_type_at[k], .del = L->kv_end[k] - L->kv_type_at[k]};
    tkv_buf_le(&e.ins, t, 4);
    tkv_buf_add(&e.ins, v->u, v->n);
    return e;
}

/* A KV record (key, type, value) appended after the last KV pair; the caller bumps n_kv. */
mut_edit mut_add_kv(const mut_layout *L, const char *key, uint32_t t, const tkv_buf *v) {
    mut_edit e = {.at = L->kv_end[L->f.n_kv - 1], .del = 0};
    gguf_put_str(&e.ins, key, strlen(key));
    tkv_buf_le(&e.ins, t, 4);
    tkv_buf_add(&e.ins, v->u, v->n);
    return e;
}
