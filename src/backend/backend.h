/* backend.h — the seam between the engine (the forward pass and the KV module) and the hardware.
 *
 * One op table (be_ops) per implementation: backend/cpu (the default; generic / AVX2 / AVX-512
 * kernels chosen inside it from cpuid) and backend/cuda (built by `make cuda`). The forward and the
 * KV module include this header only; they never see a kernel, an ISA or a stream.
 *
 * Memory. Every buffer an op reads or writes lives in the backend's memory (be_alloc): on the CPU
 * that is host memory; on a GPU, BE_MEM_DEVICE is device memory and BE_MEM_PINNED page-locked host
 * memory the device reaches by DMA. The engine never dereferences a BE_MEM_DEVICE pointer; small
 * host-side arrays (token ids, positions, slot tables, move lists) are passed by host pointer and
 * read during the call (an implementation copies what it needs before returning).
 *
 * Ordering. Ops run in call order, as if synchronously, on one "compute" queue. The one exception is
 * copy_moves, which may run on a second "copy" queue (the transfer engine calls it from its own
 * thread); copy_wait(layer) orders the compute queue after every copy submitted for that layer, and
 * copy_after_compute the copy queue after every compute op queued so far. read and kv_read wait
 * for the compute queue; host_sync for both queues. The host reads or writes a host pool's records
 * itself (a sequence saved or loaded) only after host_sync: a fence orders the device's later work,
 * never the host's.
 *
 * KV storage: pools and slot references. The KV module owns the decisions (who lives where); the
 * backend owns the bytes. A tier's storage is a pool of slots in chunks of 1 << chunk_shift slots,
 * each chunk one alloc (by the KV module: chunk bytes = (1 << chunk_shift) * layers * record_bytes,
 * in the pool's be_mem) laid out [layer % layers][slot in chunk][record], where a record
 * holds one token's K and V for one layer in the pool's format (be_kv_fmt). A token's place is a
 * slot reference, BE_SLOT(tier, slot); BE_SLOT_NONE marks an evicted position. The STAGE tier is
 * layer-less scratch (layers = 1, or 2 for a double-buffered prefetch): rows staged there for layer l
 * are read as layer l % layers.
 *
 * Attention reads a *slot table* per sequence: entry p is position p's slot reference. Kernels never
 * know why a token sits where it does; positions are visited in order 0..n-1 whatever the tiers, so
 * the same values give the same result wherever they are stored (the hierarchy's exactness).
 *
 * Errors: prepare/alloc may fail with a message (int + err/errlen); an op given valid arguments
 * cannot fail (an implementation aborts through its check macro on a device error). */
#ifndef TKV_BACKEND_H
#define TKV_BACKEND_H
#include <stddef.h>
#include <stdint.h>

typedef struct be_backend be_backend;

typedef enum {
    BE_MEM_HOST = 0,   /* pageable host memory */
    BE_MEM_PINNED = 1, /* host memory the device can DMA (CPU backend: host memory) */
    BE_MEM_DEVICE = 2, /* the fast memory (CPU backend: host memory standing in for HBM) */
} be_mem;

/* ---- KV pools --------------------------------------------------------------------------------- */

enum { BE_T0 = 0, BE_T1 = 1, BE_T2 = 2, BE_STAGE = 3, BE_N_POOLS = 4 };

/* Slot references: tier in bits 30..31, slot in bits 0..29. */
#define BE_SLOT(tier, slot) ((int32_t)(((uint32_t)(tier) << 30) | (uint32_t)(slot)))
#define BE_SLOT_TIER(r) ((int)(((uint32_t)(r) >> 30) & 3u))
#define BE_SLOT_IDX(r) ((int32_t)((uint32_t)(r) & 0x3fffffffu))
#define BE_SLOT_NONE ((int32_t)-1) /* evicted; never a valid reference (tier 3 is STAGE, slot 2^30-1 unused) */

