/* pretok.c - the gpt-2 and llama3/qwen2 pre-tokenizer scans (FORMATS.md 5.4).
 * Both scanners take, at each position, the first rule that applies, exactly in the order of the
 * regex alternatives. "Beyond the fragment" counts as no class at all: that is why a lone trailing
 * space never opens a " ?[^\s\p{L}\p{N}]+" word. Unassigned code points count as "other", like
 * punctuation, as they do both in the regexes and in llama.cpp's flag table. */
#include "model/pretok.h"

#include <string.h>

#include "model/unicode.h"

int tok_pre_from_name(const char *name, size_t len) {
    static const struct { const char *name; tok_pre pre; } names[] = {
        {"gpt-2", TOK_PRE_GPT2},        {"llama-bpe", TOK_PRE_LLAMA3}, {"llama3", TOK_PRE_LLAMA3},
        {"llama-v3", TOK_PRE_LLAMA3},   {"falcon3", TOK_PRE_LLAMA3},   {"qwen2", TOK_PRE_QWEN2},
        {"deepseek-r1-qwen", TOK_PRE_QWEN2}, {"megrez", TOK_PRE_QWEN2},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) return (int)names[i].pre;
    return -1;
}

uint8_t tok_cp_flags(uint32_t cp) {
    uint8_t f = tok_is_space(cp) ? TOK_F_WS : 0;
    int c = tok_ucls(cp);
    if (c == UCLS_LETTER) f |= TOK_F_L;
    else if (c == UCLS_NUMBER) f |= TOK_F_N;
    return f;
}

static uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Length of a contraction word at i ('s 't 'm 'd 're 've 'll), 0 if none. */
static size_t contraction(const uint32_t *cps, size_t i, size_t n, int any_case) {
    if (cps[i] != '\'' || i + 1 >= n) return 0;
    uint32_t a = any_case ? lower_ascii(cps[i + 1]) : cps[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    uint32_t b = any_case ? lower_ascii(cps[i + 2]) : cps[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* "other": inside the fragment and not whitespace, letter or number */
#define IS_OTHER(j) ((j) < n && !(fl[j] & (TOK_F_L | TOK_F_N | TOK_F_WS)))
#define HAS(j, f) ((j) < n && (fl[j] & (f)))

/* Whitespace run at i: the end of the word it gives. llama3 ends after the last \r/\n of the run. */
static size_t ws_word(const uint32_t *cps, const uint8_t *fl, size_t i, size_t n, int llama3) {
    size_t j = i, last_nl = 0;
    while (HAS(j, TOK_F_WS)) {
        if (llama3 && (cps[j] == '\r' || cps[j] == '\n')) last_nl = j + 1;
        j++;
    }
    if (last_nl) return last_nl;                   /* \s*[\r\n]+ */
    if (j - i > 1 && j < n) return j - 1;          /* \s+(?!\S) */
    if (j > i) return j;                           /* \s+ */
    return i + 1;                                  /* no rule: one char */
}

static size_t gpt2_word(const uint32_t *cps, const uint8_t *fl, size_t i, size_t n) {
    size_t k = contraction(cps, i, n, 0);
    if (k) return i + k;
    size_t j = i + (cps[i] == ' '); /* after the optional space: ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` */
    if (HAS(j, TOK_F_L)) { while (HAS(j, TOK_F_L)) j++; return j; }
    if (HAS(j, TOK_F_N)) { while (HAS(j, TOK_F_N)) j++; return j; }
    if (IS_OTHER(j)) { while (IS_OTHER(j)) j++; return j; }
    return ws_word(cps, fl, i, n, 0);
}

static size_t llama3_word(const uint32_t *cps, const uint8_t *fl, size_t i, size_t n, int max_digits) {
    size_t k = contraction(cps, i, n, 1);
    if (k) return i + k;
    uint32_t c = cps[i];
    if (c != '\r' && c != '\n' && !(fl[i] & TOK_F_N) && ((fl[i] & TOK_F_L) || HAS(i + 1, TOK_F_L))) {
        size_t j = i + 1; /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        while (HAS(j, TOK_F_L)) j++;
        return j;
    }
    if (fl[i] & TOK_F_N) {
        size_t j = i + 1;
        while ((int)(j - i) < max_digits && HAS(j, TOK_F_N)) j++;
        return j;
    }
    size_t s = i + (c == ' '); /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
    if (IS_OTHER(s)) {
        size_t j = s;
        while (IS_OTHER(j)) j++;
        while (j < n && (cps[j] == '\r' || cps[j] == '\n')) j++;
        return j;
    }
    return ws_word(cps, fl, i, n, 1);
}

size_t tok_pretok_split(tok_pre pre, const uint32_t *cps, const uint8_t *fl, size_t n, uint32_t *ends) {
    size_t nw = 0;
    for (size_t i = 0; i < n;) {
        size_t e;
        if (pre == TOK_PRE_GPT2) e = gpt2_word(cps, fl, i, n);
        else e = llama3_word(cps, fl, i, n, pre == TOK_PRE_LLAMA3 ? 3 : 1);
        ends[nw++] = (uint32_t)e;
        i = e;
    }
    return nw;
}
