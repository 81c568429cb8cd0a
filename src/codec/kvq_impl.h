/* kvq_impl.h — what kvq.c shares with kvq_avx2.c: the codec table (name, block kind, rotation). */
#ifndef TKV_KVQ_IMPL_H
#define TKV_KVQ_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "codec/kvq.h"

/* How a block (or q8h group) is quantised. */
enum { KVQ_K_Q8H, KVQ_K_Q8B, KVQ_K_Q4S };

typedef struct {
    const char *name;
    int kind; /* KVQ_K_* */
    int rot;  /* 1: the Hadamard rotation per head first */
} kvq_info;

extern const kvq_info kvq_infos[KVQ_N];

#endif
