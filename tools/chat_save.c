/* chat_save.c — /save and /load of tierkv chat (see chat_save.h). */
#include "chat_save.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/wfile.h"

static const char *static_role(const char *r) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (r && !strcmp(r, roles[i])) return roles[i];
    return NULL;
}

int chat_save(tkv_session *s, int seq, const chat_conv *v, const char *path, char *err, size_t errlen) {
    if (seq < 0 || v->n_held < 1) return tkv_errf(err, errlen, "nothing to save yet");
    struct json_out o;
    json_out_init(&o);
    json_out_obj_begin(&o);
    json_out_key(&o, "messages");
    json_out_arr_begin(&o);
    for (int i = 0; i < v->n_msgs; i++) {
        json_out_obj_begin(&o);
        json_out_key(&o, "role");
        json_out_str(&o, v->msgs[i].role);
        json_out_key(&o, "content");
        json_out_str(&o, v->msgs[i].content);
        json_out_obj_end(&o);
    }
    json_out_arr_end(&o);
    json_out_key(&o, "n_system");
    json_out_int(&o, v->n_system);
    json_out_key(&o, "pending");
    json_out_int(&o, v->pending);
    json_out_obj_end(&o);
    void *rec;
    size_t len;
    int rc = tkv_seq_save_note(s, seq, v->held, v->n_held, 0, o.b.p, o.b.n, &rec, &len, err, errlen);
    json_out_free(&o);
    if (rc) return TKV_ERR;
    rc = tkv_write_file(path, rec, len, err, errlen);
    free(rec);
    return rc ? TKV_ERR : 0;
}

static void *slurp(const char *path, size_t *n, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        tkv_errf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *b = tkv_xmalloc(size ? size : 1);
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) { free(b); tkv_errf(err, errlen, "%s: short read", path); return NULL; }
    *n = size;
    return b;
}

int chat_load(tkv_session *s, const tkv_model *m, int n_ctx, const char *path, chat_conv *v, int *seq, char *err,
              size_t errlen) {
    *seq = -1;
    size_t len;
    void *rec = slurp(path, &len, err, errlen);
    if (!rec) return TKV_ERR;
    const void *note;
    size_t note_len;
    uint64_t salt;
    int32_t *tokens = NULL;
    int n = 0, rc = TKV_ERR;
    struct json_doc *doc = NULL;
    if (tkv_record_note(rec, len, &note, &note_len, err, errlen) ||
        tkv_record_peek(m, rec, len, &salt, &tokens, &n, err, errlen))
        goto out;
    if (!note) { tkv_errf(err, errlen, "%s: a record without a chat's messages", path); goto out; }
    if (n > n_ctx) { tkv_errf(err, errlen, "%s: %d positions; this chat's context is %d (-c)", path, n, n_ctx); goto out; }
    char jerr[256];
    if (json_parse(note, note_len, NULL, &doc, jerr, sizeof jerr)) { tkv_errf(err, errlen, "%s: its messages: %s", path, jerr); goto out; }
    const struct json_value *root = json_root(doc), *msgs = json_get(root, "messages");
    int64_t n_system = 0, pending = -1;
    if (!msgs || msgs->type != JSON_ARRAY || !json_get_int(root, "n_system", &n_system) || !json_get_int(root, "pending", &pending) ||
        n_system < 0 || n_system > 1) {
        tkv_errf(err, errlen, "%s: its messages are not a chat's", path);
        goto out;
    }
    for (size_t i = 0; i < msgs->u.arr.n; i++) {
        const struct json_value *e = json_at(msgs, i);
        if (!static_role(json_get_str(e, "role")) || !json_get_str(e, "content")) {
            tkv_errf(err, errlen, "%s: message %zu has no role of a chat or no content", path, i);
            goto out;
        }
    }
    if (tkv_seq_open(s, n_ctx, 0, seq, err, errlen)) goto out;
    if (tkv_seq_load(s, *seq, rec, len, err, errlen)) {
        tkv_seq_close(s, *seq);
        *seq = -1;
        goto out;
    }
    /* the file's conversation replaces the one held */
    for (int i = 0; i < v->n_msgs; i++) free((char *)v->msgs[i].content);
    v->n_msgs = v->n_system = 0;
    for (size_t i = 0; i < msgs->u.arr.n; i++) {
        const struct json_value *e = json_at(msgs, i);
        const char *c = json_get_str(e, "content");
        chat_conv_add(v, static_role(json_get_str(e, "role")), c, strlen(c));
    }
    v->n_system = (int)n_system;
    memcpy(v->held, tokens, (size_t)n * sizeof *tokens);
    v->n_held = n;
    v->pending = (int32_t)pending;
    rc = 0;
out:
    json_free(doc);
    free(tokens);
    free(rec);
    return rc;
}
