/* wfile.h — a whole file written at once: under a temporary name beside it (PATH.tmp-PID), mode
 * 0600, then renamed over PATH, so a reader sees the old file or the whole new one, never half. */
#ifndef TKV_BASE_WFILE_H
#define TKV_BASE_WFILE_H
#include <stddef.h>

/* 0, or -1 with a message naming the path and the system's reason (the temporary file removed). */
int tkv_write_file(const char *path, const void *bytes, size_t n, char *err, size_t errlen);

#endif
