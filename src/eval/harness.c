/* harness.c — the evaluation's run (see harness.h): a task's pending problems become jobs of the
 * continuous-batching scheduler (src/sched, the one `tierkv serve` runs on), decoded greedily
 * together; each finished problem is graded and its line appended at once; progress. The results
 * files and summaries are harness_results.c's.
 *
 * Invariants: a problem's line is appended (and flushed) the moment it ends, so a kill loses at most
 * the problems in flight. Per-problem KV statistics are those of the problem's own sequence at its
 * end (sched_end.kv). Prompts that begin with the same tokens (the system turn) share those rows
 * through the scheduler's prefix cache, for the policies that allow it. */
#include "eval/harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/path.h"
#include "base/version.h"
#include "eval/harness_impl.h"
#include "base/json.h"
#include "sched/sched.h"

struct job {
    struct run *r;
    size_t p;          /* index into pending */
    tkv_sampler *smp;  /* sampled chains: the chain's own sampler (seed + sample); NULL: greedy */
    tkv_buf text;      /* output so far */
    tkv_detok ts;
};

struct run {
    const struct harness_opts *o;
    const struct eval_set *set;
    size_t *pending;   /* item indices still to run */
    int *pend_sample;  /* [n_pending] the chain of each */
    int32_t **ids;     /* [n_pending] prompt ids */
    int *n_ids;
    size_t n_pending;
    tkv_model *m;
    tkv_session *e;
    struct job *jobs;  /* [n_pending] */
    char *piece;
    FILE *out;
    struct harness_results *res;
    const char *model_name;
    char kernels[48]; /* "cpu avx512": which kernels wrote the lines (their float sums differ in order) */
    int rc;            /* the first error of a job (its message in err) */
    char err[512];
    /* progress */
    size_t total, done, correct; /* over the selection */
    long run_done, run_tokens;
    double t_begin;
};

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(tkv_xmalloc(n), s, n);
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

/* ---- the scheduler's callbacks ---- */

static int on_token(void *user, int32_t tok, const sched_logprob *lp) {
    (void)lp;
    struct job *j = user;
    tkv_buf_add(&j->text, j->r->piece, tkv_detok_token(&j->ts, j->r->m, tok, 0, j->r->piece));
    return 0;
}

