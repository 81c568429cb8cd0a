/* kvq_measure.c — the error of every T2 codec (codec/kvq.h) on K and V rows, for
 * docs/T2-CODECS.md. Not a benchmark of speed and not a test: it prints one table.
 *
 *   build/bench/kvq_measure                     synthetic rows shaped like Qwen2's (below)
 *   build/bench/kvq_measure MODEL.gguf TEXT [N]  real K (after RoPE) and V rows of every layer, from
 *                                                prefilling the first N (default 256) tokens of TEXT
 *
 * Synthetic (head_dim 128, 2 kv heads, 512 tokens, fixed seed): K channel c of a head is
 * s_c * (m_c + N(0, 1)) with a per-channel offset m_c ~ N(0, 1) fixed over tokens and a scale
 * s_c = e^N(0, 0.3^2), times 20 on two rotary pairs per head (channels c and c + 64, so 4 outlier
 * channels, the same in every token); V is e^N(0, 0.3^2)-scaled N(0, 1) without outliers.
 * Queries are random (N(0, 1), 8 per head), so they do not lean on the outlier channels the way a
 * real model's queries may.
 *
 * Reported per codec: bytes of one row (K or V); over rows, ||x - x^|| / ||x|| (mean, max); over
 * (query, token, head), |q . k - q . k^| / rms_t(q . k) (mean, max) — the score error relative to
 * the typical score of that query and head.
 * Real rows add a second table: per layer, the keys' error energy sum ||k - k^||^2 over what varies
 * between tokens, sum ||k - mean_t(k)||^2 (a constant added to every key moves every score of a query
 * alike, so only the part that varies decides where attention goes), for each key codec as is and
 * centred on the model's K bias (the centred T2 formats, backend.h): mean over layers, and the worst
 * layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/kvq.h"
#include "base/err.h"
#include "eval/eval.h"
#include "engine/engine.h"
#include "tierkv.h"

enum { NQ = 8 };

static uint64_t rng = 0x5eed5eed12345ull;
static double unif(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }

typedef struct {
    double row_sum, row_max, sc_sum, sc_max;
    long n_rows, n_sc;
} stats;

/* rows[n][kv_dim] through codec c; q[g][NQ][hd] for the scores when q is not NULL. */
static void measure(kvq_codec c, const float *rows, int n, int G, int hd, const float *q, stats *st) {
    int kd = G * hd;
    size_t rb = kvq_row_bytes(c, G, hd);
    uint8_t *rec = tkv_xmalloc(rb);
    float *y = tkv_xmalloc((size_t)n * kd * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *x = rows + (size_t)t * kd;
        kvq_encode_row(c, x, G, hd, rec);
        kvq_decode_row(c, rec, G, hd, y + (size_t)t * kd);
        double e2 = 0, x2 = 0;
        for (int i = 0; i < kd; i++) {
            double d = (double)x[i] - y[(size_t)t * kd + i];
            e2 += d * d, x2 += (double)x[i] * x[i];
        }
        double r = x2 > 0 ? sqrt(e2 / x2) : 0;
        st->row_sum += r, st->row_max = fmax(st->row_max, r), st->n_rows++;
    }
    for (int g = 0; q && g < G; g++)
        for (int j = 0; j < NQ; j++) {
            const float *qq = q + ((size_t)g * NQ + j) * hd;
            double s2 = 0;
            for (int t = 0; t < n; t++) {
                double s = 0;
                for (int i = 0; i < hd; i++) s += (double)qq[i] * rows[(size_t)t * kd + g * hd + i];
                s2 += s * s;
            }
            double rms = sqrt(s2 / n);
            for (int t = 0; t < n && rms > 0; t++) {
                double ds = 0;
                for (int i = 0; i < hd; i++)
                    ds += (double)qq[i] * ((double)rows[(size_t)t * kd + g * hd + i] - y[(size_t)t * kd + g * hd + i]);
                double r = fabs(ds) / rms;
                st->sc_sum += r, st->sc_max = fmax(st->sc_max, r), st->n_sc++;
            }
        }
    free(rec);
    free(y);
}

