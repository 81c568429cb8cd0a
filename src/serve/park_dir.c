/* park_dir.c — a directory as the store of parked conversations (see park_dir.h). */
#include "serve/park_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/wfile.h"

#define SUFFIX ".tkvrec"

typedef struct {
    char *dir;
    FILE *log;
} park_dir;

static void note(park_dir *d, const char *what, const char *key) {
    if (d->log) fprintf(d->log, "[park] %s %s/%s%s: %s\n", what, d->dir, key, SUFFIX, strerror(errno));
}

static int key_ok(const char *key) {
    size_t n = strlen(key);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f'))) return 0;
    return 1;
}

static void path_of(const park_dir *d, const char *key, const char *pre, char *out, size_t n) {
    snprintf(out, n, "%s/%s%s%s", d->dir, pre, key, SUFFIX);
}

static int put(void *ctx, const char *key, const void *bytes, size_t n, uint64_t salt, const int32_t *tokens, int n_tokens) {
    (void)salt, (void)tokens, (void)n_tokens; /* the scheduler indexes a directory itself */
    park_dir *d = ctx;
    if (!key_ok(key)) return -1;
    char path[4200], err[512];
    path_of(d, key, "", path, sizeof path);
    if (tkv_write_file(path, bytes, n, err, sizeof err)) { /* KEY.tkvrec.tmp-PID: never listed as a record */
        if (d->log) fprintf(d->log, "[park] cannot write %s\n", err);
        return -1;
    }
    return 0;
}

static void *get(void *ctx, const char *key, size_t max, size_t *n, size_t *total) {
    park_dir *d = ctx;
    *n = *total = 0;
    if (!key_ok(key)) return NULL;
    char path[4200];
    path_of(d, key, "", path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) { if (errno != ENOENT) note(d, "cannot read", key); return NULL; }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); return NULL; }
    size_t size = (size_t)st.st_size, want = max && max < size ? max : size;
    char *buf = tkv_xmalloc(want ? want : 1);
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    *n = got, *total = size;
    return buf;
}

static void del(void *ctx, const char *key) {
    park_dir *d = ctx;
    char path[4200];
    if (!key_ok(key)) return;
    path_of(d, key, "", path, sizeof path);
    if (unlink(path) && errno != ENOENT) note(d, "cannot delete", key);
}

static void list(void *ctx, void (*fn)(void *arg, const char *key), void *arg) {
    park_dir *d = ctx;
    DIR *dir = opendir(d->dir);
    if (!dir) return;
    struct dirent *e;
    size_t ls = strlen(SUFFIX);
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n <= ls || n - ls > 64 || strcmp(e->d_name + n - ls, SUFFIX)) continue;
        char key[72];
        memcpy(key, e->d_name, n - ls);
        key[n - ls] = 0;
        if (key_ok(key)) fn(arg, key);
    }
    closedir(dir);
}

static void say(void *ctx, const char *msg) {
    park_dir *d = ctx;
    if (d->log) fprintf(d->log, "[park] %s\n", msg);
}

int park_dir_open(const char *dir, int64_t max_bytes, FILE *log, sched_park *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!dir || !*dir || strlen(dir) > 4000) return tkv_errf(err, errlen, "--park-dir: an empty or too long path");
    if (mkdir(dir, 0700) && errno != EEXIST) return tkv_errf(err, errlen, "--park-dir %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return tkv_errf(err, errlen, "--park-dir %s: not a directory", dir);
    if (access(dir, R_OK | W_OK | X_OK)) return tkv_errf(err, errlen, "--park-dir %s: %s", dir, strerror(errno));
    park_dir *d = tkv_xcalloc(1, sizeof *d);
    d->dir = strdup(dir);
    d->log = log;
    *out = (sched_park){.put = put, .get = get, .del = del, .list = list, .log = say, .ctx = d, .max_bytes = max_bytes};
    return 0;
}

void park_dir_close(sched_park *p) {
    park_dir *d = p->ctx;
    if (d) free(d->dir);
    free(d);
    memset(p, 0, sizeof *p);
}
