/* kv_io.c — a sequence written out as a record (kv_rec.h) and read back into an empty one: the
 * parked conversation's way out of memory and back. Rows are copied as the pools hold them (the
 * exact formats' f16/f32 bits, T2's records), so a sequence read back attends to the same bits;
 * rows in device memory (a GPU's T0) go through the backend's kv_read / kv_write as f32, which
 * carries f16 and f32 values exactly. Read back, the rows go to T1 when the policy has one (exact,
 * host memory: a restored conversation is idle until a request takes it over and is re-tiered),
 * else to T0; T2 rows to T2, evicted positions stay evicted. */
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "kv/kv_hooks.h"
#include "kv/kv_rec.h"
#include "kv/kv_scores.h"

static void head_of(const kv_cache *kv, uint64_t model, uint64_t salt, uint32_t n, kv_rec *r) {
    memset(r, 0, sizeof *r);
    r->model = model, r->salt = salt;
    r->n_layer = (uint32_t)kv->o.n_layer, r->n_head_kv = (uint32_t)kv->o.n_head_kv, r->head_dim = (uint32_t)kv->o.head_dim;
    r->exact_fmt = kv->o.f16 ? BE_KV_F16 : BE_KV_F32;
    r->exact_bytes = (uint32_t)be_kv_record_bytes((be_kv_fmt)r->exact_fmt, kv->o.n_head_kv, kv->o.head_dim);
    r->t2_fmt = kv->ops->uses_t2 ? (uint32_t)kv->o.t2_fmt : KV_REC_NO_T2;
    r->t2_bytes = kv->ops->uses_t2 ? (uint32_t)be_kv_record_bytes(kv->o.t2_fmt, kv->o.n_head_kv, kv->o.head_dim) : 0;
    r->n = n;
}

/* f32 rows k, v of kd values as an exact record of format fmt (K then V), and back */
static void exact_put(uint8_t *rec, uint32_t fmt, const float *k, const float *v, size_t kd) {
    for (int w = 0; w < 2; w++) {
        const float *x = w ? v : k;
        if (fmt == BE_KV_F32) memcpy(rec + (size_t)w * kd * 4, x, kd * 4);
        else
            for (size_t i = 0; i < kd; i++) {
                uint16_t h = tkv_f32_to_f16(x[i]);
                memcpy(rec + ((size_t)w * kd + i) * 2, &h, 2);
            }
    }
}

static void exact_get(const uint8_t *rec, uint32_t fmt, float *k, float *v, size_t kd) {
    for (int w = 0; w < 2; w++) {
        float *x = w ? v : k;
        if (fmt == BE_KV_F32) memcpy(x, rec + (size_t)w * kd * 4, kd * 4);
        else
            for (size_t i = 0; i < kd; i++) {
                uint16_t h;
                memcpy(&h, rec + ((size_t)w * kd + i) * 2, 2);
                x[i] = tkv_f16_to_f32(h);
            }
    }
}

int kv_seq_export(kv_cache *kv, int seq, const int32_t *tokens, uint64_t model, uint64_t salt, const void *note,
                  size_t note_len, tkv_buf *b, char *err, size_t errlen) {
    if (!kv_seq_live(kv, seq)) return tkv_errf(err, errlen, "kv: sequence %d is not live", seq);
    kv_seq *s = &kv->seq[seq];
    if (!kv_policy_copies_prefix(kv->o.policy))
        return tkv_errf(err, errlen, "kv: policy %s keeps state of its own beside the positions; it is not written out",
                        kv->ops->name);
    if (s->len < 1 || s->fresh_from < s->len) return tkv_errf(err, errlen, "kv: sequence %d is empty or not written", seq);
    if (note_len > KV_REC_NOTE_MAX) return tkv_errf(err, errlen, "kv: a note of %zu bytes (at most %d)", note_len, KV_REC_NOTE_MAX);
    kv_settle(kv); /* every row where ref says, and the copies that put it there done */
    kv_rec r;
    head_of(kv, model, salt, (uint32_t)s->len, &r);
    if (note) r.flags = KV_REC_NOTE;
    uint8_t *tier = tkv_xmalloc((size_t)s->len), *lossy = tkv_xmalloc((size_t)s->len);
    int32_t *dev = tkv_xmalloc((size_t)s->len * sizeof(int32_t));
    for (int i = 0; i < s->len; i++) tier[i] = (uint8_t)kv_ref_tier(s->ref[i]), lossy[i] = (uint8_t)(s->lossy[i] | s->stale[i] << 1);
    kv_scores_host(kv, s);
    kv_rec_write_head(b, &r, tokens, tier, lossy, s->score);
    size_t kd = (size_t)kv->kv_dim;
    float *k = NULL, *v = NULL;
    int nd = 0; /* rows in device memory: read back in one call per layer */
    for (int i = 0; i < s->len; i++)
        if (tier[i] < 3 && !kv_host_pool(kv, tier[i])) dev[nd++] = s->ref[i];
    if (nd) k = tkv_xmalloc((size_t)nd * kd * sizeof(float)), v = tkv_xmalloc((size_t)nd * kd * sizeof(float));
    for (int l = 0; l < kv->o.n_layer; l++) {
        if (nd) kv->be->ops->kv_read(kv->be, &kv->pools, l, dev, nd, k, v);
        int d = 0;
        for (int i = 0; i < s->len; i++) {
            if (tier[i] == 3) continue;
            size_t rb = tier[i] == 2 ? r.t2_bytes : r.exact_bytes;
            tkv_buf_reserve(b, rb);
            if (kv_host_pool(kv, tier[i])) memcpy(b->p + b->n, be_kv_record(&kv->pools, s->ref[i], l), rb);
            else exact_put((uint8_t *)b->p + b->n, r.exact_fmt, k + (size_t)d * kd, v + (size_t)d * kd, kd), d++;
            b->n += rb;
        }
    }
    kv_rec_finish(b, note, (uint32_t)note_len);
    free(tier), free(lossy), free(dev), free(k), free(v);
    return 0;
}

