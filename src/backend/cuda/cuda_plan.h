/* cuda_plan.h — the host-side planning of the CUDA backend, as pure functions of plain data: how a
 * move list becomes runs of contiguous records in ordered phases, how one attention call's slot
 * tables and keep masks are laid out for their device copy, and the offset arithmetic of the
 * pinned staging rings. Plain C, compiled in every build and tested without a GPU
 * (tests/test_cuda.c); the .cu files call these and only add the CUDA calls.
 * Not here: streams, events, kernels. */
#ifndef TKV_CUDA_PLAN_H
#define TKV_CUDA_PLAN_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- moves ---------------------------------------------------------------------------------- */

/* A run of moves: n records that are consecutive in the source pool and in the destination pool
 * (the same chunk, successive slots) with the same pair of formats. */
typedef struct {
    uint64_t src, dst;             /* addresses of the first source and destination records */
    uint32_t n;                    /* records */
    uint32_t src_bytes, dst_bytes; /* record bytes of the two pools */
    uint8_t src_fmt, dst_fmt;      /* be_kv_fmt */
    uint8_t phase;                 /* runs of phase k start after every run of phase k - 1 ends */
    uint8_t same;                  /* 1: same format, a plain byte copy */
    uint8_t src_tier, dst_tier;    /* BE_T0..BE_STAGE: a run never mixes pools (nor memory kinds) */
} cu_move_run;

#define CU_MAX_PHASES 4

/* The meaning of a move list, on every backend (the CPU's cpu_be_copy_moves): the moves run one after
 * another in list order, each reading what its source holds at that moment. The device runs many
 * records at once, so a list runs as consecutive groups, one after another on the copy stream; inside
 * a group every move reads what was there before the group (the phases below order a move that
 * overwrites another's source after it). A group therefore never holds a move that reads or writes a
 * record an earlier move of the group wrote (read-after-write, write-after-write: a new group starts
 * there), nor a write-after-read chain deeper than CU_MAX_PHASES; under those rules "before the
 * group" and "in list order" read the same bytes. A swap (a cycle) is two groups; the KV module's
 * batches (demotions, then promotions into the T0 slots they gave up: depth 2) are one.
 *
 * cu_group_moves: starts[0..g] receives the first move of each of the g groups it returns (plus
 * starts[g] = n), phase[i] move i's phase inside its group. ws: CU_MOVE_WS_WORDS(n) uint64_t. */
#define CU_MOVE_WS_WORDS(n) (8 * (size_t)(n) + 8)
int cu_group_moves(const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase, int *starts,
                   uint64_t *ws);
/* cu_group_moves without its one-group case (a list no move of which reads another's destination,
 * destinations increasing, found in O(n)): every list through the pass over its sorted records. The
 * same answer; tests and bench/move_plan.c hold the one-group case against it. */
int cu_group_moves_sorted(const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase, int *starts,
                          uint64_t *ws);
/* The last lists planned, their groups and phases and every group's runs, so that the same list
 * coming again is not planned again: staging copies one list per layer of a step (a 7B at 8192
 * positions, T0 50%: 4096 moves; grouped once a step and its runs made per layer, 1.1 ms of host
 * time a step on a 2-core host, 0.06 ms planned once: bench/move_plan.c). Grouping depends only on which moves touch the same record, and a record is one (tier, slot)
 * at every layer, so a list equal to an earlier one move for move, over the same pools, has the same
 * groups and phases at any layer. Its runs differ between layers by their addresses alone: a pool's
 * record of slot s at layer l lies (l % layers) x slots-per-chunk records after its layer-0 record
 * (be_kv_record), the same distance for every slot of the pool, so records consecutive at one layer
 * are consecutive at every layer. An entry keeps the runs at layer 0; a hit moves them to the layer
 * asked for. Two entries: a batch of tier moves (the transfer thread's, layer by layer) comes between
 * the staging lists of the same layers, and one entry would plan both again at every layer (the
 * least recently used entry is replaced). Zero it before first use; cu_group_cache_free releases its
 * copies. */
typedef struct {
    be_move *mv;            /* [cap] the list */
    uint8_t *phase;         /* [cap] */
    int *starts;            /* [cap + 1] */
    cu_move_run *runs;      /* [cap] every group's runs at layer 0, group after group */
    int *run_starts;        /* [cap + 1]: group k's runs are runs[run_starts[k] .. run_starts[k + 1]) */
    be_kv_pool pool[BE_N_POOLS]; /* the pools it was planned over, their chunks listed in bases */
    void **bases;           /* [cap_bases] every pool's chunk bases, pool after pool */
    int n, n_groups, n_runs, cap, cap_bases, valid;
    uint64_t used;          /* the cache's clock at its last use */
} cu_plan_entry;
#define CU_PLAN_ENTRIES 2
typedef struct {
    cu_plan_entry e[CU_PLAN_ENTRIES];
    uint64_t clock, hits, misses;
} cu_group_cache;
/* cu_group_moves and cu_runs_of group by group, at `layer`, or a kept answer when mv[0..n) and the
 * pools equal those of an entry (its runs moved to `layer`). Writes phase[n], starts[g + 1], and the
 * runs of group k into runs[run_starts[k] .. run_starts[k + 1]) (run_starts[g + 1]; runs: [n]);
 * returns g, the number of groups. */
