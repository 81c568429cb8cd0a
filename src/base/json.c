/* json.c — the JSON parser and writer (see json.h for the contract).
 * Parsing is recursive descent with the depth bounded by opts.max_depth. Children of an open
 * array/object are collected on one shared stack and copied into the arena when it closes, so a
 * document costs one arena plus two stacks, all freed together. Every read checks pos < len. */
#include "base/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
};

struct json_doc {
    struct chunk *chunks;
    struct json_value root;
};

struct parser {
    const unsigned char *b;
    size_t len, pos;
    int max_depth, replace;
    struct json_doc *doc;
    struct json_value *vstack; /* pending array items */
    size_t vn, vcap;
    struct json_member *mstack; /* pending object members */
    size_t mn, mcap;
    char *sbuf; /* unescape scratch */
    size_t scap;
    char *err;
    size_t errlen;
};

static void *arena_alloc(struct json_doc *d, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    struct chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = tkv_xmalloc(sizeof *c + cap);
        c->next = d->chunks;
        c->used = 0;
        c->cap = cap;
        d->chunks = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static int fail(struct parser *p, const char *msg) {
    size_t line = 1, col = 1, end = p->pos < p->len ? p->pos : p->len;
    for (size_t i = 0; i < end; i++) {
        if (p->b[i] == '\n') { line++; col = 1; } else col++;
    }
    return tkv_errf(p->err, p->errlen, "json: %s at line %zu col %zu (byte %zu)", msg, line, col, p->pos);
}

static void skip_ws(struct parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->b[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int lit(struct parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->b + p->pos, word, n) != 0) return 0;
    p->pos += n;
    return 1;
}

/* Decodes one UTF-8 sequence at b[i..len); returns its length (0 if invalid) and the code point. */
static size_t utf8_decode(const unsigned char *b, size_t i, size_t len, uint32_t *cp) {
    unsigned char c = b[i];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { n = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (len - i < n) return 0;
    for (size_t k = 1; k < n; k++) {
        if ((b[i + k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (b[i + k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return n;
}

static size_t utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex4(struct parser *p, uint32_t *out) {
    if (p->len - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = p->b[p->pos + k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(p, "bad hex digit in \\u escape");
        v = v << 4 | (uint32_t)d;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* Parses a string at p->pos (which holds '"'); the result lives in the arena. */
static int parse_string(struct parser *p, const char **out, size_t *out_len) {
    p->pos++; /* opening quote */
    /* Find the raw span first so the scratch buffer is sized once: the unescaped text is never
     * longer than 3x the raw bytes (an invalid byte can become a 3-byte U+FFFD). */
    size_t start = p->pos, i = start;
    while (i < p->len && p->b[i] != '"') i += p->b[i] == '\\' ? 2 : 1;
    if (i >= p->len) { p->pos = p->len; return fail(p, "unterminated string"); }
    size_t need = 3 * (i - start) + 1;
    if (need > p->scap) {
        free(p->sbuf);
        p->scap = need;
        p->sbuf = tkv_xmalloc(need);
    }
    char *o = p->sbuf;
    size_t n = 0;
    for (;;) {
        if (p->pos >= p->len) return fail(p, "unterminated string");
        unsigned char c = p->b[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) return fail(p, "control character in string");
        if (c == '\\') {
            if (p->len - p->pos < 2) { p->pos = p->len; return fail(p, "unterminated string"); }
            unsigned char e = p->b[p->pos + 1];
            p->pos += 2;
            switch (e) {
            case '"': o[n++] = '"'; break;
            case '\\': o[n++] = '\\'; break;
            case '/': o[n++] = '/'; break;
            case 'b': o[n++] = '\b'; break;
            case 'f': o[n++] = '\f'; break;
            case 'n': o[n++] = '\n'; break;
            case 'r': o[n++] = '\r'; break;
            case 't': o[n++] = '\t'; break;
            case 'u': {
                uint32_t cp;
                if (hex4(p, &cp)) return -1;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo = 0;
                    if (p->len - p->pos >= 6 && p->b[p->pos] == '\\' && p->b[p->pos + 1] == 'u') {
                        size_t save = p->pos;
                        p->pos += 2;
                        if (hex4(p, &lo)) return -1;
                        if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else { p->pos = save; lo = 0; }
                    }
                    if (!lo) {
                        if (!p->replace) return fail(p, "unpaired high surrogate in \\u escape");
                        cp = 0xFFFD;
                    }
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    if (!p->replace) return fail(p, "unpaired low surrogate in \\u escape");
                    cp = 0xFFFD;
                }
                n += utf8_encode(cp, o + n);
                break;
            }
            default: p->pos -= 1; return fail(p, "bad escape in string");
            }
            continue;
        }
        if (c < 0x80) { o[n++] = (char)c; p->pos++; continue; }
        uint32_t cp;
        size_t k = utf8_decode(p->b, p->pos, p->len, &cp);
        if (!k) {
            if (!p->replace) return fail(p, "invalid UTF-8 in string");
            n += utf8_encode(0xFFFD, o + n);
            p->pos++;
            continue;
        }
        memcpy(o + n, p->b + p->pos, k);
        n += k;
        p->pos += k;
    }
    TKV_ASSERT(n < p->scap);
    char *s = arena_alloc(p->doc, n + 1);
    memcpy(s, o, n);
    s[n] = 0;
    *out = s;
    *out_len = n;
    return 0;
}

static int parse_number(struct parser *p, double *out) {
    size_t s = p->pos, i = s;
    if (i < p->len && p->b[i] == '-') i++;
    if (i >= p->len) { p->pos = i; return fail(p, "truncated number"); }
    if (p->b[i] == '0') i++;
    else if (p->b[i] >= '1' && p->b[i] <= '9') while (i < p->len && p->b[i] >= '0' && p->b[i] <= '9') i++;
    else { p->pos = i; return fail(p, "bad number"); }
    if (i < p->len && p->b[i] == '.') {
        i++;
        if (i >= p->len || p->b[i] < '0' || p->b[i] > '9') { p->pos = i; return fail(p, "digit expected after '.'"); }
        while (i < p->len && p->b[i] >= '0' && p->b[i] <= '9') i++;
    }
    if (i < p->len && (p->b[i] == 'e' || p->b[i] == 'E')) {
        i++;
        if (i < p->len && (p->b[i] == '+' || p->b[i] == '-')) i++;
        if (i >= p->len || p->b[i] < '0' || p->b[i] > '9') { p->pos = i; return fail(p, "digit expected in exponent"); }
        while (i < p->len && p->b[i] >= '0' && p->b[i] <= '9') i++;
    }
    char tmp[64];
    char *t = i - s < sizeof tmp ? tmp : tkv_xmalloc(i - s + 1);
    memcpy(t, p->b + s, i - s);
    t[i - s] = 0;
    double v = strtod(t, NULL);
    if (t != tmp) free(t);
    if (isinf(v)) return fail(p, "number out of range");
    *out = v;
    p->pos = i;
    return 0;
}

static int parse_value(struct parser *p, struct json_value *v, int depth);

static int parse_array(struct parser *p, struct json_value *v, int depth) {
    p->pos++; /* '[' */
    size_t base = p->vn;
    skip_ws(p);
    if (p->pos < p->len && p->b[p->pos] == ']') { p->pos++; goto done; }
    for (;;) {
        struct json_value item;
        if (parse_value(p, &item, depth)) return -1;
        if (p->vn == p->vcap) {
            p->vcap = p->vcap ? 2 * p->vcap : 64;
            p->vstack = realloc(p->vstack, p->vcap * sizeof *p->vstack);
            TKV_ASSERT(p->vstack);
        }
        p->vstack[p->vn++] = item;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, "unterminated array");
        if (p->b[p->pos] == ',') { p->pos++; continue; }
        if (p->b[p->pos] == ']') { p->pos++; break; }
        return fail(p, "expected ',' or ']' in array");
    }
done:;
    size_t n = p->vn - base;
    struct json_value *items = arena_alloc(p->doc, n * sizeof *items);
    if (n) memcpy(items, p->vstack + base, n * sizeof *items);
    p->vn = base;
    v->type = JSON_ARRAY;
    v->u.arr.items = items;
    v->u.arr.n = n;
    return 0;
}

static int parse_object(struct parser *p, struct json_value *v, int depth) {
    p->pos++; /* '{' */
    size_t base = p->mn;
    skip_ws(p);
    if (p->pos < p->len && p->b[p->pos] == '}') { p->pos++; goto done; }
    for (;;) {
        struct json_member m;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, "unterminated object");
        if (p->b[p->pos] != '"') return fail(p, "expected string key in object");
        if (parse_string(p, &m.key, &m.key_len)) return -1;
        skip_ws(p);
        if (p->pos >= p->len || p->b[p->pos] != ':') return fail(p, "expected ':' after object key");
        p->pos++;
        if (parse_value(p, &m.value, depth)) return -1;
        if (p->mn == p->mcap) {
            p->mcap = p->mcap ? 2 * p->mcap : 32;
            p->mstack = realloc(p->mstack, p->mcap * sizeof *p->mstack);
            TKV_ASSERT(p->mstack);
        }
        p->mstack[p->mn++] = m;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, "unterminated object");
        if (p->b[p->pos] == ',') { p->pos++; continue; }
        if (p->b[p->pos] == '}') { p->pos++; break; }
        return fail(p, "expected ',' or '}' in object");
    }
done:;
    size_t n = p->mn - base;
    struct json_member *ms = arena_alloc(p->doc, n * sizeof *ms);
    if (n) memcpy(ms, p->mstack + base, n * sizeof *ms);
    p->mn = base;
    v->type = JSON_OBJECT;
    v->u.obj.members = ms;
    v->u.obj.n = n;
    return 0;
}

static int parse_value(struct parser *p, struct json_value *v, int depth) {
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end of input, value expected");
    unsigned char c = p->b[p->pos];
    switch (c) {
    case '{':
    case '[':
        if (depth >= p->max_depth) return fail(p, "nesting too deep");
        return c == '{' ? parse_object(p, v, depth + 1) : parse_array(p, v, depth + 1);
    case '"':
        v->type = JSON_STRING;
        return parse_string(p, &v->u.str.s, &v->u.str.len);
    case 't':
        if (!lit(p, "true")) return fail(p, "bad literal");
        v->type = JSON_TRUE;
        return 0;
    case 'f':
        if (!lit(p, "false")) return fail(p, "bad literal");
        v->type = JSON_FALSE;
        return 0;
    case 'n':
        if (!lit(p, "null")) return fail(p, "bad literal");
        v->type = JSON_NULL;
        return 0;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            v->type = JSON_NUMBER;
            return parse_number(p, &v->u.num);
        }
        return fail(p, "unexpected character, value expected");
    }
}

int json_parse(const char *buf, size_t len, const struct json_opts *opts, struct json_doc **out,
               char *err, size_t errlen) {
    *out = NULL;
    struct parser p = {0};
    p.b = (const unsigned char *)buf;
    p.len = buf ? len : 0;
    p.max_depth = opts && opts->max_depth > 0 ? opts->max_depth : 128;
    p.replace = opts ? opts->replace_invalid : 0;
    p.err = err;
    p.errlen = errlen;
    p.doc = tkv_xcalloc(1, sizeof *p.doc);
    if (p.len >= 3 && memcmp(p.b, "\xEF\xBB\xBF", 3) == 0) p.pos = 3;
    int rc = parse_value(&p, &p.doc->root, 0);
    if (!rc) {
        skip_ws(&p);
        if (p.pos != p.len) rc = fail(&p, "trailing characters after the value");
    }
    free(p.vstack);
    free(p.mstack);
    free(p.sbuf);
    if (rc) {
        json_free(p.doc);
        return -1;
    }
    *out = p.doc;
    return 0;
}

const struct json_value *json_root(const struct json_doc *doc) { return doc ? &doc->root : NULL; }

void json_free(struct json_doc *doc) {
    if (!doc) return;
    for (struct chunk *c = doc->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(doc);
}

const struct json_value *json_get(const struct json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->u.obj.n; i-- > 0;) {
        const struct json_member *m = &obj->u.obj.members[i];
        if (m->key_len == kl && memcmp(m->key, key, kl) == 0) return &m->value;
    }
    return NULL;
}

const struct json_value *json_at(const struct json_value *arr, size_t i) {
    if (!arr || arr->type != JSON_ARRAY || i >= arr->u.arr.n) return NULL;
    return &arr->u.arr.items[i];
}

const char *json_get_str(const struct json_value *obj, const char *key) {
    const struct json_value *v = json_get(obj, key);
    return v && v->type == JSON_STRING ? v->u.str.s : NULL;
}

int json_get_int(const struct json_value *obj, const char *key, int64_t *out) {
    const struct json_value *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER) return 0;
    double d = v->u.num;
    if (d != floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0) return 0;
    *out = (int64_t)d;
    return 1;
}

const char *json_type_name(enum json_type t) {
    static const char *names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* ---- writer ---- */

static void out_raw(struct json_out *o, const char *s, size_t n) { tkv_buf_add(&o->b, s, n); }

static void out_sep(struct json_out *o) {
    if (o->after_key) { o->after_key = 0; return; }
    if (o->depth > 0) {
        if (!o->first[o->depth]) out_raw(o, ",", 1);
        o->first[o->depth] = 0;
    }
}

void json_out_init(struct json_out *o) { memset(o, 0, sizeof *o); tkv_buf_add(&o->b, "", 0); }
void json_out_free(struct json_out *o) { tkv_buf_free(&o->b); memset(o, 0, sizeof *o); }
void json_out_reset(struct json_out *o) {
    o->b.n = 0; o->depth = 0; o->after_key = 0;
    if (o->b.p) o->b.p[0] = 0;
}

static void open_(struct json_out *o, char c) {
    out_sep(o);
    out_raw(o, &c, 1);
    TKV_ASSERT(o->depth + 1 < (int)sizeof o->first);
    o->first[++o->depth] = 1;
}
static void close_(struct json_out *o, char c) {
    TKV_ASSERT(o->depth > 0 && !o->after_key);
    o->depth--;
    out_raw(o, &c, 1);
}
void json_out_obj_begin(struct json_out *o) { open_(o, '{'); }
void json_out_obj_end(struct json_out *o) { close_(o, '}'); }
void json_out_arr_begin(struct json_out *o) { open_(o, '['); }
void json_out_arr_end(struct json_out *o) { close_(o, ']'); }

void json_out_strn(struct json_out *o, const char *s, size_t len) {
    out_sep(o);
    json_add_str(&o->b, s, len);
}
void json_out_str(struct json_out *o, const char *s) {
    if (!s) { json_out_null(o); return; }
    json_out_strn(o, s, strlen(s));
}
void json_out_keyn(struct json_out *o, const char *key, size_t len) {
    json_out_strn(o, key, len);
    out_raw(o, ":", 1);
    o->after_key = 1;
}
void json_out_key(struct json_out *o, const char *key) { json_out_keyn(o, key, strlen(key)); }
void json_out_num(struct json_out *o, double x) {
    if (!isfinite(x)) { json_out_null(o); return; }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, x);
        if (strtod(tmp, NULL) == x) break;
    }
    out_sep(o);
    out_raw(o, tmp, strlen(tmp));
}
void json_out_fixed(struct json_out *o, double x, int places) {
    if (!isfinite(x)) { json_out_null(o); return; }
    char tmp[352]; /* %.*f of DBL_MAX is 309 digits, places <= 17 */
    snprintf(tmp, sizeof tmp, "%.*f", places < 0 ? 0 : places > 17 ? 17 : places, x);
    out_sep(o);
    out_raw(o, tmp, strlen(tmp));
}
void json_out_int(struct json_out *o, int64_t x) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)x);
    out_sep(o);
    out_raw(o, tmp, strlen(tmp));
}
void json_out_bool(struct json_out *o, int b) { out_sep(o); out_raw(o, b ? "true" : "false", b ? 4 : 5); }
void json_out_null(struct json_out *o) { out_sep(o); out_raw(o, "null", 4); }
