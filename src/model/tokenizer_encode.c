/* tokenizer_encode.c - text -> ids (FORMATS.md 5.2-5.6): split at special tokens, pre-tokenize each
 * raw fragment into words, map each word's bytes into the GPT-2 alphabet, BPE-merge it, look up ids.
 * BPE uses a binary heap of candidate pairs keyed (rank, left position) and skips stale entries, so
 * a word of n chars costs O(n log n) (a 100 KB run of one char is one word). Scratch memory is
 * allocated per call and freed before returning; the vocab is only read. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

typedef struct {
    int32_t *out;
    int cap, n;
} ids_out;

static void put_id(ids_out *o, int32_t id) {
    if (o->n < o->cap) o->out[o->n] = id;
    o->n++;
}

/* ---- BPE on one mapped word ---- */

typedef struct { uint32_t start, len; int32_t prev, next; } sym;
typedef struct { int32_t rank, left, right; uint32_t len; } pair;

typedef struct {
    sym *syms;
    pair *heap;
    size_t cap_syms, cap_heap, n_heap;
} bpe_scratch;

static int pair_less(const pair *a, const pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_scratch *w, pair p) {
    if (w->n_heap == w->cap_heap) {
        w->cap_heap = w->cap_heap ? 2 * w->cap_heap : 64;
        w->heap = realloc(w->heap, w->cap_heap * sizeof *w->heap);
        TKV_ASSERT(w->heap != NULL);
    }
    size_t i = w->n_heap++;
    while (i > 0 && pair_less(&p, &w->heap[(i - 1) / 2])) { w->heap[i] = w->heap[(i - 1) / 2]; i = (i - 1) / 2; }
    w->heap[i] = p;
}

static pair heap_pop(bpe_scratch *w) {
    pair top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!pair_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void try_pair(const tok_vocab *v, bpe_scratch *w, const char *word, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sym *a = &w->syms[l], *b = &w->syms[r];
    int32_t rank = tok_merge_rank(v, word + a->start, a->len, word + b->start, b->len);
    if (rank >= 0) heap_push(w, (pair){rank, l, r, a->len + b->len});
}

static void bpe_word(const tok_vocab *v, bpe_scratch *w, const char *word, size_t n, ids_out *o) {
    if (v->ignore_merges) {
        int32_t id = tok_find(v, word, n);
        if (id >= 0) { put_id(o, id); return; }
    }
    if (n > w->cap_syms) {
        w->cap_syms = n;
        free(w->syms);
        w->syms = tkv_xmalloc(n * sizeof *w->syms);
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n;) { /* the word is valid UTF-8 (we built it) */
        size_t k = (size_t)tok_utf8_len((unsigned char)word[i]);
        if (i + k > n) k = n - i;
        w->syms[ns] = (sym){(uint32_t)i, (uint32_t)k, ns - 1, -1};
        if (ns > 0) w->syms[ns - 1].next = ns;
        ns++;
        i += k;
    }
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < ns; i++) try_pair(v, w, word, i, i + 1);
    while (w->n_heap) {
        pair p = heap_pop(w);
        sym *a = &w->syms[p.left], *b = &w->syms[p.right];
        /* stale if either side was merged away or grew since the pair was queued */
        if (a->len == 0 || b->len == 0 || a->next != p.right || a->len + b->len != p.len) continue;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) w->syms[b->next].prev = p.left;
        try_pair(v, w, word, a->prev, p.left);
        try_pair(v, w, word, p.left, a->next);
    }
    for (int32_t i = 0; i >= 0 && i < ns; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        int32_t id = tok_find(v, word + s->start, s->len);
        if (id >= 0) { put_id(o, id); continue; }
        /* not a token (inconsistent file): its single bytes, those that are tokens (5.6 step 4) */
        for (uint32_t j = 0; j < s->len; j++) {
            int32_t bid = tok_find(v, word + s->start + j, 1);
            if (bid >= 0) put_id(o, bid);
        }
    }
}

/* ---- one raw fragment: pre-tokenize, map bytes, BPE ---- */

static void encode_raw(const tok_vocab *v, bpe_scratch *w, const char *text, size_t len, ids_out *o) {
    uint32_t *cps = tkv_xmalloc((len + 1) * sizeof *cps);
    uint32_t *ends = tkv_xmalloc((len + 1) * sizeof *ends);
    uint8_t *fl = tkv_xmalloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int k = tok_utf8_decode((const unsigned char *)text + i, len - i, &cps[n]);
        fl[n] = tok_cp_flags(cps[n]);
        n++;
        i += (size_t)k;
    }
    size_t nw = tok_pretok_split(v->pre, cps, fl, n, ends);
    /* a mapped byte is at most 2 UTF-8 bytes (U+0143), and a code point at most 4 bytes */
    size_t cap = 64;
    char *word = tkv_xmalloc(cap);
    size_t start = 0;
    for (size_t wi = 0; wi < nw; wi++) {
        size_t m = 0, end = ends[wi];
        if (8 * (end - start) > cap) {
            cap = 8 * (end - start);
            free(word);
            word = tkv_xmalloc(cap);
        }
        for (size_t i = start; i < end; i++) {
            char u[4], e[4];
            int k = tok_utf8_encode(cps[i], u); /* invalid input bytes are U+FFFD by now */
            for (int j = 0; j < k; j++) {
                int ke = tok_utf8_encode(tok_byte_to_cp((uint8_t)u[j]), e);
                memcpy(word + m, e, (size_t)ke);
                m += (size_t)ke;
            }
        }
        bpe_word(v, w, word, m, o);
        start = end;
    }
    free(word);
    free(cps);
    free(ends);
    free(fl);
}