/* Record formats of one (token, layer): K then V, each kv_dim = n_head_kv * head_dim values.
 * Q8_HEAD: int8 K, int8 V, then f32 scales K[n_head_kv], V[n_head_kv] (one per head, symmetric,
 * round to nearest: |x - q*s| <= amax/254): the T2 codec "q8h".
 * The other T2 formats are a K row record then a V row record of the codecs of
 * src/codec/kvq.h (their bounds there): Q8B keys q8b (int8 in blocks of 32), Q8BH keys q8bh
 * (a fixed Hadamard rotation per head, then q8b), both with values q8h (one scale per token and
 * head); Q4BH keys q4bh and values q4b (4 bits in blocks of 32). Q8BHC and Q4BHC are Q8BH and Q4BH
 * whose keys are centred first: the pools' k_center row of the layer is subtracted before the codec
 * encodes a K row and added back after it decodes one (a Qwen2 model's K bias is most of its early
 * layers' keys, hundreds of times what varies from token to token: centred, the codec's steps are
 * spent on what varies). Their key error, per element: |y - x| <= b(r) (1 + 2^-23) + 2^-22 (|x| + |c|),
 * with r = x - c as computed in f32 and b(r) kvq's bound for r's element (the two f32 roundings of
 * the subtraction and the add back, 2^-24 each, and their products); the values' bound is kvq's. */
typedef enum {
    BE_KV_F32 = 0,
    BE_KV_F16 = 1,
    BE_KV_Q8_HEAD = 2,
    BE_KV_Q8B,
    BE_KV_Q8BH,
    BE_KV_Q4BH,
    BE_KV_Q8BHC,
    BE_KV_Q4BHC,
    BE_KV_N_FMT
} be_kv_fmt;

/* Bytes of one record of fmt (one token, one layer, K and V). */
size_t be_kv_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim);
/* 1 when records of fmt hold exactly what the forward wrote (after the cache's element rounding):
 * the lossless tiers T0/T1 use such formats. */
int be_kv_fmt_exact(be_kv_fmt fmt);
/* The T2 formats by their codec names, "q8h", "q8b", "q8bh", "q4bh", "q8bhc", "q4bhc"; parse
 * returns -1 for another name; supported says why a head dim cannot be used (0 with a message). */
const char *be_kv_t2_name(be_kv_fmt fmt);
const char *be_kv_t2_names(void); /* "q8h, q8b, ...": every T2 format's name, in enum order */
/* The T2 format a session of backend `name` ("cpu" or NULL, "cuda") uses when none is asked for. */
be_kv_fmt be_kv_t2_default(const char *name);
int be_kv_t2_parse(const char *name, be_kv_fmt *out);
int be_kv_fmt_supported(be_kv_fmt fmt, int head_dim, char *err, size_t errlen);
/* For the kvq formats: the bytes of the K part of a record (V follows), and the two codecs
 * (kvq_codec values); 0 for the other formats. be_kv_fmt_centred: 1 for the formats whose keys are
 * centred on k_center. */
size_t be_kv_k_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim);
int be_kv_fmt_codecs(be_kv_fmt fmt, int *k, int *v);
int be_kv_fmt_centred(be_kv_fmt fmt);

typedef struct {
    be_kv_fmt fmt;
    be_mem mem;
    int layers;          /* layer dimension of each chunk: n_layer (T0..T2), 1 or 2 (STAGE) */
    int chunk_shift;     /* slots per chunk = 1 << chunk_shift */
    int n_chunks;        /* chunks allocated so far (the pool grows by whole chunks) */
    void **chunks;       /* [n_chunks] chunk bases in backend memory (host array of pointers) */
    size_t record_bytes; /* be_kv_record_bytes(fmt, ...) */
} be_kv_pool;

/* The four pools of one KV cache, and its shape. */
typedef struct {
    int n_layer, n_head_kv, head_dim;
    be_kv_pool pool[BE_N_POOLS];
    const float *k_center; /* [n_layer][n_head_kv * head_dim] in host memory: the key centre of the
                              centred formats (the model's K bias), or NULL (centre 0) */
} be_kv_pools;

/* One move of the transfer engine: the record of slot `src` copied into slot `dst` for one layer,
 * converting between the two pools' formats (exact between F16/F32 and the same format; through f32
 * with the codec otherwise). STAGE destinations are written at layer % layers. */
typedef struct {
    int32_t src, dst; /* slot references */
} be_move;

/* ---- weights ---------------------------------------------------------------------------------- */

/* A weight matrix as the backend runs it: n_out rows of n_in elements. `type` may be a layout the
 * backend prepared (prepare_weight may reorder blocks: Q4_K -> Q4_KX on the CPU), so only the
 * backend interprets it. */
typedef struct {
    const void *data;
    uint32_t type;
    int64_t n_in, n_out;
} be_mat;

/* Roles tell prepare_weight how a matrix is used. */
enum { BE_W_MATMUL = 0, BE_W_EMBED = 1, BE_W_EMBED_AND_OUTPUT = 2 };

