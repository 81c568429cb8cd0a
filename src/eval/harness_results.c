/* harness_results.c — the evaluation's results files (see harness.h): lines read back into records,
 * a killed run's last line repaired, summaries (accuracy, Wilson interval, KV means) and their
 * JSON, and each line's build and check (harness_sign / harness_verify_line). The decode loop that
 * writes the lines is harness.c's.
 *
 * Invariants: a problem's line is appended (and flushed) the moment it finishes, before its slot is
 * reused, so a kill loses at most the problems in flight. Per-problem KV statistics are the slot's
 * counters at its end minus those at its start: the kv module's counters are cumulative per slot. */
#include "eval/harness.h"
#include "eval/harness_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/path.h"
#include "base/json.h"
#include "eval/stats.h"
#include "base/version.h"

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = tkv_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

/* ---- results files ---- */

static double num_or(const struct json_value *o, const char *key, double dflt) {
    const struct json_value *v = json_get(o, key);
    if (!v) return dflt;
    if (v->type == JSON_NUMBER) return v->u.num;
    if (v->type == JSON_TRUE) return 1;
    if (v->type == JSON_FALSE) return 0;
    return dflt;
}

static void rec_push(struct harness_results *r, const struct harness_rec *x) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        struct harness_rec *p = realloc(r->r, cap * sizeof *p);
        TKV_ASSERT(p);
        r->r = p;
        r->cap = cap;
    }
    r->r[r->n++] = *x;
    r->sorted = 0;
}

/* 0 and *x filled when o is a results record (an object with a string id). */
/* The one form of the KV options beside policy and budgets (written from a line and from the options
 * of a run) that decides whether a line belongs to a configuration. */
static void kv_extra_format(char *b, size_t n, const char *t2, int t0_tokens, int protect, int window, int sinks, int delta,
                            int unpin) {
    snprintf(b, n, "%s/%d/%d/%d/%d/%d/%d", t2, t0_tokens, protect, window, sinks, delta, unpin);
}

static int rec_from_json(const struct json_value *o, struct harness_rec *x) {
    const char *id = json_get_str(o, "id");
    if (!o || o->type != JSON_OBJECT || !id) return -1;
    memset(x, 0, sizeof *x);
    x->id = xstrdup(id);
    x->sample = (int)num_or(o, "sample", 0);
    const char *pred = json_get_str(o, "pred");
    x->pred = xstrdup(pred ? pred : "");
    x->correct = num_or(o, "correct", 0) != 0;
    x->gen_tokens = (int)num_or(o, "gen_tokens", 0);
    x->prompt_tokens = (int)num_or(o, "prompt_tokens", 0);
    const char *fin = json_get_str(o, "finish");
    x->finish_length = fin && !strcmp(fin, "length");
    x->seconds = num_or(o, "seconds", 0);
    const struct json_value *kv = json_get(o, "kv");
    const struct json_value *tt = json_get(kv, "tokens");
    for (size_t t = 0; t < 4; t++) {
        const struct json_value *v = json_at(tt, t);
        x->tier_tokens[t] = v && v->type == JSON_NUMBER ? v->u.num : 0;
    }
    x->peak_t0_bytes = num_or(kv, "peak_t0_bytes", 0);
    x->bytes_moved = num_or(kv, "bytes_moved_down", 0) + num_or(kv, "bytes_moved_up", 0);
    const char *pol = json_get_str(o, "policy");
    /* evicted_equiv (positions dropped, averaged over (layer, kv head) rows) is absent from files
     * written before it existed; tokens_evicted is the same number for whole-token policies but
     * undercounts the per-head baselines, whose share is then unknown */
    tkv_policy kind;
    /* the policies that drop a position from every (layer, kv head) row at once */
    int whole_token = pol && tkv_policy_parse(pol, &kind) == 0 && tkv_policy_whole_token(kind);
    x->tokens_evicted = num_or(kv, "evicted_equiv", whole_token ? num_or(kv, "tokens_evicted", 0) : NAN);
    snprintf(x->policy, sizeof x->policy, "%s", pol ? pol : "");
    x->max_tokens = (int)num_or(o, "max_tokens", 0);
    x->t0_ratio = num_or(o, "hbm_ratio", -1);
    x->t2_ratio = num_or(o, "t2_ratio", -1);
    x->evict_ratio = num_or(o, "evict_ratio", -1);
    const char *kt = json_get_str(o, "kv_type"); /* absent: written before f16 caches existed (f32) */
    x->kv_f16 = kt && !strcmp(kt, "f16");
    const char *t2 = json_get_str(o, "t2_codec");
    const struct json_value *pp = json_get(o, "protect_prompt");
    const struct json_value *up = json_get(o, "unpin_prompt");
    kv_extra_format(x->kv_extra, sizeof x->kv_extra, t2 ? t2 : "q8h", (int)num_or(o, "t0_tokens", 0),
                    pp && pp->type == JSON_TRUE, (int)num_or(o, "window", 64), (int)num_or(o, "sinks", 4),
                    (int)num_or(o, "delta", 64), up && up->type == JSON_TRUE);
    x->t0_share = num_or(kv, "t0_share", NAN);
    const struct json_value *sm = json_get(o, "sampling");
    tkv_sampling so = {0};
    if (sm && sm->type == JSON_OBJECT) {
        const char *seed = json_get_str(sm, "seed");
        so.temperature = (float)num_or(sm, "temperature", 0);
        so.top_k = (int)num_or(sm, "top_k", 0);
        so.top_p = (float)num_or(sm, "top_p", 1);
        so.min_p = (float)num_or(sm, "min_p", 0);
        so.repeat_penalty = (float)num_or(sm, "repeat_penalty", 1);
        so.repeat_last_n = (int)num_or(sm, "repeat_last_n", 64);
        so.seed = seed ? strtoull(seed, NULL, 10) : 0;
    }
    harness_sampling_key(&so, x->sampling, sizeof x->sampling);
    return 0;
}

