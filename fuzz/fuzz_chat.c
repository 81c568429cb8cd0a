/* fuzz_chat.c — libFuzzer target for chat rendering (src/model/chat.c) of arbitrary messages and
 * templates, and the protected encoding of the result (tok_encode_protected).
 * Input: byte 0 picks the format (ChatML, DeepSeek-R1, Llama 3 or with bit 4 Llama 3.1, Qwen3), whether
 * the generation prompt is added, Qwen3's thinking off (bit 5) and reasoning_content (bit 6: each
 * assistant message's own content again); bit 7 set means "the rest is a Jinja template string": it is put into an in-memory GGUF
 * as tokenizer.chat_template and detected (chat_template_from_gguf, the default system prompt
 * scan). Otherwise the rest is messages split at 0x1E, each starting with a role byte (system,
 * user, assistant, or the message's own first line as a role). Checks: the rendered text has the
 * length it says, each literal range lies inside it and holds (a part of) some caller text (as the
 * format may re-encode it: a JSON string, an indented definition), chat_check answers, and
 * decoding the ids gives the rendered text back (U+FFFD for each invalid byte): the encoding loses
 * nothing and special-token text typed in a message stays text. The vocabulary (Qwen2.5's, with its
 * chat tokens) comes from $TIERKV_SHARED (default ../shared). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jsontext.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "model/chat.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

static gguf_file g;
static tok_vocab *v;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *root = getenv("TIERKV_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf", root ? root : "../shared");
    if (gguf_open(path, &g, err, sizeof err) || !(v = tok_load(&g, err, sizeof err))) {
        fprintf(stderr, "fuzz_chat: %s: %s\n", path, err);
        abort();
    }
    return 0;
}

static void template_from_text(const char *t) {
    gguf_writer *w = gguf_writer_begin(0);
    gguf_writer_add_str(w, "tokenizer.chat_template", t);
    char *mem = NULL, err[256];
    size_t n = 0;
    FILE *fp = open_memstream(&mem, &n);
    TKV_ASSERT(fp && gguf_writer_open_stream(w, fp, err, sizeof err) == 0 && gguf_writer_close(w, err, sizeof err) == 0);
    fclose(fp);
    gguf_file f;
    TKV_ASSERT(gguf_parse((const uint8_t *)mem, n, &f, err, sizeof err) == 0);
    chat_template ct;
    err[0] = 0;
    if (chat_template_from_gguf(&f, NULL, &ct, err, sizeof err)) TKV_ASSERT(err[0]);
    else TKV_ASSERT(ct.kind != CHAT_UNKNOWN && strlen(ct.default_system) < sizeof ct.default_system);
    gguf_free(&f);
    free(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 8192) return 0;
    char *s = malloc(size);
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0; /* messages are C strings: an input 0x00 ends one early */
    if (data[0] & 0x80) {
        template_from_text(s);
        free(s);
        return 0;
    }
    chat_template t;
    chat_kind kind = (chat_kind)(CHAT_CHATML + data[0] % 4);
    if (kind == CHAT_LLAMA3 && ((data[0] >> 4) & 1)) kind = CHAT_LLAMA31;
    chat_template_init(&t, kind);
    int gen = (data[0] >> 2) & 1, reasoning = (data[0] >> 6) & 1;
    t.think_off = chat_think_switch(t.kind) && ((data[0] >> 5) & 1);
    /* bit 3: tools (two definitions; every assistant message also carries one call, two when its
     * content's length is odd); bit 4: Qwen2.5-Coder's braces (ChatML) */
    t.tools = (data[0] >> 3) & 1;
    t.tools_braces = (data[0] >> 4) & 1;
    static const char *const defs[2] = {"{\"type\": \"function\"}", "<|im_end|>{}"};
    static const chat_call calls[2] = {{"f", "{}"}, {"g<|im_end|>", "\"{\\\"k\\\": [1, {}]}\""}};
    chat_tools tools = {defs, t.tools ? 2 : 0};
    chat_msg msgs[16];
    int n = 0;
    static const char *const roles[4] = {"system", "user", "assistant", "tool"};
    for (char *p = s; n < 16;) {
        char *end = strchr(p, 0x1e);
        if (end) *end = 0;
        unsigned r = (unsigned char)*p;
        if (*p) p++;
        if (r % 5 < 4) {
            msgs[n] = (chat_msg){.role = roles[r % 5], .content = p};
            if (t.tools && r % 5 == 2) msgs[n].tool_calls = calls, msgs[n].n_tool_calls = 1 + (int)(strlen(p) & 1);
            if (reasoning && r % 5 == 2) msgs[n].reasoning_content = p;
            n++;
        } else {
            char *nl = strchr(p, '\n');
            if (nl) *nl = 0;
            msgs[n++] = (chat_msg){.role = p, .content = nl ? nl + 1 : ""};
        }
        if (!end) break;
        p = end + 1;
    }
    char why[256] = "";
    if (chat_check(&t, msgs, n, &tools, why, sizeof why)) TKV_ASSERT(why[0]);
    size_t len, *lit;
    int n_lit;
    char *r = chat_render(&t, v, msgs, n, &tools, gen, &len, &lit, &n_lit);
    TKV_ASSERT(r && strlen(r) <= len && r[len] == 0);
    /* the caller's texts, and as a format may re-encode them: a content as a JSON string, a definition indented */
    tkv_buf texts[2 * 16 + 2 * 2 + 4];
    int nt = 0;
    for (int k = 0; k < 2; k++) {
        texts[nt] = (tkv_buf){0}, tkv_buf_adds(&texts[nt], defs[k]), nt++;
        texts[nt] = (tkv_buf){0}, json_add_indented(&texts[nt], defs[k], strlen(defs[k]), 4), nt++;
        texts[nt] = (tkv_buf){0}, tkv_buf_adds(&texts[nt], calls[k].name), nt++;
        texts[nt] = (tkv_buf){0}, tkv_buf_adds(&texts[nt], calls[k].arguments), nt++;
    }
    for (int m = 0; m < n; m++) {
        texts[nt] = (tkv_buf){0}, tkv_buf_adds(&texts[nt], msgs[m].content), nt++;
        texts[nt] = (tkv_buf){0}, json_add_str(&texts[nt], msgs[m].content, strlen(msgs[m].content)), nt++;
    }
    for (int i = 0; i < n_lit; i++) { /* each literal range is some caller text */
        TKV_ASSERT(lit[2 * i] <= lit[2 * i + 1] && lit[2 * i + 1] <= len && (i == 0 || lit[2 * i - 1] <= lit[2 * i]));
        size_t k = lit[2 * i + 1] - lit[2 * i];
        int found = k == 0;
        for (int m = 0; m < nt && !found; m++) found = memmem(texts[m].p, texts[m].n, r + lit[2 * i], k) != NULL;
        TKV_ASSERT(found);
    }
    for (int m = 0; m < nt; m++) tkv_buf_free(&texts[m]);
    int32_t *ids;
    int k = chat_encode(&t, v, msgs, n, &tools, gen, &ids);
    TKV_ASSERT(k >= 0);
    for (int i = 0; i < k; i++) TKV_ASSERT(ids[i] >= 0 && ids[i] < tok_n_vocab(v));
    size_t dn;
    char *d = tok_decode(v, ids, k, 1, &dn);
    char *want = malloc(3 * len + 1);
    size_t wn = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)tok_utf8_decode((const unsigned char *)r + i, len - i, &cp);
        wn += (size_t)tok_utf8_encode(cp, want + wn);
    }
    TKV_ASSERT(dn == wn && !memcmp(d, want, dn));
    free(want);
    free(d);
    free(ids);
    free(r);
    free(lit);
    free(s);
    return 0;
}
