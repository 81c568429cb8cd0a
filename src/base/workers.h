/* workers.h — persistent worker threads behind one call: workers_for(workers, n, fn, ctx).
 * fn(ctx, i0, i1, tid) is called on disjoint ranges covering [0, n); the caller's thread works too
 * (as tid 0). Threads claim chunks of about n / (4 * n_threads) items from a shared counter, so which
 * thread runs which range varies between calls: a result that depends only on (i, inputs) is the
 * same for every thread count and every run. No allocation per call. */
#ifndef TKV_WORKERS_H
#define TKV_WORKERS_H
#include <stdint.h>

typedef struct tkv_workers tkv_workers;
typedef void (*tkv_work_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

tkv_workers *workers_init(int n_threads); /* n_threads >= 1; 1 means the caller only */
void workers_free(tkv_workers *workers);
int workers_threads(const tkv_workers *workers);
/* Runs fn over [0, n) split into contiguous chunks. Blocks until all are done. */
void workers_for(tkv_workers *workers, int64_t n, tkv_work_fn fn, void *ctx);
/* The same, but chunks are `grain`-aligned (ranges start at multiples of grain, except the last end). */
void workers_for_grain(tkv_workers *workers, int64_t n, int64_t grain, tkv_work_fn fn, void *ctx);

#endif
