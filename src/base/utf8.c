/* utf8.c — see utf8.h. */
#include "base/utf8.h"

size_t tkv_utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!k || c > 0xF4 || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F))) return 0; /* overlong, surrogates */
    if (k == 4 && ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))) return 0;
    return k;
}

size_t tkv_utf8_repair(const char *p, size_t n, tkv_buf *out, size_t *bad) {
    const unsigned char *u = (const unsigned char *)p;
    size_t chars = 0, replaced = 0;
    for (size_t i = 0; i < n; chars++) {
        size_t k = u[i] ? tkv_utf8_seq(u + i, n - i) : 0;
        if (out) tkv_buf_add(out, k ? p + i : "\xEF\xBF\xBD", k ? k : 3);
        replaced += !k;
        i += k ? k : 1;
    }
    if (bad) *bad = replaced;
    return chars;
}
