/* cuda_plan.c — the CUDA backend's host-side planning (see cuda_plan.h). No CUDA calls; no
 * allocation but the group cache's own copies: every other buffer comes from the caller. */
#include "backend/cuda/cuda_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* ---- moves ---- */

typedef struct {
    uint64_t addr;
    uint64_t idx;
} addr_idx;

static int cmp_addr(const void *a, const void *b) {
    uint64_t x = ((const addr_idx *)a)->addr, y = ((const addr_idx *)b)->addr;
    return (x > y) - (x < y);
}

/* first index of sorted[0..n) with addr >= key */
static int lower_bound(const addr_idx *s, int n, uint64_t key) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s[mid].addr < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static uint64_t rec_addr(const be_kv_pools *p, int32_t r, int layer) {
    TKV_ASSERT(r != BE_SLOT_NONE);
    return (uint64_t)(uintptr_t)be_kv_record(p, r, layer);
}

int cu_runs_of(const be_kv_pools *p, const be_move *mv, int n, int layer, const uint8_t *phase, cu_move_run *out) {
    int n_runs = 0;
    for (int ph = 0; ph < CU_MAX_PHASES; ph++) {
        cu_move_run *cur = NULL;
        int32_t cur_sc = 0, cur_dc = 0; /* the run's chunks: adjacent addresses in two chunks (one
                                            allocation ending where the next begins) are two runs */
        for (int i = 0; i < n; i++) {
            if (phase[i] != ph) continue;
            const be_kv_pool *ps = &p->pool[BE_SLOT_TIER(mv[i].src)], *pd = &p->pool[BE_SLOT_TIER(mv[i].dst)];
            uint64_t s = rec_addr(p, mv[i].src, layer), d = rec_addr(p, mv[i].dst, layer);
            int ts = BE_SLOT_TIER(mv[i].src), td = BE_SLOT_TIER(mv[i].dst);
            int32_t sc = BE_SLOT_IDX(mv[i].src) >> ps->chunk_shift, dc = BE_SLOT_IDX(mv[i].dst) >> pd->chunk_shift;
            if (cur && cur->src_tier == ts && cur->dst_tier == td && sc == cur_sc && dc == cur_dc &&
                s == cur->src + (uint64_t)cur->n * cur->src_bytes && d == cur->dst + (uint64_t)cur->n * cur->dst_bytes) {
                cur->n++;
                continue;
            }
            cur_sc = sc, cur_dc = dc;
            cur = &out[n_runs++];
            cur->src = s, cur->dst = d, cur->n = 1;
            cur->src_bytes = (uint32_t)ps->record_bytes, cur->dst_bytes = (uint32_t)pd->record_bytes;
            cur->src_fmt = (uint8_t)ps->fmt, cur->dst_fmt = (uint8_t)pd->fmt;
            cur->phase = (uint8_t)ph;
            cur->same = ps->fmt == pd->fmt;
            cur->src_tier = (uint8_t)ts, cur->dst_tier = (uint8_t)td;
        }
    }
    return n_runs;
}

int cu_plan_moves(const be_kv_pools *p, const be_move *mv, int n, int layer, cu_move_run *out, uint64_t *ws) {
    if (n <= 0) return 0;
    addr_idx *by_src = (addr_idx *)ws;            /* 2n words */
    uint64_t *phase = ws + 2 * (size_t)n;         /* n words */
    uint8_t *ph8 = (uint8_t *)(ws + 3 * (size_t)n); /* n bytes */
    for (int i = 0; i < n; i++) {
        by_src[i].addr = rec_addr(p, mv[i].src, layer);
        by_src[i].idx = (uint64_t)i;
        phase[i] = 0;
    }
    qsort(by_src, (size_t)n, sizeof *by_src, cmp_addr);
    /* phase(i) = 1 + the largest phase of the moves reading i's destination; a few passes settle it
     * (one per level of the dependency chains) */
    for (int pass = 0;; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            uint64_t d = rec_addr(p, mv[i].dst, layer);
            for (int k = lower_bound(by_src, n, d); k < n && by_src[k].addr == d; k++) {
                int j = (int)by_src[k].idx;
                if (j == i) continue;
                if (phase[i] < phase[j] + 1) {
                    phase[i] = phase[j] + 1;
                    changed = 1;
                }
            }
            if (phase[i] >= CU_MAX_PHASES) return -1;
        }
        if (!changed) break;
        if (pass > CU_MAX_PHASES) return -1;
    }
    for (int i = 0; i < n; i++) ph8[i] = (uint8_t)phase[i];
    return cu_runs_of(p, mv, n, layer, ph8, out);
}

