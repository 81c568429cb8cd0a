/* fields.c — the table of request fields (see fields.h). */
#include "serve/fields.h"

#include <jansson.h>
#include <string.h>

enum cls { HONOURED, NO_EFFECT, NEUTRAL_ONLY };
enum kinds { CHAT = 1, COMPL = 2, BOTH = 3 };

/* The neutral values: the ones with which the output is what it would be without the field. */
static int is_null(const json_t *v) { return json_is_null(v); }
static int is_one(const json_t *v) { return json_is_null(v) || (json_is_number(v) && json_number_value(v) == 1); }
static int is_empty(const json_t *v) {
    return json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0) || (json_is_object(v) && json_object_size(v) == 0);
}
static int is_empty_str(const json_t *v) { return json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0); }
static int is_none_choice(const json_t *v) { return json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "none")); }
static int is_text_modality(const json_t *v) {
    if (json_is_null(v)) return 1;
    if (!json_is_array(v) || json_array_size(v) != 1) return 0;
    const json_t *m = json_array_get(v, 0);
    return json_is_string(m) && !strcmp(json_string_value(m), "text");
}

typedef struct {
    const char *name;
    enum kinds kinds;
    enum cls cls;
    int (*neutral)(const json_t *); /* NEUTRAL_ONLY: accepted when this holds */
    const char *why;                /* NEUTRAL_ONLY: the refusal's reason */
} field;

static const field fields[] = {
    /* honoured: request.c reads and checks each */
    {"messages", CHAT, HONOURED, NULL, NULL},
    {"prompt", COMPL, HONOURED, NULL, NULL},
    {"max_tokens", BOTH, HONOURED, NULL, NULL},
    {"max_completion_tokens", BOTH, HONOURED, NULL, NULL},
    {"temperature", BOTH, HONOURED, NULL, NULL},
    {"top_p", BOTH, HONOURED, NULL, NULL},
    {"top_k", BOTH, HONOURED, NULL, NULL},
    {"min_p", BOTH, HONOURED, NULL, NULL},
    {"seed", BOTH, HONOURED, NULL, NULL},
    {"n", BOTH, HONOURED, NULL, NULL},
    {"stop", BOTH, HONOURED, NULL, NULL},
    {"stream", BOTH, HONOURED, NULL, NULL},
    {"stream_options", BOTH, HONOURED, NULL, NULL},
    {"logprobs", BOTH, HONOURED, NULL, NULL}, /* chat: a boolean; completions: 0..20 alternatives */
    {"top_logprobs", CHAT, HONOURED, NULL, NULL},
    /* no effect on the output: one model is served; the rest are bookkeeping or latency hints */
    {"model", BOTH, NO_EFFECT, NULL, NULL},
    {"user", BOTH, NO_EFFECT, NULL, NULL},
    {"metadata", BOTH, NO_EFFECT, NULL, NULL},
    {"store", BOTH, NO_EFFECT, NULL, NULL},
    {"service_tier", BOTH, NO_EFFECT, NULL, NULL},
    {"safety_identifier", BOTH, NO_EFFECT, NULL, NULL},
    {"prompt_cache_key", BOTH, NO_EFFECT, NULL, NULL},
    {"echo", COMPL, HONOURED, NULL, NULL},
    {"frequency_penalty", BOTH, HONOURED, NULL, NULL},  /* OpenAI's, over the generated tokens */
    {"presence_penalty", BOTH, HONOURED, NULL, NULL},
    {"repetition_penalty", BOTH, HONOURED, NULL, NULL}, /* vLLM's, over prompt and generated tokens */
    {"logit_bias", BOTH, HONOURED, NULL, NULL},
    {"response_format", BOTH, HONOURED, NULL, NULL}, /* text, json_object, json_schema (request.c) */
    {"cache_salt", BOTH, HONOURED, NULL, NULL},   /* vLLM's: cache isolation (reuse only within a salt) */
    {"cache_prompt", BOTH, HONOURED, NULL, NULL}, /* llama-server's: false reuses and keeps nothing */
    /* not supported yet: accepted only with the value that changes nothing */
    {"suffix", COMPL, NEUTRAL_ONLY, is_empty_str, "a suffix (insertion) is not supported"},
    {"best_of", COMPL, NEUTRAL_ONLY, is_one, "best_of > 1 is not supported"},
    {"tools", CHAT, HONOURED, NULL, NULL},
    {"tool_choice", CHAT, HONOURED, NULL, NULL}, /* auto, none; required and named: 400 (request.c) */
    {"parallel_tool_calls", CHAT, HONOURED, NULL, NULL},
    {"chat_template_kwargs", CHAT, HONOURED, NULL, NULL}, /* enable_thinking only (request.c) */
    {"functions", CHAT, NEUTRAL_ONLY, is_empty, "function calls are not supported"},
    {"function_call", CHAT, NEUTRAL_ONLY, is_none_choice, "function calls are not supported (only \"none\")"},
    {"reasoning_effort", CHAT, NEUTRAL_ONLY, is_null, "the served models have no reasoning effort setting"},
    {"modalities", CHAT, NEUTRAL_ONLY, is_text_modality, "only [\"text\"] output is supported"},
    {"audio", CHAT, NEUTRAL_ONLY, is_null, "audio output is not supported"},
    {"prediction", CHAT, NEUTRAL_ONLY, is_null, "predicted outputs are not supported"},
    {"web_search_options", CHAT, NEUTRAL_ONLY, is_null, "web search is not supported"},
};

static const field *lookup(const char *name, enum serve_kind kind) {
    int want = kind == SERVE_CHAT ? CHAT : COMPL;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!strcmp(fields[i].name, name) && (fields[i].kinds & want)) return &fields[i];
    return NULL;
}

const char *serve_field_class(const char *name, enum serve_kind kind) {
    const field *f = lookup(name, kind);
    if (!f) return NULL;
    return f->cls == HONOURED ? "honoured" : f->cls == NO_EFFECT ? "no effect" : "refused unless neutral";
}

int serve_fields_check(const json_t *root, enum serve_kind kind, serve_error *e) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        const field *f = lookup(key, kind);
        if (!f) {
            int other = lookup(key, kind == SERVE_CHAT ? SERVE_COMPLETION : SERVE_CHAT) != NULL;
            return serve_error_set(e, 400, "invalid_request_error", key, "unsupported_parameter",
                                   "unknown field '%s'%s: this server refuses what it would not honour", key,
                                   !other ? "" : kind == SERVE_CHAT ? " (it belongs to /v1/completions)" : " (it belongs to /v1/chat/completions)");
        }
        if (f->cls == NEUTRAL_ONLY && !f->neutral(v))
            return serve_error_set(e, 400, "invalid_request_error", key, "unsupported_parameter", "'%s': %s", key, f->why);
    }
    return 0;
}
