/* tools.c — tool definitions and calls' arguments written as the templates write them, and calls read
 * back from generated text (see tools.h). */
#include "serve/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/jsontext.h"

#define BAD(e, field, ...) serve_error_set(e, 400, "invalid_request_error", field, "invalid_value", __VA_ARGS__)

/* ---- Python's json.dumps ---- */

/* repr(float): the shortest digits that read back, fixed notation for exponents -4..15 (with ".0"
 * when integral), else d.ddde+XX */
static void py_float(tkv_buf *b, double x) {
    char e[40], out[64];
    int p = 0;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, x);
        if (strtod(e, NULL) == x) break;
    }
    char *ep = strchr(e, 'e');
    int exp10 = atoi(ep + 1);
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    for (char *c = e + neg; c < ep; c++)
        if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    digits[nd] = 0;
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[k++] = '0', out[k++] = '.';
            for (int i = -1; i > exp10; i--) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) out[k++] = digits[i];
            else out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof out - k, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
    tkv_buf_adds(b, out);
}

static void py_json(tkv_buf *b, const json_t *v) {
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        tkv_buf_adds(b, "{");
        json_object_foreach((json_t *)v, key, val) { /* jansson keeps the order the keys came in */
            if (!first) tkv_buf_adds(b, ", ");
            first = 0;
            json_add_str(b, key, strlen(key)); /* Python's string writer, for valid UTF-8 (all jansson holds) */
            tkv_buf_adds(b, ": ");
            py_json(b, val);
        }
        tkv_buf_adds(b, "}");
        break;
    }
    case JSON_ARRAY:
        tkv_buf_adds(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) tkv_buf_adds(b, ", ");
            py_json(b, json_array_get(v, i));
        }
        tkv_buf_adds(b, "]");
        break;
    case JSON_STRING: json_add_str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        tkv_buf_adds(b, num);
        break;
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: tkv_buf_adds(b, "true"); break;
    case JSON_FALSE: tkv_buf_adds(b, "false"); break;
    default: tkv_buf_adds(b, "null"); break;
    }
}

char *serve_pyjson(const json_t *v) {
    tkv_buf b = {0};
    tkv_buf_adds(&b, "");
    py_json(&b, v);
    return b.p;
}

/* ---- the request ---- */

int serve_tools_parse(const json_t *tools, serve_request *r, serve_error *e) {
    if (!json_is_array(tools)) return serve_error_set(e, 400, "invalid_request_error", "tools", "invalid_type", "'tools' must be an array");
    size_t n = json_array_size(tools);
    if (n > SERVE_MAX_TOOLS) return BAD(e, "tools", "at most %d tools, got %zu", SERVE_MAX_TOOLS, n);
    r->tools = tkv_xcalloc(n + 1, sizeof *r->tools);
    r->tool_names = tkv_xcalloc(n + 1, sizeof *r->tool_names);
    for (size_t i = 0; i < n; i++) {
        char field[48];
        snprintf(field, sizeof field, "tools[%zu]", i);
        const json_t *t = json_array_get(tools, i), *ty = json_object_get(t, "type"), *f = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_object(f))
            return BAD(e, field, "'%s' must be {\"type\": \"function\", \"function\": {...}}", field);
        const json_t *name = json_object_get(f, "name"), *d = json_object_get(f, "description"),
                     *p = json_object_get(f, "parameters");
        if (!json_is_string(name) || !json_string_length(name) || strlen(json_string_value(name)) != json_string_length(name))
            return BAD(e, field, "'%s.function.name' must be a non-empty string", field);
        if (d && !json_is_string(d) && !json_is_null(d)) return BAD(e, field, "'%s.function.description' must be a string", field);
        if (p && !json_is_object(p) && !json_is_null(p)) return BAD(e, field, "'%s.function.parameters' must be an object", field);
        for (int k = 0; k < r->n_tools; k++)
            if (!strcmp(r->tool_names[k], json_string_value(name)))
                return BAD(e, field, "two tools are named '%.64s'", json_string_value(name));
        r->tools[r->n_tools] = serve_pyjson(t);
        r->tool_names[r->n_tools++] = strdup(json_string_value(name));
    }
    return 0;
}

int serve_tool_call_read(const json_t *call, const char *field, serve_tool_call *out, serve_error *e) {
    memset(out, 0, sizeof *out);
    const json_t *f = json_object_get(call, "function"), *ty = json_object_get(call, "type");
    if (!json_is_object(call) || !json_is_object(f) || (ty && !json_is_null(ty) && (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))))
        return BAD(e, field, "'%s' must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", field);
    const json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
    if (!json_is_string(name) || !json_string_length(name)) return BAD(e, field, "'%s.function.name' must be a non-empty string", field);
    if (args && !json_is_null(args) && !json_is_string(args) && !json_is_object(args))
        return BAD(e, field, "'%s.function.arguments' must be a string (of JSON)", field);
    json_t *parsed = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL) : NULL;
    const json_t *a = parsed ? parsed : args && !json_is_null(args) ? args : NULL;
    json_t *empty = a ? NULL : json_object();
    out->arguments = serve_pyjson(a ? a : empty);
    out->name = strdup(json_string_value(name));
    json_decref(parsed);
    json_decref(empty);
    return 0;
}

/* ---- the generated text ---- */

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>", PYTHON_TAG[] = "<|python_tag|>";
#define OPEN_N (sizeof OPEN - 1)
#define CLOSE_N (sizeof CLOSE - 1)
#define PYTHON_TAG_N (sizeof PYTHON_TAG - 1)

