/* test_chat_ids.c — tools/chat_ids.c, the ids a conversation adds after the held ones: held ids
 * spelled otherwise than the tokenizer would (as a model may sample them) are kept and only the rest
 * is tokenized; a text that differs inside the held part, or is shorter, is no prefix; no held ids
 * give the whole text; special-token text in the rest becomes the special token. On the fixture
 * model's vocabulary (and Qwen2.5's for the special tokens); skipped without the shared folder. */
#include <stdlib.h>
#include <string.h>

#include "../tools/chat_ids.h"
#include "t.h"

static tkv_model *open_vocab(const char *rel) {
    const char *path = t_need(rel);
    if (!path) return NULL;
    tkv_model_params p;
    tkv_model_params_default(&p);
    p.vocab_only = 1;
    tkv_model *m = NULL;
    char err[256];
    if (tkv_model_open(path, &p, &m, err, sizeof err)) CHECKF(0, "%s: %s", rel, err);
    return m;
}

static int tokenize(tkv_model *m, const char *s, int flags, int32_t **ids) {
    return tkv_tokenize_alloc(m, s, strlen(s), flags, ids);
}

static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

#define FIXTURE "fixtures/models/qwen2-Q8_0.gguf"

TEST(chat_ids_tail_after_held) {
    tkv_model *m = open_vocab(FIXTURE);
    if (!m) return;
    const char *text = "Hello world, this is the rest of the conversation.";
    const char *head = "Hello world,";
    /* the held ids spell the head one byte-token at a time: not what tokenizing it gives, as a
     * model's samples need not be, and they must stay as they are */
    int32_t held[32];
    int n_held = 0;
    for (const char *p = head; *p; p++) {
        int32_t *one = NULL;
        REQUIRE(tokenize(m, (char[]){*p, 0}, 0, &one) == 1);
        held[n_held++] = one[0];
        free(one);
    }
    int32_t *canon = NULL;
    int n_canon = tokenize(m, head, 0, &canon);
    CHECK(n_canon > 0 && n_canon < n_held); /* so the spelling above is really another one */
    int32_t *want = NULL, *got = NULL;
    int n_want = tokenize(m, text + strlen(head), TKV_TOK_PARSE_SPECIAL, &want);
    int n = chat_ids_after(m, held, n_held, text, strlen(text), &got);
    CHECKF(same_ids(got, n, want, n_want), "%d ids, want %d", n, n_want);
    /* the held ids and the tail spell the whole text again */
    int32_t all[128];
    REQUIRE(n >= 0 && n_held + n <= 128);
    memcpy(all, held, (size_t)n_held * sizeof *held);
    memcpy(all + n_held, got, (size_t)n * sizeof *got);
    size_t len;
    char *back = tkv_detokenize(m, all, n_held + n, 1, &len);
    CHECK(back && len == strlen(text) && !memcmp(back, text, len));
    free(back);
    free(got);
    /* held ids that are the whole text: nothing to add */
    got = (int32_t *)1;
    CHECK(chat_ids_after(m, held, n_held, head, strlen(head), &got) == 0 && got == NULL);
    free(canon);
    free(want);
    tkv_model_close(m);
}

TEST(chat_ids_not_a_prefix) {
    tkv_model *m = open_vocab(FIXTURE);
    if (!m) return;
    int32_t *held = NULL, *got = (int32_t *)1;
    int n_held = tokenize(m, "Hello world, this is", 0, &held);
    REQUIRE(n_held > 2);
    const char *other = "Hello World, this is the rest"; /* one byte differs inside the held part */
    CHECK(chat_ids_after(m, held, n_held, other, strlen(other), &got) == CHAT_IDS_NOT_PREFIX && got == NULL);
    const char *shorter = "Hello world, th"; /* the held ids reach past the text */
    CHECK(chat_ids_after(m, held, n_held, shorter, strlen(shorter), &got) == CHAT_IDS_NOT_PREFIX);
    int32_t bad = 1 << 20; /* an id out of the vocabulary is an error, not a mismatch */
    CHECK(chat_ids_after(m, &bad, 1, other, strlen(other), &got) == TKV_ERR);
    free(held);
    tkv_model_close(m);
}

TEST(chat_ids_empty_held) {
    tkv_model *m = open_vocab(FIXTURE);
    if (!m) return;
    const char *text = "a whole conversation, tokenized at once";
    int32_t *want = NULL, *got = NULL;
    int n_want = tokenize(m, text, TKV_TOK_PARSE_SPECIAL, &want);
    int n = chat_ids_after(m, NULL, 0, text, strlen(text), &got);
    CHECK(n > 0 && same_ids(got, n, want, n_want));
    free(got);
    free(want);
    tkv_model_close(m);
}

TEST(chat_ids_special_tokens_in_the_rest) {
    tkv_model *m = open_vocab("fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf");
    if (!m) return;
    int32_t *held = NULL, *got = NULL, *im_start = NULL;
    REQUIRE(tokenize(m, "<|im_start|>", TKV_TOK_PARSE_SPECIAL, &im_start) == 1);
    int n_held = tokenize(m, "<|im_start|>user\nhi<|im_end|>\n", TKV_TOK_PARSE_SPECIAL, &held);
    REQUIRE(n_held > 2 && held[0] == im_start[0]);
    const char *text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    int n = chat_ids_after(m, held, n_held, text, strlen(text), &got);
    CHECKF(n >= 2 && got[0] == im_start[0], "%d ids, the first %d (want <|im_start|> = %d)", n, n > 0 ? got[0] : -1,
           im_start[0]);
    free(got);
    free(held);
    free(im_start);
    tkv_model_close(m);
}
