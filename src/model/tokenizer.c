/* tokenizer.c - loading a byte-level BPE vocabulary from GGUF (FORMATS.md 5.1), the lookup tables
 * (token text -> id, merge pair -> rank), special ids and the EOG set, and decoding (5.7).
 * Encoding lives in tokenizer_encode.c. Everything is copied out of the gguf_file at load, so the
 * vocab outlives the file. Tables are open-addressed hashes at load factor <= 1/2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

uint64_t tok_hash_bytes(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static uint32_t mix(uint64_t h) { return (uint32_t)(h ^ (h >> 29) ^ (h >> 47)); }

static uint32_t table_size(uint64_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

int32_t tok_find(const tok_vocab *v, const char *text, size_t len) {
    uint32_t i = mix(tok_hash_bytes(TOK_HASH_SEED, text, len)) & v->id_mask;
    for (;; i = (i + 1) & v->id_mask) {
        int32_t id = v->id_hash[i];
        if (id < 0) return -1;
        if (v->text_len[id] == len && memcmp(v->text + v->text_off[id], text, len) == 0) return id;
    }
}

int32_t tok_merge_rank(const tok_vocab *v, const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = tok_hash_bytes(TOK_HASH_SEED, a, na);
    h = tok_hash_bytes(h, " ", 1);
    h = tok_hash_bytes(h, b, nb);
    for (uint32_t i = mix(h) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        const tok_merge *m = &v->merges[i];
        if (m->rank < 0) return -1;
        if (m->len_a == na && m->len == na + 1 + nb) {
            const char *t = v->merge_text + m->off;
            if (memcmp(t, a, na) == 0 && memcmp(t + na + 1, b, nb) == 0) return m->rank;
        }
    }
}

/* ---- loading ---- */

static int get_str_array(const gguf_file *f, const char *key, uint64_t *n, const uint8_t **data,
                         char *err, size_t errlen) {
    uint32_t et;
    if (gguf_get_arr(f, key, &et, n, data, err, errlen)) return -1;
    if (et != GGUF_STR) return tkv_errf(err, errlen, "%s: expected an array of strings", key);
    return 0;
}

/* Optional token id key: a value out of the vocabulary (or negative) is ignored and the default
 * stays, as in llama.cpp; a value that is no integer at all is a broken file. */
static int opt_id(const gguf_file *f, const char *key, int n, int32_t *id, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type > GGUF_I32 && kv->type != GGUF_U64 && kv->type != GGUF_I64) /* f32 bool str arr f64 */
        return tkv_errf(err, errlen, "%s has type %s, expected an integer token id", key, gguf_vtype_name(kv->type));
    uint32_t u;
    char e[8];
    if (gguf_get_u32(f, key, &u, e, sizeof e) == 0 && u < (uint32_t)n) *id = (int32_t)u;
    return 0;
}

/* Optional bool key: *out is left alone when absent; any other type is a broken file. */
static int opt_bool(const gguf_file *f, const char *key, int *out, char *err, size_t errlen) {
    if (!gguf_find(f, key)) return 0;
    return gguf_get_bool(f, key, out, err, errlen);
}

static int32_t find_cstr(const tok_vocab *v, const char *s) { return tok_find(v, s, strlen(s)); }

/* Finds the first of names present in the vocab and forces it to CONTROL. */
static int32_t detect(tok_vocab *v, const char *const *names) {
    for (; *names; names++) {
        int32_t id = find_cstr(v, *names);
        if (id >= 0) { v->type[id] = TOK_TYPE_CONTROL; return id; }
    }
    return -1;
}

static void add_eog(tok_vocab *v, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < v->n_eog; i++) if (v->eog[i] == id) return;
    v->eog[v->n_eog++] = id;
    v->type[id] = TOK_TYPE_CONTROL;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* (text length << 32 | id) keys: sorting them descending by length, then ascending by id */
static int cmp_special(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    if ((x >> 32) != (y >> 32)) return (x >> 32) < (y >> 32) ? 1 : -1;
    return (x > y) - (x < y);
}

