/* test_jsonc.c — structured output's automaton (src/serve/jsonc.h): texts a schema allows are taken
 * whole and complete, texts it does not are refused at the byte where they go wrong; json_object; the
 * refused keywords; the mask over a small vocabulary. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "serve/jsonc.h"
#include "t.h"

static const char *S1 =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},\"color\":{\"enum\":[\"red\",\"green\"]},"
    "\"ok\":{\"type\":\"boolean\"},\"score\":{\"type\":[\"number\",\"null\"]},\"q\\\"k\":{\"const\":7}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false,\"title\":\"t\"}";

static jc_schema *compile_text(const char *text, char *why, size_t n) {
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    jc_schema *s = jc_compile(j, why, n);
    json_decref(j);
    return s;
}

/* the bytes taken before the first refused one (strlen when all are), and whether the text is whole */
static size_t taken(const jc_schema *s, const char *text, int *complete) {
    jc_state *st = jc_start(s);
    size_t i = 0;
    for (; text[i]; i++)
        if (jc_feed(st, text + i, 1)) break;
    *complete = jc_complete(st);
    jc_state_free(st);
    return i;
}

TEST(jsonc_schema_texts) {
    char why[256];
    jc_schema *s = compile_text(S1, why, sizeof why);
    REQUIRE(s);
    static const char *good[] = {
        "{\"name\": \"Ann\", \"age\": 31}",
        "{\"age\":-2,\"name\":\"B\\\"q\\u00e9\",\"tags\":[\"a\",\"b\"],\"color\":\"green\",\"ok\":false,\"score\":null}",
        "{ \"name\" : \"x\" ,\n  \"age\" : 0 , \"score\": 1.5e3, \"q\\\"k\": 7, \"tags\": [] }",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int complete;
        size_t k = taken(s, good[i], &complete);
        CHECKF(k == strlen(good[i]) && complete, "good %zu: taken %zu of %zu, complete %d", i, k, strlen(good[i]), complete);
    }
    static const struct { const char *text; size_t at; } bad[] = {
        {"{\"name\": \"Ann\"}", 14},              /* age is required */
        {"{\"nam\": 1}", 5},                     /* not a key */
        {"{\"age\": 1.5", 9},                    /* an integer */
        {"{\"tags\": [\"a\",\"b\",\"c\"]", 17},    /* two at most */
        {"{\"color\": \"blue\"", 11},
        {"{\"name\": \"A\", \"name\": \"B\"}", 15}, /* a key once */
        {"{\"x\": 1}", 2},                       /* no other keys */
        {"{\"age\": 01}", 9},
        {"[1]", 0},
        {"{\"name\": \"a\nb\"}", 11},             /* a raw newline in a string */
        {"{\"ok\": tru}", 10},
        {"{\"name\": \"A\", \"age\": 1} ", 23},     /* nothing after the value */
        {"{\"name\":\"a\",\"age\":1,\"tags\":[],\"color\":\"red\",\"ok\":true,\"score\":1,\"q\\\"k\":7,", 72}, /* no key left */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int complete;
        size_t k = taken(s, bad[i].text, &complete);
        CHECKF(k == bad[i].at, "bad %zu (%s): refused at %zu, want %zu", i, bad[i].text, k, bad[i].at);
    }
    jc_free(s);
}

TEST(jsonc_object_mode_and_roots) {
    char why[256];
    jc_schema *s = compile_text(NULL, why, sizeof why);
    REQUIRE(s);
    int complete;
    const char *t = "{\"a\": [1, {\"b\": null}, -0.5e-3, true], \"c\": \"d\", \"a\": {}}";
    CHECK(taken(s, t, &complete) == strlen(t) && complete);
    CHECK(taken(s, "{\"a\":", &complete) == 5 && !complete);
    CHECK(taken(s, "\"str\"", &complete) == 0);
    CHECK(taken(s, "{                 }", &complete) == 17); /* 16 blanks in a row at most */
    jc_free(s);
    s = compile_text("{\"type\":\"number\"}", why, sizeof why);
    REQUIRE(s);
    CHECK(taken(s, "12.5", &complete) == 4 && complete);
    CHECK(taken(s, "12.", &complete) == 3 && !complete);
    jc_free(s);
    s = compile_text("{\"enum\":[1, 12, \"x\"]}", why, sizeof why);
    REQUIRE(s);
    CHECK(taken(s, "1", &complete) == 1 && complete);
    CHECK(taken(s, "12", &complete) == 2 && complete);
    CHECK(taken(s, "13", &complete) == 1);
    jc_free(s);
}

TEST(jsonc_refuses_by_name) {
    static const struct { const char *schema, *word; } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "pattern"},
        {"{\"anyOf\":[{\"type\":\"string\"}]}", "anyOf"},
        {"{\"$ref\":\"#/x\"}", "$ref"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1}}}", "minimum"},
        {"{\"type\":\"object\",\"additionalProperties\":true}", "additionalProperties"},
        {"{\"type\":\"thing\"}", "thing"},
        {"{\"type\":\"object\",\"required\":[\"z\"]}", "required"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[256] = "";
        jc_schema *s = compile_text(cases[i].schema, why, sizeof why);
        CHECKF(!s && strstr(why, cases[i].word), "case %zu: %s", i, why);
        jc_free(s);
    }
}

TEST(jsonc_mask) {
    char why[256];
    jc_schema *s = compile_text("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}", why,
                                sizeof why);
    REQUIRE(s);
    const char *pieces[] = {"{", "\"", "\"n\":", "}", " ", "x", "12", "", "{\"n\": 3}"};
    int len[9];
    uint8_t eog[9] = {0, 0, 0, 0, 0, 0, 0, 1, 0};
    for (int i = 0; i < 9; i++) len[i] = (int)strlen(pieces[i]);
    jc_vocab v = {pieces, len, eog, 9};
    jc_state *st = jc_start(s);
    float row[9];
    for (int i = 0; i < 9; i++) row[i] = 1;
    CHECK(jc_mask(st, &v, row) == 3); /* "{", " ", the whole object */
    CHECK(row[0] == 1 && row[4] == 1 && row[8] == 1 && isinf(row[1]) && isinf(row[7]) && isinf(row[6]));
    REQUIRE(jc_feed(st, "{\"n\": 3}", 8) == 0);
    for (int i = 0; i < 9; i++) row[i] = 1;
    CHECK(jc_mask(st, &v, row) == 1 && row[7] == 1); /* only the end */
    CHECK(jc_feed(st, "x", 1) == -1 && jc_complete(st));
    jc_state_free(st);
    jc_free(s);
}