int cu_plan_moves_cached(cu_group_cache *c, const be_kv_pools *p, const be_move *mv, int n, int layer, uint8_t *phase,
                         int *starts, cu_move_run *runs, int *run_starts, uint64_t *ws);
void cu_group_cache_free(cu_group_cache *c);
/* The runs of n moves with the given phases (< CU_MAX_PHASES): phase by phase, list order within a
 * phase, consecutive records of one phase merged. Returns the number of runs (<= n). */
int cu_runs_of(const be_kv_pools *p, const be_move *mv, int n, int layer, const uint8_t *phase, cu_move_run *out);

/* Not on the copy path (cu_copy_moves runs cu_group_moves' groups): the independent one-group
 * planner the host tests hold every group against. Plans n moves as ONE group. A move whose destination record is another move's source (the T0 slot
 * of a demoted token handed to a promoted one in the same batch) runs in a later phase than that
 * move, so every move reads what was there before the call (list order only when cu_group_moves
 * would make one group of them). ws: CU_MOVE_WS_WORDS(n) uint64_t of host scratch. Returns the
 * number of runs (<= n), or -1 when the dependencies form a cycle or a chain longer than
 * CU_MAX_PHASES (a swap cannot run in place). */
int cu_plan_moves(const be_kv_pools *p, const be_move *mv, int n, int layer, cu_move_run *out, uint64_t *ws);

/* ---- attention tables ----------------------------------------------------------------------- */

/* Per query row, in the device image. */
typedef struct {
    int32_t slot_off;    /* first entry of the row's slot table in the image's slot array */
    int32_t n_pos;
    int32_t keep_off;    /* first byte of the row's keep mask in the image's keep array, -1: none */
    int32_t keep_stride; /* bytes between kv heads in that mask */
} cu_tok_info;

/* One host range to copy into the image. */
typedef struct {
    const void *src;
    size_t bytes;
    size_t dst; /* byte offset in the image */
} cu_piece;

typedef struct {
    size_t tok_off, slots_off, keep_off; /* byte offsets of the three arrays in the image */
    size_t bytes;                        /* the image */
    int n_pieces;
} cu_tables_plan;

/* Host workspace of cu_plan_tables: n_tok entries each. */
typedef struct {
    const void **uptr;
    int *ulen, *uoff;
} cu_tables_ws;

/* The image of one call's tables: the cu_tok_info rows (written into tok), then each distinct slot
 * table once (rows of one sequence share it; its length is the largest n_pos of those rows), then
 * each distinct keep mask once, kv head rows of its length rounded up to 16. pieces receives at most
 * 1 + n_tok * (1 + n_head_kv) ranges, in image order; the first is tok itself. */
void cu_plan_tables(int n_tok, const int32_t *const *slots, const int *n_pos, const uint8_t *const *keep,
                    int keep_stride, int n_head_kv, cu_tok_info *tok, cu_piece *pieces, cu_tables_ws ws,
                    cu_tables_plan *plan);
/* Bound on the image bytes for n_tok rows of at most max_pos positions and n_head_kv <= n_head. */
size_t cu_tables_bound(int n_tok, int max_pos, int n_head);

/* ---- pinned staging rings ------------------------------------------------------------------- */

/* A ring of n_seg equal segments. Each segment has an event on the ring's stream: recorded when the
 * writer leaves the segment (all work queued so far may read it), waited for before the writer
 * enters it again (that work is done), so a reservation is never overwritten while queued work
 * can still read it. */
typedef struct {
    size_t cap, seg, head;
    int cur, n_seg;
} cu_ring_pos;

void cu_ring_init(cu_ring_pos *r, size_t cap, int n_seg);
/* Reserves bytes (<= r->seg) at an offset aligned to align (a power of two <= 256). When it does
 * not fit in the current segment it starts the next: *left is the segment left and *entered the one
 * entered; otherwise both are -1. */
size_t cu_ring_take(cu_ring_pos *r, size_t bytes, size_t align, int *left, int *entered);

/* ---- the weights' arena ---------------------------------------------------------------------- */

/* Weights of at most CU_WARENA_OWN bytes are carved out of device chunks of CU_WARENA_BYTES instead
 * of a cudaMalloc each (a MoE file prepares one matrix per expert slice: 18432 for 48 layers of 128
 * experts, each about 1 MB), larger ones get an allocation of their own. cu_arena_take: the offset,
 * aligned to align (a power of two), of bytes in a chunk of cap bytes whose first *used are taken,
 * *used moved past it; SIZE_MAX, *used unchanged, where it does not fit (a new chunk is then taken). */
#define CU_WARENA_BYTES ((size_t)64 << 20)
#define CU_WARENA_OWN ((size_t)8 << 20)
size_t cu_arena_take(size_t *used, size_t cap, size_t bytes, size_t align);

#ifdef __cplusplus
}
#endif
#endif
