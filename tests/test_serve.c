/* test_serve.c — the server's pure parts (the reasoning split over streamed pieces, request parsing
 * against a corpus of bad bodies, the response and metrics formats), the scheduler on a fixture
 * model (batched and queued jobs give the tokens of one-at-a-time decoding, the prefix cache shares
 * without changing them, refusals), and the HTTP server end to end: tests/serve_test.py starts
 * `tierkv serve` on a loopback port and talks to it over real HTTP, one section per test here.
 * Tests that need the fixtures, the binary or python3 skip with one line when they are missing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/sched.h"
#include "base/buf.h"
#include "serve/fields.h"
#include "serve/metrics.h"
#include "serve/reasoning.h"
#include "base/utf8.h"
#include "serve/request.h"
#include "serve/response.h"
#include "serve/tools.h"
#include "t.h"
#include "tierkv.h"

#define FIXTURE "fixtures/models/qwen2-Q8_0.gguf"

/* ---- the reasoning split ---- */

/* Feeds text in pieces cut at the given points; returns reasoning and content. */
static void think_run(const char *open, const char *close, int by, const char *text, const size_t *cuts, int n_cuts,
                      tkv_buf *r, tkv_buf *c, int *touched) {
    serve_think t;
    serve_think_init(&t, open, close, by);
    size_t prev = 0, n = strlen(text);
    *touched = 0;
    for (int k = 0; k <= n_cuts; k++) {
        size_t end = k < n_cuts ? cuts[k] : n;
        *touched |= serve_think_feed(&t, text + prev, end - prev, r, c);
        prev = end;
    }
    serve_think_flush(&t, r, c);
}

static void think_case(int by, const char *text, const char *want_r, const char *want_c) {
    size_t n = strlen(text);
    /* every single cut, and every pair of cuts: a marker split over two and three pieces */
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            size_t cuts[2] = {a, b};
            tkv_buf r = {0}, c = {0};
            int touched;
            think_run("<think>", "</think>", by, text, cuts, 2, &r, &c, &touched);
            CHECKF(!strcmp(tkv_buf_str(&r), want_r) && !strcmp(tkv_buf_str(&c), want_c),
                   "text '%s' cut at %zu,%zu: reasoning '%s' content '%s'", text, a, b, tkv_buf_str(&r), tkv_buf_str(&c));
            tkv_buf_free(&r);
            tkv_buf_free(&c);
        }
}

TEST(serve_reasoning_split) {
    enum { MODEL = TKV_THINK_MODEL_OPENS, PROMPT = TKV_THINK_PROMPT_OPENS, CLOSED = TKV_THINK_PROMPT_CLOSED };
    think_case(PROMPT, "I think so.</think>\n\nThe answer is 4.", "I think so.", "The answer is 4.");
    think_case(PROMPT, "no close marker at all", "no close marker at all", "");
    think_case(PROMPT, "a </thin> lookalike </think>x</think>y", "a </thin> lookalike ", "x</think>y");
    think_case(PROMPT, "<</</think>", "<</", "");
    think_case(MODEL, "<think>hmm</think>ok", "hmm", "ok");
    think_case(MODEL, "  \n<think>hmm</think> ok", "hmm", "ok");
    think_case(MODEL, "plain answer <think>not reasoning</think>", "", "plain answer <think>not reasoning</think>");
    think_case(MODEL, "<thin", "", "<thin");
    think_case(PROMPT, "</think>", "", "");
    think_case(PROMPT, "caf\xc3\xa9 </think> \xe2\x82\xac", "caf\xc3\xa9 ", "\xe2\x82\xac");
    /* Qwen3 with thinking on: the model opens the block itself with "<think>\n" (the newline goes
     * with the marker, so the reasoning reads as R1's); an empty block; one never closed */
    think_case(MODEL, "<think>\nLet me add.\n</think>\n\nThe answer is 4.", "Let me add.\n", "The answer is 4.");
    think_case(MODEL, "<think>\n\n</think>\n\n4", "", "4");
    think_case(MODEL, "<think>\n  cut short", "cut short", "");
    think_case(MODEL, "4, no reasoning", "", "4, no reasoning");
    /* thinking off: the prompt closed the block, whatever follows is answer */
    think_case(CLOSED, "<think>\nx\n</think>\n\n4", "", "<think>\nx\n</think>\n\n4");
    think_case(CLOSED, "The answer is 4.", "", "The answer is 4.");
    /* without markers everything is answer */
    tkv_buf r = {0}, c = {0};
    int touched;
    think_run(NULL, NULL, 0, "a<think>b</think>c", NULL, 0, &r, &c, &touched);
    CHECK(r.n == 0 && !strcmp(tkv_buf_str(&c), "a<think>b</think>c") && !touched);
    tkv_buf_free(&r);
    tkv_buf_free(&c);
    /* a token counts as reasoning when any of its bytes is taken inside the block */
    serve_think t;
    serve_think_init(&t, "<think>", "</think>", PROMPT);
    CHECK(serve_think_enabled(&t) && serve_think_feed(&t, "abc", 3, &r, &c) == 1);
    CHECK(serve_think_feed(&t, "</thi", 5, &r, &c) == 1);
    CHECK(serve_think_feed(&t, "nk>", 3, &r, &c) == 1);
    CHECK(serve_think_feed(&t, "\n\nok", 4, &r, &c) == 0);
    CHECK(!strcmp(tkv_buf_str(&r), "abc") && !strcmp(tkv_buf_str(&c), "ok"));
    /* the model's "<think>" and the newline after it are reasoning tokens; closed by the prompt, none */
    r.n = c.n = 0;
    serve_think_init(&t, "<think>", "</think>", MODEL);
    CHECK(serve_think_feed(&t, "<think>", 7, &r, &c) == 1 && serve_think_feed(&t, "\n", 1, &r, &c) == 1);
    CHECK(serve_think_feed(&t, "x", 1, &r, &c) == 1 && serve_think_feed(&t, "</think>", 8, &r, &c) == 1);
    CHECK(serve_think_feed(&t, "\n\nok", 4, &r, &c) == 0 && !strcmp(tkv_buf_str(&r), "x") && !strcmp(tkv_buf_str(&c), "ok"));
    r.n = c.n = 0;
    serve_think_init(&t, "<think>", "</think>", CLOSED);
    CHECK(serve_think_enabled(&t) && serve_think_feed(&t, "<think>", 7, &r, &c) == 0 && r.n == 0);
    tkv_buf_free(&r);
    tkv_buf_free(&c);
}

