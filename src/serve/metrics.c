/* metrics.c — counters and the Prometheus text page (see metrics.h). Every family is written
 * with its HELP and TYPE lines before its samples; label values are fixed words, so nothing
 * needs escaping. */
#include "serve/metrics.h"

#include <string.h>

#include "base/clock.h"
#include "base/buf.h"

static const char *ep_name[SERVE_EP_COUNT] = {"chat", "completions", "models", "health", "metrics", "tokenize",
                                              "detokenize", "other"};

void serve_metrics_init(serve_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->t_start = tkv_now_s();
}

void serve_metrics_free(serve_metrics *m) { pthread_mutex_destroy(&m->mu); }

void serve_metrics_count(serve_metrics *m, int endpoint, int status) {
    if (endpoint < 0 || endpoint >= SERVE_EP_COUNT) endpoint = SERVE_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_status && m->by_status[i].status != status) i++;
    if (i == m->n_status && m->n_status < SERVE_MAX_STATUS) {
        m->by_status[i].status = status;
        memset(m->by_status[i].n, 0, sizeof m->by_status[i].n);
        m->n_status++;
    }
    if (i < m->n_status) m->by_status[i].n[endpoint]++;
    if (status == 503) m->rejected_full++;
    pthread_mutex_unlock(&m->mu);
}

