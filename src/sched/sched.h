/* sched.h — continuous batching over include/tierkv.h: jobs (a prompt's token ids and how to
 * sample) wait in a FIFO, are admitted into sequences of one session as it takes them, and every
 * admitted job decodes in the same tkv_decode step as all the others; a job that ends (end of
 * generation, its token limit, a stop the caller reports, a cancel) closes its sequence at once,
 * and the next waiting job joins between two steps. Prompts that begin with the same tokens share
 * those K/V rows through a small prefix cache (prefix.h); with kept conversations (conv.h) a job's
 * sequence outlives it, idle, and a later job that continues its tokens takes it over and prefills
 * only what is new.
 *
 * Admission: a job is tried when fewer than max_live jobs are live. tkv_seq_open's TKV_EFULL (the
 * session cannot take it now) first closes prefix-cache entries, then kept conversations other than
 * the one the job continues, least recently used first (the one it continues too when nothing is
 * live: the job then prefills it again), then
 * leaves the job at the head of the queue until a live job ends; TKV_ERR (it could never fit) ends
 * it as SCHED_REFUSED with the session's message, as does TKV_EFULL when nothing is live to free
 * room. The queue is strictly FIFO, so a large job is not starved by small ones behind it.
 *
 * Threads: none of its own. One thread calls every function (the session's rule); the callbacks
 * run on it, inside sched_step. The caller bounds the queue (sched_n_waiting).
 * Not done here: text (detokenizing, stop strings), networking, flags. */
#ifndef TKV_SCHED_H
#define TKV_SCHED_H
#include <stddef.h>
#include <stdint.h>

#include "tierkv.h"

typedef struct sched sched;

enum sched_why {
    SCHED_EOG,       /* an end-of-generation token (counted in gen_tokens, not handed to on_token) */
    SCHED_LENGTH,    /* max_tokens generated */
    SCHED_STOP,      /* on_token asked to stop (a stop string) */
    SCHED_CANCELLED, /* cancelled() said so, or sched_free */
    SCHED_REFUSED,   /* the session can never take it (msg says why): tkv_seq_open's TKV_ERR, or its
                        prefill's (the session's verdict on this input); nothing was generated */
    SCHED_FAILED     /* a decode step failed (msg): every job of that step ends so */
};

typedef struct {
    enum sched_why why;
    int prompt_tokens, gen_tokens;
    int cached_tokens;          /* prompt tokens shared from the prefix cache or taken over from a kept
                                   conversation, not prefilled */
    double t_submit, t_admit, t_end; /* monotonic seconds (base/clock.h); t_admit 0 if never admitted */
    int has_kv;                 /* 1: kv holds the sequence's statistics at its end (sched_params.end_stats) */
    tkv_stats kv;
    char msg[256];              /* REFUSED, FAILED */
} sched_end;

enum { SCHED_MAX_TOP_LOGPROBS = 20 };

/* A generated token's log-probability: the log-softmax of the model's logits over the whole
 * vocabulary, before the sampler's penalties, temperature or truncation (what vLLM returns by
 * default), and the most likely tokens' likewise. */
typedef struct {
    float logprob;                          /* of the token taken */
    int n_top;                              /* alternatives, most likely first (ties: the lower id) */
    int32_t top_id[SCHED_MAX_TOP_LOGPROBS];
    float top_logprob[SCHED_MAX_TOP_LOGPROBS];
} sched_logprob;

typedef struct {
    /* A generated token (not an end-of-generation one): 1 ends the job here (SCHED_STOP). lp: its
     * log-probability when the job asked (sched_job.logprobs), else NULL. */
    int (*on_token)(void *user, int32_t tok, const sched_logprob *lp);
    /* Polled once per step for every job (NULL: never cancelled); 1 ends it (SCHED_CANCELLED). */
    int (*cancelled)(void *user);
    /* Admitted and prefilled; called before its first token (NULL: not told). */
    void (*on_start)(void *user, int cached_tokens);
    /* Called once per job, after its sequence is closed; the job's memory may be freed here. */
    void (*on_end)(void *user, const sched_end *e);
    /* A prompt token's log-probability given the tokens before it, in order from position 0 (whose
     * lp is NULL: nothing comes before it), for a job with prompt_logprobs; before its first token. */
    void (*on_prompt)(void *user, int pos, int32_t tok, const sched_logprob *lp);
} sched_callbacks;

typedef struct {
    const int32_t *prompt; /* ids, the caller's until on_end */
    int n_prompt;          /* >= 1 */
    int max_tokens;        /* >= 1; the sequence is opened for n_prompt + max_tokens positions */
    tkv_sampler *sampler;  /* the caller's, used on this thread only; NULL: greedy (tkv_argmax) */
    int ignore_eog;        /* 1: end-of-generation tokens do not end the job */
    int logprobs;          /* 1: each token's log-probability (and top_logprobs alternatives) to on_token */
    int top_logprobs;      /* 0..SCHED_MAX_TOP_LOGPROBS */
    int prompt_logprobs;   /* 1: every prompt token's log-probability to on_prompt (the prompt is prefilled
                              whole, in chunks, nothing shared from the prefix cache) */
    /* Constrained sampling (NULL: none): mask(con, row) sets the logits of the tokens that may not
     * come next to -inf before the sampler sees them (log-probabilities are of the row before);
     * accept(con, tok) is told each token taken. On the scheduler's thread. */
    void (*mask)(void *con, float *row);
    void (*accept)(void *con, int32_t tok);
    void *con;
    uint64_t salt;         /* cache isolation: the job shares and takes over only what jobs of the same
                              salt left (0: the common one) */
    int no_cache;          /* 1: nothing reused from the caches, and the sequence is not kept */
    int stale_from, stale_to; /* prompt positions ranked below all others once prefilled (an earlier turn's
                              reasoning kept: sched_conv_splice), or an empty range */
    void *user;
} sched_job;