static int line_blank(const char *l, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (l[k] != ' ' && l[k] != '\t' && l[k] != '\r') return 0;
    return 1;
}

int harness_load(const char *path, struct harness_results *out, FILE *warn, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    char *buf;
    size_t len, pos = 0, ln = 0, n;
    const char *line;
    if (eval_read_file(path, &buf, &len, err, errlen)) return -1;
    while (eval_next_line(buf, len, &pos, &line, &n)) {
        ln++;
        if (line_blank(line, n)) continue;
        struct json_doc *doc;
        char perr[256];
        struct harness_rec x;
        if (json_parse(line, n, NULL, &doc, perr, sizeof perr)) {
            if (warn) fprintf(warn, "warning: %s:%zu: skipped a bad line (%s)\n", path, ln, perr);
            continue;
        }
        if (rec_from_json(json_root(doc), &x)) {
            if (warn) fprintf(warn, "warning: %s:%zu: skipped a line without a string \"id\"\n", path, ln);
        } else rec_push(out, &x);
        json_free(doc);
    }
    free(buf);
    return 0;
}

void harness_results_free(struct harness_results *r) {
    for (size_t i = 0; i < r->n; i++) free(r->r[i].id), free(r->r[i].pred);
    free(r->r);
    memset(r, 0, sizeof *r);
}

/* by id, then sample */
static int rec_cmp(const void *a, const void *b) {
    const struct harness_rec *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->sample > y->sample) - (x->sample < y->sample);
}

void harness_results_sort(struct harness_results *r) {
    if (r->n) qsort(r->r, r->n, sizeof *r->r, rec_cmp);
    r->sorted = 1;
}

const struct harness_rec *harness_find_sample(const struct harness_results *r, const char *id, int sample) {
    if (r->sorted) {
        struct harness_rec key = {.id = (char *)id, .sample = sample};
        return r->n ? bsearch(&key, r->r, r->n, sizeof *r->r, rec_cmp) : NULL;
    }
    for (size_t i = r->n; i-- > 0;)
        if (r->r[i].sample == sample && !strcmp(r->r[i].id, id)) return &r->r[i];
    return NULL;
}

