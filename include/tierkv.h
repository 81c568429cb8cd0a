/* tierkv.h — the public API. A *model* is a loaded GGUF file: weights prepared for a backend, its
 * tokenizer and chat template; it is read-only and shared. A *session* runs sequences on a model:
 * one KV cache whose tiers (T0 fast memory, T1 host, T2 host int8, T3 evicted) are pools shared by
 * every live sequence under one T0 budget, the forward's buffers, and the statistics. A *sequence*
 * is one KV timeline inside a session, opened and closed at any time between steps.
 *
 * Errors: functions that can fail return 0 on success and a negative code with a one-line message in
 * (err, errlen): TKV_ERR for bad input (never retry as is), TKV_EFULL when the session cannot take
 * it now (all sequence slots live, or the budgets are taken by live sequences: retry after one
 * closes). Nothing exits; nothing is half done (a refused sequence holds no memory).
 * Threads: one thread at a time per session (and per model while it computes). The text functions
 * (tkv_tokenize, tkv_detokenize, tkv_detok_*, tkv_chat_*) only read the model's immutable vocabulary
 * and template, with their scratch on the caller's stack or heap: any number of threads may call them
 * at once, also while a session on the same model computes (tierkv serve tokenizes on its HTTP
 * threads). A tkv_detok state belongs to one stream and is not shared. */
#ifndef TIERKV_H
#define TIERKV_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { TKV_OK = 0, TKV_ERR = -1, TKV_EFULL = -2 };

/* ---- model ------------------------------------------------------------------------------------ */

typedef struct tkv_model tkv_model;

typedef struct {
    const char *backend; /* "cpu" (NULL) or "cuda" (a `make cuda` build) */
    int n_threads;       /* CPU threads, default 2 */
    const char *kernels; /* CPU kernels: NULL/"auto" (from cpuid), "generic", "avx2", "avx512" */
    int mmap_weights;    /* 1: map the file; 0 (default): read it into huge-page memory when possible,
                            for a backend that runs the weights from host memory (a GPU's are mapped:
                            they are read once, to be prepared into the device's memory) */
    int keep_layout;     /* 1: run the weights in the file's layouts; 0 (default): reordered at load for
                            the batched kernels (same integers, float sums in another order) */
    int device;          /* CUDA device ordinal */
    int vocab_only;      /* 1: the tokenizer and chat template only (a vocabulary file is enough; no
                            weights are read and no session can be opened) */
} tkv_model_params;

void tkv_model_params_default(tkv_model_params *p);
int tkv_model_open(const char *path, const tkv_model_params *p, tkv_model **out, char *err, size_t errlen);
/* Whether a GGUF file would load, without preparing or reading its weights: its vocabulary (when it
 * has tensors or tokenizer keys) and, with tensors, the binding of every weight to the network.
 * 0, or TKV_ERR with the reason ("the vocabulary does not load: ..." / "not a model tierkv can run: ..."). */
int tkv_model_check(const char *path, char *err, size_t errlen);
void tkv_model_close(tkv_model *m);

typedef struct {
    char arch[16];
    int n_vocab, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    uint64_t weight_bytes; /* bytes of the weights one forward token reads (of an expert FFN: its
                              n_expert_used experts) */
    uint64_t weight_macs;  /* multiply-adds of the matrix products one token makes (elements of the
                              matrices weight_bytes counts) */
    int n_expert, n_expert_used; /* an expert FFN's experts and experts per token (0: a dense FFN) */
    uint64_t expert_bytes;       /* bytes of one expert's matrices, summed over the layers */
    const char *backend;   /* "cpu" or "cuda" */
    const char *kernels;   /* what the backend runs, e.g. "avx512" */
    int weights_copied;    /* 1: the file was read into huge-page memory at load; 0: it is mapped */
} tkv_model_info;
void tkv_model_get_info(const tkv_model *m, tkv_model_info *out);

/* ---- text ------------------------------------------------------------------------------------- */

