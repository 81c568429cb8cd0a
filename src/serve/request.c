/* request.c — OpenAI request bodies to serve_request (see request.h). JSON by jansson: well kept,
 * packaged by Debian, and its decoder validates UTF-8 and refuses NUL characters, so this file
 * never handles raw bytes itself. Every known field is checked for type and range here, once. */
#include "serve/request.h"
#include "serve/jsonc.h"
#include "serve/tools.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/version.h"
#include "serve/fields.h"

void serve_limits_default(serve_limits *l) {
    l->max_body = 1 << 20;
    l->max_messages = 256;
    l->max_stops = 16;
    l->max_stop_len = 256;
    l->max_tokens = 4096;
    l->max_prompt_ids = 1 << 20;
    l->call_key = "arguments";
    l->max_calls = 0;
}

int serve_error_set(serve_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                    ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD_TYPE(e, field, what) \
    serve_error_set(e, 400, "invalid_request_error", field, "invalid_type", "'%s' must be %s", field, what)
#define BAD_VALUE(e, field, ...) serve_error_set(e, 400, "invalid_request_error", field, "invalid_value", __VA_ARGS__)

static char *dup_n(const char *s, size_t n) {
    char *p = tkv_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static char *dup_str(const json_t *v) { return dup_n(json_string_value(v), json_string_length(v)); }

/* A number field: absent or null keeps *out. */
static int get_number(const json_t *root, const char *key, double lo, double hi, double *out, serve_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD_TYPE(e, key, "a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi) return BAD_VALUE(e, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_int(const json_t *root, const char *key, long long lo, long long hi, long long *out, int *given,
                   serve_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD_TYPE(e, key, "an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD_VALUE(e, key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
    *out = x;
    if (given) *given = 1;
    return 0;
}

static int get_bool(const json_t *root, const char *key, int *out, serve_error *e) {
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD_TYPE(e, key, "a boolean");
    *out = json_is_true(v);
    return 0;
}

/* content: a string, null (an assistant's only), or an array of {"type":"text","text":...} parts
 * (joined by newlines). */
static int get_content(const json_t *c, const char *field, char **out, serve_error *e) {
    if (!c || json_is_null(c)) { *out = dup_n("", 0); return 0; }
    if (json_is_string(c)) { *out = dup_str(c); return 0; }
    if (!json_is_array(c)) return BAD_TYPE(e, field, "a string or an array of text parts");
    size_t total = 0, n = json_array_size(c);
    for (size_t i = 0; i < n; i++) {
        const json_t *part = json_array_get(c, i), *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx))
            return serve_error_set(e, 400, "invalid_request_error", field, "invalid_value",
                                   "'%s' part %zu must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)",
                                   field, i);
        total += json_string_length(tx) + 1;
    }
    char *p = tkv_xmalloc(total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *tx = json_object_get(json_array_get(c, i), "text");
        if (i) p[k++] = '\n';
        memcpy(p + k, json_string_value(tx), json_string_length(tx));
        k += json_string_length(tx);
    }
    p[k] = 0;
    *out = p;
    return 0;
}

static int get_messages(const json_t *root, const serve_limits *lim, serve_request *r, serve_error *e) {
    const json_t *m = json_object_get(root, "messages");
    if (!m || json_is_null(m))
        return serve_error_set(e, 400, "invalid_request_error", "messages", "missing_required_parameter",
                               "'messages' is required");
    if (!json_is_array(m)) return BAD_TYPE(e, "messages", "an array");
    size_t n = json_array_size(m);
    if (n == 0) return BAD_VALUE(e, "messages", "'messages' must hold at least one message");
    if (n > (size_t)lim->max_messages) return BAD_VALUE(e, "messages", "at most %d messages, got %zu", lim->max_messages, n);
    r->msgs = tkv_xcalloc(n, sizeof *r->msgs);
    for (size_t i = 0; i < n; i++) {
        char field[64];
        const json_t *msg = json_array_get(m, i);
        snprintf(field, sizeof field, "messages[%zu]", i);
        if (!json_is_object(msg)) return BAD_TYPE(e, field, "an object");
        const json_t *role = json_object_get(msg, "role");
        snprintf(field, sizeof field, "messages[%zu].role", i);
        if (!json_is_string(role)) return BAD_TYPE(e, field, "a string");
        const char *given = json_string_value(role), *rs = given;
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return BAD_VALUE(e, field, "'%s' must be system, developer, user, assistant or tool, got '%.32s'", field, rs);
        snprintf(field, sizeof field, "messages[%zu].content", i);
        /* OpenAI's API: only an assistant message may leave content out or null (it then carries tool
         * calls, or is an empty turn); a user, system or tool message without content is a mistake */
        const json_t *cv = json_object_get(msg, "content");
        if ((!cv || json_is_null(cv)) && strcmp(rs, "assistant"))
            return serve_error_set(e, 400, "invalid_request_error", field, "missing_required_parameter",
                                   "messages[%zu]: a %s message needs content (a string or an array of text parts), got %s",
                                   i, given, cv ? "null" : "none");
        char *content = NULL;
        if (get_content(cv, field, &content, e)) return -1;
        serve_msg *sm = &r->msgs[r->n_msgs++];
        sm->role = dup_n(rs, strlen(rs));
        sm->content = content;
        /* the reasoning of an earlier answer, apart from its content (as this server answers it):
         * Qwen3's template writes it back after the last user query, other formats drop it */
        const json_t *rc = json_object_get(msg, "reasoning_content");
        snprintf(field, sizeof field, "messages[%zu].reasoning_content", i);
        if (rc && !json_is_null(rc)) {
            if (strcmp(rs, "assistant")) return BAD_VALUE(e, field, "only an assistant message carries reasoning_content");
            if (!json_is_string(rc)) return BAD_TYPE(e, field, "a string");
            sm->reasoning_content = dup_str(rc);
        }
        const json_t *tc = json_object_get(msg, "tool_calls");
        snprintf(field, sizeof field, "messages[%zu].tool_calls", i);
        if (tc && !json_is_null(tc)) {
            if (strcmp(rs, "assistant")) return BAD_VALUE(e, field, "only an assistant message carries tool_calls");
            if (!json_is_array(tc)) return BAD_TYPE(e, field, "an array");
            size_t nc = json_array_size(tc);
            if (nc > SERVE_MAX_TOOLS) return BAD_VALUE(e, field, "at most %d calls, got %zu", SERVE_MAX_TOOLS, nc);
            sm->tool_calls = tkv_xcalloc(nc + 1, sizeof *sm->tool_calls);
            for (size_t k = 0; k < nc; k++) {
                char cf[64];
                snprintf(cf, sizeof cf, "messages[%zu].tool_calls[%zu]", i, k);
                if (serve_tool_call_read(json_array_get(tc, k), cf, &sm->tool_calls[sm->n_tool_calls], e)) return -1;
                sm->n_tool_calls++;
            }
        }
    }
    return 0;
}

/* chat_template_kwargs: {"enable_thinking": true | false} (Qwen3's switch: false closes the think
 * block in the prompt; whether the format has it is the worker's to check); null, {} and [] change
 * nothing; any other key is refused by name. */
static int get_template_kwargs(const json_t *root, serve_request *r, serve_error *e) {
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (!kw || json_is_null(kw) || (json_is_array(kw) && json_array_size(kw) == 0)) return 0;
    if (!json_is_object(kw)) return BAD_TYPE(e, "chat_template_kwargs", "an object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)kw, key, v) {
        if (strcmp(key, "enable_thinking")) {
            char param[96];
            snprintf(param, sizeof param, "chat_template_kwargs.%s", key);
            return serve_error_set(e, 400, "invalid_request_error", param, "unsupported_parameter",
                                   "chat_template_kwargs: '%.64s' is not supported (only enable_thinking)", key);
        }
        if (!json_is_boolean(v)) return BAD_TYPE(e, "chat_template_kwargs.enable_thinking", "a boolean");
        r->think_off = json_is_false(v);
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]}, at most SERVE_MAX_BIAS entries (OpenAI's limits) */
static int get_bias(const json_t *root, serve_request *r, serve_error *e) {
    const json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb)) return BAD_TYPE(e, "logit_bias", "an object of token ids to biases");
    size_t n = json_object_size(lb);
    if (n > SERVE_MAX_BIAS) return BAD_VALUE(e, "logit_bias", "at most %d tokens, got %zu", SERVE_MAX_BIAS, n);
    r->bias_ids = tkv_xcalloc(n + 1, sizeof *r->bias_ids);
    r->bias_vals = tkv_xcalloc(n + 1, sizeof *r->bias_vals);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)lb, key, v) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX || (key[0] == '0' && key[1]))
            return BAD_VALUE(e, "logit_bias", "logit_bias keys are token ids (decimal), got '%.32s'", key);
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || fabs(json_number_value(v)) > 100)
            return BAD_VALUE(e, "logit_bias", "logit_bias of token %ld must be a number in [-100, 100]", id);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_vals[r->n_bias++] = (float)json_number_value(v);
    }
    return 0;
}