/* One output of a fused matrix product: y[t * y_stride + r] = dot(row r of w, x[t]), plus bias[r]
 * where bias is not NULL and the backend says matmul_bias (one f32 add after the product: the bits
 * of add_bias after it); a backend without matmul_bias ignores bias and the caller adds it. */
typedef struct {
    const be_mat *w;
    float *y;
    int64_t y_stride;
    const float *bias; /* [n_out] backend memory, or NULL */
} be_mm_out;
#define BE_MM_MAX_OUTS 4
#define BE_SEL_MAX_PAIRS 65535 /* matmul_sel's pairs in one call at most */

/* ---- attention -------------------------------------------------------------------------------- */

/* How the attention weights are reported for the KV policy (the scorer). */
enum {
    BE_MASS_NONE = 0,  /* not needed */
    BE_MASS_HEADS = 1, /* mass[t][h][j]: the softmax weight of query head h on position j */
    BE_MASS_SUM = 2,   /* mass[t][0][j]: the sum over query heads of their weights on j */
};

typedef struct {
    int n_tok;                   /* query rows */
    int layer;
    int n_head, n_head_kv, head_dim;
    float scale;                 /* 1/sqrt(head_dim) */
    const float *q;              /* [n_tok][n_head * head_dim], after RoPE */
    float *o;                    /* [n_tok][n_head * head_dim] */
    const be_kv_pools *pools;
    const int32_t *const *slots; /* [n_tok] host: the slot table of the token's sequence (tokens of one
                                    sequence may share a pointer); BE_SLOT_NONE entries are skipped */
    const int *n_pos;            /* [n_tok] positions 0..n_pos-1 are attended (causal: pos + 1) */
    const uint8_t *const *keep;  /* [n_tok] NULL, or per-(kv head, position) keep masks: entry
                                    keep[t][g * keep_stride + j] != 0 for kv head g to read j */
    int keep_stride;
    int mass_mode;               /* BE_MASS_* */
    float *mass;                 /* [n_tok][mass heads][mass_stride]: columns j < n_pos[t] written,
                                    masked positions 0; columns past n_pos[t] are left as they were
                                    (the split path's add sums them too): readers stop at n_pos */
    int mass_stride;             /* >= the largest n_pos */
    uint64_t tables_gen;         /* a promise: slots, n_pos and keep (all of them: keep masks differ per
                                    layer) are the same as in the previous call with the same nonzero
                                    tables_gen, so an implementation may keep its device copy; 0: always
                                    read them. A producer gives a new value whenever any may differ */
    /* Split attention (T0 on the device, T1 where it lies, merged by log-sum-exp): tiers (bit per
     * BE_T0..BE_STAGE) restricts the positions read to those whose slot is in one of these tiers (0:
     * all); with part != NULL the call writes a partial result instead of o: part->o the weighted V
     * sum with weights e^(s - part->m) (not normalised), part->m the largest score, part->l the sum
     * of those weights, per (token, query head); mass, if asked, holds the same unnormalised weights
     * (attention_merge rescales it). A part whose positions are all masked has m = -inf, l = 0. */
    unsigned tiers;
    struct be_attn_part *part;
} be_attn;

typedef struct be_attn_part {
    float *o; /* [n_tok][n_head * head_dim] */
    float *m; /* [n_tok][n_head] */
    float *l; /* [n_tok][n_head] */
    float *mass; /* [n_tok][mass heads][mass_stride] or NULL: this part's unnormalised weights */
} be_attn_part;

/* ---- the op table ----------------------------------------------------------------------------- */