enum { TKV_TOK_ADD_SPECIAL = 1, TKV_TOK_PARSE_SPECIAL = 2 };
/* Encodes text[0..len) into up to cap ids; returns the total count (call again with more room when it
 * exceeds cap), or TKV_ERR for text over 1 GiB. Invalid UTF-8 bytes become U+FFFD. */
int tkv_tokenize(const tkv_model *m, const char *text, size_t len, int flags, int32_t *out, int cap);
/* The same into a buffer it allocates (*out, free() it): the count, or TKV_ERR (then *out is NULL). */
int tkv_tokenize_alloc(const tkv_model *m, const char *text, size_t len, int flags, int32_t **out);
/* The bytes of one token (a part of a UTF-8 character, maybe): length, or TKV_ERR for a bad id. */
int tkv_token_piece(const tkv_model *m, int32_t id, int special, const char **bytes);
int tkv_token_is_eog(const tkv_model *m, int32_t id);
/* Streaming detokenizer: valid UTF-8 out, an incomplete character held until the next token. */
typedef struct {
    unsigned char hold[4];
    int n_hold;
} tkv_detok;
void tkv_detok_init(tkv_detok *d);
size_t tkv_detok_out_size(const tkv_model *m); /* room tkv_detok_token may write */
size_t tkv_detok_token(tkv_detok *d, const tkv_model *m, int32_t id, int special, char *out);
size_t tkv_detok_flush(tkv_detok *d, char *out); /* at most 12 bytes */
/* Whole-sequence decode, malloc'd and NUL-terminated; NULL for an id out of range. */
char *tkv_detokenize(const tkv_model *m, const int32_t *ids, int n, int special, size_t *len);

/* A past tool call: the tool's name and its arguments as JSON text, as Python's json.dumps writes
 * them (", " and ": ", non-ASCII as is: what the templates' tojson writes). */
typedef struct {
    const char *name;
    const char *arguments;
} tkv_chat_call;

typedef struct {
    const char *role;    /* "system", "user", "assistant", or "tool" (a tool's result; formats with tools) */
    const char *content; /* UTF-8 (invalid bytes become U+FFFD); "" for an assistant turn of calls alone */
    const tkv_chat_call *tool_calls; /* assistant: its calls (Qwen2.5 and Qwen3 write each as {"name": NAME,
                                        "arguments": ARGS}, Llama 3.1 its one as {"name": NAME, "parameters":
                                        ARGS}); NULL: none */
    int n_tool_calls;
    const char *reasoning_content; /* assistant: its reasoning, apart from content (Qwen3 writes it back
                                      after the last user query); NULL: none given */
} tkv_chat_msg;

typedef struct tkv_chat tkv_chat;
/* TKV_CHAT_THINK_OFF: thinking off (Qwen3's enable_thinking=false: the generation prompt closes an
 * empty think block); refused for a format without the switch. */
enum { TKV_CHAT_NO_DEFAULT_SYSTEM = 1, TKV_CHAT_THINK_OFF = 2 };
/* The chat format named (chatml, deepseek-r1, llama3, llama3.1, qwen3) or, with name NULL, the one the file's
 * tokenizer.chat_template stands for; fails naming the choices. */
int tkv_chat_open(const tkv_model *m, const char *name, int flags, tkv_chat **out, char *err, size_t errlen);
void tkv_chat_close(tkv_chat *c);
const char *tkv_chat_name(const tkv_chat *c);
/* 1 when the format has a thinking switch (TKV_CHAT_THINK_OFF may be asked for): Qwen3. */
int tkv_chat_think_switch(const tkv_chat *c);
/* Renders and encodes messages (special tokens typed inside a message stay text); the malloc'd ids
 * in *ids, their count returned (TKV_ERR with a message for a bad role or empty list). */
int tkv_chat_encode(const tkv_chat *c, const tkv_chat_msg *msgs, int n, int add_generation_prompt, int32_t **ids,
                    char *err, size_t errlen);
