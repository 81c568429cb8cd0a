/* kv_view.c — what attention reads. Each sequence keeps a slot table `att` beside its true locations
 * `ref`: they agree except for positions read through STAGE (T2 where the backend cannot read it in
 * place or stage_t2 asks, dequantised there: a GPU; T1 too with --staged, the data path a GPU needs),
 * which read the STAGE slot that mirrors their true slot (kv_stage_slot) for as long as they stay in
 * such a tier. The CPU backend reads T2 records where they lie (be_ops.attn_t2_fmts), so there its T2
 * positions read no stage slot. Before a layer's attention kv_layer_begin fences the layer and copies
 * that layer's rows of every staged position of the batch into their stage slots (the STAGE pool is
 * layer-less), in STAGE slot order: slots consecutive in T1 (or T2) are consecutive in STAGE, so the
 * copies merge into as few runs as the staged slots' ranges allow (long ones go to a GPU's copy
 * engines) and a slot read by several sequences is copied once. A call that
 * reads T1 in place although the cache stages it (KV_T1_IN_PLACE: split attention's decode steps)
 * stages no T1 row and gets tables with T1 positions at their true slots (att_ip, built from att
 * and ref once per change of the tables); its T1 positions keep their stage slots meanwhile.
 * kv_view_layer builds host row pointers from the same tables, for tests and host readers (T2 rows
 * read in place are decoded into the view's own buffer); the baselines read f32 keys through the
 * backend's kv_read. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/half.h"
#include "kv/kv_scores.h"
#include "kv/kv_view.h"

/* Slot i of T1 or T2 sits at the same place of the STAGE chunk that mirrors its chunk (kv_pool.c adds
 * one as the tier grows: with both tiers staged, STAGE holds their chunks in the order they came). */
int32_t kv_stage_slot(const kv_cache *kv, int32_t ref) {
    int32_t i = BE_SLOT_IDX(ref), k = kv->stage_chunk[BE_SLOT_TIER(ref) - BE_T1][i >> KV_CHUNK_SHIFT];
    TKV_ASSERT(k >= 0);
    return BE_SLOT(BE_STAGE, (k << KV_CHUNK_SHIFT) | (i & ((1 << KV_CHUNK_SHIFT) - 1)));
}

/* kv_stage_slot's inverse: the true slot a STAGE slot mirrors */
static int32_t stage_source(const kv_cache *kv, int32_t stage_idx) {
    return kv->stage_src[stage_idx >> KV_CHUNK_SHIFT] + (stage_idx & ((1 << KV_CHUNK_SHIFT) - 1));
}

void kv_att_update(kv_cache *kv, kv_seq *s, int pos) {
    int32_t r = s->ref[pos];
    s->att[pos] = kv_stage_mirrors(kv, kv_ref_tier(r)) ? kv_stage_slot(kv, r) : r; /* no tier of NONE mirrors */
}

void kv_set_keep(const kv_cache *kv, kv_seq *s, int pos, uint8_t v) {
    if (!s->keep) return;
    size_t stride = (size_t)kv_keep_stride(kv);
    for (size_t r = 0; r < (size_t)kv->o.n_layer * kv->o.n_head_kv; r++) s->keep[r * stride + pos] = v;
}

static const uint8_t *attn_keep(const kv_cache *kv, const kv_seq *s, int layer) {
    return s->keep_used ? s->keep + (size_t)layer * kv->o.n_head_kv * (size_t)kv_keep_stride(kv) : NULL;
}

/* The tables_gen of one table (backend.h: equal values promise equal slot tables, lengths and keep
 * masks): a new value when the cache's tables changed, the tokens' sequences or positions differ
 * from the last table's, or (with keep masks, which differ per layer) the layer does. Values are
 * unique in the process, so caches sharing a backend never hand it one another's value. */
static uint64_t table_gen(kv_cache *kv, int layer, const int *seq, const int *pos, int n, int masks, kv_t1_read how) {
    static _Atomic uint64_t next = 1;
    kv_attn_memo *m = &kv->att_memo;
    int kl = masks ? layer : -1;
    int same = m->gen && m->kv_gen == kv->tables_gen && m->n == n && m->layer == kl && m->how == how;
    for (int i = 0; i < n && same; i++) same = m->seq[i] == seq[i] && m->pos[i] == pos[i];
    if (!same) {
        m->gen = atomic_fetch_add(&next, 1);
        m->kv_gen = kv->tables_gen, m->n = n, m->layer = kl, m->how = how;
        memcpy(m->seq, seq, (size_t)n * sizeof *seq);
        memcpy(m->pos, pos, (size_t)n * sizeof *pos);
    }
    return m->gen;
}

/* s's table with T1 positions at their true slots (only where T1 is staged; else att is that table) */
static const int32_t *in_place_table(kv_cache *kv, kv_seq *s) {
    if (!kv->o.staged) return s->att;
    if (!s->att_ip) s->att_ip = tkv_xmalloc((size_t)s->n_ctx * sizeof *s->att_ip), s->att_ip_gen = 0;
    if (s->att_ip_gen != kv->tables_gen + 1) {
        for (int p = 0; p < s->len; p++) {
            int32_t r = s->ref[p];
            s->att_ip[p] = r != BE_SLOT_NONE && BE_SLOT_TIER(r) == BE_T1 ? r : s->att[p];
        }
        s->att_ip_gen = kv->tables_gen + 1;
    }
    return s->att_ip;
}

