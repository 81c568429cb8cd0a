/* meminfo.h — how much memory this process may still take: what the kernel reports available
 * (/proc/meminfo MemAvailable), lowered to what a cgroup v2 memory limit leaves (memory.max minus
 * memory.current), or the byte count in the environment variable TIERKV_MEM_AVAILABLE when set
 * (a cap for a shared machine, and how the tests make a machine small). Used to refuse a model,
 * forward buffers or a KV sequence that cannot fit before anything large is allocated. */
#ifndef TKV_MEMINFO_H
#define TKV_MEMINFO_H
#include <stdint.h>

uint64_t tkv_mem_available(void); /* bytes; UINT64_MAX when nothing can be read (no limit known) */
double tkv_mib(double bytes);     /* bytes / 2^20, for messages */

#endif
