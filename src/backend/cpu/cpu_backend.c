/* cpu_backend.c — the CPU op table (see cpu_backend.h): memory, weight preparation (the reordered
 * layouts of repack.c / repack32.c, made in place in the model's pages), and the dense ops of the
 * forward. The arithmetic of each op is the one the forward always had (RMSNorm sums squares in
 * double, RoPE angles are an f32 running product), so logits are the same bits as before the seam.
 * Attention is cpu_attention.c's, the KV copies cpu_kvcopy.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "base/err.h"
#include "base/meminfo.h"
#include "gguf/gguf.h"

static cpu_be *cb(be_backend *b) { return (cpu_be *)(void *)b; }

static void cpu_close(be_backend *b) {
    cpu_be *c = cb(b);
    workers_free(c->workers);
    free(c);
}

static const char *cpu_describe(const be_backend *b) { return ((const cpu_be *)(const void *)b)->desc; }

static void cpu_host_for(be_backend *b, int64_t n, void (*fn)(void *ctx, int64_t i0, int64_t i1, int tid), void *ctx) {
    workers_for(((cpu_be *)(void *)b)->workers, n, fn, ctx);
}

/* ---- memory: all host ---- */

static void *cpu_alloc(be_backend *b, size_t bytes, be_mem mem, char *err, size_t errlen) {
    (void)b, (void)mem;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        tkv_errf(err, errlen, "out of memory: %zu bytes (%.1f MiB)", bytes, tkv_mib((double)bytes));
        return NULL;
    }
    return p; /* not zeroed: a row is written before it is read, and untouched pages stay uncommitted */
}

static void cpu_free(be_backend *b, void *p, be_mem mem) {
    (void)b, (void)mem;
    free(p);
}

static void cpu_upload(be_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (dst != src) memcpy(dst, src, bytes);
}

static const void *cpu_read(be_backend *b, const void *src, size_t bytes, void *host_tmp) {
    (void)b, (void)bytes, (void)host_tmp;
    return src;
}

/* ---- weights ---- */

static int cpu_prepare_weight(be_backend *b, be_mat *m, int role, char *err, size_t errlen) {
    cpu_be *c = cb(b);
    if (!cpu_ops_for(m->type, CPU_ISA_GENERIC))
        return tkv_errf(err, errlen, "weights of type %s are not supported by the CPU kernels", ggml_type_name(m->type));
    if (c->keep_layout || role == BE_W_EMBED) return 0; /* an untied embedding is only looked up */
    uint32_t rt = cpu_repack_type(m->type, m->n_in);
    if (!rt) return 0;
    cpu_repack_rows(m->type, (void *)m->data, m->n_in, m->n_out);
    m->type = rt;
    return 0;
}

static const float *cpu_prepare_vector(be_backend *b, const float *host, int64_t n, char *err, size_t errlen) {
    (void)b, (void)n, (void)err, (void)errlen;
    return host;
}

static size_t cpu_matmul_scratch(const be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, int64_t n_tok) {
    (void)b;
    cpu_mm_out o[BE_MM_MAX_OUTS];
    TKV_ASSERT(n_outs >= 1 && n_outs <= BE_MM_MAX_OUTS);
    for (int i = 0; i < n_outs; i++) o[i] = (cpu_mm_out){.type = outs[i].w->type, .n_out = outs[i].w->n_out};
    return n_outs == 1 ? cpu_matmul_scratch_size(o[0].type, n_in, n_tok) : cpu_matmul_multi_scratch_size(o, n_outs, n_in, n_tok);
}

/* ---- dense ops ---- */

static void cpu_matmul_op(be_backend *b, const be_mm_out *outs, int n_outs, int64_t n_in, const float *x, int64_t n_tok,
                          void *scratch) {
    cpu_be *c = cb(b);
    if (n_outs == 1) {
        const be_mat *w = outs[0].w;
        cpu_matmul(c->workers, c->isa, w->type, w->data, n_in, w->n_out, x, n_tok, outs[0].y, outs[0].y_stride, scratch);
        return;
    }
    cpu_mm_out o[BE_MM_MAX_OUTS];
    TKV_ASSERT(n_outs <= BE_MM_MAX_OUTS);
    for (int i = 0; i < n_outs; i++)
        o[i] = (cpu_mm_out){.type = outs[i].w->type, .w = outs[i].w->data, .n_out = outs[i].w->n_out, .y = outs[i].y,
                            .y_stride = outs[i].y_stride};
    cpu_matmul_multi(c->workers, c->isa, o, n_outs, n_in, x, n_tok, scratch);
}

