/* cmd_serve.c — `tierkv serve`: an OpenAI-compatible HTTP server (src/serve/) over one model. Reads
 * the flags, opens the model, starts the server, and waits for SIGINT or SIGTERM (blocked in every
 * thread and taken here with sigwait, so no handler runs inside the library), then stops it.
 * One line on stderr says where it listens ("listening on http://HOST:PORT"), which scripts read
 * for the port when they ask for --port 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"
#include "cmds.h"
#include "common.h"
#include "kv_flags.h"
#include "serve/serve.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv serve [-m MODEL.gguf] [options]\n"
            "  OpenAI-compatible: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health, /metrics\n"
            "      --host ADDR          address to listen on (default 127.0.0.1: this machine only)\n"
            "      --port N             port (default 8080; 0: any free one, printed at start)\n"
            "      --parallel N         requests decoding together (default 8)\n"
            "      --max-queue N        requests waiting beyond those; one more gets 503 at once (default 64)\n"
            "      --api-key KEY        require Authorization: Bearer KEY (all routes but /health)\n"
            "      --template NAME      chat format: chatml, deepseek-r1, llama3, llama3.1, qwen3 (default: from the file)\n"
            "      --name NAME          the model's name in responses (default: the file name)\n"
            "      --prefix-cache N     prompt prefixes kept for sharing between requests (default 4; 0: off)\n"
            "      --conversations N    finished requests kept, idle, for a next turn that continues them\n"
            "                           (prompt and answer reused, nothing recomputed; default 16; 0: off)\n"
            "      --conv-host-budget SIZE  their K/V rows at most, every tier (default 1GiB; 0: no bound)\n"
            "      --park-dir DIR       conversations beyond those bounds, and all of them at exit, parked in\n"
            "                           DIR (created 0700) and restored by a request that continues one,\n"
            "                           also by a later server on the same DIR (default: none, dropped)\n"
            "      --park-budget SIZE   records kept in DIR at most, least recently used deleted (default 8GiB)\n"
            "      --history-thinking keep|strip  a continued conversation keeps its earlier turns' reasoning\n"
            "                           (ranked first out of T0 and first evicted) or not (default strip: the\n"
            "                           template's rule, the client's transcript as sent)\n"
            "      --park-store URL     or a store shared by replicas, redis://HOST:PORT[/DB]: every conversation\n"
            "                           written as it ends; any replica continues it (bounded by the server's\n"
            "                           own maxmemory policy)\n"
            "      --max-tokens N       tokens a request generates when it gives no max_tokens (default: what\n"
            "                           the context leaves)\n"
            "      --max-body SIZE      largest request body (default 1MiB)\n"
            "      --max-connections N  requests at a time, being read or answered (default 64; one more: 429)\n"
            "      --max-open N         open connections, idle or slow ones included (default 512, or twice\n"
            "                           --max-connections when that is more)\n"
            "      --timeout S          seconds a whole request may take to arrive from its connection's start,\n"
            "                           or a client to stall (default 30)\n"
            "  --ctx N is the positions of one request (prompt + generation, default 4096 or the model's\n"
            "  context_length if smaller); --hbm-budget is the T0\n"
            "  budget of all requests together.\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

static int want_int(const char *flag, const char *v, long lo, long hi, int *out) {
    long x;
    if (parse_int(v, lo, hi, &x)) {
        fprintf(stderr, "tierkv serve: %s wants an integer in %ld..%ld, got '%s'\n", flag, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A byte size of up to 1 PiB (0: no bound). */
