/* jsonc.c — the JSON automaton of structured output (see jsonc.h). A schema compiles into nodes; the
 * state is a stack of frames, one per open value (an object, an array, a string, a number, a literal
 * being matched), fed byte by byte. A token is tried on a copy of the live frames; a prefilter of
 * the bytes the state can take first skips most of the vocabulary without a copy. */
#include "serve/jsonc.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

enum { K_ANY, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_INTEGER, K_BOOL, K_NULL, K_ENUM, K_UNION };
enum { JC_MAX_DEPTH = 32, JC_MAX_WS = 16, JC_MAX_PROPS = 64, JC_MAX_DIGITS = 24 };

typedef struct {
    char *key; /* the key as it stands between the quotes (JSON-escaped) */
    size_t len;
    int node;
} jc_prop;

typedef struct {
    int kind;
    jc_prop *props;  /* object */
    int n_props;
    uint64_t required;
    int extra;       /* object: keys beyond the properties (any value), for K_ANY's objects */
    int items;       /* array: the items' node */
    int min_items, max_items;
    char **lits;     /* enum: each value's JSON text */
    size_t *lit_len;
    int n_lits;
    int *alts;       /* union: the nodes of a list of types */
    int n_alts;
} jc_node;

struct jc_schema {
    jc_node *nodes;
    int n, cap;
    int any; /* a node of any value: an extra key's, an untyped array's items */
};

/* ---- compiling a schema ---- */

static int new_node(jc_schema *s, int kind) {
    if (s->n == s->cap) s->cap = s->cap ? 2 * s->cap : 16, s->nodes = tkv_xrealloc(s->nodes, (size_t)s->cap * sizeof *s->nodes);
    memset(&s->nodes[s->n], 0, sizeof s->nodes[s->n]);
    s->nodes[s->n].kind = kind;
    s->nodes[s->n].max_items = -1;
    return s->n++;
}

static int refuse(char *why, size_t n, const char *path, const char *fmt, const char *what) {
    char m[160];
    snprintf(m, sizeof m, fmt, what);
    snprintf(why, n, "%s at %s", m, path);
    return -1;
}

static const char *const IGNORED[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                      "strict", "deprecated", "readOnly", "writeOnly", NULL};
static const char *const KNOWN[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                    "maxItems", "enum", "const", NULL};

static int in(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k)) return 1;
    return 0;
}

/* a key written as it stands between the quotes of valid JSON */
static char *escaped_key(const char *k, size_t n, size_t *out_n) {
    char *o = tkv_xmalloc(6 * n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c == '"' || c == '\\') o[j++] = '\\', o[j++] = (char)c;
        else if (c < 0x20) j += (size_t)snprintf(o + j, 7, "\\u%04x", c);
        else o[j++] = (char)c;
    }
    o[j] = 0;
    *out_n = j;
    return o;
}

static int compile(jc_schema *s, const json_t *sc, const char *path, int depth, char *why, size_t wn);

static int kind_of(const char *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    static const int kinds[] = {K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_INTEGER, K_BOOL, K_NULL};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return kinds[i];
    return -1;
}

