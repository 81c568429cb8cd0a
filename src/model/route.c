/* route.c — moe_route (route.h): one token at a time, every step in a fixed order, so that a
 * backend's version can give the same choices and, with the same expf, the same bits. */
#include "model/route.h"

#include <math.h>
#include <stddef.h>

void moe_route(const float *logits, int n, int n_expert, int k, int32_t *sel, float *w) {
    int X = n_expert;
    float p[1024];
    for (int t = 0; t < n; t++) {
        const float *lg = logits + (size_t)t * X;
        float mx = lg[0];
        for (int e = 1; e < X; e++) mx = lg[e] > mx ? lg[e] : mx;
        double sum = 0;
        for (int e = 0; e < X; e++) sum += (double)(p[e] = expf(lg[e] - mx));
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < X; e++) p[e] *= inv;
        int32_t *s = sel + (size_t)t * k;
        float *wt = w + (size_t)t * k;
        double wsum = 0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < X; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++) taken = s[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            s[j] = best;
            wt[j] = p[best];
            wsum += wt[j];
        }
        float ws = (float)wsum;
        for (int j = 0; j < k; j++) wt[j] /= ws;
    }
}
