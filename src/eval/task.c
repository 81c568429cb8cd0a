/* task.c — task files and prompts: reads the JSONL data files of data/SOURCES.md into eval_set
 * and builds the user turn for each item; the one reader of text and JSONL files for the tools
 * (eval_read_file: regular files only, a size cap, no NUL bytes). Does not grade (grade.c) or apply
 * chat templates. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/path.h"
#include "eval/eval.h"
#include "base/json.h"
#include "eval/pystr.h"

int eval_task_parse(const char *name, enum eval_task *out, char *err, size_t errlen) {
    if (name && !strcmp(name, "gsm8k")) *out = EVAL_GSM8K;
    else if (name && !strcmp(name, "math")) *out = EVAL_MATH;
    else if (name && !strcmp(name, "arc")) *out = EVAL_ARC;
    else return tkv_errf(err, errlen, "unknown task '%s' (expected gsm8k, math or arc)", name ? name : "");
    return 0;
}

const char *eval_task_name(enum eval_task t) {
    return t == EVAL_GSM8K ? "gsm8k" : t == EVAL_MATH ? "math" : t == EVAL_ARC ? "arc" : "?";
}

int eval_read_file(const char *path, char **data, size_t *len, char *err, size_t errlen) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it is refused */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tkv_errf(err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tkv_errf(err, errlen, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tkv_errf(err, errlen, "%s: is %s, not a regular file", path, tkv_file_kind(st.st_mode));
    }
    if ((uint64_t)st.st_size > EVAL_MAX_FILE) {
        close(fd);
        return tkv_errf(err, errlen, "%s: %lld bytes, over the limit of %zu MiB for text and JSONL files", path,
                        (long long)st.st_size, EVAL_MAX_FILE >> 20);
    }
    tkv_buf b = {0};
    char tmp[65536];
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            free(b.p);
            return tkv_errf(err, errlen, "%s: read error: %s", path, strerror(e));
        }
        if (n == 0) break;
        if (b.n + (size_t)n > EVAL_MAX_FILE) { /* it grew while being read */
            close(fd);
            free(b.p);
            return tkv_errf(err, errlen, "%s: over the limit of %zu MiB for text and JSONL files", path, EVAL_MAX_FILE >> 20);
        }
        tkv_buf_add(&b, tmp, (size_t)n);
    }
    close(fd);
    const char *nul = b.n ? memchr(b.p, 0, b.n) : NULL;
    if (nul) {
        size_t at = (size_t)(nul - b.p), line = 1;
        for (size_t i = 0; i < at; i++) line += b.p[i] == '\n';
        free(b.p);
        return tkv_errf(err, errlen, "%s:%zu: byte %zu is a NUL byte; text and JSONL files cannot hold one", path, line, at);
    }
    *len = b.n;
    *data = tkv_buf_take(&b);
    return 0;
}

