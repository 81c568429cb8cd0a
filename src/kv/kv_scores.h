/* kv_scores.h — the ranked policies' scores (kv_seq.score): the attention weights of generated
 * queries added up, on the host's threads or, off the CPU, on the backend (be_ops.score_add), so
 * the weights never come back and the scores only when the host reads them (a re-tiering, once
 * per delta steps; a demotion that makes room for a new token; a record written out). The policy
 * hooks' observations and prefill scores stay on the host. Not for use outside src/kv. */
#ifndef TKV_KV_SCORES_H
#define TKV_KV_SCORES_H
#include "kv/kv_state.h"

/* Where a sequence's current scores are (kv_seq.score_at). */
enum {
    KV_SCORES_HOST = 0,   /* kv_seq.score; a device copy, if any, is out of date */
    KV_SCORES_DEVICE = 1, /* kv_seq.score_dev; the host's is out of date */
    KV_SCORES_BOTH = 2,   /* the same bits in both */
};

/* 1 when the cache adds generated queries' weights to its scores on the backend (kv_attn_mass_device):
 * a ranked policy without hooks or per-head scores, on a backend that is not host memory and has
 * score_add, unless kv_options.host_scores. Fixed at init. */
int kv_scores_pick_device(const kv_options *o, const kv_policy_ops *ops, const be_backend *be);

/* s->score current before the host reads it: one read of its len scores when the backend's are
 * newer. Every host reader of s->score calls it first. */
void kv_scores_host(kv_cache *kv, kv_seq *s);
/* After the host wrote s->score (a sequence filled from a record or another sequence): the device
 * copy, if any, is out of date and goes up whole before the next update there. */
void kv_scores_wrote(kv_seq *s);
/* Frees the device copy (with the sequence). */
void kv_scores_free(kv_cache *kv, kv_seq *s);

/* kv_attn_mass's work on the host (the weights in host memory): each token's hooks and prompt
 * scores in order, then the ranked score updates of the generated tokens over the backend's host
 * threads (be_ops.host_for), by position ranges, every score getting its additions in the
 * one-thread order (the same bits). */
void kv_observe_batch(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride);
/* Whether the attention weights of s's query at q_pos are used (kv_observe_batch reads them): by a
 * policy's observe hook, or by the ranked scores (a generated query's, or a prompt query's where
 * the policy keeps prefill observations). */
int kv_weights_used(const kv_cache *kv, const kv_seq *s, int q_pos);

#endif