/* A store of records by key for parked conversations (park.h): a directory, a shared server. Every
 * call may fail (the store logs why); nothing depends on it but the time a recompute takes. */
typedef struct {
    /* writes (replaces) the record of salt and tokens[0..n_tokens) under key; 0 or -1 */
    int (*put)(void *ctx, const char *key, const void *bytes, size_t n, uint64_t salt, const int32_t *tokens, int n_tokens);
    /* malloc'd bytes (at most max of them when max > 0; *total: the record's size), or NULL */
    void *(*get)(void *ctx, const char *key, size_t max, size_t *n, size_t *total);
    void (*del)(void *ctx, const char *key);
    /* a store the scheduler indexes itself: every key held (read once, at start); NULL for a store with
       an index of its own (find) */
    void (*list)(void *ctx, void (*fn)(void *arg, const char *key), void *arg);
    /* a store with an index of its own (shared by several servers): the key of the record of this salt
       whose tokens prompt[0..n) continues furthest (at most n - 1, at least min_len), 0 and *lcp; -1 */
    int (*find)(void *ctx, uint64_t salt, const int32_t *prompt, int n, int min_len, char key[24], int *lcp);
    void (*log)(void *ctx, const char *msg); /* a line for the operator (NULL: quiet) */
    void *ctx;
    int64_t max_bytes;  /* records parked at most (0: no bound), least recently used deleted beyond; a
                           store with its own index bounds itself */
    int shared;         /* 1: several servers use it: a conversation is written as its request ends (so
                           another server can continue it) and stays there when read back */
} sched_park;

typedef struct {
    int max_live;       /* jobs decoding together; the session must hold max_live + prefix_entries sequences */
    int prefix_entries; /* prompt prefixes kept alive for sharing (0: none; forced to 0 for policies that
                           score the prompt, tkv_policy_shares_prefix) */
    int prefix_min;     /* the fewest leading tokens worth sharing (16) */
    int prefill_tokens; /* prompt tokens prefilled in one step beyond the first admitted job's (bounds the
                           pause a burst of arrivals causes the live jobs; default 512) */
    int end_stats;      /* 1: sched_end.kv filled (a tkv_sync per job end); 0: not */
    int conv_entries;   /* kept conversations (0: none; forced to 0 for policies whose prefix cannot be
                           shared, tkv_policy_shares_prefix); the session must hold max_live +
                           prefix_entries + conv_entries sequences */
    int64_t conv_bytes; /* their rows in every tier, at most (0: no bound beyond conv_entries) */
    const char *keep_thinking; /* the reasoning format's close marker: a client's transcript that stripped a
                           kept conversation's reasoning continues it with the reasoning kept (ranked
                           last); NULL: the template's rule (stripped: the match ends at the answer) */
    const sched_park *park; /* kept conversations beyond those bounds, and all of them at sched_free, go
                           here instead of being dropped, and come back when a job continues one (NULL:
                           none; the session then needs one more sequence: a record is read into it) */
    tkv_policy policy;  /* the session's policy (for the prefix rule) */
} sched_params;
void sched_params_default(sched_params *p);

typedef struct {
    int live, waiting;
    int prefix_entries;      /* entries alive now */
    int64_t prefix_tokens;   /* tokens they hold */
    int64_t prefix_hits, prefix_misses;
    int64_t cached_tokens;   /* prompt tokens shared instead of prefilled, all jobs so far */
    int64_t prompt_tokens;   /* prompt tokens of admitted jobs (cached or prefilled) */
    int64_t gen_tokens;      /* tokens generated, all jobs so far */
    int64_t steps;           /* tkv_decode calls */
    int64_t prefix_evictions; /* entries closed to make room for a job */
    /* kept conversations: entries now, their tokens per tier T0..T3 and bytes, jobs that took one over
       (hits) or looked and found none (misses), tokens taken over, entries kept and dropped (by their
       bounds or for room) */
    int conv_entries;
    int64_t conv_tokens[4], conv_bytes;
    int64_t conv_hits, conv_misses, conv_reused, conv_kept, conv_drops, conv_compressed;
    /* parked ones: records and their bytes now, parks, restores (and their seconds), records that
       could not be read back, records dropped (not written, or deleted beyond the store's bound) */
    int park_entries;
    int64_t park_bytes, parks, restores, restore_failures, park_drops;
    double restore_seconds;
} sched_info;

int sched_init(tkv_model *m, tkv_session *s, const sched_params *p, const sched_callbacks *cb, sched **out, char *err,
               size_t errlen);
/* Ends every job left (SCHED_CANCELLED, on_end called) and closes the prefix cache's sequences. */
void sched_free(sched *sc);
/* Queues a job (copied; its prompt is not). */
void sched_submit(sched *sc, const sched_job *j);
/* One round: cancelled jobs end, waiting ones are admitted (prefilled, first token sampled), then
 * every live job decodes one token. Returns the jobs left, live and waiting. */
int sched_step(sched *sc);
/* 1 when a step would do something: a job is live, or one waits and could be tried now. */
int sched_has_work(const sched *sc);
void sched_info_get(const sched *sc, sched_info *out);
/* A prompt that continues a kept conversation whose answer came back as text re-tokenised: rewritten
 * (*ids freed and replaced, *n updated) to continue the conversation's own ids (conv.h, conv_splice;
 * with keep_thinking the earlier reasoning too, its positions in *stale_from..*stale_to, for
 * sched_job); 1 when rewritten, 0 when left as it is. Before sched_submit, on the scheduler's thread. */
int sched_conv_splice(sched *sc, int32_t **ids, int *n, uint64_t salt, int *stale_from, int *stale_to);

#endif
