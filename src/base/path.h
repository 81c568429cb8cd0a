/* path.h — the file-name part of a path, for what results, logs and the API name: files, never
 * the directories of the machine that ran them; and the words for what kind of file a path is. */
#ifndef TKV_PATH_H
#define TKV_PATH_H
#include <string.h>
#include <sys/stat.h>

/* After the last '/'; the whole path when it has none or ends in one; "" for NULL. */
static inline const char *tkv_file_name(const char *path) {
    if (!path) return "";
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* What a file that is not a regular file is, for a refusal: "a directory", "a FIFO", ... */
static inline const char *tkv_file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISREG(m) ? "a regular file" : "not a regular file";
}

#endif