/* The rendered text (malloc'd), as tkv_chat_encode tokenises it. */
char *tkv_chat_render(const tkv_chat *c, const tkv_chat_msg *msgs, int n, int add_generation_prompt, size_t *len);
/* 1 when the format takes tool definitions and tool calls (Qwen2.5's ChatML, read from the file's
 * template; Llama 3.1; Qwen3). */
int tkv_chat_has_tools(const tkv_chat *c);
/* The key the format writes a call's arguments under ("arguments"; Llama 3.1's "parameters"), and the
 * calls one assistant message may hold (0: any; Llama 3.1: 1). */
const char *tkv_chat_call_key(const tkv_chat *c);
int tkv_chat_max_calls(const tkv_chat *c);
/* The same as tkv_chat_encode / tkv_chat_render with n_tools tool definitions, each the JSON of
 * {"type": "function", "function": {...}} as Python's json.dumps writes it (Llama 3.1 lays it out
 * again with indent 4, as its template does); TKV_ERR (NULL) when the format has no tools, or a
 * message a format cannot say (Llama 3.1: two calls in one message; tools and no message after the
 * system one). */
int tkv_chat_encode_tools(const tkv_chat *c, const tkv_chat_msg *msgs, int n, const char *const *tools, int n_tools,
                          int add_generation_prompt, int32_t **ids, char *err, size_t errlen);
char *tkv_chat_render_tools(const tkv_chat *c, const tkv_chat_msg *msgs, int n, const char *const *tools, int n_tools,
                            int add_generation_prompt, size_t *len);
/* Who opens a think block: the model (Qwen3 with thinking on: its output begins with "<think>"), the
 * generation prompt (DeepSeek-R1's ends with "<think>\n": the output begins inside the block), or
 * none: the prompt holds it closed (Qwen3 with thinking off: everything generated is answer). */
enum { TKV_THINK_MODEL_OPENS = 0, TKV_THINK_PROMPT_OPENS = 1, TKV_THINK_PROMPT_CLOSED = 2 };
/* Reasoning markers of the format ("<think>" and "</think>" for DeepSeek-R1 and Qwen3) and, in *by,
 * a TKV_THINK_* value. Returns 0; NULL markers for a format without reasoning. */
int tkv_chat_reasoning(const tkv_chat *c, const char **open, const char **close, int *by);

/* ---- sampling --------------------------------------------------------------------------------- */

typedef struct {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* [0, 1]; 1: off */
    float min_p;          /* [0, 1]; 0: off */
    float repeat_penalty; /* > 0; 1: off */
    int repeat_last_n;    /* < 0: the whole history */
    uint64_t seed;
} tkv_sampling;
/* llama.cpp's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalty, seed 0. */
void tkv_sampling_default(tkv_sampling *p);
typedef struct tkv_sampler tkv_sampler;
/* Refuses NaN, infinite and out-of-range values with a message naming the parameter. */
int tkv_sampler_open(const tkv_sampling *p, int n_vocab, tkv_sampler **out, char *err, size_t errlen);
void tkv_sampler_close(tkv_sampler *s);
/* Next token; logits are modified in place (penalty); history = ids so far, most recent last. */
int32_t tkv_sampler_sample(tkv_sampler *s, float *logits, const int32_t *history, int n_hist);
/* The first index of the largest value (greedy decoding). */
int32_t tkv_argmax(const float *x, int n);

/* Stop strings over streamed text: text that may begin a stop string is held back. */
typedef struct tkv_stop tkv_stop;
tkv_stop *tkv_stop_open(const char *const *stops, int n_stops);
void tkv_stop_close(tkv_stop *s);
size_t tkv_stop_out_size(const tkv_stop *s, size_t n); /* room tkv_stop_feed may write for n bytes in */
/* Released text into out; returns 1 once a stop string matched (the text from it on is dropped). */
int tkv_stop_feed(tkv_stop *s, const char *text, size_t n, char *out, size_t *out_n);
size_t tkv_stop_flush(tkv_stop *s, char *out);

/* ---- KV hierarchy options --------------------------------------------------------------------- */