/* 1 when no move can see another: no tier is both read and written, so no move reads a record any
 * move writes, and the destinations strictly increase, so none is written twice. Such a list is one
 * group at phase 0, which the pass below would find in O(n log n): a staging list (T1/T2 to STAGE,
 * in STAGE slot order) is one, checked here in O(n). */
static int independent_moves(const be_move *mv, int n) {
    unsigned read = 0, written = 0;
    for (int i = 0; i < n; i++) {
        read |= 1u << BE_SLOT_TIER(mv[i].src), written |= 1u << BE_SLOT_TIER(mv[i].dst);
        if (i && (uint32_t)mv[i].dst <= (uint32_t)mv[i - 1].dst) return 0;
    }
    return (read & written) == 0;
}

int cu_group_moves(const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase, int *starts,
                   uint64_t *ws) {
    if (n > 0 && independent_moves(mv, n)) {
        memset(phase, 0, (size_t)n);
        starts[0] = 0, starts[1] = n;
        return 1;
    }
    return cu_group_moves_sorted(p, mv, n, layer, phase, starts, ws);
}

/* One pass in list order over the moves, with the records named by small ids (the distinct addresses,
 * sorted). Per id: the group that last wrote it, and the group that last read it with 1 + the largest
 * phase of its readers in that group. A move joins the current group unless it reads or writes a
 * record the group wrote or its phase (1 + the readers' of its destination, all earlier in the group
 * since a later reader would be a read-after-write) reaches CU_MAX_PHASES; a new group starts with it
 * at phase 0. Phases are final when assigned: a move's phase depends on earlier moves only. */
int cu_group_moves_sorted(const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase, int *starts,
                          uint64_t *ws) {
    if (n <= 0) {
        starts[0] = 0;
        return 0;
    }
    size_t n2 = 2 * (size_t)n;
    addr_idx *keys = (addr_idx *)ws;                /* 2n entries: 4n words */
    uint32_t *id = (uint32_t *)(ws + 2 * n2);       /* [2n]: id of move i's source (2i), destination (2i + 1) */
    uint32_t *w_grp = id + n2, *r_grp = w_grp + n2, *r_ph = r_grp + n2; /* [ids <= 2n] each */
    for (int i = 0; i < n; i++) {
        keys[2 * i].addr = rec_addr(p, mv[i].src, layer), keys[2 * i].idx = 2 * (uint64_t)i;
        keys[2 * i + 1].addr = rec_addr(p, mv[i].dst, layer), keys[2 * i + 1].idx = 2 * (uint64_t)i + 1;
    }
    qsort(keys, n2, sizeof *keys, cmp_addr);
    uint32_t u = 0;
    for (size_t k = 0; k < n2; k++) {
        if (k && keys[k].addr != keys[k - 1].addr) u++;
        id[keys[k].idx] = u;
    }
    for (uint32_t k = 0; k <= u; k++) w_grp[k] = r_grp[k] = r_ph[k] = 0;
    uint32_t g = 1; /* the current group's number (0: none) */
    int n_groups = 1;
    starts[0] = 0;
    for (int i = 0; i < n; i++) {
        uint32_t s = id[2 * i], d = id[2 * i + 1];
        uint32_t ph = r_grp[d] == g ? r_ph[d] : 0;
        if (w_grp[s] == g || w_grp[d] == g || ph >= CU_MAX_PHASES) {
            g++;
            starts[n_groups++] = i;
            ph = 0;
        }
        phase[i] = (uint8_t)ph;
        if (r_grp[s] != g) r_grp[s] = g, r_ph[s] = 0;
        if (r_ph[s] < ph + 1) r_ph[s] = ph + 1;
        w_grp[d] = g;
    }
    starts[n_groups] = n;
    return n_groups;
}