/* response_format: text, json_object, or json_schema {"name", "schema", "strict"} whose schema
 * jsonc.h can hold (what it cannot is refused by name) */
static int get_format(const json_t *root, serve_request *r, serve_error *e) {
    const json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    const json_t *ty = json_object_get(rf, "type");
    if (!json_is_object(rf) || !json_is_string(ty))
        return BAD_VALUE(e, "response_format", "'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    const char *t = json_string_value(ty);
    if (!strcmp(t, "text")) return 0;
    if (r->n_tools) /* read after the tools (get_tools): a forced call has its own grammar already */
        return BAD_VALUE(e, "response_format", "response_format with tools is not supported (one constraint at a time)");
    if (!strcmp(t, "json_object")) { r->json_mode = 1; return 0; }
    if (strcmp(t, "json_schema")) return BAD_VALUE(e, "response_format", "response_format type '%.32s' is not text, json_object or json_schema", t);
    const json_t *js = json_object_get(rf, "json_schema"), *sc = json_object_get(js, "schema"), *st = json_object_get(js, "strict");
    if (!json_is_object(js) || !json_is_object(sc))
        return BAD_VALUE(e, "response_format", "json_schema must be {\"name\": ..., \"schema\": {...}}");
    if (st && !json_is_null(st) && !json_is_boolean(st)) return BAD_VALUE(e, "response_format", "json_schema.strict must be a boolean");
    char why[200];
    jc_schema *c = jc_compile(sc, why, sizeof why);
    if (!c)
        return serve_error_set(e, 400, "invalid_request_error", "response_format", "unsupported_value",
                               "json_schema: %s (structured output supports type, properties, required, "
                               "additionalProperties false, items, minItems, maxItems, enum, const)", why);
    jc_free(c);
    r->json_mode = 2;
    r->json_schema = json_dumps(sc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    return 0;
}

/* The grammar a forced call follows: {"name": one of names, KEY: an object} (KEY the format's:
 * "arguments", or Llama 3.1's "parameters"), the arguments following params (one tool's parameters,
 * or NULL) when the grammar can hold them, else any object. */
static char *forced_call_schema(const json_t *params, char *const *names, int n, const char *key) {
    json_t *sc = json_object(), *props = json_object(), *name = json_object(), *en = json_array();
    for (int k = 0; k < n; k++) json_array_append_new(en, json_string(names[k]));
    json_object_set_new(name, "enum", en);
    char why[8];
    jc_schema *c = json_is_object(params) ? jc_compile(params, why, sizeof why) : NULL;
    json_t *args = c ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    jc_free(c);
    json_object_set_new(props, "name", name);
    json_object_set_new(props, key, args);
    json_object_set_new(sc, "type", json_string("object"));
    json_object_set_new(sc, "properties", props);
    json_object_set_new(sc, "required", json_pack("[s,s]", "name", key));
    char *t = json_dumps(sc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(sc);
    return t;
}

/* tools, tool_choice ("auto", "none", "required", or {"type": "function", "function": {"name"}}: a
 * call forced by the grammar of forced_call_schema) and parallel_tool_calls (false, also when the
 * format takes one call per message) */
static int get_tools(const json_t *root, const serve_limits *lim, serve_request *r, serve_error *e) {
    r->parallel_tool_calls = 1;
    const json_t *ptc = json_object_get(root, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc)) return BAD_TYPE(e, "parallel_tool_calls", "a boolean");
        r->parallel_tool_calls = json_is_true(ptc);
    }
    if (lim->max_calls == 1) r->parallel_tool_calls = 0;
    const json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    int none = 0, required = 0;
    const char *named = NULL;
    if (tc && !json_is_null(tc)) {
        const json_t *fn = json_object_get(json_object_get(tc, "function"), "name"), *ty = json_object_get(tc, "type");
        if (json_is_string(tc) && !strcmp(json_string_value(tc), "none")) none = 1;
        else if (json_is_string(tc) && !strcmp(json_string_value(tc), "required")) required = 1;
        else if (json_is_object(tc) && json_is_string(ty) && !strcmp(json_string_value(ty), "function") && json_is_string(fn))
            named = json_string_value(fn);
        else if (!(json_is_string(tc) && !strcmp(json_string_value(tc), "auto")))
            return BAD_VALUE(e, "tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or "
                                               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!tools || json_is_null(tools)) {
        if (required || named) return BAD_VALUE(e, "tool_choice", "tool_choice asks for a call but no tools are given");
        return 0;
    }
    if (serve_tools_parse(tools, r, e)) return -1;
    if (none) { /* no tools in the prompt, none read from the answer */
        for (int k = 0; k < r->n_tools; k++) free(r->tools[k]), free(r->tool_names[k]);
        r->n_tools = 0;
    } else if (named || required) { /* the call's grammar is the answer's: structured output's */
        int k = 0;
        while (named && k < r->n_tools && strcmp(r->tool_names[k], named)) k++;
        if (named && k == r->n_tools) return BAD_VALUE(e, "tool_choice", "tool_choice names '%.64s', which is not in tools", named);
        int n = named ? 1 : r->n_tools;
        const json_t *params = n == 1 ? json_object_get(json_object_get(json_array_get(tools, (size_t)k), "function"), "parameters") : NULL;
        r->json_mode = 2;
        r->json_schema = forced_call_schema(params, &r->tool_names[k], n, lim->call_key ? lim->call_key : "arguments");
    }
    return 0;
}

#define PROMPT_TYPES "a string, an array of token ids, or a list of strings or of token id arrays"

/* An array of token ids into *ids / *n_out (at most lim->max_prompt_ids). */
static int get_ids(const json_t *p, const serve_limits *lim, int32_t **ids, int *n_out, serve_error *e) {
    size_t n = json_array_size(p);
    if (n == 0) return BAD_VALUE(e, "prompt", "a prompt must not be an empty array");
    if (n > (size_t)lim->max_prompt_ids) return BAD_VALUE(e, "prompt", "at most %d token ids, got %zu", lim->max_prompt_ids, n);
    *ids = tkv_xmalloc(n * sizeof(int32_t));
    *n_out = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(p, i);
        if (!json_is_integer(v)) return BAD_TYPE(e, "prompt", PROMPT_TYPES);
        long long id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX) return BAD_VALUE(e, "prompt", "token id %lld at %zu is out of range", id, i);
        (*ids)[i] = (int32_t)id;
    }
    return 0;
}

