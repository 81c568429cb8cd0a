/* jsontext.c — see jsontext.h. */
#include "base/jsontext.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"

size_t json_escape(char *dst, size_t cap, const char *s, size_t len) {
    const unsigned char *b = (const unsigned char *)s;
    size_t n = 0;
#define PUT(c) do { if (n + 1 < cap) dst[n] = (char)(c); n++; } while (0)
    PUT('"');
    for (size_t i = 0; i < len;) {
        unsigned char c = b[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); esc = u; }
        }
        if (esc) {
            for (const char *e = esc; *e; e++) PUT(*e);
            i++;
            continue;
        }
        if (c < 0x80) { PUT(c); i++; continue; }
        size_t k = tkv_utf8_seq(b + i, len - i);
        if (!k) {
            for (const char *e = "\\ufffd"; *e; e++) PUT(*e);
            i++;
            continue;
        }
        for (size_t j = 0; j < k; j++) PUT(b[i + j]);
        i += k;
    }
    PUT('"');
#undef PUT
    if (cap) dst[n < cap ? n : cap - 1] = 0;
    return n;
}

void json_add_str(tkv_buf *b, const char *s, size_t len) {
    size_t need = json_escape(NULL, 0, s, len);
    tkv_buf_reserve(b, need);
    json_escape(b->p + b->n, need + 1, s, len);
    b->n += need;
}

static void newline(tkv_buf *b, int indent, int depth) {
    tkv_buf_addc(b, '\n');
    for (long i = 0; i < (long)indent * depth; i++) tkv_buf_addc(b, ' ');
}

static int blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void json_add_indented(tkv_buf *b, const char *s, size_t len, int indent) {
    tkv_buf_adds(b, "");
    int depth = 0; /* containers open (a stray closer does not go below 0) */
    for (size_t i = 0; i < len;) {
        char c = s[i];
        if (blank(c)) {
            i++;
        } else if (c == '"') { /* a string, escapes and all, as it is */
            size_t j = i + 1;
            while (j < len && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
            j = j < len ? j + 1 : len;
            tkv_buf_add(b, s + i, j - i);
            i = j;
        } else if (c == '{' || c == '[') {
            size_t j = i + 1;
            while (j < len && blank(s[j])) j++;
            tkv_buf_addc(b, c);
            if (j < len && s[j] == (c == '{' ? '}' : ']')) { /* empty: {} or [] */
                tkv_buf_addc(b, s[j]);
                i = j + 1;
            } else {
                newline(b, indent, ++depth);
                i++;
            }
        } else if (c == '}' || c == ']') {
            if (depth > 0) depth--;
            newline(b, indent, depth);
            tkv_buf_addc(b, c);
            i++;
        } else if (c == ',') {
            tkv_buf_addc(b, ',');
            newline(b, indent, depth);
            i++;
        } else if (c == ':') {
            tkv_buf_adds(b, ": ");
            i++;
        } else { /* a number or a literal: up to the next structural byte or blank (c itself is neither) */
            size_t j = i;
            while (j < len && !blank(s[j]) && !memchr("{}[],:\"", s[j], 7)) j++;
            tkv_buf_add(b, s + i, j - i);
            i = j;
        }
    }
}