int kv_seq_import(kv_cache *kv, int seq, const kv_rec *r, char *err, size_t errlen) {
    if (!kv_seq_live(kv, seq)) return tkv_errf(err, errlen, "kv: sequence %d is not live", seq);
    kv_seq *s = &kv->seq[seq];
    kv_rec want;
    head_of(kv, r->model, r->salt, r->n, &want);
    if (!kv_policy_copies_prefix(kv->o.policy))
        return tkv_errf(err, errlen, "kv: policy %s keeps state of its own beside the positions; no record is read", kv->ops->name);
    if (r->n_layer != want.n_layer || r->n_head_kv != want.n_head_kv || r->head_dim != want.head_dim ||
        r->exact_fmt != want.exact_fmt)
        return tkv_errf(err, errlen, "kv: a record of %u layers x %u kv heads x %u (rows %s) for a cache of %u x %u x %u (%s)",
                        r->n_layer, r->n_head_kv, r->head_dim, r->exact_fmt == BE_KV_F16 ? "f16" : "f32", want.n_layer,
                        want.n_head_kv, want.head_dim, kv->o.f16 ? "f16" : "f32");
    int has_t2 = 0, has_t3 = 0;
    for (uint32_t i = 0; i < r->n; i++) has_t2 |= r->tier[i] == 2, has_t3 |= r->tier[i] == 3;
    if (has_t2 && r->t2_fmt != want.t2_fmt)
        return tkv_errf(err, errlen, "kv: the record's T2 rows are of format %u; this cache's T2 %s", r->t2_fmt,
                        kv->ops->uses_t2 ? be_kv_t2_name(kv->o.t2_fmt) : "is not used");
    if (has_t3 && !kv->ops->tiered) return tkv_errf(err, errlen, "kv: the record has evicted positions; policy full keeps every one");
    if (s->len || s->idle || (int64_t)r->n > s->n_ctx)
        return tkv_errf(err, errlen, "kv: sequence %d (holding %d of %d) cannot take a record of %u positions", seq, s->len,
                        s->n_ctx, r->n);
    kv_settle(kv); /* the slots written below may be ones a finished batch's copies read */
    int exact_tier = kv->ops->uses_t1 ? BE_T1 : BE_T0;
    if (exact_tier == BE_T0 && kv->mode == KV_B_SHARED) {
        int64_t n_exact = 0;
        for (uint32_t i = 0; i < r->n; i++) n_exact += r->tier[i] <= 1;
        if (kv_tpool_in_use(&kv->tp[BE_T0]) + n_exact > kv->tp[BE_T0].cap_slots)
            return tkv_errf(err, errlen, "kv: T0 has no room for the record's %lld rows", (long long)n_exact);
    }
    for (uint32_t i = 0; i < r->n; i++) {
        int t = r->tier[i] <= 1 ? exact_tier : r->tier[i];
        int32_t ref = t == 3 ? BE_SLOT_NONE : kv_slot_alloc(kv, t);
        TKV_ASSERT(t == 3 || ref != BE_SLOT_NONE);
        s->ref[i] = ref;
        s->att[i] = BE_SLOT_NONE;
        kv_att_update(kv, s, (int)i);
        s->ntok[t]++;
        if (t == BE_T0) s->t0_held++;
        s->prompt[i] = 0;
        s->lossy[i] = r->lossy[i] & 1;
        s->stale[i] = (uint8_t)(r->lossy[i] >> 1 & kv_ops_ranked(kv->ops));
        s->n_stale += s->stale[i];
        s->score[i] = kv_rec_score(r, i);
        kv_set_keep(kv, s, (int)i, t != 3);
    }
    kv_scores_wrote(s);
    s->len = s->fresh_from = (int)r->n;
    size_t kd = (size_t)kv->kv_dim;
    int32_t *dev = tkv_xmalloc((size_t)r->n * sizeof(int32_t));
    int nd = 0; /* rows going to device memory: written in one call per layer */
    for (uint32_t i = 0; i < r->n; i++)
        if (s->ref[i] != BE_SLOT_NONE && !kv_host_pool(kv, kv_ref_tier(s->ref[i]))) dev[nd++] = s->ref[i];
    float *k = nd ? tkv_xmalloc((size_t)nd * kd * sizeof(float)) : NULL, *v = nd ? tkv_xmalloc((size_t)nd * kd * sizeof(float)) : NULL;
    const uint8_t *row = r->rows;
    for (int l = 0; l < kv->o.n_layer; l++) {
        int d = 0;
        for (uint32_t i = 0; i < r->n; i++) {
            int t = kv_ref_tier(s->ref[i]);
            if (t == 3) continue;
            size_t rb = t == BE_T2 ? r->t2_bytes : r->exact_bytes;
            if (kv_host_pool(kv, t)) memcpy(be_kv_record(&kv->pools, s->ref[i], l), row, rb);
            else exact_get(row, r->exact_fmt, k + (size_t)d * kd, v + (size_t)d * kd, kd), d++;
            row += rb;
        }
        if (nd) {
            kv_fence(kv, l);
            kv->be->ops->kv_write(kv->be, &kv->pools, l, dev, nd, k, v);
        }
    }
    free(dev), free(k), free(v);
    kv_note_t0_peak(kv, s);
    kv->tables_gen++;
    if (kv_ops_ranked(kv->ops)) {
        kv_retier_one(kv, s); /* to its budget and protection, as a take-over would */
        kv_complete_batch(kv);
    }
    return 0;
}
