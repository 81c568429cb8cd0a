/* stats.h — accuracy statistics for eval runs: Wilson score interval, McNemar's test for paired
 * correct/incorrect outcomes (exact binomial and chi-square with continuity correction), mean/max.
 * Pure functions of counts; nothing here allocates. */
#ifndef TKV_EVAL_STATS_H
#define TKV_EVAL_STATS_H
#include <stddef.h>

#define EVAL_Z95 1.959963984540054 /* two-sided 95% normal quantile */

/* Wilson score interval for k successes out of n at quantile z (EVAL_Z95). n == 0 gives [0, 1]. */
void eval_wilson(long k, long n, double z, double *lo, double *hi);
/* McNemar's exact two-sided p-value from the discordant pair counts: b = runs where only A was
 * correct, c = only B. p = min(1, 2 * P[X <= min(b,c)]), X ~ Binomial(b+c, 1/2); 1 when b+c = 0. */
double eval_mcnemar_exact(long b, long c);
/* McNemar's chi-square with continuity correction, (|b-c|-1)^2/(b+c) (0 when |b-c| <= 1), 1 dof;
 * returns the p-value and stores the statistic in *chi2 if non-NULL. */
double eval_mcnemar_chi2(long b, long c, double *chi2);
/* Mean and maximum of x[0..n); both 0 for n == 0. */
void eval_mean_max(const double *x, size_t n, double *mean, double *max);

struct eval_summary {
    long n, correct;
    double acc, ci_lo, ci_hi; /* accuracy and its Wilson 95% interval */
};
void eval_summarize(long correct, long n, struct eval_summary *s);

#endif
