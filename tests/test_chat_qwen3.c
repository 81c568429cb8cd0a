/* test_chat_qwen3.c - Qwen3's chat format against its own Jinja template (tests/data/
 * qwen3-chat-template.jinja, rendered by jinja2 in tests/chat_jinja.py with Hugging Face's
 * conventions), byte for byte: thinking on and off, with and without a system message, earlier
 * turns' reasoning (dropped before the last user query, kept after it, from a <think> block or
 * reasoning_content), tools, tool calls and tool results, "/no_think" as plain text. Also: the
 * template is detected as qwen3 from a file (and what it is not, is not), the template's special
 * tokens encode as such and typed ones stay text, and the public API's thinking switch and
 * reasoning markers. Skips the jinja2 comparisons when jinja2 is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/chat.h"
#include "model/tokenizer.h"
#include "t.h"
#include "t_chat.h"
#include "tierkv.h"

#define TEMPLATE "tests/data/qwen3-chat-template.jinja"

static const char *const DEFS[2] = {
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather in a city "
    "(temp\xc3\xa9rature, <b>wind</b>)\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}}, \"required\": [\"city\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"a + b\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"integer\"}}}}}"};
static const chat_call CALLS1[2] = {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_weather", "{\"city\": \"Rome\"}"}};
static const chat_call CALLS2[1] = {{"add", "{\"a\": 1.5, \"b\": 2}"}};

/* Our text for the conversation equals the template's. think: -1 not given to the template (on),
 * 1 given true, 0 false (our think_off). Returns 1 when compared, 0 when skipped. */
static int qwen3_case(const char *tag, const chat_msg *m, int n, const chat_tools *tools, int think, int gen) {
    char name[64];
    snprintf(name, sizeof name, "qwen3-%s", tag);
    chat_template t;
    chat_template_init(&t, CHAT_QWEN3);
    t.think_off = think == 0;
    return t_chat_same(TEMPLATE, name, &t, m, n, tools, think, NULL, gen);
}

#define MSG(role, content) {role, content, NULL, 0, NULL}
#define ASSISTANT_R(content, reasoning) {"assistant", content, NULL, 0, reasoning}
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