static void special_ids(tok_vocab *v) {
    /* EOT / EOM: keys first, else by text (FORMATS.md 5.1) */
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL};
    static const char *const rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", NULL};
    static const char *const sep_names[] = {"<|file_sep|>", NULL};
    static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|eom_id|>", "<EOT>", NULL};
    if (v->eot < 0) v->eot = detect(v, eot_names);
    if (v->eom < 0) v->eom = detect(v, eom_names);
    v->eog = tkv_xmalloc(32 * sizeof *v->eog);
    add_eog(v, detect(v, pad_names));
    add_eog(v, detect(v, rep_names));
    add_eog(v, detect(v, sep_names));
    for (int i = 0; eog_names[i]; i++) add_eog(v, find_cstr(v, eog_names[i]));
    if (v->eos >= 0 && v->n_eog < 32) add_eog(v, v->eos);
    add_eog(v, v->eot);
    add_eog(v, v->eom);
    qsort(v->eog, (size_t)v->n_eog, sizeof *v->eog, cmp_i32);
}

/* Decoded bytes of each token (5.7), computed once so decoding is a lookup. */
static void build_pieces(tok_vocab *v, size_t text_bytes) {
    v->piece = tkv_xmalloc(text_bytes + 1); /* a piece is never longer than its text */
    v->piece_off = tkv_xmalloc((size_t)v->n * sizeof *v->piece_off);
    v->piece_len = tkv_xmalloc((size_t)v->n * sizeof *v->piece_len);
    size_t o = 0;
    for (int id = 0; id < v->n; id++) {
        const unsigned char *t = (const unsigned char *)v->text + v->text_off[id];
        size_t n = v->text_len[id], start = o;
        switch (v->type[id]) {
        case TOK_TYPE_NORMAL:
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                int k = tok_utf8_decode(t + i, n - i, &cp);
                int b = tok_cp_to_byte(cp);
                /* a char outside the byte alphabet cannot occur in a consistent file: keep its UTF-8 */
                if (b >= 0) v->piece[o++] = (char)b;
                else { memcpy(v->piece + o, t + i, (size_t)k); o += (size_t)k; }
                i += (size_t)k;
            }
            break;
        case TOK_TYPE_USER_DEFINED: case TOK_TYPE_CONTROL: case TOK_TYPE_UNKNOWN:
            memcpy(v->piece + o, t, n);
            o += n;
            break;
        default: break; /* UNUSED, BYTE, UNDEFINED: nothing */
        }
        v->piece_off[id] = (uint32_t)start;
        v->piece_len[id] = (uint32_t)(o - start);
        if ((int)(o - start) > v->max_piece) v->max_piece = (int)(o - start);
    }
}

static int load_merges(tok_vocab *v, const gguf_file *f, char *err, size_t errlen) {
    uint64_t nm = 0;
    const uint8_t *p = NULL;
    if (gguf_find(f, "tokenizer.ggml.merges") &&
        get_str_array(f, "tokenizer.ggml.merges", &nm, &p, err, errlen)) return -1;
    if (nm > (1u << 28)) return tkv_errf(err, errlen, "tokenizer.ggml.merges: %llu entries", (unsigned long long)nm);
    size_t bytes = 0;
    const uint8_t *q = p;
    for (uint64_t i = 0; i < nm; i++) bytes += gguf_arr_str_next(&q).len + 1;
    if (bytes > 0xFFFFFFF0u) return tkv_errf(err, errlen, "tokenizer.ggml.merges: too large");
    v->merge_text = tkv_xmalloc(bytes + 1);
    v->merge_mask = table_size(nm) - 1;
    v->merges = tkv_xmalloc(((size_t)v->merge_mask + 1) * sizeof *v->merges);
    for (uint32_t i = 0; i <= v->merge_mask; i++) v->merges[i].rank = -1;
    size_t o = 0;
    for (uint64_t r = 0; r < nm; r++) {
        gguf_str s = gguf_arr_str_next(&p);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL; /* first space after 0 */
        if (!sp) continue;                                                     /* not a pair: ignored */
        size_t na = (size_t)(sp - s.ptr), nb = s.len - na - 1;
        if (tok_merge_rank(v, s.ptr, na, sp + 1, nb) >= 0) continue; /* duplicate: first rank wins */
        memcpy(v->merge_text + o, s.ptr, s.len);
        v->merge_text[o + s.len] = 0;
        uint32_t i = mix(tok_hash_bytes(TOK_HASH_SEED, s.ptr, s.len)) & v->merge_mask;
        while (v->merges[i].rank >= 0) i = (i + 1) & v->merge_mask;
        v->merges[i] = (tok_merge){(uint32_t)o, (uint32_t)na, (uint32_t)s.len, (int32_t)r};
        o += s.len + 1;
    }
    return 0;
}

