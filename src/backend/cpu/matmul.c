/* matmul.c — Y = X · Wᵀ over the worker threads (matmul.h).
 * Two phases: (1) every activation row is converted once into scratch, in parallel over rows;
 * (2) output rows (weight rows) are split over threads in grain-aligned chunks. Several matrices
 * that read the same input (q/k/v, gate/up) run as one job: their rows are concatenated, the
 * activations are converted once per format, and the workers are woken once. Inside a chunk,
 * weight rows are taken in blocks of MM_ROWS that stay in L1/L2 while every group of up to MM_NX
 * tokens is run against them with one vec_dot_tile call; the kernel unpacks each weight block once
 * per group instead of once per token and keeps the group's integer sums in registers. One token
 * is the memory-bound decode case: a plain streaming loop of vec_dot.
 * Determinism: every vec_dot_tile output equals vec_dot exactly, so neither the thread count nor
 * the token grouping changes any bit of Y. */
#include "backend/cpu/matmul.h"

#include "backend/cpu/ops_impl.h"
#include "base/err.h"

#define MM_NX 8        /* tokens per vec_dot_tile call */
#define MM_ROWS 16     /* weight rows per cache block (prefill) */
#define MM_GRAIN 16    /* rows per chunk unit of the workers */
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
    int64_t n_out, row0; /* rows row0 .. row0+n_out-1 of the job's concatenated outputs */
    float *y;           /* [n_tok][y_stride] */
    int64_t y_stride;
    uint8_t *act;       /* [n_tok][a_stride] converted activations */
    size_t a_stride;
} mm_part;

typedef struct {
    int64_t n_in, n_tok;
    const float *x;     /* [n_tok][n_in] */
    int n_parts, n_conv;
    mm_part part[CPU_MM_MAX_PARTS];
    int conv[CPU_MM_MAX_PARTS]; /* parts whose activation conversion this job does */
} mm_ctx;

static void convert_rows(const mm_ctx *c, const mm_part *p, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++)
        p->ops->quantize_act(c->x + t * c->n_in, p->act + (size_t)t * p->a_stride, c->n_in);
}

static void mm_convert(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const mm_ctx *c = vc;
    for (int64_t i = i0; i < i1; i++) { /* item = conversion * n_tok + token */
        const mm_part *p = &c->part[c->conv[i / c->n_tok]];
        convert_rows(c, p, i % c->n_tok, i % c->n_tok + 1);
    }
}

static void part_rows(const mm_ctx *c, const mm_part *p, int64_t r0, int64_t r1) {
    const int64_t n = c->n_in;
    if (c->n_tok == 1) {
        const uint8_t *w = p->w + (size_t)r0 * p->w_row;
        for (int64_t r = r0; r < r1; r++, w += p->w_row) p->ops->vec_dot(n, p->y + r, w, p->act);
        return;
    }
    for (int64_t rb = r0; rb < r1; rb += MM_ROWS) {
        int nr = r1 - rb < MM_ROWS ? (int)(r1 - rb) : MM_ROWS;
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += MM_NX) {
            int nx = c->n_tok - t0 < MM_NX ? (int)(c->n_tok - t0) : MM_NX;
            p->ops->vec_dot_tile(n, p->y + t0 * p->y_stride + rb, (size_t)p->y_stride, p->w + (size_t)rb * p->w_row, p->w_row,
                                 nr, p->act + (size_t)t0 * p->a_stride, p->a_stride, nx);
        }
    }
}

/* rows [i0, i1) of the concatenated outputs: the slice of each part that falls inside */
static void mm_rows(void *vc, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const mm_ctx *c = vc;
    for (int k = 0; k < c->n_parts; k++) {
        const mm_part *p = &c->part[k];
        int64_t r0 = i0 > p->row0 ? i0 - p->row0 : 0, r1 = i1 - p->row0 < p->n_out ? i1 - p->row0 : p->n_out;
        if (r0 < r1) part_rows(c, p, r0, r1);
    }
}

size_t cpu_matmul_multi_scratch_size(const cpu_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok) {
    size_t s = 0;
    for (int k = 0; k < n_outs; k++) s += cpu_matmul_scratch_size(outs[k].type, n_in, n_tok);
    return s;
}

void cpu_matmul_multi(tkv_workers *workers, cpu_isa isa, const cpu_mm_out *outs, int n_outs, int64_t n_in, const float *x,
                      int64_t n_tok, void *scratch) {
    TKV_ASSERT(n_outs >= 1 && n_outs <= CPU_MM_MAX_PARTS);
    TKV_ASSERT(n_tok >= 0);
    if (n_tok == 0) return;
    mm_ctx c = {.n_in = n_in, .n_tok = n_tok, .x = x, .n_parts = n_outs};
    uint8_t *free_act = (uint8_t *)(((uintptr_t)scratch + MM_ALIGN - 1) & ~(uintptr_t)(MM_ALIGN - 1));
    int64_t rows = 0;
    for (int k = 0; k < n_outs; k++) {
        const cpu_mm_out *o = &outs[k];
        mm_part *p = &c.part[k];
        const cpu_type_ops *ops = cpu_ops_for(o->type, isa);
        TKV_ASSERT(ops != NULL);
        int64_t blck = cpu_type_blck(o->type); /* activation blocks have the weight block size */
        TKV_ASSERT(blck > 0 && n_in % blck == 0);
        TKV_ASSERT(n_tok <= 1 || o->y_stride >= o->n_out);
        *p = (mm_part){.ops = ops, .w = o->w, .w_row = cpu_weight_row_size(o->type, n_in), .n_out = o->n_out,
                       .row0 = rows, .y = o->y, .y_stride = o->y_stride, .a_stride = act_stride(o->type, n_in)};
        rows += o->n_out;
        /* parts with the same activation format share one conversion */
        for (int j = 0; j < k && !p->act; j++)
            if (c.part[j].ops->act_type == p->ops->act_type) p->act = c.part[j].act;
        if (!p->act) {
            p->act = free_act;
            free_act += p->a_stride * (size_t)n_tok;
            c.conv[c.n_conv++] = k;
        }
    }
    if (n_tok == 1) /* one short row per format: not worth waking the workers */
        for (int k = 0; k < c.n_conv; k++) convert_rows(&c, &c.part[c.conv[k]], 0, 1);
    else
        workers_for(workers, n_tok * c.n_conv, mm_convert, &c);
    workers_for_grain(workers, rows, MM_GRAIN, mm_rows, &c);
}

void cpu_matmul(tkv_workers *workers, cpu_isa isa, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tok, float *y, int64_t y_stride, void *scratch) {
    if (n_out == 0) return;
    cpu_mm_out o = {.type = type, .w = w, .n_out = n_out, .y = y, .y_stride = y_stride};
    cpu_matmul_multi(workers, isa, &o, 1, n_in, x, n_tok, scratch);
}