const struct harness_rec *harness_find(const struct harness_results *r, const char *id) {
    return harness_find_sample(r, id, 0);
}

void harness_sampling_key(const tkv_sampling *so, char *b, size_t n) {
    if (so->temperature <= 0) snprintf(b, n, "greedy");
    else
        snprintf(b, n, "t%g/k%d/p%g/m%g/r%g/%d/s%llu", (double)so->temperature, so->top_k, (double)so->top_p,
                 (double)so->min_p, (double)so->repeat_penalty, so->repeat_last_n, (unsigned long long)so->seed);
}

/* The start of every line this harness writes: a last line that starts so and does not parse is
 * one a killed run was writing. */
#define LINE_START "{\"id\":\""

/* A file killed mid-write ends without '\n'. The last line is then one of three things:
 *  - complete: it parses as JSON (invalid UTF-8 tolerated): kept, and completed with '\n';
 *  - cut: it does not parse and starts as every line this harness writes: a run was killed while
 *    writing it; it is cut off and that is said on `warn` (stderr when the run is quiet);
 *  - anything else: not ours to remove; an error, and the file is left as it is.
 * So appended lines start on a line of their own and nothing complete is ever lost. */
int harness_repair_tail(const char *path, FILE *warn, char *err, size_t errlen) {
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    char *buf;
    size_t len;
    if (eval_read_file(path, &buf, &len, err, errlen)) return -1;
    int rc = 0;
    if (len > 0 && buf[len - 1] != '\n') {
        size_t start = len;
        while (start > 0 && buf[start - 1] != '\n') start--;
        const char *line = buf + start;
        size_t n = len - start, ln = 1;
        for (size_t i = 0; i < start; i++) ln += buf[i] == '\n';
        struct json_opts lax = {.replace_invalid = 1};
        struct json_doc *doc;
        char perr[256];
        if (!json_parse(line, n, &lax, &doc, perr, sizeof perr)) {
            json_free(doc);
            FILE *f = fopen(path, "ab");
            if (!f || fputc('\n', f) == EOF || fclose(f)) rc = tkv_errf(err, errlen, "%s: cannot append: %s", path, strerror(errno));
        } else if (n >= sizeof LINE_START - 1 && !memcmp(line, LINE_START, sizeof LINE_START - 1)) {
            fprintf(warn ? warn : stderr,
                    "warning: %s:%zu: removed a truncated last line (%zu bytes, no newline: a run was killed while writing it): %.60s...\n",
                    path, ln, n, line);
            if (truncate(path, (off_t)start)) rc = tkv_errf(err, errlen, "%s: cannot truncate: %s", path, strerror(errno));
        } else {
            rc = tkv_errf(err, errlen,
                          "%s:%zu: the last line has no newline and is neither a complete JSON line (%s) nor one this "
                          "program was writing; left as it is: fix or remove it",
                          path, ln, perr);
        }
    }
    free(buf);
    return rc;
}

/* A float setting as the decimal it was given as (0.8, not 0.800000011920929): its shortest form
 * that reads back as the same float. */
static double float_decimal(float f) {
    char b[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)f);
        if ((float)strtod(b, NULL) == f) break;
    }
    return strtod(b, NULL);
}

/* The configuration every results line and summary records, in this order: the policy and its
 * budgets, the cache type, the options beyond the defaults, the token cap. */
