/* park_dir.h — a directory as the store of parked conversations (sched_park, sched.h): one file per
 * record, KEY.tkvrec, mode 0600, written under a temporary name and renamed into place (a reader never
 * sees half a record); created 0700 when missing. Failures are logged one line each and the call
 * fails: the scheduler then drops or recomputes, nothing else depends on the directory.
 * Not done here: what a record holds (src/kv/kv_rec.h) or when to park (src/sched/park.h). */
#ifndef TKV_SERVE_PARK_DIR_H
#define TKV_SERVE_PARK_DIR_H
#include <stdint.h>
#include <stdio.h>

#include "sched/sched.h"

/* A store on dir, holding at most max_bytes of records (0: no bound); log: one line per failure. */
int park_dir_open(const char *dir, int64_t max_bytes, FILE *log, sched_park *out, char *err, size_t errlen);
void park_dir_close(sched_park *p);

#endif
