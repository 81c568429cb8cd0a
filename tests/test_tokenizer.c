/* test_tokenizer.c - the byte-level BPE tokenizer against llama.cpp's test vectors (FORMATS.md 5),
 * round trips (valid UTF-8 exactly; invalid bytes become U+FFFD each), special tokens, EOG, the
 * streaming decoder, the pre-tokenizer scans, speed on 100 KB, and the tokenize command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/pretok.h"
#include "model/tokenizer.h"
#include "model/unicode.h"
#include "t.h"

#define GPT2_VOCAB "fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf"
#define QWEN_VOCAB "fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"
#define R1_VOCAB "fixtures/tokenizer/extra/vocab-r1-distill-qwen-7b.gguf"

typedef struct { gguf_file g; tok_vocab *v; } loaded;

/* -1 when the vocabulary is missing (the test is skipped) or does not load (the test fails). */
static int load(const char *rel, loaded *l) {
    char err[256];
    memset(l, 0, sizeof *l);
    if (!t_need(rel)) return -1;
    if (gguf_open(t_shared(rel), &l->g, err, sizeof err)) { CHECKF(0, "%s", err); return -1; }
    l->v = tok_load(&l->g, err, sizeof err);
    if (!l->v) { CHECKF(0, "%s: %s", rel, err); gguf_free(&l->g); return -1; }
    return 0;
}
static void unload(loaded *l) { tok_free(l->v); gguf_free(&l->g); }


/* ids of text as a " 1 2 3" line */
static int encode_line(const tok_vocab *v, const char *s, size_t n, int flags, char *line, size_t cap) {
    int32_t *ids = malloc((n + 8) * sizeof *ids);
    int k = tok_encode(v, s, n, flags, ids, (int)n + 8);
    size_t o = 0;
    line[0] = 0;
    for (int i = 0; i < k && o + 16 < cap; i++) o += (size_t)snprintf(line + o, cap - o, " %d", ids[i]);
    free(ids);
    return k;
}