/* ---- request parsing ---- */

static int parse(const char *body, enum serve_kind k, serve_request *r, serve_error *e) {
    serve_limits lim;
    serve_limits_default(&lim);
    lim.max_tokens = 1000;
    return serve_request_parse(body, strlen(body), k, &lim, r, e);
}

TEST(serve_request_good) {
    serve_request r, c1, c2;
    serve_error e;
    REQUIRE(parse("{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
                  "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null}],"
                  "\"max_completion_tokens\":7,\"temperature\":0,\"top_p\":0.5,\"seed\":-3,\"stop\":[\"x\",\"yy\"],\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true},\"n\":1,\"logit_bias\":{},\"logprobs\":false,\"tools\":[],"
                  "\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},\"frequency_penalty\":0,\"user\":\"u\","
                  "\"metadata\":{\"k\":\"v\"}}",
                  SERVE_CHAT, &r, &e) == 0);
    CHECK(r.n_msgs == 3 && !strcmp(r.msgs[1].content, "a\nb") && !strcmp(r.msgs[2].role, "assistant") && !strcmp(r.msgs[2].content, ""));
    CHECK(r.max_tokens == 7 && r.temperature == 0 && r.top_p == 0.5 && r.has_seed && r.seed == (uint64_t)-3);
    CHECK(r.n_stops == 2 && !strcmp(r.stops[1], "yy") && r.stream && r.include_usage);
    CHECK(!r.think_off && !r.msgs[2].reasoning_content);
    serve_request_free(&r);
    /* Qwen3's switch and an earlier answer's reasoning; a copy keeps both */
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"q2\"}],"
                  "\"chat_template_kwargs\":{\"enable_thinking\":false}}", SERVE_CHAT, &r, &e) == 0);
    CHECK(r.think_off && !strcmp(r.msgs[1].reasoning_content, "r") && !r.msgs[0].reasoning_content);
    serve_request_copy(&r, 0, 0, &c1);
    CHECK(c1.think_off && c1.msgs[1].reasoning_content != r.msgs[1].reasoning_content && !strcmp(c1.msgs[1].reasoning_content, "r"));
    serve_request_free(&c1);
    serve_request_free(&r);
    static const char *const neutral[] = {"{\"enable_thinking\":true}", "{}", "[]", "null"};
    for (int i = 0; i < 4; i++) {
        char body[200];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"chat_template_kwargs\":%s}", neutral[i]);
        CHECKF(parse(body, SERVE_CHAT, &r, &e) == 0 && !r.think_off, "%s", body);
        serve_request_free(&r);
    }
    REQUIRE(parse("{\"prompt\":\"hi\",\"stop\":\"\\n\"}", SERVE_COMPLETION, &r, &e) == 0);
    CHECK(!strcmp(r.prompt, "hi") && r.n_stops == 1 && r.max_tokens == -1 && r.temperature == 1.0 && !r.stream);
    serve_request_free(&r);
    REQUIRE(parse("{\"prompt\":[1,2,3],\"max_tokens\":null}", SERVE_COMPLETION, &r, &e) == 0);
    CHECK(r.n_prompt_ids == 3 && r.prompt_ids[2] == 3 && r.max_tokens == -1);
    serve_request_free(&r);
    REQUIRE(parse("{\"prompt\":[\"only one\"]}", SERVE_COMPLETION, &r, &e) == 0);
    CHECK(!strcmp(r.prompt, "only one") && r.n_more == 0);
    serve_request_free(&r);
    /* a list of prompts; a copy holds one of them, seeded seed + the choice */
    REQUIRE(parse("{\"prompt\":[\"a\",[5,6],\"c\"],\"n\":2,\"seed\":10}", SERVE_COMPLETION, &r, &e) == 0);
    CHECK(!strcmp(r.prompt, "a") && r.n_more == 2 && r.more[0].n_ids == 2 && r.more[0].ids[1] == 6 &&
          !strcmp(r.more[1].text, "c") && r.n == 2);
    serve_request_copy(&r, 1, 1, &c1);
    serve_request_copy(&r, 2, 0, &c2);
    CHECK(!c1.prompt && c1.n_prompt_ids == 2 && c1.prompt_ids[0] == 5 && c1.n_more == 0 && c1.seed == 11);
    CHECK(!strcmp(c2.prompt, "c") && !c2.prompt_ids && c2.seed == 10);
    serve_request_free(&c1);
    serve_request_free(&c2);
    serve_request_free(&r);
}

