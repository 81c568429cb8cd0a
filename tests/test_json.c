/* test_json.c — the JSON parser on valid and malformed input, and the writer round trip. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "t.h"

static struct json_doc *parse_ok(const char *s) {
    struct json_doc *d = NULL;
    char err[256];
    if (json_parse(s, strlen(s), NULL, &d, err, sizeof err)) {
        fprintf(stderr, "    unexpected error for %s: %s\n", s, err);
        return NULL;
    }
    return d;
}

/* 1 if parsing fails with a message containing want */
static int parse_fails(const char *s, size_t len, const struct json_opts *o, const char *want) {
    struct json_doc *d = NULL;
    char err[256] = "";
    if (json_parse(s, len, o, &d, err, sizeof err) == 0) { json_free(d); return 0; }
    if (d) return 0;
    if (!strstr(err, want)) { fprintf(stderr, "    '%s' lacks '%s'\n", err, want); return 0; }
    return 1;
}
#define FAILS(s, want) parse_fails(s, strlen(s), NULL, want)

TEST(json_values) {
    struct json_doc *d = parse_ok(" {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\ty\", \"o\": {}, \"e\": [] } ");
    REQUIRE(d);
    const struct json_value *r = json_root(d), *a = json_get(r, "a");
    CHECK(r->type == JSON_OBJECT && r->u.obj.n == 4);
    CHECK(a && a->type == JSON_ARRAY && a->u.arr.n == 5);
    CHECK(json_at(a, 1)->u.num == -2500 && json_at(a, 2)->type == JSON_TRUE && json_at(a, 4)->type == JSON_NULL);
    CHECK(json_at(a, 5) == NULL);
    CHECK(!strcmp(json_get_str(r, "s"), "x\ty"));
    CHECK(json_get(r, "o")->u.obj.n == 0 && json_get(r, "e")->u.arr.n == 0);
    int64_t i;
    CHECK(!json_get_int(r, "s", &i) && json_get(r, "missing") == NULL);
    json_free(d);
    d = parse_ok("{\"k\": 1, \"k\": 9007199254740993}");
    REQUIRE(d);
    CHECK(json_get_int(json_root(d), "k", &i) && i == 9007199254740992LL); /* last duplicate wins; double precision */
    json_free(d);
    d = parse_ok("\xEF\xBB\xBF\"bom\"");
    REQUIRE(d);
    CHECK(!strcmp(json_root(d)->u.str.s, "bom"));
    json_free(d);
}

TEST(json_unescape) {
    struct json_doc *d = parse_ok("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\\ud83d\\ude00 \xc3\xa9\"");
    REQUIRE(d);
    const struct json_value *v = json_root(d);
    const char *want = "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xc3\xa9";
    CHECK(v->u.str.len == strlen(want) && !memcmp(v->u.str.s, want, strlen(want)));
    json_free(d);
    d = parse_ok("\"a\\u0000b\"");
    REQUIRE(d);
    CHECK(json_root(d)->u.str.len == 3 && json_root(d)->u.str.s[1] == 0);
    json_free(d);
}

TEST(json_malformed) {
    CHECK(FAILS("", "unexpected end"));
    CHECK(FAILS("{\"a\": 1", "unterminated object"));
    CHECK(FAILS("[1, 2", "unterminated array"));
    CHECK(FAILS("\"abc", "unterminated string"));
    CHECK(FAILS("\"abc\\", "unterminated string"));
    CHECK(FAILS("{\"a\" 1}", "expected ':'"));
    CHECK(FAILS("{a: 1}", "expected string key"));
    CHECK(FAILS("[1 2]", "expected ',' or ']'"));
    CHECK(FAILS("[1,]", "value expected"));
    CHECK(FAILS("{\"a\":1,}", "expected string key"));
    CHECK(FAILS("\"\\x\"", "bad escape"));
    CHECK(FAILS("\"\\u12g4\"", "bad hex digit"));
    CHECK(FAILS("\"\\u12\"", "truncated \\u escape"));
    CHECK(FAILS("\"\\ud800\"", "unpaired high surrogate"));
    CHECK(FAILS("\"\\ud800\\u0041\"", "unpaired high surrogate"));
    CHECK(FAILS("\"\\udc00\"", "unpaired low surrogate"));
    CHECK(FAILS("\"a\tb\"", "control character"));
    CHECK(FAILS("01", "trailing characters"));
    CHECK(FAILS("1.", "digit expected after '.'"));
    CHECK(FAILS("1e+", "digit expected in exponent"));
    CHECK(FAILS("-", "truncated number"));
    CHECK(FAILS("+1", "unexpected character"));
    CHECK(FAILS("1e999", "out of range"));
    CHECK(FAILS("tru", "bad literal"));
    CHECK(FAILS("nul", "bad literal"));
    CHECK(FAILS("{} {}", "trailing characters"));
    CHECK(FAILS("[1]\n x", "line 2 col 2"));
    CHECK(parse_fails("[1]\0", 4, NULL, "trailing characters"));
    CHECK(parse_fails(NULL, 0, NULL, "unexpected end"));
}

