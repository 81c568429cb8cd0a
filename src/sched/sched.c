/* sched.c — continuous batching (see sched.h). One step: cancels, admissions, one batched decode.
 *
 * Invariants: a live job owns an open sequence and, unless it has just ended, one pending token
 * (the last one sampled) that the next tkv_decode appends; live[0..n_live) are the live jobs;
 * the waiting FIFO holds jobs without a sequence. on_end is called exactly once per job, after its
 * sequence is closed. Nothing here allocates per token: the logits rows and batch arrays are
 * sized at init, a job's history at its admission. */
#include "sched/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "sched/conv.h"
#include "sched/park.h"
#include "sched/prefix.h"

struct job {
    sched_job j;
    struct job *next;  /* waiting FIFO */
    int seq;           /* -1 until admitted */
    int32_t pending;   /* the token the next step decodes */
    int32_t *hist;     /* prompt + generated ids, for the sampler's penalties */
    float *raw;        /* [V] the logits row before sampling (logprobs), or NULL */
    int n_hist;
    int gen, cached;
    int conv_seq, conv_lcp; /* the kept conversation it continues (its sequence, -1: none) and how far */
    char park_key[24];      /* or the parked one ("" : none), as far as conv_lcp */
    double t_submit, t_admit;
};

struct sched {
    tkv_model *m;
    tkv_session *s;
    sched_params p;
    sched_callbacks cb;
    int V;
    struct job **live; /* [max_live] */
    struct job **batch; /* [max_live]: the jobs of one decode step, in row order */
    int n_live;
    struct job *head, *tail; /* waiting */
    int n_waiting;
    int blocked;       /* 1: the head was refused for room; retried when a job ends */
    float *logits;     /* [max_live][V]: one row per decode row, also the prefill's */
    float *scored;     /* [SCORED_CHUNK][V]: a scored prompt's rows (allocated at the first such job) */
    int *seqs;
    int32_t *toks;
    prefix_cache pc;
    conv_cache cv;
    park_index pk;
    sched_info info;
};

void sched_params_default(sched_params *p) {
    memset(p, 0, sizeof *p);
    p->max_live = 8;
    p->prefix_entries = 4;
    p->prefix_min = 16;
    p->prefill_tokens = 512;
    p->policy = TKV_POLICY_FULL;
}

int sched_init(tkv_model *m, tkv_session *s, const sched_params *p, const sched_callbacks *cb, sched **out, char *err,
               size_t errlen) {
    *out = NULL;
    if (p->max_live < 1 || p->max_live > 4096 || p->prefix_entries < 0 || p->conv_entries < 0 || p->conv_bytes < 0 ||
        !cb->on_token || !cb->on_end)
        return tkv_errf(err, errlen, "sched: max_live %d (1..4096), prefix entries %d, kept conversations %d (%lld bytes), "
                        "on_token and on_end needed", p->max_live, p->prefix_entries, p->conv_entries, (long long)p->conv_bytes);
    sched *sc = tkv_xcalloc(1, sizeof *sc);
    sc->m = m;
    sc->s = s;
    sc->p = *p;
    sc->cb = *cb;
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    sc->V = mi.n_vocab;
    size_t L = (size_t)p->max_live;
    sc->live = tkv_xcalloc(L, sizeof *sc->live);
    sc->batch = tkv_xcalloc(L, sizeof *sc->batch);
    sc->logits = tkv_xmalloc(L * (size_t)sc->V * sizeof(float));
    sc->seqs = tkv_xcalloc(L, sizeof(int));
    sc->toks = tkv_xcalloc(L, sizeof(int32_t));
    prefix_init(&sc->pc, tkv_policy_shares_prefix(p->policy) ? p->prefix_entries : 0, p->prefix_min);
    conv_init(&sc->cv, tkv_policy_shares_prefix(p->policy) ? p->conv_entries : 0, p->prefix_min, p->conv_bytes);
    if (sc->cv.cap && p->park) {
        park_init(&sc->pk, p->park, m, p->prefix_min);
        sc->cv.park = &sc->pk;
    }
    *out = sc;
    return 0;
}