/* The pools' shapes and every chunk's base, as the entry's runs' addresses were computed over them (a
 * chunk table freed with its cache and allocated again may come back at the same address with other
 * chunks in it). */
static int pools_match(const cu_plan_entry *c, const be_kv_pools *p) {
    int at = 0;
    for (int t = 0; t < BE_N_POOLS; t++) {
        const be_kv_pool *a = &c->pool[t], *b = &p->pool[t];
        /* read once: the KV module may add a T0 chunk while a batch's layers are being sent (its
         * table has room for every chunk, so only the count moves); a count read twice could let
         * the comparison run past the chunks the first read allowed for */
        const int nc = b->n_chunks;
        if (a->fmt != b->fmt || a->mem != b->mem || a->layers != b->layers || a->chunk_shift != b->chunk_shift ||
            a->n_chunks != nc || a->record_bytes != b->record_bytes)
            return 0;
        if (nc && memcmp(c->bases + at, b->chunks, (size_t)nc * sizeof *b->chunks)) return 0;
        at += nc;
    }
    return 1;
}

static int entry_matches(const cu_plan_entry *c, const be_kv_pools *p, const be_move *mv, int n) {
    if (!c->valid || c->n != n || !pools_match(c, p)) return 0;
    return memcmp(c->mv, mv, (size_t)n * sizeof *mv) == 0;
}

/* bytes from a record of pool t at layer 0 to the same slot's record at `layer` */
static uint64_t layer_offset(const be_kv_pools *p, int t, int layer) {
    const be_kv_pool *q = &p->pool[t];
    return ((uint64_t)(layer % q->layers) << q->chunk_shift) * q->record_bytes;
}

/* runs[0..n) of layer 0 into out, moved to `layer` */
static void runs_at_layer(const be_kv_pools *p, const cu_move_run *runs, int n, int layer, cu_move_run *out) {
    uint64_t off[BE_N_POOLS];
    for (int t = 0; t < BE_N_POOLS; t++) off[t] = layer_offset(p, t, layer);
    for (int r = 0; r < n; r++) {
        out[r] = runs[r];
        out[r].src += off[runs[r].src_tier];
        out[r].dst += off[runs[r].dst_tier];
    }
}

/* room for n moves and the chunk bases of the pools c->pool; 0 when the host has none (nothing is
 * kept then) */
static int entry_reserve(cu_plan_entry *c, int n) {
    int nb = 0;
    for (int t = 0; t < BE_N_POOLS; t++) nb += c->pool[t].n_chunks;
    if (nb > c->cap_bases) {
        free(c->bases);
        c->bases = malloc((size_t)nb * sizeof *c->bases);
        c->cap_bases = c->bases ? nb : 0;
        if (!c->bases) return 0;
    }
    if (n > c->cap) {
        free(c->mv), free(c->phase), free(c->starts), free(c->runs), free(c->run_starts);
        c->mv = malloc((size_t)n * sizeof *c->mv);
        c->phase = malloc((size_t)n);
        c->starts = malloc(((size_t)n + 1) * sizeof *c->starts);
        c->runs = malloc((size_t)n * sizeof *c->runs);
        c->run_starts = malloc(((size_t)n + 1) * sizeof *c->run_starts);
        c->cap = c->mv && c->phase && c->starts && c->runs && c->run_starts ? n : 0;
        if (!c->cap) return 0;
    }
    return 1;
}

/* the plan just made, kept in entry c. The pools are copied first and only the copy is read after:
 * a chunk count that grew meanwhile (pools_match) cannot make the bases outgrow their room. */
