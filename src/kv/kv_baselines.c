/* kv_baselines.c — the eviction baselines (StreamingLLM, H2O, R-KV, SnapKV) as KV policies: the
 * hooks of kv_policy.h over the pure selection functions of baselines.h. docs/BASELINES.md gives
 * the methods, their constants and the "integration" rules followed here.
 *
 * What this file owns, per sequence (allocated at kv_init for n_ctx, never inside a step):
 *   - each method's state per (layer, kv head) "row": H2O's accumulators, R-KV's importance, the
 *     row's own keep mask (the method's truth) and the number of rows still holding each position;
 *   - for the prompt-end selections (SnapKV, R-KV) a ring of the raw attention of the last `window`
 *     prompt queries. The KV does not know where a prompt ends until the first generated token
 *     arrives, and a prefill chunk may be shorter than the window, so the window's queries are kept
 *     (only queries within `window` of the current chunk's end are copied). Memory:
 *     window * n_layer * n_head * n_ctx floats (R-KV 8, SnapKV 32).
 *
 * How a step maps to the engine (kv.c calls step at the end of the prompt, i.e. when the first
 * generated token is appended, and after every decode step):
 *   - the method decides per row; rows it drops are cleared in kv.c's per-layer keep masks (the
 *     views skip them); a token dropped by every row is evicted whole (T3) and its T0 slot freed;
 *   - the budget is kv.c's T0 budget in tokens (--hbm-ratio share of the current length, or
 *     --hbm-budget bytes / kv_token_bytes), the same number for every row, raised to the method's
 *     floor when below it (counted in budget_raised);
 *   - the step reports the limit its published rule allows (kv_step_io.limit): StreamingLLM and
 *     H2O their budget; R-KV its budget at the last compression plus the tokens since (its
 *     128-token buffer); SnapKV its prompt budget plus every decode token. kv_check holds every row
 *     to it.
 * One prompt per sequence: prompt tokens appended after generation started are scheduled like
 * generated ones (R-KV) or never compressed (SnapKV). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/baselines.h"
#include "kv/kv_hooks.h"
#include "kv/kv_policy.h"

typedef struct {
    kv_policy_kind kind;
    int n_layer, n_head, n_head_kv, group, head_dim, n_ctx, rows, sinks;
    uint8_t *mask;       /* [rows][n_ctx] the method's keep mask per row (1 = held); R-KV, SnapKV */
    int32_t *holders;    /* [n_ctx] rows holding each position */
    int32_t *dropped;    /* [rows] positions each row has dropped */
    int n_evicted;       /* whole tokens evicted */
    uint8_t *tmp;        /* [n_ctx] a selection's output */
    kv_bl_h2o *h2o;      /* [rows] */
    kv_bl_rkv_opts ro;
    kv_bl_snapkv_opts so;
    float *imp;          /* [rows][n_ctx] R-KV importance of the compression point being observed */
    int *imp_point;      /* [n_layer] the point each layer's imp rows belong to (0: none) */
    int ring_w;          /* prompt queries kept (the method's window), 0: no ring */
    float *ring;         /* [ring_w][n_layer][n_head][n_ctx] raw attention of the last prompt queries */
    int32_t *ring_q;     /* [ring_w] query position in each slot, -1 empty */
    float *acc;          /* [group][n_ctx] SnapKV window sums of one row */
    void *scratch;
    size_t scratch_bytes;
    int n_prompt;        /* 0 until the prompt end was seen */
    int protect;         /* --protect-prompt: the prompt is never evicted; the method's budget is what is
                            left beside it and it chooses among the generated tokens only */
    int pp_floor;        /* protected: the generated tokens always held, evict's recent window
                            (max(1, window)), so the setting runs at exactly evict's budget */
    int n_c, b_c;        /* R-KV: last compression point and its budget; SnapKV: prompt end and budget */
} bl_state;

static void bl_free(void *p) {
    bl_state *b = p;
    if (!b) return;
    for (int r = 0; b->h2o && r < b->rows; r++) kv_bl_h2o_free(&b->h2o[r]);
    free(b->h2o); free(b->mask); free(b->holders); free(b->dropped); free(b->tmp); free(b->imp);
    free(b->imp_point); free(b->ring); free(b->ring_q); free(b->acc); free(b->scratch);
    free(b);
}