/* the node of one type within a schema (its object and array keywords apply) */
static int typed(jc_schema *s, int kind, const json_t *sc, const char *path, int depth, char *why, size_t wn) {
    int id = new_node(s, kind);
    char sub[256];
    if (kind == K_OBJECT) {
        const json_t *props = json_object_get(sc, "properties"), *req = json_object_get(sc, "required"),
                     *add = json_object_get(sc, "additionalProperties");
        if (props && !json_is_object(props)) return refuse(why, wn, path, "%s must be an object", "properties");
        s->nodes[id].extra = !props; /* {"type": "object"} alone: any keys */
        if (add && !json_is_false(add) && !json_is_null(add))
            return refuse(why, wn, path, "%s: only false is supported", "additionalProperties");
        if (json_object_size(props) > JC_MAX_PROPS) return refuse(why, wn, path, "%s: at most 64", "properties");
        const char *key;
        const json_t *val;
        int n = 0;
        jc_prop *pv = tkv_xcalloc(json_object_size(props) + 1, sizeof *pv);
        s->nodes[id].props = pv;
        json_object_foreach((json_t *)props, key, val) {
            snprintf(sub, sizeof sub, "%s.properties.%.64s", path, key);
            pv[n].key = escaped_key(key, strlen(key), &pv[n].len);
            s->nodes[id].n_props = ++n;
            int c = compile(s, val, sub, depth + 1, why, wn);
            if (c < 0) return -1;
            s->nodes[id].props[n - 1].node = c;
        }
        if (req && !json_is_array(req)) return refuse(why, wn, path, "%s must be an array", "required");
        for (size_t i = 0; i < json_array_size(req); i++) {
            const json_t *r = json_array_get(req, i);
            int k = -1;
            for (int p = 0; json_is_string(r) && p < n; p++) {
                size_t el;
                char *e = escaped_key(json_string_value(r), json_string_length(r), &el);
                if (el == s->nodes[id].props[p].len && !memcmp(e, s->nodes[id].props[p].key, el)) k = p;
                free(e);
            }
            if (k < 0) return refuse(why, wn, path, "%s names a key that is not in properties", "required");
            s->nodes[id].required |= 1ull << k;
        }
    } else if (kind == K_ARRAY) {
        const json_t *items = json_object_get(sc, "items"), *mn = json_object_get(sc, "minItems"), *mx = json_object_get(sc, "maxItems");
        snprintf(sub, sizeof sub, "%s.items", path);
        int it = items ? compile(s, items, sub, depth + 1, why, wn) : new_node(s, K_ANY);
        if (it < 0) return -1;
        s->nodes[id].items = it;
        if (mn && (!json_is_integer(mn) || json_integer_value(mn) < 0 || json_integer_value(mn) > 1000))
            return refuse(why, wn, path, "%s must be an integer 0..1000", "minItems");
        if (mx && (!json_is_integer(mx) || json_integer_value(mx) < 0 || json_integer_value(mx) > 100000))
            return refuse(why, wn, path, "%s must be an integer 0..100000", "maxItems");
        s->nodes[id].min_items = mn ? (int)json_integer_value(mn) : 0;
        s->nodes[id].max_items = mx ? (int)json_integer_value(mx) : -1;
        if (s->nodes[id].max_items >= 0 && s->nodes[id].max_items < s->nodes[id].min_items)
            return refuse(why, wn, path, "%s is below minItems", "maxItems");
    }
    return id;
}

static int compile(jc_schema *s, const json_t *sc, const char *path, int depth, char *why, size_t wn) {
    if (depth >= JC_MAX_DEPTH) return refuse(why, wn, path, "%s: nested deeper than 32", "schema");
    if (json_is_true(sc) || (json_is_object(sc) && json_object_size(sc) == 0)) return new_node(s, K_ANY);
    if (!json_is_object(sc)) return refuse(why, wn, path, "%s: a schema must be an object", "schema");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)sc, key, val) {
        if (!in(IGNORED, key) && !in(KNOWN, key)) return refuse(why, wn, path, "'%.64s' is not supported", key);
    }
    const json_t *en = json_object_get(sc, "enum"), *cn = json_object_get(sc, "const"), *ty = json_object_get(sc, "type");
    if (en || cn) {
        if (en && (!json_is_array(en) || !json_array_size(en) || json_array_size(en) > 64))
            return refuse(why, wn, path, "%s must be an array of 1..64 values", "enum");
        int id = new_node(s, K_ENUM);
        size_t n = en ? json_array_size(en) : 1;
        s->nodes[id].lits = tkv_xcalloc(n, sizeof(char *));
        s->nodes[id].lit_len = tkv_xcalloc(n, sizeof(size_t));
        for (size_t i = 0; i < n; i++) {
            const json_t *v = en ? json_array_get(en, i) : cn;
            if (json_is_object(v) || json_is_array(v)) return refuse(why, wn, path, "%s: only strings, numbers, booleans, null", en ? "enum" : "const");
            char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            s->nodes[id].lits[i] = t;
            s->nodes[id].lit_len[i] = strlen(t);
            s->nodes[id].n_lits = (int)i + 1;
        }
        return id;
    }
    if (!ty) return new_node(s, K_ANY);
    if (json_is_string(ty)) {
        int k = kind_of(json_string_value(ty));
        if (k < 0) return refuse(why, wn, path, "type '%.32s' is not a JSON type", json_string_value(ty));
        return typed(s, k, sc, path, depth, why, wn);
    }
    if (!json_is_array(ty) || !json_array_size(ty) || json_array_size(ty) > 7) return refuse(why, wn, path, "%s must be a type or a list", "type");
    int id = new_node(s, K_UNION), n = (int)json_array_size(ty);
    s->nodes[id].alts = tkv_xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) {
        const json_t *t = json_array_get(ty, (size_t)i);
        int k = json_is_string(t) ? kind_of(json_string_value(t)) : -1;
        if (k < 0) return refuse(why, wn, path, "%s: a list of JSON type names", "type");
        int a = typed(s, k, sc, path, depth, why, wn);
        if (a < 0) return -1;
        s->nodes[id].alts[i] = a;
        s->nodes[id].n_alts = i + 1;
    }
    return id;
}