TEST(serve_request_bad_corpus) {
    static const struct { enum serve_kind k; const char *body, *param; } bad[] = {
        {SERVE_CHAT, "", ""},
        {SERVE_CHAT, "{", ""},
        {SERVE_CHAT, "[]", ""},
        {SERVE_CHAT, "{\"messages\":[]} trailing", ""},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", ""},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", ""},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":1,\"n\":2}", ""},
        {SERVE_CHAT, "{}", "messages"},
        {SERVE_CHAT, "{\"messages\":\"hi\"}", "messages"},
        {SERVE_CHAT, "{\"messages\":[]}", "messages"},
        {SERVE_CHAT, "{\"messages\":[1]}", "messages[0]"},
        {SERVE_CHAT, "{\"messages\":[{\"content\":\"a\"}]}", "messages[0].role"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"a\"}]}", "messages[0].role"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content"},
        /* a user or system message with no content (absent or null); an assistant's may be null */
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"a\"}]}",
         "messages[0].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"assistant\"},{\"role\":\"developer\"}]}", "messages[1].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":\"5\"}", "max_tokens"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":0}", "max_tokens"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1.5}", "max_tokens"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1000000}", "max_tokens"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":-1}", "max_completion_tokens"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":\"hot\"}", "temperature"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":3}", "temperature"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_p\":2}", "top_p"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"seed\":1.5}", "seed"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":5}", "stop"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":[\"a\",1]}", "stop"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stop\":\"\"}", "stop"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream\":1}", "stream"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream_options\":[]}", "stream_options"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream_options\":{\"include_usage\":\"y\"}}",
         "stream_options.include_usage"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":65}", "n"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":0}", "n"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_k\":-1}", "top_k"},
        {SERVE_COMPLETION, "{}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":{}}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[\"a\",[]]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[\"a\",1]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[[1],{}]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":22}", "n"},
        {SERVE_COMPLETION, "{\"prompt\":[1,-2]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[1,\"x\"]}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":[1e3]}", "prompt"},
        /* refused, never ignored: unsupported values and unknown fields (src/serve/fields.c) */
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":1}", "logprobs"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", "top_logprobs"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":21}",
         "top_logprobs"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logit_bias\":{\"01\":2}}", "logit_bias"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{}]}", "tools[0]"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":{}}", "tools"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\","
                     "\"function\":{\"name\":\"\"}}]}", "tools[0]"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\","
                     "\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", "tools[1]"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"required\"}", "tool_choice"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":{\"type\":\"function\","
                     "\"function\":{\"name\":\"f\"}}}", "tool_choice"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"parallel_tool_calls\":1}", "parallel_tool_calls"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[]}]}", "messages[0].tool_calls"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"tool\"}]}", "messages[0].content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\"}]}]}",
         "messages[0].tool_calls[0]"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                     "\"arguments\":7}}]}]}", "messages[0].tool_calls[0]"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\","
                     "\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":\"string\",\"format\":\"email\"}}}}",
         "response_format"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"yaml\"}}",
         "response_format"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_object\"},"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         "response_format"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"presence_penalty\":2.5}", "presence_penalty"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"reasoning_effort\":\"low\"}", "reasoning_effort"},
        /* chat_template_kwargs: enable_thinking, a boolean, and nothing else; reasoning_content an assistant's string */
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":{\"enable_thinking\":"
                     "false,\"tools_in_user\":true}}", "chat_template_kwargs.tools_in_user"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":{\"enable_thinking\":0}}",
         "chat_template_kwargs.enable_thinking"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":{\"enable_thinking\":"
                     "\"false\"}}", "chat_template_kwargs.enable_thinking"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":\"x\"}", "chat_template_kwargs"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template_kwargs\":[1]}", "chat_template_kwargs"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"reasoning_content\":\"r\"}]}",
         "messages[0].reasoning_content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
                     "\"reasoning_content\":[\"r\"]}]}", "messages[1].reasoning_content"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"unknown\":[1,2,{}]}", "unknown"},
        {SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"prompt\":\"x\"}", "prompt"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":21}", "logprobs"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":\"2\"}", "logprobs"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", "echo"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"best_of\":2}", "best_of"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"messages\":[]}", "messages"},
        {SERVE_COMPLETION, "{\"prompt\":\"a\",\"tools\":[]}", "tools"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        serve_request r;
        serve_error e;
        memset(&e, 0, sizeof e);
        int rc = parse(bad[i].body, bad[i].k, &r, &e);
        CHECKF(rc == -1 && e.status == 400 && e.message[0] && !strcmp(e.param, bad[i].param),
               "case %zu (%s): rc %d status %d param '%s' message '%s'", i, bad[i].body, rc, e.status, e.param, e.message);
        CHECK(r.msgs == NULL && r.prompt == NULL && r.stops == NULL); /* nothing left to free */
    }
}