int eval_next_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n) {
    if (*pos >= len) return 0;
    const char *s = buf + *pos, *nl = memchr(s, '\n', len - *pos);
    size_t k = nl ? (size_t)(nl - s) : len - *pos;
    *pos += k + (nl != NULL);
    if (k && s[k - 1] == '\r') k--;
    *line = s;
    *n = k;
    return 1;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

static int need_str(const struct json_value *o, const char *key, char **out, const char *path, size_t ln,
                    char *err, size_t errlen) {
    const char *s = json_get_str(o, key);
    if (!s) return tkv_errf(err, errlen, "%s:%zu: missing string field '%s'", path, ln, key);
    *out = ps_dup(s);
    return 0;
}

static int load_item(enum eval_task task, const struct json_value *o, struct eval_item *it, const char *path,
                     size_t ln, char *err, size_t errlen) {
    if (!o || o->type != JSON_OBJECT) return tkv_errf(err, errlen, "%s:%zu: line is not a JSON object", path, ln);
    if (need_str(o, "id", &it->id, path, ln, err, errlen) || need_str(o, "question", &it->question, path, ln, err, errlen))
        return -1;
    if (task != EVAL_ARC) {
        int64_t lv;
        if (json_get_int(o, "level", &lv)) it->level = (int)lv;
        return need_str(o, "answer", &it->answer, path, ln, err, errlen);
    }
    if (need_str(o, "answer_letter", &it->answer, path, ln, err, errlen)) return -1;
    const struct json_value *texts = json_get(json_get(o, "choices"), "text");
    if (!texts || texts->type != JSON_ARRAY || texts->u.arr.n == 0 || texts->u.arr.n > 26)
        return tkv_errf(err, errlen, "%s:%zu: choices.text must be an array of 1..26 strings", path, ln);
    it->n_choices = (int)texts->u.arr.n;
    it->choices = tkv_xcalloc(texts->u.arr.n, sizeof *it->choices);
    for (size_t k = 0; k < texts->u.arr.n; k++) {
        const struct json_value *t = json_at(texts, k);
        if (t->type != JSON_STRING) return tkv_errf(err, errlen, "%s:%zu: choices.text[%zu] is not a string", path, ln, k);
        it->choices[k] = ps_dup(t->u.str.s);
    }
    if (strlen(it->answer) != 1 || it->answer[0] < 'A' || it->answer[0] >= 'A' + it->n_choices)
        return tkv_errf(err, errlen, "%s:%zu: answer_letter '%s' is not one of the %d choices", path, ln, it->answer,
                        it->n_choices);
    return 0;
}

static void item_free(struct eval_item *it) {
    free(it->id);
    free(it->question);
    free(it->answer);
    for (int k = 0; k < it->n_choices && it->choices; k++) free(it->choices[k]);
    free(it->choices);
}

/* (id, line) of one item, for finding an id given twice */
struct id_line { const char *id; size_t line; };

static int id_line_cmp(const void *a, const void *b) {
    const struct id_line *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* An id given twice would be run and counted twice (and resuming keys on ids): the first repeat in
 * file order is named with both of its lines. */
static int check_unique_ids(const struct eval_set *s, const size_t *lines, const char *path, char *err, size_t errlen) {
    if (s->n < 2) return 0;
    struct id_line *v = tkv_xmalloc(s->n * sizeof *v);
    for (size_t i = 0; i < s->n; i++) v[i] = (struct id_line){s->items[i].id, lines[i]};
    qsort(v, s->n, sizeof *v, id_line_cmp);
    size_t first = 0, second = 0; /* the repeat with the earliest second line */
    const char *id = NULL;
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(v[i - 1].id, v[i].id) && (!id || v[i].line < second)) {
            size_t k = i - 1;
            while (k > 0 && !strcmp(v[k - 1].id, v[i].id)) k--;
            id = v[i].id, first = v[k].line, second = v[i].line;
        }
    int rc = id ? tkv_errf(err, errlen, "%s:%zu: id '%.80s' was already given at line %zu (ids must be unique)", path,
                           second, id, first)
                : 0;
    free(v);
    return rc;
}

int eval_load(enum eval_task task, const char *path, struct eval_set *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->task = task;
    char *buf;
    size_t len, pos = 0, ln = 0, cap = 0, n, *lines = NULL;
    const char *line;
    if (eval_read_file(path, &buf, &len, err, errlen)) return -1;
    int rc = 0;
    while (!rc && eval_next_line(buf, len, &pos, &line, &n)) {
        ln++;
        if (blank(line, n)) continue;
        struct json_doc *doc;
        char jerr[256];
        if (json_parse(line, n, NULL, &doc, jerr, sizeof jerr)) {
            rc = tkv_errf(err, errlen, "%s:%zu: %s", path, ln, jerr);
            break;
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 256;
            out->items = realloc(out->items, cap * sizeof *out->items);
            lines = realloc(lines, cap * sizeof *lines);
            TKV_ASSERT(out->items && lines);
        }
        lines[out->n] = ln;
        struct eval_item *it = &out->items[out->n++];
        memset(it, 0, sizeof *it);
        rc = load_item(task, json_root(doc), it, path, ln, err, errlen);
        json_free(doc);
    }
    free(buf);
    if (!rc) rc = check_unique_ids(out, lines, path, err, errlen);
    free(lines);
    if (rc) eval_set_free(out);
    return rc;
}

void eval_set_free(struct eval_set *s) {
    for (size_t i = 0; i < s->n; i++) item_free(&s->items[i]);
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

char *eval_build_prompt(enum eval_task task, const struct eval_item *it) {
    tkv_buf b = {0};
    tkv_buf_adds(&b, it->question);
    if (task != EVAL_ARC) {
        tkv_buf_adds(&b, "\nPlease reason step by step, and put your final answer within \\boxed{}.");
        return tkv_buf_take(&b);
    }
    tkv_buf_adds(&b, "\n\n");
    for (int k = 0; k < it->n_choices; k++) {
        char head[8];
        snprintf(head, sizeof head, "%c. ", 'A' + k);
        tkv_buf_adds(&b, head);
        tkv_buf_adds(&b, it->choices[k]);
        tkv_buf_adds(&b, "\n");
    }
    tkv_buf_adds(&b, "\nPlease reason step by step, and put the letter of the correct answer within \\boxed{}.");
    return tkv_buf_take(&b);
}