static int blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Past leading blanks, a <|python_tag|> (Llama 3.1's call opens with it when it is read as text)
 * and an opening ```json (or ```) fence, into *at; returns where the text ends before a closing
 * fence (and blanks) when there was an opening one, else n. */
static size_t fence_open(const char *text, size_t n, size_t *at) {
    size_t i = 0;
    while (i < n && blank(text[i])) i++;
    if (n - i >= PYTHON_TAG_N && !memcmp(text + i, PYTHON_TAG, PYTHON_TAG_N))
        for (i += PYTHON_TAG_N; i < n && blank(text[i]);) i++;
    int fenced = n - i >= 3 && !memcmp(text + i, "```", 3);
    if (fenced) {
        i += 3;
        if (n - i >= 4 && !memcmp(text + i, "json", 4)) i += 4;
        while (i < n && blank(text[i])) i++;
    }
    *at = i;
    if (!fenced) return n;
    size_t e = n;
    while (e > i && blank(text[e - 1])) e--;
    if (e - i >= 3 && !memcmp(text + e - 3, "```", 3)) e -= 3;
    return e;
}

/* {"name": NAME, "arguments": OBJECT or a string of one} as a call ("parameters", Llama 3.1's key,
 * when there is no "arguments"); 0, or -1 when it is none */
static int read_call(const json_t *o, char *const *names, int n_names, serve_tool_call *c) {
    const json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name)) return -1;
    if (names) {
        int known = 0;
        for (int k = 0; k < n_names && !known; k++) known = !strcmp(names[k], json_string_value(name));
        if (!known) return -1;
    }
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    const json_t *a = parsed ? parsed : args;
    if (a && !json_is_object(a)) { json_decref(parsed); return -1; }
    json_t *empty = a ? NULL : json_object();
    c->name = strdup(json_string_value(name));
    c->arguments = serve_pyjson(a ? a : empty);
    json_decref(parsed);
    json_decref(empty);
    return 0;
}

static void push(serve_tool_calls *out, const serve_tool_call *c) {
    out->v = tkv_xrealloc(out->v, (size_t)(out->n + 1) * sizeof *out->v);
    out->v[out->n++] = *c;
}

int serve_tools_extract(const char *text, size_t n, char *const *names, int n_names, int parallel, serve_tool_calls *out) {
    memset(out, 0, sizeof *out);
    const char *open = memmem(text, n, OPEN, OPEN_N);
    int ok = 1;
    if (open) { /* tagged calls: every block must read as one */
        out->content_len = (size_t)(open - text);
        for (const char *p = open; p && ok;) {
            const char *s = p + OPEN_N, *end = text + n, *close = memmem(s, (size_t)(end - s), CLOSE, CLOSE_N);
            const char *e = close ? close : end; /* a last block cut by the length cap has no close */
            json_t *o = json_loadb(s, (size_t)(e - s), 0, NULL);
            serve_tool_call c;
            ok = o && read_call(o, NULL, 0, &c) == 0;
            json_decref(o);
            if (ok) push(out, &c);
            p = close ? memmem(close + CLOSE_N, (size_t)(end - close - CLOSE_N), OPEN, OPEN_N) : NULL;
        }
    } else { /* bare objects naming declared tools, and nothing else (in a ```json fence or not) */
        size_t at = 0, end = fence_open(text, n, &at);
        ok = at < end && text[at] == '{';
        n = end;
        while (ok && at < n) {
            json_error_t je;
            json_t *o = json_loadb(text + at, n - at, JSON_DISABLE_EOF_CHECK, &je);
            serve_tool_call c;
            ok = o && read_call(o, names, n_names, &c) == 0;
            json_decref(o);
            if (!ok) break;
            push(out, &c);
            at += je.position;
            while (at < n && blank(text[at])) at++;
        }
        out->content_len = 0;
    }
    if (!ok || !out->n) {
        serve_tool_calls_free(out);
        return 0;
    }
    while (out->content_len > 0 && blank(text[out->content_len - 1])) out->content_len--;
    if (!parallel)
        while (out->n > 1) out->n--, free(out->v[out->n].name), free(out->v[out->n].arguments);
    return out->n;
}

void serve_tool_calls_free(serve_tool_calls *c) {
    for (int i = 0; i < c->n; i++) free(c->v[i].name), free(c->v[i].arguments);
    free(c->v);
    memset(c, 0, sizeof *c);
}

size_t serve_tools_visible(const char *text, size_t n) {
    size_t at = 0;
    while (at < n && blank(text[at])) at++;
    /* blank so far, an object, a fence or a <|python_tag|> (or the start of one) may turn out to hold calls */
    if (at == n || text[at] == '{' || !memcmp(text + at, "```", n - at < 3 ? n - at : 3) ||
        !memcmp(text + at, PYTHON_TAG, n - at < PYTHON_TAG_N ? n - at : PYTHON_TAG_N))
        return 0;
    const char *open = memmem(text, n, OPEN, OPEN_N);
    size_t v = open ? (size_t)(open - text) : n;
    if (!open) /* a part of "<tool_call>" at the end may become one */
        for (size_t k = OPEN_N - 1; k > 0; k--)
            if (k <= n && !memcmp(text + n - k, OPEN, k)) { v = n - k; break; }
    while (v > 0 && blank(text[v - 1])) v--;
    return v;
}