/* Python's json.dumps, as Qwen2.5's template writes tools and calls (expectations from Python 3.11) */
TEST(serve_pyjson_like_python) {
    static const struct { const char *in, *want; } cases[] = {
        {"{\"a\": [1.5, 1.0, 1e-05, 1e16, 123456789.123, -0.5, 3.14e-10, 0.1, 100.0, 1e22, 2.5e-5]}",
         "{\"a\": [1.5, 1.0, 1e-05, 1e+16, 123456789.123, -0.5, 3.14e-10, 0.1, 100.0, 1e+22, 2.5e-05]}"},
        {"{\"s\": \"q\\\"b\\\\ n\\n t\\t c\\u0001 \xc3\xa9 \xe2\x82\xac \x7f\"}",
         "{\"s\": \"q\\\"b\\\\ n\\n t\\t c\\u0001 \xc3\xa9 \xe2\x82\xac \x7f\"}"},
        {"{\"z\": 1, \"a\": {\"y\": [], \"b\": {}}, \"t\": true, \"f\": false, \"n\": null, \"i\": -12}",
         "{\"z\": 1, \"a\": {\"y\": [], \"b\": {}}, \"t\": true, \"f\": false, \"n\": null, \"i\": -12}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *v = json_loads(cases[i].in, 0, NULL);
        REQUIRE(v);
        char *got = serve_pyjson(v);
        CHECKF(!strcmp(got, cases[i].want), "case %zu: %s, want %s", i, got, cases[i].want);
        free(got);
        json_decref(v);
    }
}

/* Calls read from generated text: tagged blocks (with the text before them as content, the last one
 * cut by the length cap), bare objects naming a declared tool, a ```json fence; not: a block that is
 * not a call, an unknown name in a bare object, prose; parallel off keeps the first; and what a
 * stream may show while the text grows. */
TEST(serve_tools_extract_and_hold) {
    char *names[2] = {"get_weather", "add"};
    static const struct { const char *text; int n; const char *content, *first_name, *first_args; } cases[] = {
        {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
         2, "Let me check.", "get_weather", "{\"city\": \"Paris\"}"},
        {"<tool_call>{\"name\": \"x\", \"arguments\": \"{\\\"k\\\":2}\"}", 1, "", "x", "{\"k\": 2}"},
        {"  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n{\"name\": \"add\"}", 2, "", "get_weather",
         "{\"city\": \"Rome\"}"},
        {"```json\n{\"name\": \"add\", \"arguments\": {\"a\": 1.5}}\n```\n", 1, "", "add", "{\"a\": 1.5}"},
        {"<tool_call>\nnot json\n</tool_call>", 0, NULL, NULL, NULL},
        {"{\"name\": \"nope\", \"arguments\": {}}", 0, NULL, NULL, NULL},
        {"{\"name\": \"add\", \"arguments\": {}} and more", 0, NULL, NULL, NULL},
        {"The answer is 4.", 0, NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        serve_tool_calls c;
        int n = serve_tools_extract(cases[i].text, strlen(cases[i].text), names, 2, 1, &c);
        CHECKF(n == cases[i].n && c.n == n, "case %zu: %d calls, want %d", i, n, cases[i].n);
        if (n && n == cases[i].n) {
            CHECKF(c.content_len == strlen(cases[i].content) && !memcmp(cases[i].text, cases[i].content, c.content_len),
                   "case %zu: content of %zu bytes", i, c.content_len);
            CHECKF(!strcmp(c.v[0].name, cases[i].first_name) && !strcmp(c.v[0].arguments, cases[i].first_args),
                   "case %zu: %s %s", i, c.v[0].name, c.v[0].arguments);
        }
        serve_tool_calls_free(&c);
    }
    serve_tool_calls c;
    CHECK(serve_tools_extract(cases[0].text, strlen(cases[0].text), names, 2, 0, &c) == 1 && !strcmp(c.v[0].name, "get_weather"));
    serve_tool_calls_free(&c);
    static const struct { const char *text; size_t visible; } holds[] = {
        {"Hello <tool", 5}, {"Hello <tool_call>\n{", 5}, {"  \n", 0}, {" {\"na", 0}, {"``", 0}, {"```py", 0},
        {"Sure.\n\n", 5}, {"A < B", 5}, {"x<", 1},
    };
    for (size_t i = 0; i < sizeof holds / sizeof holds[0]; i++) {
        size_t v = serve_tools_visible(holds[i].text, strlen(holds[i].text));
        CHECKF(v == holds[i].visible, "'%s': %zu visible, want %zu", holds[i].text, v, holds[i].visible);
    }
}

/* Llama 3.1's calls: {"name", "parameters"} objects (its key read as "arguments"), after a
 * <|python_tag|> read as text too; a stream holds back what may be the tag. */
TEST(serve_tools_extract_llama31) {
    char *names[2] = {"get_weather", "add"};
    static const struct { const char *text; int n; const char *first_args; } cases[] = {
        {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", 1, "{\"city\": \"Paris\"}"},
        {"<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", 1, "{\"city\": \"Paris\"}"},
        {" \n<|python_tag|>\n{\"name\": \"add\", \"parameters\": \"{\\\"a\\\": 1.5}\"}", 1, "{\"a\": 1.5}"},
        {"{\"name\": \"add\", \"arguments\": {\"a\": 1}, \"parameters\": {\"a\": 2}}", 1, "{\"a\": 1}"},
        {"{\"name\": \"add\", \"parameters\": 7}", 0, NULL},
        {"<|python_tag|>{\"name\": \"nope\", \"parameters\": {}}", 0, NULL},
        {"<|python_tag|>brave_search.call(query=\"x\")", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        serve_tool_calls c;
        int n = serve_tools_extract(cases[i].text, strlen(cases[i].text), names, 2, 1, &c);
        CHECKF(n == cases[i].n && c.n == n, "case %zu: %d calls, want %d", i, n, cases[i].n);
        if (n && n == cases[i].n)
            CHECKF(c.content_len == 0 && !strcmp(c.v[0].arguments, cases[i].first_args), "case %zu: %s", i, c.v[0].arguments);
        serve_tool_calls_free(&c);
    }
    CHECK(serve_tools_visible("<|python", 8) == 0 && serve_tools_visible("<|python_tag|>{", 15) == 0);
    CHECK(serve_tools_visible("<b>", 3) == 3 && serve_tools_visible("<|im", 4) == 4 && serve_tools_visible("<|", 2) == 0 && serve_tools_visible("<|x", 3) == 3);
}

/* An assistant's past call: its arguments string read as JSON (written as Python writes it), a string
 * that is not JSON kept as a string; a forced call's grammar writes the format's key; a format of one
 * call per message reads one. */
TEST(serve_request_calls_and_format) {
    serve_request r;
    serve_error e;
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null,"
                  "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
                  "\"{\\\"city\\\":\\\"Par\\u00eds\\\",\\\"n\\\":1e3}\"}},{\"function\":{\"name\":\"g\",\"arguments\":\"not json\"}},"
                  "{\"function\":{\"name\":\"h\"}}]}]}",
                  SERVE_CHAT, &r, &e) == 0);
    REQUIRE(r.n_msgs == 2 && r.msgs[1].n_tool_calls == 3);
    CHECK(!strcmp(r.msgs[1].tool_calls[0].name, "f") && !strcmp(r.msgs[1].tool_calls[0].arguments, "{\"city\": \"Par\xc3\xads\", \"n\": 1000.0}"));
    CHECK(!strcmp(r.msgs[1].tool_calls[1].arguments, "\"not json\"") && !strcmp(r.msgs[1].tool_calls[2].arguments, "{}"));
    serve_request c;
    serve_request_copy(&r, 0, 0, &c);
    CHECK(c.msgs[1].n_tool_calls == 3 && !strcmp(c.msgs[1].tool_calls[2].name, "h") && c.msgs[1].tool_calls[2].name != r.msgs[1].tool_calls[2].name);
    serve_request_free(&c);
    serve_request_free(&r);
    static const char forced[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\","
                                 "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"u\":{\"enum\":"
                                 "[\"c\"]}}}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":"
                                 "\"function\",\"function\":{\"name\":\"f\"}}}";
    REQUIRE(parse(forced, SERVE_CHAT, &r, &e) == 0);
    CHECKF(r.json_mode == 2 && strstr(r.json_schema, "\"arguments\":{\"type\":\"object\"") &&
           strstr(r.json_schema, "\"required\":[\"name\",\"arguments\"]") && r.parallel_tool_calls == 1, "%s", r.json_schema);
    serve_request_free(&r);
    serve_limits lim;
    serve_limits_default(&lim);
    lim.call_key = "parameters", lim.max_calls = 1;
    REQUIRE(serve_request_parse(forced, strlen(forced), SERVE_CHAT, &lim, &r, &e) == 0);
    CHECKF(r.json_mode == 2 && strstr(r.json_schema, "\"parameters\":{\"type\":\"object\"") && !strstr(r.json_schema, "arguments") &&
           strstr(r.json_schema, "\"required\":[\"name\",\"parameters\"]") && r.parallel_tool_calls == 0, "%s", r.json_schema);
    serve_request_free(&r);
}

/* tkv_utf8_repair: the one walk the server's JSON writers use for bytes that may not be UTF-8 */
TEST(utf8_repair) {
    static const char in[] = "a\xff\xc3\xa9\0b\xe2\x82"; /* a, bad, é, NUL, b, a cut 3-byte sequence */
    tkv_buf out = {0};
    size_t bad = 0, chars = tkv_utf8_repair(in, sizeof in - 1, &out, &bad);
    static const char want[] = "a\xEF\xBF\xBD\xC3\xA9\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD";
    CHECK(chars == 7 && bad == 4);
    CHECK(out.n == sizeof want - 1 && memcmp(out.p, want, out.n) == 0);
    CHECK(tkv_utf8_repair("\xC3\xA9t\xC3\xA9", 5, NULL, &bad) == 3 && bad == 0);
    tkv_buf_free(&out);
}

/* docs/SERVE-FIELDS.md says what src/serve/fields.c does: every row's class, for its endpoints. */
TEST(serve_fields_doc_matches_table) {
    FILE *f = fopen("docs/SERVE-FIELDS.md", "r");
    if (!f) SKIP("docs/SERVE-FIELDS.md not found (run from the repository root)");
    char line[1024];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64], ep[32], cls[64];
        if (sscanf(line, "| `%63[a-z_]` | %31[a-z] | %63[a-z ] |", name, ep, cls) != 3) continue;
        size_t n = strlen(cls);
        while (n && cls[n - 1] == ' ') cls[--n] = 0;
        int chat = strcmp(ep, "completions") != 0, compl = strcmp(ep, "chat") != 0;
        const char *c1 = serve_field_class(name, SERVE_CHAT), *c2 = serve_field_class(name, SERVE_COMPLETION);
        CHECKF(chat ? c1 && !strcmp(c1, cls) : !c1, "%s (chat): doc '%s', code '%s'", name, cls, c1 ? c1 : "unknown");
        CHECKF(compl ? c2 && !strcmp(c2, cls) : !c2, "%s (completions): doc '%s', code '%s'", name, cls, c2 ? c2 : "unknown");
        rows++;
    }
    fclose(f);
    CHECKF(rows >= 40, "only %d field rows read from docs/SERVE-FIELDS.md", rows);
    CHECK(serve_field_class("frobnicate", SERVE_CHAT) == NULL);
}

/* The refusal of a message without content names its index and role (before: answered 200). */
TEST(serve_request_message_needs_content) {
    serve_request r;
    serve_error e;
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\"}]}", SERVE_CHAT, &r, &e) == -1);
    CHECKF(e.status == 400 && strstr(e.message, "messages[0]: a user message needs content"), "%d %s", e.status, e.message);
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"developer\",\"content\":null}]}",
                  SERVE_CHAT, &r, &e) == -1);
    CHECKF(e.status == 400 && strstr(e.message, "messages[1]: a developer message needs content"), "%d %s", e.status, e.message);
    /* an empty string is content; an assistant's null is accepted as today (tool calls come later) */
    REQUIRE(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\"}]}", SERVE_CHAT, &r, &e) == 0);
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[0].content, "") && !strcmp(r.msgs[1].content, ""));
    serve_request_free(&r);
}