tok_vocab *tok_load(const gguf_file *f, char *err, size_t errlen) {
    gguf_str model, pre;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model, err, errlen)) return NULL;
    if (!gguf_str_eq(model, "gpt2")) {
        tkv_errf(err, errlen, "tokenizer.ggml.model '%.*s' is not supported (only byte-level BPE 'gpt2')",
                 (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return NULL;
    }
    if (!gguf_find(f, "tokenizer.ggml.pre")) {
        tkv_errf(err, errlen, "tokenizer.ggml.pre is missing: the pre-tokenizer is unknown");
        return NULL;
    }
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, err, errlen)) return NULL;
    int pk = tok_pre_from_name(pre.ptr, pre.len);
    if (pk < 0) {
        tkv_errf(err, errlen, "unknown tokenizer.ggml.pre '%.*s' (supported: gpt-2, llama-bpe, llama3, llama-v3, "
                 "falcon3, qwen2, deepseek-r1-qwen, megrez)", (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
        return NULL;
    }
    uint64_t n = 0;
    const uint8_t *p = NULL;
    if (get_str_array(f, "tokenizer.ggml.tokens", &n, &p, err, errlen)) return NULL;
    if (n == 0 || n > (1u << 24)) {
        tkv_errf(err, errlen, "tokenizer.ggml.tokens: %llu tokens", (unsigned long long)n);
        return NULL;
    }
    tok_vocab *v = tkv_xcalloc(1, sizeof *v);
    v->n = (int)n;
    v->pre = (tok_pre)pk;
    v->ignore_merges = pk == TOK_PRE_LLAMA3;
    snprintf(v->pre_name, sizeof v->pre_name, "%.*s", (int)pre.len, pre.ptr);
    size_t bytes = 0;
    const uint8_t *q = p;
    for (uint64_t i = 0; i < n; i++) bytes += gguf_arr_str_next(&q).len + 1;
    if (bytes > 0xFFFFFFF0u) { tkv_errf(err, errlen, "tokenizer.ggml.tokens: too large"); tok_free(v); return NULL; }
    v->text = tkv_xmalloc(bytes);
    v->text_off = tkv_xmalloc(n * sizeof *v->text_off);
    v->text_len = tkv_xmalloc(n * sizeof *v->text_len);
    v->type = tkv_xmalloc(n);
    v->id_mask = table_size(n) - 1;
    v->id_hash = tkv_xmalloc(((size_t)v->id_mask + 1) * sizeof *v->id_hash);
    memset(v->id_hash, 0xFF, ((size_t)v->id_mask + 1) * sizeof *v->id_hash);
    size_t o = 0;
    for (int id = 0; id < v->n; id++) {
        gguf_str s = gguf_arr_str_next(&p);
        memcpy(v->text + o, s.ptr, s.len);
        v->text[o + s.len] = 0;
        v->text_off[id] = (uint32_t)o;
        v->text_len[id] = (uint32_t)s.len;
        v->type[id] = TOK_TYPE_NORMAL;
        o += s.len + 1;
        /* same text twice: the later id wins, as in llama.cpp's token_to_id map */
        uint32_t i = mix(tok_hash_bytes(TOK_HASH_SEED, s.ptr, s.len)) & v->id_mask;
        for (;; i = (i + 1) & v->id_mask) {
            int32_t o2 = v->id_hash[i];
            if (o2 < 0 || (v->text_len[o2] == s.len && memcmp(v->text + v->text_off[o2], s.ptr, s.len) == 0)) break;
        }
        v->id_hash[i] = id;
    }
    if (gguf_find(f, "tokenizer.ggml.token_type")) {
        uint32_t et;
        uint64_t nt;
        const uint8_t *d;
        if (gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &nt, &d, err, errlen)) { tok_free(v); return NULL; }
        if ((et != GGUF_I32 && et != GGUF_U32) || nt != n) {
            tkv_errf(err, errlen, "tokenizer.ggml.token_type: want %llu i32, got %llu of type %u",
                     (unsigned long long)n, (unsigned long long)nt, et);
            tok_free(v);
            return NULL;
        }
        for (int id = 0; id < v->n; id++) {
            int32_t t;
            memcpy(&t, d + 4 * (size_t)id, 4); /* GGUF is little-endian, and so are our targets */
            v->type[id] = (uint8_t)(t >= 0 && t <= TOK_TYPE_BYTE ? t : TOK_TYPE_UNDEFINED);
        }
    }
    if (load_merges(v, f, err, errlen)) { tok_free(v); return NULL; }

    v->bos = v->eos = v->eot = v->eom = -1;
    v->add_bos = pk == TOK_PRE_LLAMA3;
    v->add_eos = 0;
    if (opt_id(f, "tokenizer.ggml.bos_token_id", v->n, &v->bos, err, errlen) ||
        opt_id(f, "tokenizer.ggml.eos_token_id", v->n, &v->eos, err, errlen) ||
        opt_id(f, "tokenizer.ggml.eot_token_id", v->n, &v->eot, err, errlen) ||
        opt_id(f, "tokenizer.ggml.eom_token_id", v->n, &v->eom, err, errlen) ||
        opt_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen) ||
        opt_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen)) {
        tok_free(v);
        return NULL;
    }
    special_ids(v);

    uint64_t *keys = tkv_xmalloc(n * sizeof *keys);
    for (int id = 0; id < v->n; id++) {
        int t = v->type[id];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && v->text_len[id] > 0)
            keys[v->n_special++] = (uint64_t)v->text_len[id] << 32 | (uint32_t)id;
    }
    qsort(keys, (size_t)v->n_special, sizeof *keys, cmp_special);
    v->special = tkv_xmalloc(((size_t)v->n_special + 1) * sizeof *v->special);
    for (int i = 0; i < v->n_special; i++) v->special[i] = (int32_t)(uint32_t)keys[i];
    free(keys);
    build_pieces(v, bytes);
    return v;
}