void jc_free(jc_schema *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        jc_node *nd = &s->nodes[i];
        for (int p = 0; p < nd->n_props; p++) free(nd->props[p].key);
        free(nd->props);
        for (int l = 0; l < nd->n_lits; l++) free(nd->lits[l]);
        free(nd->lits);
        free(nd->lit_len);
        free(nd->alts);
    }
    free(s->nodes);
    free(s);
}

jc_schema *jc_compile(const json_t *schema, char *why, size_t why_len) {
    jc_schema *s = tkv_xcalloc(1, sizeof *s);
    int root;
    if (!schema) { /* json_object: an object of any keys and values */
        root = new_node(s, K_OBJECT);
        s->nodes[root].extra = 1;
    } else {
        root = compile(s, schema, "schema", 0, why, why_len);
    }
    if (root < 0) { jc_free(s); return NULL; }
    TKV_ASSERT(root == 0);
    s->any = new_node(s, K_ANY);
    return s;
}

/* ---- the automaton ---- */

enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_KEY, F_NUM, F_LIT };

typedef struct {
    uint8_t f;
    uint8_t sub;   /* OBJ: 0 after '{', 1 after a key, 2 after a value, 3 after ','; ARR: 0 after '[', 2 after a value,
                      3 after ','; STR/KEY: 0 plain, 1 after '\', 2..5 hex digits of \u; NUM: see num_step */
    int16_t node;
    int32_t a;     /* OBJ: the current key's property (-1: an extra key); ARR: items so far; KEY/LIT: bytes matched;
                      NUM: digits */
    uint64_t mask; /* OBJ: keys used; KEY/LIT: candidates left; NUM: 1 for an integer */
} jc_frame;

struct jc_state {
    const jc_schema *s;
    int depth;
    int ws;        /* blanks in a row */
    int done;      /* the root value is complete */
    jc_frame f[JC_MAX_DEPTH];
};

jc_state *jc_start(const jc_schema *s) {
    jc_state *st = tkv_xcalloc(1, sizeof *st);
    st->s = s;
    st->depth = 1;
    st->f[0] = (jc_frame){F_VALUE, 0, 0, 0, 0};
    return st;
}

void jc_state_free(jc_state *st) { free(st); }

