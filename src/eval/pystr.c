/* pystr.c — Python str semantics (see pystr.h). Allocation failure aborts (tkv_xmalloc): the
 * sizes here are bounded by the text being graded. */
#include "eval/pystr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"

char *ps_ndup(const char *s, size_t n) {
    char *p = tkv_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}
char *ps_dup(const char *s) { return ps_ndup(s, strlen(s)); }

uint32_t ps_next(const char *s, size_t *i) {
    const unsigned char *b = (const unsigned char *)s + *i;
    unsigned c = b[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; k++) {
        if ((b[k] & 0xC0) != 0x80) { n = 0; break; }
        v = v << 6 | (b[k] & 0x3F);
    }
    if (n == 0 || (n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF))) {
        *i += 1;
        return 0xDC00 + c;
    }
    *i += n;
    return v;
}

size_t ps_cplen(const char *s) {
    size_t n = 0;
    for (size_t i = 0; s[i];) { ps_next(s, &i); n++; }
    return n;
}

int ps_is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's \w is str.isalnum() or '_'. Beyond ASCII this table covers the scripts that occur in
 * math answers (Latin-1/Extended letters, Greek, Cyrillic, CJK, kana, Hangul, super/subscript
 * digits, fullwidth forms); symbols such as ° × ÷ ™ ∏ and combining marks are not word chars. */
int ps_is_word(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA || (c >= 0xBC && c <= 0xBE)) return 1;
    if (c >= 0xC0 && c <= 0x24F) return c != 0xD7 && c != 0xF7;
    if (c >= 0x250 && c <= 0x2C1) return 1;
    if (c >= 0x370 && c <= 0x3FF) return c != 0x375 && c != 0x37E && c != 0x384 && c != 0x385 && c != 0x387 && c != 0x3F6;
    if (c >= 0x400 && c <= 0x52F) return !(c >= 0x482 && c <= 0x489);
    if (c == 0x2070 || c == 0x2071 || (c >= 0x2074 && c <= 0x2079) || (c >= 0x207F && c <= 0x2089)) return 1;
    if (c >= 0x2160 && c <= 0x2188) return 1;
    if ((c >= 0x3041 && c <= 0x3096) || (c >= 0x30A1 && c <= 0x30FA)) return 1;
    if (c >= 0x4E00 && c <= 0x9FFF) return 1;
    if (c >= 0xAC00 && c <= 0xD7A3) return 1;
    if ((c >= 0xFF10 && c <= 0xFF19) || (c >= 0xFF21 && c <= 0xFF3A) || (c >= 0xFF41 && c <= 0xFF5A)) return 1;
    return 0;
}

int ps_is_digit(uint32_t c) { return c >= '0' && c <= '9'; }