TEST(json_depth_limit) {
    char deep[600];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    deep[400] = 0;
    CHECK(FAILS(deep, "nesting too deep")); /* default limit 128 */
    struct json_opts o = {.max_depth = 300};
    struct json_doc *d;
    char err[128];
    CHECK(json_parse(deep, 400, &o, &d, err, sizeof err) == 0);
    json_free(d);
    o.max_depth = 2;
    CHECK(json_parse("[[1]]", 5, &o, &d, err, sizeof err) == 0); /* depth 2 is allowed */
    json_free(d);
    CHECK(parse_fails("[[[1]]]", 7, &o, "nesting too deep"));
    CHECK(parse_fails("{\"a\":{\"b\":{}}}", 14, &o, "nesting too deep"));
}

TEST(json_utf8) {
    /* Invalid UTF-8 is an error by default; with replace_invalid each bad byte becomes U+FFFD. */
    CHECK(FAILS("\"\xff\"", "invalid UTF-8"));
    CHECK(FAILS("\"\xc0\xaf\"", "invalid UTF-8"));          /* overlong '/' */
    CHECK(FAILS("\"\xed\xa0\x80\"", "invalid UTF-8"));      /* encoded surrogate */
    CHECK(FAILS("\"\xf4\x90\x80\x80\"", "invalid UTF-8"));  /* > U+10FFFF */
    CHECK(FAILS("\"\xe2\x82\"", "invalid UTF-8"));          /* truncated sequence */
    struct json_opts o = {.replace_invalid = 1};
    struct json_doc *d;
    char err[128];
    REQUIRE(json_parse("\"a\xffz\\udc00\"", 11, &o, &d, err, sizeof err) == 0);
    CHECK(!strcmp(json_root(d)->u.str.s, "a\xef\xbf\xbdz\xef\xbf\xbd"));
    json_free(d);
}

TEST(json_writer) {
    struct json_out o;
    json_out_init(&o);
    json_out_obj_begin(&o);
    json_out_key(&o, "id");
    json_out_str(&o, "q\"1\n\x01\xc3\xa9");
    json_out_key(&o, "n");
    json_out_num(&o, 0.1);
    json_out_key(&o, "i");
    json_out_int(&o, -42);
    json_out_key(&o, "l");
    json_out_arr_begin(&o);
    json_out_bool(&o, 1);
    json_out_null(&o);
    json_out_num(&o, NAN);
    json_out_fixed(&o, 2.0 / 3.0, 3);
    json_out_fixed(&o, -INFINITY, 3);
    json_out_fixed(&o, 1e6, 0);
    json_out_arr_end(&o);
    json_out_obj_end(&o);
    CHECK(!strcmp(o.b.p, "{\"id\":\"q\\\"1\\n\\u0001\xc3\xa9\",\"n\":0.1,\"i\":-42,\"l\":[true,null,null,0.667,null,1000000]}"));
    struct json_doc *d = parse_ok(o.b.p);
    REQUIRE(d);
    CHECK(!strcmp(json_get_str(json_root(d), "id"), "q\"1\n\x01\xc3\xa9"));
    CHECK(json_get(json_root(d), "n")->u.num == 0.1);
    json_free(d);
    json_out_reset(&o);
    json_out_obj_begin(&o);
    json_out_keyn(&o, "a\0b", 3);
    json_out_int(&o, 1);
    json_out_obj_end(&o);
    CHECK(!strcmp(o.b.p, "{\"a\\u0000b\":1}"));
    json_out_free(&o);
    char small[4];
    CHECK(json_escape(small, sizeof small, "abcdef", 6) == 8 && !strcmp(small, "\"ab"));
    CHECK(json_escape(NULL, 0, "\xff", 1) == 8); /* "\ufffd" with quotes */
}

/* json_add_indented: Python's json.dumps(x, indent=N) from json.dumps(x)'s text (expectations from
 * Python 3); blanks between tokens dropped, structural bytes inside strings left alone; text that
 * is not JSON is copied without reading past its end. */
TEST(json_add_indented_like_python) {
    static const struct { const char *in; int indent; const char *want; } cases[] = {
        {"{\"type\": \"function\", \"function\": {\"name\": \"f\", \"d\": \"a \\\"q\\\" \\\\ , : { } [ ] \xc3\xa9\", \"p\": {}, "
         "\"l\": [], \"n\": [1, 2.5, null, true, {\"x\": []}]}}",
         4,
         "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"d\": \"a \\\"q\\\" \\\\ , : { } [ ] "
         "\xc3\xa9\",\n        \"p\": {},\n        \"l\": [],\n        \"n\": [\n            1,\n            2.5,\n            null,\n"
         "            true,\n            {\n                \"x\": []\n            }\n        ]\n    }\n}"},
        {"[ ]", 4, "[]"},
        {"\"s\"", 4, "\"s\""},
        {"[[]]", 2, "[\n  []\n]"},
        {"{\"a\":1,\"b\" :[ 1 ,2]}", 4, "{\n    \"a\": 1,\n    \"b\": [\n        1,\n        2\n    ]\n}"},
        {"}]x \"open", 1, "\n}\n]x\"open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tkv_buf b = {0};
        json_add_indented(&b, cases[i].in, strlen(cases[i].in), cases[i].indent);
        CHECKF(!strcmp(tkv_buf_str(&b), cases[i].want), "case %zu: '%s'", i, tkv_buf_str(&b));
        tkv_buf_free(&b);
    }
    tkv_buf b = {0};
    json_add_str(&b, "q\"\n\x01\xff", 5);
    CHECK(!strcmp(tkv_buf_str(&b), "\"q\\\"\\n\\u0001\\ufffd\""));
    tkv_buf_free(&b);
}
