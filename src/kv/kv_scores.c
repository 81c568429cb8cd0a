/* kv_scores.c — the ranked policies' scores (kv_scores.h): a generated query's attention weights,
 * summed over layers and heads (each weight times 1 / (layers x heads), in double), added to the
 * score of every position it attends. On the host the update runs over the backend's host threads
 * by position ranges; off the CPU the backend adds them (be_ops.score_add) into a copy of the
 * scores in its memory, which comes back when the host reads the scores (kv_scores_host). Either
 * way every score gets the same additions in the same order, so the two give the same bits and the
 * re-tierings the same tiers (tests/test_scores_device.c).
 *
 * The backend's copy: allocated with the sequence, sent up whole before its first update there
 * (positions beyond the length are 0 on both sides, and stay 0 until appended: a new position's
 * score is 0 wherever it is current). It then holds the current scores (KV_SCORES_DEVICE) until the host
 * reads them: a re-tiering (once per delta steps), a demotion that makes room in T0, a record
 * written out, a take-over; after the read both hold the same bits (KV_SCORES_BOTH) and the next
 * update goes on there without sending anything up. The host writes scores only when it fills a
 * sequence (a record, another sequence's positions), which sends the copy up again. */
#include "kv/kv_scores.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* The weight of one attention weight in a score, 1 / (layers x heads): the host's update and the
 * backend's take it from here, so the two add the same products. */
static double score_weight(const kv_cache *kv) { return 1.0 / ((double)kv->o.n_layer * kv->o.n_head); }

/* The ranked score update of one generated token's weights over positions [i0, i1): position by
 * position, the heads in order, so each score gets the same additions in the same order as head by
 * head would give it (the same bits), with the scores read and written once instead of once per head. */
static void score_range(const kv_cache *kv, kv_seq *s, const float *att, int att_stride, int i0, int i1) {
    int H = kv->o.n_head, group = kv->o.n_head / kv->o.n_head_kv;
    size_t nc = (size_t)s->n_ctx;
    double w = score_weight(kv), *score = s->score;
    int i = i0;
    for (; i + 4 <= i1; i += 4) { /* four positions side by side: the compiler pairs them in vectors */
        double s0 = score[i], s1 = score[i + 1], s2 = score[i + 2], s3 = score[i + 3];
        for (int h = 0; h < H; h++) {
            const float *a = att + (size_t)h * att_stride + i;
            s0 += w * a[0], s1 += w * a[1], s2 += w * a[2], s3 += w * a[3];
        }
        score[i] = s0, score[i + 1] = s1, score[i + 2] = s2, score[i + 3] = s3;
    }
    for (; i < i1; i++) {
        double sc = score[i];
        for (int h = 0; h < H; h++) sc += w * att[(size_t)h * att_stride + i];
        score[i] = sc;
    }
    if (s->head_score)
        for (int h = 0; h < H; h++) {
            const float *a = att + (size_t)h * att_stride;
            float *hs = s->head_score + (size_t)(h / group) * nc;
            for (int i = i0; i < i1; i++) hs[i] += a[i];
        }
}

int kv_weights_used(const kv_cache *kv, const kv_seq *s, int q_pos) {
    if (!kv->ops->tiered) return 0;
    if (kv->ops->hooks && kv->ops->hooks->observe) return 1;
    if (!kv_ops_ranked(kv->ops)) return 0;
    return !s->prompt[q_pos] || s->prefill_score != NULL;
}

/* The hooks' observation and a prompt query's (the scores of a generated query are left to the
 * caller); 1 when the caller must still add a generated query's weights to the ranked scores.
 * kv_weights_used says when this reads the weights at all. */