/* Grades the problem and appends its line (the line's record joins the summaries). */
static void on_end(void *user, const sched_end *e) {
    struct job *jb = user;
    struct run *r = jb->r;
    const struct harness_opts *o = r->o;
    const struct eval_item *it = &r->set->items[r->pending[jb->p]];
    r->run_tokens += e->gen_tokens;
    tkv_sampler_close(jb->smp);
    jb->smp = NULL;
    if (e->why != SCHED_EOG && e->why != SCHED_LENGTH) { /* refused or failed: the run stops with it */
        if (!r->rc) {
            r->rc = -1;
            tkv_errf(r->err, sizeof r->err, "problem %s: %s", it->id, e->msg[0] ? e->msg : "cancelled");
        }
        return;
    }
    tkv_buf_add(&jb->text, r->piece, tkv_detok_flush(&jb->ts, r->piece));
    const tkv_stats *st = &e->kv;
    struct eval_verdict v;
    eval_grade(o->task, tkv_buf_str(&jb->text), it->answer, it->n_choices, &v);
    struct json_out j;
    json_out_init(&j);
    json_out_obj_begin(&j);
    json_out_key(&j, "id"), json_out_str(&j, it->id);
    if (o->sampling.temperature > 0) json_out_key(&j, "sample"), json_out_int(&j, r->pend_sample[jb->p]);
    json_out_key(&j, "task"), json_out_str(&j, o->task_label);
    json_out_key(&j, "model"), json_out_str(&j, r->model_name);
    json_out_key(&j, "prompt_tokens"), json_out_int(&j, r->n_ids[jb->p]);
    json_out_key(&j, "output"), json_out_strn(&j, tkv_buf_str(&jb->text), jb->text.n);
    json_out_key(&j, "pred"), json_out_str(&j, v.pred);
    json_out_key(&j, "gold"), json_out_str(&j, v.gold);
    json_out_key(&j, "correct"), json_out_bool(&j, v.correct);
    json_out_key(&j, "strict"), v.strict < 0 ? json_out_null(&j) : json_out_bool(&j, v.strict);
    json_out_key(&j, "gen_tokens"), json_out_int(&j, e->gen_tokens);
    json_out_key(&j, "finish"), json_out_str(&j, e->why == SCHED_LENGTH ? "length" : "eog");
    json_out_key(&j, "seconds"), json_out_num(&j, e->t_end - (e->t_admit > 0 ? e->t_admit : e->t_submit));
    json_out_key(&j, "kv");
    json_out_obj_begin(&j);
    json_out_key(&j, "tokens");
    json_out_arr_begin(&j);
    for (int t = 0; t < 4; t++) json_out_int(&j, st->tokens[t]);
    json_out_arr_end(&j);
    json_out_key(&j, "peak_t0_bytes"), json_out_int(&j, st->peak_t0_bytes);
    json_out_key(&j, "t0_budget_bytes"), json_out_int(&j, st->t0_budget_bytes);
    json_out_key(&j, "bytes_moved_down"), json_out_int(&j, st->bytes_moved_down);
    json_out_key(&j, "bytes_moved_up"), json_out_int(&j, st->bytes_moved_up);
    json_out_key(&j, "bytes_moved_host"), json_out_int(&j, st->bytes_moved_host);
    json_out_key(&j, "bytes_staged"), json_out_int(&j, st->bytes_staged);
    json_out_key(&j, "tokens_evicted"), json_out_int(&j, st->tokens_evicted);
    json_out_key(&j, "retiers"), json_out_int(&j, st->retiers);
    json_out_key(&j, "evicted_equiv"), json_out_num(&j, st->evicted_equiv);
    json_out_key(&j, "t0_share"), json_out_num(&j, st->t0_share_mean);
    json_out_obj_end(&j);
    harness_out_config(&j, o);
    json_out_key(&j, "build"), json_out_str(&j, tkv_build_commit());
    json_out_key(&j, "kernels"), json_out_str(&j, r->kernels);
    harness_sign(&j);
    /* one fwrite + fflush: with the 1 MiB buffer a line normally goes out in one write() */
    if (r->out && (fwrite(j.b.p, 1, j.b.n, r->out) != j.b.n || fputc('\n', r->out) == EOF || fflush(r->out)) && !r->rc) {
        r->rc = -1;
        tkv_errf(r->err, sizeof r->err, "%s: cannot write: %s", o->out_path, strerror(errno));
    }
    harness_push_line(r->res, j.b.p, j.b.n); /* the record the summaries read, from the very line written */
    json_out_free(&j);
    r->done++;
    r->correct += (size_t)v.correct;
    r->run_done++;
    eval_verdict_free(&v);
    tkv_buf_free(&jb->text);
    progress(r, 0);
}

/* ---- the run ---- */

/* Tokenises every pending prompt; the context must hold the longest one plus max_tokens. */
static int encode_prompts(struct run *r, int *max_prompt, char *err, size_t errlen) {
    const struct harness_opts *o = r->o;
    tkv_chat *ct;
    if (tkv_chat_open(r->m, o->template_name, o->no_system ? TKV_CHAT_NO_DEFAULT_SYSTEM : 0, &ct, err, errlen)) return -1;
    *max_prompt = 0;
    int rc = 0;
    for (size_t p = 0; p < r->n_pending && !rc; p++) {
        const struct eval_item *it = &r->set->items[r->pending[p]];
        char *user = eval_build_prompt(o->task, it);
        tkv_chat_msg msgs[2];
        int nm = 0;
        if (o->system && !o->no_system) msgs[nm++] = (tkv_chat_msg){.role = "system", .content = o->system};
        msgs[nm++] = (tkv_chat_msg){.role = "user", .content = user};
        char perr[256];
        r->n_ids[p] = tkv_chat_encode(ct, msgs, nm, 1, &r->ids[p], perr, sizeof perr);
        free(user);
        if (r->n_ids[p] < 1) rc = tkv_errf(err, errlen, "problem %s: the prompt is empty after tokenization", it->id);
        else if (r->n_ids[p] > *max_prompt) *max_prompt = r->n_ids[p];
    }
    tkv_chat_close(ct);
    return rc;
}