void harness_out_config(struct json_out *j, const struct harness_opts *o) {
    json_out_key(j, "policy"), json_out_str(j, tkv_policy_name(o->sp.kv.policy));
    json_out_key(j, "hbm_ratio"), json_out_num(j, o->sp.kv.t0_ratio);
    json_out_key(j, "t2_ratio"), json_out_num(j, o->sp.kv.t2_ratio);
    json_out_key(j, "evict_ratio"), json_out_num(j, o->sp.kv.evict_ratio);
    json_out_key(j, "hbm_budget_bytes"), json_out_int(j, (int64_t)o->sp.kv.t0_budget_bytes);
    json_out_key(j, "kv_type"), json_out_str(j, o->sp.kv.f16 ? "f16" : "f32");
    harness_out_kv_extra(j, &o->sp.kv);
    json_out_key(j, "max_tokens"), json_out_int(j, o->max_tokens);
    const tkv_sampling *so = &o->sampling;
    if (so->temperature > 0) { /* greedy lines have none, as before samples existed */
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)so->seed); /* a string: exact above 2^53 */
        json_out_key(j, "sampling");
        json_out_obj_begin(j);
        json_out_key(j, "temperature"), json_out_num(j, float_decimal(so->temperature));
        json_out_key(j, "top_k"), json_out_int(j, so->top_k);
        json_out_key(j, "top_p"), json_out_num(j, float_decimal(so->top_p));
        json_out_key(j, "min_p"), json_out_num(j, float_decimal(so->min_p));
        json_out_key(j, "repeat_penalty"), json_out_num(j, float_decimal(so->repeat_penalty));
        json_out_key(j, "repeat_last_n"), json_out_int(j, so->repeat_last_n);
        json_out_key(j, "seed"), json_out_str(j, seed);
        json_out_obj_end(j);
    }
}

/* The KV options that exist since results lines record them, written only when not the default,
 * so older lines (which lack them) stay comparable: T2 codec, absolute tokens per sequence, the
 * baselines' protected prompt, window/sinks/delta when changed, and the unpinned prompt. */
void harness_out_kv_extra(struct json_out *j, const tkv_kv_params *kv) {
    if (kv->t2_codec && strcmp(kv->t2_codec, "q8h")) json_out_key(j, "t2_codec"), json_out_str(j, kv->t2_codec);
    if (kv->t0_tokens) json_out_key(j, "t0_tokens"), json_out_int(j, kv->t0_tokens);
    if (kv->protect_prompt) json_out_key(j, "protect_prompt"), json_out_bool(j, 1);
    if (kv->unpin_prompt) json_out_key(j, "unpin_prompt"), json_out_bool(j, 1);
    if (kv->window != 64) json_out_key(j, "window"), json_out_int(j, kv->window);
    if (kv->sinks != 4) json_out_key(j, "sinks"), json_out_int(j, kv->sinks);
    if (kv->delta != 64) json_out_key(j, "delta"), json_out_int(j, kv->delta);
}

/* A line's form of the same options, to refuse mixing configurations in one results file. */
void harness_kv_extra_key(const tkv_kv_params *kv, char *b, size_t n) {
    kv_extra_format(b, n, kv->t2_codec ? kv->t2_codec : "q8h", kv->t0_tokens, kv->protect_prompt, kv->window, kv->sinks,
                    kv->delta, kv->unpin_prompt);
}

/* ---- summaries ---- */

/* The majority answer of a problem's chains (the most frequent non-empty pred, ties to the earliest
 * chain) and whether it is correct (graded as its earliest chain was). */
static int majority_correct(const struct harness_rec *const *x, int n) {
    int best = -1, best_n = 0;
    for (int a = 0; a < n; a++) {
        if (!*x[a]->pred) continue;
        int seen = 0, c = 0;
        for (int b = 0; b < n && !seen; b++) seen = b < a && !strcmp(x[b]->pred, x[a]->pred);
        if (seen) continue; /* counted at its first chain */
        for (int b = a; b < n; b++) c += !strcmp(x[b]->pred, x[a]->pred);
        if (c > best_n) best = a, best_n = c;
    }
    return best >= 0 && x[best]->correct;
}

