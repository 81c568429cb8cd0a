/* park.h — T4: kept conversations parked out of memory in a store of records (tkv_seq_save), and the
 * index of what is parked there, so that a later request that continues one restores it
 * (tkv_seq_load) instead of recomputing it.
 *
 * The store is the caller's (a directory, a shared server: sched_park in sched.h); every call may
 * fail, and nothing is lost but the time a recompute takes: a record that cannot be written is
 * dropped and counted, one that cannot be read back (missing, corrupted, another model's, a store
 * that is down) is forgotten and counted, and the request prefills. Keys are the hash of the salt and
 * the tokens. A store without an index of its own (a directory) is indexed here: each record's tokens,
 * read from its head alone at start (no rows), bounded by max_bytes of records, the least recently
 * used deleted beyond it; a record read back leaves it. A shared store (find) keeps its own index and
 * its records: a record read back stays for the other servers.
 * Not done here: when to park (conv.c: entries beyond their bounds, and all of them at the end). */
#ifndef TKV_SCHED_PARK_H
#define TKV_SCHED_PARK_H
#include <stdint.h>

#include "sched/sched.h"

typedef struct {
    char key[24];
    uint64_t salt;
    int32_t *tokens;
    int n;
    int64_t bytes;
    uint64_t used;
} park_entry;

typedef struct park_index {
    const sched_park *st; /* NULL: no store (every call is a no-op) */
    const tkv_model *m;
    park_entry *e;
    int n, cap;
    int min_len;
    uint64_t tick;
    int64_t bytes;
    int64_t parks, restores, restore_failures, drops;
    double restore_seconds;
} park_index;

/* Reads the store's index (the head of every record held; records of another model are skipped). */
void park_init(park_index *p, const sched_park *st, const tkv_model *m, int min_len);
void park_free(park_index *p);
/* Writes sequence seq (holding tokens[0..n)) to the store; 0, or -1 (not parked: counted as a
 * drop). The sequence stays open. */
int park_put(park_index *p, tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt);
/* The parked record of this salt that prompt[0..n) continues the furthest (at most n - 1 of its
 * tokens, at least min_len; in a local store only one worth giving up beside `floor` ids shared
 * otherwise, ids.h: a shared store keeps what it hands out): 0, its key and the count in *lcp; -1 when
 * there is none. */
int park_lookup(const park_index *p, const int32_t *prompt, int n, uint64_t salt, int floor, char key[24], int *lcp);
/* Reads record key back into a new sequence of its own (idle-free, re-tiered) and returns it, or -1
 * (logged, counted: no room, gone, corrupted, another model's). A local store forgets the record
 * either way. */
int park_restore(park_index *p, tkv_session *s, const char *key);
/* 1 when conversations are written as their requests end (a shared store). */
int park_write_through(const park_index *p);

#endif