static void cpu_embed(be_backend *b, const be_mat *emb, const int32_t *tokens, int n, float *x) {
    const cpu_type_ops *ops = cpu_ops_for(emb->type, cb(b)->isa);
    size_t row = cpu_weight_row_size(emb->type, emb->n_in);
    for (int t = 0; t < n; t++)
        ops->dequant_row((const uint8_t *)emb->data + (size_t)tokens[t] * row, x + (size_t)t * emb->n_in, emb->n_in);
}

/* y = rmsnorm(x) * w, row by row; sum of squares in double as llama.cpp does */
static void cpu_rmsnorm(be_backend *b, float *y, const float *x, const float *w, int n_rows, int n, float eps) {
    (void)b;
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *yr = y + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float mean = (float)(ss / n);
        float scale = 1.0f / sqrtf(mean + eps);
        for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

static void cpu_add_bias(be_backend *b, float *y, const float *bias, int n_rows, int n) {
    (void)b;
    if (!bias) return;
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] += bias[i];
}

static void cpu_combine_rows(be_backend *b, float *y, const float *src, const int *rows, const float *w, int n, int k,
                             int width) {
    (void)b;
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * width;
        for (int j = 0; j < k; j++) {
            const float *s = src + (size_t)rows[t * k + j] * width;
            float wj = w[t * k + j];
            for (int i = 0; i < width; i++) {
                float p = s[i] * wj; /* rounded before the add, as a multiply then an add of tensors */
                yr[i] = j ? yr[i] + p : p;
            }
        }
    }
}

static void cpu_add(be_backend *b, float *y, const float *x, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* The reference of the ranked score update (backend.h): one thread, positions in order. The KV
 * module updates its own scores on the host (in parallel, kv_scores.c) and calls this only on a
 * backend that is not host memory, i.e. cpu-async; the GPU op checks compare against it. */
static void cpu_score_add(be_backend *b, double *const *score, const int *n_pos, int n_tok, const float *mass, int n_head,
                          int stride, double w) {
    (void)b;
    for (int t = 0; t < n_tok; t++) {
        if (!score[t]) continue;
        const float *m = mass + (size_t)t * n_head * stride;
        for (int i = 0; i < n_pos[t]; i++) {
            double sc = score[t][i];
            for (int h = 0; h < n_head; h++) sc += w * m[(size_t)h * stride + i];
            score[t][i] = sc;
        }
    }
}

/* cos/sin of every rotated pair of one position: theta_0 = pos, theta_{i+1} = theta_i * s */
static void cpu_rope(be_backend *b, float *x, int n_rows, int n_heads, int hd, const int *pos, float base, float scale,
                     int neox) {
    (void)b;
    int half = hd / 2;
    float s = powf(base, -2.0f / (float)hd);
    float cs[2048];
    TKV_ASSERT(hd <= 1024);
    for (int t = 0; t < n_rows; t++) {
        float theta = (float)pos[t];
        for (int i = 0; i < half; i++) {
            float th = theta * scale;
            cs[2 * i] = cosf(th);
            cs[2 * i + 1] = sinf(th);
            theta *= s;
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            for (int i = 0; i < half; i++) {
                int a = neox ? i : 2 * i, c = neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[c], co = cs[2 * i], si = cs[2 * i + 1];
                v[a] = x0 * co - x1 * si;
                v[c] = x0 * si + x1 * co;
            }
        }
    }
}

typedef struct { float *gate; const float *up; const cpu_f32_ops *f32; } swiglu_job;

/* gate[i] = silu(gate[i]) * up[i]; split over the workers (the exp dominates at prefill sizes) */
static void swiglu_task(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    swiglu_job *J = ctx;
    J->f32->swiglu(J->gate + i0, J->up + i0, i1 - i0);
}

static void cpu_swiglu(be_backend *b, float *gate, const float *up, int64_t n) {
    cpu_be *c = cb(b);
    swiglu_job J = {gate, up, c->f32};
    workers_for_grain(c->workers, n, 1024, swiglu_task, &J);
}

static void cpu_expand_cols(be_backend *b, float *dst, int dst_stride, const float *src, const int32_t *cols, int src_stride,
                            const int *n_cols, int n_tok, int rows) {
    (void)b;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) {
            size_t row = (size_t)t * rows + r;
            float *d = dst + row * dst_stride;
            const float *s = src + row * src_stride;
            const int32_t *c = cols + (size_t)t * src_stride;
            memset(d, 0, (size_t)dst_stride * sizeof *d);
            for (int k = 0; k < n_cols[t]; k++) d[c[k]] = s[k];
        }
}