void harness_summarize(const struct harness_results *r, char *const *ids, size_t n_ids, int samples,
                       struct harness_summary *s) {
    long run_problems = s->run_problems, run_tokens = s->run_tokens;
    double run_seconds = s->run_seconds;
    memset(s, 0, sizeof *s);
    s->run_problems = run_problems, s->run_tokens = run_tokens, s->run_seconds = run_seconds;
    int K = samples > 1 && ids ? samples : 1;
    s->samples = K;
    size_t m = ids ? n_ids : r->n;
    double len_sum = 0, n_len = 0, frac_sum = 0, frac_sq = 0;
    const struct harness_rec **chain = tkv_xmalloc((size_t)K * sizeof *chain);
    for (size_t i = 0; i < m; i++) {
        int n = 0, good = 0;
        for (int k = 0; k < K; k++) {
            const struct harness_rec *x = ids ? harness_find_sample(r, ids[i], k) : &r->r[i];
            if (!x) continue;
            chain[n++] = x;
            good += x->correct;
            len_sum += x->gen_tokens;
            if (x->gen_tokens > s->max_len) s->max_len = x->gen_tokens;
            n_len += x->finish_length;
            for (int t = 0; t < 4; t++) s->mean_tier_tokens[t] += x->tier_tokens[t];
            s->mean_peak_t0_bytes += x->peak_t0_bytes;
            s->mean_bytes_moved += x->bytes_moved;
            s->mean_evicted += x->tokens_evicted;
            s->mean_t0_share += x->t0_share;
        }
        if (!n) continue;
        s->n++;
        s->n_samples += n;
        s->correct += good;
        double f = (double)good / n;
        frac_sum += f, frac_sq += f * f;
        s->maj_correct += majority_correct(chain, n);
        s->passk_correct += good > 0;
    }
    free(chain);
    struct eval_summary es;
    eval_summarize(K > 1 ? s->maj_correct : s->correct, s->n, &es);
    s->acc = es.acc, s->ci_lo = es.ci_lo, s->ci_hi = es.ci_hi;
    s->majk = es.acc, s->majk_lo = es.ci_lo, s->majk_hi = es.ci_hi;
    eval_summarize(s->passk_correct, s->n, &es);
    s->passk = es.acc, s->passk_lo = es.ci_lo, s->passk_hi = es.ci_hi;
    if (K == 1) s->acc = s->n ? (double)s->correct / (double)s->n : 0; /* as before samples existed */
    if (s->n) {
        double k = (double)s->n_samples, np = (double)s->n, mean = frac_sum / np;
        double sd = np > 1 ? sqrt(fmax(0, (frac_sq - np * mean * mean) / (np - 1))) : 0;
        s->pass1 = mean, s->pass1_lo = fmax(0, mean - 1.96 * sd / sqrt(np)), s->pass1_hi = fmin(1, mean + 1.96 * sd / sqrt(np));
        s->mean_len = len_sum / k;
        s->length_share = n_len / k;
        for (int t = 0; t < 4; t++) s->mean_tier_tokens[t] /= k;
        s->mean_peak_t0_bytes /= k;
        s->mean_bytes_moved /= k;
        s->mean_evicted /= k;
        s->mean_t0_share /= k;
    } else {
        s->mean_t0_share = NAN;
    }
    if (K > 1) s->acc = s->pass1, s->ci_lo = s->pass1_lo, s->ci_hi = s->pass1_hi;
}

void harness_summary_print(FILE *f, const struct harness_summary *s) {
    if (s->samples > 1) {
        fprintf(f, "problems          %ld, %d chains each (%ld lines)\n", s->n, s->samples, s->n_samples);
        fprintf(f, "pass@1            %.4f (%ld/%ld chains correct), 95%% [%.4f, %.4f] over problems\n", s->pass1, s->correct,
                s->n_samples, s->pass1_lo, s->pass1_hi);
        fprintf(f, "maj@%-2d            %.4f (%ld/%ld), Wilson 95%% [%.4f, %.4f]\n", s->samples, s->majk, s->maj_correct, s->n,
                s->majk_lo, s->majk_hi);
        fprintf(f, "pass@%-2d           %.4f (%ld/%ld), Wilson 95%% [%.4f, %.4f]\n", s->samples, s->passk, s->passk_correct,
                s->n, s->passk_lo, s->passk_hi);
    } else {
        fprintf(f, "problems          %ld\n", s->n);
        fprintf(f, "accuracy          %.4f (%ld/%ld), Wilson 95%% [%.4f, %.4f]\n", s->acc, s->correct, s->n, s->ci_lo, s->ci_hi);
    }
    fprintf(f, "generated tokens  mean %.1f, max %.0f; stopped by the length cap: %.1f%%\n", s->mean_len, s->max_len,
            100 * s->length_share);
    fprintf(f, "KV per problem    T0 %.1f, T1 %.1f, T2 %.1f, evicted %.1f tokens (mean at the end); peak T0 %.2f MiB; "
               "moved %.2f MiB; evicted %.1f tokens\n",
            s->mean_tier_tokens[0], s->mean_tier_tokens[1], s->mean_tier_tokens[2], s->mean_tier_tokens[3],
            s->mean_peak_t0_bytes / 1048576.0, s->mean_bytes_moved / 1048576.0, s->mean_evicted);
    if (s->run_problems && s->run_seconds > 0)
        fprintf(f, "this run          %ld problems, %ld tokens in %.1f s: %.2f tok/s aggregate\n", s->run_problems,
                s->run_tokens, s->run_seconds, (double)s->run_tokens / s->run_seconds);
    else fprintf(f, "this run          nothing left to do (all problems were in the results file)\n");
}