void kv_attn_table(kv_cache *kv, int layer, const int *seq, const int *pos, int n, kv_t1_read how, be_attn *a) {
    kv_attn_memo *m = &kv->att_memo;
    if (n > m->cap) {
        int c = n > 2 * m->cap ? n : 2 * m->cap;
        free(m->slots), free(m->keep), free(m->n_pos), free(m->seq), free(m->pos);
        m->slots = tkv_xcalloc((size_t)c, sizeof *m->slots);
        m->keep = tkv_xcalloc((size_t)c, sizeof *m->keep);
        m->n_pos = tkv_xcalloc((size_t)c, sizeof *m->n_pos);
        m->seq = tkv_xcalloc((size_t)c, sizeof *m->seq);
        m->pos = tkv_xcalloc((size_t)c, sizeof *m->pos);
        m->cap = c, m->gen = 0;
    }
    int masks = 0, used = 0;
    for (int i = 0; i < n; i++) {
        kv_seq *s = kv_get_seq(kv, seq[i]);
        TKV_ASSERT(pos[i] >= 0 && pos[i] < s->len);
        used |= kv_weights_used(kv, s, pos[i]);
        m->slots[i] = how == KV_T1_IN_PLACE ? in_place_table(kv, s) : s->att;
        m->keep[i] = attn_keep(kv, s, layer);
        m->n_pos[i] = pos[i] + 1;
        masks |= m->keep[i] != NULL;
    }
    a->n_tok = n;
    a->layer = layer;
    a->pools = &kv->pools;
    a->slots = m->slots;
    a->n_pos = m->n_pos;
    a->keep = m->keep;
    a->keep_stride = kv_keep_stride(kv);
    /* no weights where nothing reads them: a prompt chunk of a ranked policy without prefill
     * observations (its attention then writes none, and off the CPU none come back) */
    a->mass_mode = used ? BE_MASS_HEADS : BE_MASS_NONE;
    a->tables_gen = table_gen(kv, layer, seq, pos, n, masks, how);
}

void kv_attn_mass(kv_cache *kv, int layer, const int *seq, const int *pos, int n, const float *w, int stride) {
    kv_observe_batch(kv, layer, seq, pos, n, w, stride);
}

/* Marks the stage slot of every staged position of s (T1's only when `t1` is set) in kv->stage_mark;
 * returns how many it marked first. */
static int mark_stage(kv_cache *kv, const kv_seq *s, int t1) {
    int n = 0;
    for (int p = 0; p < s->len; p++) {
        int32_t a = s->att[p];
        if (a == BE_SLOT_NONE || BE_SLOT_TIER(a) != BE_STAGE) continue;
        if (!t1 && BE_SLOT_TIER(s->ref[p]) == BE_T1) continue;
        int32_t i = BE_SLOT_IDX(a);
        uint64_t bit = (uint64_t)1 << (i & 63);
        if (kv->stage_mark[i >> 6] & bit) continue;
        kv->stage_mark[i >> 6] |= bit;
        n++;
    }
    return n;
}

/* stage_moves for these sequences and this T1 read, built unless the last one stands: the marked
 * stage slots in increasing order, each with the true slot it mirrors (the marks cleared again) */
static void stage_list(kv_cache *kv, const int *seqs, int n_seqs, kv_t1_read how) {
    kv_stage_memo *m = &kv->stage_memo;
    if (m->valid && m->kv_gen == kv->tables_gen && m->how == how && m->n_seqs == n_seqs &&
        !memcmp(m->seqs, seqs, (size_t)n_seqs * sizeof *seqs))
        return;
    if (n_seqs > m->cap) {
        free(m->seqs), free(m->count);
        m->seqs = tkv_xmalloc((size_t)n_seqs * sizeof *m->seqs);
        m->count = tkv_xmalloc((size_t)n_seqs * sizeof *m->count);
        m->cap = n_seqs;
    }
    int64_t words = (kv->tp[BE_STAGE].n_slots + 63) / 64;
    if (words > kv->cap_stage_mark) {
        free(kv->stage_mark);
        kv->stage_mark = tkv_xcalloc((size_t)words, sizeof *kv->stage_mark);
        kv->cap_stage_mark = words;
    }
    int n = 0;
    for (int i = 0; i < n_seqs; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = seqs[j] == seqs[i];
        m->seqs[i] = seqs[i];
        m->count[i] = dup ? 0 : mark_stage(kv, kv_get_seq(kv, seqs[i]), how != KV_T1_IN_PLACE); /* a repeat: 0 rows */
        n += m->count[i];
    }
    if (n > kv->cap_stage_moves) {
        int c = n > 2 * kv->cap_stage_moves ? n : 2 * kv->cap_stage_moves;
        free(kv->stage_moves);
        kv->stage_moves = tkv_xmalloc((size_t)c * sizeof *kv->stage_moves);
        kv->cap_stage_moves = c;
    }
    int k = 0;
    for (int64_t w = 0; w < words && k < n; w++) { /* past the last mark every word is 0 already */
        for (uint64_t b = kv->stage_mark[w]; b; b &= b - 1) {
            int32_t i = (int32_t)(w * 64 + __builtin_ctzll(b));
            kv->stage_moves[k++] = (be_move){stage_source(kv, i), BE_SLOT(BE_STAGE, i)};
        }
        kv->stage_mark[w] = 0;
    }
    TKV_ASSERT(k == n);
    m->n = n, m->n_seqs = n_seqs, m->kv_gen = kv->tables_gen, m->how = how, m->valid = 1;
    m->builds++;
}

