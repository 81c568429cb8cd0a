/* park.c — parked conversations (see park.h). */
#include "sched/park.h"
#include "sched/ids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"

static void say(const park_index *p, const char *fmt, const char *a, const char *b) {
    if (!p->st->log) return;
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    p->st->log(p->st->ctx, msg);
}

static void key_of(uint64_t salt, const int32_t *tokens, int n, char out[24]) {
    uint64_t h = sched_ids_hash_more(sched_ids_hash_salt(salt), tokens, n);
    snprintf(out, 24, "%016llx", (unsigned long long)h);
}

static void remove_at(park_index *p, int i) {
    p->bytes -= p->e[i].bytes;
    free(p->e[i].tokens);
    p->e[i] = p->e[--p->n];
}

static int find(const park_index *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->e[i].key, key)) return i;
    return -1;
}

static void add(park_index *p, const char *key, uint64_t salt, int32_t *tokens, int n, int64_t bytes) {
    int i = find(p, key);
    if (i >= 0) remove_at(p, i); /* the same tokens parked again: the new record replaced it */
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->e = tkv_xrealloc(p->e, (size_t)p->cap * sizeof *p->e);
    }
    park_entry *e = &p->e[p->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->salt = salt;
    e->tokens = tokens;
    e->n = n;
    e->bytes = bytes;
    e->used = ++p->tick;
    p->bytes += bytes;
}

static void index_one(void *arg, const char *key) {
    park_index *p = arg;
    if (strlen(key) >= sizeof p->e[0].key) return;
    size_t n = 0, total = 0, need = 64;
    void *head = NULL;
    for (int tries = 0; tries < 2; tries++) { /* the fixed head, then the head with its tokens */
        free(head);
        head = p->st->get(p->st->ctx, key, need, &n, &total);
        if (!head) return; /* gone meanwhile, or the store is down: logged there */
        size_t want = tkv_record_need(head, n);
        if (want <= n || n < need) break;
        need = want;
    }
    uint64_t salt;
    int32_t *tokens;
    int nt;
    char err[256];
    if (tkv_record_peek(p->m, head, n, &salt, &tokens, &nt, err, sizeof err)) {
        say(p, "park: record %s ignored: %s", key, err);
    } else {
        char want[24];
        key_of(salt, tokens, nt, want);
        if (strcmp(want, key)) {
            say(p, "park: record %s ignored: its tokens are not its name's (%s)", key, want);
            free(tokens);
        } else {
            add(p, key, salt, tokens, nt, (int64_t)total);
        }
    }
    free(head);
}

void park_init(park_index *p, const sched_park *st, const tkv_model *m, int min_len) {
    memset(p, 0, sizeof *p);
    p->st = st;
    p->m = m;
    p->min_len = min_len > 1 ? min_len : 1;
    if (!st || !st->list) return;
    st->list(st->ctx, index_one, p);
    char n[32], b[32];
    snprintf(n, sizeof n, "%d", p->n);
    snprintf(b, sizeof b, "%lld", (long long)p->bytes);
    say(p, "park: %s records of this model (%s bytes) in the store", n, b);
}

void park_free(park_index *p) {
    while (p->n) remove_at(p, p->n - 1);
    free(p->e);
    memset(p, 0, sizeof *p);
}

/* Deletes the least recently used records until `more` bytes fit in the bound. */
static void make_room(park_index *p, int64_t more) {
    while (p->st->max_bytes > 0 && p->n > 0 && p->bytes + more > p->st->max_bytes) {
        int v = 0;
        for (int i = 1; i < p->n; i++)
            if (p->e[i].used < p->e[v].used) v = i;
        p->st->del(p->st->ctx, p->e[v].key);
        remove_at(p, v);
        p->drops++;
    }
}

int park_put(park_index *p, tkv_session *s, int seq, const int32_t *tokens, int n, uint64_t salt) {
    if (!p->st || n < p->min_len) return -1;
    void *rec;
    size_t len;
    char err[256], key[24];
    if (tkv_seq_save(s, seq, tokens, n, salt, &rec, &len, err, sizeof err)) {
        say(p, "park: not written: %s%s", err, "");
        p->drops++;
        return -1;
    }
    if (p->st->max_bytes > 0 && (int64_t)len > p->st->max_bytes) {
        free(rec);
        p->drops++;
        return -1;
    }
    key_of(salt, tokens, n, key);
    if (!p->st->find) make_room(p, (int64_t)len);
    if (p->st->put(p->st->ctx, key, rec, len, salt, tokens, n)) {
        free(rec);
        p->drops++;
        return -1;
    }
    free(rec);
    p->parks++;
    if (p->st->find) return 0; /* the store indexes it */
    int32_t *copy = tkv_xmalloc((size_t)n * sizeof(int32_t));
    memcpy(copy, tokens, (size_t)n * sizeof(int32_t));
    add(p, key, salt, copy, n, (int64_t)len);
    return 0;
}

int park_write_through(const park_index *p) { return p->st && p->st->shared; }

int park_lookup(const park_index *p, const int32_t *prompt, int n, uint64_t salt, int floor, char key[24], int *lcp) {
    *lcp = 0;
    if (!p->st) return -1;
    if (p->st->find) return p->st->find(p->st->ctx, salt, prompt, n, p->min_len, key, lcp) ? -1 : 0;
    int best = -1, best_l = 0;
    for (int i = 0; i < p->n; i++) {
        const park_entry *e = &p->e[i];
        if (e->salt != salt) continue;
        int l = sched_ids_lcp(e->tokens, e->n, prompt, n - 1);
        if (sched_take_worth(l, e->n, -1, floor) && l > best_l) best = i, best_l = l;
    }
    if (best < 0 || best_l < p->min_len) return -1;
    *lcp = best_l;
    snprintf(key, 24, "%s", p->e[best].key);
    return 0;
}

int park_restore(park_index *p, tkv_session *s, const char *key_in) {
    double t0 = tkv_now_s();
    char key[24], err[256];
    snprintf(key, sizeof key, "%s", key_in);
    if (!p->st->find) { /* a local store forgets it, read or not */
        int i = find(p, key);
        if (i >= 0) remove_at(p, i);
    }
    size_t n = 0, total = 0;
    void *rec = p->st->get(p->st->ctx, key, 0, &n, &total);
    int seq = -1, rc = -1;
    uint64_t salt;
    int32_t *tokens = NULL;
    int nt;
    if (!rec) snprintf(err, sizeof err, "not in the store any more, or the store is down");
    else if (n != total) snprintf(err, sizeof err, "read %zu of its %zu bytes", n, total);
    else if (tkv_record_peek(p->m, rec, n, &salt, &tokens, &nt, err, sizeof err)) (void)0;
    else if (tkv_seq_open(s, nt, 0, &seq, err, sizeof err)) seq = -1;
    else if (tkv_seq_load(s, seq, rec, n, err, sizeof err)) tkv_seq_close(s, seq), seq = -1;
    else rc = 0;
    free(tokens);
    free(rec);
    if (!p->st->find) p->st->del(p->st->ctx, key);
    if (rc) {
        say(p, "park: record %s not restored (the request prefills it): %s", key, err);
        p->restore_failures++;
        return -1;
    }
    p->restores++;
    p->restore_seconds += tkv_now_s() - t0;
    return seq;
}