int harness_summary_write_json(const char *path, const struct harness_opts *o, const struct harness_summary *s,
                               char *const *ids, size_t n_ids, const char *cmd, char *err, size_t errlen) {
    struct json_out j;
    json_out_init(&j);
    json_out_obj_begin(&j);
    json_out_key(&j, "model"), json_out_str(&j, tkv_file_name(o->model_path));
    json_out_key(&j, "task"), json_out_str(&j, o->task_label);
    json_out_key(&j, "data"), json_out_str(&j, tkv_file_name(o->data_path));
    json_out_key(&j, "results"), o->out_path ? json_out_str(&j, tkv_file_name(o->out_path)) : json_out_null(&j);
    json_out_key(&j, "command"), json_out_str(&j, cmd ? cmd : "");
    json_out_key(&j, "commit"), json_out_str(&j, tkv_build_commit());
    json_out_key(&j, "build_flags"), json_out_str(&j, tkv_build_flags());
    harness_out_config(&j, o);
    json_out_key(&j, "parallel"), json_out_int(&j, o->parallel);
    json_out_key(&j, "n"), json_out_int(&j, s->n);
    json_out_key(&j, "correct"), json_out_int(&j, s->correct);
    json_out_key(&j, "accuracy"), json_out_num(&j, s->acc);
    json_out_key(&j, "ci_lo"), json_out_num(&j, s->ci_lo);
    json_out_key(&j, "ci_hi"), json_out_num(&j, s->ci_hi);
    if (s->samples > 1) {
        json_out_key(&j, "samples"), json_out_int(&j, s->samples);
        json_out_key(&j, "n_samples"), json_out_int(&j, s->n_samples);
        json_out_key(&j, "pass_at_1"), json_out_num(&j, s->pass1);
        json_out_key(&j, "pass_at_1_ci"), json_out_arr_begin(&j), json_out_num(&j, s->pass1_lo), json_out_num(&j, s->pass1_hi),
            json_out_arr_end(&j);
        json_out_key(&j, "maj_at_k"), json_out_num(&j, s->majk);
        json_out_key(&j, "maj_correct"), json_out_int(&j, s->maj_correct);
        json_out_key(&j, "maj_at_k_ci"), json_out_arr_begin(&j), json_out_num(&j, s->majk_lo), json_out_num(&j, s->majk_hi),
            json_out_arr_end(&j);
        json_out_key(&j, "pass_at_k"), json_out_num(&j, s->passk);
        json_out_key(&j, "pass_correct"), json_out_int(&j, s->passk_correct);
        json_out_key(&j, "pass_at_k_ci"), json_out_arr_begin(&j), json_out_num(&j, s->passk_lo), json_out_num(&j, s->passk_hi),
            json_out_arr_end(&j);
    }
    json_out_key(&j, "mean_len"), json_out_num(&j, s->mean_len);
    json_out_key(&j, "max_len"), json_out_num(&j, s->max_len);
    json_out_key(&j, "length_share"), json_out_num(&j, s->length_share);
    json_out_key(&j, "mean_tier_tokens");
    json_out_arr_begin(&j);
    for (int t = 0; t < 4; t++) json_out_num(&j, s->mean_tier_tokens[t]);
    json_out_arr_end(&j);
    json_out_key(&j, "mean_peak_t0_bytes"), json_out_num(&j, s->mean_peak_t0_bytes);
    json_out_key(&j, "mean_bytes_moved"), json_out_num(&j, s->mean_bytes_moved);
    json_out_key(&j, "mean_evicted"), json_out_num(&j, s->mean_evicted);
    json_out_key(&j, "mean_t0_share"), json_out_num(&j, s->mean_t0_share);
    json_out_key(&j, "run_problems"), json_out_int(&j, s->run_problems);
    json_out_key(&j, "run_tokens"), json_out_int(&j, s->run_tokens);
    json_out_key(&j, "run_seconds"), json_out_num(&j, s->run_seconds);
    json_out_key(&j, "tok_per_s");
    if (s->run_problems && s->run_seconds > 0) json_out_num(&j, (double)s->run_tokens / s->run_seconds);
    else json_out_null(&j);
    json_out_key(&j, "ids");
    json_out_arr_begin(&j);
    for (size_t i = 0; i < n_ids; i++) json_out_str(&j, ids[i]);
    json_out_arr_end(&j);
    json_out_obj_end(&j);
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f || fwrite(j.b.p, 1, j.b.n, f) != j.b.n || fputc('\n', f) == EOF) rc = tkv_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    if (f && fclose(f) && !rc) rc = tkv_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    json_out_free(&j);
    return rc;
}