/* Strict decode with U+FFFD for each bad byte: what decode(encode(s)) must give. */
static char *sanitize(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        k += (size_t)tok_utf8_encode(cp, o + k);
        i += (size_t)l;
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

static int roundtrip_ok(const tok_vocab *v, const char *s, size_t n) {
    int32_t *ids = malloc((n + 8) * sizeof *ids);
    int k = tok_encode(v, s, n, 0, ids, (int)n + 8);
    size_t dn, en;
    char *d = tok_decode(v, ids, k, 0, &dn), *e = sanitize(s, n, &en);
    int ok = dn == en && memcmp(d, e, dn) == 0;
    free(ids); free(d); free(e);
    return ok;
}

/* Runs the .inp/.out vectors (add_special = parse_special = false); returns passes, *total cases. */
static int run_vectors(const tok_vocab *v, const char *inp, const char *outp, int *total) {
    size_t ni, no;
    char *in = t_slurp_n(t_shared(inp), &ni), *out = t_slurp_n(t_shared(outp), &no);
    if (!in || !out) { free(in); free(out); *total = -1; return 0; }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = in, *o = out, line[65536];
    int pass = 0;
    *total = 0;
    for (char *e; (e = strstr(p, sep)) != NULL; p = e + sizeof sep - 1) {
        char *eol = strchr(o, '\n');
        if (!eol) break;
        encode_line(v, p, (size_t)(e - p), 0, line, sizeof line);
        int ok = strlen(line) == (size_t)(eol - o) && memcmp(line, o, (size_t)(eol - o)) == 0;
        CHECKF(ok, "case %d [%.*s]: got%s want%.*s", *total + 1, (int)(e - p), p, line, (int)(eol - o), o);
        CHECKF(roundtrip_ok(v, p, (size_t)(e - p)), "round trip of case %d", *total + 1);
        pass += ok;
        (*total)++;
        o = eol + 1;
    }
    free(in);
    free(out);
    return pass;
}

static void vectors(const char *vocab, const char *inp, const char *outp) {
    NEED(inp);
    NEED(outp);
    loaded l;
    if (load(vocab, &l)) return;
    int total, pass = run_vectors(l.v, inp, outp, &total);
    printf("    %s: %d/%d token-exact\n", inp, pass, total);
    CHECK(total == 46);
    CHECK(pass == total);
    unload(&l);
}

TEST(tok_vectors_gpt2) {
    vectors(GPT2_VOCAB, "fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf.inp", "fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf.out");
}
TEST(tok_vectors_qwen2) {
    vectors(QWEN_VOCAB, "fixtures/tokenizer/ggml-vocab-qwen2.gguf.inp", "fixtures/tokenizer/ggml-vocab-qwen2.gguf.out");
}
TEST(tok_vectors_deepseek_r1_qwen) {
    vectors(R1_VOCAB, "fixtures/tokenizer/ggml-vocab-deepseek-r1-qwen.gguf.inp", "fixtures/tokenizer/ggml-vocab-deepseek-r1-qwen.gguf.out");
}

TEST(tok_unicode_table) {
    REQUIRE(tok_n_ucls_ranges > 100 && tok_ucls_ranges[0].start == 0);
    for (int i = 1; i < tok_n_ucls_ranges; i++) CHECK(tok_ucls_ranges[i].start > tok_ucls_ranges[i - 1].start);
    CHECK(tok_ucls('a') == UCLS_LETTER && tok_ucls('Z') == UCLS_LETTER && tok_ucls('7') == UCLS_NUMBER);
    CHECK(tok_ucls(0xE9) == UCLS_LETTER && tok_ucls(0x4E2D) == UCLS_LETTER && tok_ucls(0x0663) == UCLS_NUMBER);
    CHECK(tok_ucls(0x2167) == UCLS_NUMBER /* Roman numeral eight: Nl */ && tok_ucls(0x00B2) == UCLS_NUMBER);
    CHECK(tok_ucls('!') == UCLS_OTHER && tok_ucls(0x0301) == UCLS_OTHER && tok_ucls(0x1F600) == UCLS_OTHER);
    CHECK(tok_ucls(0x0378) == UCLS_UNASSIGNED && tok_ucls(0x10FFFF) == UCLS_UNASSIGNED);
    CHECK(tok_is_space(' ') && tok_is_space(0x3000) && tok_is_space(0x85) && tok_is_space(0x200A));
    CHECK(!tok_is_space(0x200B) && !tok_is_space('x'));
    for (int b = 0; b < 256; b++) CHECK(tok_cp_to_byte(tok_byte_to_cp((uint8_t)b)) == b);
    CHECK(tok_byte_to_cp(' ') == 0x120 && tok_byte_to_cp('\n') == 0x10A && tok_byte_to_cp(0xAD) == 0x143);
    printf("    Unicode %s, %d ranges\n", tok_unicode_version, tok_n_ucls_ranges);
}

/* split of an ASCII/UTF-8 string, as "a|b|c" */
static void split_str(tok_pre pre, const char *s, char *out) {
    uint32_t cps[256], ends[256];
    uint8_t fl[256];
    size_t n = 0, len = strlen(s), offs[257];
    for (size_t i = 0; i < len;) {
        offs[n] = i;
        i += (size_t)tok_utf8_decode((const unsigned char *)s + i, len - i, &cps[n]);
        fl[n] = tok_cp_flags(cps[n]);
        n++;
    }
    offs[n] = len;
    size_t nw = tok_pretok_split(pre, cps, fl, n, ends), o = 0, start = 0;
    for (size_t w = 0; w < nw; w++) {
        if (w) out[o++] = '|';
        memcpy(out + o, s + offs[start], offs[ends[w]] - offs[start]);
        o += offs[ends[w]] - offs[start];
        start = ends[w];
    }
    out[o] = 0;
}

TEST(tok_pretok_scans) {
    char b[512];
    split_str(TOK_PRE_LLAMA3, "1234567", b); CHECK(!strcmp(b, "123|456|7"));
    split_str(TOK_PRE_QWEN2, "1234", b); CHECK(!strcmp(b, "1|2|3|4"));
    split_str(TOK_PRE_GPT2, "abc 1234", b); CHECK(!strcmp(b, "abc| 1234"));
    split_str(TOK_PRE_GPT2, "I'm  x", b); CHECK(!strcmp(b, "I|'m| | x"));
    split_str(TOK_PRE_GPT2, "IT'S", b); CHECK(!strcmp(b, "IT|'|S"));       /* gpt-2: lower case only */
    split_str(TOK_PRE_QWEN2, "IT'S", b); CHECK(!strcmp(b, "IT|'S"));
    split_str(TOK_PRE_QWEN2, "a\r\n\r\n b", b); CHECK(!strcmp(b, "a|\r\n\r\n| b"));
    split_str(TOK_PRE_QWEN2, "x  \n  y", b); CHECK(!strcmp(b, "x|  \n| | y"));
    split_str(TOK_PRE_QWEN2, "(hello)", b); CHECK(!strcmp(b, "(hello|)"));
    split_str(TOK_PRE_QWEN2, " ...\n\nok", b); CHECK(!strcmp(b, " ...\n\n|ok"));
    split_str(TOK_PRE_QWEN2, "end ", b); CHECK(!strcmp(b, "end| "));
    split_str(TOK_PRE_GPT2, "a   ", b); CHECK(!strcmp(b, "a|   "));
    CHECK(tok_pre_from_name("gpt2", 4) < 0 && tok_pre_from_name("gpt-2", 5) == TOK_PRE_GPT2);
    CHECK(tok_pre_from_name("deepseek-r1-qwen", 16) == TOK_PRE_QWEN2 && tok_pre_from_name("llama-bpe", 9) == TOK_PRE_LLAMA3);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* A random valid UTF-8 string mixing ASCII, Latin, CJK, emoji, marks, digits and whitespace. */
static size_t random_utf8(char *out, size_t max_cps) {
    static const uint32_t pool[][2] = {{0x20, 0x7E}, {0x20, 0x7E}, {0x0A, 0x0D}, {0xA0, 0x24F}, {0x300, 0x36F},
                                       {0x400, 0x4FF}, {0x600, 0x6FF}, {0x900, 0x97F}, {0x2000, 0x206F},
                                       {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xE000, 0xE0FF},
                                       {0xFF00, 0xFFFF}, {0x1F300, 0x1F6FF}, {0x10000, 0x10FFFF}};
    size_t n = rnd() % max_cps, o = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *r = pool[rnd() % (sizeof pool / sizeof pool[0])];
        uint32_t cp = r[0] + rnd() % (r[1] - r[0] + 1);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        o += (size_t)tok_utf8_encode(cp, out + o);
    }
    return o;
}

TEST(tok_roundtrip_random) {
    loaded g, q;
    if (load(GPT2_VOCAB, &g)) return;
    if (load(QWEN_VOCAB, &q)) { unload(&g); return; }
    char s[4096];
    int bad = 0;
    for (int i = 0; i < 400; i++) {
        size_t n = random_utf8(s, 300);
        bad += !roundtrip_ok(g.v, s, n) + !roundtrip_ok(q.v, s, n);
    }
    CHECKF(bad == 0, "%d random strings failed to round-trip", bad);
    unload(&g);
    unload(&q);
}

TEST(tok_invalid_utf8_becomes_fffd) {
    loaded q;
    if (load(QWEN_VOCAB, &q)) return;
    static const struct { const char *in, *want; } cases[] = {
        {"\xff", "\xef\xbf\xbd"},
        {"a\xc3", "a\xef\xbf\xbd"},
        {"\xe2\x82x", "\xef\xbf\xbd\xef\xbf\xbdx"},           /* truncated: one per byte */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
        {"\xc0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},             /* overlong NUL */
        {"\x80\x80ok", "\xef\xbf\xbd\xef\xbf\xbdok"},
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in), dn;
        int32_t ids[64];
        int k = tok_encode(q.v, cases[i].in, n, 0, ids, 64);
        char *d = tok_decode(q.v, ids, k, 0, &dn);
        CHECKF(!strcmp(d, cases[i].want), "case %zu", i);
        free(d);
    }
    /* random bytes: the rule holds everywhere */
    char s[512];
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        size_t n = rnd() % 200;
        for (size_t j = 0; j < n; j++) s[j] = (char)(rnd() % 4 ? 0x80 + rnd() % 0x80 : rnd() % 256);
        bad += !roundtrip_ok(q.v, s, n);
    }
    CHECK(bad == 0);
    unload(&q);
}

