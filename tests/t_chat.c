/* t_chat.c — see t_chat.h. */
#include "t_chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/json.h"
#include "gguf/gguf_write.h"
#include "t.h"

int t_chat_template_of(const char *text, chat_template *t) {
    gguf_writer *w = gguf_writer_begin(0);
    gguf_writer_add_str(w, "tokenizer.chat_template", text);
    size_t n = 0;
    char err[256], *mem = NULL;
    FILE *fp = open_memstream(&mem, &n);
    if (!fp || gguf_writer_open_stream(w, fp, err, sizeof err) || gguf_writer_close(w, err, sizeof err)) {
        if (fp) fclose(fp);
        free(mem);
        return -1;
    }
    fclose(fp);
    gguf_file f;
    int rc = gguf_parse((const uint8_t *)mem, n, &f, err, sizeof err);
    if (!rc) {
        rc = chat_template_from_gguf(&f, NULL, t, err, sizeof err);
        gguf_free(&f);
    }
    free(mem);
    return rc;
}

/* The case as chat_jinja.py reads it. */
static void write_case(const char *path, const chat_msg *m, int n, const chat_tools *tools, int think, const char *bos,
                       const char *today, int gen) {
    struct json_out o;
    json_out_init(&o);
    json_out_obj_begin(&o);
    json_out_key(&o, "messages");
    json_out_arr_begin(&o);
    for (int i = 0; i < n; i++) {
        json_out_obj_begin(&o);
        json_out_key(&o, "role"), json_out_str(&o, m[i].role);
        json_out_key(&o, "content"), json_out_str(&o, m[i].content);
        if (m[i].reasoning_content) json_out_key(&o, "reasoning_content"), json_out_str(&o, m[i].reasoning_content);
        if (m[i].n_tool_calls) {
            json_out_key(&o, "tool_calls");
            json_out_arr_begin(&o);
            for (int k = 0; k < m[i].n_tool_calls; k++) {
                json_out_obj_begin(&o);
                json_out_key(&o, "name"), json_out_str(&o, m[i].tool_calls[k].name);
                json_out_key(&o, "arguments"), json_out_str(&o, m[i].tool_calls[k].arguments);
                json_out_obj_end(&o);
            }
            json_out_arr_end(&o);
        }
        json_out_obj_end(&o);
    }
    json_out_arr_end(&o);
    json_out_key(&o, "tools");
    json_out_arr_begin(&o);
    for (int k = 0; tools && k < tools->n; k++) json_out_str(&o, tools->defs[k]);
    json_out_arr_end(&o);
    json_out_key(&o, "add_generation_prompt"), json_out_bool(&o, gen);
    if (think >= 0) json_out_key(&o, "enable_thinking"), json_out_bool(&o, think);
    if (bos) json_out_key(&o, "bos_token"), json_out_str(&o, bos);
    if (today) json_out_key(&o, "strftime_now"), json_out_str(&o, today);
    json_out_obj_end(&o);
    FILE *f = fopen(path, "w");
    if (f) fwrite(o.b.p, 1, o.b.n, f), fclose(f);
    json_out_free(&o);
}

int t_chat_jinja(const char *template_path, const char *tag, const chat_msg *m, int n, const chat_tools *tools, int think,
                 const char *bos, const char *today, int gen, char **text) {
    char in[600], out[600], cmd[2048];
    *text = NULL;
    snprintf(in, sizeof in, "%s/chat-%s.json", t_tmpdir(), tag);
    snprintf(out, sizeof out, "%s/chat-%s.txt", t_tmpdir(), tag);
    write_case(in, m, n, tools, think, bos, today, gen);
    snprintf(cmd, sizeof cmd, "python3 tests/chat_jinja.py --template %s --case %s --out %s", template_path, in, out);
    int st = system(cmd), rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) { t_skip("jinja2 missing (pip install jinja2)"); return T_CHAT_SKIPPED; }
    if (rc == 3) return T_CHAT_RAISES;
    CHECKF(rc == 0, "%s: chat_jinja.py exited %d", tag, rc);
    if (rc) return T_CHAT_FAILED;
    *text = t_slurp(out);
    CHECKF(*text, "%s: no %s", tag, out);
    return *text ? T_CHAT_RENDERED : T_CHAT_FAILED;
}

int t_chat_same(const char *template_path, const char *tag, const chat_template *t, const chat_msg *m, int n,
                const chat_tools *tools, int think, const char *bos, int gen) {
    char *want;
    int rc = t_chat_jinja(template_path, tag, m, n, tools, think, bos, t->date[0] ? t->date : NULL, gen, &want);
    CHECKF(rc != T_CHAT_RAISES, "%s: the template raises", tag);
    if (rc != T_CHAT_RENDERED) return 0;
    size_t len;
    char *r = chat_render(t, NULL, m, n, tools, gen, &len, NULL, NULL);
    size_t wn = strlen(want), at = 0;
    while (at < len && at < wn && r[at] == want[at]) at++;
    CHECKF(len == wn && at == len, "%s: differs from the template at byte %zu: ours '%.60s' template '%.60s'", tag, at,
           r + at, want + at);
    free(r), free(want);
    return 1;
}
