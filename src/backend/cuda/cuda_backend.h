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

#ifdef __cplusplus
}
#endif
#endif