TEST(tok_adversarial_runs) {
    loaded q;
    if (load(QWEN_VOCAB, &q)) return;
    static const char *units[] = {"a", " ", "\n", "\xc3\xa9", "\xf0\x9f\x98\x80", "e\xcc\x81", "\xcc\x81", "1", "!",
                                  "\r\n", " \xe4\xb8\xad", "\xe0\xa4\x95\xe0\xa5\x8d"};
    size_t cap = 200000;
    char *s = malloc(cap + 16);
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        size_t n = 0, ul = strlen(units[u]);
        while (n + ul <= 60000) { memcpy(s + n, units[u], ul); n += ul; }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECKF(roundtrip_ok(q.v, s, n), "run of unit %zu", u);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        CHECKF(sec < 5.0, "unit %zu: %.2f s", u, sec);
    }
    /* combining marks on every letter, and stacked (zalgo) */
    size_t n = 0;
    for (int i = 0; i < 2000; i++) {
        s[n++] = (char)('a' + i % 26);
        for (int k = 0; k < i % 7; k++) n += (size_t)tok_utf8_encode(0x300 + (uint32_t)(i * 7 + k) % 0x70, s + n);
    }
    CHECK(roundtrip_ok(q.v, s, n));
    free(s);
    unload(&q);
}