/* One element of a prompt list: a string or an array of ids. */
static int get_one_prompt(const json_t *v, const serve_limits *lim, serve_prompt *out, serve_error *e) {
    if (json_is_string(v)) { out->text = dup_str(v); return 0; }
    if (json_is_array(v)) return get_ids(v, lim, &out->ids, &out->n_ids, e);
    return BAD_TYPE(e, "prompt", PROMPT_TYPES);
}

static int get_prompt(const json_t *root, const serve_limits *lim, serve_request *r, serve_error *e) {
    const json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p))
        return serve_error_set(e, 400, "invalid_request_error", "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_string(p)) { r->prompt = dup_str(p); return 0; }
    if (!json_is_array(p)) return BAD_TYPE(e, "prompt", PROMPT_TYPES);
    size_t n = json_array_size(p);
    if (n == 0) return BAD_VALUE(e, "prompt", "'prompt' must not be an empty array");
    const json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return get_ids(p, lim, &r->prompt_ids, &r->n_prompt_ids, e); /* one prompt of ids */
    /* a list of prompts */
    if (n > SERVE_MAX_N) return BAD_VALUE(e, "prompt", "at most %d prompts in a list, got %zu", SERVE_MAX_N, n);
    serve_prompt one = {0};
    int rc = get_one_prompt(first, lim, &one, e);
    r->prompt = one.text, r->prompt_ids = one.ids, r->n_prompt_ids = one.n_ids; /* freed with r on failure */
    if (rc) return -1;
    if (n > 1) r->more = tkv_xcalloc(n - 1, sizeof *r->more);
    for (size_t i = 1; i < n; i++) {
        r->n_more++; /* counted first: a failure leaves it to be freed */
        if (get_one_prompt(json_array_get(p, i), lim, &r->more[i - 1], e)) return -1;
    }
    return 0;
}

