/* park_redis.c — a Redis (or Valkey) server as the shared store of parked conversations (see
 * park_redis.h). Keys, under the prefix "tkv:":
 *   rec:KEY        the record's bytes
 *   tok:KEY        its tokens (int32 little-endian), what a lookup compares
 *   chunk:HASH     a set of KEYs: the records whose tokens begin with the CHUNK-token multiple hashed
 *                  (FNV-1a of the salt and the tokens); a lookup asks for its own prompt's prefixes,
 *                  the longest held first found by bisection (a record holding a prefix holds every
 *                  shorter one), then compares the candidates' tokens
 * Records that Redis evicted or that are gone leave their keys in chunk sets: a lookup skips them.
 * One connection, used only by the engine thread; every command has a timeout, and after a failure
 * the store is left alone for a second (a down server costs requests nothing but their recompute). */
#include "serve/park_redis.h"

#include <errno.h>
#include <stdarg.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/clock.h"
#include "base/err.h"
#include "sched/ids.h"

enum { CHUNK = 16, MAX_CANDIDATES = 16 };

typedef struct {
    char host[256];
    int port, db;
    redisContext *c;
    double down_until; /* monotonic seconds: no attempt before */
    int down_said;     /* the failure was logged (once per outage) */
    FILE *log;
} park_redis;

static void say(park_redis *r, const char *what) {
    if (r->log) fprintf(r->log, "[park] redis %s:%d: %s\n", r->host, r->port, what);
}

static void fail(park_redis *r, const char *what) {
    if (!r->down_said) {
        char m[512];
        snprintf(m, sizeof m, "%s (%s); requests recompute until it answers", what,
                 r->c && r->c->err ? r->c->errstr : "no reply");
        say(r, m);
    }
    r->down_said = 1;
    if (r->c) redisFree(r->c);
    r->c = NULL;
    r->down_until = tkv_now_s() + 1.0;
}

/* A connected context, or NULL while the server is down. */
static redisContext *conn(park_redis *r) {
    if (r->c) return r->c;
    if (tkv_now_s() < r->down_until) return NULL;
    struct timeval tv = {0, 300000};
    r->c = redisConnectWithTimeout(r->host, r->port, tv);
    if (!r->c || r->c->err) { fail(r, "cannot connect"); return NULL; }
    struct timeval io = {2, 0};
    redisSetTimeout(r->c, io);
    if (r->db) {
        redisReply *y = redisCommand(r->c, "SELECT %d", r->db);
        int ok = y && y->type == REDIS_REPLY_STATUS;
        if (y) freeReplyObject(y);
        if (!ok) { fail(r, "SELECT failed"); return NULL; }
    }
    if (r->down_said) say(r, "answering again");
    r->down_said = 0;
    return r->c;
}

/* A command's reply, or NULL (the connection dropped: logged, reset). */
static redisReply *cmd(park_redis *r, const char *fmt, ...) {
    redisContext *c = conn(r);
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *y = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!y) { fail(r, "a command failed"); return NULL; }
    if (y->type == REDIS_REPLY_ERROR) {
        char m[512];
        snprintf(m, sizeof m, "error reply: %.400s", y->str);
        say(r, m);
    }
    return y;
}

/* The chunk hashes of salt and tokens[0..CHUNK*k) for k = 1..m into h[0..m) (sched/ids.h). */
static void chunk_hashes(uint64_t salt, const int32_t *tokens, int m, uint64_t *h) {
    uint64_t x = sched_ids_hash_salt(salt);
    for (int k = 0; k < m; k++) h[k] = x = sched_ids_hash_more(x, tokens + (size_t)k * CHUNK, CHUNK);
}

static int put(void *ctx, const char *key, const void *bytes, size_t n, uint64_t salt, const int32_t *tokens, int n_tokens) {
    park_redis *r = ctx;
    redisContext *c = conn(r);
    if (!c) return -1;
    uint8_t *tb = tkv_xmalloc((size_t)n_tokens * 4);
    for (int i = 0; i < n_tokens; i++)
        for (int k = 0; k < 4; k++) tb[4 * i + k] = (uint8_t)((uint32_t)tokens[i] >> (8 * k));
    int m = n_tokens / CHUNK;
    uint64_t *h = tkv_xmalloc((size_t)(m ? m : 1) * sizeof *h);
    chunk_hashes(salt, tokens, m, h);
    /* pipelined: the record and its tokens first, then the chunk sets that point at them */
    int sent = 0;
    sent += redisAppendCommand(c, "SET tkv:rec:%s %b", key, bytes, n) == REDIS_OK;
    sent += redisAppendCommand(c, "SET tkv:tok:%s %b", key, tb, (size_t)n_tokens * 4) == REDIS_OK;
    for (int k = 0; k < m; k++) sent += redisAppendCommand(c, "SADD tkv:chunk:%016llx %s", (unsigned long long)h[k], key) == REDIS_OK;
    free(tb), free(h);
    int rc = sent == m + 2 ? 0 : -1;
    for (int i = 0; i < sent; i++) {
        redisReply *y = NULL;
        if (redisGetReply(c, (void **)&y) != REDIS_OK || !y) { fail(r, "a write failed"); return -1; }
        if (y->type == REDIS_REPLY_ERROR) rc = -1;
        freeReplyObject(y);
    }
    return rc;
}