TEST(chat_qwen3_thinking_switch_matches_template) {
    chat_msg sys[2] = {MSG("system", "You are terse."), MSG("user", "What is 2+2? /no_think")};
    if (!qwen3_case("on", sys, 2, NULL, -1, 1)) return;
    qwen3_case("on-explicit", sys, 2, NULL, 1, 1);
    qwen3_case("off", sys, 2, NULL, 0, 1);
    qwen3_case("no-system", sys + 1, 1, NULL, -1, 1);
    qwen3_case("no-system-off", sys + 1, 1, NULL, 0, 1);
    qwen3_case("no-generation-prompt", sys, 2, NULL, 0, 0);
    /* the generation prompts themselves, spelled out */
    chat_template t;
    chat_template_init(&t, CHAT_QWEN3);
    size_t len;
    char *s = chat_render(&t, NULL, sys + 1, 1, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(s, "<|im_start|>user\nWhat is 2+2? /no_think<|im_end|>\n<|im_start|>assistant\n"));
    free(s);
    t.think_off = 1;
    s = chat_render(&t, NULL, sys + 1, 1, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(s, "<|im_start|>user\nWhat is 2+2? /no_think<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    free(s);
}

TEST(chat_qwen3_history_reasoning_matches_template) {
    /* earlier answers with their reasoning: dropped before the last user query */
    chat_msg multi[6] = {MSG("system", "S"), MSG("user", "1+1?"), MSG("assistant", "<think>\none and one\n</think>\n\n2"),
                         MSG("user", "and 2+2?"), MSG("assistant", "\n<think>a</think>b<think>c\n\n</think>\n\n\n4 </think> x"),
                         MSG("user", "and 3+3? <think>typed</think>")};
    if (!qwen3_case("multi-turn", multi, N(multi), NULL, -1, 1)) return;
    qwen3_case("multi-turn-off", multi, N(multi), NULL, 0, 1);
    /* the last message an answer: its (empty) reasoning block is written */
    qwen3_case("last-assistant", multi, 3, NULL, -1, 0);
    chat_msg plain[2] = {MSG("user", "hi"), MSG("assistant", "hello")};
    qwen3_case("last-assistant-plain", plain, 2, NULL, -1, 0);
    /* after the last query: reasoning kept, from reasoning_content (content whole) or from content;
     * an empty reasoning_content (not the last message) writes no block */
    chat_msg after[6] = {MSG("user", "go"), ASSISTANT_R("\n\nfirst", "\nplan A\n"),
                         MSG("assistant", "<think>\nB\n</think>second"), ASSISTANT_R("third <think>x</think> y", ""),
                         MSG("system", "a late system turn"), ASSISTANT_R("fourth", "  spaced  ")};
    qwen3_case("after-query", after, N(after), NULL, -1, 1);
    qwen3_case("after-query-last", after, N(after), NULL, -1, 0);
    /* a user message that wraps a tool response by hand is no query: the one before it is */
    chat_msg wrapped[4] = {MSG("user", "q"), MSG("assistant", "<think>r</think>a"),
                           MSG("user", "<tool_response>\n42\n</tool_response>"), MSG("assistant", "<think>r2</think>a2")};
    qwen3_case("wrapped-response", wrapped, N(wrapped), NULL, -1, 1);
    chat_msg only_assistant[1] = {MSG("assistant", "<think>alone</think>x")};
    qwen3_case("no-query", only_assistant, 1, NULL, -1, 1);
}

TEST(chat_qwen3_tools_match_template) {
    chat_tools tools = {DEFS, 2};
    chat_msg m[10] = {MSG("system", "You are terse."),
                      MSG("user", "Weather in Paris and Rome? <|im_end|>"),
                      {"assistant", "", CALLS1, 2, "I need both cities."},
                      MSG("tool", "{\"temp\": 21}"),
                      MSG("tool", "18 degrees"),
                      {"assistant", "<think>\nNow add.\n</think>\n\nLet me add.", CALLS2, 1, NULL},
                      MSG("tool", "3.5"),
                      MSG("assistant", "<think>done</think>Paris 21, Rome 18."),
                      MSG("user", "Thanks"),
                      {"assistant", "\n", CALLS2, 1, NULL}};
    if (!qwen3_case("tools", m, 9, &tools, -1, 1)) return;
    qwen3_case("tools-no-system", m + 1, 8, &tools, -1, 1);
    qwen3_case("tools-off", m, 9, &tools, 0, 1);
    qwen3_case("tools-mid-loop", m, 7, &tools, -1, 1); /* the calls' reasoning after the last query: kept */
    qwen3_case("tools-last-call", m, 10, &tools, -1, 0);
    qwen3_case("calls-without-tools", m, 7, NULL, -1, 1);
}

/* The file's template is detected as qwen3 (and the same text without its switch is ChatML, as
 * llama.cpp reads Qwen3); the template's special tokens are tokens, typed ones text. */
TEST(chat_qwen3_detect_and_encode) {
    char *text = t_slurp(TEMPLATE);
    REQUIRE(text);
    chat_template t;
    REQUIRE(t_chat_template_of(text, &t) == 0);
    CHECK(t.kind == CHAT_QWEN3 && t.tools && !t.think_off && !t.default_system[0]);
    int n_switch = 0;
    for (char *at = text; (at = strstr(at, "enable_thinking")) != NULL; n_switch++) memcpy(at, "enable_thinkinq", 15);
    CHECK(n_switch == 2);
    REQUIRE(t_chat_template_of(text, &t) == 0);
    CHECK(t.kind == CHAT_CHATML);
    free(text);
    CHECK(chat_by_name("qwen3") == CHAT_QWEN3 && !strcmp(chat_name(CHAT_QWEN3), "qwen3"));
    CHECK(chat_detect("qwen3", 5) == CHAT_QWEN3);
    CHECK(chat_think_switch(CHAT_QWEN3) && !chat_think_switch(CHAT_CHATML) && !chat_think_switch(CHAT_DEEPSEEK_R1));
    const char *o, *c;
    chat_template_init(&t, CHAT_QWEN3);
    CHECK(chat_reasoning(&t, &o, &c) == CHAT_THINK_MODEL_OPENS && !strcmp(o, "<think>") && !strcmp(c, "</think>"));
    t.think_off = 1;
    CHECK(chat_reasoning(&t, &o, &c) == CHAT_THINK_PROMPT_CLOSED);
    chat_template_init(&t, CHAT_DEEPSEEK_R1);
    CHECK(chat_reasoning(&t, &o, &c) == CHAT_THINK_PROMPT_OPENS);
    chat_template_init(&t, CHAT_LLAMA3);
    CHECK(chat_reasoning(&t, &o, &c) == CHAT_THINK_NONE && !o && !c);

    /* Qwen2.5's vocabulary has Qwen3's <|im_start|>, <|im_end|> and <tool_call> at the same ids */
    if (!t_need("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf")) return;
    gguf_file g;
    char err[256];
    REQUIRE(gguf_open(t_shared("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"), &g, err, sizeof err) == 0);
    tok_vocab *v = tok_load(&g, err, sizeof err);
    REQUIRE(v);
    chat_template_init(&t, CHAT_QWEN3);
    chat_tools tools = {DEFS, 1};
    chat_msg m[3] = {MSG("user", "say <|im_end|> and <tool_call> /no_think"), {"assistant", "", CALLS1, 1, "r <|im_start|>"},
                     MSG("tool", "21")};
    int32_t *ids;
    int k = chat_encode(&t, v, m, 3, &tools, 1, &ids), n_start = 0, n_end = 0, n_call = 0;
    for (int i = 0; i < k; i++) n_start += ids[i] == 151644, n_end += ids[i] == 151645, n_call += ids[i] == 151657;
    /* system, user, assistant, tool results, generation prompt; <tool_call>: 2 in the instruction, 1
     * call, and the typed one (a user-defined token: it matches in any text, as in llama.cpp) */
    CHECKF(n_start == 5 && n_end == 4 && n_call == 4, "%d <|im_start|>, %d <|im_end|>, %d <tool_call>", n_start, n_end, n_call);
    free(ids);
    tok_free(v);
    gguf_free(&g);
}

/* tkv_chat: the thinking switch only where the format has one; the markers and who opens them. */
TEST(chat_qwen3_public_switch) {
    if (!t_need("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf")) return;
    tkv_model_params p;
    tkv_model_params_default(&p);
    p.vocab_only = 1;
    tkv_model *m;
    char err[256];
    REQUIRE(tkv_model_open(t_shared("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"), &p, &m, err, sizeof err) == 0);
    tkv_chat *c = NULL;
    err[0] = 0;
    CHECK(tkv_chat_open(m, NULL, TKV_CHAT_THINK_OFF, &c, err, sizeof err) != 0 && !c && strstr(err, "chatml") &&
          strstr(err, "thinking"));
    CHECK(tkv_chat_open(m, "deepseek-r1", TKV_CHAT_THINK_OFF, &c, err, sizeof err) != 0 && strstr(err, "deepseek-r1"));
    const char *o, *cl;
    int by;
    REQUIRE(tkv_chat_open(m, "qwen3", 0, &c, err, sizeof err) == 0);
    CHECK(tkv_chat_think_switch(c) && tkv_chat_has_tools(c));
    tkv_chat_reasoning(c, &o, &cl, &by);
    CHECK(o && cl && by == TKV_THINK_MODEL_OPENS);
    tkv_chat_msg um = {.role = "user", .content = "hi"};
    size_t len;
    char *s = tkv_chat_render(c, &um, 1, 1, &len);
    CHECK(s && !strcmp(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
    free(s);
    tkv_chat_close(c);
    REQUIRE(tkv_chat_open(m, "qwen3", TKV_CHAT_THINK_OFF, &c, err, sizeof err) == 0);
    tkv_chat_reasoning(c, &o, &cl, &by);
    CHECK(o && cl && by == TKV_THINK_PROMPT_CLOSED);
    s = tkv_chat_render(c, &um, 1, 1, &len);
    CHECK(s && !strcmp(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    free(s);
    tkv_chat_close(c);
    REQUIRE(tkv_chat_open(m, "deepseek-r1", 0, &c, err, sizeof err) == 0);
    tkv_chat_reasoning(c, &o, &cl, &by);
    CHECK(!tkv_chat_think_switch(c) && o && by == TKV_THINK_PROMPT_OPENS);
    tkv_chat_close(c);
    REQUIRE(tkv_chat_open(m, NULL, 0, &c, err, sizeof err) == 0);
    tkv_chat_reasoning(c, &o, &cl, &by);
    CHECK(!tkv_chat_think_switch(c) && !o && !cl);
    tkv_chat_close(c);
    tkv_model_close(m);
}
