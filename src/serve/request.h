/* request.h — an OpenAI request body (POST /v1/chat/completions or /v1/completions) as a struct.
 * Pure: bytes in, a request or an error out; no model, no I/O, so it is fuzzed
 * (fuzz/fuzz_serve_request.c). JSON is decoded by jansson, which refuses invalid UTF-8, NUL
 * characters in strings and trailing bytes, so every string here is valid UTF-8 without NULs.
 *
 * Accepted: messages (chat: role system|developer|user|assistant, content a string, null or an
 * array of {"type":"text","text"} parts; an assistant's reasoning_content), prompt (completions: a string, an array of token ids, or
 * a list of prompts: strings or arrays of token ids, each answered as n choices of its own), max_tokens / max_completion_tokens, temperature, top_p, top_k,
 * min_p, seed, stop (a string or an array), stream, stream_options.include_usage, n (1..SERVE_MAX_N),
 * logprobs (chat: a boolean with top_logprobs 0..20; completions: 0..20 alternatives),
 * chat_template_kwargs (chat: enable_thinking only).
 * Every other field is refused unless it has no effect (serve/fields.h: `user`, `logprobs:
 * false` ...); a known field of the wrong type or out of range is refused with the field's name
 * (OpenAI's error: type invalid_request_error, param, code). Not done here: the prompt's length
 * in tokens and the context (the worker checks those against the model). */
#ifndef TKV_SERVE_REQUEST_H
#define TKV_SERVE_REQUEST_H
#include <stddef.h>
#include <stdint.h>

enum serve_kind { SERVE_CHAT, SERVE_COMPLETION };
enum { SERVE_MAX_TOP_LOGPROBS = 20, SERVE_MAX_N = 64, SERVE_MAX_TOOLS = 128, SERVE_MAX_BIAS = 300 };

/* A tool call: a past one of an assistant message, or one read from the generated text. */
typedef struct {
    char *name;
    char *arguments; /* JSON text as Python's json.dumps writes it (serve_pyjson), as templates write it */
} serve_tool_call;

typedef struct {
    char *role;    /* system, user, assistant or tool (developer is read as system) */
    char *content; /* text parts joined ("" for an assistant turn of calls alone) */
    serve_tool_call *tool_calls; /* assistant: its calls (serve/tools.h) */
    int n_tool_calls;
    char *reasoning_content; /* assistant: its reasoning apart from content; NULL: none given */
} serve_msg;

typedef struct {
    size_t max_body;    /* not checked here (the HTTP layer does), kept for the record */
    int max_messages;   /* messages per request */
    int max_stops;      /* stop strings per request */
    int max_stop_len;   /* bytes per stop string */
    int max_tokens;     /* the largest max_tokens accepted */
    int max_prompt_ids; /* token ids in an array prompt */
    /* how the model's chat format writes a call (tkv_chat_call_key, tkv_chat_max_calls) */
    const char *call_key; /* the key of its arguments, which a forced call's grammar writes: "arguments"
                             (the default; Qwen's), "parameters" (Llama 3.1's) */
    int max_calls;        /* calls per assistant message (0: any); 1: parallel_tool_calls read as false */
} serve_limits;
void serve_limits_default(serve_limits *l);

/* One prompt of a completions request: text, or token ids (not yet checked against the vocabulary). */
typedef struct {
    char *text;
    int32_t *ids;
    int n_ids;
} serve_prompt;

typedef struct {
    enum serve_kind kind;
    serve_msg *msgs; /* chat */
    int n_msgs;
    char *prompt;        /* completions, as text; or */
    int32_t *prompt_ids; /* completions, as ids (not yet checked against the vocabulary) */
    int n_prompt_ids;
    serve_prompt *more;  /* completions: the prompts after the first of a list (prompt/prompt_ids hold
                            the first); answer choices are ordered by prompt, then by choice */
    int n_more;
    int max_tokens;      /* -1: not given */
    double temperature;  /* OpenAI's defaults: 1 */
    double top_p;        /* 1 */
    int top_k;           /* 0: off */
    double min_p;        /* 0: off */
    int has_seed;
    uint64_t seed;
    char **stops;
    int n_stops;
    int stream, include_usage;
    int n;               /* choices: chains sampled from the prompt (1..SERVE_MAX_N); choice i's seed is
                            seed + i when a seed is given */
    int logprobs;        /* 1: each generated token's log-probability in the answer */
    int top_logprobs;    /* 0..SERVE_MAX_TOP_LOGPROBS alternatives per token */
    int echo;            /* completions: the prompt's text before the completion's (with logprobs, every
                            prompt token's log-probability first, the first one null); streamed too */
    char **tools;        /* chat: the tool definitions as Python's json.dumps writes them (serve/tools.h) */
    char **tool_names;
    int n_tools;         /* 0 also when tool_choice is "none": no tools in the prompt, no calls read */
    int parallel_tool_calls; /* 0: only the first call is kept (also when the format takes one: max_calls) */
    double frequency_penalty, presence_penalty; /* OpenAI's: -2..2, over the tokens generated so far */
    double repetition_penalty; /* vLLM's (and llama.cpp's repeat penalty): (0, 10], 1 off, prompt and output */
    int32_t *bias_ids;   /* logit_bias: added to those tokens' logits (ids checked against the vocabulary later) */
    float *bias_vals;    /* -100..100 */
    int n_bias;
    int json_mode;       /* response_format: 0 text, 1 json_object, 2 json_schema (json_schema holds it; also
                            a required or named tool call's grammar) */
    char *json_schema;   /* the schema's JSON text, checked by jc_compile (serve/jsonc.h) */
    uint64_t cache_salt; /* cache_salt (vLLM's): a hash of the string, 0 when not given; only requests of
                            the same salt reuse each other's cached prompts and conversations */
    int no_cache;        /* cache_prompt false (llama-server's): nothing reused, the conversation not kept */
    int think_off;       /* chat_template_kwargs.enable_thinking false (Qwen3's switch; 0: thinking on) */
} serve_request;

typedef struct {
    int status;         /* HTTP status: 400, 413 ... */
    char message[256];
    const char *type;   /* "invalid_request_error" ... */
    char param[48];     /* the field ("" when none) */
    const char *code;   /* "invalid_type", "invalid_value", ... or NULL */
} serve_error;

/* 0 and *out filled (free with serve_request_free), or -1 and *e filled (out holds nothing). */
int serve_request_parse(const char *body, size_t n, enum serve_kind kind, const serve_limits *lim, serve_request *out,
                        serve_error *e);
void serve_request_free(serve_request *r);
/* A deep copy of r into *out (free with serve_request_free) for one choice of prompt p (0: the
 * first) of a request with several: out holds that prompt alone (no `more`) and, when a seed is
 * given, the seed plus seed_off (choice i of a prompt is seeded seed + i). */
void serve_request_copy(const serve_request *r, int p, uint64_t seed_off, serve_request *out);
/* Fills *e and returns -1. */
int serve_error_set(serve_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                    ...) __attribute__((format(printf, 6, 7)));

#endif