static void *get(void *ctx, const char *key, size_t max, size_t *n, size_t *total) {
    park_redis *r = ctx;
    *n = *total = 0;
    redisReply *y = cmd(r, "GET tkv:rec:%s", key);
    if (!y) return NULL;
    void *out = NULL;
    if (y->type == REDIS_REPLY_STRING) {
        size_t len = y->len, want = max && max < len ? max : len;
        out = tkv_xmalloc(want ? want : 1);
        memcpy(out, y->str, want);
        *n = want, *total = len;
    }
    freeReplyObject(y);
    return out;
}

static void del(void *ctx, const char *key) {
    redisReply *y = cmd(ctx, "DEL tkv:rec:%s tkv:tok:%s", key, key);
    if (y) freeReplyObject(y);
}

static int chunk_held(park_redis *r, uint64_t h) {
    redisReply *y = cmd(r, "EXISTS tkv:chunk:%016llx", (unsigned long long)h);
    int held = y && y->type == REDIS_REPLY_INTEGER && y->integer > 0;
    if (y) freeReplyObject(y);
    return held;
}

static int find(void *ctx, uint64_t salt, const int32_t *prompt, int n, int min_len, char key[24], int *lcp) {
    park_redis *r = ctx;
    *lcp = 0;
    int m = (n - 1) / CHUNK;
    if (m < 1 || !conn(r)) return -1;
    uint64_t *h = tkv_xmalloc((size_t)m * sizeof *h);
    chunk_hashes(salt, prompt, m, h);
    int lo = 0, hi = m; /* the longest prefix held: chunks 1..lo are, lo+1.. are not (bisection) */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (chunk_held(r, h[mid - 1])) lo = mid;
        else hi = mid - 1;
    }
    int best_l = 0;
    if (lo > 0) {
        redisReply *y = cmd(r, "SRANDMEMBER tkv:chunk:%016llx %d", (unsigned long long)h[lo - 1], MAX_CANDIDATES);
        for (size_t i = 0; y && y->type == REDIS_REPLY_ARRAY && i < y->elements; i++) {
            const redisReply *e = y->element[i];
            if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len >= 24) continue;
            redisReply *t = cmd(r, "GET tkv:tok:%b", e->str, e->len);
            if (t && t->type == REDIS_REPLY_STRING && t->len % 4 == 0) {
                int nt = (int)(t->len / 4), lim = nt < n - 1 ? nt : n - 1, l = 0;
                const uint8_t *b = (const uint8_t *)t->str;
                while (l < lim && (int32_t)((uint32_t)b[4 * l] | (uint32_t)b[4 * l + 1] << 8 | (uint32_t)b[4 * l + 2] << 16 |
                                            (uint32_t)b[4 * l + 3] << 24) == prompt[l])
                    l++;
                if (l > best_l) {
                    best_l = l;
                    memcpy(key, e->str, e->len);
                    key[e->len] = 0;
                }
            } else if (t && t->type == REDIS_REPLY_NIL) { /* gone (evicted): forget it here */
                redisReply *z = cmd(r, "SREM tkv:chunk:%016llx %b", (unsigned long long)h[lo - 1], e->str, e->len);
                if (z) freeReplyObject(z);
            }
            if (t) freeReplyObject(t);
        }
        if (y) freeReplyObject(y);
    }
    free(h);
    if (best_l < min_len) return -1;
    *lcp = best_l;
    return 0;
}

static void say_cb(void *ctx, const char *msg) {
    park_redis *r = ctx;
    if (r->log) fprintf(r->log, "[park] %s\n", msg);
}

int park_redis_open(const char *url, FILE *log, sched_park *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const char *p = url && !strncmp(url, "redis://", 8) ? url + 8 : NULL;
    if (!p) return tkv_errf(err, errlen, "--park-store wants redis://HOST:PORT[/DB], got '%s'", url ? url : "");
    const char *colon = strrchr(p, ':');
    if (!colon || colon == p || (size_t)(colon - p) >= 256)
        return tkv_errf(err, errlen, "--park-store %s: no HOST:PORT", url);
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10), db = 0;
    if (errno || end == colon + 1 || port < 1 || port > 65535) return tkv_errf(err, errlen, "--park-store %s: a bad port", url);
    if (*end == '/') {
        const char *d = end + 1;
        db = strtol(d, &end, 10);
        if (end == d || db < 0 || db > 65535) return tkv_errf(err, errlen, "--park-store %s: a bad database number", url);
    }
    if (*end) return tkv_errf(err, errlen, "--park-store %s: unexpected '%s'", url, end);
    park_redis *r = tkv_xcalloc(1, sizeof *r);
    memcpy(r->host, p, (size_t)(colon - p));
    r->port = (int)port;
    r->db = (int)db;
    r->log = log;
    if (!conn(r)) say(r, "not answering at start; it is tried again as requests come");
    *out = (sched_park){.put = put, .get = get, .del = del, .find = find, .log = say_cb, .ctx = r, .shared = 1};
    return 0;
}

void park_redis_close(sched_park *s) {
    park_redis *r = s->ctx;
    if (r && r->c) redisFree(r->c);
    free(r);
    memset(s, 0, sizeof *s);
}
