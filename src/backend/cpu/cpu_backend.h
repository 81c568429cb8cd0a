/* cpu_backend.h — the CPU implementation of backend.h: the op table over the kernels of ops.h
 * (generic C, AVX2 or AVX-512, chosen once from cpuid or by be_params.kernels) and worker threads.
 * Everything lives in host memory (unified). Internal to src/backend: the engine opens it through
 * be_open. */
#ifndef TKV_CPU_BACKEND_H
#define TKV_CPU_BACKEND_H
#include <stddef.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "base/workers.h"

typedef struct {
    be_backend base;
    tkv_workers *workers;
    cpu_isa isa;
    const cpu_f32_ops *f32;
    int keep_layout;
    char desc[32];
} cpu_be;

int cpu_backend_open(const be_params *p, be_backend **out, char *err, size_t errlen);
/* Fills a zeroed cpu_be (the first member of a larger struct, for cpu_async.c); the op table of the
 * plain CPU backend, for a backend that overrides a few of its ops. */
int cpu_be_init(cpu_be *c, const be_params *p, char *err, size_t errlen);
const be_ops *cpu_be_ops(void);
/* The test backend "cpu-async" (cpu_async.c): the CPU backend with a GPU's ordering, for tests. */
int cpu_async_open(const be_params *p, be_backend **out, char *err, size_t errlen);
/* cpu-async: upload_pinned sources that changed before the next read (0 when every caller kept them) */
uint64_t cpu_async_hazards(const be_backend *b);
/* cpu-async: moves submitted where a copy queue could have run them before compute ops queued ahead
 * of them that touch their records (cpu_async.c); and its copy_after_compute taken away (on 0) or
 * given back, so a test can show the count it prevents */
uint64_t cpu_async_order_hazards(const be_backend *b);
void cpu_async_copy_order(be_backend *b, int on);
/* cpu-async's brackets (step_begin): the calls bracketed, and the waits inside one */
void cpu_async_steps(const be_backend *b, uint64_t *steps, uint64_t *breaks);

/* The op table's parts, by file. */
void cpu_be_attention(be_backend *b, const be_attn *a, void *scratch);              /* cpu_attention.c */
size_t cpu_be_attention_scratch(const be_backend *b, int n_tok, int max_pos, int n_head, int head_dim);
void cpu_be_attention_merge(be_backend *b, float *o, const be_attn_part *parts, int n_parts, int n_tok, int n_head,
                            int head_dim, int mass_heads, int mass_stride, const int *n_pos);
void cpu_be_kv_write(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, const float *k,
                     const float *v);                                                   /* cpu_kvcopy.c */
void cpu_be_kv_read(be_backend *b, const be_kv_pools *p, int layer, const int32_t *slots, int n, float *k, float *v);
void cpu_be_copy_moves(be_backend *b, const be_kv_pools *p, const be_move *moves, int n, int layer);

#endif
