/* matmul.c — Y = X · Wᵀ over the thread pool (matmul.h).
 * Two phases: (1) every activation row is converted once into scratch, in parallel over rows;
 * (2) output rows (weight rows) are split over threads in grain-aligned chunks. Inside a chunk,
 * weight rows are taken in blocks of MM_ROWS that stay in L1/L2 while every group of up to MM_NX
 * tokens is run against them with one vec_dot_tile call; the kernel unpacks each weight block once
 * per group instead of once per token and keeps the group's integer sums in registers. One token
 * is the memory-bound decode case: a plain streaming loop of vec_dot.
 * Determinism: every vec_dot_tile output equals vec_dot exactly, so neither the thread count nor
 * the token grouping changes any bit of Y. */
#include "backend/cpu/matmul.h"

#include "backend/cpu/ops_impl.h"
#include "base/err.h"

#define MM_NX 4        /* tokens per vec_dot_tile call */
#define MM_ROWS 16     /* weight rows per cache block (prefill) */
#define MM_GRAIN 16    /* rows per pool chunk unit */
#define MM_ALIGN 64

static size_t act_stride(uint32_t type, int64_t n_in) {
    return (cpu_act_row_size(type, n_in) + MM_ALIGN - 1) / MM_ALIGN * MM_ALIGN;
}

size_t cpu_matmul_scratch_size(uint32_t type, int64_t n_in, int64_t n_tok) {
    return act_stride(type, n_in) * (size_t)n_tok + MM_ALIGN;
}

typedef struct {
    const cpu_type_ops *ops;
    const uint8_t *w;   /* n_out rows of w_row bytes */
    size_t w_row;
    int64_t n_in, n_tok;
    const float *x;     /* [n_tok][n_in] */
    float *y;           /* [n_tok][y_stride] */
    int64_t y_stride;
    uint8_t *act;       /* [n_tok][a_stride] converted activations */
    size_t a_stride;
} mm_ctx;

static void mm_convert(void *vc, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    mm_ctx *c = vc;
    for (int64_t t = t0; t < t1; t++) c->ops->quantize_act(c->x + t * c->n_in, c->act + (size_t)t * c->a_stride, c->n_in);
}

static void mm_rows(void *vc, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const mm_ctx *c = vc;
    const int64_t n = c->n_in;
    if (c->n_tok == 1) {
        const uint8_t *w = c->w + (size_t)r0 * c->w_row;
        for (int64_t r = r0; r < r1; r++, w += c->w_row) c->ops->vec_dot(n, c->y + r, w, c->act);
        return;
    }
    for (int64_t rb = r0; rb < r1; rb += MM_ROWS) {
        int nr = r1 - rb < MM_ROWS ? (int)(r1 - rb) : MM_ROWS;
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += MM_NX) {
            int nx = c->n_tok - t0 < MM_NX ? (int)(c->n_tok - t0) : MM_NX;
            c->ops->vec_dot_tile(n, c->y + t0 * c->y_stride + rb, (size_t)c->y_stride, c->w + (size_t)rb * c->w_row, c->w_row,
                                 nr, c->act + (size_t)t0 * c->a_stride, c->a_stride, nx);
        }
    }
}

void cpu_matmul(tkv_pool *pool, cpu_isa isa, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y, int64_t y_stride, void *scratch) {
    const cpu_type_ops *ops = cpu_ops_for(type, isa);
    TKV_ASSERT(ops != NULL);
    int64_t blck = cpu_type_blck(type); /* activation blocks have the weight block size */
    TKV_ASSERT(blck > 0 && n_in % blck == 0);
    TKV_ASSERT(n_tok >= 0 && (n_tok <= 1 || y_stride >= n_out));
    if (n_tok == 0 || n_out == 0) return;
    mm_ctx c = {
        .ops = ops, .w = w, .w_row = cpu_weight_row_size(type, n_in), .n_in = n_in, .n_tok = n_tok,
        .x = x, .y = y, .y_stride = y_stride,
        .act = (uint8_t *)(((uintptr_t)scratch + MM_ALIGN - 1) & ~(uintptr_t)(MM_ALIGN - 1)),
        .a_stride = act_stride(type, n_in),
    };
    pool_for(pool, n_tok, mm_convert, &c);
    pool_for_grain(pool, n_out, MM_GRAIN, mm_rows, &c);
}
