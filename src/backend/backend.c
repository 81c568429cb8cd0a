/* backend.c — STUB written on the h4-cuda branch so that the CUDA backend links and is tested
 * before the CPU-side engineer's backend.c lands; that file replaces this one (keeping the
 * `#ifdef TKV_CUDA` branch of be_open below). Owns: be_open's dispatch by name, and the two
 * record-format helpers of backend.h. Does not implement the CPU backend: be_open("cpu") fails
 * with a message in this branch. */
#include "backend/backend.h"

#include <string.h>

#include "base/err.h"
#ifdef TKV_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

size_t be_kv_record_bytes(be_kv_fmt fmt, int n_head_kv, int head_dim) {
    size_t kv_dim = (size_t)n_head_kv * (size_t)head_dim;
    switch (fmt) {
    case BE_KV_F32: return 2 * kv_dim * 4;
    case BE_KV_F16: return 2 * kv_dim * 2;
    case BE_KV_Q8_HEAD: return 2 * kv_dim + 2 * (size_t)n_head_kv * 4;
    default: return 0;
    }
}

int be_kv_fmt_exact(be_kv_fmt fmt) { return fmt == BE_KV_F32 || fmt == BE_KV_F16; }

int be_open(const be_params *p, be_backend **out, char *err, size_t errlen) {
    *out = NULL;
    const char *name = p && p->name ? p->name : "cpu";
    if (!strcmp(name, "cuda")) {
#ifdef TKV_CUDA
        return cuda_backend_open(p, out, err, errlen);
#else
        return tkv_errf(err, errlen, "backend 'cuda': this build has no CUDA backend (build with `make cuda`)");
#endif
    }
    if (!strcmp(name, "cpu")) return tkv_errf(err, errlen, "backend 'cpu': not in this branch (h4-cuda stub of backend.c)");
    return tkv_errf(err, errlen, "unknown backend '%s' (cpu or cuda)", name);
}