static int observe_head(kv_cache *kv, kv_seq *s, int layer, int q_pos, const float *att, int att_stride) {
    if (!kv->ops->tiered) return 0;
    TKV_ASSERT(q_pos >= 0 && q_pos < s->len);
    if (kv->ops->hooks && kv->ops->hooks->observe)
        kv->ops->hooks->observe(s->pstate, layer, q_pos, s->prompt[q_pos], att, att_stride, s->len);
    if (!kv_ops_ranked(kv->ops)) return 0; /* own-budget policies keep their own scores */
    if (s->prompt[q_pos]) { /* prefill: the hierarchy score ignores it; SnapKV-style policies keep it */
        if (s->prefill_score) {
            int H = kv->o.n_head, group = kv->o.n_head / kv->o.n_head_kv;
            size_t nc = (size_t)s->n_ctx;
            for (int h = 0; h < H; h++)
                for (int i = 0; i <= q_pos; i++) s->prefill_score[(size_t)(h / group) * nc + i] += att[(size_t)h * att_stride + i];
        }
        return 0;
    }
    if (s->score_at != KV_SCORES_HOST) { /* the host adds this one: its copy current, the device's not */
        kv_scores_host(kv, s);
        s->score_at = KV_SCORES_HOST;
    }
    return 1;
}

void kv_observe(kv_cache *kv, int seq, int layer, int q_pos, const float *att, int att_stride) {
    kv_seq *s = kv_get_seq(kv, seq);
    if (observe_head(kv, s, layer, q_pos, att, att_stride)) score_range(kv, s, att, att_stride, 0, q_pos + 1);
}

/* ---- one layer's weights of a forward call in host memory: the updates over the host's threads ---- */

/* Positions per item of the parallel update: a decoding token at depth 4096 is 8 items. */
#define OBS_BLOCK 512

/* An item: positions [i0, i1) of the sequence of tokens [t0, t1) (one sequence, consecutive in the
 * call), whose generated ones are added in token order, so every score gets the additions of the
 * one-thread order and items never share a score. */
typedef struct obs_item {
    int t0, t1, i0, i1;
} obs_item;

typedef struct {
    kv_cache *kv;
    const int *seq, *pos;
    const uint8_t *gen; /* [n] 1: add the token's weights to the ranked scores */
    const float *w;
    int stride;
    size_t per;
    const obs_item *items;
} obs_job;

static void obs_task(void *ctx, int64_t k0, int64_t k1, int tid) {
    (void)tid;
    const obs_job *J = ctx;
    for (int64_t k = k0; k < k1; k++) {
        const obs_item *it = &J->items[k];
        kv_seq *s = &J->kv->seq[J->seq[it->t0]];
        for (int t = it->t0; t < it->t1; t++) {
            int i1 = J->pos[t] + 1 < it->i1 ? J->pos[t] + 1 : it->i1;
            if (J->gen[t] && it->i0 < i1) score_range(J->kv, s, J->w + (size_t)t * J->per, J->stride, it->i0, i1);
        }
    }
}

void kv_observe_batch(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride) {
    if (!kv->ops->tiered || n <= 0) return;
    size_t per = (size_t)kv->o.n_head * (size_t)stride;
    if (n > kv->cap_obs_gen) {
        uint8_t *g = realloc(kv->obs_gen, (size_t)n);
        TKV_ASSERT(g);
        kv->obs_gen = g, kv->cap_obs_gen = n;
    }
    uint8_t *gen = kv->obs_gen;
    int n_items = 0, serial = 0;
    for (int t = 0; t < n; t++) {
        gen[t] = (uint8_t)observe_head(kv, kv_get_seq(kv, seq[t]), layer, pos[t], w + (size_t)t * per, stride);
        n_items += gen[t] ? (pos[t] + OBS_BLOCK) / OBS_BLOCK : 0;
    }
    if (!n_items) return;
    /* runs of one sequence; a sequence in two runs would let two items add to one score at once */
    for (int t = 1; t < n && !serial; t++)
        if (seq[t] != seq[t - 1])
            for (int u = 0; u < t - 1 && !serial; u++) serial = seq[u] == seq[t];
    if (serial || !kv->be->ops->host_for) {
        for (int t = 0; t < n; t++)
            if (gen[t]) score_range(kv, &kv->seq[seq[t]], w + (size_t)t * per, stride, 0, pos[t] + 1);
        return;
    }
    if (n_items > kv->cap_obs) {
        obs_item *p = realloc(kv->obs, (size_t)n_items * sizeof *p);
        TKV_ASSERT(p);
        kv->obs = p, kv->cap_obs = n_items;
    }
    obs_item *items = kv->obs;
    int k = 0;
    for (int t0 = 0, t1; t0 < n; t0 = t1) {
        int top = -1;
        for (t1 = t0; t1 < n && seq[t1] == seq[t0]; t1++)
            if (gen[t1] && pos[t1] > top) top = pos[t1];
        for (int i0 = 0; i0 <= top; i0 += OBS_BLOCK) items[k++] = (obs_item){t0, t1, i0, i0 + OBS_BLOCK};
    }
    TKV_ASSERT(k <= n_items);
    obs_job J = {kv, seq, pos, gen, w, stride, per, items};
    kv->be->ops->host_for(kv->be, k, obs_task, &J);
}

