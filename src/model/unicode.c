/* unicode.c - UTF-8 codec, code point classes, and GPT-2's byte alphabet (see unicode.h).
 * Invariant: tok_ucls_ranges is sorted by start and begins at 0 (checked by a test); ASCII is
 * answered without the binary search because it is most of every real text. */
#include "model/unicode.h"

int tok_ucls(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UCLS_LETTER;
        return cp >= '0' && cp <= '9' ? UCLS_NUMBER : UCLS_OTHER;
    }
    if (cp > 0x10FFFF) return UCLS_UNASSIGNED;
    int lo = 0, hi = tok_n_ucls_ranges - 1; /* last range with start <= cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tok_ucls_ranges[mid].start <= cp) lo = mid; else hi = mid - 1;
    }
    return (int)tok_ucls_ranges[lo].cls;
}

int tok_is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

int tok_utf8_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 1;
}

int tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    int len = tok_utf8_len(b);
    if (len == 1 || (size_t)len > n) { *cp = 0xFFFD; return 1; }
    uint32_t c = b & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        c = (c << 6) | (s[i] & 0x3F);
    }
    /* overlong 3/4-byte forms, surrogates and > U+10FFFF (2-byte overlongs are excluded by the lead) */
    if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return len;
}

int tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Bytes that print as themselves keep their value; the other 68, in increasing order, take
 * U+0100.. (FORMATS.md 5.5). */
static int byte_is_direct(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_direct(b)) return b;
    /* index of b among the non-direct bytes: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1) */
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x143; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_direct(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x143) return 0xAD;
    return -1;
}