TEST(tok_speed_100k) {
    loaded q;
    if (load(QWEN_VOCAB, &q)) return;
    size_t ni;
    if (!t_need("fixtures/tokenizer/ggml-vocab-qwen2.gguf.inp")) { unload(&q); return; }
    char *in = t_slurp_n(t_shared("fixtures/tokenizer/ggml-vocab-qwen2.gguf.inp"), &ni);
    REQUIRE(in != NULL && ni > 0);
    size_t n = 0, want = 100 * 1024;
    char *s = malloc(want + ni);
    while (n < want) { memcpy(s + n, in, ni); n += ni; }
    int32_t *ids = malloc((n + 8) * sizeof *ids);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int k = tok_encode(q.v, s, n, 0, ids, (int)n + 8);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("    encoded %zu bytes -> %d tokens in %.1f ms\n", n, k, sec * 1e3);
    CHECK(k > 0 && sec < 5.0);
    free(ids); free(s); free(in);
    unload(&q);
}

TEST(tok_special_tokens) {
    loaded q;
    if (load(QWEN_VOCAB, &q)) return;
    const tok_vocab *v = q.v;
    int32_t start = tok_find(v, "<|im_start|>", 12), end = tok_find(v, "<|im_end|>", 10);
    CHECK(start == 151644 && end == 151645);
    CHECK(tok_type(v, start) == TOK_TYPE_CONTROL);
    int32_t ids[64];
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int k = tok_encode(v, s, strlen(s), TOK_PARSE_SPECIAL, ids, 64);
    CHECK(k >= 4 && ids[0] == start && ids[k - 1] == end);
    k = tok_encode(v, s, strlen(s), 0, ids, 64); /* plain user text: no control token appears */
    for (int i = 0; i < k; i++) CHECK(ids[i] != start && ids[i] != end);
    size_t dn;
    char *d = tok_decode(v, ids, k, 0, &dn);
    CHECK(!strcmp(d, s));
    free(d);
    /* USER_DEFINED tokens are matched even in plain text, and decode verbatim */
    int32_t tc = tok_find(v, "<tool_call>", 11);
    if (tc >= 0 && tok_type(v, tc) == TOK_TYPE_USER_DEFINED) {
        k = tok_encode(v, "a<tool_call>b", 13, 0, ids, 64);
        CHECK(k == 3 && ids[1] == tc);
    }
    /* control tokens decode to nothing unless asked */
    const char *b;
    CHECK(tok_piece(v, end, 0, &b) == 0 && tok_piece(v, end, 1, &b) == 10 && !memcmp(b, "<|im_end|>", 10));
    /* the count is returned even when the buffer is too small */
    CHECK(tok_encode(v, "hello world, again", 18, 0, ids, 1) == tok_encode(v, "hello world, again", 18, 0, ids, 64));
    unload(&q);
}