static void entry_keep(cu_plan_entry *c, const be_kv_pools *p, const be_move *mv, int n, const uint8_t *phase,
                       const int *starts, int g, const cu_move_run *runs, const int *run_starts) {
    c->valid = 0;
    for (int t = 0; t < BE_N_POOLS; t++) c->pool[t] = p->pool[t];
    if (!entry_reserve(c, n)) return;
    int n_runs = run_starts[g];
    memcpy(c->mv, mv, (size_t)n * sizeof *mv);
    memcpy(c->phase, phase, (size_t)n);
    memcpy(c->starts, starts, ((size_t)g + 1) * sizeof *starts);
    memcpy(c->runs, runs, (size_t)n_runs * sizeof *runs);
    memcpy(c->run_starts, run_starts, ((size_t)g + 1) * sizeof *run_starts);
    int at = 0;
    for (int t = 0; t < BE_N_POOLS; t++) {
        if (c->pool[t].n_chunks) memcpy(c->bases + at, c->pool[t].chunks, (size_t)c->pool[t].n_chunks * sizeof *c->bases);
        at += c->pool[t].n_chunks;
    }
    c->n = n, c->n_groups = g, c->n_runs = n_runs, c->valid = 1;
}

int cu_plan_moves_cached(cu_group_cache *c, const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase,
                         int *starts, cu_move_run *runs, int *run_starts, uint64_t *ws) {
    c->clock++;
    cu_plan_entry *old = &c->e[0];
    for (int k = 0; k < CU_PLAN_ENTRIES; k++) {
        cu_plan_entry *e = &c->e[k];
        if (n > 0 && entry_matches(e, p, mv, n)) {
            memcpy(phase, e->phase, (size_t)n);
            memcpy(starts, e->starts, ((size_t)e->n_groups + 1) * sizeof *starts);
            memcpy(run_starts, e->run_starts, ((size_t)e->n_groups + 1) * sizeof *run_starts);
            runs_at_layer(p, e->runs, e->n_runs, layer, runs);
            e->used = c->clock;
            c->hits++;
            return e->n_groups;
        }
        if (e->used < old->used) old = e;
    }
    c->misses++;
    int g = cu_group_moves(p, mv, n, 0, phase, starts, ws);
    run_starts[0] = 0;
    for (int k = 0; k < g; k++)
        run_starts[k + 1] = run_starts[k] + cu_runs_of(p, mv + starts[k], starts[k + 1] - starts[k], 0,
                                                       phase + starts[k], runs + run_starts[k]);
    if (n > 0) {
        entry_keep(old, p, mv, n, phase, starts, g, runs, run_starts);
        old->used = c->clock;
    }
    if (layer) runs_at_layer(p, runs, run_starts[g], layer, runs);
    return g;
}

void cu_group_cache_free(cu_group_cache *c) {
    for (int k = 0; k < CU_PLAN_ENTRIES; k++) {
        cu_plan_entry *e = &c->e[k];
        free(e->mv), free(e->phase), free(e->starts), free(e->runs), free(e->run_starts), free(e->bases);
    }
    memset(c, 0, sizeof *c);
}

/* ---- attention tables ---- */

static size_t up16(size_t x) { return (x + 15) & ~(size_t)15; }

size_t cu_tables_bound(int n_tok, int max_pos, int n_head) {
    size_t nt = (size_t)(n_tok > 0 ? n_tok : 1), mp = (size_t)(max_pos > 0 ? max_pos : 1);
    return up16(nt * sizeof(cu_tok_info)) + up16(nt * mp * 4) + nt * (size_t)n_head * up16(mp) + 64;
}

/* index of p in u[0..n), or n */
static int find_ptr(const void **u, int n, const void *p) {
    for (int k = 0; k < n; k++)
        if (u[k] == p) return k;
    return n;
}

