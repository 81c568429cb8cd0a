/* kv_check.c — the consistency checker behind kv_check (for tests and debugging): recomputes every
 * invariant of kv_internal.h from scratch. All of it is main-thread metadata (the engine only copies
 * row bytes), so it does not wait for in-flight moves. Not used in decode. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/kv_internal.h"

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
        if (kv->ops->tiered && kv_is_protected(kv, s, p, s->len) && s->tier[p] != KV_T0)
            return tkv_errf(err, errlen, "seq %d: protected position %d is in T%d", q, p, s->tier[p]);
    }
    for (int t = 0; t < 4; t++)
        if (cnt[t] != s->ntok[t])
            return tkv_errf(err, errlen, "seq %d: T%d holds %lld tokens, counted %lld", q, t, (long long)cnt[t], (long long)s->ntok[t]);
    if (nprompt != s->n_prompt) return tkv_errf(err, errlen, "seq %d: %d prompt tokens, counted %d", q, nprompt, s->n_prompt);
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
