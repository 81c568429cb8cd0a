/* fuzz_tokenizer.c - libFuzzer target for the encoder and the streaming decoder on the gpt-2 vocab.
 * Input: byte 0 picks flags (parse special, add special) and how decoding is chunked; bit 3 set
 * means the rest is not text but token ids to detokenize (4 bytes each, little-endian, any value:
 * ids out of range must be skipped), decoded whole and token by token through the stream, which
 * must agree and give valid UTF-8. Otherwise the rest is the text. Checks: encode never fails, the count is stable when the buffer is too small, and
 * decode(encode(s)) equals s with each invalid UTF-8 byte replaced by U+FFFD (FORMATS.md 5.2),
 * whether the pieces are fed whole or byte by byte. Only parse-special runs skip the round trip
 * check (control tokens decode to nothing). The vocab path: $TIERKV_SHARED (default ../shared). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

static gguf_file g;
static tok_vocab *v;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *root = getenv("TIERKV_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf", root ? root : "../shared");
    if (gguf_open(path, &g, err, sizeof err) || !(v = tok_load(&g, err, sizeof err))) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err);
        abort();
    }
    return 0;
}

/* Arbitrary ids: tok_decode and the stream fed token by token give the same valid UTF-8. */
static void detokenize(const uint8_t *p, size_t n, int special) {
    int k = (int)(n / 4);
    int32_t *ids = malloc((size_t)(k ? k : 1) * sizeof *ids);
    for (int i = 0; i < k; i++) memcpy(&ids[i], p + 4 * (size_t)i, 4);
    size_t dn;
    char *d = tok_decode(v, ids, k, special, &dn);
    size_t cap = TOK_STREAM_OUT(tok_max_piece(v)) + 16, an = 0;
    char *acc = malloc(dn + 16), *out = malloc(cap);
    tok_stream st;
    tok_stream_init(&st);
    for (int i = 0; i < k; i++) {
        size_t m = tok_stream_token(&st, v, ids[i], special, out);
        if (an + m > dn) abort();
        memcpy(acc + an, out, m);
        an += m;
    }
    size_t m = tok_stream_flush(&st, out);
    if (an + m != dn) abort();
    memcpy(acc + an, out, m);
    if (memcmp(acc, d, dn) != 0) abort();
    for (size_t i = 0; i < dn;) { /* valid UTF-8: a strict decode never meets an invalid byte */
        uint32_t cp;
        int l = tok_utf8_decode((const unsigned char *)d + i, dn - i, &cp);
        if (cp == 0xFFFD && (l != 3 || memcmp(d + i, "\xef\xbf\xbd", 3) != 0)) abort();
        i += (size_t)l;
    }
    free(out);
    free(acc);
    free(d);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int mode = data[0];
    if (mode & 8) {
        detokenize(data + 1, size - 1, (mode >> 4) & 1);
        return 0;
    }
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    int flags = mode & 3; /* TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL */
    int32_t *ids = malloc((n + 8) * sizeof *ids);
    int k = tok_encode(v, s, n, flags, ids, (int)n + 8);
    if (k < 0 || k > (int)n + 8) abort();
    for (int i = 0; i < k; i++) if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) abort();
    if (n > 0 && tok_encode(v, s, n, flags, ids, 1) != k) abort();
    tok_encode(v, s, n, flags, ids, (int)n + 8);

    /* expected: strict decoding, one U+FFFD per bad byte */
    char *want = malloc(3 * n + 1);
    size_t wn = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        wn += (size_t)tok_utf8_encode(cp, want + wn);
    }
    size_t dn;
    char *got = tok_decode(v, ids, k, 0, &dn);
    if (!(flags & 2) && (dn != wn || memcmp(got, want, wn) != 0)) abort();

    /* the stream fed byte by byte gives the same text as whole pieces */
    if (mode & 4) {
        tok_stream st;
        tok_stream_init(&st);
        char *acc = malloc(3 * dn + 64), out[64];
        size_t an = 0;
        for (size_t i = 0; i < dn; i++) {
            size_t m = tok_stream_feed(&st, got + i, 1, out);
            memcpy(acc + an, out, m);
            an += m;
        }
        an += tok_stream_flush(&st, acc + an);
        if (an != dn || memcmp(acc, got, dn) != 0) abort();
        free(acc);
    }
    free(got);
    free(want);
    free(ids);
    return 0;
}
