/* path.h — the file-name part of a path, for what results, logs and the API name: files, never
 * the directories of the machine that ran them. */
#ifndef TKV_PATH_H
#define TKV_PATH_H
#include <string.h>

/* After the last '/'; the whole path when it has none or ends in one; "" for NULL. */
static inline const char *tkv_file_name(const char *path) {
    if (!path) return "";
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

#endif
