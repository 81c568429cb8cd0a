/* gguf_open.c — maps a GGUF file read-only (MAP_PRIVATE) and parses it; gguf_free releases both.
 * Only a regular file is opened (gguf_open_file, also gguf_load's way in): a FIFO, socket, device or
 * directory is refused by what it is before anything could block on it. Errors name the path. The mapping lives as long as the gguf_file: tensors point into it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/path.h"
#include "gguf/gguf.h"

int gguf_open_file(const char *path, int *fd, size_t *size, char *err, size_t errlen) {
    *fd = -1;
    *size = 0;
    struct stat st; /* stat first: a socket cannot be opened at all, and its refusal should say what it is */
    if (stat(path, &st) != 0) return tkv_errf(err, errlen, "gguf: cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tkv_errf(err, errlen, "gguf: '%s' is %s, not a regular file", path, tkv_file_kind(st.st_mode));
    /* O_NONBLOCK: the path may have been swapped for a FIFO since the stat, and opening a FIFO would
     * wait for a writer; fstat below is the check that counts. Regular files ignore the flag. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return tkv_errf(err, errlen, "gguf: cannot open '%s': %s", path, strerror(errno));
    const char *bad = NULL;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return tkv_errf(err, errlen, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) bad = tkv_file_kind(st.st_mode);
    else if (st.st_size == 0) bad = "an empty file";
    else if ((unsigned long long)st.st_size > (size_t)-1) bad = "too large to map";
    if (bad) {
        close(f);
        return tkv_errf(err, errlen, S_ISREG(st.st_mode) ? "gguf: '%s' is %s" : "gguf: '%s' is %s, not a regular file",
                        path, bad);
    }
    *fd = f;
    *size = (size_t)st.st_size;
    return 0;
}

int gguf_open(const char *path, gguf_file *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int fd;
    size_t size;
    if (gguf_open_file(path, &fd, &size, err, errlen)) return -1;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return tkv_errf(err, errlen, "gguf: cannot mmap '%s': %s", path, strerror(e));
    return gguf_parse_mapping(path, map, size, size, out, err, errlen);
}

int gguf_parse_mapping(const char *path, void *map, size_t size, size_t map_len, gguf_file *out, char *err,
                       size_t errlen) {
    char msg[512];
    if (gguf_parse(map, size, out, msg, sizeof msg) != 0) {
        munmap(map, map_len);
        return tkv_errf(err, errlen, "%s: %s", path, msg);
    }
    out->map = map;
    out->map_size = map_len;
    return 0;
}

void gguf_free(gguf_file *f) {
    if (!f) return;
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap(f->map, (size_t)f->map_size);
    memset(f, 0, sizeof *f);
}