void sched_submit(sched *sc, const sched_job *j) {
    struct job *x = tkv_xcalloc(1, sizeof *x);
    x->j = *j;
    if (x->j.top_logprobs < 0) x->j.top_logprobs = 0;
    if (x->j.top_logprobs > SCHED_MAX_TOP_LOGPROBS) x->j.top_logprobs = SCHED_MAX_TOP_LOGPROBS;
    x->seq = -1;
    x->conv_seq = -1;
    x->t_submit = tkv_now_s();
    if (sc->tail) sc->tail->next = x;
    else sc->head = x;
    sc->tail = x;
    sc->n_waiting++;
}

/* Ends job x (live at index li, or waiting when li < 0: already unlinked). */
static void finish(sched *sc, struct job *x, int li, enum sched_why why, const char *msg) {
    sched_end e = {.why = why, .prompt_tokens = x->j.n_prompt, .gen_tokens = x->gen, .cached_tokens = x->cached,
                   .t_submit = x->t_submit, .t_admit = x->t_admit};
    if (msg) snprintf(e.msg, sizeof e.msg, "%s", msg);
    if (x->seq >= 0) {
        if (sc->p.end_stats) {
            tkv_sync(sc->s);
            e.has_kv = tkv_stats_get(sc->s, x->seq, &e.kv, NULL, 0) == 0;
        }
        int held = tkv_seq_len(sc->s, x->seq);
        if ((why == SCHED_EOG || why == SCHED_LENGTH || why == SCHED_STOP) && !x->j.no_cache && held <= x->n_hist)
            conv_keep(&sc->cv, sc->s, x->seq, x->hist, held, x->j.n_prompt, x->j.salt); /* or closes it */
        else
            tkv_seq_close(sc->s, x->seq);
        sc->blocked = 0; /* room was freed (a kept sequence leaves T0): the head may fit now */
    }
    if (li >= 0) sc->live[li] = sc->live[--sc->n_live];
    e.t_end = tkv_now_s();
    free(x->hist);
    free(x->raw);
    void *user = x->j.user;
    free(x);
    sc->cb.on_end(user, &e);
}

static struct job *pop_head(sched *sc) {
    struct job *x = sc->head;
    sc->head = x->next;
    if (!sc->head) sc->tail = NULL;
    x->next = NULL;
    sc->n_waiting--;
    return x;
}

/* log-softmax of raw[0..V) at t, and the k most likely entries (largest first, ties the lower id) */
static void logprob_of(const float *raw, int V, int32_t t, int k, sched_logprob *lp) {
    float m = raw[0];
    for (int i = 1; i < V; i++) m = raw[i] > m ? raw[i] : m;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)raw[i] - m);
    double lse = m + log(sum);
    lp->logprob = (float)(raw[t] - lse);
    lp->n_top = 0;
    for (int i = 0; i < V && k > 0; i++) { /* insertion into the sorted top k */
        if (lp->n_top == k && raw[i] <= raw[lp->top_id[k - 1]]) continue;
        int at = lp->n_top < k ? lp->n_top++ : k - 1;
        while (at > 0 && raw[i] > raw[lp->top_id[at - 1]]) lp->top_id[at] = lp->top_id[at - 1], at--;
        lp->top_id[at] = i;
    }
    for (int j = 0; j < lp->n_top; j++) lp->top_logprob[j] = (float)(raw[lp->top_id[j]] - lse);
}

/* Samples from row and hands the token on; 1 if the job ended (it is gone then). */
static int take_token(sched *sc, struct job *x, int li, float *row) {
    if (x->j.logprobs) { /* the sampler may change the row (penalties): the raw one is kept */
        if (!x->raw) x->raw = tkv_xmalloc((size_t)sc->V * sizeof(float));
        memcpy(x->raw, row, (size_t)sc->V * sizeof(float));
    }
    if (x->j.mask) x->j.mask(x->j.con, row);
    int32_t t = x->j.sampler ? tkv_sampler_sample(x->j.sampler, row, x->hist, x->n_hist) : tkv_argmax(row, sc->V);
    if (x->j.accept) x->j.accept(x->j.con, t);
    sched_logprob lp;
    if (x->j.logprobs) logprob_of(x->raw, sc->V, t, x->j.top_logprobs, &lp);
    x->hist[x->n_hist++] = t;
    x->gen++;
    sc->info.gen_tokens++;
    if (!x->j.ignore_eog && tkv_token_is_eog(sc->m, t)) { finish(sc, x, li, SCHED_EOG, NULL); return 1; }
    if (sc->cb.on_token(x->j.user, t, x->j.logprobs ? &lp : NULL)) { finish(sc, x, li, SCHED_STOP, NULL); return 1; }
    if (x->gen >= x->j.max_tokens) { finish(sc, x, li, SCHED_LENGTH, NULL); return 1; }
    x->pending = t;
    return 0;
}

