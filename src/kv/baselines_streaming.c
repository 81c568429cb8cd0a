/* baselines_streaming.c — StreamingLLM (Xiao et al., 2023): attention sinks plus a recent window.
 * Position-wise and stateless: the keep mask depends only on (n, budget, sinks). */
#include "kv/baselines.h"

#include <string.h>

#include "base/err.h"

int kv_bl_streaming_select(int n, int budget, int sinks, uint8_t *keep, char *err, size_t errlen) {
    if (n < 0) return tkv_errf(err, errlen, "streaming: negative length %d", n);
    if (budget >= n) {
        memset(keep, 1, (size_t)n);
        return 0;
    }
    if (sinks < 0 || budget <= sinks)
        return tkv_errf(err, errlen,
                        "streaming: budget %d must exceed the %d sink tokens (length %d)", budget,
                        sinks, n);
    int recent = budget - sinks; /* >= 1 */
    for (int j = 0; j < n; j++) keep[j] = (uint8_t)(j < sinks || j >= n - recent);
    return 0;
}