static void cpu_gather_rows(be_backend *b, float *dst, const float *src, const int *rows, int n, int width) {
    (void)b;
    for (int i = 0; i < n; i++)
        if (dst + (size_t)i * width != src + (size_t)rows[i] * width)
            memcpy(dst + (size_t)i * width, src + (size_t)rows[i] * width, (size_t)width * sizeof(float));
}

static void cpu_copy_wait(be_backend *b, int layer) { (void)b, (void)layer; } /* copies are synchronous */

/* the two ops in turn (the reference of a backend that fuses them; the forward's fused path runs here) */
static void cpu_add_rmsnorm(be_backend *b, float *x, const float *d, float *y, const float *w, int rows, int n, float eps) {
    cpu_add(b, x, d, (int64_t)rows * n);
    cpu_rmsnorm(b, y, x, w, rows, n, eps);
}

static const be_ops cpu_ops = {
    .name = "cpu",
    .unified = 1,
    .kv_fmts = (1u << BE_KV_N_FMT) - 1, /* every format */
    .attn_t2_fmts = ((1u << BE_KV_N_FMT) - 1) & ~((1u << BE_KV_Q8_HEAD) - 1), /* every T2 format, in place */
    .close = cpu_close,
    .describe = cpu_describe,
    .host_for = cpu_host_for,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .read = cpu_read,
    .prepare_weight = cpu_prepare_weight,
    .prepare_vector = cpu_prepare_vector,
    .matmul_scratch = cpu_matmul_scratch,
    .embed = cpu_embed,
    .matmul = cpu_matmul_op,
    .rmsnorm = cpu_rmsnorm,
    .combine_rows = cpu_combine_rows,
    .add_bias = cpu_add_bias,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .gather_rows = cpu_gather_rows,
    .expand_cols = cpu_expand_cols,
    .kv_write = cpu_be_kv_write,
    .kv_read = cpu_be_kv_read,
    .copy_moves = cpu_be_copy_moves,
    .copy_wait = cpu_copy_wait,
    .attention_scratch = cpu_be_attention_scratch,
    .attention = cpu_be_attention,
    .attention_merge = cpu_be_attention_merge,
    .score_add = cpu_score_add,
};

const be_ops *cpu_be_ops(void) { return &cpu_ops; }

int cpu_isa_choose(const char *k, cpu_isa *out, char *err, size_t errlen) {
    cpu_isa best = cpu_detect_isa();
    *out = best;
    if (!k || !strcmp(k, "auto")) return 0;
    int found = -1;
    for (int i = 0; i <= CPU_ISA_AVX512; i++)
        if (!strcmp(k, cpu_isa_name((cpu_isa)i))) found = i;
    if (found < 0) return tkv_errf(err, errlen, "unknown kernels '%s' (auto, generic, avx2, avx512)", k);
    if (found > (int)best)
        return tkv_errf(err, errlen, "kernel variant %s is not supported by this CPU (best: %s)", k, cpu_isa_name(best));
    *out = (cpu_isa)found;
    return 0;
}

int cpu_be_init(cpu_be *c, const be_params *p, char *err, size_t errlen) {
    int threads = p && p->n_threads > 0 ? p->n_threads : 2;
    if (threads > 256) return tkv_errf(err, errlen, "threads must be 1..256 (got %d)", threads);
    cpu_isa isa;
    if (cpu_isa_choose(p ? p->kernels : NULL, &isa, err, errlen)) return -1;
    c->base.ops = &cpu_ops;
    c->isa = isa;
    c->f32 = cpu_f32_ops_for(isa);
    c->keep_layout = p ? p->keep_layout : 0;
    c->workers = workers_init(threads);
    snprintf(c->desc, sizeof c->desc, "%s", cpu_isa_name(isa));
    return 0;
}

int cpu_backend_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    cpu_be *c = tkv_xcalloc(1, sizeof *c);
    if (cpu_be_init(c, p, err, errlen)) {
        free(c);
        return -1;
    }
    *out = &c->base;
    return 0;
}