typedef enum {
    TKV_POLICY_FULL = 0,  /* every token in T0: the reference */
    TKV_POLICY_HIERARCHY, /* T0 by score, then T1 (exact), then T2 (int8), evict only the tail */
    TKV_POLICY_EVICT,     /* the same scores and budgets; what does not fit in T0 is evicted */
    TKV_POLICY_QUANT,     /* what does not fit in T0 goes to T2 */
    TKV_POLICY_STREAMING, /* the baselines of the literature */
    TKV_POLICY_H2O,
    TKV_POLICY_RKV,
    TKV_POLICY_SNAPKV,
    TKV_POLICY_SINK,      /* attention sinks + the recent window only */
    TKV_POLICY_COUNT
} tkv_policy;
const char *tkv_policy_name(tkv_policy p);
int tkv_policy_parse(const char *name, tkv_policy *out); /* 0, or TKV_ERR for an unknown name */

typedef struct {
    tkv_policy policy;
    /* T0 (fast memory, "HBM"): the tools' --hbm-ratio and --hbm-budget, the results files' keys
     * hbm_ratio and hbm_budget_bytes */
    double t0_ratio;           /* T0 share of each sequence's length, [0, 1]; < 0: not given */
    uint64_t t0_budget_bytes;  /* T0 bytes for all live sequences together; 0: not given */
    double t2_ratio;           /* T2 share of each sequence's length; < 0: not given */
    double evict_ratio;        /* evicted share (at most) of each sequence's length; < 0: not given */
    int delta;                 /* re-tier every delta decode steps (64) */
    int sinks;                 /* protected first tokens (4) */
    int window;                /* protected last tokens (64) */
    int staged;                /* T1 rows copied into a staging area per layer before attention */
    int stage_t2;              /* T2 rows dequantised into the staging area per layer even where the
                                  backend's attention reads them in place (the CPU's): the reference */
    int split;                 /* attention in two parts merged by log-sum-exp: T0 (and staged rows)
                                  on the backend, T1 where its rows lie (the host), so no T1 row
                                  crosses the bus; with staged, for decode steps only (prefill
                                  chunks staged) */
    int sync_transfers;        /* moves on the caller's thread (debugging) */
    int host_scores;           /* the ranked scores updated on the host even off the CPU (the attention
                                  weights come back every step: the reference for the GPU's update) */
    int f16;                   /* T0/T1 element type: 1 fp16 (default), 0 f32 */
    int t0_tokens;             /* T0 tokens per sequence (absolute, as R-KV and SnapKV budgets are
                                  given); 0: not given */
    int protect_prompt;        /* baselines: the prompt is never evicted, as our policies keep it (the
                                  method's budget is what is left of it beside the prompt); 0: as
                                  published (the method may drop prompt tokens) */
    int unpin_prompt;          /* hierarchy: the prompt stays exact (T0 or T1, never T2 or evicted) but
                                  is not pinned in T0: it competes for T0 by score like the generated
                                  tokens, so T0 can be smaller than the prompt; 0: pinned (default) */
    const char *t2_codec;      /* T2: NULL, the backend's default (tkv_t2_codec_default: q8bh on the
                                  CPU, q8h on CUDA); "q8h" (int8, a
                                  scale per token and head, the paper's),
                                  "q8b", "q8bh" (keys in blocks of 32, rotated), "q4bh" (4 bits),
                                  "q8bhc", "q4bhc" (q8bh, q4bh with the keys centred on the model's
                                  K bias first; docs/T2-CODECS.md) */
} tkv_kv_params;
void tkv_kv_params_default(tkv_kv_params *p);
/* 1 when name is a T2 codec; the names for messages ("q8h, q8b, ..."). */
int tkv_t2_codec_known(const char *name);
const char *tkv_t2_codec_names(void);
/* The T2 codec a session uses when t2_codec is NULL, on the backend named ("cpu" or NULL, "cuda");
 * tkv_plan plans with the "cuda" one (it plans a GPU's fast memory). */