static int add_stop(serve_request *r, const json_t *s, const serve_limits *lim, serve_error *e) {
    if (!json_is_string(s)) return BAD_TYPE(e, "stop", "a string or an array of strings");
    size_t n = json_string_length(s);
    if (n == 0) return BAD_VALUE(e, "stop", "'stop' strings must not be empty");
    if (n > (size_t)lim->max_stop_len) return BAD_VALUE(e, "stop", "'stop' strings hold at most %d bytes", lim->max_stop_len);
    r->stops[r->n_stops++] = dup_str(s);
    return 0;
}

static int get_stop(const json_t *root, const serve_limits *lim, serve_request *r, serve_error *e) {
    const json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return 0;
    if (json_is_string(s)) {
        r->stops = tkv_xcalloc(1, sizeof *r->stops);
        return add_stop(r, s, lim, e);
    }
    if (!json_is_array(s)) return BAD_TYPE(e, "stop", "a string or an array of strings");
    size_t n = json_array_size(s);
    if (n > (size_t)lim->max_stops) return BAD_VALUE(e, "stop", "at most %d stop strings, got %zu", lim->max_stops, n);
    r->stops = tkv_xcalloc(n ? n : 1, sizeof *r->stops);
    for (size_t i = 0; i < n; i++)
        if (add_stop(r, json_array_get(s, i), lim, e)) return -1;
    return 0;
}

