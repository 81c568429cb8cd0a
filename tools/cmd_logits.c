/* cmd_logits.c — `tierkv logits`: feeds token ids as one prompt, writes the logits of positions
 * P..n-1 and then of N greedy steps (the layout of ../shared/fixtures/models), and prints the
 * greedy ids as JSON. The tool for comparing tierkv with another engine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/json.h"
#include "cmds.h"
#include "common.h"
#include "out.h"
#include "kv_flags.h"
#include "tokfile.h"

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv logits -m MODEL.gguf --tokens IDS.txt [--greedy N] [--first-pos P] [--feed IDS.txt] -o OUT.f32\n"
                 "  writes rows x n_vocab float32: prompt positions P..n-1, then one row per greedy step\n"
                 "  (P = n-1: only the last prompt row is computed, as tierkv run computes it);\n"
                 "  prints {\"n_prompt\", \"first_logit_pos\", \"rows\", \"greedy\"} as JSON on stdout.\n"
                 "  --feed FILE   feed these ids as the greedy steps instead of the argmax (teacher forcing)\n%s%s",
            common_usage(), kv_flags_usage());
}

int cmd_logits(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    const char *tok_path = NULL, *out_path = NULL, *feed_path = NULL;
    long greedy = 0, first = 0;
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&c, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv logits: %s\n", err); return 2; }
        if (r > 0) continue;
        if (i + 1 >= argc) { fprintf(stderr, "tierkv logits: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        if (!strcmp(a, "--tokens")) tok_path = argv[++i];
        else if (!strcmp(a, "-o")) out_path = argv[++i];
        else if (!strcmp(a, "--feed")) feed_path = argv[++i];
        else if (!strcmp(a, "--greedy")) {
            if (parse_int(argv[++i], 0, 1 << 20, &greedy)) { fprintf(stderr, "tierkv logits: bad --greedy '%s'\n", argv[i]); return 2; }
        } else if (!strcmp(a, "--first-pos")) {
            if (parse_int(argv[++i], 0, 1 << 30, &first)) { fprintf(stderr, "tierkv logits: bad --first-pos '%s'\n", argv[i]); return 2; }
        } else { fprintf(stderr, "tierkv logits: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (!tok_path || !out_path) { fprintf(stderr, "tierkv logits: --tokens and -o are required\n"); usage(stderr); return 2; }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv logits: %s\n", err); return 1; }
    int32_t *ids = NULL, *feed = NULL;
    int n = 0, n_feed = 0;
    if (read_token_file(tok_path, &ids, &n, err, sizeof err)) { fprintf(stderr, "tierkv logits: %s\n", err); return 1; }
    if (feed_path) {
        if (read_token_file(feed_path, &feed, &n_feed, err, sizeof err)) { fprintf(stderr, "tierkv logits: %s\n", err); free(ids); return 1; }
        if (greedy == 0 || greedy > n_feed) greedy = n_feed;
    }
    if (first >= n) { fprintf(stderr, "tierkv logits: --first-pos %ld is past the prompt (%d tokens)\n", first, n); free(ids); free(feed); return 2; }
    long need = n + greedy;
    if (c.ctx_given && need > c.sp.max_ctx) {
        fprintf(stderr, "tierkv logits: %d prompt tokens and %ld steps need %ld positions, more than --ctx %d\n", n, greedy,
                need, c.sp.max_ctx);
        free(ids); free(feed);
        return 1;
    }
    if (!c.ctx_given) c.sp.max_ctx = (int)need;
    c.sp.max_seqs = 1;
    tkv_model *m = NULL;
    tkv_session *s = NULL;
    float *all = NULL;
    int32_t *gids = NULL;
    int rc = 1, seq = -1;
    FILE *fo = NULL;
    if (tkv_model_open(c.model_path, &c.mp, &m, err, sizeof err)) { fprintf(stderr, "tierkv logits: %s\n", err); goto done; }
    tkv_model_info info;
    tkv_model_get_info(m, &info);
    int V = info.n_vocab;
    /* every id is checked before the output file exists, so a bad one leaves no partial file */
    for (int k = 0; k < n + (feed ? (int)greedy : 0); k++) {
        int32_t id = k < n ? ids[k] : feed[k - n];
        if (id < 0 || id >= V) {
            fprintf(stderr, "tierkv logits: token id %d (%s %d) is out of range 0..%d\n", id, k < n ? "prompt position" : "--feed step",
                    k < n ? k : k - n, V - 1);
            goto done;
        }
    }
    if (tkv_session_open(m, &c.sp, &s, err, sizeof err) || tkv_seq_open(s, (int)need, n, &seq, err, sizeof err)) {
        fprintf(stderr, "tierkv logits: %s\n", err);
        goto done;
    }
    all = tkv_xmalloc((size_t)n * V * sizeof(float));
    gids = tkv_xcalloc((size_t)greedy + 1, sizeof(int32_t));
    /* only the last prompt row asked for: only that row is computed, so a prompt fed in several calls
     * (-b) reads nothing back between them, as tierkv run's does */
    const int last_only = first == n - 1;
    if (tkv_prefill(s, seq, ids, n, last_only ? all + (size_t)(n - 1) * V : all, !last_only, err, sizeof err)) {
        fprintf(stderr, "tierkv logits: %s\n", err);
        goto done;
    }
    struct stat ost;
    int existed = stat(out_path, &ost) == 0; /* a failed write removes only a file this run created */
    fo = fopen(out_path, "wb");
    if (!fo) { fprintf(stderr, "tierkv logits: cannot write '%s': %s\n", out_path, strerror(errno)); goto done; }
    if (fwrite(all + (size_t)first * V, sizeof(float), (size_t)(n - first) * V, fo) != (size_t)(n - first) * V) goto write_fail;
    float *row = all + (size_t)(n - 1) * V;
    for (long st = 0; st < greedy; st++) {
        int32_t tok = feed ? feed[st] : tkv_argmax(row, V);
        gids[st] = tok;
        if (tkv_decode(s, &seq, &tok, 1, all, err, sizeof err)) { fprintf(stderr, "tierkv logits: %s\n", err); goto fail_rm; }
        row = all;
        if (fwrite(row, sizeof(float), (size_t)V, fo) != (size_t)V) goto write_fail;
    }
    if (fclose(fo) != 0) { fo = NULL; goto write_fail; }
    fo = NULL;
    struct json_out j;
    out_json_begin(&j);
    json_out_key(&j, "n_vocab"), json_out_int(&j, V);
    json_out_key(&j, "n_prompt"), json_out_int(&j, n);
    json_out_key(&j, "first_logit_pos"), json_out_int(&j, first);
    json_out_key(&j, "rows"), json_out_int(&j, n - first + greedy);
    json_out_key(&j, "greedy");
    json_out_arr_begin(&j);
    for (long st = 0; st < greedy; st++) json_out_int(&j, gids[st]);
    json_out_arr_end(&j);
    out_json_end(&j);
    rc = fflush(stdout) || ferror(stdout) ? 1 : 0;
    if (rc) fprintf(stderr, "tierkv logits: writing to stdout failed\n");
    goto done;
write_fail:
    fprintf(stderr, "tierkv logits: writing '%s' failed: %s\n", out_path, strerror(errno));
fail_rm:
    if (fo) fclose(fo);
    fo = NULL;
    if (!existed) remove(out_path); /* ours: created above */
    else if (S_ISREG(ost.st_mode)) fprintf(stderr, "tierkv logits: '%s' is incomplete (it existed before, so it was not removed)\n", out_path);
done:
    if (fo) fclose(fo);
    free(gids);
    free(all);
    free(ids);
    free(feed);
    tkv_session_close(s);
    tkv_model_close(m);
    return rc;
}