typedef struct {
    const char *name;            /* "cpu", "cuda" */
    int matmul_bias;             /* 1: matmul adds be_mm_out.bias to its outputs (a launch per bias
                                    fewer on a GPU); 0: it ignores it, the caller calls add_bias */
    int unified;                 /* 1: every memory kind is host memory (the CPU backend): host buffers
                                    may be given to ops directly, and backend memory read in place */
    unsigned kv_fmts;            /* bit f set: the backend reads and writes KV records of be_kv_fmt f */
    unsigned attn_t2_fmts;       /* bit f set: attention reads T2 records of format f where they lie (a
                                    slot table may hand it T2 references), so the KV module stages no T2
                                    row for it; 0: T2 rows are staged (dequantised into STAGE) first */
    void (*close)(be_backend *b);
    const char *(*describe)(const be_backend *b); /* kernels in use, e.g. "avx512" or "sm_90" */
    /* Optional: runs fn over [0, n) on the backend's host threads (workers_for's contract: disjoint
     * ranges, the caller's thread among them, back when all are done), for host work between ops
     * (the KV module's score update). NULL: the caller runs fn(ctx, 0, n, 0) itself. */
    void (*host_for)(be_backend *b, int64_t n, void (*fn)(void *ctx, int64_t i0, int64_t i1, int tid), void *ctx);

    /* memory */
    void *(*alloc)(be_backend *b, size_t bytes, be_mem mem, char *err, size_t errlen);
    void (*free)(be_backend *b, void *p, be_mem mem);
    void (*upload)(be_backend *b, void *dst, const void *src, size_t bytes);   /* host -> backend */
    /* Optional (NULL: upload). An upload from memory this backend allocated BE_MEM_PINNED, queued on
     * the compute queue without a host copy (CUDA: one DMA; upload copies small sources into its
     * argument ring first): src is read when the queue gets there, so the caller leaves it unchanged
     * until its next `read` (which waits for the queue). */
    void (*upload_pinned)(be_backend *b, void *dst, const void *src, size_t bytes);
    /* A host-readable copy of backend memory: returns src itself where it is host memory, else
     * copies into host_tmp (bytes) and returns it. Waits for the compute queue. On a backend that
     * is not unified, give it a host_tmp allocated BE_MEM_PINNED: the copy is then one DMA (the CUDA
     * backend bounces a pageable host_tmp through its own pinned buffer, a second copy). */
    const void *(*read)(be_backend *b, const void *src, size_t bytes, void *host_tmp);

    /* weights: binds (and may reorder, in place in the model's private pages, or copy to the device)
     * a matrix of the file; fails with a message for a type this backend cannot run */
    int (*prepare_weight)(be_backend *b, be_mat *m, int role, char *err, size_t errlen);
    /* f32 vectors (norms, biases) into backend memory */
    const float *(*prepare_vector)(be_backend *b, const float *host, int64_t n, char *err, size_t errlen);
    /* scratch bytes the matmul needs for n_tok rows of the given outputs (allocated by the caller) */
    size_t (*matmul_scratch)(const be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok);

    /* dense ops over activations [rows][n] */
    void (*embed)(be_backend *b, const be_mat *emb, const int32_t *tokens, int n, float *x);
    void (*matmul)(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                   void *scratch);
    void (*rmsnorm)(be_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps);
    void (*add_bias)(be_backend *b, float *y, const float *bias, int rows, int n);
    void (*add)(be_backend *b, float *y, const float *x, int64_t n); /* y += x */
    /* Optional (NULL: the forward calls add, then rmsnorm). The residual add and the next RMSNorm as
     * one op: x += d over [rows][n], then y = rmsnorm(x) * w, the same bits as the two ops. */
    void (*add_rmsnorm)(be_backend *b, float *x, const float *d, float *y, const float *w, int rows, int n, float eps);
    /* RoPE in place on rows [n_rows][n_heads * head_dim] at positions pos[n_rows] (host): angle of
     * pair i = pos * scale * base^(-2i/head_dim) as an f32 running product; neox pairs (i, i+hd/2) */
    void (*rope)(be_backend *b, float *x, int n_rows, int n_heads, int head_dim, const int *pos, float base,
                 float scale, int neox);
    void (*swiglu)(be_backend *b, float *gate, const float *up, int64_t n); /* gate = silu(gate) * up */
    /* dst[i] = src[rows[i]] for i < n, rows of `width` floats (rows is host) */
    void (*gather_rows)(be_backend *b, float *dst, const float *src, const int *rows, int n, int width);
    /* Optional (NULL: split attention sends its host part's weights up whole, zeros included). Rows
     * spread out by column: for t < n_tok and r < rows, row t * rows + r of dst (dst_stride floats) is
     * zeroed, then dst[(t * rows + r) * dst_stride + cols[t * src_stride + k]] =
     * src[(t * rows + r) * src_stride + k] for k < n_cols[t]. src and cols (int32, distinct, each <
     * dst_stride) in backend memory, n_cols a host array. */
    void (*expand_cols)(be_backend *b, float *dst, int dst_stride, const float *src, const int32_t *cols, int src_stride,
                        const int *n_cols, int n_tok, int rows);
    /* Optional (NULL: the backend runs no expert FFN). The weighted sums of an expert FFN's outputs:
     * y[t] = w[t*k] src[rows[t*k]] + ... + w[t*k+k-1] src[rows[t*k+k-1]] for t < n, left to right in
     * f32 (each product rounded, then added), rows of `width` floats (rows and w are host arrays) */
    void (*combine_rows)(be_backend *b, float *y, const float *src, const int *rows, const float *w, int n, int k,
                         int width);
    /* Optional, the three together (NULL: the forward reads the router's logits back and routes on
     * the host). An expert FFN routed where its logits lie, so that nothing waits for the device:
     * route: for t < n, token t's k experts (sel[t*k..], int32) and weights (w[t*k..]) from its
     * logits [n][n_expert], as moe_route (src/model/route.h) chooses and weighs them; logits, sel
     * and w in backend memory.
     * matmul_sel: for pair p < n_pairs and output i, row p of outs[i].y (stride outs[i].y_stride) =
     * x[p / x_div] · E_iᵀ with E_i = outs[i].w[sel[p]], each row as matmul computes it for one
     * token; outs[i].w is the first of n_expert prepared matrices of one type and shape (the
     * layer's array), biases NULL, sel in backend memory, scratch as matmul_scratch gives for
     * n_pairs tokens, n_pairs <= BE_SEL_MAX_PAIRS. n_pairs 0 runs nothing: it prepares what later
     * calls with these arrays need (a backend may keep a table of the experts), so that no step has
     * to.
     * combine_pairs: combine_rows with row t*k+j for pair (t, j) and w in backend memory. */
    void (*route)(be_backend *b, const float *logits, int n, int n_expert, int k, int32_t *sel, float *w);
    void (*matmul_sel)(be_backend *b, const be_mm_out *outs, int n_outs, int n_expert, int64_t n_in, const float *x,
                       int x_div, const int32_t *sel, int n_pairs, void *scratch);
    void (*combine_pairs)(be_backend *b, float *y, const float *src, const float *w, int n, int k, int width);

    /* KV */
    /* writes the K and V rows [n][kv_dim] of n new tokens for one layer into their slots (host
     * array of references), rounding to the pool's format */
    void (*kv_write)(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                     const float *v);
    /* reads one layer's K (and V, if v is not NULL) of n slots as f32 into host memory [n][kv_dim] */
    void (*kv_read)(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v);
    /* executes moves for one layer (may be asynchronous on the copy queue; see copy_wait), as if one
     * after another in list order. A slot a move reads may be reused (written by kv_write, or freed)
     * only after copy_wait for its layer: until then the copy may not have read it */
    void (*copy_moves)(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer);
    /* orders later compute after every copy_moves already submitted for `layer` */
    void (*copy_wait)(be_backend *b, int layer);
    /* Optional (NULL where copy_moves runs in call order with the compute ops: the CPU). The other
     * direction: every copy_moves submitted after this call (from any thread) runs after every
     * compute op already queued. Without it a move could read a slot before a queued kv_write has
     * written it, or overwrite a slot a queued attention still reads. The KV module calls it when it
     * starts a batch: between two forward calls no read need have waited for the device (a prompt's
     * chunks that want no logits). Does not wait on the host. */
    void (*copy_after_compute)(be_backend *b);
    /* Optional (NULL where every op, copies included, has finished when it returns: the CPU). The
     * host waits until every op queued so far has finished, on both queues: then it may read a host
     * pool's record that a move wrote, or write one that a move read. */
    void (*host_sync)(be_backend *b);
    /* Optional (NULL where copies are synchronous: the CPU). The device time, in seconds since open,
     * the compute queue spent stalled at copy_wait for the copy queue, timed on the device. A wait
     * counts once its timing has completed (it is collected at the next read, or by this call when
     * the device got there): the figure settles after a read. Never waits. */
    double (*copy_stall_seconds)(be_backend *b);
    /* Optional (NULL where every op runs on the calling thread: the CPU). Host seconds since open
     * spent blocked until the device caught up (read, kv_read, a large upload, a full argument
     * ring; not the transfer thread's copies): a decode step's time less its share of this is the
     * host's own work, and where that is most of the step the device waited for the host. Never
     * waits. */
    double (*host_wait_seconds)(be_backend *b);
    /* attention over slot tables; scratch from attention_scratch */
    size_t (*attention_scratch)(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim);
    void (*attention)(be_backend *b, const be_attn *a, void *scratch);
    /* o = (sum_k e^(m_k - M) o_k) / (sum_k e^(m_k - M) l_k), M = max m_k, over n_parts partial
     * results of the same queries (host or backend memory as the parts were written); each part's
     * mass, if any, is rescaled in place by e^(m_k - M) / L into normalised weights */
    void (*attention_merge)(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                            int head_dim, int mass_heads, int mass_stride, const int *n_pos);
    /* Optional (NULL: the KV module adds the weights to its scores on the host, after reading them
     * back). The ranked policies' score update on the backend, for n_tok tokens of one attention call
     * in token order: for each t with score[t] != NULL and every position i < n_pos[t],
     * score[t][i] += w * mass[(t * n_head + h) * stride + i] for h = 0 .. n_head-1 in order, in
     * double, each product and each sum rounded (no fused multiply-add): the host's update bit for
     * bit. score and n_pos are host arrays; score[t] points into backend memory, and tokens of one
     * sequence share a pointer (their additions land in token order). */
    void (*score_add)(be_backend *b, double *const *score, const int *n_pos, int n_tok, const float *mass, int n_head,
                      int stride, double w);

    /* Optional, together (NULL: nothing to do). Bracket the ops of one forward call of n_tok tokens:
     * a backend may record the ops queued from step_begin and submit them as one at step_end (CUDA:
     * a graph of the step, launched whole). Every op keeps its meaning, order and results; an op
     * that waits for the device (read, kv_read, copy_wait) submits what was recorded first, and the
     * rest of the call runs op by op. The caller brackets calls in which nothing is expected to
     * wait, and calls step_end before reading the call's results; brackets do not nest. */
    void (*step_begin)(be_backend *b, int n_tok);
    void (*step_end)(be_backend *b);
} be_ops;