/* ---- responses ---- */

TEST(serve_response_shapes) {
    serve_error e;
    serve_error_set(&e, 400, "invalid_request_error", "max_tokens", "invalid_type", "bad \"quote\"");
    char *s = serve_json_error(&e);
    json_error_t je;
    json_t *o = json_loads(s, 0, &je);
    REQUIRE(o);
    json_t *err = json_object_get(o, "error");
    CHECK(!strcmp(json_string_value(json_object_get(err, "message")), "bad \"quote\""));
    CHECK(!strcmp(json_string_value(json_object_get(err, "param")), "max_tokens"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "type")), "invalid_request_error"));
    CHECK(!strcmp(json_string_value(json_object_get(err, "code")), "invalid_type"));
    json_decref(o);
    free(s);
    serve_resp_meta m = {"chatcmpl-1", 5, "model", SERVE_CHAT};
    serve_usage u = {10, 4, 3, 8};
    /* an invalid byte goes out as U+FFFD instead of failing */
    serve_choice ch[2] = {{(serve_text){"ok\xff", 3}, (serve_text){"why", 3}, "stop", NULL, NULL},
                          {(serve_text){"b", 1}, (serve_text){NULL, 0}, "length", NULL, NULL}};
    s = serve_json_completion(&m, ch, 2, 1, &u);
    o = json_loads(s, 0, &je);
    REQUIRE(o);
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "ok\xef\xbf\xbd"));
    CHECK(!strcmp(json_string_value(json_object_get(msg, "reasoning_content")), "why"));
    CHECK(!strcmp(json_string_value(json_object_get(msg, "reasoning")), "why"));
    json_t *c1 = json_array_get(json_object_get(o, "choices"), 1);
    CHECK(json_integer_value(json_object_get(c1, "index")) == 1 &&
          !strcmp(json_string_value(json_object_get(c1, "finish_reason")), "length") &&
          !strcmp(json_string_value(json_object_get(json_object_get(c1, "message"), "content")), "b"));
    json_t *us = json_object_get(o, "usage");
    CHECK(json_integer_value(json_object_get(us, "total_tokens")) == 14);
    CHECK(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")) == 8);
    CHECK(json_integer_value(json_object_get(json_object_get(us, "completion_tokens_details"), "reasoning_tokens")) == 3);
    json_decref(o);
    free(s);
    s = serve_sse_chunk(&m, 3, 0, (serve_text){"r", 1}, (serve_text){NULL, 0}, NULL, 1, NULL);
    CHECK(!strncmp(s, "data: {", 7) && s[strlen(s) - 1] == '\n' && s[strlen(s) - 2] == '\n');
    o = json_loadb(s + 6, strlen(s) - 8, 0, &je);
    REQUIRE(o);
    json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
    CHECK(!strcmp(json_string_value(json_object_get(d, "reasoning_content")), "r") && !json_object_get(d, "content"));
    CHECK(json_integer_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "index")) == 3);
    CHECK(json_is_null(json_object_get(o, "usage")) && !strcmp(json_string_value(json_object_get(o, "object")), "chat.completion.chunk"));
    json_decref(o);
    free(s);
}

