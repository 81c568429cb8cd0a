/* tokfile.h — reading whitespace-separated token ids from a file (the fixtures' format). */
#ifndef TKV_TOKFILE_H
#define TKV_TOKFILE_H
#include <stddef.h>
#include <stdint.h>

/* Reads ids into a malloc'd array; -1 with a message naming the file and the bad item. */
int read_token_file(const char *path, int32_t **ids, int *n, char *err, size_t errlen);

#endif