static void bl_reset(void *p) {
    bl_state *b = p;
    size_t nc = (size_t)b->n_ctx;
    if (b->mask) memset(b->mask, 1, (size_t)b->rows * nc);
    for (size_t j = 0; j < nc; j++) b->holders[j] = b->rows;
    memset(b->dropped, 0, (size_t)b->rows * sizeof *b->dropped);
    for (int r = 0; b->h2o && r < b->rows; r++) kv_bl_h2o_reset(&b->h2o[r]);
    if (b->imp_point) memset(b->imp_point, 0, (size_t)b->n_layer * sizeof *b->imp_point);
    for (int i = 0; i < b->ring_w; i++) b->ring_q[i] = -1;
    b->n_evicted = b->n_prompt = b->n_c = b->b_c = 0;
}

static void *bl_init(const kv_options *o, char *err, size_t errlen) {
    bl_state *b = tkv_xcalloc(1, sizeof *b);
    b->kind = o->policy;
    b->n_layer = o->n_layer;
    b->n_head = o->n_head;
    b->n_head_kv = o->n_head_kv;
    b->group = o->n_head / o->n_head_kv;
    b->head_dim = o->head_dim;
    b->n_ctx = o->n_ctx;
    b->rows = o->n_layer * o->n_head_kv;
    b->sinks = o->sinks;
    b->protect = o->protect_prompt;
    b->pp_floor = o->window > 1 ? o->window : 1;
    /* SnapKV compresses only the prompt: with the prompt protected it is run as the R-KV paper's
     * decode-time SnapKV (R-KV's schedule and window, importance only: lambda 1) */
    if (b->protect && b->kind == KV_POLICY_SNAPKV) b->kind = KV_POLICY_RKV;
    size_t nc = (size_t)o->n_ctx, rows = (size_t)b->rows;
    if (b->group > KV_BL_MAX_GROUP) {
        tkv_errf(err, errlen, "kv: %s: %d query heads per kv head, at most %d supported", kv_policy_name(o->policy),
                 b->group, KV_BL_MAX_GROUP);
        free(b);
        return NULL;
    }
    b->holders = tkv_xcalloc(nc, sizeof *b->holders);
    b->dropped = tkv_xcalloc(rows, sizeof *b->dropped);
    b->tmp = tkv_xcalloc(nc, 1);
    switch (b->kind) {
    case KV_POLICY_H2O:
        b->h2o = tkv_xcalloc(rows, sizeof *b->h2o);
        for (size_t r = 0; r < rows; r++)
            if (kv_bl_h2o_init(&b->h2o[r], o->n_ctx, err, errlen)) { bl_free(b); return NULL; }
        break;
    case KV_POLICY_RKV:
        kv_bl_rkv_opts_default(&b->ro);
        if (o->policy == KV_POLICY_SNAPKV) b->ro.lambda = 1.0;
        b->mask = tkv_xcalloc(rows * nc, 1);
        b->imp = tkv_xcalloc(rows * nc, sizeof *b->imp);
        b->imp_point = tkv_xcalloc((size_t)o->n_layer, sizeof *b->imp_point);
        b->ring_w = b->ro.window;
        b->scratch_bytes = kv_bl_rkv_scratch_bytes(o->n_ctx);
        break;
    case KV_POLICY_SNAPKV:
        kv_bl_snapkv_opts_default(&b->so);
        b->mask = tkv_xcalloc(rows * nc, 1);
        b->acc = tkv_xcalloc((size_t)b->group * nc, sizeof *b->acc);
        b->ring_w = b->so.window;
        b->scratch_bytes = kv_bl_snapkv_scratch_bytes(o->n_ctx);
        break;
    default:
        break;
    }
    if (b->ring_w) {
        b->ring = tkv_xmalloc((size_t)b->ring_w * (size_t)o->n_layer * (size_t)o->n_head * nc * sizeof(float));
        b->ring_q = tkv_xcalloc((size_t)b->ring_w, sizeof *b->ring_q);
    }
    if (b->scratch_bytes) b->scratch = tkv_xmalloc(b->scratch_bytes);
    bl_reset(b);
    return b;
}

/* ---- shared ---- */

