/* baselines_h2o.c — H2O (Zhang et al., 2023): heavy hitters by accumulated attention plus a recent
 * window, one state per (layer, kv head) of a sequence.
 * Invariants: n_kept == count of keep[j] for j < n; score[j] == 0 for evicted j; evictions are
 * final. The state allocates only in init; accumulate/evict are O(n) and allocation-free. */
#include "kv/baselines.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int kv_bl_h2o_init(kv_bl_h2o *s, int cap, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (cap < 1) return tkv_errf(err, errlen, "h2o: capacity %d must be at least 1", cap);
    s->score = tkv_xcalloc((size_t)cap, sizeof *s->score);
    s->keep = tkv_xcalloc((size_t)cap, sizeof *s->keep);
    s->cand = tkv_xcalloc((size_t)cap, sizeof *s->cand);
    s->cand_score = tkv_xcalloc((size_t)cap, sizeof *s->cand_score);
    s->work = tkv_xcalloc((size_t)cap, kv_bl_pair_bytes());
    s->cap = cap;
    return 0;
}

void kv_bl_h2o_free(kv_bl_h2o *s) {
    if (!s) return;
    free(s->score);
    free(s->keep);
    free(s->cand);
    free(s->cand_score);
    free(s->work);
    memset(s, 0, sizeof *s);
}

void kv_bl_h2o_reset(kv_bl_h2o *s) {
    memset(s->score, 0, (size_t)s->cap * sizeof *s->score);
    memset(s->keep, 0, (size_t)s->cap);
    s->n = 0;
    s->n_kept = 0;
}

void kv_bl_h2o_accumulate(kv_bl_h2o *s, const float *att, int att_stride, int group, int n,
                          kv_bl_gqa gqa) {
    TKV_ASSERT(n >= s->n && n <= s->cap && group >= 1);
    for (int j = s->n; j < n; j++) { /* new positions enter held, with nothing accumulated */
        s->score[j] = 0;
        s->keep[j] = 1;
    }
    s->n_kept += n - s->n;
    s->n = n;
    for (int j = 0; j < n; j++)
        if (s->keep[j]) s->score[j] += kv_bl_gqa_combine(att, att_stride, group, j, gqa);
}

int kv_bl_h2o_recent(int budget, double recent_share) {
    if (budget <= 0 || !(recent_share > 0)) return 0;
    if (recent_share >= 1) return budget;
    return (int)floor((double)budget * recent_share + 1e-9);
}

/* (a, pa) ranks strictly below (b, pb): lower score, or equal score and higher position. */
static int ranks_below(float a, int pa, float b, int pb) {
    int an = isnan(a), bn = isnan(b);
    if (an != bn) return an;
    if (!an && a != b) return a < b;
    return pa > pb;
}

int kv_bl_h2o_evict_one(kv_bl_h2o *s, int recent) {
    int lim = s->n - (recent > 0 ? recent : 0);
    int worst = -1;
    for (int j = 0; j < lim; j++) {
        if (!s->keep[j]) continue;
        if (worst < 0 || ranks_below(s->score[j], j, s->score[worst], worst)) worst = j;
    }
    if (worst >= 0) {
        s->keep[worst] = 0;
        s->score[worst] = 0;
        s->n_kept--;
    }
    return worst;
}

int kv_bl_h2o_enforce(kv_bl_h2o *s, int budget, int recent, char *err, size_t errlen) {
    if (budget < 1) return tkv_errf(err, errlen, "h2o: budget %d must be at least 1", budget);
    if (recent < 0 || recent > budget)
        return tkv_errf(err, errlen, "h2o: recent window %d must lie in [0, budget %d]", recent,
                        budget);
    int over = s->n_kept - budget;
    if (over <= 0) return 0;
    if (over == 1) { /* the steady state of decoding: one token in, one out */
        int j = kv_bl_h2o_evict_one(s, recent);
        TKV_ASSERT(j >= 0);
        return 1;
    }
    /* Many at once (prompt end, a smaller budget): scores do not change between evictions, so
     * evicting `over` times the worst equals keeping the best m - over candidates at once. */
    int lim = s->n - recent, m = 0;
    for (int j = 0; j < lim; j++)
        if (s->keep[j]) {
            s->cand[m] = j;
            s->cand_score[m] = s->score[j];
            s->keep[j] = 0;
            m++;
        }
    /* The recent window holds at most recent <= budget positions, so m >= over. */
    TKV_ASSERT(m >= over);
    kv_bl_keep_topk(s->cand_score, s->cand, m, m - over, s->keep, s->work);
    for (int i = 0; i < m; i++)
        if (!s->keep[s->cand[i]]) s->score[s->cand[i]] = 0;
    s->n_kept -= over;
    return over;
}
