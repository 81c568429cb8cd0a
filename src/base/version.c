/* version.c — build stamp (see version.h). TKV_COMMIT, TKV_FLAGS and TKV_SOURCES come from the Makefile, which
 * recompiles this one file at every build so the stamp never goes stale. */
#include "base/version.h"

#ifndef TKV_COMMIT
#define TKV_COMMIT "unknown"
#endif
#ifndef TKV_FLAGS
#define TKV_FLAGS "unknown"
#endif
#ifndef TKV_SOURCES
#define TKV_SOURCES "unknown"
#endif

const char *tkv_build_commit(void) { return TKV_COMMIT; }
const char *tkv_build_flags(void) { return TKV_FLAGS; }
const char *tkv_build_sources(void) { return TKV_SOURCES; }

uint64_t tkv_fnv1a64_more(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t tkv_fnv1a64(const void *p, size_t n) { return tkv_fnv1a64_more(TKV_FNV1A64_INIT, p, n); }