static float *ring_row(const bl_state *b, int slot, int layer, int h) {
    return b->ring + (((size_t)slot * b->n_layer + layer) * b->n_head + h) * (size_t)b->n_ctx;
}

/* Keeps the raw attention of a prompt query that may belong to the prompt's last `ring_w` queries:
 * the prompt ends at or after the current chunk's end (view->n). */
static void ring_put(bl_state *b, int layer, int q_pos, const float *att, int att_stride, int n) {
    if (b->n_prompt || q_pos < n - b->ring_w) return;
    int slot = q_pos % b->ring_w;
    for (int h = 0; h < b->n_head; h++)
        memcpy(ring_row(b, slot, layer, h), att + (size_t)h * att_stride, (size_t)(q_pos + 1) * sizeof(float));
    b->ring_q[slot] = q_pos;
}

/* Row r now keeps src[0..n): clears what it dropped in kv.c's mask, evicts tokens no row holds. */
static void sync_row(bl_state *b, kv_step_io *io, int r, const uint8_t *src) {
    uint8_t *row = io->keep + (size_t)r * io->stride;
    for (int j = 0; j < io->n; j++) {
        if (!row[j] || src[j]) continue;
        row[j] = 0;
        b->dropped[r]++;
        if (--b->holders[j] == 0) {
            io->evict[j] = 1;
            b->n_evicted++;
        }
    }
    io->keep_used = 1;
}

static int64_t held_rows(const bl_state *b, int n) {
    int64_t h = (int64_t)b->rows * n;
    for (int r = 0; r < b->rows; r++) h -= b->dropped[r];
    return h;
}

/* The method's floor: budget raised to `floor` when the method would have to cut below it. */
static int floor_budget(kv_step_io *io, int budget, int floor, int n) {
    if (budget >= floor || budget >= n) return budget;
    io->raised = 1;
    return floor;
}

/* With the prompt protected: the budget left for generated tokens beside the prompt, raised to the
 * larger of the method's floor and evict's protected window (counted in raised): the same T0 budget as
 * evict's at every step, max(budget, prompt + window), so only the choice of tokens differs. */
static int gen_budget(const bl_state *bs, kv_step_io *io, int floor) {
    if (floor < bs->pp_floor) floor = bs->pp_floor;
    int b = io->t0_budget - io->n_prompt;
    if (b < floor) {
        if (io->t0_budget < io->n) io->raised = 1;
        b = floor;
    }
    return b;
}

/* ---- StreamingLLM: sinks + recent, whole tokens ---- */

static int streaming_step(void *p, kv_step_io *io) {
    bl_state *b = p;
    int n = io->n, budget = floor_budget(io, io->t0_budget, b->sinks + 1, n), sinks = b->sinks;
    if (b->protect) { /* the prompt takes the sinks' place: held whole, the rest the most recent */
        sinks = io->n_prompt > b->sinks ? io->n_prompt : b->sinks;
        budget = sinks + gen_budget(b, io, 1);
    }
    if (kv_bl_streaming_select(n, budget, sinks, b->tmp, io->err, io->errlen)) return -1;
    for (int j = 0; j < n; j++)
        if (!b->tmp[j] && io->tier[j] != KV_T3 && !io->evict[j]) {
            io->evict[j] = 1;
            b->n_evicted++;
        }
    io->budget = io->limit = budget;
    io->held_rows = (int64_t)(n - b->n_evicted) * b->rows;
    return 0;
}

/* ---- H2O: accumulated attention, heavy hitters + recent half, per row ---- */

static void h2o_observe(void *p, int layer, int q_pos, int is_prompt, const float *att, int att_stride, int n) {
    (void)is_prompt; (void)n;
    bl_state *b = p;
    for (int g = 0; g < b->n_head_kv; g++)
        kv_bl_h2o_accumulate(&b->h2o[layer * b->n_head_kv + g], att + (size_t)g * b->group * att_stride, att_stride,
                             b->group, q_pos + 1, KV_BL_GQA_MEAN);
}

