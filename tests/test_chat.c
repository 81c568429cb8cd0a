/* test_chat.c - chat formats: the real Qwen2.5 ChatML prompt must encode to exactly the ids llama.cpp
 * gives (fixtures/real/chat.tokens); DeepSeek-R1 opens the assistant turn with "<think>\n" and has one
 * BOS; special-token text typed by a user stays text; detection and naming. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "gguf/gguf.h"
#include "model/chat.h"
#include "model/tokenizer.h"
#include "model/unicode.h"
#include "t.h"

#define R1_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define R1_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define R1_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

typedef struct { gguf_file g; tok_vocab *v; } loaded;

/* -1 when the vocabulary is missing (the test is skipped) or does not load (the test fails). */
static int load(const char *rel, loaded *l) {
    char err[256];
    if (!t_need(rel)) return -1;
    if (gguf_open(t_shared(rel), &l->g, err, sizeof err)) { CHECKF(0, "%s", err); return -1; }
    l->v = tok_load(&l->g, err, sizeof err);
    if (!l->v) { CHECKF(0, "%s: %s", rel, err); gguf_free(&l->g); return -1; }
    return 0;
}
static void unload(loaded *l) { tok_free(l->v); gguf_free(&l->g); }


TEST(chat_qwen_real_prompt) {
    loaded q;
    if (load("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf", &q)) return;
    size_t n, nt;
    char *txt = t_slurp_n(t_shared("fixtures/real/chat.txt"), &n), *tk = t_slurp_n(t_shared("fixtures/real/chat.tokens"), &nt);
    REQUIRE(txt && tk);
    /* the user message is what the template wraps */
    const char *open = "<|im_start|>user\n", *close = "<|im_end|>\n<|im_start|>assistant\n";
    char *u0 = strstr(txt, open), *u1 = u0 ? strstr(u0, close) : NULL;
    REQUIRE(u0 && u1);
    u0 += strlen(open);
    *u1 = 0;
    chat_template t;
    char err[256];
    REQUIRE(chat_template_from_gguf(&q.g, NULL, &t, err, sizeof err) == 0);
    CHECK(t.kind == CHAT_CHATML);
    CHECK(!strcmp(t.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    chat_msg m = {"user", u0, NULL, 0, NULL};
    size_t len;
    char *r = chat_render(&t, q.v, &m, 1, NULL, 1, &len, NULL, NULL);
    int32_t *ids;
    int k = chat_encode(&t, q.v, &m, 1, NULL, 1, &ids);
    *u1 = '<';
    CHECK(len == n && !memcmp(r, txt, n));
    int want[256], nw = 0;
    for (char *p = tk, *e; nw < 256; p = e) {
        long x = strtol(p, &e, 10);
        if (e == p) break;
        want[nw++] = (int)x;
    }
    CHECK(nw == 109);
    CHECKF(k == nw, "got %d ids, want %d", k, nw);
    int same = k == nw;
    for (int i = 0; same && i < k; i++) same = ids[i] == want[i];
    CHECK(same);
    free(ids); free(r); free(txt); free(tk);
    unload(&q);
}

TEST(chat_qwen_system_and_injection) {
    loaded q;
    if (load("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf", &q)) return;
    chat_template t;
    chat_template_init(&t, CHAT_CHATML);
    chat_msg m[3] = {{"system", "Be brief.", NULL, 0, NULL}, {"user", "say <|im_end|> please", NULL, 0, NULL},
                     {"assistant", "ok", NULL, 0, NULL}};
    size_t len;
    char *r = chat_render(&t, q.v, m, 3, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(r, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nsay <|im_end|> please<|im_end|>\n"
                     "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>assistant\n"));
    int32_t *ids;
    int k = chat_encode(&t, q.v, m, 3, NULL, 1, &ids), n_end = 0;
    for (int i = 0; i < k; i++) n_end += ids[i] == 151645;
    CHECK(n_end == 3); /* the template's three, not the user's */
    free(ids);
    free(r);
    unload(&q);
}

TEST(chat_r1_think_and_bos) {
    loaded r;
    if (load("fixtures/tokenizer/extra/vocab-r1-distill-qwen-7b.gguf", &r)) return;
    chat_template t;
    char err[256];
    REQUIRE(chat_template_from_gguf(&r.g, NULL, &t, err, sizeof err) == 0);
    CHECK(t.kind == CHAT_DEEPSEEK_R1);
    chat_msg m[3] = {{"user", "1+1?", NULL, 0, NULL}, {"assistant", "<think>\nhmm\n</think>\n\n2", NULL, 0, NULL},
                     {"user", "2+2?", NULL, 0, NULL}};
    size_t len;
    char *s = chat_render(&t, r.v, m, 3, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(s, R1_BOS R1_USER "1+1?" R1_ASSISTANT "\n\n2" R1_EOS R1_USER "2+2?" R1_ASSISTANT "<think>\n"));
    free(s);
    chat_msg one = {"user", "Hi", NULL, 0, NULL};
    int32_t *ids;
    int k = chat_encode(&t, r.v, &one, 1, NULL, 1, &ids);
    /* BOS <｜User｜> Hi <｜Assistant｜> <think> \n : one BOS only */
    CHECK(k == 6 && ids[0] == 151646 && ids[1] == 151644 && ids[3] == 151645 && ids[4] == 151648 && ids[5] == 198);
    int n_bos = 0;
    for (int i = 0; i < k; i++) n_bos += ids[i] == 151646;
    CHECK(n_bos == 1);
    free(ids);
    /* a system prompt goes raw after BOS */
    chat_msg sm[2] = {{"system", "S", NULL, 0, NULL}, {"user", "U", NULL, 0, NULL}};
    s = chat_render(&t, r.v, sm, 2, NULL, 0, &len, NULL, NULL);
    CHECK(!strcmp(s, R1_BOS "S" R1_USER "U"));
    free(s);
    unload(&r);
}

TEST(chat_detect_and_names) {
    CHECK(chat_detect("chatml", 6) == CHAT_CHATML);
    const char *q = "{% for m in messages %}<|im_start|>{{ m.role }}";
    CHECK(chat_detect(q, strlen(q)) == CHAT_CHATML);
    const char *phi4 = "<|im_start|>x<|im_sep|>";
    CHECK(chat_detect(phi4, strlen(phi4)) == CHAT_UNKNOWN);
    const char *l3 = "<|start_header_id|>' + role + '<|end_header_id|>";
    CHECK(chat_detect(l3, strlen(l3)) == CHAT_LLAMA3);
    const char *r1 = R1_USER "x" R1_ASSISTANT "y" R1_EOS;
    CHECK(chat_detect(r1, strlen(r1)) == CHAT_DEEPSEEK_R1);
    CHECK(chat_by_name("deepseek-r1") == CHAT_DEEPSEEK_R1 && chat_by_name("llama3") == CHAT_LLAMA3);
    CHECK(chat_by_name("vicuna") == CHAT_UNKNOWN);
    chat_template t;
    chat_template_init(&t, CHAT_LLAMA3);
    chat_msg m = {"user", "  hi \n", NULL, 0, NULL};
    size_t len;
    char *s = chat_render(&t, NULL, &m, 1, NULL, 1, &len, NULL, NULL);
    CHECK(!strcmp(s, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    free(s);
}

/* a model without a template: a clear error, and choosing by name works */
TEST(chat_template_missing_or_named) {
    chat_template t;
    gguf_file g;
    char err[256] = "";
    NEED("fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf");
    REQUIRE(gguf_open(t_shared("fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf"), &g, err, sizeof err) == 0);
    CHECK(chat_template_from_gguf(&g, NULL, &t, err, sizeof err) != 0 && strstr(err, "chatml"));
    CHECK(chat_template_from_gguf(&g, "nope", &t, err, sizeof err) != 0 && strstr(err, "nope"));
    CHECK(chat_template_from_gguf(&g, "chatml", &t, err, sizeof err) == 0 && t.kind == CHAT_CHATML);
    gguf_free(&g);
}

/* Any bytes in a message render and encode, whatever ids they become: each invalid byte is U+FFFD,
 * three bytes of the byte alphabet, so often three ids (an earlier id buffer of bytes + 8 aborted).
 * For every format, on a small vocabulary (the fixture's 1024 tokens, which merge nothing of U+FFFD)
 * and a real one: the ids are the whole encoding and decode to the rendered text with U+FFFD for
 * each bad byte. */
static char *fffd_text(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(3 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        k += (size_t)tok_utf8_encode(cp, o + k);
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

TEST(chat_encode_any_bytes) {
    static const char *vocabs[] = {"fixtures/models/qwen2-Q8_0.gguf", "fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf"};
    char contents[6][1200];
    memset(contents[0], 0xff, 200), contents[0][200] = 0;                   /* bytes that are never UTF-8 */
    memset(contents[1], 0xc3, 300), contents[1][300] = 0;                   /* lead bytes without their tail */
    for (int i = 0; i < 100; i++) memcpy(contents[2] + 3 * i, "\xed\xa0\x80", 3); /* encoded surrogates */
    contents[2][300] = 0;
    for (int i = 0; i < 150; i++) memcpy(contents[3] + 2 * i, "\xc0\xaf", 2);     /* overlongs */
    contents[3][300] = 0;
    uint32_t x = 12345;
    for (int i = 0; i < 1000; i++) { x = x * 1103515245u + 12345u; contents[4][i] = (char)((x >> 16) % 255 + 1); }
    contents[4][1000] = 0;                                                  /* random bytes, no NUL */
    snprintf(contents[5], sizeof contents[5], "\xff<|im_end|>\xfe<|im_start|>\xf8\x88\x80\x80\x80 ok");
    for (int vi = 0; vi < 2; vi++) {
        loaded l;
        if (load(vocabs[vi], &l)) return;
        for (int kind = CHAT_CHATML; kind < CHAT_KINDS; kind++) {
            chat_template t;
            chat_template_init(&t, (chat_kind)kind);
            for (int c = 0; c < 6; c++) {
                chat_msg m[2] = {{"system", "\xff\xfe sys", NULL, 0, NULL}, {"user", contents[c], NULL, 0, NULL}};
                size_t len, *lit, dn, wn;
                int n_lit;
                char *r = chat_render(&t, l.v, m, 2, NULL, 1, &len, &lit, &n_lit);
                int32_t *ids = NULL;
                int k = chat_encode(&t, l.v, m, 2, NULL, 1, &ids);
                int whole = tok_encode_protected(l.v, r, len, TOK_PARSE_SPECIAL, lit, n_lit, NULL, 0);
                CHECKF(k > 0 && k == whole, "%s %s content %d: %d ids, the encoding has %d", vocabs[vi], chat_name((chat_kind)kind), c, k, whole);
                char *d = tok_decode(l.v, ids, k, 1, &dn), *want = fffd_text(r, len, &wn);
                CHECKF(dn == wn && !memcmp(d, want, dn), "%s %s content %d: decodes otherwise", vocabs[vi], chat_name((chat_kind)kind), c);
                if (vi == 0 && c == 0) CHECKF(k > 600, "%d ids for 200 bad bytes", k);
                free(d); free(want); free(ids); free(r); free(lit);
            }
        }
        unload(&l);
    }
}

/* The same through the commands: `run --chat` with each template and `tokenize` of such text. */
TEST(chat_cli_invalid_bytes) {
    NEED("fixtures/models/qwen2-Q8_0.gguf");
    const char *model = t_shared("fixtures/models/qwen2-Q8_0.gguf");
    static const char *tmpl[] = {"chatml", "deepseek-r1", "llama3"};
    char cmd[2048], bad[201];
    memset(bad, 0xff, 200);
    bad[200] = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s run -m %s --chat --template %s -n 2 -p '%s' >/dev/null 2>&1", t_bin(), model, tmpl[i], bad);
        int st = system(cmd);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run --chat --template %s: status %d", tmpl[i], st);
    }
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p '%s' 2>&1", t_bin(), model, bad);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    int n = 0, c, prev = ' ';
    while ((c = fgetc(p)) != EOF) { n += prev == ' ' && c >= '0' && c <= '9'; prev = c; }
    int st = pclose(p);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && n == 600, "tokenize: status %d, %d ids", st, n);
}

/* Qwen2.5's tools (tests/chat_tools.py's conversation): the renderer's text equals the file's own Jinja
 * template rendered by jinja2 (Hugging Face's conventions), with and without a system message, for the
 * Qwen2.5-Coder vocabulary (whose instruction writes {{"name": ...}}) and, when the model is cached,
 * the 0.5B's file (which writes {"name": ...}); the template's <tool_call> is one token, a user's typed
 * <|im_end|> stays text; a file without tools renders none and refuses tool turns. */
static const char *const TOOL_DEFS[2] = {
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather in a city "
    "(temp\xc3\xa9rature, <b>wind</b>)\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}",
    "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": \"a + b\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": \"integer\"}}}}}"};
static const chat_call CALLS1[2] = {{"get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"},
                                    {"get_weather", "{\"city\": \"Rome\"}"}};
static const chat_call CALLS2[1] = {{"add", "{\"a\": 1.5, \"b\": 2}"}};

static void tools_case(const char *gguf_path, const char *tag, int no_system) {
    char out[600], cmd[2048], err[256];
    snprintf(out, sizeof out, "%s/chat-tools-%s-%d.txt", t_tmpdir(), tag, no_system);
    snprintf(cmd, sizeof cmd, "python3 tests/chat_tools.py --bin %s --gguf %s --out %s%s", t_bin(), gguf_path, out,
             no_system ? " --no-system" : "");
    int st = system(cmd), rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) SKIP("jinja2 missing (pip install jinja2)");
    REQUIRE(rc == 0);
    gguf_file g;
    REQUIRE(gguf_open(gguf_path, &g, err, sizeof err) == 0);
    tok_vocab *v = tok_load(&g, err, sizeof err);
    REQUIRE(v);
    chat_template t;
    REQUIRE(chat_template_from_gguf(&g, NULL, &t, err, sizeof err) == 0);
    CHECK(t.kind == CHAT_CHATML && t.tools);
    chat_msg m[9] = {{"system", "You are terse.", NULL, 0, NULL},
                     {"user", "Weather in Paris and Rome? <|im_end|>", NULL, 0, NULL},
                     {"assistant", "", CALLS1, 2, NULL},
                     {"tool", "{\"temp\": 21}", NULL, 0, NULL},
                     {"tool", "18 degrees", NULL, 0, NULL},
                     {"assistant", "Let me add.", CALLS2, 1, NULL},
                     {"tool", "3.5", NULL, 0, NULL},
                     {"assistant", "Paris 21, Rome 18.", NULL, 0, NULL},
                     {"user", "Thanks", NULL, 0, NULL}};
    chat_tools tools = {TOOL_DEFS, 2};
    size_t len, wn;
    char *r = chat_render(&t, v, m + no_system, 9 - no_system, &tools, 1, &len, NULL, NULL), *want = t_slurp_n(out, &wn);
    REQUIRE(r && want);
    size_t at = 0;
    while (at < len && at < wn && r[at] == want[at]) at++;
    CHECKF(len == wn && at == len, "%s: differs from the template at byte %zu: ours '%.40s' template '%.40s'", tag, at, r + at,
           want + at);
    int32_t *ids;
    int k = chat_encode(&t, v, m + no_system, 9 - no_system, &tools, 1, &ids), n_call = 0, n_end = 0;
    for (int i = 0; i < k; i++) n_call += ids[i] == 151657, n_end += ids[i] == 151645;
    /* 5 <tool_call>: two in the instruction, three calls; 8 turns end (the user's typed one is text) */
    CHECKF(n_call == 5 && n_end == 8, "%s: %d <tool_call> ids, %d <|im_end|>", tag, n_call, n_end);
    free(ids), free(r), free(want);
    tok_free(v);
    gguf_free(&g);
}

TEST(chat_tools_match_template) {
    if (!t_need("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf")) return;
    const char *coder = t_shared("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf");
    tools_case(coder, "coder-vocab", 0);
    tools_case(coder, "coder-vocab", 1);
    const char *real = t_need_model("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf");
    if (real) tools_case(real, "0.5b", 0);
    /* a ChatML file without tools: none rendered, no tool turn taken by the public API's check */
    chat_template t;
    chat_template_init(&t, CHAT_CHATML);
    CHECK(!t.tools);
}
