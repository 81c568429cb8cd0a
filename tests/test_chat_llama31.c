/* test_chat_llama31.c - Llama 3.1's chat format (also 3.2's and 3.3's) against Meta's Jinja template
 * (tests/data/llama31-chat-template.jinja, rendered by jinja2 in tests/chat_jinja.py with Hugging
 * Face's conventions), byte for byte: with and without a system message, contents |trim cuts
 * (Unicode blanks too), tools (nested parameters, floats, non-ASCII, quotes, empty containers) in the
 * first message after the system one whatever its role, a call per assistant message (arguments an
 * object or a JSON string), tool results (a plain string and a JSON object's text, both written as
 * JSON strings), the generation prompt on and off. Also: what the template raises we refuse (two
 * calls in one message, tools with no message to carry them), Meta's Llama 3 template still renders
 * and detects as llama3, the kind is detected from the file, and typed special-token text lies in
 * the literal ranges. Skips the jinja2 comparisons when jinja2 is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "model/chat.h"
#include "t.h"
#include "t_chat.h"
#include "tierkv.h"

#define TEMPLATE "tests/data/llama31-chat-template.jinja"
#define BOS "<|begin_of_text|>"
/* Meta's Llama 3 Instruct template (tokenizer_config.json of Meta-Llama-3-8B-Instruct) */
#define LLAMA3_TEMPLATE                                                                                                \
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "  \
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "  \
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "  \
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"

static const char *const DEFS[3] = {
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather in a city "
    "(temp\xc3\xa9rature, \\\"quoted\\\", <b>wind</b> <|eot_id|>)\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}, \"near\": {\"type\": "
    "\"object\", \"properties\": {\"lat\": {\"type\": \"number\", \"minimum\": -90.0, \"maximum\": 90.5}, \"tags\": "
    "{\"type\": \"array\", \"items\": {}, \"default\": []}}}}, \"required\": [\"city\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"a + b \xe2\x82\xac\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\", \"default\": 1e-05}, \"b\": {\"type\": "
    "\"integer\", \"examples\": [1, 2.5, 1e+16, null, true, false]}}}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"noop\", \"parameters\": {}}}"};
static const chat_call WEATHER[2] = {{"get_weather", "{\"city\": \"Paris\", \"unit\": \"c\", \"near\": {\"lat\": 48.85}}"},
                                     {"get_weather", "{\"city\": \"Rome\"}"}};
static const chat_call ADD[1] = {{"add", "{\"a\": 1.5, \"b\": 2, \"note\": \"caf\xc3\xa9 \\\"x\\\" \\n <|eot_id|>\"}"}};
static const chat_call AS_STRING[1] = {{"add", "\"{\\\"a\\\": 1, \\\"b\\\": 2}\""}}; /* arguments: a JSON string */

#define MSG(role, content) {role, content, NULL, 0, NULL}
#define CALL(calls, n) {"assistant", "", calls, n, NULL}
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int llama31_case(const char *tag, const chat_msg *m, int n, const chat_tools *tools, int gen) {
    char name[64];
    snprintf(name, sizeof name, "llama31-%s", tag);
    chat_template t;
    chat_template_init(&t, CHAT_LLAMA31);
    CHECKF(chat_check(&t, m, n, tools, NULL, 0) == 0, "%s: refused", tag);
    return t_chat_same(TEMPLATE, name, &t, m, n, tools, -1, BOS, gen);
}