static int h2o_step(void *p, kv_step_io *io) {
    bl_state *b = p;
    int n = io->n, budget = floor_budget(io, io->t0_budget, 1, n);
    int recent = kv_bl_h2o_recent(budget, 0.5);
    if (b->protect) { /* prompt positions score +inf: never the lowest, so never evicted */
        int g = gen_budget(b, io, 1);
        recent = kv_bl_h2o_recent(g, 0.5);
        budget = io->n_prompt + g;
    }
    for (int r = 0; r < b->rows; r++) {
        kv_bl_h2o *h = &b->h2o[r];
        TKV_ASSERT(h->n == n); /* every query up to n - 1 was observed */
        for (int j = 0; b->protect && j < io->n_prompt && j < n; j++) h->score[j] = INFINITY;
        int ev = kv_bl_h2o_enforce(h, budget, recent, io->err, io->errlen);
        if (ev < 0) return -1;
        if (ev > 0) sync_row(b, io, r, h->keep);
    }
    io->budget = io->limit = budget;
    io->held_rows = held_rows(b, n);
    return 0;
}

/* ---- R-KV: importance (window attention) - redundancy (key cosine), every 128 generated tokens ---- */

static float *imp_row(const bl_state *b, int r) { return b->imp + (size_t)r * b->n_ctx; }
static uint8_t *mask_row(const bl_state *b, int r) { return b->mask + (size_t)r * b->n_ctx; }

static void rkv_observe(void *p, int layer, int q_pos, int is_prompt, const float *att, int att_stride, int n) {
    bl_state *b = p;
    if (!b->n_prompt) { /* still in the first prompt: its end is not known yet */
        if (is_prompt) ring_put(b, layer, q_pos, att, att_stride, n);
        return;
    }
    int n_c = kv_bl_rkv_window_end(&b->ro, q_pos, b->n_prompt);
    if (!n_c) return;
    if (b->imp_point[layer] != n_c) { /* the first window query of this point */
        for (int g = 0; g < b->n_head_kv; g++)
            memset(imp_row(b, layer * b->n_head_kv + g), 0, (size_t)b->n_ctx * sizeof(float));
        b->imp_point[layer] = n_c;
    }
    for (int g = 0; g < b->n_head_kv; g++) {
        int r = layer * b->n_head_kv + g;
        kv_bl_rkv_observe(&b->ro, imp_row(b, r), att + (size_t)g * b->group * att_stride, att_stride, b->group,
                          n_c - b->ro.window, mask_row(b, r));
    }
}

static int rkv_compress(bl_state *b, kv_step_io *io, int n, int budget) {
    int w = b->ro.window, np = b->protect ? b->n_prompt : 0;
    if (n == b->n_prompt && n > w) /* prompt end: importance from the ring */
        for (int l = 0; l < b->n_layer; l++)
            for (int g = 0; g < b->n_head_kv; g++) {
                float *imp = imp_row(b, l * b->n_head_kv + g);
                memset(imp, 0, (size_t)b->n_ctx * sizeof(float));
                for (int q = n - w; q < n; q++) {
                    int slot = q % w;
                    TKV_ASSERT(b->ring_q[slot] == q);
                    kv_bl_rkv_observe(&b->ro, imp, ring_row(b, slot, l, g * b->group), b->n_ctx, b->group, n - w, NULL);
                }
            }
    for (int l = 0; l < b->n_layer; l++) {
        int need = 0; /* (protected: the prompt is outside the method's mask and budget) */
        for (int g = 0; g < b->n_head_kv; g++) need |= n - np - b->dropped[l * b->n_head_kv + g] > budget;
        if (!need) continue;
        TKV_ASSERT(n == b->n_prompt || b->imp_point[l] == n);
        const float *const *keys = io->keys_layer(io->view_ctx, l);
        for (int g = 0; g < b->n_head_kv; g++) {
            int r = l * b->n_head_kv + g;
            if (n - np - b->dropped[r] <= budget) continue;
            if (kv_bl_rkv_select(&b->ro, n, budget, imp_row(b, r), keys, g * b->head_dim, b->head_dim, mask_row(b, r),
                                 b->tmp, b->scratch, b->scratch_bytes, io->err, io->errlen))
                return -1;
            memcpy(mask_row(b, r), b->tmp, (size_t)n);
            memset(b->tmp, 1, (size_t)np); /* the prompt stays, outside the method's mask */
            sync_row(b, io, r, b->tmp);
        }
    }
    return 0;
}

