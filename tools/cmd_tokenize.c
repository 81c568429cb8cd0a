/* cmd_tokenize.c - `tierkv tokenize` and `tierkv detokenize`: thin mains over the tokenizer.
 *   tierkv tokenize   -m MODEL.gguf (-p TEXT | -f FILE) [--special] [--bos]
 *       prints the ids on one line, each preceded by a space (the fixtures' .out format).
 *       --special parses special-token text such as <|im_start|>; --bos adds BOS/EOS as the model says.
 *   tierkv detokenize -m MODEL.gguf (-p "IDS" | -f FILE) [--special]
 *       prints the text; --special also renders control tokens.
 * A file (-f) is read by eval_read_file: a regular file without NUL bytes, like every text prompt
 * (run -f refuses the same files). Any length of text encodes: the id buffer is sized by the encoder. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "eval/eval.h"
#include "out.h"
#include "tierkv.h"

typedef struct { const char *model, *text, *file; int special, bos, help; } tok_args;

/* 0 ok, -1 bad flags; a->help for --help. */
static int parse_args(int argc, char **argv, tok_args *a, int allow_bos) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { a->help = 1; return 0; }
        if (!strcmp(f, "-m") && i + 1 < argc) a->model = argv[++i];
        else if (!strcmp(f, "-p") && i + 1 < argc) a->text = argv[++i];
        else if (!strcmp(f, "-f") && i + 1 < argc) a->file = argv[++i];
        else if (!strcmp(f, "--special")) a->special = 1;
        else if (allow_bos && !strcmp(f, "--bos")) a->bos = 1;
        else return -1;
    }
    return a->model && (!a->text != !a->file) ? 0 : -1;
}

static tkv_model *open_vocab(const char *cmd, const char *path) {
    char err[512];
    tkv_model_params p;
    tkv_model_params_default(&p);
    p.vocab_only = 1;
    tkv_model *v;
    if (tkv_model_open(path, &p, &v, err, sizeof err)) { fprintf(stderr, "tierkv %s: %s: %s\n", cmd, path, err); return NULL; }
    return v;
}

/* Loads the input: -p's text or the whole file. */
static char *input(const char *cmd, const tok_args *a, size_t *n) {
    if (a->text) { *n = strlen(a->text); return strdup(a->text); }
    char *s = NULL, err[512];
    if (eval_read_file(a->file, &s, n, err, sizeof err)) fprintf(stderr, "tierkv %s: cannot read %s\n", cmd, err);
    return s;
}

int cmd_tokenize(int argc, char **argv) {
    tok_args a;
    static const char use[] = "usage: tierkv tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--special] [--bos]\n";
    if (parse_args(argc, argv, &a, 1)) { fputs(use, stderr); return 2; }
    if (a.help) { fputs(use, stdout); return 0; }
    size_t n;
    char *text = input("tokenize", &a, &n);
    if (!text) return 1;
    tkv_model *v = open_vocab("tokenize", a.model);
    if (!v) { free(text); return 1; }
    int flags = (a.special ? TKV_TOK_PARSE_SPECIAL : 0) | (a.bos ? TKV_TOK_ADD_SPECIAL : 0);
    int32_t *ids;
    int k = tkv_tokenize_alloc(v, text, n, flags, &ids);
    int rc = 0;
    if (k < 0) { fprintf(stderr, "tierkv tokenize: the text (%zu bytes) is longer than the tokenizer takes\n", n); rc = 1; }
    else {
        for (int i = 0; i < k; i++) printf(" %d", ids[i]);
        printf("\n");
        rc = out_finish("tokenize");
    }
    free(ids);
    free(text);
    tkv_model_close(v);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    tok_args a;
    static const char use[] = "usage: tierkv detokenize -m MODEL.gguf (-p \"IDS\" | -f FILE) [--special]\n";
    if (parse_args(argc, argv, &a, 0)) { fputs(use, stderr); return 2; }
    if (a.help) { fputs(use, stdout); return 0; }
    size_t n;
    char *text = input("detokenize", &a, &n);
    if (!text) return 1;
    tkv_model *v = open_vocab("detokenize", a.model);
    if (!v) { free(text); return 1; }
    tkv_model_info info;
    tkv_model_get_info(v, &info);
    int32_t *ids = malloc((n / 2 + 1) * sizeof *ids); /* each id needs a digit and a separator */
    int k = 0, rc = 0;
    for (char *p = text; ids && *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || id < 0 || id >= info.n_vocab) {
            fprintf(stderr, "tierkv detokenize: bad token id at '%.20s' (vocabulary has %d tokens)\n", p, info.n_vocab);
            rc = 1;
            break;
        }
        ids[k++] = (int32_t)id;
        p = end;
    }
    if (!rc && ids) {
        size_t len;
        char *s = tkv_detokenize(v, ids, k, a.special, &len);
        fwrite(s, 1, len, stdout);
        free(s);
        rc = out_finish("detokenize");
    }
    free(ids);
    free(text);
    tkv_model_close(v);
    return rc;
}