int ps_contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }
int ps_startswith(const char *s, const char *pre) { return strncmp(s, pre, strlen(pre)) == 0; }
int ps_endswith(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

size_t ps_count(const char *s, const char *sub) {
    size_t n = 0, m = strlen(sub);
    if (!m) return ps_cplen(s) + 1;
    for (const char *p = strstr(s, sub); p; p = strstr(p + m, sub)) n++;
    return n;
}

char *ps_replace_take(char *s, const char *from, const char *to) {
    size_t m = strlen(from);
    TKV_ASSERT(m > 0);
    const char *p = strstr(s, from);
    if (!p) return s;
    tkv_buf b = {0};
    const char *q = s;
    for (; p; p = strstr(q, from)) {
        tkv_buf_add(&b, q, (size_t)(p - q));
        tkv_buf_adds(&b, to);
        q = p + m;
    }
    tkv_buf_adds(&b, q);
    free(s);
    return tkv_buf_take(&b);
}

char *ps_strip_take(char *s) {
    size_t n = strlen(s), a = 0, e = n;
    while (a < n) {
        size_t j = a;
        if (!ps_is_space(ps_next(s, &j))) break;
        a = j;
    }
    /* Trailing: walk code points forward and remember where the last non-space ended. */
    e = a;
    for (size_t i = a; i < n;) {
        uint32_t c = ps_next(s, &i);
        if (!ps_is_space(c)) e = i;
    }
    if (a == 0 && e == n) return s;
    char *r = ps_ndup(s + a, e - a);
    free(s);
    return r;
}

char *ps_strip_chars_take(char *s, const char *chars, int which) {
    size_t n = strlen(s), a = 0, e = n;
    if (which & 1) while (a < n && strchr(chars, s[a])) a++;
    if (which & 2) while (e > a && strchr(chars, s[e - 1])) e--;
    if (a == 0 && e == n) return s;
    char *r = ps_ndup(s + a, e - a);
    free(s);
    return r;
}

char *ps_lower_take(char *s) {
    for (char *p = s; *p; p++) if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    return s;
}

char **ps_split(const char *s, const char *sep, size_t *n) {
    size_t m = strlen(sep), k = ps_count(s, sep) + 1;
    TKV_ASSERT(m > 0);
    char **parts = tkv_xmalloc(k * sizeof *parts);
    const char *q = s;
    for (size_t i = 0; i < k; i++) {
        const char *p = i + 1 < k ? strstr(q, sep) : q + strlen(q);
        parts[i] = ps_ndup(q, (size_t)(p - q));
        q = p + m;
    }
    *n = k;
    return parts;
}

void ps_free_parts(char **parts, size_t n) {
    for (size_t i = 0; i < n; i++) free(parts[i]);
    free(parts);
}

char *ps_after_last(const char *s, const char *sep) {
    size_t m = strlen(sep);
    const char *last = NULL;
    for (const char *p = strstr(s, sep); p; p = strstr(p + m, sep)) last = p;
    return ps_dup(last ? last + m : s);
}

int ps_is_canonical_int(const char *s) {
    const char *p = s;
    if (*p == '-') p++;
    if (!*p) return 0;
    if (*p == '0') return p[1] == 0 && p == s; /* "0" only; "-0" and "07" are not str(int) */
    for (; *p; p++) if (*p < '0' || *p > '9') return 0;
    return 1;
}

int ps_parse_float(const char *s, double *out) {
    char *t = ps_strip_take(ps_dup(s));
    tkv_buf b = {0};
    const char *p = t;
    int ok = 0;
    if (*p == '+' || *p == '-') tkv_buf_addc(&b, *p++);
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        tkv_buf_adds(&b, p);
        ok = 1;
    } else {
        int digits = 0, prev_digit = 0;
        for (; *p; p++) {
            if (*p >= '0' && *p <= '9') { digits++; prev_digit = 1; tkv_buf_addc(&b, *p); continue; }
            /* '_' is only allowed between two digits */
            if (*p == '_' && prev_digit && p[1] >= '0' && p[1] <= '9') { prev_digit = 0; continue; }
            break;
        }
        if (*p == '.') {
            tkv_buf_addc(&b, *p++);
            prev_digit = 0;
            for (; *p; p++) {
                if (*p >= '0' && *p <= '9') { digits++; prev_digit = 1; tkv_buf_addc(&b, *p); continue; }
                if (*p == '_' && prev_digit && p[1] >= '0' && p[1] <= '9') { prev_digit = 0; continue; }
                break;
            }
        }
        if (digits && (*p == 'e' || *p == 'E')) {
            tkv_buf_addc(&b, *p++);
            if (*p == '+' || *p == '-') tkv_buf_addc(&b, *p++);
            int ed = 0;
            prev_digit = 0;
            for (; *p; p++) {
                if (*p >= '0' && *p <= '9') { ed++; prev_digit = 1; tkv_buf_addc(&b, *p); continue; }
                if (*p == '_' && prev_digit && p[1] >= '0' && p[1] <= '9') { prev_digit = 0; continue; }
                break;
            }
            if (!ed) digits = 0;
        }
        ok = digits > 0 && *p == 0;
    }
    char *num = tkv_buf_take(&b);
    if (ok) *out = strtod(num, NULL);
    free(num);
    free(t);
    return ok;
}

void ps_float_repr(double x, char *buf, size_t cap) {
    if (isnan(x)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(x)) { snprintf(buf, cap, x < 0 ? "-inf" : "inf"); return; }
    char tmp[48];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp is d.ddde[+-]XX with prec significant digits; lay it out as repr() does:
     * scientific when exp < -4 or exp >= 16, positional otherwise, always with a '.' or 'e'. */
    char digs[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++) if (*q != '.') digs[nd++] = *q;
    digs[nd] = 0;
    while (nd > 1 && digs[nd - 1] == '0') digs[--nd] = 0;
    int e = atoi(q + 1);
    tkv_buf b = {0};
    if (neg) tkv_buf_addc(&b, '-');
    if (e < -4 || e >= 16) {
        tkv_buf_addc(&b, digs[0]);
        if (nd > 1) { tkv_buf_addc(&b, '.'); tkv_buf_adds(&b, digs + 1); }
        char ex[16];
        snprintf(ex, sizeof ex, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
        tkv_buf_adds(&b, ex);
    } else if (e < 0) {
        tkv_buf_adds(&b, "0.");
        for (int k = -1; k > e; k--) tkv_buf_addc(&b, '0');
        tkv_buf_adds(&b, digs);
    } else {
        for (int k = 0; k <= e; k++) tkv_buf_addc(&b, k < nd ? digs[k] : '0');
        tkv_buf_addc(&b, '.');
        if (nd > e + 1) tkv_buf_adds(&b, digs + e + 1);
        else tkv_buf_addc(&b, '0');
    }
    char *r = tkv_buf_take(&b);
    snprintf(buf, cap, "%s", r);
    free(r);
}