TEST(serve_metrics_format) {
    serve_metrics m;
    serve_metrics_init(&m);
    serve_metrics_count(&m, SERVE_EP_CHAT, 200);
    serve_metrics_count(&m, SERVE_EP_CHAT, 200);
    serve_metrics_count(&m, SERVE_EP_COMPLETIONS, 503);
    serve_snapshot sn = {0};
    sn.kv_ok = 1;
    sn.kv.tokens[0] = 12;
    char *page = serve_metrics_render(&m, &sn);
    CHECK(strstr(page, "tierkv_requests_total{endpoint=\"chat\",code=\"200\"} 2\n") != NULL);
    CHECK(strstr(page, "tierkv_requests_rejected_total 1\n") != NULL);
    CHECK(strstr(page, "tierkv_kv_tokens{tier=\"t0\"} 12\n") != NULL);
    /* every line: a HELP/TYPE comment, or name{labels} value */
    for (char *l = page; *l;) {
        char *e = strchr(l, '\n');
        REQUIRE(e);
        *e = 0;
        if (l[0] == '#') CHECKF(!strncmp(l, "# HELP tierkv_", 14) || !strncmp(l, "# TYPE tierkv_", 14), "%s", l);
        else {
            char *sp = strrchr(l, ' ');
            char *end;
            CHECKF(sp && !strncmp(l, "tierkv_", 7) && (strtod(sp + 1, &end), *end == 0), "%s", l);
        }
        l = e + 1;
    }
    free(page);
    serve_metrics_free(&m);
}