/* Every pending problem through the scheduler, `parallel` at once. */
static int decode_all(struct run *r, int parallel, int prefix_entries, char *err, size_t errlen) {
    sched_params sp;
    sched_params_default(&sp);
    sp.max_live = parallel;
    sp.prefix_entries = prefix_entries;
    sp.end_stats = 1;
    sp.policy = r->o->sp.kv.policy;
    sched_callbacks cb = {.on_token = on_token, .on_end = on_end};
    sched *sc;
    if (sched_init(r->m, r->e, &sp, &cb, &sc, err, errlen)) return -1;
    r->jobs = tkv_xcalloc(r->n_pending, sizeof *r->jobs);
    for (size_t p = 0; p < r->n_pending; p++) {
        struct job *j = &r->jobs[p];
        j->r = r;
        j->p = p;
        tkv_detok_init(&j->ts);
        if (r->o->sampling.temperature > 0) {
            tkv_sampling so = r->o->sampling;
            so.seed += (uint64_t)r->pend_sample[p]; /* chain k: seed + k, as the server's n choices */
            tkv_model_info mi;
            tkv_model_get_info(r->m, &mi);
            if (tkv_sampler_open(&so, mi.n_vocab, &j->smp, err, errlen)) {
                sched_free(sc);
                return -1;
            }
        }
        sched_job sj = {.prompt = r->ids[p], .n_prompt = r->n_ids[p], .max_tokens = r->o->max_tokens, .sampler = j->smp,
                        .user = j};
        sched_submit(sc, &sj);
    }
    while (!r->rc && sched_step(sc) > 0) {}
    sched_info info;
    sched_info_get(sc, &info);
    if (r->o->progress && info.cached_tokens)
        fprintf(r->o->progress, "[eval] %lld prompt tokens are shared from a common prefix instead of prefilled\n",
                (long long)info.cached_tokens);
    sched_free(sc);
    if (r->rc) return tkv_errf(err, errlen, "%s", r->err);
    return 0;
}

