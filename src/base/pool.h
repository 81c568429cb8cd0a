/* pool.h — a persistent thread pool with one call: pool_for(pool, n, fn, ctx).
 * fn(ctx, i0, i1, tid) is called on disjoint ranges covering [0, n); the caller's thread works too
 * (as tid 0). Threads claim chunks of about n / (4 * n_threads) items from a shared counter, so which
 * thread runs which range varies between calls: a result that depends only on (i, inputs) is the
 * same for every thread count and every run. No allocation per call. */
#ifndef TKV_POOL_H
#define TKV_POOL_H
#include <stdint.h>

typedef struct tkv_pool tkv_pool;
typedef void (*tkv_pool_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

tkv_pool *pool_init(int n_threads); /* n_threads >= 1; 1 means the caller only */
void pool_free(tkv_pool *pool);
int pool_threads(const tkv_pool *pool);
/* Runs fn over [0, n) split into contiguous chunks. Blocks until all are done. */
void pool_for(tkv_pool *pool, int64_t n, tkv_pool_fn fn, void *ctx);
/* The same, but chunks are `grain`-aligned (ranges start at multiples of grain, except the last end). */
void pool_for_grain(tkv_pool *pool, int64_t n, int64_t grain, tkv_pool_fn fn, void *ctx);

#endif