/* ---- the scheduler on a fixture model ---- */

#define NJ 7
#define GEN 12
struct tj {
    int32_t prompt[96];
    int n_prompt;
    int32_t out[GEN + 1];
    int n_out;
    int ended, why, cached;
};

static int tj_token(void *u, int32_t t, const sched_logprob *lp) {
    (void)lp;
    struct tj *j = u;
    if (j->n_out < GEN + 1) j->out[j->n_out++] = t;
    return 0;
}
static void tj_end(void *u, const sched_end *e) {
    struct tj *j = u;
    j->ended++;
    j->why = e->why;
    j->cached = e->cached_tokens;
}

/* Jobs sharing a 40-token prefix (two of them identical), and two others; runs them with the
 * session holding n_seqs sequences and max_live jobs live. */
static int sched_run(tkv_model *m, int n_seqs, int max_live, int prefix, struct tj *jobs, sched_info *info) {
    for (int i = 0; i < NJ; i++) {
        struct tj *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->n_prompt = 40 + 5 + i;
        for (int k = 0; k < j->n_prompt; k++) j->prompt[k] = (int32_t)((k < 40 ? 17 * k + 3 : 31 * k + 7 * i) % 1000);
        if (i == 6) memcpy(j->prompt, jobs[5].prompt, sizeof j->prompt), j->n_prompt = jobs[5].n_prompt;
        if (i == 4) for (int k = 0; k < j->n_prompt; k++) j->prompt[k] = (int32_t)((k * 13 + 1) % 1000);
    }
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = n_seqs;
    sp.max_ctx = 128;
    tkv_session *s;
    char err[256];
    if (tkv_session_open(m, &sp, &s, err, sizeof err)) return -1;
    sched_params p;
    sched_params_default(&p);
    p.max_live = max_live;
    p.prefix_entries = prefix;
    p.prefill_tokens = 60;
    sched_callbacks cb = {.on_token = tj_token, .on_end = tj_end};
    sched *sc;
    if (sched_init(m, s, &p, &cb, &sc, err, sizeof err)) { tkv_session_close(s); return -1; }
    for (int i = 0; i < NJ; i++)
        sched_submit(sc, &(sched_job){.prompt = jobs[i].prompt, .n_prompt = jobs[i].n_prompt, .max_tokens = GEN, .ignore_eog = 1, .user = &jobs[i]});
    int steps = 0;
    while (sched_step(sc) && steps < 10000) steps++;
    sched_info_get(sc, info);
    sched_free(sc);
    tkv_session_close(s);
    return 0;
}

TEST(serve_sched_batched_equals_alone) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture models missing");
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    tkv_model *m;
    char err[256];
    REQUIRE(tkv_model_open(t_shared(FIXTURE), &mp, &m, err, sizeof err) == 0);
    static struct tj alone[NJ], batched[NJ], queued[NJ];
    sched_info ia, ib, iq;
    REQUIRE(sched_run(m, 1, 1, 0, alone, &ia) == 0);          /* one at a time, no sharing */
    REQUIRE(sched_run(m, 4 + 2, 4, 2, batched, &ib) == 0);    /* four together, two prefix entries */
    REQUIRE(sched_run(m, 2, 8, 0, queued, &iq) == 0);         /* more live wanted than the session holds: TKV_EFULL waits */
    for (int i = 0; i < NJ; i++) {
        CHECKF(alone[i].ended == 1 && alone[i].why == SCHED_LENGTH && alone[i].n_out == GEN, "job %d: ended %d why %d", i,
               alone[i].ended, alone[i].why);
        CHECKF(!memcmp(alone[i].out, batched[i].out, sizeof alone[i].out) && batched[i].ended == 1, "job %d batched differs", i);
        CHECKF(!memcmp(alone[i].out, queued[i].out, sizeof alone[i].out) && queued[i].ended == 1, "job %d queued differs", i);
    }
    CHECK(ia.cached_tokens == 0 && ib.cached_tokens > 0 && ib.prefix_hits >= 4);
    /* the first job's whole prompt is a seed; the second shares its 40 common tokens, which replace
     * the seed; the others share those 40, and each that goes on past them seeds its whole prompt:
     * the repeated prompt (job 6) shares all of its twin's but the last token */
    for (int i = 1; i < NJ - 1; i++)
        if (i != 4) CHECKF(batched[i].cached == 40, "job %d shared %d", i, batched[i].cached);
    CHECKF(batched[6].cached == batched[6].n_prompt - 1, "job 6 shared %d", batched[6].cached);
    CHECK(batched[0].cached == 0 && batched[4].cached == 0); /* the first, and one with nothing in common */
    CHECK(ib.gen_tokens == NJ * GEN && iq.gen_tokens == NJ * GEN && ib.live == 0 && ib.waiting == 0);
    tkv_model_close(m);
}