int harness_run(const struct harness_opts *o, struct harness_summary *s, char ***sel_ids, size_t *n_sel, char *err,
                size_t errlen) {
    if (o->parallel < 1 || o->max_tokens < 1 || o->offset < 0 || o->samples < 0 || o->samples > HARNESS_MAX_SAMPLES)
        return tkv_errf(err, errlen, "harness: bad options");
    const int K = o->samples > 1 ? o->samples : 1;
    if (K > 1 && o->sampling.temperature <= 0)
        return tkv_errf(err, errlen, "%d samples per problem need a temperature above 0 (greedy chains are identical)", K);
    struct eval_set set;
    if (eval_load(o->task, o->data_path, &set, err, errlen)) return -1;
    size_t lo = (size_t)o->offset < set.n ? (size_t)o->offset : set.n;
    size_t hi = o->n < 0 || (size_t)o->n > set.n - lo ? set.n : lo + (size_t)o->n;
    struct harness_results res = {0};
    struct run r = {0};
    memset(s, 0, sizeof *s);
    int rc = -1;
    /* the selected items, in file order: [lo, hi), or hi - lo of them spread over [lo, set.n) */
    size_t *sel = tkv_xmalloc((hi - lo + 1) * sizeof(size_t));
    for (size_t k = 0; k < hi - lo; k++) sel[k] = o->spread ? lo + k * (set.n - lo) / (hi - lo) : lo + k;
    if (o->out_path) {
        if (harness_repair_tail(o->out_path, o->progress ? o->progress : stderr, err, errlen)) goto out;
        if (harness_load(o->out_path, &res, o->progress, err, errlen)) goto out;
    }
    r.o = o;
    r.set = &set;
    r.res = &res;
    r.total = (hi - lo) * (size_t)K;
    r.model_name = tkv_file_name(o->model_path);
    r.pending = tkv_xmalloc((r.total + 1) * sizeof(size_t));
    r.pend_sample = tkv_xmalloc((r.total + 1) * sizeof(int));
    harness_results_sort(&res);
    char extra[96], samp[96];
    harness_kv_extra_key(&o->sp.kv, extra, sizeof extra);
    harness_sampling_key(&o->sampling, samp, sizeof samp);
    /* chains are run problem by problem: the K chains of a problem decode side by side */
    for (size_t q = 0; q < hi - lo; q++)
        for (int k = 0; k < K; k++) {
            size_t i = sel[q];
            const struct harness_rec *x = harness_find_sample(&res, set.items[i].id, k);
            if (x && (strcmp(x->policy, tkv_policy_name(o->sp.kv.policy)) || x->max_tokens != o->max_tokens ||
                      x->t0_ratio != o->sp.kv.t0_ratio || x->t2_ratio != o->sp.kv.t2_ratio ||
                      x->evict_ratio != o->sp.kv.evict_ratio || x->kv_f16 != o->sp.kv.f16 || strcmp(x->kv_extra, extra) ||
                      strcmp(x->sampling, samp))) {
                tkv_errf(err, errlen,
                         "%s holds %s from another configuration (policy %s, max_tokens %d, hbm/t2/evict ratios %g/%g/%g, "
                         "kv type %s, t2 codec/t0 tokens/protect/window/sinks/delta %s, sampling %s); give another --out "
                         "to keep both",
                         o->out_path, x->id, x->policy, x->max_tokens, x->t0_ratio, x->t2_ratio, x->evict_ratio,
                         x->kv_f16 ? "f16" : "f32", x->kv_extra, x->sampling);
                goto out;
            }
            if (x) r.done++, r.correct += (size_t)x->correct;
            else r.pending[r.n_pending] = i, r.pend_sample[r.n_pending++] = k;
        }
    if (r.n_pending) {
        r.ids = tkv_xcalloc(r.n_pending, sizeof *r.ids);
        r.n_ids = tkv_xcalloc(r.n_pending, sizeof *r.n_ids);
        int max_prompt = 0;
        if (tkv_model_open(o->model_path, &o->mp, &r.m, err, errlen)) goto out;
        tkv_model_info mi;
        tkv_model_get_info(r.m, &mi);
        snprintf(r.kernels, sizeof r.kernels, "%s %s", mi.backend, mi.kernels);
        if (encode_prompts(&r, &max_prompt, err, errlen)) goto out;
        tkv_session_params sp = o->sp;
        int P = (size_t)o->parallel < r.n_pending ? o->parallel : (int)r.n_pending;
        if (sp.max_ctx && sp.max_ctx < max_prompt + o->max_tokens) {
            tkv_errf(err, errlen, "the longest prompt (%d tokens) and --max-tokens %d need %d positions, more than --ctx %d",
                     max_prompt, o->max_tokens, max_prompt + o->max_tokens, sp.max_ctx);
            goto out;
        }
        if (!sp.max_ctx) sp.max_ctx = max_prompt + o->max_tokens;
        /* a prompt prefix the problems share (the system turn) is prefilled once and shared by each:
         * the same K/V as prefilling it in place (tested); one prefix sequence beside the problems */
        int prefix = o->no_prefix_cache || r.n_pending < 2 || !tkv_kv_shares_prefix(&sp.kv) ? 0 : 1;
        /* K chains of a problem share its whole prompt: an entry per problem in flight besides the
         * common header's */
        if (prefix && K > 1) prefix += (P + K - 1) / K < 15 ? (P + K - 1) / K : 15;
        sp.max_seqs = P + prefix;
        if (o->progress)
            fprintf(o->progress, "[eval] %s: %zu problems, %zu already in the results file, %zu to run, %d at once\n",
                    o->task_label, r.total, r.done, r.n_pending, P);
        if (tkv_session_open(r.m, &sp, &r.e, err, errlen)) goto out;
        r.piece = tkv_xmalloc(tkv_detok_out_size(r.m));
        if (o->out_path) {
            r.out = fopen(o->out_path, "ab");
            if (!r.out) { tkv_errf(err, errlen, "%s: cannot open for appending: %s", o->out_path, strerror(errno)); goto out; }
            setvbuf(r.out, NULL, _IOFBF, 1 << 20);
        }
        r.t_begin = tkv_now_s();
        int lrc = decode_all(&r, P, prefix, err, errlen);
        s->run_seconds = tkv_now_s() - r.t_begin;
        s->run_problems = r.run_done;
        s->run_tokens = r.run_tokens;
        progress(&r, 1);
        if (lrc) goto out;
    }
    size_t n_items = hi - lo;
    char **ids = tkv_xmalloc((n_items + 1) * sizeof(char *));
    for (size_t k = 0; k < n_items; k++) ids[k] = xstrdup(set.items[sel[k]].id);
    harness_results_sort(&res);
    harness_summarize(&res, ids, n_items, K, s);
    if (sel_ids) *sel_ids = ids, *n_sel = n_items;
    else harness_ids_free(ids, n_items);
    rc = 0;
out:
    if (r.out && fclose(r.out) && !rc) rc = tkv_errf(err, errlen, "%s: cannot write: %s", o->out_path, strerror(errno));
    for (size_t p = 0; r.jobs && p < r.n_pending; p++) tkv_buf_free(&r.jobs[p].text), tkv_sampler_close(r.jobs[p].smp);
    free(r.jobs);
    free(r.piece);
    for (size_t p = 0; r.ids && p < r.n_pending; p++) free(r.ids[p]);
    free(r.ids);
    free(r.n_ids);
    free(r.pending);
    free(r.pend_sample);
    free(sel);
    tkv_session_close(r.e);
    tkv_model_close(r.m);
    harness_results_free(&res);
    eval_set_free(&set);
    return rc;
}
