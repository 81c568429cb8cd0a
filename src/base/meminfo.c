/* meminfo.c — see meminfo.h. */
#include "base/meminfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first unsigned number in a small file (a cgroup value); 0 with *ok = 0 when it holds none. */
static uint64_t read_u64(const char *path, int *ok) {
    *ok = 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    *ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    return (uint64_t)v;
}

uint64_t tkv_mem_available(void) {
    const char *env = getenv("TIERKV_MEM_AVAILABLE");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0' && env[0] != '-') return (uint64_t)v;
    }
    uint64_t avail = UINT64_MAX;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024;
                break;
            }
        fclose(f);
    }
    int ok_max, ok_cur; /* cgroup v2: memory.max is "max" (no limit) or bytes */
    uint64_t max = read_u64("/sys/fs/cgroup/memory.max", &ok_max), cur = read_u64("/sys/fs/cgroup/memory.current", &ok_cur);
    if (ok_max && ok_cur) {
        uint64_t left = max > cur ? max - cur : 0;
        if (left < avail) avail = left;
    }
    return avail;
}

double tkv_mib(double bytes) { return bytes / 1048576.0; }