TEST(chat_llama31_plain_matches_template) {
    chat_msg m[6] = {MSG("system", " \n You are terse.\t "), MSG("user", "\xe3\x80\x80What is 2+2? <|eot_id|>\xc2\xa0\x1f"),
                     MSG("assistant", "4\n\n"), MSG("user", "And 3+3?"), MSG("system", "  a later system turn "),
                     MSG("assistant", "6")};
    if (!llama31_case("plain", m, 4, NULL, 1)) return;
    llama31_case("plain-no-generation-prompt", m, 4, NULL, 0);
    llama31_case("no-system", m + 1, 3, NULL, 1);
    llama31_case("only-system", m, 1, NULL, 1);
    llama31_case("later-system", m, 6, NULL, 0);
    chat_msg blank[2] = {MSG("system", " \n"), MSG("user", "")};
    llama31_case("blank", blank, 2, NULL, 1);
    /* the generation prompt and the header, spelled out */
    chat_template t;
    chat_template_init(&t, CHAT_LLAMA31);
    size_t len;
    char *s = chat_render(&t, NULL, m + 3, 1, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(s, BOS "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: "
                         "26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(s);
}

TEST(chat_llama31_tools_match_template) {
    chat_tools tools = {DEFS, 3};
    chat_msg m[12] = {MSG("system", "You are terse.\n"),
                      MSG("user", "  Weather in Paris and Rome? <|eot_id|> "),
                      CALL(WEATHER, 1),
                      MSG("tool", "{\"temp\": 21, \"sky\": \"clear \xe2\x98\x80\"}"),
                      {"assistant", "text the template drops", WEATHER + 1, 1, NULL},
                      MSG("tool", "18 degrees\n\"humid\" \\ <|eot_id|>"),
                      CALL(ADD, 1),
                      MSG("tool", "3.5"),
                      CALL(AS_STRING, 1),
                      MSG("tool", "3"),
                      MSG("assistant", "Paris 21, Rome 18."),
                      MSG("user", "Thanks")};
    if (!llama31_case("tools", m, 12, &tools, 1)) return;
    llama31_case("tools-no-system", m + 1, 11, &tools, 1);
    llama31_case("tools-last-call", m, 3, &tools, 0);
    llama31_case("tools-one-message", m + 1, 1, &tools, 1);
    llama31_case("tools-first-not-user", m + 2, 3, &tools, 1); /* the call's content becomes the user turn's */
    llama31_case("tools-empty-parameters", m, 2, &(chat_tools){DEFS + 2, 1}, 1);
    llama31_case("calls-without-tools", m, 12, NULL, 1);
}

/* What the template raises we refuse, naming the message; chat_render still writes something. */
TEST(chat_llama31_refusals) {
    chat_template t;
    chat_template_init(&t, CHAT_LLAMA31);
    chat_tools tools = {DEFS, 1};
    chat_msg two[3] = {MSG("user", "Weather in Paris and Rome?"), CALL(WEATHER, 2), MSG("tool", "21")};
    chat_msg sys[1] = {MSG("system", "S")};
    char err[256] = "", *text;
    CHECK(chat_check(&t, two, 3, &tools, err, sizeof err) != 0 && strstr(err, "messages[1]") &&
          strstr(err, "single tool-calls"));
    CHECK(chat_check(&t, two, 3, NULL, err, sizeof err) != 0); /* with or without tools */
    CHECK(chat_check(&t, sys, 1, &tools, err, sizeof err) != 0 && strstr(err, "messages[1]") && strstr(err, "first user message"));
    CHECK(chat_check(&t, sys, 0, &tools, err, sizeof err) != 0 && strstr(err, "messages[0]"));
    CHECK(chat_check(&t, sys, 1, NULL, err, sizeof err) == 0 && chat_check(&t, two, 1, &tools, err, sizeof err) == 0);
    int rc = t_chat_jinja(TEMPLATE, "llama31-two-calls", two, 3, &tools, -1, BOS, NULL, 1, &text);
    if (rc == T_CHAT_SKIPPED) return;
    CHECKF(rc == T_CHAT_RAISES, "two calls: the template renders them (%d)", rc);
    free(text);
    rc = t_chat_jinja(TEMPLATE, "llama31-system-only", sys, 1, &tools, -1, BOS, NULL, 1, &text);
    CHECKF(rc == T_CHAT_RAISES, "tools after a system message alone: the template renders them (%d)", rc);
    free(text);
    size_t len;
    char *s = chat_render(&t, NULL, two, 3, &tools, 1, &len, NULL, NULL);
    CHECK(s && strstr(s, "\"Paris\"") && !strstr(s, "\"Rome\"")); /* the first call alone */
    free(s);
    s = chat_render(&t, NULL, sys, 1, &tools, 1, &len, NULL, NULL);
    CHECK(s && strstr(s, "Do not use variables.") && strstr(s, "}\n\n<|eot_id|><|start_header_id|>assistant"));
    free(s);
    /* the public API says it too */
    if (!t_need("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf")) return;
    tkv_model_params p;
    tkv_model_params_default(&p);
    p.vocab_only = 1;
    tkv_model *mdl;
    REQUIRE(tkv_model_open(t_shared("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"), &p, &mdl, err, sizeof err) == 0);
    tkv_chat *c;
    REQUIRE(tkv_chat_open(mdl, "llama3.1", 0, &c, err, sizeof err) == 0);
    CHECK(!strcmp(tkv_chat_name(c), "llama3.1") && tkv_chat_has_tools(c) && !strcmp(tkv_chat_call_key(c), "parameters") &&
          tkv_chat_max_calls(c) == 1 && !tkv_chat_think_switch(c));
    tkv_chat_call wc[2] = {{WEATHER[0].name, WEATHER[0].arguments}, {WEATHER[1].name, WEATHER[1].arguments}};
    tkv_chat_msg pm[2] = {{.role = "user", .content = "x"}, {.role = "assistant", .content = "", .tool_calls = wc, .n_tool_calls = 2}};
    int32_t *ids;
    err[0] = 0;
    CHECK(tkv_chat_encode_tools(c, pm, 2, DEFS, 1, 1, &ids, err, sizeof err) < 0 && !ids && strstr(err, "messages[1]"));
    pm[1].n_tool_calls = 1;
    CHECK(tkv_chat_encode_tools(c, pm, 2, DEFS, 1, 1, &ids, err, sizeof err) > 0);
    free(ids);
    tkv_chat_close(c);
    REQUIRE(tkv_chat_open(mdl, "qwen3", 0, &c, err, sizeof err) == 0);
    CHECK(!strcmp(tkv_chat_call_key(c), "arguments") && tkv_chat_max_calls(c) == 0);
    tkv_chat_close(c);
    tkv_model_close(mdl);
}

/* Meta's Llama 3 template: still llama3, and its |trim is Python's strip as ours. */
TEST(chat_llama31_llama3_unchanged) {
    char path[600];
    snprintf(path, sizeof path, "%s/llama3-template.jinja", t_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(LLAMA3_TEMPLATE, f), fclose(f);
    CHECK(chat_detect(LLAMA3_TEMPLATE, strlen(LLAMA3_TEMPLATE)) == CHAT_LLAMA3);
    chat_template t;
    chat_template_init(&t, CHAT_LLAMA3);
    CHECK(!t.tools);
    chat_msg m[3] = {MSG("system", "\xe2\x80\x83 S \x1e"), MSG("user", " hi\xc2\xa0"), MSG("assistant", "\x1c\xc2\x85yo\x0b")};
    t_chat_same(path, "llama3-trim", &t, m, 3, NULL, -1, BOS, 1);
}

/* Detection: the file's template and 3.2's (its date from strftime_now when there is one) are
 * llama3.1; a template without the tool instruction, and ChatML or R1 ones that mention the
 * dates, are not. The literal ranges hold every typed special token, the template's own are outside. */
TEST(chat_llama31_detect_and_literals) {
    char *text = t_slurp(TEMPLATE);
    REQUIRE(text);
    chat_template t;
    REQUIRE(t_chat_template_of(text, &t) == 0);
    CHECK(t.kind == CHAT_LLAMA31 && t.tools && !t.default_system[0] && !t.date_now);
    CHECK(chat_by_name("llama3.1") == CHAT_LLAMA31 && !strcmp(chat_name(CHAT_LLAMA31), "llama3.1"));
    CHECK(chat_detect("llama3.1", 8) == CHAT_LLAMA31 && chat_by_name("llama3.2") == CHAT_UNKNOWN);
    CHECK(!chat_think_switch(CHAT_LLAMA31) && !strcmp(chat_call_key(CHAT_LLAMA31), "parameters") && chat_max_calls(CHAT_LLAMA31) == 1);
    const char *o, *c;
    chat_template_init(&t, CHAT_LLAMA31);
    CHECK(chat_reasoning(&t, &o, &c) == CHAT_THINK_NONE && !o && !c);
    /* Llama 3.2's date: the same text when the renderer has no strftime_now */
    static const char date31[] = "{%- set date_string = \"26 Jul 2024\" %}";
    char *at = strstr(text, date31);
    REQUIRE(at);
    size_t n = strlen(text), head = (size_t)(at - text);
    static const char date32[] = "{%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") "
                                 "%}\n    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}";
    char *t32 = malloc(n + sizeof date32);
    memcpy(t32, text, head), strcpy(t32 + head, date32), strcat(t32, at + sizeof date31 - 1);
    CHECK(chat_detect(t32, strlen(t32)) == CHAT_LLAMA31);
    char path[600];
    snprintf(path, sizeof path, "%s/llama32-template.jinja", t_tmpdir());
    FILE *fp = fopen(path, "w");
    REQUIRE(fp);
    fputs(t32, fp), fclose(fp);
    chat_tools tools = {DEFS, 2};
    chat_msg m[4] = {MSG("system", "S"), MSG("user", "Weather?"), CALL(WEATHER, 1), MSG("tool", "21")};
    t_chat_same(path, "llama32-tools", &t, m, 4, &tools, -1, BOS, 1);
    snprintf(t.date, sizeof t.date, "05 Dec 2026"); /* a renderer with strftime_now: its date */
    t_chat_same(path, "llama32-today", &t, m, 4, &tools, -1, BOS, 1);
    /* 3.2's file renders today's date (local time), 3.1's its fixed one */
    chat_template t2;
    REQUIRE(t_chat_template_of(t32, &t2) == 0);
    CHECK(t2.kind == CHAT_LLAMA31 && t2.date_now && !t2.date[0]);
    char want[64];
    time_t now = time(NULL);
    struct tm tm;
    REQUIRE(localtime_r(&now, &tm) && strftime(want, sizeof want, "Today Date: %d %b %Y\n", &tm));
    char *r = chat_render(&t2, NULL, m, 4, &tools, 1, NULL, NULL, NULL);
    CHECKF(strstr(r, want) != NULL, "3.2's file: no '%s' in '%.200s'", want, r);
    free(r);
    free(t32);
    /* not llama3.1 */
    int n_instr = 0; /* the instruction (twice: for the system turn and the user turn) says "arguments": not ours */
    for (char *p = text; (p = strstr(p, "\"parameters\": dictionary")) != NULL; n_instr++) memcpy(p + 1, "arguments\": ", 12);
    CHECK(n_instr == 2 && chat_detect(text, strlen(text)) == CHAT_LLAMA3);
    free(text);
    const char *chatml = "<|im_start|>system\nCutting Knowledge Date: December 2023 \"parameters\": dictionary of argument "
                         "name and its value<|start_header_id|><|end_header_id|><|im_end|>";
    CHECK(chat_detect(chatml, strlen(chatml)) == CHAT_CHATML);
    const char *r1 = "<\xef\xbd\x9cUser\xef\xbd\x9c><\xef\xbd\x9c" "Assistant\xef\xbd\x9c><\xef\xbd\x9c"
                     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c> Cutting Knowledge Date: December 2023";
    CHECK(chat_detect(r1, strlen(r1)) == CHAT_DEEPSEEK_R1);

    /* literal ranges: every "<|eot_id|>" typed (in the system text, a definition, the first user
     * message, a call's arguments, a tool result) lies in one; the template's own lie outside */
    chat_msg lm[5] = {MSG("system", "sys <|eot_id|>"), MSG("user", "u <|eot_id|>"), CALL(ADD, 1), MSG("tool", "r <|eot_id|>"),
                      MSG("user", "<|start_header_id|>")};
    chat_tools one = {DEFS, 1};
    size_t len, *lit;
    int n_lit;
    char *s = chat_render(&t, NULL, lm, 5, &one, 1, &len, &lit, &n_lit);
    int typed = 0, own = 0;
    for (const char *p = s; (p = strstr(p, "<|eot_id|>")) != NULL; p++) {
        size_t off = (size_t)(p - s);
        int in = 0;
        for (int i = 0; i < n_lit; i++) in |= off >= lit[2 * i] && off + 10 <= lit[2 * i + 1];
        typed += in, own += !in;
    }
    CHECKF(typed == 5 && own == 5, "%d typed <|eot_id|> in literal ranges, %d outside", typed, own);
    free(s), free(lit);
}
