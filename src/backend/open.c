/* open.c — opening a backend by name: the one file of the seam that knows its implementations. */
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

int be_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    const char *name = p && p->name ? p->name : "cpu";
    if (!strcmp(name, "cpu")) return cpu_backend_open(p, out, err, errlen);
    if (!strcmp(name, "cpu-async")) return cpu_async_open(p, out, err, errlen); /* for tests: a GPU's ordering */
    if (!strcmp(name, "cuda")) {
#ifdef TKV_CUDA
        return cuda_backend_open(p, out, err, errlen);
#else
        return tkv_errf(err, errlen, "backend cuda: this build has no CUDA backend (build it with `make cuda`)");
#endif
    }
    return tkv_errf(err, errlen, "unknown backend '%s' (cpu, cuda; cpu-async for tests)", name);
}