static int rkv_step(void *p, kv_step_io *io) {
    bl_state *b = p;
    int n = io->n, budget = io->t0_budget;
    if (!b->n_prompt && n == io->n_prompt) {
        b->n_prompt = n;
        /* protected: the prompt leaves the method's mask (never a candidate, nor in its
         * renormalisation); nothing to compress at the prompt end */
        for (int r = 0; b->protect && r < b->rows; r++) memset(mask_row(b, r), 0, (size_t)n);
    }
    if (b->protect) {
        int np = b->n_prompt, g = gen_budget(b, io, b->ro.window + 1);
        if (np && n > np && kv_bl_rkv_due(&b->ro, n, np)) {
            if (rkv_compress(b, io, n, g)) return -1;
            b->n_c = n;
            b->b_c = g;
        }
        io->budget = np + g;
        io->limit = b->n_c ? np + b->b_c + (n - b->n_c) : n;
        io->held_rows = held_rows(b, n);
        return 0;
    }
    if (b->n_prompt && kv_bl_rkv_due(&b->ro, n, b->n_prompt)) {
        budget = floor_budget(io, budget, b->ro.window + 1, n);
        if (rkv_compress(b, io, n, budget)) return -1;
        b->n_c = n;
        b->b_c = budget;
    } else if (budget <= b->ro.window && budget < n) {
        budget = b->ro.window + 1; /* the budget its next compression will use (raised then) */
    }
    io->budget = budget;
    io->limit = b->n_c ? b->b_c + (n - b->n_c) : n;
    io->held_rows = held_rows(b, n);
    return 0;
}

/* ---- SnapKV: the prompt's last 32 queries vote once, at the prompt end ---- */

static void snapkv_observe(void *p, int layer, int q_pos, int is_prompt, const float *att, int att_stride, int n) {
    bl_state *b = p;
    if (b->kind == KV_POLICY_RKV) { /* protected prompt: decode-time SnapKV */
        rkv_observe(p, layer, q_pos, is_prompt, att, att_stride, n);
        return;
    }
    if (is_prompt) ring_put(b, layer, q_pos, att, att_stride, n);
}

static int snapkv_step(void *p, kv_step_io *io) {
    bl_state *b = p;
    if (b->kind == KV_POLICY_RKV) return rkv_step(p, io); /* protected prompt: decode-time SnapKV */
    int n = io->n, w = b->so.window;
    if (!b->n_prompt && n == io->n_prompt) {
        b->n_prompt = n;
        int budget = floor_budget(io, io->t0_budget, w + 1, n);
        for (int r = 0; r < b->rows && n > budget; r++) {
            int l = r / b->n_head_kv, g = r % b->n_head_kv, np = n - w;
            for (int h = 0; h < b->group; h++) { /* per q head: sum over the window's queries */
                float *a = b->acc + (size_t)h * b->n_ctx;
                memset(a, 0, (size_t)np * sizeof(float));
                for (int q = n - w; q < n; q++) {
                    int slot = q % w;
                    TKV_ASSERT(b->ring_q[slot] == q);
                    kv_bl_snapkv_observe(a, b->n_ctx, ring_row(b, slot, l, g * b->group + h), b->n_ctx, 1, np);
                }
            }
            if (kv_bl_snapkv_select(&b->so, n, budget, b->acc, b->n_ctx, b->group, b->tmp, b->scratch, b->scratch_bytes,
                                    io->err, io->errlen))
                return -1;
            sync_row(b, io, r, b->tmp);
            memcpy(mask_row(b, r), b->tmp, (size_t)n);
        }
        b->n_c = n;
        b->b_c = budget;
    }
    io->budget = io->t0_budget;
    io->limit = b->n_c ? b->b_c + (n - b->n_c) : n;
    io->held_rows = held_rows(b, n);
    return 0;
}

static const kv_policy_hooks hooks_streaming = {bl_init, bl_free, bl_reset, NULL, streaming_step};
static const kv_policy_hooks hooks_h2o = {bl_init, bl_free, bl_reset, h2o_observe, h2o_step};
static const kv_policy_hooks hooks_rkv = {bl_init, bl_free, bl_reset, rkv_observe, rkv_step};
static const kv_policy_hooks hooks_snapkv = {bl_init, bl_free, bl_reset, snapkv_observe, snapkv_step};

/* The baselines' tables: their own scores and budgets, whole tokens (StreamingLLM) or per (layer,
 * kv head) rows evicted by their hooks; no T1 or T2. */
