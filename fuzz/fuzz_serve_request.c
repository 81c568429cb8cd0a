/* fuzz_serve_request.c — libFuzzer target for the server's request parsing (`make fuzz`, then
 * build-fuzz/fuzz_bin/fuzz_serve_request fuzz/corpus/fuzz_serve_request -max_total_time=180): the
 * input is one request body, parsed as a chat and as a text completion request, then as a
 * /tokenize and a /detokenize body, and read as generated text for tool calls (serve/tools.h; the
 * calls of a chat request's tools when it parsed) and fed to structured output's automaton (the
 * request's schema when it has one, else any object). A parse either
 * fills the request (every string valid UTF-8 and NUL-terminated, counts in range, the limits
 * kept) or fails with a 4xx and a message; the request is then freed (ASan catches leaks and
 * overreads; the body is a heap copy of exactly the input's bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "serve/jsonc.h"
#include "serve/request.h"
#include "serve/tokenize.h"
#include "serve/tools.h"

static void check_str(const char *s) {
    TKV_ASSERT(s);
    (void)strlen(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    serve_limits lim;
    serve_limits_default(&lim);
    lim.max_tokens = 4096;
    lim.max_messages = 32;
    lim.max_stops = 4;
    char *body = malloc(size ? size : 1);
    if (size) memcpy(body, data, size);
    for (int k = 0; k < 2; k++) {
        serve_request r;
        serve_error e;
        memset(&e, 0, sizeof e);
        enum serve_kind kind = k ? SERVE_COMPLETION : SERVE_CHAT;
        if (serve_request_parse(body, size, kind, &lim, &r, &e) == 0) {
            TKV_ASSERT(r.kind == kind);
            TKV_ASSERT(r.max_tokens == -1 || (r.max_tokens >= 1 && r.max_tokens <= lim.max_tokens));
            TKV_ASSERT(r.n_stops >= 0 && r.n_stops <= lim.max_stops);
            TKV_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p >= 0 && r.top_p <= 1);
            if (kind == SERVE_CHAT) {
                TKV_ASSERT(r.n_msgs >= 1 && r.n_msgs <= lim.max_messages);
                for (int i = 0; i < r.n_msgs; i++) {
                    check_str(r.msgs[i].role), check_str(r.msgs[i].content);
                    for (int k = 0; k < r.msgs[i].n_tool_calls; k++)
                        check_str(r.msgs[i].tool_calls[k].name), check_str(r.msgs[i].tool_calls[k].arguments);
                    if (r.msgs[i].reasoning_content) TKV_ASSERT(!strcmp(r.msgs[i].role, "assistant"));
                }
                for (int k = 0; k < r.n_tools; k++) check_str(r.tools[k]), check_str(r.tool_names[k]);
                serve_request c; /* the copy each of n choices gets */
                serve_request_copy(&r, 0, 1, &c);
                TKV_ASSERT(c.n_tools == r.n_tools && c.n_msgs == r.n_msgs);
                serve_request_free(&c);
                serve_tool_calls calls; /* the body as a model's text, against the request's tools */
                int n = serve_tools_extract(body, size, r.tool_names, r.n_tools, r.parallel_tool_calls, &calls);
                TKV_ASSERT(n == calls.n && calls.content_len <= size);
                serve_tool_calls_free(&calls);
            } else {
                TKV_ASSERT(r.prompt || (r.prompt_ids && r.n_prompt_ids >= 1));
                for (int i = 0; i < r.n_prompt_ids; i++) TKV_ASSERT(r.prompt_ids[i] >= 0);
                TKV_ASSERT(r.n_more >= 0 && (r.n_more + 1) * r.n <= SERVE_MAX_N);
                for (int p = 0; p < r.n_more; p++) { /* each listed prompt, and its copy for a choice */
                    TKV_ASSERT(r.more[p].text || (r.more[p].ids && r.more[p].n_ids >= 1));
                    serve_request c;
                    serve_request_copy(&r, p + 1, (uint64_t)p, &c);
                    TKV_ASSERT(c.n_more == 0 && (c.prompt || c.prompt_ids) && c.n_prompt_ids == r.more[p].n_ids);
                    serve_request_free(&c);
                }
            }
            for (int i = 0; i < r.n_stops; i++) TKV_ASSERT(r.stops[i] && r.stops[i][0]);
            if (r.json_mode) { /* its schema compiles again (the worker does) and takes the body's bytes */
                json_t *sc = r.json_mode == 2 ? json_loads(r.json_schema, 0, NULL) : NULL;
                char why[200];
                jc_schema *js = jc_compile(sc, why, sizeof why);
                TKV_ASSERT(js && (r.json_mode == 1 || sc));
                jc_state *st = jc_start(js);
                for (size_t i = 0; i < size; i++) (void)jc_feed(st, body + i, 1);
                (void)jc_complete(st);
                jc_state_free(st);
                jc_free(js);
                json_decref(sc);
            }
            serve_request_free(&r);
        } else {
            TKV_ASSERT(e.status >= 400 && e.status < 500 && e.message[0] && e.type);
        }
    }
    for (int detok = 0; detok < 2; detok++) { /* the same bytes as a /tokenize and a /detokenize body */
        serve_tok_request t;
        serve_error e;
        memset(&e, 0, sizeof e);
        if (serve_tok_parse(body, size, detok, &lim, &t, &e) == 0) {
            if (detok) {
                TKV_ASSERT(t.n_ids >= 0 && t.n_ids <= lim.max_prompt_ids && t.ids);
                for (int i = 0; i < t.n_ids; i++) TKV_ASSERT(t.ids[i] >= 0);
            } else {
                TKV_ASSERT(t.content && strlen(t.content) <= t.content_len);
            }
            serve_tok_request_free(&t);
        } else {
            TKV_ASSERT(e.status >= 400 && e.status < 500 && e.message[0] && e.type);
        }
    }
    serve_tool_calls calls; /* the bytes as generated text: calls read or none, and what a stream shows */
    int n = serve_tools_extract(body, size, NULL, 0, 1, &calls);
    TKV_ASSERT(n == calls.n && calls.content_len <= size);
    for (int i = 0; i < calls.n; i++) check_str(calls.v[i].name), check_str(calls.v[i].arguments);
    serve_tool_calls_free(&calls);
    TKV_ASSERT(serve_tools_visible(body, size) <= size);
    char why[200]; /* the bytes as a model's answer to json_object, refused from where they go wrong */
    jc_schema *js = jc_compile(NULL, why, sizeof why);
    jc_state *st = jc_start(js);
    size_t took = 0;
    while (took < size && jc_feed(st, body + took, 1) == 0) took++;
    TKV_ASSERT(!jc_complete(st) || took > 0);
    jc_state_free(st);
    jc_free(js);
    free(body);
    return 0;
}