static int want_size(const char *flag, const char *v, int64_t *out) {
    uint64_t b;
    if (kv_flags_parse_size(v, &b) || b > (1ull << 50)) {
        fprintf(stderr, "tierkv serve: %s wants a size (0: no bound), got '%s'\n", flag, v);
        return -1;
    }
    *out = (int64_t)b;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    serve_opts o;
    serve_opts_default(&o);
    char err[512];
    int open_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&c, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv serve: %s\n", err); return 2; }
        if (r > 0) continue;
        if (i + 1 >= argc) { fprintf(stderr, "tierkv serve: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--host")) o.http.host = v;
        else if (!strcmp(a, "--port")) bad = want_int(a, v, 0, 65535, &o.http.port);
        else if (!strcmp(a, "--parallel")) bad = want_int(a, v, 1, 1024, &o.parallel);
        else if (!strcmp(a, "--max-queue")) bad = want_int(a, v, 0, 1 << 20, &o.max_queue);
        else if (!strcmp(a, "--api-key")) o.http.api_key = v;
        else if (!strcmp(a, "--template")) o.template_name = v;
        else if (!strcmp(a, "--name")) o.model_name = v;
        else if (!strcmp(a, "--prefix-cache")) bad = want_int(a, v, 0, 64, &o.prefix_entries);
        else if (!strcmp(a, "--conversations")) bad = want_int(a, v, 0, 1024, &o.conv_entries);
        else if (!strcmp(a, "--park-dir")) o.park_dir = v;
        else if (!strcmp(a, "--park-store")) o.park_store = v;
        else if (!strcmp(a, "--history-thinking")) {
            if (strcmp(v, "keep") && strcmp(v, "strip")) {
                fprintf(stderr, "tierkv serve: --history-thinking wants keep or strip, got '%s'\n", v);
                return 2;
            }
            o.keep_thinking = !strcmp(v, "keep");
        }
        else if (!strcmp(a, "--park-budget")) bad = want_size(a, v, &o.park_bytes);
        else if (!strcmp(a, "--conv-host-budget")) bad = want_size(a, v, &o.conv_bytes);
        else if (!strcmp(a, "--max-tokens")) bad = want_int(a, v, 1, 1 << 24, &o.default_max_tokens);
        else if (!strcmp(a, "--max-connections")) bad = want_int(a, v, 1, 4096, &o.http.max_connections);
        else if (!strcmp(a, "--max-open")) bad = want_int(a, v, 1, 16384, &o.http.max_open), open_given = 1;
        else if (!strcmp(a, "--timeout")) bad = want_int(a, v, 1, 86400, &o.http.timeout_s);
        else if (!strcmp(a, "--max-body")) {
            uint64_t b;
            if (kv_flags_parse_size(v, &b) || b < 64 || b > (1ull << 30)) {
                fprintf(stderr, "tierkv serve: --max-body wants a size of 64 bytes to 1GiB, got '%s'\n", v);
                return 2;
            }
            o.http.max_body = (size_t)b;
        } else { fprintf(stderr, "tierkv serve: unknown flag %s\n", a); usage(stderr); return 2; }
        if (bad) return 2;
    }
    if (o.http.max_open < o.http.max_connections) {
        if (open_given) {
            fprintf(stderr, "tierkv serve: --max-open %d is below --max-connections %d (every request holds a connection)\n",
                    o.http.max_open, o.http.max_connections);
            return 2;
        }
        o.http.max_open = 2 * o.http.max_connections; /* the default 512 follows a larger request limit */
    }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv serve: %s\n", err); return 1; }
    if (!o.model_name) o.model_name = tkv_file_name(c.model_path);

    /* SIGINT/SIGTERM are taken by sigwait below: blocked before any thread starts, so every thread
     * inherits the mask; a closed client socket must not kill the process */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    tkv_model *m = NULL;
    if (tkv_model_open(c.model_path, &c.mp, &m, err, sizeof err)) { fprintf(stderr, "tierkv serve: %s\n", err); return 1; }
    o.model = m;
    tkv_model_info info;
    tkv_model_get_info(m, &info);
    /* a request's positions stay within what the model was trained on: the default 4096 comes down
     * to a smaller context_length; an explicit --ctx above it is kept, with a warning */
    if (!c.ctx_given && info.n_ctx_train > 0 && c.sp.max_ctx > info.n_ctx_train) c.sp.max_ctx = info.n_ctx_train;
    common_ctx_warn("serve", &c, info.n_ctx_train);
    o.sp = c.sp;
    o.log = stderr;
    serve *srv;
    if (serve_start(&o, &srv, err, sizeof err)) {
        fprintf(stderr, "tierkv serve: %s\n", err);
        tkv_model_close(m);
        return 1;
    }
    const char *host = o.http.host;
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "tierkv serve: listening on http://%s%s%s:%d (model %s, policy %s, parallel %d, queue %d, ctx %d)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", serve_port(srv), o.model_name, tkv_policy_name(o.sp.kv.policy), o.parallel,
            o.max_queue, o.sp.max_ctx);
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "tierkv serve: signal %d, stopping\n", sig);
    serve_stop(srv);
    tkv_model_close(m);
    return 0;
}