static void print_table(const stats *k, const stats *v, int G, int hd) {
    printf("| codec | bytes/row | K row err mean | K row err max | K score err mean | K score err max | V row err mean | "
           "V row err max |\n|---|---|---|---|---|---|---|---|\n");
    for (int c = 0; c < KVQ_N; c++)
        printf("| %s | %zu | %.2e | %.2e | %.2e | %.2e | %.2e | %.2e |\n", kvq_name(c), kvq_row_bytes(c, G, hd),
               k[c].row_sum / k[c].n_rows, k[c].row_max, k[c].sc_sum / k[c].n_sc, k[c].sc_max, v[c].row_sum / v[c].n_rows,
               v[c].row_max);
}

static void random_queries(float *q, int G, int hd) {
    for (int i = 0; i < G * NQ * hd; i++) q[i] = (float)gauss();
}

static int synthetic(void) {
    enum { N = 512, G = 2, HD = 128, KD = G * HD };
    static float k[N * KD], v[N * KD], q[G * NQ * HD];
    double ks[KD], km[KD], vs[KD];
    for (int c = 0; c < KD; c++) ks[c] = exp(0.3 * gauss()), km[c] = gauss(), vs[c] = exp(0.3 * gauss());
    for (int g = 0; g < G; g++)
        for (int p = 0; p < 2; p++) { /* two rotary pairs (c, c + 64) per head */
            int c = (int)(unif() * HD / 2);
            ks[g * HD + c] *= 20, ks[g * HD + c + HD / 2] *= 20;
        }
    for (int t = 0; t < N; t++)
        for (int c = 0; c < KD; c++) {
            k[t * KD + c] = (float)(ks[c] * (km[c] + gauss()));
            v[t * KD + c] = (float)(vs[c] * gauss());
        }
    random_queries(q, G, HD);
    stats sk[KVQ_N] = {0}, sv[KVQ_N] = {0};
    for (int c = 0; c < KVQ_N; c++) {
        measure(c, k, N, G, HD, q, &sk[c]);
        measure(c, v, N, G, HD, NULL, &sv[c]);
    }
    printf("synthetic Qwen2-like rows: %d tokens, %d kv heads, head_dim %d, 4 outlier channels x20 per K head\n\n", N,
           G, HD);
    print_table(sk, sv, G, HD);
    return 0;
}

/* Key error energy over what varies (see the header) for one layer's rows k[n][kd], codec c, centre
 * cen (kd values, or NULL). */
static double dev_err(kvq_codec c, const float *k, int n, int G, int hd, const float *cen) {
    int kd = G * hd;
    double *mu = tkv_xcalloc((size_t)kd, sizeof(double)), e2 = 0, d2 = 0;
    float *r = tkv_xmalloc((size_t)kd * sizeof(float)), *y = tkv_xmalloc((size_t)kd * sizeof(float));
    uint8_t *rec = tkv_xmalloc(kvq_row_bytes(c, G, hd));
    for (int t = 0; t < n; t++)
        for (int i = 0; i < kd; i++) mu[i] += k[(size_t)t * kd + i] / (double)n;
    for (int t = 0; t < n; t++) {
        const float *x = k + (size_t)t * kd;
        for (int i = 0; i < kd; i++) r[i] = cen ? x[i] - cen[i] : x[i];
        kvq_encode_row(c, r, G, hd, rec);
        kvq_decode_row(c, rec, G, hd, y);
        for (int i = 0; i < kd; i++) {
            double e = (double)y[i] + (cen ? cen[i] : 0) - x[i], d = x[i] - mu[i];
            e2 += e * e, d2 += d * d;
        }
    }
    free(mu), free(r), free(y), free(rec);
    return d2 > 0 ? e2 / d2 : 0;
}