const char *tkv_t2_codec_default(const char *backend);
/* 1 when these options put tokens in T2 (quant; hierarchy with a T2 share): when the codec matters. */
int tkv_kv_uses_t2(const tkv_kv_params *p);

/* ---- sessions and sequences ------------------------------------------------------------------- */

typedef struct tkv_session tkv_session;

#define TKV_BATCH_HOST 64    /* the default prefill chunk on a backend in host memory (the CPU) */
#define TKV_BATCH_DEVICE 512 /* and on a GPU, whose many-token matmuls read the weights once a chunk */

typedef struct {
    int max_seqs;     /* sequences live at once (default 16) */
    int max_ctx;      /* the longest context a sequence may ask for (default 4096) */
    int max_batch;    /* tokens per forward call, the prefill chunk, at least max_seqs (0, the default:
                         TKV_BATCH_HOST on a backend in host memory, TKV_BATCH_DEVICE on a GPU) */
    tkv_kv_params kv;
} tkv_session_params;
void tkv_session_params_default(tkv_session_params *p);
/* Validates the budgets (a T0 budget that cannot hold one sequence's protected tokens, shares that do
 * not add up) with a message saying why. Memory for the tiers grows with use. */
int tkv_session_open(tkv_model *m, const tkv_session_params *p, tkv_session **out, char *err, size_t errlen);
void tkv_session_close(tkv_session *s);

/* Opens an empty sequence that will hold at most n_ctx positions, n_prompt of them the prompt it is
 * about to be given. Admission: TKV_EFULL (with the numbers) when max_seqs sequences are live or the
 * T0 budget, net of what the live sequences reserve, cannot hold this one's protected tokens (its
 * prompt, sinks and window; its whole context for policy full); TKV_ERR when it could never fit
 * (n_ctx above max_ctx, or more than the whole budget). */
int tkv_seq_open(tkv_session *s, int n_ctx, int n_prompt, int *seq, char *err, size_t errlen);
/* Frees the sequence's slots at once (its counters go into the session's totals). */
void tkv_seq_close(tkv_session *s, int seq);
int tkv_seq_len(const tkv_session *s, int seq);
/* Positions 0..n-1 of sequence src become the prompt of the empty sequence dst, sharing the same K/V
 * rows in the pool (held once, counted once in T0). Only for policies that do not score the prompt
 * (full, hierarchy, evict, quant) and a prompt pinned in T0 (not unpin_prompt); TKV_ERR otherwise. */
int tkv_seq_share_prefix(tkv_session *s, int src, int dst, int n, char *err, size_t errlen);
int tkv_policy_shares_prefix(tkv_policy p);
/* A conversation's next turn without recomputing the last: the empty sequence dst takes over positions
 * 0..n-1 of src, which is closed (its other positions freed). No copy, nothing shared: the rows stay in
 * the tiers they lie in, with their scores; evicted ones stay evicted (the continuation sees what src's
 * last step saw). They are not dst's prompt: dst protects its own prompt (prefilled after them), its
 * sinks and its window, and brings the rows that needs back to T0 at once; rows shared with another
 * sequence (tkv_seq_share_prefix) never move and stay a pinned prompt. The same policies as
 * tkv_seq_share_prefix; TKV_ERR (nothing changed) otherwise, or when a sink or a position of the last
 * window was evicted. */
int tkv_seq_take(tkv_session *s, int src, int dst, int n, char *err, size_t errlen);
/* The sequence waits for a take-over and is not decoded until then: it holds no fast memory a live
 * sequence could use. Its rows leave T0 now for the tiers the policy ranks them into (hierarchy: T1,
 * exact, and its T2 and evicted shares as at a re-tiering) and it reserves none of a byte budget;
 * policies without T1 (full, evict, quant, the baselines) leave it as it is. */
void tkv_seq_idle(tkv_session *s, int seq);
/* An idle sequence's exact rows (T1) go to T2 (the session's int8 or 4-bit codec: half or a quarter of
 * the bytes, lossy within the codec's bounds) while it waits, for policies with a T2 (hierarchy,
 * quant). The rows moved; 0 when it is not idle or the policy has no T2. */
