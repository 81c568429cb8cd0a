/* version.h — what build this binary is: the git commit it was built from (with "-dirty" when the
 * work tree had changes) and the compiler flags, stamped at build time by the Makefile into
 * version.c alone. Results files carry both, so a number can be traced to the code that made it. */
#ifndef TKV_VERSION_H
#define TKV_VERSION_H
#include <stddef.h>
#include <stdint.h>

const char *tkv_build_commit(void); /* e.g. "68a244b0c1d2" or "68a244b0c1d2-dirty"; "unknown" outside git */
const char *tkv_build_flags(void);  /* compiler, optimisation and extra CFLAGS */
/* scripts/sources-hash.sh over the tree it was built from (uncommitted changes included); "unknown" */
const char *tkv_build_sources(void);

/* FNV-1a 64 of n bytes: the per-line check of results files (tamper-evident against hand edits,
 * not against a forger who recomputes it). */
uint64_t tkv_fnv1a64(const void *p, size_t n);
/* The same hash continued over n more bytes from h (TKV_FNV1A64_INIT to begin): hashes built piece by
 * piece, tkv_fnv1a64_more(TKV_FNV1A64_INIT, p, n) == tkv_fnv1a64(p, n). */
#define TKV_FNV1A64_INIT 0xcbf29ce484222325ULL
uint64_t tkv_fnv1a64_more(uint64_t h, const void *p, size_t n);

#endif