static int parse_root(const json_t *root, enum serve_kind kind, const serve_limits *lim, serve_request *r, serve_error *e) {
    if (!json_is_object(root)) return serve_error_set(e, 400, "invalid_request_error", "", "invalid_type", "the body must be a JSON object");
    if (serve_fields_check(root, kind, e)) return -1;
    if (kind == SERVE_CHAT ? get_messages(root, lim, r, e) || get_tools(root, lim, r, e) || get_template_kwargs(root, r, e)
                           : get_prompt(root, lim, r, e))
        return -1;
    if (get_format(root, r, e)) return -1;
    long long v = -1, n = 1;
    int given = 0;
    /* max_completion_tokens is the newer name; either may be given, the newer wins */
    if (get_int(root, "max_tokens", 1, lim->max_tokens, &v, &given, e)) return -1;
    if (get_int(root, "max_completion_tokens", 1, lim->max_tokens, &v, &given, e)) return -1;
    r->max_tokens = given ? (int)v : -1;
    r->repetition_penalty = 1;
    if (get_number(root, "frequency_penalty", -2, 2, &r->frequency_penalty, e) ||
        get_number(root, "presence_penalty", -2, 2, &r->presence_penalty, e) ||
        get_number(root, "repetition_penalty", 1e-3, 10, &r->repetition_penalty, e) || get_bias(root, r, e))
        return -1;
    if (get_number(root, "temperature", 0, 2, &r->temperature, e)) return -1;
    if (get_number(root, "top_p", 0, 1, &r->top_p, e)) return -1;
    if (get_number(root, "min_p", 0, 1, &r->min_p, e)) return -1;
    v = 0;
    if (get_int(root, "top_k", 0, 1 << 30, &v, NULL, e)) return -1;
    r->top_k = (int)v;
    long long seed = 0;
    if (get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, e)) return -1;
    r->seed = (uint64_t)seed;
    if (get_int(root, "n", 1, SERVE_MAX_N, &n, NULL, e)) return -1;
    r->n = (int)n;
    if ((r->n_more + 1) * n > SERVE_MAX_N)
        return BAD_VALUE(e, "n", "%d prompts x n %lld is over %d choices per request", r->n_more + 1, n, SERVE_MAX_N);
    if (get_stop(root, lim, r, e) || get_bool(root, "stream", &r->stream, e)) return -1;
    /* log-probabilities: chat, logprobs true and top_logprobs 0..20; completions, logprobs 0..20
     * alternatives (null or absent: none) */
    r->top_logprobs = 0;
    if (kind == SERVE_CHAT) {
        if (get_bool(root, "logprobs", &r->logprobs, e)) return -1;
        v = 0;
        int has_top = 0;
        if (get_int(root, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &v, &has_top, e)) return -1;
        if (has_top && v > 0 && !r->logprobs)
            return BAD_VALUE(e, "top_logprobs", "top_logprobs needs \"logprobs\": true");
        r->top_logprobs = (int)v;
    } else {
        const json_t *lp = json_object_get(root, "logprobs");
        if (json_is_boolean(lp)) { /* some clients send a boolean here too */
            r->logprobs = json_is_true(lp);
        } else {
            v = 0;
            if (get_int(root, "logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &v, &r->logprobs, e)) return -1;
            r->top_logprobs = (int)v;
        }
    }
    if (kind == SERVE_COMPLETION) {
        if (get_bool(root, "echo", &r->echo, e)) return -1;
    }
    const json_t *cs = json_object_get(root, "cache_salt");
    if (cs && !json_is_null(cs)) {
        if (!json_is_string(cs)) return BAD_TYPE(e, "cache_salt", "a string");
        size_t len = json_string_length(cs);
        if (len == 0 || len > 256) return BAD_VALUE(e, "cache_salt", "a salt of 1..256 bytes, got %zu", len);
        uint64_t h = tkv_fnv1a64(json_string_value(cs), len);
        r->cache_salt = h ? h : 1; /* never 0: the unsalted value */
    }
    int cache_prompt = 1;
    if (get_bool(root, "cache_prompt", &cache_prompt, e)) return -1;
    r->no_cache = !cache_prompt;
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD_TYPE(e, "stream_options", "an object");
        const json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu)) return BAD_TYPE(e, "stream_options.include_usage", "a boolean");
        r->include_usage = json_is_true(iu);
    }
    return 0;
}

