/* sampler.c - see sampler.h. Candidates are narrowed before sorting: min-p and top-k only ever keep
 * a prefix of the sorted list, and top-p's cumulative sum is normalised over the top-k set, whose
 * total is computed without sorting; so only the surviving candidates are sorted. */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/argmax.h"
#include "base/err.h"

sampler_opts sampler_defaults(void) {
    return (sampler_opts){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                          .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0};
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double sampler_uniform(sampler *s) { return (double)(xoshiro(s->rng) >> 11) * 0x1.0p-53; }

void sampler_init(sampler *s, const sampler_opts *o, int n_vocab) {
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->n_vocab = n_vocab;
    uint64_t x = o->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->cand = tkv_xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->tmp = tkv_xmalloc((size_t)n_vocab * sizeof *s->tmp);
    s->seen = tkv_xcalloc((size_t)n_vocab, 1);
}

void sampler_free(sampler *s) {
    free(s->cand);
    free(s->tmp);
    free(s->seen);
    s->cand = NULL;
    s->tmp = NULL;
    s->seen = NULL;
}

/* Each distinct id of the window is penalised once, however often it occurs (as llama.cpp). */
static void penalize(const sampler_opts *o, uint8_t *seen, float *logits, int n_vocab, const int32_t *hist, int n_hist) {
    if (o->repeat_penalty == 1.0f || n_hist <= 0) return;
    int from = o->repeat_last_n < 0 || o->repeat_last_n > n_hist ? 0 : n_hist - o->repeat_last_n;
    for (int i = from; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= n_vocab || seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0 ? logits[id] / o->repeat_penalty : logits[id] * o->repeat_penalty;
    }
    for (int i = from; i < n_hist; i++) if (hist[i] >= 0 && hist[i] < n_vocab) seen[hist[i]] = 0;
}

/* by logit descending, ties by id ascending (deterministic) */
static int cmp_desc(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* k-th largest value by quickselect (reorders a), for the top-k threshold */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        float piv = a[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) { float t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j; else if (k - 1 >= i) lo = i; else break;
    }
    return a[k - 1];
}

int32_t sampler_sample(sampler *s, float *logits, int n_vocab, const int32_t *history, int n_hist) {
    TKV_ASSERT(n_vocab > 0 && n_vocab <= s->n_vocab);
    const sampler_opts *o = &s->o;
    penalize(o, s->seen, logits, n_vocab, history, n_hist);
    int best = tkv_argmax_f32(logits, n_vocab);
    if (o->temperature <= 0) return best;
    float maxl = logits[best];

    /* top-k threshold (ties at the threshold are all kept, then cut after sorting) */
    float kth = -INFINITY;
    int k = o->top_k > 0 && o->top_k < n_vocab ? o->top_k : n_vocab;
    if (k < n_vocab) {
        memcpy(s->tmp, logits, (size_t)n_vocab * sizeof *s->tmp);
        kth = kth_largest(s->tmp, n_vocab, k);
    }
    /* normaliser of the top-k set (probabilities before temperature, as top-p/min-p see them) */
    double z = 0;
    for (int i = 0; i < n_vocab; i++) if (logits[i] >= kth) z += exp((double)logits[i] - maxl);
    float minl = o->min_p > 0 ? maxl + logf(o->min_p) : -INFINITY;
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] >= kth && logits[i] >= minl) s->cand[n++] = (struct sampler_cand){logits[i], i};
    qsort(s->cand, (size_t)n, sizeof *s->cand, cmp_desc);
    if (n > k) n = k;
    if (o->top_p < 1.0f) { /* smallest prefix whose probability reaches top_p */
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)s->cand[i].l - maxl) / z;
            if (cum >= o->top_p) { n = i + 1; break; }
        }
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (s->tmp[i] = (float)exp(((double)s->cand[i].l - maxl) / o->temperature));
    double r = sampler_uniform(s) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->tmp[i];
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}

/* ---- stop strings ---- */

void stop_init(stop_matcher *m, const char *const *stops, int n_stops) {
    memset(m, 0, sizeof *m);
    m->stops = stops;
    m->n_stops = n_stops;
    for (int i = 0; i < n_stops; i++) if (strlen(stops[i]) > m->max_len) m->max_len = strlen(stops[i]);
    m->held = tkv_xmalloc(2 * m->max_len + 1);
}

void stop_free(stop_matcher *m) { free(m->held); m->held = NULL; }

/* Appends text to the window held+new, looks for a full stop string, and keeps only the tail that
 * is a proper prefix of some stop string. */
int stop_feed(stop_matcher *m, const char *s, size_t n, char *out, size_t *out_n) {
    *out_n = 0;
    if (m->stopped) return 1;
    if (m->max_len == 0) { memcpy(out, s, n); *out_n = n; return 0; }
    /* work in out: held text then the new text (out has room for n + max_len) */
    memcpy(out, m->held, m->n_held);
    memcpy(out + m->n_held, s, n);
    size_t w = m->n_held + n, cut = w;
    for (int i = 0; i < m->n_stops; i++) {
        size_t l = strlen(m->stops[i]);
        if (!l) continue;
        const char *hit = memmem(out, w, m->stops[i], l);
        if (hit && (size_t)(hit - out) < cut) cut = (size_t)(hit - out);
    }
    if (cut < w) { m->stopped = 1; m->n_held = 0; *out_n = cut; return 1; }
    /* longest tail that a stop string starts with */
    size_t keep = 0;
    for (size_t t = (w < m->max_len ? w : m->max_len); t > 0 && !keep; t--)
        for (int i = 0; i < m->n_stops && !keep; i++)
            if (strlen(m->stops[i]) > t && memcmp(m->stops[i], out + w - t, t) == 0) keep = t;
    memcpy(m->held, out + w - keep, keep);
    m->n_held = keep;
    *out_n = w - keep;
    return 0;
}

size_t stop_flush(stop_matcher *m, char *out) {
    size_t n = m->stopped ? 0 : m->n_held;
    memcpy(out, m->held, n);
    m->n_held = 0;
    return n;
}