static void family(tkv_buf *b, const char *name, const char *type, const char *help) {
    tkv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(tkv_buf *b, const char *name, const char *type, const char *help, double v) {
    family(b, name, type, help);
    tkv_buf_printf(b, "%s %.17g\n", name, v);
}

static const char *tier_name[4] = {"t0", "t1", "t2", "t3"};

static void kv_part(tkv_buf *b, const serve_snapshot *s) {
    const tkv_stats *k = &s->kv;
    family(b, "tierkv_kv_tokens", "gauge", "KV tokens per tier (t0 fast, t1 host exact, t2 host int8, t3 evicted), all live sequences");
    for (int t = 0; t < 4; t++) tkv_buf_printf(b, "tierkv_kv_tokens{tier=\"%s\"} %lld\n", tier_name[t], (long long)k->tokens[t]);
    family(b, "tierkv_kv_bytes", "gauge", "KV bytes per tier, all live sequences (shared prefix rows counted once)");
    for (int t = 0; t < 4; t++) tkv_buf_printf(b, "tierkv_kv_bytes{tier=\"%s\"} %lld\n", tier_name[t], (long long)k->bytes[t]);
    one(b, "tierkv_kv_t0_budget_bytes", "gauge", "T0 budget in force for all live sequences", (double)k->t0_budget_bytes);
    one(b, "tierkv_kv_t0_peak_bytes", "gauge", "the most T0 bytes held at once by all sequences together", (double)k->peak_t0_bytes);
    one(b, "tierkv_kv_t0_token_bytes", "gauge", "bytes one token takes in T0", (double)s->token_bytes_t0);
    family(b, "tierkv_kv_moved_bytes_total", "counter", "bytes moved between tiers, by direction");
    tkv_buf_printf(b, "tierkv_kv_moved_bytes_total{direction=\"down\"} %lld\n", (long long)k->bytes_moved_down);
    tkv_buf_printf(b, "tierkv_kv_moved_bytes_total{direction=\"up\"} %lld\n", (long long)k->bytes_moved_up);
    tkv_buf_printf(b, "tierkv_kv_moved_bytes_total{direction=\"host\"} %lld\n", (long long)k->bytes_moved_host);
    tkv_buf_printf(b, "tierkv_kv_moved_bytes_total{direction=\"staged\"} %lld\n", (long long)k->bytes_staged);
    one(b, "tierkv_kv_evicted_tokens_total", "counter", "tokens evicted (T3)", (double)k->tokens_evicted);
    one(b, "tierkv_kv_retiers_total", "counter", "re-tierings run", (double)k->retiers);
    one(b, "tierkv_kv_budget_raised_total", "counter", "times a T0 budget was raised to hold protected tokens", (double)k->budget_raised);
    one(b, "tierkv_kv_shared_tokens", "gauge", "prefix tokens held once for several sequences", (double)k->shared_tokens);
    one(b, "tierkv_kv_shared_bytes_saved", "gauge", "bytes the shared prefix rows would take if every sequence held its own",
        (double)k->shared_bytes_saved);
    one(b, "tierkv_sequences_live", "gauge", "live sequences of the session (requests, prefix cache entries, kept conversations)", k->live_seqs);
}

char *serve_metrics_render(serve_metrics *m, const serve_snapshot *s) {
    tkv_buf b = {0};
    pthread_mutex_lock(&m->mu);
    family(&b, "tierkv_requests_total", "counter", "HTTP responses by endpoint and status code");
    for (int i = 0; i < m->n_status; i++)
        for (int e = 0; e < SERVE_EP_COUNT; e++)
            if (m->by_status[i].n[e])
                tkv_buf_printf(&b, "tierkv_requests_total{endpoint=\"%s\",code=\"%d\"} %lld\n", ep_name[e], m->by_status[i].status,
                                 (long long)m->by_status[i].n[e]);
    double up = tkv_now_s() - m->t_start;
    int64_t rejected = m->rejected_full;
    pthread_mutex_unlock(&m->mu);
    one(&b, "tierkv_requests_rejected_total", "counter", "requests refused at once with 503 (queue full)", (double)rejected);
    one(&b, "tierkv_uptime_seconds", "gauge", "seconds since the server started", up);
    const sched_info *si = &s->si;
    one(&b, "tierkv_prompt_tokens_total", "counter", "prompt tokens of admitted requests (prefilled or shared)", (double)si->prompt_tokens);
    one(&b, "tierkv_prompt_tokens_cached_total", "counter", "prompt tokens reused (the prefix cache, kept conversations) instead of prefilled",
        (double)si->cached_tokens);
    one(&b, "tierkv_generation_tokens_total", "counter", "tokens generated", (double)si->gen_tokens);
    one(&b, "tierkv_generation_tokens_per_second", "gauge", "tokens generated per second, last few seconds", s->tokens_per_s);
    one(&b, "tierkv_decode_steps_total", "counter", "batched decode steps", (double)si->steps);
    family(&b, "tierkv_time_to_first_token_seconds", "summary", "from arrival to the first generated token");
    tkv_buf_printf(&b, "tierkv_time_to_first_token_seconds_sum %.17g\ntierkv_time_to_first_token_seconds_count %lld\n", s->ttft_sum,
                     (long long)s->ttft_count);
    one(&b, "tierkv_queue_length", "gauge", "requests waiting for a sequence", s->queued);
    one(&b, "tierkv_requests_running", "gauge", "requests decoding", s->running);
    one(&b, "tierkv_parallel", "gauge", "requests decoding together at most (--parallel)", s->parallel);
    one(&b, "tierkv_max_queue", "gauge", "requests waiting at most (--max-queue)", s->max_queue);
    family(&b, "tierkv_jobs_ended_total", "counter", "requests that ended without an answer, by reason");
    tkv_buf_printf(&b, "tierkv_jobs_ended_total{reason=\"refused\"} %lld\n", (long long)s->refused);
    tkv_buf_printf(&b, "tierkv_jobs_ended_total{reason=\"failed\"} %lld\n", (long long)s->failed);
    tkv_buf_printf(&b, "tierkv_jobs_ended_total{reason=\"cancelled\"} %lld\n", (long long)s->cancelled);
    one(&b, "tierkv_prefix_cache_entries", "gauge", "prompt prefixes kept alive for sharing", si->prefix_entries);
    one(&b, "tierkv_prefix_cache_tokens", "gauge", "tokens those entries hold", (double)si->prefix_tokens);
    one(&b, "tierkv_prefix_cache_bytes", "gauge", "T0 bytes those tokens take (at most; rows shared with live requests count once)",
        (double)si->prefix_tokens * (double)s->token_bytes_t0);
    one(&b, "tierkv_prefix_cache_hits_total", "counter", "requests that shared a cached prefix", (double)si->prefix_hits);
    one(&b, "tierkv_prefix_cache_misses_total", "counter", "requests that found none", (double)si->prefix_misses);
    one(&b, "tierkv_prefix_cache_evictions_total", "counter", "entries closed to make room for a request", (double)si->prefix_evictions);
    one(&b, "tierkv_conversations_kept", "gauge", "finished requests kept, idle, for a next turn", si->conv_entries);
    family(&b, "tierkv_conversations_tokens", "gauge", "tokens those conversations hold, by tier");
    for (int t = 0; t < 4; t++) tkv_buf_printf(&b, "tierkv_conversations_tokens{tier=\"T%d\"} %lld\n", t, (long long)si->conv_tokens[t]);
    one(&b, "tierkv_conversations_bytes", "gauge", "bytes their rows take (T0, T1 and T2)", (double)si->conv_bytes);
    one(&b, "tierkv_conversations_hits_total", "counter", "requests that took a kept conversation over", (double)si->conv_hits);
    one(&b, "tierkv_conversations_misses_total", "counter", "requests that found none to continue", (double)si->conv_misses);
    one(&b, "tierkv_conversations_reused_tokens_total", "counter", "tokens taken over instead of prefilled", (double)si->conv_reused);
    one(&b, "tierkv_conversations_kept_total", "counter", "conversations kept when their request ended", (double)si->conv_kept);
    one(&b, "tierkv_conversations_dropped_total", "counter", "kept conversations closed by their bounds or for room",
        (double)si->conv_drops);
    one(&b, "tierkv_conversations_compressed_total", "counter", "kept conversations whose T1 rows went to T2 (--conv-host-budget)",
        (double)si->conv_compressed);
    one(&b, "tierkv_park_records", "gauge", "kept conversations parked in the store (--park-dir)", si->park_entries);
    one(&b, "tierkv_park_bytes", "gauge", "bytes of those records", (double)si->park_bytes);
    one(&b, "tierkv_park_parks_total", "counter", "conversations written to the store", (double)si->parks);
    one(&b, "tierkv_park_restores_total", "counter", "conversations read back for a request", (double)si->restores);
    one(&b, "tierkv_park_restore_seconds_total", "counter", "seconds those reads took", si->restore_seconds);
    one(&b, "tierkv_park_restore_failures_total", "counter", "records that could not be read back (recomputed)",
        (double)si->restore_failures);
    one(&b, "tierkv_park_dropped_total", "counter", "records not written, or deleted beyond --park-budget",
        (double)si->park_drops);
    if (s->kv_ok) kv_part(&b, s);
    char *out = b.p;
    return out ? out : strdup("");
}