/* ---- special tokens (5.3) ---- */

typedef struct { size_t start, len; int32_t id; } frag; /* id -1: raw text */
typedef struct { frag *a; size_t n, cap; } frags;

static void frag_push(frags *f, frag x) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->a = realloc(f->a, f->cap * sizeof *f->a);
        TKV_ASSERT(f->a != NULL);
    }
    f->a[f->n++] = x;
}

/* Does [a, b) overlap one of the protected ranges lit[2i]..lit[2i+1]? */
static int protected_at(const size_t *lit, int n_lit, size_t a, size_t b) {
    for (int i = 0; i < n_lit; i++)
        if (a < lit[2 * i + 1] && lit[2 * i] < b) return 1;
    return 0;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int flags, int32_t *out, int cap) {
    return tok_encode_protected(v, text, len, flags, NULL, 0, out, cap);
}

/* At most 6 ids per byte (tokenizer.h) and 2 specials: 6 * TOK_MAX_TEXT + 2 < INT_MAX. */
int tok_encode_protected(const tok_vocab *v, const char *text, size_t len, int flags, const size_t *lit,
                         int n_lit, int32_t *out, int cap) {
    if (len > TOK_MAX_TEXT) return -1;
    ids_out o = {out, cap < 0 ? 0 : cap, 0};
    int parse_special = (flags & TOK_PARSE_SPECIAL) != 0;
    frags cur = {0}, next = {0};
    if (len) frag_push(&cur, (frag){0, len, -1});
    /* every candidate, longest first, splits every raw fragment at each occurrence, left to right */
    for (int si = 0; si < v->n_special; si++) {
        int32_t id = v->special[si];
        int t = v->type[id];
        if (!parse_special && (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN)) continue;
        const char *st = v->text + v->text_off[id];
        size_t sl = v->text_len[id];
        int guard = n_lit > 0 && t != TOK_TYPE_USER_DEFINED; /* USER_DEFINED match anywhere, as in plain text */
        next.n = 0;
        for (size_t f = 0; f < cur.n; f++) {
            frag x = cur.a[f];
            if (x.id >= 0 || x.len < sl) { frag_push(&next, x); continue; }
            size_t s = x.start, q = s, e = s + x.len; /* fragment start, search position */
            const char *hit;
            while (q < e && (hit = memmem(text + q, e - q, st, sl)) != NULL) {
                size_t h = (size_t)(hit - text);
                if (guard && protected_at(lit, n_lit, h, h + sl)) { q = h + 1; continue; }
                if (h > s) frag_push(&next, (frag){s, h - s, -1});
                frag_push(&next, (frag){h, sl, id});
                s = q = h + sl;
            }
            if (s < e) frag_push(&next, (frag){s, e - s, -1});
        }
        frags tmp = cur;
        cur = next;
        next = tmp;
    }
    frag *fr = cur.a;
    size_t nf = cur.n;
    int add = (flags & TOK_ADD_SPECIAL) != 0;
    /* never a double BOS: a text that already starts with the BOS token gets none added (6.3) */
    if (add && v->add_bos && v->bos >= 0 && !(nf > 0 && fr[0].id == v->bos)) put_id(&o, v->bos);
    bpe_scratch w = {0};
    for (size_t f = 0; f < nf; f++) {
        if (fr[f].id >= 0) put_id(&o, fr[f].id);
        else encode_raw(v, &w, text + fr[f].start, fr[f].len, &o);
    }
    if (add && v->add_eos && v->eos >= 0) put_id(&o, v->eos);
    free(w.syms);
    free(w.heap);
    free(cur.a);
    free(next.a);
    return o.n;
}

int tok_encode_alloc(const tok_vocab *v, const char *text, size_t len, int flags, const size_t *lit, int n_lit,
                     int32_t **out) {
    *out = NULL;
    if (len > TOK_MAX_TEXT) return -1;
    /* a guess that fits most text (valid UTF-8 gives at most one id per byte); encoded again only when it does not */
    int cap = (int)len + 8;
    int32_t *ids = tkv_xmalloc((size_t)cap * sizeof *ids);
    int k = tok_encode_protected(v, text, len, flags, lit, n_lit, ids, cap);
    if (k > cap) {
        free(ids);
        ids = tkv_xmalloc((size_t)k * sizeof *ids);
        int k2 = tok_encode_protected(v, text, len, flags, lit, n_lit, ids, k);
        TKV_ASSERT(k2 == k);
    }
    *out = ids;
    return k;
}