/* The kept conversation x continues, if any (x->conv_seq, x->conv_lcp): only when it reaches further
 * than a prefix-cache entry (a repeated prompt shares the prefix and leaves the conversation kept). */
static void find_conv(sched *sc, struct job *x) {
    x->conv_seq = -1;
    x->conv_lcp = 0;
    x->park_key[0] = 0;
    if (x->j.no_cache || x->j.prompt_logprobs || !sc->cv.cap) return;
    int lcp = 0, plcp = 0, klcp = 0;
    if (prefix_lookup(&sc->pc, x->j.prompt, x->j.n_prompt, x->j.salt, &plcp) < 0) plcp = 0;
    int i = conv_lookup(&sc->cv, x->j.prompt, x->j.n_prompt, x->j.salt, plcp, &lcp);
    char key[24];
    if (!park_lookup(&sc->pk, x->j.prompt, x->j.n_prompt, x->j.salt, plcp, key, &klcp) && klcp > lcp && klcp > plcp) {
        snprintf(x->park_key, sizeof x->park_key, "%s", key); /* parked, and further than what is in memory */
        x->conv_lcp = klcp;
        return;
    }
    if (i < 0 || plcp >= lcp) return;
    x->conv_seq = sc->cv.e[i].seq;
    x->conv_lcp = lcp;
}

/* Opens a sequence for the head job; 0 opened, TKV_EFULL (it stays waiting), TKV_ERR (refused). */
static int open_seq(sched *sc, struct job *x, char *msg, size_t n) {
    int n_ctx = x->j.n_prompt + x->j.max_tokens;
    if (x->j.n_prompt < 1 || x->j.max_tokens < 1) { snprintf(msg, n, "an empty prompt or no tokens to generate"); return TKV_ERR; }
    for (;;) {
        find_conv(sc, x); /* again after every entry given up */
        /* reserved as a whole prompt: what it takes over may hold a shared prefix, pinned */
        int rc = tkv_seq_open(sc->s, n_ctx, x->j.n_prompt, &x->seq, msg, n);
        if (rc != TKV_EFULL) return rc;
        if (!prefix_evict(&sc->pc, sc->s) || !conv_evict(&sc->cv, sc->s, x->conv_seq)) continue;
        if (x->conv_seq < 0 || sc->n_live > 0) return TKV_EFULL; /* nothing left to give up, or wait */
        conv_evict(&sc->cv, sc->s, -1); /* its own: it prefills the conversation again */
    }
}

/* Takes over the conversation x continues into x's sequence: the tokens taken, 0 when it has none or
 * the take was refused (the entry is gone either way). */
static int take_conv(sched *sc, struct job *x) {
    int src, parked = x->park_key[0] != 0;
    if (parked) { /* read back into a sequence of its own, then taken over as a kept one */
        src = park_restore(&sc->pk, sc->s, x->park_key);
    } else if (x->conv_seq >= 0) {
        int i = 0;
        while (i < sc->cv.n && sc->cv.e[i].seq != x->conv_seq) i++;
        TKV_ASSERT(i < sc->cv.n); /* found at open_seq, nothing ran since */
        src = conv_take(&sc->cv, i);
    } else {
        if (sc->cv.cap && !x->j.no_cache && !x->j.prompt_logprobs) sc->cv.misses++;
        return 0;
    }
    char msg[256];
    if (src < 0 || tkv_seq_take(sc->s, src, x->seq, x->conv_lcp, msg, sizeof msg)) {
        if (src >= 0) tkv_seq_close(sc->s, src);
        sc->cv.drops += !parked; /* a kept one is gone (a record that was not read is counted by park) */
        sc->cv.misses++;
        return 0;
    }
    sc->cv.hits++;
    sc->cv.reused += x->conv_lcp;
    return x->conv_lcp;
}

enum { SCORED_CHUNK = 16 }; /* prompt rows with logits at a time (16 x a 152k vocabulary: 9.7 MB) */

/* Prefills x's whole prompt with every position's logits, chunk by chunk: each row gives the next
 * prompt token's log-probability (on_prompt), the last one the first token's logits (into row). */