void tok_free(tok_vocab *v) {
    if (!v) return;
    free(v->text); free(v->text_off); free(v->text_len); free(v->type);
    free(v->piece); free(v->piece_off); free(v->piece_len); free(v->id_hash);
    free(v->merge_text); free(v->merges); free(v->special); free(v->eog);
    free(v);
}

/* ---- queries ---- */

int tok_n_vocab(const tok_vocab *v) { return v->n; }
const char *tok_pre_name(const tok_vocab *v) { return v->pre_name; }
int tok_type(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n ? v->type[id] : -1; }
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n) { if (len) *len = 0; return NULL; }
    if (len) *len = v->text_len[id];
    return v->text + v->text_off[id];
}
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int tok_add_bos(const tok_vocab *v) { return v->add_bos; }
int tok_is_eog(const tok_vocab *v, int32_t id) {
    return bsearch(&id, v->eog, (size_t)v->n_eog, sizeof *v->eog, cmp_i32) != NULL;
}

/* ---- decoding ---- */

int tok_piece(const tok_vocab *v, int32_t id, int special, const char **bytes) {
    if (id < 0 || id >= v->n) return -1;
    *bytes = v->piece + v->piece_off[id];
    int t = v->type[id];
    if (!special && (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN)) return 0;
    return (int)v->piece_len[id];
}

