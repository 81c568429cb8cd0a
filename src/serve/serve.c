/* serve.c — assembles the server (see serve.h). Order matters on the way down: the worker stops
 * first (every job ends, so no HTTP thread stays blocked on one), then the listener (its threads
 * finish; submissions fail meanwhile), then the worker's memory and the session. */
#include "serve/serve.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "serve/api.h"
#include "serve/park_dir.h"
#include "serve/park_redis.h"
#include "serve/worker.h"

struct serve {
    tkv_session *s;
    tkv_chat *chat;
    tkv_chat *chat_think_off; /* the same format with thinking off; NULL: it has no switch */
    serve_worker *w;
    serve_http *http;
    serve_api api;
    sched_park park; /* the park directory's store (ctx NULL: none); outlives the worker */
};

void serve_opts_default(serve_opts *o) {
    memset(o, 0, sizeof *o);
    tkv_session_params_default(&o->sp);
    o->parallel = 8;
    o->max_queue = 64;
    o->prefix_entries = 4;
    o->conv_entries = 16;
    o->conv_bytes = (int64_t)1 << 30;
    o->park_bytes = (int64_t)8 << 30;
    o->http.host = "127.0.0.1";
    o->http.port = 8080;
    o->http.max_connections = 64;
    o->http.max_open = 512;
    o->http.max_body = 1 << 20;
    o->http.timeout_s = 30;
    serve_limits_default(&o->lim);
}

static void teardown(serve *v) {
    serve_worker_stop(v->w);
    serve_http_stop(v->http);
    serve_worker_free(v->w); /* kept conversations parked there, with a park store */
    if (v->park.ctx && v->park.shared) park_redis_close(&v->park);
    else if (v->park.ctx) park_dir_close(&v->park);
    tkv_session_close(v->s);
    tkv_chat_close(v->chat);
    tkv_chat_close(v->chat_think_off);
    serve_metrics_free(&v->api.metrics);
    free(v);
}

int serve_start(const serve_opts *o, serve **out, char *err, size_t errlen) {
    *out = NULL;
    if (o->parallel < 1 || o->parallel > 1024 || o->max_queue < 0 || o->prefix_entries < 0 || o->prefix_entries > 64 ||
        o->conv_entries < 0 || o->conv_entries > 1024 || o->conv_bytes < 0)
        return tkv_errf(err, errlen, "serve: --parallel %d (1..1024), --max-queue %d, --prefix-cache %d (0..64), "
                        "--conversations %d (0..1024), --conv-host-budget %lld", o->parallel, o->max_queue, o->prefix_entries,
                        o->conv_entries, (long long)o->conv_bytes);
    serve *v = tkv_xcalloc(1, sizeof *v);
    serve_metrics_init(&v->api.metrics);
    const char *tmpl = o->template_name;
    if (tkv_chat_open(o->model, tmpl, 0, &v->chat, err, errlen)) {
        if (tmpl || tkv_chat_open(o->model, tmpl = "chatml", 0, &v->chat, err, errlen)) { teardown(v); return -1; }
        if (o->log) fprintf(o->log, "[serve] the model names no chat template: chatml (--template to choose)\n");
    }
    if (tkv_chat_think_switch(v->chat) &&
        tkv_chat_open(o->model, tmpl, TKV_CHAT_THINK_OFF, &v->chat_think_off, err, errlen)) { teardown(v); return -1; }
    int prefix = tkv_kv_shares_prefix(&o->sp.kv) ? o->prefix_entries : 0;
    int conv = tkv_policy_shares_prefix(o->sp.kv.policy) ? o->conv_entries : 0;
    if ((o->park_dir || o->park_store) && !conv) {
        tkv_errf(err, errlen, "serve: %s parks kept conversations: it needs --conversations > 0 and a policy that "
                 "keeps them (full, hierarchy, evict, quant; not %s)", o->park_dir ? "--park-dir" : "--park-store",
                 tkv_policy_name(o->sp.kv.policy));
        teardown(v);
        return -1;
    }
    const char *mk_open, *mk_close;
    int mk_by;
    tkv_chat_reasoning(v->chat, &mk_open, &mk_close, &mk_by);
    if (o->keep_thinking && (!mk_close || !conv)) {
        tkv_errf(err, errlen, "serve: --history-thinking keep keeps the reasoning of kept conversations: %s",
                 !mk_close ? "this chat format has no reasoning (deepseek-r1 and qwen3 have)" : "none are kept here");
        teardown(v);
        return -1;
    }
    if (o->park_dir && o->park_store) {
        tkv_errf(err, errlen, "serve: --park-dir and --park-store: choose one store");
        teardown(v);
        return -1;
    }
    tkv_session_params sp = o->sp;
    sp.max_seqs = o->parallel + prefix + conv;
    if (conv && (o->park_dir || o->park_store)) {
        if (o->park_dir ? park_dir_open(o->park_dir, o->park_bytes, o->log, &v->park, err, errlen)
                        : park_redis_open(o->park_store, o->log, &v->park, err, errlen)) {
            teardown(v);
            return -1;
        }
        sp.max_seqs++; /* a parked record is read into a sequence of its own, then taken over */
    }
    if (tkv_session_open(o->model, &sp, &v->s, err, errlen)) { teardown(v); return -1; }
    int ctx = sp.max_ctx;
    serve_worker_opts wo = {.parallel = o->parallel, .max_queue = o->max_queue, .prefix_entries = prefix,
                            .conv_entries = conv, .conv_bytes = o->conv_bytes, .park = v->park.ctx ? &v->park : NULL,
                            .keep_thinking = o->keep_thinking,
                            .ctx = ctx,
                            .default_max_tokens = o->default_max_tokens > 0 ? o->default_max_tokens : ctx,
                            .policy = o->sp.kv.policy,
                            .chat_think_off = v->chat_think_off};
    if (serve_worker_start(o->model, v->s, v->chat, &wo, &v->w, err, errlen)) { teardown(v); return -1; }
    serve_api *a = &v->api;
    a->model = o->model_name ? o->model_name : "tierkv";
    a->created = (long long)time(NULL);
    a->lim = o->lim;
    if (a->lim.max_tokens > ctx - 1) a->lim.max_tokens = ctx - 1;
    a->lim.max_body = o->http.max_body;
    a->lim.call_key = tkv_chat_call_key(v->chat); /* the format's own: a forced call writes it */
    a->lim.max_calls = tkv_chat_max_calls(v->chat);
    a->w = v->w;
    a->timeout_s = o->http.timeout_s;
    a->id_salt = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull ^ (uint64_t)(uintptr_t)v;
    if (serve_http_start(&o->http, serve_api_handle, serve_api_count, a, &v->http, err, errlen)) { teardown(v); return -1; }
    *out = v;
    return 0;
}

int serve_port(const serve *v) { return serve_http_port(v->http); }

void serve_stop(serve *v) {
    if (v) teardown(v);
}
