/* kv_policy.c — policy table and the ranked selection (see kv_policy.h). Pure: no storage, no I/O. */
#include "kv/kv_policy.h"

#include <stddef.h>
#include <string.h>

/* The registry: every policy's table, by kind. Adding a policy: its file and one line here (and its
 * kind in kv.h's enum, mirrored in tierkv.h). */
static const kv_policy_ops *const registry[KV_POLICY_COUNT] = {
    [KV_POLICY_FULL] = &kv_policy_full,
    [KV_POLICY_HIERARCHY] = &kv_policy_hierarchy,
    [KV_POLICY_EVICT] = &kv_policy_evict,
    [KV_POLICY_QUANT] = &kv_policy_quant,
    [KV_POLICY_STREAMING] = &kv_policy_streaming,
    [KV_POLICY_H2O] = &kv_policy_h2o,
    [KV_POLICY_RKV] = &kv_policy_rkv,
    [KV_POLICY_SNAPKV] = &kv_policy_snapkv,
    [KV_POLICY_SINK] = &kv_policy_sink,
};

const kv_policy_ops *kv_policy_ops_of(kv_policy_kind k) {
    return (k >= 0 && k < KV_POLICY_COUNT) ? registry[k] : NULL;
}

int kv_policy_whole_token(kv_policy_kind k) {
    const kv_policy_ops *o = kv_policy_ops_of(k);
    return o && !o->head_masks;
}

int kv_policy_copies_prefix(kv_policy_kind k) {
    const kv_policy_ops *o = kv_policy_ops_of(k);
    return o && !o->own_budget && !o->prefill_scores;
}

const char *kv_policy_name(kv_policy_kind p) {
    return (p >= 0 && p < KV_POLICY_COUNT) ? registry[p]->name : "?";
}

int kv_policy_parse(const char *name, kv_policy_kind *out) {
    for (int i = 0; name && i < KV_POLICY_COUNT; i++)
        if (strcmp(name, registry[i]->name) == 0) { *out = (kv_policy_kind)i; return 0; }
    return -1;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

void kv_policy_caps(const kv_policy_ops *ops, int n_cand, int room0, int b2, int room3, int cap[3]) {
    cap[0] = imax(0, imin(n_cand, room0));
    int host[2] = {0, 0};
    if (ops->host_caps) ops->host_caps(n_cand - cap[0], b2, room3, host);
    cap[1] = host[0], cap[2] = host[1];
}

int kv_policy_uses_t2(kv_policy_kind k, double t2_ratio) {
    const kv_policy_ops *o = kv_policy_ops_of(k);
    return o && o->uses_t2 && (!o->t2_ratio_ok || t2_ratio > 0);
}

/* a before b: higher score, then later position */
static int ranks_before(const double *score, int32_t a, int32_t b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return a > b;
}

void kv_rank(const double *score, int32_t *idx, int m, int32_t *scratch) {
    /* bottom-up merge sort, ping-ponging between idx and scratch */
    int32_t *src = idx, *dst = scratch;
    for (int w = 1; w < m; w *= 2) {
        for (int lo = 0; lo < m; lo += 2 * w) {
            int mid = imin(lo + w, m), hi = imin(lo + 2 * w, m), i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = ranks_before(score, src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        int32_t *t = src; src = dst; dst = t;
    }
    if (src != idx) memcpy(idx, src, (size_t)m * sizeof *idx);
}

void kv_select_ranked(const kv_select_in *in, kv_select_out *out) {
    int m = 0;
    for (int i = 0; i < in->n; i++) {
        if (in->tier[i] == KV_T3) out->target[i] = KV_T3;
        else if (in->prot[i]) out->target[i] = KV_T0;
        else in->order[m++] = i;
    }
    kv_rank(in->score, in->order, m, in->scratch);
    /* tier counts of the plain top-down fill: T0 first, then T1, T2, the tail evicted */
    int cnt[4], left = m;
    for (int t = 0; t < 3; t++) {
        cnt[t] = in->cap[t] < left ? (in->cap[t] > 0 ? in->cap[t] : 0) : left;
        left -= cnt[t];
    }
    cnt[3] = left;
    /* the evicted tail, then T2, from the bottom of the ranking, skipping the exact candidates; then
     * T0 from the top and T1 for the rest. Without exact candidates this is the top-down fill. */
    uint8_t *tg = out->target;
    const int32_t *ord = in->order;
    for (int k = 0; k < m; k++) tg[ord[k]] = KV_T1;
    for (int t = 3, k = m - 1; t >= 2; t--)
        for (int c = 0; c < cnt[t] && k >= 0; k--)
            if (!in->exact || !in->exact[ord[k]]) tg[ord[k]] = (uint8_t)t, c++;
    for (int k = 0, c = 0; k < m && c < cnt[0]; k++)
        if (tg[ord[k]] == KV_T1) tg[ord[k]] = KV_T0, c++;
    out->keep_used = 0;
}

/* ---- one T0 budget for several sequences (see kv_policy.h) ---- */

typedef struct {
    double v;  /* normalised score of the sequence's next candidate */
    int seq;
} share_head;

size_t kv_share_scratch_item(void) { return sizeof(share_head); }

static int head_before(const share_head *a, const share_head *b) {
    if (a->v != b->v) return a->v > b->v;
    return a->seq < b->seq;
}

static void sift_down(share_head *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && head_before(&h[l], &h[m])) m = l;
        if (r < n && head_before(&h[r], &h[m])) m = r;
        if (m == i) return;
        share_head t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

void kv_policy_share_t0(const kv_share_seq *seqs, int n, int room0, int *room, void *scratch) {
    share_head *h = scratch;
    int nh = 0;
    for (int i = 0; i < n; i++) {
        room[i] = 0;
        if (seqs[i].n_cand > 0) h[nh++] = (share_head){seqs[i].score[seqs[i].order[0]] * seqs[i].norm, i};
    }
    for (int i = nh / 2 - 1; i >= 0; i--) sift_down(h, nh, i);
    while (room0 > 0 && nh > 0) {
        int q = h[0].seq;
        room[q]++;
        room0--;
        if (room[q] < seqs[q].n_cand) {
            h[0].v = seqs[q].score[seqs[q].order[room[q]]] * seqs[q].norm;
        } else {
            h[0] = h[--nh];
        }
        sift_down(h, nh, 0);
    }
}
