/* harness.c — the evaluation driver (see harness.h): results files (read, repair, append), the
 * continuous-batching decode loop over a task's problems, progress, and summaries.
 *
 * Invariants: a problem's line is appended (and flushed) the moment it finishes, before its slot is
 * reused, so a kill loses at most the problems in flight. Per-problem KV statistics are the slot's
 * counters at its end minus those at its start: the kv module's counters are cumulative per slot. */
#include "eval/harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/argmax.h"
#include "base/err.h"
#include "eval/json.h"
#include "eval/stats.h"
#include "gguf/gguf.h"
#include "model/chat.h"
#include "model/tokenizer.h"
#include "base/clock.h"
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
static int rec_from_json(const struct json_value *o, struct harness_rec *x) {
    const char *id = json_get_str(o, "id");
    if (!o || o->type != JSON_OBJECT || !id) return -1;
    memset(x, 0, sizeof *x);
    x->id = xstrdup(id);
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
    kv_policy_kind kind;
    int whole_token = pol && kv_policy_parse(pol, &kind) == 0 && kv_policy_whole_token(kind);
    x->tokens_evicted = num_or(kv, "evicted_equiv", whole_token ? num_or(kv, "tokens_evicted", 0) : NAN);
    snprintf(x->policy, sizeof x->policy, "%s", pol ? pol : "");
    x->max_tokens = (int)num_or(o, "max_tokens", 0);
    x->hbm_ratio = num_or(o, "hbm_ratio", -1);
    x->t2_ratio = num_or(o, "t2_ratio", -1);
    x->evict_ratio = num_or(o, "evict_ratio", -1);
    const char *kt = json_get_str(o, "kv_type"); /* absent: written before f16 caches existed (f32) */
    x->kv_f16 = kt && !strcmp(kt, "f16");
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
    for (size_t i = 0; i < r->n; i++) free(r->r[i].id);
    free(r->r);
    memset(r, 0, sizeof *r);
}

static int rec_cmp(const void *a, const void *b) {
    return strcmp(((const struct harness_rec *)a)->id, ((const struct harness_rec *)b)->id);
}

void harness_results_sort(struct harness_results *r) {
    if (r->n) qsort(r->r, r->n, sizeof *r->r, rec_cmp);
    r->sorted = 1;
}

const struct harness_rec *harness_find(const struct harness_results *r, const char *id) {
    if (r->sorted) {
        struct harness_rec key = {.id = (char *)id};
        return r->n ? bsearch(&key, r->r, r->n, sizeof *r->r, rec_cmp) : NULL;
    }
    for (size_t i = r->n; i-- > 0;)
        if (!strcmp(r->r[i].id, id)) return &r->r[i];
    return NULL;
}

/* The start of every line this harness writes (slot_finish): a last line that starts so and does
 * not parse is one a killed run was writing. */
#define LINE_START "{\"id\":\""

/* A file killed mid-write ends without '\n'. The last line is then one of three things:
 *  - complete: it parses as JSON (invalid UTF-8 tolerated): kept, and completed with '\n';
 *  - cut: it does not parse and starts as every line this harness writes: a run was killed while
 *    writing it; it is cut off and that is said on `warn` (stderr when the run is quiet);
 *  - anything else: not ours to remove; an error, and the file is left as it is.
 * So appended lines start on a line of their own and nothing complete is ever lost. */