/* ---- the backend's copy ---- */

int kv_scores_pick_device(const kv_options *o, const kv_policy_ops *ops, const be_backend *be) {
    return kv_ops_ranked(ops) && !ops->hooks && !ops->head_scores && !ops->prefill_scores && !be->ops->unified &&
           be->ops->score_add && !o->host_scores;
}

void kv_scores_host(kv_cache *kv, kv_seq *s) {
    if (s->score_at != KV_SCORES_DEVICE) return;
    size_t bytes = (size_t)s->len * sizeof *s->score;
    if (bytes) {
        const void *got = kv->be->ops->read(kv->be, s->score_dev, bytes, s->score);
        if (got != s->score) memcpy(s->score, got, bytes);
        kv->score_reads++, kv->score_read_bytes += (int64_t)bytes;
    }
    s->score_at = KV_SCORES_BOTH;
}

void kv_scores_wrote(kv_seq *s) {
    TKV_ASSERT(s->score_at != KV_SCORES_DEVICE); /* the device's newer scores would be lost */
    s->score_at = KV_SCORES_HOST;
}

void kv_scores_free(kv_cache *kv, kv_seq *s) {
    if (s->score_dev) kv->be->ops->free(kv->be, s->score_dev, BE_MEM_DEVICE);
    s->score_dev = NULL;
    s->score_at = KV_SCORES_HOST;
}

/* s's copy on the backend (allocated with the sequence), current, before an update there. */
static double *device_copy(kv_cache *kv, kv_seq *s) {
    TKV_ASSERT(s->score_dev);
    if (s->score_at == KV_SCORES_HOST) {
        kv->be->ops->upload(kv->be, s->score_dev, s->score, (size_t)s->n_ctx * sizeof *s->score);
        kv->score_uploads++;
    }
    s->score_at = KV_SCORES_DEVICE;
    return s->score_dev;
}

int kv_scores_on_device(const kv_cache *kv) { return kv->dev_scores; }

uint64_t kv_scores_read_back(const kv_cache *kv, uint64_t *reads, uint64_t *uploads) {
    if (reads) *reads = (uint64_t)kv->score_reads;
    if (uploads) *uploads = (uint64_t)kv->score_uploads;
    return (uint64_t)kv->score_read_bytes;
}

void kv_attn_mass_device(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride) {
    (void)layer; /* every layer adds with the same weight, in the order the layers run */
    TKV_ASSERT(kv->dev_scores);
    if (n <= 0) return;
    if (n > kv->cap_score_ptr) {
        free(kv->score_ptr), free(kv->score_npos);
        kv->score_ptr = tkv_xmalloc((size_t)n * sizeof *kv->score_ptr);
        kv->score_npos = tkv_xmalloc((size_t)n * sizeof *kv->score_npos);
        kv->cap_score_ptr = n;
    }
    int any = 0;
    for (int t = 0; t < n; t++) {
        kv_seq *s = kv_get_seq(kv, seq[t]);
        TKV_ASSERT(pos[t] >= 0 && pos[t] < s->len);
        int gen = kv_weights_used(kv, s, pos[t]); /* no hooks, no prefill scores: a generated query */
        kv->score_ptr[t] = gen ? device_copy(kv, s) : NULL;
        kv->score_npos[t] = pos[t] + 1;
        any |= gen;
    }
    if (any)
        kv->be->ops->score_add(kv->be, kv->score_ptr, kv->score_npos, n, w, kv->o.n_head, stride, score_weight(kv));
}