TEST(tok_eog_and_bos) {
    loaded q, r;
    if (load(QWEN_VOCAB, &q)) return;
    CHECK(tok_is_eog(q.v, 151645) && tok_is_eog(q.v, 151643) && !tok_is_eog(q.v, 151644) && !tok_is_eog(q.v, 9707));
    int32_t pad = tok_find(q.v, "<|fim_pad|>", 11);
    if (pad >= 0) CHECK(tok_is_eog(q.v, pad));
    CHECK(tok_eos(q.v) == 151645 && !tok_add_bos(q.v));
    int32_t ids[16];
    CHECK(tok_encode(q.v, "hi", 2, TOK_ADD_SPECIAL, ids, 16) == 1); /* Qwen: no BOS */
    unload(&q);
    if (load(R1_VOCAB, &r)) return;
    const char *bos = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
    CHECK(tok_bos(r.v) == 151646 && tok_eos(r.v) == 151643 && tok_add_bos(r.v));
    CHECK(tok_is_eog(r.v, 151643) && !tok_is_eog(r.v, 151646));
    int k = tok_encode(r.v, "hi", 2, TOK_ADD_SPECIAL, ids, 16);
    CHECK(k == 2 && ids[0] == 151646);
    char s[64];
    snprintf(s, sizeof s, "%shi", bos); /* BOS already in the text: never a second one */
    k = tok_encode(r.v, s, strlen(s), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids, 16);
    CHECK(k == 2 && ids[0] == 151646 && ids[1] != 151646);
    unload(&r);
}

TEST(tok_stream_holds_partial_utf8) {
    tok_stream st;
    tok_stream_init(&st);
    char out[64];
    CHECK(tok_stream_feed(&st, "\xe2", 1, out) == 0);
    CHECK(tok_stream_feed(&st, "\x82", 1, out) == 0);
    size_t n = tok_stream_feed(&st, "\xac!", 2, out);
    CHECK(n == 4 && !memcmp(out, "\xe2\x82\xac!", 4));
    n = tok_stream_feed(&st, "a\xf0\x9f", 3, out);
    CHECK(n == 1 && out[0] == 'a');
    n = tok_stream_feed(&st, "\x98", 1, out);
    CHECK(n == 0);
    n = tok_stream_feed(&st, "\x80\xe4", 2, out);
    CHECK(n == 4 && !memcmp(out, "\xf0\x9f\x98\x80", 4));
    n = tok_stream_flush(&st, out); /* a character never finished: U+FFFD */
    CHECK(n == 3 && !memcmp(out, "\xef\xbf\xbd", 3));
    n = tok_stream_feed(&st, "\xe4x", 2, out); /* broken: replaced, then x */
    CHECK(n == 4 && !memcmp(out, "\xef\xbf\xbdx", 4));

    loaded q;
    if (load(QWEN_VOCAB, &q)) return;
    /* rare characters split over several byte tokens: every streamed chunk is whole UTF-8 */
    const char *s = "\xf0\x9f\xa6\x9c\xf0\x93\x80\x80 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9d\x94\xb8";
    int32_t ids[64];
    int k = tok_encode(q.v, s, strlen(s), 0, ids, 64);
    CHECK(k > 4);
    char *buf = malloc(TOK_STREAM_OUT(tok_max_piece(q.v))), acc[256];
    size_t an = 0;
    tok_stream_init(&st);
    for (int i = 0; i < k; i++) {
        size_t m = tok_stream_token(&st, q.v, ids[i], 0, buf);
        size_t sn;
        char *san = sanitize(buf, m, &sn);
        CHECK(sn == m && !memcmp(san, buf, m)); /* no partial or replaced character */
        free(san);
        memcpy(acc + an, buf, m);
        an += m;
    }
    an += tok_stream_flush(&st, acc + an);
    CHECK(an == strlen(s) && !memcmp(acc, s, an));
    free(buf);
    unload(&q);
}

