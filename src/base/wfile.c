/* wfile.c — whole files written at once (see wfile.h). */
#include "base/wfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"

int tkv_write_file(const char *path, const void *bytes, size_t n, char *err, size_t errlen) {
    char tmp[4200];
    if (strlen(path) > 4000) return tkv_errf(err, errlen, "a path of over 4000 bytes");
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return tkv_errf(err, errlen, "%s: %s", tmp, strerror(errno));
    const char *p = bytes;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w, left -= (size_t)w;
    }
    int e = left ? (errno ? errno : EIO) : 0;
    if (close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (!e) return 0;
    unlink(tmp);
    return tkv_errf(err, errlen, "%s: %s", path, strerror(e));
}