static int blank(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static int digit(int c) { return c >= '0' && c <= '9'; }

static const char *const LITS[3] = {"true", "false", "null"};

/* a value of `node` begins with c: the frame it opens, or -1 */
static int open_value(jc_state *st, int node, int c) {
    const jc_node *nd = &st->s->nodes[node];
    if (nd->kind == K_UNION) {
        for (int i = 0; i < nd->n_alts; i++)
            if (open_value(st, nd->alts[i], c) == 0) return 0;
        return -1;
    }
    if (st->depth >= JC_MAX_DEPTH) return -1;
    jc_frame *f = &st->f[st->depth];
    *f = (jc_frame){0, 0, (int16_t)node, 0, 0};
    int k = nd->kind;
    if (k == K_ENUM) {
        uint64_t m = 0;
        for (int i = 0; i < nd->n_lits; i++)
            if ((unsigned char)nd->lits[i][0] == c) m |= 1ull << i;
        if (!m) return -1;
        f->f = F_LIT, f->a = 1, f->mask = m;
    } else if (c == '{' && (k == K_ANY || k == K_OBJECT)) {
        f->f = F_OBJ, f->a = -1;
    } else if (c == '[' && (k == K_ANY || k == K_ARRAY)) {
        f->f = F_ARR;
    } else if (c == '"' && (k == K_ANY || k == K_STRING)) {
        f->f = F_STR;
    } else if ((c == '-' || digit(c)) && (k == K_ANY || k == K_NUMBER || k == K_INTEGER)) {
        f->f = F_NUM, f->mask = k == K_INTEGER, f->sub = c == '-' ? 1 : c == '0' ? 2 : 3, f->a = digit(c);
    } else if ((c == 't' || c == 'f' || c == 'n') && (k == K_ANY || k == K_BOOL || k == K_NULL)) {
        uint64_t m = 0;
        for (int i = 0; i < 3; i++)
            if (LITS[i][0] == c && (k == K_ANY || (k == K_BOOL) == (i < 2))) m |= 1ull << i;
        if (!m) return -1;
        f->f = F_LIT, f->a = 1, f->mask = m | (1ull << 63); /* bit 63: the true/false/null table */
    } else {
        return -1;
    }
    st->depth++;
    return 0;
}

/* the value on top ended: pop it and move its container on */
static void value_done(jc_state *st) {
    st->depth--;
    if (st->depth == 0) { st->done = 1; return; }
    jc_frame *p = &st->f[st->depth - 1];
    if (p->f == F_VALUE) { st->depth--, st->done = st->depth == 0; return; } /* the root's placeholder */
    if (p->f == F_OBJ) p->sub = 2;
    else if (p->f == F_ARR) p->sub = 2, p->a++;
}

/* NUM: 1 after '-', 2 after a leading 0, 3 integer digits, 4 after '.', 5 fraction digits, 6 after
 * 'e', 7 after its sign, 8 exponent digits; 2, 3, 5, 8 may end. At most 24 digits in each part (a
 * part that reached them can still end, so no dead end). */
static int num_step(jc_frame *f, int c) {
    int integer = (int)f->mask;
    if (digit(c) && f->a >= JC_MAX_DIGITS) return -1;
    switch (f->sub) {
    case 1: if (!digit(c)) return -1; f->sub = c == '0' ? 2 : 3; break;
    case 2: if (c == '.' && !integer) f->sub = 4; else if ((c == 'e' || c == 'E') && !integer) f->sub = 6; else return -1; break;
    case 3: if (digit(c)) break; if (c == '.' && !integer) f->sub = 4; else if ((c == 'e' || c == 'E') && !integer) f->sub = 6; else return -1; break;
    case 4: if (!digit(c)) return -1; f->sub = 5; break;
    case 5: if (digit(c)) break; if (c == 'e' || c == 'E') f->sub = 6; else return -1; break;
    case 6: if (c == '+' || c == '-') f->sub = 7; else if (digit(c)) f->sub = 8; else return -1; break;
    case 7: if (!digit(c)) return -1; f->sub = 8; break;
    case 8: if (!digit(c)) return -1; break;
    default: return -1;
    }
    f->a = digit(c) ? f->a + 1 : 0; /* digits of this part (integer, fraction, exponent) */
    return 0;
}
static int num_can_end(const jc_frame *f) { return f->sub == 2 || f->sub == 3 || f->sub == 5 || f->sub == 8; }

/* LIT: candidates whose text continues with c; a candidate fully matched ends the value when the next
 * byte continues none (a number among the values: "1" and "12") */
static const char *lit_text(const jc_state *st, const jc_frame *f, int i, size_t *n) {
    if (f->mask >> 63) { *n = strlen(LITS[i]); return LITS[i]; }
    const jc_node *nd = &st->s->nodes[f->node];
    *n = nd->lit_len[i];
    return nd->lits[i];
}
static int lit_full(const jc_state *st, const jc_frame *f) {
    for (int i = 0; i < 63; i++) {
        size_t n;
        if ((f->mask >> i & 1) && lit_text(st, f, i, &n) && n == (size_t)f->a) return 1;
    }
    return 0;
}

/* one byte; -1 when it cannot come next */
static int step(jc_state *st, int c) {
    for (;;) {
        if (st->done || st->depth == 0) return -1;
        jc_frame *f = &st->f[st->depth - 1];
        const jc_node *nd = &st->s->nodes[f->node];
        switch (f->f) {
        case F_VALUE:
            if (blank(c)) return ++st->ws > JC_MAX_WS ? -1 : 0;
            st->ws = 0;
            return open_value(st, f->node, c);
        case F_OBJ:
            if (blank(c)) return ++st->ws > JC_MAX_WS ? -1 : 0;
            st->ws = 0;
            if (f->sub == 1) { /* after a key */
                if (c != ':') return -1;
                f->sub = 4; /* a value comes */
                return 0;
            }
            if (f->sub == 4) /* a property's value, or an extra key's (any) */
                return open_value(st, f->a >= 0 ? nd->props[f->a].node : st->s->any, c);
            if (c == '}' && f->sub != 3) {
                if ((f->mask & nd->required) != nd->required) return -1;
                value_done(st);
                return 0;
            }
            if (c == ',' && f->sub == 2) { /* only when another key can come (no dead end) */
                uint64_t all = nd->n_props >= 64 ? ~0ull : (1ull << nd->n_props) - 1;
                if ((f->mask & all) == all && !nd->extra && nd->kind != K_ANY) return -1;
                f->sub = 3;
                return 0;
            }
            if (c == '"' && (f->sub == 0 || f->sub == 3)) {
                if (st->depth >= JC_MAX_DEPTH) return -1;
                uint64_t m = 0;
                for (int p = 0; p < nd->n_props; p++)
                    if (!(f->mask >> p & 1)) m |= 1ull << p;
                if (!m && !nd->extra && nd->kind != K_ANY) return -1;
                st->f[st->depth++] = (jc_frame){F_KEY, 0, f->node, 0, m};
                return 0;
            }
            return -1;
        case F_ARR:
            if (blank(c)) return ++st->ws > JC_MAX_WS ? -1 : 0;
            st->ws = 0;
            if (c == ']' && f->sub != 3) {
                if (nd->kind == K_ARRAY && f->a < nd->min_items) return -1;
                value_done(st);
                return 0;
            }
            if (c == ',' && f->sub == 2) {
                if (nd->kind == K_ARRAY && nd->max_items >= 0 && f->a >= nd->max_items) return -1;
                f->sub = 3;
                return 0;
            }
            if (f->sub == 2) return -1;
            if (f->sub == 0 && nd->kind == K_ARRAY && nd->max_items == 0) return -1;
            return open_value(st, nd->kind == K_ARRAY ? nd->items : st->s->any, c);
        case F_STR:
        case F_KEY: {
            int is_key = f->f == F_KEY;
            const jc_frame *obj = is_key ? &st->f[st->depth - 2] : NULL;
            const jc_node *on = is_key ? &st->s->nodes[obj->node] : NULL;
            int free_key = is_key && (on->extra || on->kind == K_ANY);
            if (c < 0x20) return -1;
            if (f->sub == 1) {
                if (!strchr("\"\\/bfnrtu", c)) return -1;
                f->sub = c == 'u' ? 2 : 0;
            } else if (f->sub >= 2) {
                if (!(digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return -1;
                f->sub = f->sub == 5 ? 0 : f->sub + 1;
            } else if (c == '\\') {
                f->sub = 1;
            } else if (c == '"') {
                if (is_key) { /* the key ends: a property's (matched whole), or an extra one */
                    int hit = -1;
                    for (int p = 0; p < on->n_props; p++)
                        if ((f->mask >> p & 1) && on->props[p].len == (size_t)f->a) hit = p;
                    if (hit < 0 && !free_key) return -1;
                    st->depth--;
                    jc_frame *o = &st->f[st->depth - 1];
                    o->a = hit;
                    if (hit >= 0) o->mask |= 1ull << hit;
                    o->sub = 1;
                    return 0;
                }
                value_done(st);
                return 0;
            }
            if (is_key) { /* the candidates whose key goes on with this byte */
                uint64_t m = 0;
                for (int p = 0; p < on->n_props; p++)
                    if ((f->mask >> p & 1) && (size_t)f->a < on->props[p].len && (unsigned char)on->props[p].key[f->a] == c)
                        m |= 1ull << p;
                if (!m && !free_key) return -1;
                f->mask = m;
                f->a++;
            }
            return 0;
        }
        case F_NUM:
            if (num_step(f, c) == 0) return 0;
            if (!num_can_end(f)) return -1;
            value_done(st); /* the byte belongs to what holds the number */
            continue;
        case F_LIT: {
            uint64_t m = f->mask & (1ull << 63);
            for (int i = 0; i < 63; i++) {
                size_t n;
                const char *t = (f->mask >> i & 1) ? lit_text(st, f, i, &n) : NULL;
                if (t && (size_t)f->a < n && (unsigned char)t[f->a] == c) m |= 1ull << i;
            }
            if (m & ~(1ull << 63)) {
                f->mask = m;
                f->a++;
                return 0;
            }
            if (!lit_full(st, f)) return -1;
            value_done(st);
            continue;
        }
        }
        return -1;
    }
}

int jc_feed(jc_state *st, const char *b, size_t n) {
    jc_state save;
    size_t keep = offsetof(jc_state, f) + (size_t)st->depth * sizeof(jc_frame);
    memcpy(&save, st, keep);
    for (size_t i = 0; i < n; i++)
        if (step(st, (unsigned char)b[i])) {
            memcpy(st, &save, keep);
            return -1;
        }
    return 0;
}

int jc_complete(const jc_state *st) {
    if (st->done) return 1;
    if (st->depth != 2) return 0; /* the root's placeholder and the root value itself */
    const jc_frame *f = &st->f[1];
    return (f->f == F_NUM && num_can_end(f)) || (f->f == F_LIT && lit_full(st, f));
}

int jc_mask(const jc_state *st, const jc_vocab *v, float *row) {
    /* the first bytes the state takes (most tokens fail on theirs) */
    uint8_t first[256];
    jc_state t;
    size_t keep = offsetof(jc_state, f) + (size_t)st->depth * sizeof(jc_frame);
    for (int c = 0; c < 256; c++) {
        memcpy(&t, st, keep);
        first[c] = step(&t, c) == 0;
    }
    int complete = jc_complete(st), allowed = 0;
    for (int i = 0; i < v->n; i++) {
        int ok;
        if (v->eog[i]) ok = complete;
        else if (v->len[i] <= 0 || !first[(unsigned char)v->piece[i][0]]) ok = 0;
        else {
            memcpy(&t, st, keep);
            ok = 1;
            for (int k = 0; k < v->len[i] && ok; k++) ok = step(&t, (unsigned char)v->piece[i][k]) == 0;
        }
        if (ok) allowed++;
        else row[i] = -INFINITY;
    }
    if (!allowed) /* nothing can follow (a state past every limit): the generation ends */
        for (int i = 0; i < v->n; i++)
            if (v->eog[i]) row[i] = 0, allowed++;
    return allowed;
}
