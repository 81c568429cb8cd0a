/* stats.c — see stats.h. The exact McNemar tail sums binomial terms in log space (lgamma), so it
 * stays accurate for large b+c without overflow. */
#include "eval/stats.h"

#include <math.h>

void eval_wilson(long k, long n, double z, double *lo, double *hi) {
    if (n <= 0) { *lo = 0; *hi = 1; return; }
    double p = (double)k / (double)n, z2 = z * z, nn = (double)n;
    double den = 1 + z2 / nn;
    double center = (p + z2 / (2 * nn)) / den;
    double half = z * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / den;
    *lo = center - half;
    *hi = center + half;
    if (*lo < 0 || k == 0) *lo = 0;
    if (*hi > 1 || k == n) *hi = 1;
}

double eval_mcnemar_exact(long b, long c) {
    long n = b + c, k = b < c ? b : c;
    if (n <= 0) return 1;
    double ln2 = log(2.0), lgn = lgamma((double)n + 1), tail = 0;
    for (long i = 0; i <= k; i++)
        tail += exp(lgn - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) - (double)n * ln2);
    double p = 2 * tail;
    return p > 1 ? 1 : p;
}

double eval_mcnemar_chi2(long b, long c, double *chi2) {
    double d = fabs((double)(b - c)) - 1, x = 0;
    if (b + c > 0 && d > 0) x = d * d / (double)(b + c);
    if (chi2) *chi2 = x;
    return erfc(sqrt(x / 2)); /* P[chi2_1 > x] */
}

void eval_mean_max(const double *x, size_t n, double *mean, double *max) {
    double s = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        if (i == 0 || x[i] > m) m = x[i];
    }
    *mean = n ? s / (double)n : 0;
    *max = m;
}

void eval_summarize(long correct, long n, struct eval_summary *s) {
    s->n = n;
    s->correct = correct;
    s->acc = n > 0 ? (double)correct / (double)n : 0;
    eval_wilson(correct, n, EVAL_Z95, &s->ci_lo, &s->ci_hi);
}