int serve_request_parse(const char *body, size_t n, enum serve_kind kind, const serve_limits *lim, serve_request *out,
                        serve_error *e) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->temperature = 1.0;
    out->top_p = 1.0;
    out->max_tokens = -1;
    json_error_t jerr;
    /* JSON_REJECT_DUPLICATES: one value per field, so nothing is silently dropped */
    json_t *root = json_loadb(body, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return serve_error_set(e, 400, "invalid_request_error", "", "invalid_json", "the body is not valid JSON: %s (line %d, column %d)",
                               jerr.text, jerr.line, jerr.column);
    int rc = parse_root(root, kind, lim, out, e);
    json_decref(root);
    if (rc) serve_request_free(out);
    return rc;
}

static char *dup_or_null(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    return memcpy(tkv_xmalloc(n), s, n);
}

static char **dup_strs(char *const *v, int n) {
    char **o = tkv_xcalloc((size_t)n + 1, sizeof *o);
    for (int i = 0; i < n; i++) o[i] = dup_or_null(v[i]);
    return o;
}

static serve_tool_call *dup_calls(const serve_tool_call *v, int n) {
    serve_tool_call *o = tkv_xcalloc((size_t)n + 1, sizeof *o);
    for (int i = 0; i < n; i++) o[i] = (serve_tool_call){dup_or_null(v[i].name), dup_or_null(v[i].arguments)};
    return o;
}

