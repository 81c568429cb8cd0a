/* kv_check.c — the consistency checker behind kv_check (for tests and debugging): recomputes every
 * invariant of kv_internal.h from scratch. All of it is main-thread metadata (the engine only copies
 * row bytes), so it does not wait for in-flight moves. Not used in decode. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_internal.h"

/* The baselines: every (layer, kv head) row within the limit of the policy's last step (plus the
 * tokens appended since, held by every row until the next step), evicted tokens held by no row,
 * resident tokens by at least one. */
static int check_baseline(const kv_cache *kv, int q, char *err, size_t errlen) {
    const kv_seq *s = &kv->seq[q];
    int limit = s->bl_len == 0 ? s->len : s->bl_limit + (s->len - s->bl_len);
    if (!s->keep) {
        int held = s->len - (int)s->ntok[KV_T3];
        if (held > limit) return tkv_errf(err, errlen, "seq %d: %s holds %d tokens, its limit is %d", q, kv->ops->name, held, limit);
        return 0;
    }
    size_t nc = (size_t)kv->o.n_ctx;
    int rows = kv->o.n_layer * kv->o.n_head_kv;
    for (int r = 0; r < rows; r++) {
        const uint8_t *k = s->keep + (size_t)r * nc;
        int held = 0;
        for (int p = 0; p < s->len; p++) {
            held += k[p] != 0;
            if (k[p] && s->tier[p] == KV_T3)
                return tkv_errf(err, errlen, "seq %d: evicted position %d still held by layer %d kv head %d", q, p,
                                r / kv->o.n_head_kv, r % kv->o.n_head_kv);
        }
        if (held > limit)
            return tkv_errf(err, errlen, "seq %d: %s: layer %d kv head %d holds %d tokens, its limit is %d", q, kv->ops->name,
                            r / kv->o.n_head_kv, r % kv->o.n_head_kv, held, limit);
    }
    for (int p = 0; p < s->len; p++) {
        if (s->tier[p] == KV_T3) continue;
        int any = 0;
        for (int r = 0; r < rows && !any; r++) any = s->keep[(size_t)r * nc + p] != 0;
        if (!any) return tkv_errf(err, errlen, "seq %d: position %d is held by no (layer, kv head) but keeps its slot", q, p);
    }
    return 0;
}

static int check_seq(const kv_cache *kv, int q, uint8_t *mark, char *err, size_t errlen) {
    const kv_seq *s = &kv->seq[q];
    int64_t cnt[4] = {0, 0, 0, 0};
    for (int t = 0; t < 3; t++) {
        const kv_store *st = &s->st[t];
        memset(mark, 0, (size_t)kv->o.n_ctx);
        for (int i = 0; i < st->n_free; i++) {
            int sl = st->free_stack[i];
            if (sl < 0 || sl >= st->n_slots || mark[sl]++)
                return tkv_errf(err, errlen, "seq %d T%d: free slot %d bad or listed twice", q, t, sl);
        }
        for (int i = 0; i < s->n_deferred; i++) {
            if (s->deferred[i].tier != t) continue;
            int sl = s->deferred[i].slot;
            if (sl < 0 || sl >= st->n_slots || mark[sl]++)
                return tkv_errf(err, errlen, "seq %d T%d: deferred slot %d bad or also free", q, t, sl);
        }
        for (int p = 0; p < s->len; p++) {
            if (s->tier[p] != t) continue;
            int sl = s->slot[p];
            if (sl < 0 || sl >= st->n_slots || mark[sl]++)
                return tkv_errf(err, errlen, "seq %d T%d: position %d has slot %d, bad or shared", q, t, p, sl);
        }
        for (int sl = 0; sl < st->n_slots; sl++)
            if (!mark[sl]) return tkv_errf(err, errlen, "seq %d T%d: slot %d leaked", q, t, sl);
    }
    int nprompt = 0;
    for (int p = 0; p < s->len; p++) {
        cnt[s->tier[p]]++;
        nprompt += s->prompt[p];
        if (s->tier[p] == KV_T3 && s->slot[p] != -1) return tkv_errf(err, errlen, "seq %d: evicted %d owns a slot", q, p);
        if (kv->ops->select && kv_is_protected(kv, s, p, s->len) && s->tier[p] != KV_T0)
            return tkv_errf(err, errlen, "seq %d: protected position %d is in T%d", q, p, s->tier[p]);
    }
    for (int t = 0; t < 4; t++)
        if (cnt[t] != s->ntok[t])
            return tkv_errf(err, errlen, "seq %d: T%d holds %lld tokens, counted %lld", q, t, (long long)cnt[t], (long long)s->ntok[t]);
    if (nprompt != s->n_prompt) return tkv_errf(err, errlen, "seq %d: %d prompt tokens, counted %d", q, nprompt, s->n_prompt);
    if (kv->ops->tiered && !kv->ops->select) return check_baseline(kv, q, err, errlen);
    int budget = kv_t0_budget(kv, s, s->len, NULL);
    int used = store_in_use(&s->st[KV_T0]);
    if (used > budget) return tkv_errf(err, errlen, "seq %d: T0 uses %d slots, budget %d tokens", q, used, budget);
    int64_t t0_bytes = (int64_t)used * kv_token_bytes(kv, KV_T0);
    if (t0_bytes > s->c.peak_t0_bytes && s->len > 0)
        return tkv_errf(err, errlen, "seq %d: T0 bytes %lld above the recorded peak", q, (long long)t0_bytes);
    return 0;
}

int kv_check(const kv_cache *kv, char *err, size_t errlen) {
    uint8_t *mark = malloc((size_t)kv->o.n_ctx);
    if (!mark) return tkv_errf(err, errlen, "kv_check: out of memory");
    int rc = 0;
    for (int q = 0; q < kv->o.n_seq && rc == 0; q++) rc = check_seq(kv, q, mark, err, errlen);
    free(mark);
    return rc;
}