/* A synthetic GGUF vocabulary, to test load errors. */
static int synth(const char *pre, const char *model, char **buf, size_t *len) {
    gguf_writer *w = gguf_writer_begin(0);
    gguf_writer_add_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_begin_arr_str(w, "tokenizer.ggml.tokens", 3);
    gguf_writer_arr_str(w, "a", 1);
    gguf_writer_arr_str(w, "b", 1);
    gguf_writer_arr_str(w, "ab", 2);
    gguf_writer_begin_arr_str(w, "tokenizer.ggml.merges", 1);
    gguf_writer_arr_str(w, "a b", 3);
    FILE *f = open_memstream(buf, len);
    char err[128];
    int rc = gguf_writer_open_stream(w, f, err, sizeof err);
    rc |= gguf_writer_close(w, err, sizeof err);
    fclose(f);
    return rc;
}

TEST(tok_load_errors) {
    static const struct { const char *pre, *model, *msg; } cases[] = {
        {"gpt2", "gpt2", "unknown tokenizer.ggml.pre 'gpt2'"},
        {"tekken", "gpt2", "unknown tokenizer.ggml.pre"},
        {NULL, "gpt2", "missing"},
        {"gpt-2", "llama", "not supported"},
        {"gpt-2", "gpt2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *buf = NULL, err[256] = "";
        size_t len = 0;
        REQUIRE(synth(cases[i].pre, cases[i].model, &buf, &len) == 0);
        gguf_file g;
        REQUIRE(gguf_parse((const uint8_t *)buf, len, &g, err, sizeof err) == 0);
        tok_vocab *v = tok_load(&g, err, sizeof err);
        if (cases[i].msg) CHECKF(!v && strstr(err, cases[i].msg), "case %zu: %s", i, err);
        else {
            CHECK(v != NULL);
            int32_t ids[8];
            CHECK(v && tok_encode(v, "ab", 2, 0, ids, 8) == 1 && ids[0] == 2);
        }
        tok_free(v);
        gguf_free(&g);
        free(buf);
    }
}

TEST(tok_cli) {
    char cmd[1024], line[4096] = "";
    FILE *bin = fopen(t_bin(), "rb");
    if (!bin) SKIP("tierkv binary not built");
    fclose(bin);
    NEED(GPT2_VOCAB);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p 'Hello world' 2>&1", t_bin(), t_shared(GPT2_VOCAB));
    FILE *p = popen(cmd, "r");
    REQUIRE(p != NULL);
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    CHECKF(!strcmp(line, " 15496 995\n"), "got '%s'", line);
    snprintf(cmd, sizeof cmd, "%s detokenize -m %s -p ' 15496 995' 2>&1", t_bin(), t_shared(GPT2_VOCAB));
    p = popen(cmd, "r");
    REQUIRE(p != NULL);
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    CHECKF(!strcmp(line, "Hello world"), "got '%s'", line);
}
