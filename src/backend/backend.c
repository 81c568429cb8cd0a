/* backend.c — opening a backend by name, and the KV record formats every backend shares (their sizes
 * are part of the seam: the KV module sizes its pools by them). */
#include "backend/backend.h"

#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

size_t be_kv_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim) {
    size_t kd = (size_t)n_head_kv * (size_t)head_dim;
    switch (fmt) {
    case BE_KV_F32: return 2 * kd * sizeof(float);
    case BE_KV_F16: return 2 * kd * sizeof(uint16_t);
    case BE_KV_Q8_HEAD: return 2 * kd + 2 * (size_t)n_head_kv * sizeof(float);
    default: return 0;
    }
}

int be_kv_fmt_exact(be_kv_fmt fmt) { return fmt == BE_KV_F32 || fmt == BE_KV_F16; }

int be_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    const char *name = p && p->name ? p->name : "cpu";
    if (!strcmp(name, "cpu")) return cpu_backend_open(p, out, err, errlen);
    if (!strcmp(name, "cuda")) {
#ifdef TKV_CUDA
        return cuda_backend_open(p, out, err, errlen);
#else
        return tkv_errf(err, errlen, "backend cuda: this build has no CUDA backend (build it with `make cuda`)");
#endif
    }
    return tkv_errf(err, errlen, "unknown backend '%s' (cpu, cuda)", name);
}