int tkv_seq_idle_compress(tkv_session *s, int seq);
/* Positions from..to-1 of seq rank below every other from now on (their scores kept): an earlier
 * turn's reasoning kept in a conversation is the first to leave T0 and the first evicted. For the
 * ranking policies (hierarchy, evict, quant); nothing for the others. */
void tkv_seq_set_stale(tkv_session *s, int seq, int from, int to);
/* A sequence out of memory and back (a parked conversation, a saved chat): the record of sequence
 * seq (malloc'd in *out, *len bytes) holds tokens[0..n) (the ids it holds: n is its length), the
 * salt, the model's identity (its file's header), the row formats, and every position's tier, score
 * and rows as the tiers hold them. Waits for moves in flight. The same policies as
 * tkv_seq_share_prefix; TKV_ERR otherwise. */
int tkv_seq_save(tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt, void **out, size_t *len, char *err,
                 size_t errlen);
/* The same with a note of the caller's kept beside (note_len bytes, at most 16 MiB: a chat's messages),
 * read back with tkv_record_note. */
int tkv_seq_save_note(tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt, const void *note,
                      size_t note_len, void **out, size_t *len, char *err, size_t errlen);
/* A whole record's note (pointing into bytes; NULL and 0 when it has none): 0, or TKV_ERR for a record
 * that is not intact. */
int tkv_record_note(const void *bytes, size_t len, const void **note, size_t *note_len, char *err, size_t errlen);
/* Fills the empty sequence seq (opened for at least the record's positions) from a record: checked
 * whole first (another model, shape or row format, a truncated or corrupted record: TKV_ERR naming
 * it, nothing changed). Rows that were exact wait in T1 (policies without T1: T0), lossy ones in
 * T2, evicted ones stay evicted; the sequence is then re-tiered to its budget. Logits continue as
 * they would have in the saved session. */
int tkv_seq_load(tkv_session *s, int seq, const void *bytes, size_t len, char *err, size_t errlen);
/* A record's salt and tokens (malloc'd), read from its first bytes alone (an index reads no rows):
 * 0, or TKV_ERR for a record of another model or a malformed head. tkv_record_need says how many
 * first bytes it takes (call it with what is read so far: at least 64, then the tokens' end). */
size_t tkv_record_need(const void *bytes, size_t len);
int tkv_record_peek(const tkv_model *m, const void *bytes, size_t len, uint64_t *salt, int32_t **tokens, int *n, char *err,
                    size_t errlen);
/* 1 when the policy drops a position from every (layer, kv head) row at once, 0 when per row. */
int tkv_policy_whole_token(tkv_policy p);
/* 1 when sessions with these options share prompt prefixes: the policy's rule, and a pinned prompt
 * (an unpinned prompt may leave T0, and shared rows never move). */
int tkv_kv_shares_prefix(const tkv_kv_params *p);

/* Appends n prompt tokens to seq (chunked by max_batch). logits (if not NULL) receives the last
 * token's logits, or with all_logits every token's (n x n_vocab). */
int tkv_prefill(tkv_session *s, int seq, const int32_t *tokens, int n, float *logits, int all_logits, char *err,
                size_t errlen);
/* The same with flags: TKV_PREFILL_GENERATED appends the tokens as if they had been generated (not
 * protected as a prompt, scored, tiered like a chain of thought): benchmarks and replays build long
 * reasoning contexts with it in chunks instead of one decode step per token. */
enum { TKV_PREFILL_GENERATED = 1 };
int tkv_prefill_ex(tkv_session *s, int seq, const int32_t *tokens, int n, int flags, float *logits, int all_logits,
                   char *err, size_t errlen);
/* One decode step of n sequences at once: tokens[i] appended to seqs[i] (distinct); logits
 * [n x n_vocab] receives each one's next-token logits, the same as decoding it alone. */
