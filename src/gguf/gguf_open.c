/* gguf_open.c — maps a GGUF file read-only (MAP_PRIVATE) and parses it; gguf_free releases both.
 * Errors name the path. The mapping lives as long as the gguf_file: tensors point into it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"

int gguf_open(const char *path, gguf_file *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tkv_errf(err, errlen, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tkv_errf(err, errlen, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return tkv_errf(err, errlen, "gguf: '%s' is a directory, not a GGUF file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tkv_errf(err, errlen, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return tkv_errf(err, errlen, "gguf: '%s' is an empty file", path);
    }
    if ((unsigned long long)st.st_size > (size_t)-1) {
        close(fd);
        return tkv_errf(err, errlen, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
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