static int real(const char *model_path, const char *text_path, int n_tok) {
    char err[512];
    char *text = NULL;
    size_t len = 0;
    if (eval_read_file(text_path, &text, &len, err, sizeof err)) { fprintf(stderr, "kvq_measure: %s\n", err); return 1; }
    tkv_model *m;
    if (tkv_model_open(model_path, NULL, &m, err, sizeof err)) { fprintf(stderr, "kvq_measure: %s\n", err); return 1; }
    int need = tkv_tokenize(m, text, len, TKV_TOK_ADD_SPECIAL, NULL, 0);
    int32_t *ids = tkv_xmalloc((size_t)(need > 0 ? need : 1) * sizeof(int32_t));
    int n_ids = tkv_tokenize(m, text, len, TKV_TOK_ADD_SPECIAL, ids, need);
    free(text);
    if (n_ids > n_tok) n_ids = n_tok;
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = 1;
    sp.max_ctx = n_ids + 1;
    sp.kv.f16 = 0; /* the f32 rows the forward wrote */
    tkv_session *e;
    int seq;
    if (tkv_session_open(m, &sp, &e, err, sizeof err) || tkv_seq_open(e, n_ids + 1, n_ids, &seq, err, sizeof err) ||
        tkv_prefill(e, seq, ids, n_ids, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "kvq_measure: %s\n", err);
        return 1;
    }
    tkv_model_info mi;
    tkv_model_get_info(m, &mi);
    int L = mi.n_layer, G = mi.n_head_kv, hd = mi.head_dim, kd = G * hd;
    float *k = tkv_xmalloc((size_t)n_ids * kd * sizeof(float)), *v = tkv_xmalloc((size_t)n_ids * kd * sizeof(float));
    float *q = tkv_xmalloc((size_t)G * NQ * hd * sizeof(float));
    stats sk[KVQ_N] = {0}, sv[KVQ_N] = {0};
    const float *bias = m->m->k_center; /* [L][kd], NULL without K biases */
    double dev[KVQ_N][2][2] = {{{0}}};  /* [codec][centred][0 sum over layers, 1 worst] */
    int worst_l[KVQ_N][2] = {{0}};
    for (int l = 0; l < L; l++) {
        kv_view vw;
        kv_view_layer(engine_kv(e), seq, l, &vw);
        for (int t = 0; t < n_ids; t++) {
            memcpy(k + (size_t)t * kd, vw.k[t], (size_t)kd * sizeof(float));
            memcpy(v + (size_t)t * kd, vw.v[t], (size_t)kd * sizeof(float));
        }
        random_queries(q, G, hd);
        for (int c = 0; c < KVQ_N; c++) {
            measure(c, k, n_ids, G, hd, q, &sk[c]);
            measure(c, v, n_ids, G, hd, NULL, &sv[c]);
            for (int cen = 0; cen < 1 + (bias != NULL); cen++) {
                double r = dev_err(c, k, n_ids, G, hd, cen ? bias + (size_t)l * kd : NULL);
                dev[c][cen][0] += r / L;
                if (r > dev[c][cen][1]) dev[c][cen][1] = r, worst_l[c][cen] = l;
            }
        }
    }
    printf("real rows: %d tokens x %d layers, %d kv heads, head_dim %d\n\n", n_ids, L, G, hd);
    print_table(sk, sv, G, hd);
    printf("\nkeys: error energy over what varies between tokens, sum ||k - k^||^2 / sum ||k - mean_t k||^2 per layer\n\n"
           "| key codec | as is: mean over layers | as is: worst layer | centred on the K bias: mean | centred: worst layer |\n"
           "|---|---|---|---|---|\n");
    for (int c = 0; c < KVQ_N; c++) {
        printf("| %s | %.2e | %.2e (layer %d) |", kvq_name(c), dev[c][0][0], dev[c][0][1], worst_l[c][0]);
        if (bias) printf(" %.2e | %.2e (layer %d) |\n", dev[c][1][0], dev[c][1][1], worst_l[c][1]);
        else printf(" (no K bias) | |\n");
    }
    free(k), free(v), free(q), free(ids);
    tkv_session_close(e);
    tkv_model_close(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 1) return synthetic();
    if (argc == 3 || argc == 4) return real(argv[1], argv[2], argc == 4 ? atoi(argv[3]) : 256);
    fprintf(stderr, "usage: kvq_measure [MODEL.gguf TEXT [N_TOKENS]]\n");
    return 2;
}
