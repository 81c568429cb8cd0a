/* park_redis.h — a Redis (or Valkey) server as the store of parked conversations, shared by several
 * `tierkv serve` replicas (sched_park with an index of its own, through hiredis): every conversation
 * is written as its request ends, so a conversation begun on one replica continues on another with
 * nothing recomputed; a longest-prefix lookup by chunk hashes. The server's memory is bounded by its
 * own settings (maxmemory and an eviction policy: a record it evicted is recomputed). Down or
 * unreachable: one log line per outage, and every request recomputes until it answers again.
 * Not done here: the record format (src/kv/kv_rec.h), when to park (src/sched/). */
#ifndef TKV_SERVE_PARK_REDIS_H
#define TKV_SERVE_PARK_REDIS_H
#include <stdio.h>

#include "sched/sched.h"

/* url: redis://HOST:PORT[/DB]. A server that does not answer at start is only logged. */
int park_redis_open(const char *url, FILE *log, sched_park *out, char *err, size_t errlen);
void park_redis_close(sched_park *s);

#endif
