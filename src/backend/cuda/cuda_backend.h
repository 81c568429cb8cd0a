/* cuda_backend.h — the CUDA implementation of backend.h (src/backend/cuda/, built by `make cuda`).
 * The only C entry point; everything else is the be_ops table it returns. Design and guarantees:
 * docs/CUDA.md. */
#ifndef TKV_CUDA_BACKEND_H
#define TKV_CUDA_BACKEND_H
#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens device p->device (0 by default): streams, events and the staging buffers are made here, so
 * no op allocates device or pinned memory later. Fails with the CUDA runtime's message when there
 * is no usable device (no driver, no GPU, a GPU older than sm_90 for which this build has no code). */
int cuda_backend_open(const be_params *p, be_backend **out, char *err, size_t errlen);

/* Loads cuBLAS as the backend would (TIERKV_CUBLAS, the loader's path, the toolkit's folders) and
 * unloads it: 0 with its version in msg, or -1 with why not. Needs no GPU. */
int cuda_blas_probe(char *msg, size_t n);
/* the tokens from which a matmul of this weight type goes to cuBLAS on b; 0: never (not loaded, or
 * TIERKV_CUDA_GEMM=off) */
int cuda_gemm_from(const be_backend *b, uint32_t type);

/* The graphs of bracketed calls (TIERKV_CUDA_GRAPH; docs/CUDA.md) since open. */
typedef struct {
    uint64_t captures;     /* calls captured */
    uint64_t updated;      /* captures launched through a kept graph, updated in place */
    uint64_t instantiated; /* captures launched through a graph instantiated for them */
    uint64_t breaks;       /* captures ended early by an op that waits (the rest ran op by op) */
    uint64_t refused;      /* updates the kept graph refused (then instantiated anew) */
    int refused_why;       /* the first refusal's cudaGraphExecUpdateResult (0: none) */
} cuda_graph_stats;
void cuda_graph_counts(const be_backend *b, cuda_graph_stats *s);

#ifdef __cplusplus
}
#endif
#endif
