/* clock.h — monotonic wall time in seconds, for statistics and benchmarks. */
#ifndef TKV_CLOCK_H
#define TKV_CLOCK_H
#include <time.h>

static inline double tkv_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