static int prefill_scored(sched *sc, struct job *x, float *row, char *msg, size_t n) {
    const int32_t *p = x->j.prompt;
    const int np = x->j.n_prompt, V = sc->V;
    if (!sc->scored) sc->scored = tkv_xmalloc((size_t)SCORED_CHUNK * (size_t)V * sizeof(float));
    if (sc->cb.on_prompt) sc->cb.on_prompt(x->j.user, 0, p[0], NULL);
    for (int at = 0; at < np; at += SCORED_CHUNK) {
        int c = np - at < SCORED_CHUNK ? np - at : SCORED_CHUNK;
        if (tkv_prefill(sc->s, x->seq, p + at, c, sc->scored, 1, msg, n)) return -1;
        for (int r = 0; r < c; r++) {
            const float *lr = sc->scored + (size_t)r * (size_t)V;
            int next = at + r + 1; /* the position this row predicts */
            if (next == np) {
                memcpy(row, lr, (size_t)V * sizeof(float));
            } else if (sc->cb.on_prompt) {
                sched_logprob lp;
                logprob_of(lr, V, p[next], x->j.top_logprobs, &lp);
                sc->cb.on_prompt(x->j.user, next, p[next], &lp);
            }
        }
    }
    return 0;
}

/* Admits the head job: sequence, shared prefix, prefill, first token. Returns the tokens prefilled. */
static int admit(sched *sc, struct job *x) {
    char msg[256];
    x->t_admit = tkv_now_s();
    int li = sc->n_live++;
    sc->live[li] = x;
    int taken = take_conv(sc, x), lcp = taken, hit = -1;
    if (!taken && !x->j.prompt_logprobs && !x->j.no_cache) hit = prefix_lookup(&sc->pc, x->j.prompt, x->j.n_prompt, x->j.salt, &lcp);
    float *row = sc->logits + (size_t)li * (size_t)sc->V;
    if (x->j.prompt_logprobs ? prefill_scored(sc, x, row, msg, sizeof msg)
                             : (hit >= 0 && tkv_seq_share_prefix(sc->s, sc->pc.e[hit].seq, x->seq, lcp, msg, sizeof msg)) ||
                                   tkv_prefill(sc->s, x->seq, x->j.prompt + lcp, x->j.n_prompt - lcp, row, 0, msg, sizeof msg)) {
        /* TKV_ERR: bad input for this session (e.g. a prompt its T0 share cannot hold): never as is */
        finish(sc, x, li, SCHED_REFUSED, msg);
        return 0;
    }
    if (x->j.stale_to > x->j.stale_from) tkv_seq_set_stale(sc->s, x->seq, x->j.stale_from, x->j.stale_to);
    x->cached = lcp;
    sc->info.cached_tokens += lcp;
    sc->info.prompt_tokens += x->j.n_prompt;
    if (!taken && !x->j.no_cache) prefix_update(&sc->pc, sc->s, hit, lcp, x->seq, x->j.prompt, x->j.n_prompt, x->j.salt);
    x->hist = tkv_xmalloc(((size_t)x->j.n_prompt + (size_t)x->j.max_tokens + 1) * sizeof(int32_t));
    memcpy(x->hist, x->j.prompt, (size_t)x->j.n_prompt * sizeof(int32_t));
    x->n_hist = x->j.n_prompt;
    int prefilled = x->j.n_prompt - lcp;
    if (sc->cb.on_start) sc->cb.on_start(x->j.user, lcp);
    take_token(sc, x, li, row); /* x may be gone after this */
    return prefilled;
}

static void cancel_pass(sched *sc) {
    if (!sc->cb.cancelled) return;
    for (int i = sc->n_live; i-- > 0;)
        if (sc->cb.cancelled(sc->live[i]->j.user)) finish(sc, sc->live[i], i, SCHED_CANCELLED, NULL);
    struct job **pp = &sc->head, *prev = NULL;
    while (*pp) {
        struct job *x = *pp;
        if (!sc->cb.cancelled(x->j.user)) { prev = x; pp = &x->next; continue; }
        *pp = x->next;
        if (sc->tail == x) sc->tail = prev;
        sc->n_waiting--;
        sc->blocked = 0;
        finish(sc, x, -1, SCHED_CANCELLED, NULL);
    }
}