int tkv_decode(tkv_session *s, const int *seqs, const int32_t *tokens, int n, float *logits, char *err,
               size_t errlen);

/* ---- statistics ------------------------------------------------------------------------------- */

typedef struct {
    int64_t tokens[4];          /* tokens per tier T0..T3 (T3 = evicted) */
    int64_t bytes[4];           /* bytes per tier (T3: 0); prefix rows shared by sequences count once in
                                   the total, in each sharing sequence's own stats */
    int64_t peak_t0_bytes;      /* total: the most T0 held at once by all sequences together */
    int64_t t0_budget_bytes;    /* the budget in force (after raising to the protected tokens) */
    int64_t budget_raised;      /* times a budget was raised to hold protected tokens */
    int64_t bytes_moved_down, bytes_moved_up, bytes_moved_host, bytes_staged;
    int64_t tokens_evicted;
    double evicted_equiv;       /* positions no longer readable, averaged over (layer, kv head) rows */
    int64_t retiers, sync_demotions;
    double move_seconds, retier_seconds, fence_wait_seconds;
    double copy_stall_seconds;  /* session total: device time the GPU's compute queue stood still waiting
                                   for KV copies (timed on the device; 0 on the CPU, whose copies are
                                   synchronous). fence_wait_seconds is the host's time at those fences */
    int64_t held_bytes, peak_held_bytes, limit_bytes; /* the baselines, per row (see docs/BASELINES.md) */
    int64_t shared_tokens;      /* prefix tokens held once for several sequences */
    int64_t shared_bytes_saved; /* bytes those would take if every sequence held its own copy */
    int live_seqs;
    double t0_share_mean;       /* the share of its length a sequence held in T0, averaged over its
                                   decode steps (the T0 share actually held, beside the one asked) */
} tkv_stats;
/* seq >= 0: that live sequence since it opened; seq < 0: the session (live and closed sequences). */
int tkv_stats_get(const tkv_session *s, int seq, tkv_stats *out, char *err, size_t errlen);
/* Waits for every move in flight (so statistics are settled). */
void tkv_sync(tkv_session *s);
/* Bytes of expert matrices the forward has read since the session opened (each expert a step routes
 * any token to, once per layer; where the backend routes, once per token); 0 for a dense model. */
uint64_t tkv_expert_bytes_read(const tkv_session *s);
/* Bytes the session has read back from a backend that is not host memory since it opened (the
 * attention weights for the policy where the host updates its scores, else the scores when the host
 * ranks them; split attention's queries; logits), and in *reads (if not NULL) how many reads, each
 * a wait for the device; 0 on the CPU, whose memory the host reads in place. */
uint64_t tkv_read_back_bytes(const tkv_session *s, uint64_t *reads);
/* Bytes split attention has sent up to a backend that is not host memory since the session opened
 * (the host's partial results: o, m, l and its weights per layer, merged there); 0 on the CPU and
 * without split. */
uint64_t tkv_split_sent_bytes(const tkv_session *s);
/* Seconds the host has spent blocked until the model's backend caught up (its reads and other
 * waits for the device) since the backend opened; 0 on the CPU, whose ops run on the calling
 * thread. A decode step's time less its share of this is the host's own work: where that is most of
 * the step, the device waited for the host. */
double tkv_host_wait_seconds(const tkv_session *s);
/* A table for people (seq < 0: the session), the re-tiering log, and JSON ({"policy", "total",
 * "seqs": [...]}); the write functions return -1 when the stream reports an error. */
void tkv_stats_print(FILE *f, const tkv_session *s, int seq);
void tkv_retier_log_print(FILE *f, const tkv_session *s);
int tkv_stats_write_json(FILE *f, const tkv_session *s);
/* Bytes one token takes in tier 0..2 under these options (the model's shape). */
int64_t tkv_token_bytes(const tkv_session *s, int tier);

/* ---- capacity planning (tierkv plan): the budget rules of a session, without a model ---------- */