void serve_request_copy(const serve_request *r, int p, uint64_t seed_off, serve_request *out) {
    *out = *r;
    out->msgs = r->n_msgs ? tkv_xmalloc((size_t)r->n_msgs * sizeof *out->msgs) : NULL;
    for (int i = 0; i < r->n_msgs; i++)
        out->msgs[i] = (serve_msg){dup_or_null(r->msgs[i].role), dup_or_null(r->msgs[i].content),
                                   r->msgs[i].tool_calls ? dup_calls(r->msgs[i].tool_calls, r->msgs[i].n_tool_calls) : NULL,
                                   r->msgs[i].n_tool_calls, dup_or_null(r->msgs[i].reasoning_content)};
    out->tools = r->tools ? dup_strs(r->tools, r->n_tools) : NULL;
    out->tool_names = r->tool_names ? dup_strs(r->tool_names, r->n_tools) : NULL;
    out->json_schema = dup_or_null(r->json_schema);
    out->bias_ids = r->n_bias ? tkv_xmalloc((size_t)r->n_bias * sizeof *out->bias_ids) : NULL;
    out->bias_vals = r->n_bias ? tkv_xmalloc((size_t)r->n_bias * sizeof *out->bias_vals) : NULL;
    if (r->n_bias) memcpy(out->bias_ids, r->bias_ids, (size_t)r->n_bias * sizeof *out->bias_ids);
    if (r->n_bias) memcpy(out->bias_vals, r->bias_vals, (size_t)r->n_bias * sizeof *out->bias_vals);
    out->stops = r->n_stops ? tkv_xmalloc((size_t)r->n_stops * sizeof *out->stops) : NULL;
    for (int i = 0; i < r->n_stops; i++) out->stops[i] = dup_or_null(r->stops[i]);
    serve_prompt src = {r->prompt, r->prompt_ids, r->n_prompt_ids};
    if (p > 0) src = r->more[p - 1];
    out->prompt = dup_or_null(src.text);
    out->prompt_ids = NULL;
    out->n_prompt_ids = src.n_ids;
    if (src.ids) {
        out->prompt_ids = tkv_xmalloc((size_t)(src.n_ids ? src.n_ids : 1) * sizeof *out->prompt_ids);
        memcpy(out->prompt_ids, src.ids, (size_t)src.n_ids * sizeof *out->prompt_ids);
    }
    out->more = NULL;
    out->n_more = 0;
    if (r->has_seed) out->seed = r->seed + seed_off;
}

static void free_strs(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

void serve_request_free(serve_request *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role), free(r->msgs[i].content), free(r->msgs[i].reasoning_content);
        for (int k = 0; k < r->msgs[i].n_tool_calls; k++) free(r->msgs[i].tool_calls[k].name), free(r->msgs[i].tool_calls[k].arguments);
        free(r->msgs[i].tool_calls);
    }
    free(r->msgs);
    free_strs(r->tools, r->n_tools);
    free_strs(r->tool_names, r->n_tools);
    free(r->json_schema);
    free(r->bias_ids);
    free(r->bias_vals);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_more; i++) free(r->more[i].text), free(r->more[i].ids);
    free(r->more);
    memset(r, 0, sizeof *r);
}
