/* json.h — a small, bounds-checked JSON (RFC 8259) parser and writer.
 * The parser is a pure function over (bytes, len): it never reads past len, never needs a NUL, and
 * builds a read-only tree in one arena that json_free releases at once. Errors name line, column
 * and byte offset. The one JSON writer of the engine and the tools (json_out; the server speaks
 * JSON through jansson), and the parser of the eval loaders and the results files.
 *
 * Decisions a caller should know:
 *  - Strings are unescaped to UTF-8 and NUL-terminated; `len` is the true length, so a "\u0000"
 *    escape yields an embedded NUL (C-string users see the text up to it).
 *  - \uXXXX escapes: surrogate pairs are combined; an unpaired surrogate is an error unless
 *    opts.replace_invalid is set, in which case it becomes U+FFFD.
 *  - Raw bytes must be valid UTF-8 (no overlongs, no encoded surrogates, <= U+10FFFF); invalid
 *    bytes are an error, or U+FFFD each with opts.replace_invalid. A leading UTF-8 BOM is skipped.
 *  - Nesting deeper than opts.max_depth (default 128) is an error, so recursion is bounded.
 *  - Numbers follow the JSON grammar strictly; a value that overflows a double is an error.
 *  - Duplicate object keys are kept; json_get returns the last one (as Python's json does).
 *  - Nothing but whitespace may follow the root value. */
#ifndef TKV_BASE_JSON_H
#define TKV_BASE_JSON_H
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/jsontext.h"

enum json_type { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_member;

struct json_value {
    enum json_type type;
    union {
        double num;                                           /* JSON_NUMBER */
        struct { const char *s; size_t len; } str;            /* JSON_STRING: UTF-8, NUL-terminated */
        struct { const struct json_value *items; size_t n; } arr;   /* JSON_ARRAY */
        struct { const struct json_member *members; size_t n; } obj; /* JSON_OBJECT, file order */
    } u;
};

struct json_member {
    const char *key; /* UTF-8, NUL-terminated */
    size_t key_len;
    struct json_value value;
};

struct json_opts {
    int max_depth;       /* arrays+objects open at once; 0 means the default, 128 */
    int replace_invalid; /* 1: invalid UTF-8 / unpaired surrogates become U+FFFD instead of an error */
};

struct json_doc; /* owns the arena; root is valid until json_free */

/* Parses exactly one JSON value from buf[0..len). opts may be NULL. On success *out owns the tree. */
int json_parse(const char *buf, size_t len, const struct json_opts *opts, struct json_doc **out,
               char *err, size_t errlen);
const struct json_value *json_root(const struct json_doc *doc);
void json_free(struct json_doc *doc);

/* Lookups; all return NULL / 0 when v is NULL, of the wrong type, or the key is absent. */
const struct json_value *json_get(const struct json_value *obj, const char *key);
const struct json_value *json_at(const struct json_value *arr, size_t i);
const char *json_get_str(const struct json_value *obj, const char *key); /* NULL if not a string */
/* 1 and *out set if key holds a number that is an exact integer within int64 range. */
int json_get_int(const struct json_value *obj, const char *key, int64_t *out);
const char *json_type_name(enum json_type t);

/* Writer: appends to a growable buffer, managing commas. Strings are escaped as JSON requires
 * (", \, control characters); non-ASCII UTF-8 is kept as is, invalid bytes become \ufffd. */
struct json_out {
    tkv_buf b;      /* the NUL-terminated text so far (b.p, b.n bytes) */
    int depth;      /* open containers */
    unsigned char first[64]; /* per depth: 1 until the first element is written */
    int after_key;  /* a key was just written: the next value needs no comma */
};
void json_out_init(struct json_out *o);
void json_out_free(struct json_out *o);
void json_out_reset(struct json_out *o); /* empties the text, keeps the buffer */
void json_out_obj_begin(struct json_out *o);
void json_out_obj_end(struct json_out *o);
void json_out_arr_begin(struct json_out *o);
void json_out_arr_end(struct json_out *o);
void json_out_key(struct json_out *o, const char *key);
void json_out_keyn(struct json_out *o, const char *key, size_t len); /* a key of len bytes (NULs allowed) */
void json_out_str(struct json_out *o, const char *s);
void json_out_strn(struct json_out *o, const char *s, size_t len);
void json_out_num(struct json_out *o, double x); /* shortest round-trip form; NaN/inf -> null */
void json_out_fixed(struct json_out *o, double x, int places); /* places (0..17) decimals; NaN/inf -> null */
void json_out_int(struct json_out *o, int64_t x);
void json_out_bool(struct json_out *o, int b);
void json_out_null(struct json_out *o);

/* json_escape, json_add_str (the writer's string literals) and json_add_indented: base/jsontext.h. */

#endif