static void admit_pass(sched *sc) {
    int admitted = 0, budget = sc->p.prefill_tokens;
    while (sc->head && !sc->blocked && sc->n_live < sc->p.max_live && (admitted == 0 || budget > 0)) {
        struct job *x = sc->head;
        char msg[256];
        int rc = open_seq(sc, x, msg, sizeof msg);
        if (rc == TKV_EFULL && sc->n_live > 0) { sc->blocked = 1; break; } /* waits for a job to end */
        pop_head(sc);
        if (rc) { finish(sc, x, -1, SCHED_REFUSED, msg); continue; }
        admitted++;
        budget -= admit(sc, x);
    }
}

static void decode_pass(sched *sc) {
    int nb = sc->n_live;
    if (!nb) return;
    struct job **batch = sc->batch;
    for (int b = 0; b < nb; b++) {
        batch[b] = sc->live[b];
        sc->seqs[b] = batch[b]->seq;
        sc->toks[b] = batch[b]->pending;
    }
    char msg[256];
    sc->info.steps++;
    if (tkv_decode(sc->s, sc->seqs, sc->toks, nb, sc->logits, msg, sizeof msg)) {
        while (sc->n_live) finish(sc, sc->live[sc->n_live - 1], sc->n_live - 1, SCHED_FAILED, msg);
        return;
    }
    /* rows follow batch order; a job that ends moves another in the live array, so find it by pointer */
    for (int b = 0; b < nb; b++) {
        int li = 0;
        while (li < sc->n_live && sc->live[li] != batch[b]) li++;
        TKV_ASSERT(li < sc->n_live);
        take_token(sc, batch[b], li, sc->logits + (size_t)b * (size_t)sc->V);
    }
}

int sched_step(sched *sc) {
    cancel_pass(sc);
    admit_pass(sc);
    decode_pass(sc);
    return sc->n_live + sc->n_waiting;
}

int sched_has_work(const sched *sc) {
    return sc->n_live > 0 || sc->head != NULL; /* a blocked head implies a live job (admit_pass) */
}

void sched_info_get(const sched *sc, sched_info *out) {
    *out = sc->info;
    out->live = sc->n_live;
    out->waiting = sc->n_waiting;
    out->prefix_entries = sc->pc.n;
    out->prefix_tokens = prefix_tokens(&sc->pc);
    out->prefix_hits = sc->pc.hits;
    out->prefix_misses = sc->pc.misses;
    out->prefix_evictions = sc->pc.evictions;
    out->conv_entries = sc->cv.n;
    for (int i = 0; i < sc->cv.n; i++) {
        tkv_stats st;
        if (tkv_stats_get(sc->s, sc->cv.e[i].seq, &st, NULL, 0)) continue;
        for (int t = 0; t < 4; t++) out->conv_tokens[t] += st.tokens[t];
        out->conv_bytes += st.bytes[0] + st.bytes[1] + st.bytes[2];
    }
    out->conv_hits = sc->cv.hits;
    out->conv_misses = sc->cv.misses;
    out->conv_reused = sc->cv.reused;
    out->conv_kept = sc->cv.kept;
    out->conv_drops = sc->cv.drops;
    out->conv_compressed = sc->cv.compressed;
    out->park_entries = sc->pk.n;
    out->park_bytes = sc->pk.bytes;
    out->parks = sc->pk.parks;
    out->restores = sc->pk.restores;
    out->restore_failures = sc->pk.restore_failures;
    out->park_drops = sc->pk.drops;
    out->restore_seconds = sc->pk.restore_seconds;
}

int sched_conv_splice(sched *sc, int32_t **ids, int *n, uint64_t salt, int *stale_from, int *stale_to) {
    int32_t *nid;
    int nn = conv_splice(&sc->cv, sc->m, *ids, *n, salt, sc->p.keep_thinking, &nid, stale_from, stale_to);
    if (nn <= 0) return 0;
    free(*ids);
    *ids = nid;
    *n = nn;
    return 1;
}

void sched_free(sched *sc) {
    if (!sc) return;
    while (sc->n_live) finish(sc, sc->live[sc->n_live - 1], sc->n_live - 1, SCHED_CANCELLED, NULL);
    while (sc->head) finish(sc, pop_head(sc), -1, SCHED_CANCELLED, NULL);
    prefix_free(&sc->pc, sc->s);
    conv_free(&sc->cv, sc->s); /* parked, with a store */
    park_free(&sc->pk);
    free(sc->live);
    free(sc->batch);
    free(sc->logits);
    free(sc->scored);
    free(sc->seqs);
    free(sc->toks);
    free(sc);
}