typedef struct {
    int n_layer, n_head, n_head_kv, head_dim;
} tkv_shape;
typedef struct {
    int64_t token_bytes[3];      /* per tier */
    int64_t t0_tokens, t1_tokens, t2_tokens, t3_tokens; /* per sequence at the full length */
    int64_t t0_bytes_total;      /* all sequences */
    int64_t stage_bytes_total;   /* all sequences: the fast memory a GPU stages T1 (--staged) and T2
                                    rows in before attention reads them (two layers of each chunk) */
    int t0_raised;               /* 1: the budget was raised to the protected tokens */
    int64_t protected_tokens;    /* per sequence */
} tkv_plan_result;
/* Where the tokens of `batch` sequences of `ctx` positions (`prompt` of them prompt) sit at the end,
 * by the same budget code a session runs; TKV_ERR with the session's own message for bad budgets. */
int tkv_plan(const tkv_shape *sh, const tkv_kv_params *kv, int batch, int ctx, int prompt, tkv_plan_result *out,
             char *err, size_t errlen);

/* ---- kernel microbenchmark (tierkv bench-ops): a backend's decode ops alone, no model --------- */

typedef struct {
    const char *backend;        /* "cpu" (NULL: "cpu") or "cuda" */
    int n_threads, device;      /* CPU threads; CUDA device ordinal */
    int n_embd, n_head, n_head_kv, n_ff; /* the model's shape */
    int head_dim;               /* K and V width of one head; 0: n_embd / n_head */
    const char *type;           /* weight type by its GGUF name: "BF16", "Q8_0", "Q4_K", ... */
    const int *depths;          /* attention depths (positions) */
    int n_depths;
    int reps;                   /* timed calls per op */
    uint64_t seed;              /* random weights, activations and KV rows */
    int n_tok;                  /* matmul: tokens per call (0 or 1: one, a decode step; more: a prefill batch) */
    int cold_mib;               /* matmul: 0, one copy of the matrix (it stays in cache where it fits);
                                   N, copies of it totalling at least N MiB (at most 256 copies: the row's
                                   `copies` says how many), called in turn, so that each call reads its
                                   weights from memory as a decode step does */
} tkv_bench_ops_params;
typedef struct {
    const char *op;             /* "matmul" or "attention" */
    const char *name;           /* matmul: "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" */
    int64_t n_in, n_out, bytes; /* matmul: the matrix and its bytes in the file's layout */
    int depth;                  /* attention: positions attended */
    int n_tok;                  /* matmul: tokens per call */
    int copies;                 /* matmul: copies of the matrix called in turn (cold_mib) */
    double us;                  /* matmul: per call; attention: per layer (one query token) */
} tkv_bench_ops_row;
/* Times each per-layer matrix of the shape (random weights of p->type, prepared by the backend) for
 * p->n_tok tokens, then one layer's attention (f16 T0 rows, one query) at each depth, calling row() for
 * each as it is measured. Wall clock around p->reps calls ended by one read of the output (which
 * waits for the backend's queue), after one untimed call. describe receives the backend's kernels.
 * TKV_ERR with a message for a backend that cannot open or a type it cannot run. */
int tkv_bench_ops(const tkv_bench_ops_params *p, void (*row)(void *ctx, const tkv_bench_ops_row *r), void *ctx,
                  char *describe, size_t describe_len, char *err, size_t errlen);

/* The int8 peak of the CPU kernels' own instructions (vpdpbusd, or vpmaddubsw + vpmaddwd), measured
 * on n_threads threads for about `seconds`: int8 operations per second (a product and its add, 2),
 * for the kernels named ("auto" or NULL: cpuid's best, "avx2", "avx512"; "generic": 0, no int8
 * instruction). *isa receives the variant's name. TKV_ERR for an unknown name or one the CPU lacks. */
int tkv_cpu_int8_peak(const char *kernels, int n_threads, double seconds, double *ops_per_s, const char **isa, char *err,
                      size_t errlen);

/* The build: git commit (with -dirty) and compiler flags. */
const char *tkv_build_commit(void);
const char *tkv_build_flags(void);

#endif