int tok_max_piece(const tok_vocab *v) { return v->max_piece; }

void tok_stream_init(tok_stream *s) { memset(s, 0, sizeof *s); }

static size_t put_fffd(char *out) { memcpy(out, "\xef\xbf\xbd", 3); return 3; }

/* Can p[0..k) (k < full length) still grow into a valid character? */
static int prefix_ok(const unsigned char *p, size_t k) {
    unsigned char b = p[0];
    for (size_t i = 1; i < k; i++) if ((p[i] & 0xC0) != 0x80) return 0;
    if (k >= 2) {
        unsigned char c = p[1];
        if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) || (b == 0xF4 && c > 0x8F)) return 0;
    }
    return 1;
}

/* Emits what p[0..n) decides; returns the bytes consumed. The rest is a valid incomplete prefix. */
static size_t emit(const unsigned char *p, size_t n, char *out, size_t *o) {
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { out[(*o)++] = (char)p[i++]; continue; }
        size_t len = (size_t)tok_utf8_len(p[i]);
        if (len > 1 && i + len > n && prefix_ok(p + i, n - i)) return i;
        uint32_t cp;
        int k = tok_utf8_decode(p + i, n - i, &cp);
        if (k == 1) { *o += put_fffd(out + *o); i++; continue; }
        memcpy(out + *o, p + i, (size_t)k);
        *o += (size_t)k;
        i += (size_t)k;
    }
    return n;
}

size_t tok_stream_feed(tok_stream *s, const char *bytes, size_t len, char *out) {
    const unsigned char *in = (const unsigned char *)bytes;
    size_t o = 0, i = 0;
    if (s->n_hold) {
        /* finish the held character with up to 4 new bytes, then go on from where that ended */
        unsigned char tmp[8];
        size_t take = len < 4 ? len : 4, nh = (size_t)s->n_hold;
        memcpy(tmp, s->hold, nh);
        memcpy(tmp + nh, in, take);
        size_t c = emit(tmp, nh + take, out, &o);
        if (c < nh) { /* still incomplete: then all input fit in tmp */
            s->n_hold = (int)(nh + take - c);
            memmove(s->hold, tmp + c, (size_t)s->n_hold);
            return o;
        }
        i = c - nh;
        s->n_hold = 0;
    }
    size_t c = emit(in + i, len - i, out, &o);
    s->n_hold = (int)(len - i - c);
    memcpy(s->hold, in + i + c, (size_t)s->n_hold);
    return o;
}

size_t tok_stream_token(tok_stream *s, const tok_vocab *v, int32_t id, int special, char *out) {
    const char *b;
    int n = tok_piece(v, id, special, &b);
    return n > 0 ? tok_stream_feed(s, b, (size_t)n, out) : 0;
}

size_t tok_stream_flush(tok_stream *s, char *out) {
    size_t o = 0;
    for (int i = 0; i < s->n_hold; i++) o += put_fffd(out + o);
    s->n_hold = 0;
    return o;
}

char *tok_decode(const tok_vocab *v, const int32_t *ids, int n, int special, size_t *len) {
    size_t cap = 16, o = 0;
    char *out = tkv_xmalloc(cap);
    tok_stream s;
    tok_stream_init(&s);
    for (int i = 0; i < n; i++) {
        const char *b;
        int k = tok_piece(v, ids[i], special, &b);
        if (k <= 0) continue;
        size_t need = o + TOK_STREAM_OUT(k) + 16;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *nb = realloc(out, cap);
            TKV_ASSERT(nb != NULL);
            out = nb;
        }
        o += tok_stream_feed(&s, b, (size_t)k, out + o);
    }
    o += tok_stream_flush(&s, out + o);
    out[o] = 0;
    if (len) *len = o;
    return out;
}