struct be_backend {
    const be_ops *ops;
};

typedef struct {
    const char *name;   /* "cpu" (NULL: "cpu") or "cuda" */
    int n_threads;      /* CPU threads (CUDA: the host threads of host_for) */
    const char *kernels;/* CPU: "auto" (NULL), "generic", "avx2", "avx512"; CUDA: ignored */
    int keep_layout;    /* 1: run weights in the file's layout (no reordering at prepare) */
    int device;         /* CUDA device ordinal */
} be_params;

/* Opens a backend by name; fails with a message naming what is missing (an unknown name, a CUDA
 * backend in a build without `make cuda`, no GPU, kernels the CPU lacks). */
int be_open(const be_params *p, be_backend **out, char *err, size_t errlen);
static inline void be_close(be_backend *b) {
    if (b) b->ops->close(b);
}

/* ---- split attention (split.c: generic over two backends) ------------------------------------
 * T0, STAGE (and T2 where `be` reads it in place) read on `be`, T1 on the host backend `host` (where
 * its rows lie), the two partial results merged by log-sum-exp on `be`: for a T1 that stays in host
 * memory. The object holds the buffers for up to max_tok query rows over max_pos positions. */
typedef struct be_split be_split;
be_split *be_split_new(be_backend *be, be_backend *host, int max_tok, int n_head, int head_dim, int max_pos, char *err,
                       size_t errlen);