/* A summary already at path that records these counts and this selection, in order: what an
 * invocation that ran nothing would write again, less the throughput of the one that did run. */
int harness_summary_unchanged(const char *path, const struct harness_summary *s, char *const *ids, size_t n_ids) {
    char *buf, err[256];
    size_t len;
    struct json_doc *doc;
    if (eval_read_file(path, &buf, &len, err, sizeof err)) return 0; /* none yet (or unreadable): write it */
    int same = !json_parse(buf, len, NULL, &doc, NULL, 0);
    free(buf);
    if (!same) return 0;
    const struct json_value *root = json_root(doc), *a = json_get(root, "ids");
    int64_t n, correct;
    same = json_get_int(root, "n", &n) && n == s->n && json_get_int(root, "correct", &correct) &&
           correct == s->correct && a && a->type == JSON_ARRAY && a->u.arr.n == n_ids;
    for (size_t i = 0; same && i < n_ids; i++) {
        const struct json_value *v = json_at(a, i);
        same = v && v->type == JSON_STRING && !strcmp(v->u.str.s, ids[i]);
    }
    json_free(doc);
    return same;
}

void harness_ids_free(char **ids, size_t n) {
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
}

/* ---- line checks ---- */

#define CHECK_KEY ",\"check\":\""

/* Closes the object being written with its check: the FNV-1a 64 of every byte before `,"check":"`. */
void harness_sign(struct json_out *j) {
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)tkv_fnv1a64(j->b.p, j->b.n));
    json_out_key(j, "check"), json_out_str(j, hex);
    json_out_obj_end(j);
}

int harness_verify_line(const char *line, size_t n) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    size_t klen = sizeof CHECK_KEY - 1, at = (size_t)-1;
    /* the last `,"check":"`: inside a string value its quotes would be escaped */
    for (size_t i = 0; i + klen <= n; i++)
        if (!memcmp(line + i, CHECK_KEY, klen)) at = i;
    if (at == (size_t)-1) return 0;
    if (n != at + klen + 16 + 2 || memcmp(line + n - 2, "\"}", 2)) return -1;
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)tkv_fnv1a64(line, at));
    return memcmp(hex, line + at + klen, 16) ? -1 : 1;
}


void harness_push_line(struct harness_results *r, const char *line, size_t n) {
    struct json_doc *doc;
    struct harness_rec x;
    if (json_parse(line, n, NULL, &doc, NULL, 0)) return;
    if (!rec_from_json(json_root(doc), &x)) rec_push(r, &x);
    json_free(doc);
}