static void run_stage(kv_cache *kv, int n, int layer) {
    if (n > 0) kv->be->ops->copy_moves(kv->be, &kv->pools, kv->stage_moves, n, layer);
    if (n > 0 || kv->batch.active) kv->be->ops->copy_wait(kv->be, layer);
}

/* (the list it builds is the one kv_layer_begin takes: the memo stands for the call) */
int kv_step_may_wait(kv_cache *kv, const int *seqs, int n_seqs, kv_t1_read how) {
    if (kv->batch.active) return 1;
    if (kv->tp[BE_STAGE].n_slots == 0) return 0;
    stage_list(kv, seqs, n_seqs, how);
    return kv->stage_memo.n > 0;
}

void kv_layer_begin(kv_cache *kv, const int *seqs, int n_seqs, int layer, kv_t1_read how) {
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer);
    if (kv->batch.active && kv->xfer) kv->retired.fence_wait_seconds += xfer_wait_layer(kv->xfer, layer);
    int n = 0;
    if (kv->tp[BE_STAGE].n_slots > 0) {
        stage_list(kv, seqs, n_seqs, how);
        n = kv->stage_memo.n;
        for (int i = 0; i < kv->stage_memo.n_seqs; i++)
            kv_get_seq(kv, kv->stage_memo.seqs[i])->c.bytes_staged += kv->stage_memo.count[i] * kv->stage_bytes_layer;
    }
    run_stage(kv, n, layer);
}

/* Position p's T2 row pair of one layer as a staged row would hold it (the codec's f32, rounded to the
 * cache's element type as copy_moves rounds it), in the view's own buffer: views are for tests and
 * host readers, never in a decode step. */
static const char *view_t2_row(kv_cache *kv, kv_seq *s, int p, int layer) {
    size_t kd = (size_t)kv->kv_dim, el = kv->o.f16 ? 2 : 4;
    size_t rows = (size_t)s->n_ctx * 2 * kd * el; /* then one f32 row pair to decode into */
    if (!s->view_t2) s->view_t2 = tkv_xmalloc(rows + 2 * kd * sizeof(float));
    char *row = (char *)s->view_t2 + (size_t)p * 2 * kd * el;
    float *kf = (float *)(void *)((char *)s->view_t2 + rows);
    kv->be->ops->kv_read(kv->be, &kv->pools, layer, &s->ref[p], 1, kf, kf + kd);
    if (kv->o.f16)
        for (size_t i = 0; i < 2 * kd; i++) ((uint16_t *)(void *)row)[i] = tkv_f32_to_f16(kf[i]);
    else
        memcpy(row, kf, 2 * kd * sizeof(float));
    return row;
}

void kv_view_layer(kv_cache *kv, int seq, int layer, kv_view *out) {
    kv_seq *s = kv_get_seq(kv, seq);
    TKV_ASSERT(layer >= 0 && layer < kv->o.n_layer);
    kv_layer_begin(kv, &seq, 1, layer, KV_T1_AS_OPENED);
    kv_host_sync(kv); /* the rows are read here, by the host: the layer's copies done, not only fenced */
    size_t kd = (size_t)kv->kv_dim, kb = kd * (kv->o.f16 ? 2 : 4);
    for (int p = 0; p < s->len; p++) {
        int32_t a = s->att[p];
        const char *k = NULL, *v = NULL;
        if (a != BE_SLOT_NONE && BE_SLOT_TIER(a) == BE_T2) /* read in place by attention: decoded here */
            k = view_t2_row(kv, s, p, layer), v = k + kb;
        else if (a != BE_SLOT_NONE) {
            TKV_ASSERT(kv_host_pool(kv, BE_SLOT_TIER(a)));
            k = be_kv_record(&kv->pools, a, layer);
            v = k + kb;
        }
        if (kv->o.f16) s->hk[p] = (const uint16_t *)(const void *)k, s->hv[p] = (const uint16_t *)(const void *)v;
        else s->vk[p] = (const float *)(const void *)k, s->vv[p] = (const float *)(const void *)v;
    }
    memset(out, 0, sizeof *out);
    if (kv->o.f16) out->k16 = s->hk, out->v16 = s->hv;
    else out->k = s->vk, out->v = s->vv;
    out->keep = attn_keep(kv, s, layer);
    out->keep_stride = out->keep ? kv_keep_stride(kv) : 0;
    out->n = s->len;
}