void be_split_free(be_split *sp);
/* Host memory be_split_new takes (for a caller's check before allocating). */
uint64_t be_split_host_bytes(const be_backend *be, const be_backend *host, int max_tok, int n_head, int head_dim,
                             int max_pos);
/* One attention call as `be`'s attention would make it (a->tiers and a->part unset; scratch from
 * be's attention_scratch): the output in a->o and, where a->mass_mode asks, the merged weights in
 * a->mass, both in be's memory. */
void be_split_attention(be_split *sp, const be_attn *a, void *scratch);
/* Bytes read back from `be` since be_split_new, and the reads (0 where it is unified): for benchmarks. */
uint64_t be_split_read_bytes(const be_split *sp);
uint64_t be_split_reads(const be_split *sp);
/* Bytes uploaded to `be` since be_split_new (the host's partial results; 0 where it is unified). */
uint64_t be_split_sent_bytes(const be_split *sp);

/* Address of the record of slot reference r for layer l in host-addressable pools (CPU backend,
 * pinned/host pools): for the KV module's host-side readers and the CPU kernels. */
static inline void *be_kv_record(const be_kv_pools *p, int32_t r, int layer) {
    const be_kv_pool *q = &p->pool[BE_SLOT_TIER(r)];
    int32_t s = BE_SLOT_IDX(r);
    size_t per = (size_t)1 << q->chunk_shift;
    char *base = (char *)q->chunks[s >> q->chunk_shift];
    return base + (((size_t)(layer % q->layers) * per) + ((size_t)s & (per - 1))) * q->record_bytes;
}

#endif