void cu_plan_tables(int n_tok, const int32_t *const *slots, const int *n_pos, const uint8_t *const *keep,
                    int keep_stride, int n_head_kv, cu_tok_info *tok, cu_piece *pieces, cu_tables_ws ws,
                    cu_tables_plan *plan) {
    int np = 0;
    plan->tok_off = 0;
    pieces[np++] = (cu_piece){.src = tok, .bytes = (size_t)n_tok * sizeof *tok, .dst = 0};
    plan->slots_off = up16((size_t)n_tok * sizeof *tok);
    /* distinct slot tables: length = largest n_pos of the rows that share one */
    int nu = 0;
    for (int t = 0; t < n_tok; t++) {
        int k = find_ptr(ws.uptr, nu, slots[t]);
        if (k == nu) ws.uptr[nu] = slots[t], ws.ulen[nu] = 0, nu++;
        if (n_pos[t] > ws.ulen[k]) ws.ulen[k] = n_pos[t];
    }
    int at = 0; /* entries */
    for (int k = 0; k < nu; k++) {
        ws.uoff[k] = at;
        if (ws.ulen[k] > 0)
            pieces[np++] = (cu_piece){.src = ws.uptr[k], .bytes = (size_t)ws.ulen[k] * 4,
                                      .dst = plan->slots_off + (size_t)at * 4};
        at += ws.ulen[k];
    }
    for (int t = 0; t < n_tok; t++) {
        int k = find_ptr(ws.uptr, nu, slots[t]);
        tok[t].slot_off = ws.uoff[k];
        tok[t].n_pos = n_pos[t];
        tok[t].keep_off = -1;
        tok[t].keep_stride = 0;
    }
    plan->keep_off = up16(plan->slots_off + (size_t)at * 4);
    /* distinct keep masks, each kv head's row compacted to its length rounded up to 16 */
    size_t kat = 0;
    if (keep) {
        nu = 0;
        for (int t = 0; t < n_tok; t++) {
            if (!keep[t]) continue;
            int k = find_ptr(ws.uptr, nu, keep[t]);
            if (k == nu) ws.uptr[nu] = keep[t], ws.ulen[nu] = 0, nu++;
            if (n_pos[t] > ws.ulen[k]) ws.ulen[k] = n_pos[t];
        }
        for (int k = 0; k < nu; k++) {
            size_t stride = up16((size_t)ws.ulen[k]);
            ws.uoff[k] = (int)kat;
            for (int g = 0; g < n_head_kv && ws.ulen[k] > 0; g++)
                pieces[np++] = (cu_piece){.src = (const uint8_t *)ws.uptr[k] + (size_t)g * (size_t)keep_stride,
                                          .bytes = (size_t)ws.ulen[k], .dst = plan->keep_off + kat + (size_t)g * stride};
            kat += stride * (size_t)n_head_kv;
        }
        for (int t = 0; t < n_tok; t++) {
            if (!keep[t]) continue;
            int k = find_ptr(ws.uptr, nu, keep[t]);
            tok[t].keep_off = ws.uoff[k];
            tok[t].keep_stride = (int32_t)up16((size_t)ws.ulen[k]);
        }
    }
    plan->bytes = plan->keep_off + kat;
    plan->n_pieces = np;
}

/* ---- rings ---- */

void cu_ring_init(cu_ring_pos *r, size_t cap, int n_seg) {
    TKV_ASSERT(n_seg >= 2 && cap >= (size_t)n_seg * 256);
    r->n_seg = n_seg;
    r->seg = (cap / (size_t)n_seg) & ~(size_t)255;
    r->cap = r->seg * (size_t)n_seg;
    r->head = 0;
    r->cur = 0;
}

size_t cu_ring_take(cu_ring_pos *r, size_t bytes, size_t align, int *left, int *entered) {
    TKV_ASSERT(bytes <= r->seg && align && align <= 256 && !(align & (align - 1)));
    *left = *entered = -1;
    size_t at = (r->head + align - 1) & ~(align - 1);
    size_t end = (size_t)(r->cur + 1) * r->seg;
    if (at + bytes > end) {
        *left = r->cur;
        r->cur = (r->cur + 1) % r->n_seg;
        *entered = r->cur;
        at = (size_t)r->cur * r->seg;
    }
    r->head = at + bytes;
    return at;
}

/* ---- the weights' arena ---- */

size_t cu_arena_take(size_t *used, size_t cap, size_t bytes, size_t align) {
    TKV_ASSERT(align && !(align & (align - 1)));
    size_t at = (*used + align - 1) & ~(align - 1);
    if (at < *used || at > cap || bytes > cap - at) return SIZE_MAX;
    *used = at + bytes;
    return at;
}