TEST(serve_sched_refuses_and_cancels) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture models missing");
    tkv_model_params mp;
    tkv_model_params_default(&mp);
    tkv_model *m;
    char err[256];
    REQUIRE(tkv_model_open(t_shared(FIXTURE), &mp, &m, err, sizeof err) == 0);
    tkv_session_params sp;
    tkv_session_params_default(&sp);
    sp.max_seqs = 2;
    sp.max_ctx = 64;
    tkv_session *s;
    REQUIRE(tkv_session_open(m, &sp, &s, err, sizeof err) == 0);
    sched_params p;
    sched_params_default(&p);
    p.max_live = 2;
    sched_callbacks cb = {.on_token = tj_token, .on_end = tj_end};
    sched *sc;
    REQUIRE(sched_init(m, s, &p, &cb, &sc, err, sizeof err) == 0);
    static struct tj big, ok, waiting;
    memset(&big, 0, sizeof big), memset(&ok, 0, sizeof ok), memset(&waiting, 0, sizeof waiting);
    big.n_prompt = ok.n_prompt = waiting.n_prompt = 8;
    /* 8 + 60 positions: more than the session's 64, refused (TKV_ERR) without harming the others */
    sched_submit(sc, &(sched_job){.prompt = big.prompt, .n_prompt = 8, .max_tokens = 60, .user = &big});
    sched_submit(sc, &(sched_job){.prompt = ok.prompt, .n_prompt = 8, .max_tokens = GEN, .ignore_eog = 1, .user = &ok});
    sched_submit(sc, &(sched_job){.prompt = waiting.prompt, .n_prompt = 8, .max_tokens = GEN, .ignore_eog = 1, .user = &waiting});
    sched_step(sc);
    CHECK(big.ended == 1 && big.why == SCHED_REFUSED && big.n_out == 0);
    sched_info info;
    sched_info_get(sc, &info);
    CHECK(info.live == 2 && info.waiting == 0);
    sched_free(sc); /* the live ones end as cancelled */
    CHECK(ok.ended == 1 && ok.why == SCHED_CANCELLED && waiting.ended == 1 && waiting.why == SCHED_CANCELLED);
    tkv_stats st;
    REQUIRE(tkv_stats_get(s, -1, &st, err, sizeof err) == 0);
    CHECK(st.live_seqs == 0 && st.bytes[0] == 0);
    tkv_session_close(s);
    tkv_model_close(m);
}

/* ---- the HTTP server end to end (tests/serve_test.py) ---- */

static void http_script(const char *script, const char *section) {
    if (access(t_shared(FIXTURE), R_OK)) SKIP("fixture models missing");
    if (access(t_bin(), X_OK)) SKIP("built binary missing");
    if (system("python3 -c 'import json, http.client' >/dev/null 2>&1")) SKIP("python3 missing");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 tests/%s --bin %s --shared %s --tmp %s %s", script, t_bin(), t_shared(""), t_tmpdir(),
             section);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) SKIP("a python package it needs is missing (see above)");
    CHECKF(rc == 0, "%s %s exited %d", script, section, rc);
}

static void http_section(const char *section) { http_script("serve_test.py", section); }

TEST(serve_http_basic) { http_section("basic"); }
TEST(serve_http_reasoning) { http_section("reasoning"); }
TEST(serve_http_qwen3) { http_section("qwen3"); }
TEST(serve_http_llama31) { http_section("llama31"); }
TEST(serve_http_identical) { http_section("identical"); }
TEST(serve_http_malformed) { http_section("malformed"); }
TEST(serve_http_disconnect) { http_section("disconnect"); }
TEST(serve_http_queue_full) { http_section("queue"); }
TEST(serve_http_budget_refusal) { http_section("budget"); }
TEST(serve_http_auth) { http_section("auth"); }
TEST(serve_http_idle_cpu) { http_section("idle"); }
TEST(serve_http_openai_client) { http_section("openai"); }
TEST(serve_http_logprobs) { http_section("logprobs"); }
TEST(serve_http_tokenize) { http_section("tokens"); }
TEST(serve_http_choices) { http_section("choices"); }
TEST(serve_http_slow_clients) { http_section("slow"); }
TEST(serve_http_tools) { http_section("tools"); }
TEST(serve_http_structured) { http_section("structured"); }
TEST(serve_http_penalties) { http_section("penalties"); }
TEST(serve_http_conversations) { http_script("serve_conv_test.py", "conversations"); }