static int repair_tail(const char *path, FILE *warn, char *err, size_t errlen) {
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
            fprintf(warn, "warning: %s:%zu: removed a truncated last line (%zu bytes, no newline: a run was killed while writing it): %.60s...\n",
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

/* ---- summaries ---- */

void harness_summarize(const struct harness_results *r, char *const *ids, size_t n_ids, struct harness_summary *s) {
    long run_problems = s->run_problems, run_tokens = s->run_tokens;
    double run_seconds = s->run_seconds;
    memset(s, 0, sizeof *s);
    s->run_problems = run_problems, s->run_tokens = run_tokens, s->run_seconds = run_seconds;
    size_t m = ids ? n_ids : r->n;
    double len_sum = 0, n_len = 0;
    for (size_t i = 0; i < m; i++) {
        const struct harness_rec *x = ids ? harness_find(r, ids[i]) : &r->r[i];
        if (!x) continue;
        s->n++;
        s->correct += x->correct;
        len_sum += x->gen_tokens;
        if (x->gen_tokens > s->max_len) s->max_len = x->gen_tokens;
        n_len += x->finish_length;
        for (int t = 0; t < 4; t++) s->mean_tier_tokens[t] += x->tier_tokens[t];
        s->mean_peak_t0_bytes += x->peak_t0_bytes;
        s->mean_bytes_moved += x->bytes_moved;
        s->mean_evicted += x->tokens_evicted;
    }
    struct eval_summary es;
    eval_summarize(s->correct, s->n, &es);
    s->acc = es.acc, s->ci_lo = es.ci_lo, s->ci_hi = es.ci_hi;
    if (s->n) {
        double k = (double)s->n;
        s->mean_len = len_sum / k;
        s->length_share = n_len / k;
        for (int t = 0; t < 4; t++) s->mean_tier_tokens[t] /= k;
        s->mean_peak_t0_bytes /= k;
        s->mean_bytes_moved /= k;
        s->mean_evicted /= k;
    }
}

void harness_summary_print(FILE *f, const struct harness_summary *s) {
    fprintf(f, "problems          %ld\n", s->n);
    fprintf(f, "accuracy          %.4f (%ld/%ld), Wilson 95%% [%.4f, %.4f]\n", s->acc, s->correct, s->n, s->ci_lo, s->ci_hi);
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

/* Summaries are kept with the results (and in the repository): they name files, not the paths of
 * the machine that ran them. */
static const char *file_name(const char *path) {
    const char *b = path ? strrchr(path, '/') : NULL;
    return b ? b + 1 : (path ? path : "");
}

int harness_summary_write_json(const char *path, const struct harness_opts *o, const struct harness_summary *s,
                               char *const *ids, size_t n_ids, const char *cmd, char *err, size_t errlen) {
    struct json_out j;
    json_out_init(&j);
    json_out_obj_begin(&j);
    json_out_key(&j, "model"), json_out_str(&j, file_name(o->model_path));
    json_out_key(&j, "task"), json_out_str(&j, o->task_label);
    json_out_key(&j, "data"), json_out_str(&j, file_name(o->data_path));
    json_out_key(&j, "results"), o->out_path ? json_out_str(&j, o->out_path) : json_out_null(&j);
    json_out_key(&j, "command"), json_out_str(&j, cmd ? cmd : "");
    json_out_key(&j, "commit"), json_out_str(&j, tkv_build_commit());
    json_out_key(&j, "build_flags"), json_out_str(&j, tkv_build_flags());
    json_out_key(&j, "policy"), json_out_str(&j, kv_policy_name(o->eo.kv.policy));
    json_out_key(&j, "hbm_ratio"), json_out_num(&j, o->eo.kv.hbm_ratio);
    json_out_key(&j, "t2_ratio"), json_out_num(&j, o->eo.kv.t2_ratio);
    json_out_key(&j, "evict_ratio"), json_out_num(&j, o->eo.kv.evict_ratio);
    json_out_key(&j, "hbm_budget_bytes"), json_out_int(&j, (int64_t)o->eo.kv.hbm_budget_bytes);
    json_out_key(&j, "kv_type"), json_out_str(&j, o->eo.kv.f16 ? "f16" : "f32");
    json_out_key(&j, "max_tokens"), json_out_int(&j, o->max_tokens);
    json_out_key(&j, "parallel"), json_out_int(&j, o->parallel);
    json_out_key(&j, "n"), json_out_int(&j, s->n);
    json_out_key(&j, "correct"), json_out_int(&j, s->correct);
    json_out_key(&j, "accuracy"), json_out_num(&j, s->acc);
    json_out_key(&j, "ci_lo"), json_out_num(&j, s->ci_lo);
    json_out_key(&j, "ci_hi"), json_out_num(&j, s->ci_hi);
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
    if (!f || fwrite(j.p, 1, j.n, f) != j.n || fputc('\n', f) == EOF) rc = tkv_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    if (f && fclose(f) && !rc) rc = tkv_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    json_out_free(&j);
    return rc;
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
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)tkv_fnv1a64(j->p, j->n));
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

/* ---- the decode loop ---- */

struct slot {
    int item;          /* index into the pending list; -1: free */
    int gen;           /* tokens generated so far */
    char *text;        /* output so far */
    size_t tn, tcap;
    tok_stream ts;
    double t_start;
    kv_stats st0;      /* the slot's counters when the problem started */
    int64_t t0_seen;   /* largest T0 bytes seen at a step end */
};

struct run {
    const struct harness_opts *o;
    const struct eval_set *set;
    size_t *pending;   /* item indices still to run */
    int32_t **ids;     /* [n_pending] prompt ids */
    int *n_ids;
    size_t n_pending, next;
    tkv_engine *e;
    tok_vocab *vocab;
    int V, P;
    int prefix_len;    /* > 0: every prompt starts with these ids, prefilled once in sequence P */
    float *slot_logits; /* [P][V]: next-token logits of each slot */
    struct slot *slots;
    char *piece;
    FILE *out;
    struct harness_results *res;
    const char *model_name;
    /* progress */
    size_t total, done, correct; /* over the selection */
    long run_done, run_tokens;
    double t_begin;
};

static void text_add(struct slot *s, const char *p, size_t n) {
    if (s->tn + n + 1 > s->tcap) {
        size_t cap = s->tcap ? s->tcap : 1024;
        while (s->tn + n + 1 > cap) cap *= 2;
        char *q = realloc(s->text, cap);
        TKV_ASSERT(q);
        s->text = q;
        s->tcap = cap;
    }
    memcpy(s->text + s->tn, p, n);
    s->tn += n;
    s->text[s->tn] = 0;
}

/* Puts the next pending problem into slot k and prefills it; the slot stays free when none is left. */
static int slot_fill(struct run *r, int k, char *err, size_t errlen) {
    struct slot *s = &r->slots[k];
    s->item = -1;
    if (r->next == r->n_pending) return 0;
    size_t p = r->next++;
    s->item = (int)p;
    s->gen = 0;
    s->tn = 0;
    text_add(s, "", 0);
    tok_stream_init(&s->ts);
    s->t_start = tkv_now_s();
    kv_get_stats(tkv_kv_of(r->e), k, &s->st0);
    s->t0_seen = 0;
    char perr[512];
    int L = r->prefix_len;
    if ((L && kv_seq_copy_prefix(tkv_kv_of(r->e), r->P, k, L, perr, sizeof perr)) ||
        tkv_prefill(r->e, k, r->ids[p] + L, r->n_ids[p] - L, r->slot_logits + (size_t)k * (size_t)r->V, 0, perr, sizeof perr))
        return tkv_errf(err, errlen, "problem %s: %s", r->set->items[r->pending[p]].id, perr);
    return 0;
}

/* Prompt ids every pending problem starts with, leaving each at least one of its own (0 when fewer
 * than PREFIX_MIN: not worth a sequence). */
#define PREFIX_MIN 16
static int common_prefix(const struct run *r) {
    int L = r->n_ids[0] - 1;
    for (size_t p = 1; p < r->n_pending && L >= PREFIX_MIN; p++) {
        int i = 0, m = r->n_ids[p] - 1 < L ? r->n_ids[p] - 1 : L;
        while (i < m && r->ids[p][i] == r->ids[0][i]) i++;
        L = i;
    }
    return L >= PREFIX_MIN ? L : 0;
}

static void fmt_eta(double s, char *b, size_t n) {
    if (s < 0 || s > 1e7) snprintf(b, n, "?");
    else if (s >= 3600) snprintf(b, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else snprintf(b, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

static void progress(struct run *r, int final) {
    FILE *f = r->o->progress;
    if (!f) return;
    /* not a TTY: every 10th problem and the end (unless the 10th was the last) */
    if (!r->o->progress_tty && (final ? r->run_done % 10 == 0 && r->run_done : r->run_done % 10 != 0)) return;
    double el = tkv_now_s() - r->t_begin;
    double eta = r->run_done ? (double)(r->n_pending - (size_t)r->run_done) * el / (double)r->run_done : -1;
    char etab[32];
    fmt_eta(eta, etab, sizeof etab);
    fprintf(f, "%s[eval] %zu/%zu done | acc %.3f (%zu/%zu) | %.1f tok/s | ETA %s%s", r->o->progress_tty ? "\r" : "", r->done,
            r->total, r->done ? (double)r->correct / (double)r->done : 0.0, r->correct, r->done,
            el > 0 ? (double)r->run_tokens / el : 0.0, etab, r->o->progress_tty ? "\033[K" : "\n");
    if (r->o->progress_tty && final) fputc('\n', f);
    fflush(f);
}

/* Grades slot k's problem, appends its line, resets the slot. */
static int slot_finish(struct run *r, int k, int by_length, char *err, size_t errlen) {
    struct slot *s = &r->slots[k];
    const struct harness_opts *o = r->o;
    const struct eval_item *it = &r->set->items[r->pending[s->item]];
    size_t nf = tok_stream_flush(&s->ts, r->piece);
    text_add(s, r->piece, nf);
    kv_cache *kv = tkv_kv_of(r->e);
    kv_sync(kv);
    kv_stats st;
    kv_get_stats(kv, k, &st);
    int64_t peak = st.peak_t0_bytes > s->st0.peak_t0_bytes ? st.peak_t0_bytes : s->t0_seen;
    if (st.bytes[0] > peak) peak = st.bytes[0];
    struct eval_verdict v;
    eval_grade(o->task, s->text, it->answer, it->n_choices, &v);
    double secs = tkv_now_s() - s->t_start;

    struct json_out j;
    json_out_init(&j);
    json_out_obj_begin(&j);
    json_out_key(&j, "id"), json_out_str(&j, it->id);
    json_out_key(&j, "task"), json_out_str(&j, o->task_label);
    json_out_key(&j, "model"), json_out_str(&j, r->model_name);
    json_out_key(&j, "prompt_tokens"), json_out_int(&j, r->n_ids[s->item]);
    json_out_key(&j, "output"), json_out_strn(&j, s->text, s->tn);
    json_out_key(&j, "pred"), json_out_str(&j, v.pred);
    json_out_key(&j, "gold"), json_out_str(&j, v.gold);
    json_out_key(&j, "correct"), json_out_bool(&j, v.correct);
    json_out_key(&j, "strict"), v.strict < 0 ? json_out_null(&j) : json_out_bool(&j, v.strict);
    json_out_key(&j, "gen_tokens"), json_out_int(&j, s->gen);
    json_out_key(&j, "finish"), json_out_str(&j, by_length ? "length" : "eog");
    json_out_key(&j, "seconds"), json_out_num(&j, secs);
    json_out_key(&j, "kv");
    json_out_obj_begin(&j);
    json_out_key(&j, "tokens");
    json_out_arr_begin(&j);
    for (int t = 0; t < 4; t++) json_out_int(&j, st.tokens[t]);
    json_out_arr_end(&j);
    json_out_key(&j, "peak_t0_bytes"), json_out_int(&j, peak);
    json_out_key(&j, "t0_budget_bytes"), json_out_int(&j, st.t0_budget_bytes);
    json_out_key(&j, "bytes_moved_down"), json_out_int(&j, st.bytes_moved_down - s->st0.bytes_moved_down);
    json_out_key(&j, "bytes_moved_up"), json_out_int(&j, st.bytes_moved_up - s->st0.bytes_moved_up);
    json_out_key(&j, "bytes_moved_host"), json_out_int(&j, st.bytes_moved_host - s->st0.bytes_moved_host);
    json_out_key(&j, "bytes_staged"), json_out_int(&j, st.bytes_staged - s->st0.bytes_staged);
    json_out_key(&j, "tokens_evicted"), json_out_int(&j, st.tokens_evicted - s->st0.tokens_evicted);
    json_out_key(&j, "retiers"), json_out_int(&j, st.retiers - s->st0.retiers);
    json_out_key(&j, "evicted_equiv"), json_out_num(&j, st.evicted_equiv);
    json_out_obj_end(&j);
    json_out_key(&j, "policy"), json_out_str(&j, kv_policy_name(o->eo.kv.policy));
    json_out_key(&j, "hbm_ratio"), json_out_num(&j, o->eo.kv.hbm_ratio);
    json_out_key(&j, "t2_ratio"), json_out_num(&j, o->eo.kv.t2_ratio);
    json_out_key(&j, "evict_ratio"), json_out_num(&j, o->eo.kv.evict_ratio);
    json_out_key(&j, "hbm_budget_bytes"), json_out_int(&j, (int64_t)o->eo.kv.hbm_budget_bytes);
    json_out_key(&j, "kv_type"), json_out_str(&j, o->eo.kv.f16 ? "f16" : "f32");
    json_out_key(&j, "max_tokens"), json_out_int(&j, o->max_tokens);
    json_out_key(&j, "build"), json_out_str(&j, tkv_build_commit());
    harness_sign(&j);

    int rc = 0;
    if (r->out) {
        /* one fwrite + fflush: with the 1 MiB buffer a line normally goes out in one write() */
        if (fwrite(j.p, 1, j.n, r->out) != j.n || fputc('\n', r->out) == EOF || fflush(r->out))
            rc = tkv_errf(err, errlen, "%s: cannot write: %s", o->out_path, strerror(errno));
    }
    /* the record the summaries read, taken from the very line written */
    struct json_doc *doc;
    struct harness_rec x;
    if (!json_parse(j.p, j.n, NULL, &doc, NULL, 0)) {
        if (!rec_from_json(json_root(doc), &x)) rec_push(r->res, &x);
        json_free(doc);
    }
    json_out_free(&j);
    r->done++;
    r->correct += (size_t)v.correct;
    r->run_done++;
    eval_verdict_free(&v);
    tkv_seq_reset(r->e, k);
    s->item = -1;
    progress(r, 0);
    return rc;
}

/* Tokenises every pending prompt; the context must hold the longest one plus max_tokens. */
static int encode_prompts(struct run *r, const gguf_file *gf, int *max_prompt, char *err, size_t errlen) {
    const struct harness_opts *o = r->o;
    chat_template tmpl;
    if (chat_template_from_gguf(gf, o->template_name, &tmpl, err, errlen)) return -1;
    if (o->no_system) tmpl.default_system[0] = 0;
    *max_prompt = 0;
    for (size_t p = 0; p < r->n_pending; p++) {
        const struct eval_item *it = &r->set->items[r->pending[p]];
        char *user = eval_build_prompt(o->task, it);
        chat_msg msgs[2];
        int nm = 0;
        if (o->system && !o->no_system) msgs[nm++] = (chat_msg){"system", o->system};
        msgs[nm++] = (chat_msg){"user", user};
        r->n_ids[p] = chat_encode(&tmpl, r->vocab, msgs, nm, 1, &r->ids[p]);
        free(user);
        if (r->n_ids[p] < 1) return tkv_errf(err, errlen, "problem %s: the prompt is empty after tokenization", it->id);
        if (r->n_ids[p] > *max_prompt) *max_prompt = r->n_ids[p];
    }
    return 0;
}

static int decode_loop(struct run *r, char *err, size_t errlen) {
    int P = r->P, V = r->V;
    int *seqs = tkv_xmalloc((size_t)P * sizeof(int));
    int32_t *toks = tkv_xmalloc((size_t)P * sizeof(int32_t));
    float *blog = tkv_xmalloc((size_t)P * (size_t)V * sizeof(float));
    kv_cache *kv = tkv_kv_of(r->e);
    int rc = 0;
    for (int k = 0; k < P && !rc; k++) rc = slot_fill(r, k, err, errlen);
    while (!rc) {
        int nb = 0, active = 0;
        for (int k = 0; k < P && !rc; k++) {
            struct slot *s = &r->slots[k];
            if (s->item < 0) continue;
            active = 1;
            int32_t t = tkv_argmax_f32(r->slot_logits + (size_t)k * (size_t)V, V);
            s->gen++;
            r->run_tokens++;
            int eog = tok_is_eog(r->vocab, t);
            if (!eog) text_add(s, r->piece, tok_stream_token(&s->ts, r->vocab, t, 0, r->piece));
            if (eog || s->gen >= r->o->max_tokens) {
                rc = slot_finish(r, k, !eog, err, errlen);
                if (!rc) rc = slot_fill(r, k, err, errlen); /* picks its first token next step */
                continue;
            }
            seqs[nb] = k;
            toks[nb++] = t;
        }
        if (rc || !active) break;
        if (!nb) continue;
        if (tkv_decode(r->e, seqs, toks, nb, blog, err, errlen)) { rc = -1; break; }
        for (int b = 0; b < nb; b++) {
            memcpy(r->slot_logits + (size_t)seqs[b] * (size_t)V, blog + (size_t)b * (size_t)V, (size_t)V * sizeof(float));
            kv_stats st;
            kv_get_stats(kv, seqs[b], &st);
            if (st.bytes[0] > r->slots[seqs[b]].t0_seen) r->slots[seqs[b]].t0_seen = st.bytes[0];
        }
    }
    free(seqs);
    free(toks);
    free(blog);
    return rc;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int harness_run(const struct harness_opts *o, struct harness_summary *s, char ***sel_ids, size_t *n_sel, char *err,
                size_t errlen) {
    if (o->parallel < 1 || o->max_tokens < 1 || o->offset < 0) return tkv_errf(err, errlen, "harness: bad options");
    struct eval_set set;
    if (eval_load(o->task, o->data_path, &set, err, errlen)) return -1;
    size_t lo = (size_t)o->offset < set.n ? (size_t)o->offset : set.n;
    size_t hi = o->n < 0 || (size_t)o->n > set.n - lo ? set.n : lo + (size_t)o->n;
    struct harness_results res = {0};
    struct run r = {0};
    memset(s, 0, sizeof *s);
    int rc = -1;
    if (o->out_path) {
        if (repair_tail(o->out_path, o->progress ? o->progress : stderr, err, errlen)) goto out;
        if (harness_load(o->out_path, &res, o->progress, err, errlen)) goto out;
    }
    r.o = o;
    r.set = &set;
    r.res = &res;
    r.total = hi - lo;
    r.model_name = base_name(o->model_path);
    r.pending = tkv_xmalloc((r.total + 1) * sizeof(size_t));
    harness_results_sort(&res);
    for (size_t i = lo; i < hi; i++) {
        const struct harness_rec *x = harness_find(&res, set.items[i].id);
        if (x && (strcmp(x->policy, kv_policy_name(o->eo.kv.policy)) || x->max_tokens != o->max_tokens ||
                  x->hbm_ratio != o->eo.kv.hbm_ratio || x->t2_ratio != o->eo.kv.t2_ratio ||
                  x->evict_ratio != o->eo.kv.evict_ratio || x->kv_f16 != o->eo.kv.f16)) {
            tkv_errf(err, errlen,
                     "%s holds %s from another configuration (policy %s, max_tokens %d, hbm/t2/evict ratios %g/%g/%g, "
                     "kv type %s); give another --out to keep both",
                     o->out_path, x->id, x->policy, x->max_tokens, x->hbm_ratio, x->t2_ratio, x->evict_ratio,
                     x->kv_f16 ? "f16" : "f32");
            goto out;
        }
        if (x) r.done++, r.correct += (size_t)x->correct;
        else r.pending[r.n_pending++] = i;
    }
    if (r.n_pending) {
        r.ids = tkv_xcalloc(r.n_pending, sizeof *r.ids);
        r.n_ids = tkv_xcalloc(r.n_pending, sizeof *r.n_ids);
        int max_prompt = 0;
        {
            gguf_file gf;
            if (gguf_open(o->model_path, &gf, err, errlen)) goto out;
            r.vocab = tok_load(&gf, err, errlen);
            int erc = r.vocab ? encode_prompts(&r, &gf, &max_prompt, err, errlen) : -1;
            gguf_free(&gf);
            if (erc) goto out;
        }
        tkv_options eo = o->eo;
        r.P = eo.n_seq = (size_t)o->parallel < r.n_pending ? o->parallel : (int)r.n_pending;
        if (eo.n_ctx < max_prompt + o->max_tokens) eo.n_ctx = max_prompt + o->max_tokens;
        /* the shared prompt prefix is prefilled once, into one more sequence, and copied into each
         * slot: the same K/V as prefilling it there (tested), computed once. Not with an absolute T0
         * budget, which is split over the sequences, nor for policies that score the prompt. */
        int L = o->no_prefix_cache || r.n_pending < 2 || eo.kv.hbm_budget_bytes || !kv_policy_copies_prefix(eo.kv.policy)
                    ? 0 : common_prefix(&r);
        eo.n_seq += L > 0;
        if (o->progress)
            fprintf(o->progress, "[eval] %s: %zu problems, %zu already in the results file, %zu to run, %d at once\n",
                    o->task_label, r.total, r.done, r.n_pending, r.P);
        if (tkv_engine_open(o->model_path, &eo, &r.e, err, errlen)) goto out;
        if (L) {
            if (tkv_prefill(r.e, r.P, r.ids[0], L, NULL, 0, err, errlen)) goto out;
            r.prefix_len = L;
            if (o->progress) fprintf(o->progress, "[eval] the first %d prompt tokens are shared: prefilled once\n", L);
        }
        r.V = tkv_n_vocab(r.e);
        r.slot_logits = tkv_xmalloc((size_t)r.P * (size_t)r.V * sizeof(float));
        r.slots = tkv_xcalloc((size_t)r.P, sizeof *r.slots);
        r.piece = tkv_xmalloc(TOK_STREAM_OUT(tok_max_piece(r.vocab)) + 16);
        if (o->out_path) {
            r.out = fopen(o->out_path, "ab");
            if (!r.out) { tkv_errf(err, errlen, "%s: cannot open for appending: %s", o->out_path, strerror(errno)); goto out; }
            setvbuf(r.out, NULL, _IOFBF, 1 << 20);
        }
        r.t_begin = tkv_now_s();
        int lrc = decode_loop(&r, err, errlen);
        s->run_seconds = tkv_now_s() - r.t_begin;
        s->run_problems = r.run_done;
        s->run_tokens = r.run_tokens;
        progress(&r, 1);
        if (lrc) goto out;
    }
    char **ids = tkv_xmalloc((r.total + 1) * sizeof(char *));
    for (size_t i = lo; i < hi; i++) ids[i - lo] = xstrdup(set.items[i].id);
    harness_results_sort(&res);
    harness_summarize(&res, ids, r.total, s);
    if (sel_ids) *sel_ids = ids, *n_sel = r.total;
    else harness_ids_free(ids, r.total);
    rc = 0;
out:
    if (r.out && fclose(r.out) && !rc) rc = tkv_errf(err, errlen, "%s: cannot write: %s", o->out_path, strerror(errno));
    if (r.slots)
        for (int k = 0; k < r.P; k++) free(r.slots[k].text);
    free(r.slots);
    free(r.slot_logits);
    free(r.piece);
    for (size_t p = 0; r.ids && p < r.n_pending; p++) free(r.ids[p]);
    free(r.ids);
    free(r.n_ids);
    free(r.pending);
    tkv_engine_close(r.e);
    tok_free(r.vocab);
    harness_results_free(&res);
    eval_set_free(&set);
    return rc;
}