const kv_policy_ops kv_policy_streaming = {
    .kind = KV_POLICY_STREAMING, .name = "streaming", .tiered = 1, .own_budget = 1, .overflow_tier = KV_T3,
    .hooks = &hooks_streaming, .limit_rule = "nothing",
};
const kv_policy_ops kv_policy_h2o = {
    .kind = KV_POLICY_H2O, .name = "h2o", .tiered = 1, .own_budget = 1, .overflow_tier = KV_T3, .head_masks = 1,
    .hooks = &hooks_h2o, .limit_rule = "nothing",
};
const kv_policy_ops kv_policy_rkv = {
    .kind = KV_POLICY_RKV, .name = "rkv", .tiered = 1, .own_budget = 1, .overflow_tier = KV_T3, .head_masks = 1,
    .hooks = &hooks_rkv, .limit_rule = "tokens since the last compression, <= 128",
};
const kv_policy_ops kv_policy_snapkv = {
    .kind = KV_POLICY_SNAPKV, .name = "snapkv", .tiered = 1, .own_budget = 1, .overflow_tier = KV_T3, .head_masks = 1,
    .hooks = &hooks_snapkv, .limit_rule = "decode tokens, never evicted",
};

/* ---- a hook policy's step applied to the cache ---- */

typedef struct {
    kv_cache *kv;
    kv_seq *s;
} step_ctx;

/* The hooks read keys as f32 (R-KV's similarities), through the backend: an f16 cache widens them
 * exactly. Evicted positions are NULL. */
static const float *const *keys_layer(void *ctx, int layer) {
    step_ctx *c = ctx;
    kv_cache *kv = c->kv;
    kv_seq *s = c->s;
    kv_fence(kv, layer);
    int m = 0;
    for (int p = 0; p < s->len; p++)
        if (s->ref[p] != BE_SLOT_NONE) s->order[m++] = s->ref[p];
    if (m) kv->be->ops->kv_read(kv->be, &kv->pools, layer, s->order, m, s->hook_k, NULL);
    for (int p = 0, i = 0; p < s->len; p++)
        s->hook_rows[p] = s->ref[p] == BE_SLOT_NONE ? NULL : s->hook_k + (size_t)(i++) * kv->kv_dim;
    return s->hook_rows;
}

/* Runs a hook policy's step: it may rewrite keep masks and evict whole tokens (T0 -> T3 at once,
 * through the planner like every tier change). */
void kv_policy_step(kv_cache *kv, int seq) {
    kv_seq *s = kv_get_seq(kv, seq);
    const kv_policy_hooks *h = kv->ops->hooks;
    if (!h || !h->step) return;
    char msg[256] = "";
    int len = s->len;
    memset(s->target, 0, (size_t)len);
    for (int i = 0; i < len; i++) s->cur[i] = s->ref[i] == BE_SLOT_NONE ? KV_T3 : (uint8_t)BE_SLOT_TIER(s->ref[i]);
    step_ctx vc = {kv, s};
    kv_step_io io = {len, s->n_prompt, kv_bl_budget(kv, len), kv->o.n_layer, kv->o.n_head_kv, kv->o.n_head, s->cur, s->keep,
                     kv_keep_stride(kv), s->target, s->keep_used, msg, sizeof msg, keys_layer, &vc, 0, 0, 0, 0};
    if (h->step(s->pstate, &io) != 0) {
        fprintf(stderr, "tierkv: policy %s: %s\n", kv->ops->name, msg);
        TKV_ASSERT(!"policy step failed");
    }
    s->keep_used = io.keep_used;
    s->bl_budget = io.budget;
    s->bl_limit = io.limit;
    s->bl_len = len;
    s->bl_held_rows = io.held_rows;
    s->c.budget_raised += io.raised;
    if (io.held_rows * kv_row_bytes(kv) > s->c.peak_held_bytes) s->c.peak_held_bytes = io.held_rows * kv_row_bytes(kv);
    kv_complete_batch(kv);
    int m = 0;
    for (int i = 0; i < len; i++)
        if (s->target[i] && s->ref[i] != BE_SLOT_NONE) s->order[m++] = i;
    if (m) kv_evict_now(kv, s, s->order, m);
}
