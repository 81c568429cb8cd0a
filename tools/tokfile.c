/* tokfile.c — token id files (see tokfile.h). A NUL byte is refused, as by every text reader. */
#include "tokfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"

int read_token_file(const char *path, int32_t **ids, int *n, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return tkv_errf(err, errlen, "cannot open token file '%s'", path);
    int cap = 1024, cnt = 0;
    int32_t *v = tkv_xmalloc((size_t)cap * sizeof *v);
    char buf[32];
    int c, len = 0, item = 0;
    long at = 0;
    for (;; at++) {
        c = fgetc(fp);
        if (c == 0) { /* the rule of every text reader (eval_read_file): no NUL bytes */
            fclose(fp); free(v);
            return tkv_errf(err, errlen, "token file '%s': byte %ld is a NUL byte; text files cannot hold one", path, at);
        }
        if (c == EOF || isspace(c)) {
            if (len) {
                buf[len] = 0;
                char *end;
                errno = 0;
                long x = strtol(buf, &end, 10);
                item++;
                if (errno || *end || x < 0 || x > INT32_MAX) {
                    fclose(fp); free(v);
                    return tkv_errf(err, errlen, "token file '%s': item %d ('%s') is not a token id", path, item, buf);
                }
                if (cnt == cap) {
                    cap *= 2;
                    int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
                    TKV_ASSERT(nv);
                    v = nv;
                }
                v[cnt++] = (int32_t)x;
                len = 0;
            }
            if (c == EOF) break;
            continue;
        }
        if (len >= (int)sizeof buf - 1) {
            fclose(fp); free(v);
            return tkv_errf(err, errlen, "token file '%s': item %d is too long", path, item + 1);
        }
        buf[len++] = (char)c;
    }
    fclose(fp);
    if (cnt == 0) { free(v); return tkv_errf(err, errlen, "token file '%s' holds no token ids", path); }
    *ids = v;
    *n = cnt;
    return 0;
}

