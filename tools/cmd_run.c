/* cmd_run.c — `tierkv run`: generate text with the tiered KV cache, streaming it as it comes.
 * Text in and out by default (with --chat the prompt goes through the model's chat template);
 * --tokens FILE feeds token ids instead. Speed and, with --stats, the KV hierarchy's statistics
 * go to stderr, so stdout holds only the generated text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "cmds.h"
#include "eval/eval.h"
#include "common.h"
#include "kv_flags.h"
#include "model/chat.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer.h"
#include "tokfile.h"
#include "base/clock.h"

#define MAX_STOPS 16

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv run [-m MODEL.gguf] (-p TEXT | -f FILE | --tokens IDS.txt) [options]\n"
            "  -p, --prompt TEXT       the prompt (with --chat: the user message)\n"
            "  -f, --file FILE         read the prompt from a file\n"
            "      --tokens FILE       feed token ids (whitespace-separated) instead of text\n"
            "  -n, --n-predict N       tokens to generate (default 256)\n"
            "      --chat              wrap the prompt in the model's chat template\n"
            "      --system TEXT       system prompt for --chat (default: the template's own)\n"
            "      --template NAME     chat template: chatml, deepseek-r1, llama3 (default: from the file)\n"
            "      --temp T            temperature (default 0: greedy)\n"
            "      --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N\n"
            "      --seed S            sampling seed (default 0)\n"
            "      --stop STR          stop when STR is generated (repeatable)\n"
            "      --ignore-eos        do not stop at end-of-generation tokens\n"
            "      --special           print special tokens\n"
            "      --stats             print KV tier statistics (table) to stderr\n"
            "      --stats-json FILE   write KV statistics and the re-tiering log as JSON\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

int cmd_run(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    const char *prompt = NULL, *prompt_file = NULL, *tok_file = NULL, *system = NULL, *tmpl_name = NULL, *stats_json = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0, chat = 0, ignore_eos = 0, special = 0, stats = 0;
    long n_predict = 256;
    sampler_opts so = sampler_defaults();
    so.temperature = 0;
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&c, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv run: %s\n", err); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "--chat")) { chat = 1; continue; }
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = 1; continue; }
        if (!strcmp(a, "--special")) { special = 1; continue; }
        if (!strcmp(a, "--stats")) { stats = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "tierkv run: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        long lv;
        double dv;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) prompt_file = v;
        else if (!strcmp(a, "--tokens")) tok_file = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--template")) tmpl_name = v;
        else if (!strcmp(a, "--stats-json")) stats_json = v;
        else if (!strcmp(a, "--stop")) {
            if (n_stops == MAX_STOPS) { fprintf(stderr, "tierkv run: at most %d --stop strings\n", MAX_STOPS); return 2; }
            if (!*v) { fprintf(stderr, "tierkv run: --stop needs a non-empty string\n"); return 2; }
            stops[n_stops++] = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (parse_int(v, 0, 1 << 24, &n_predict)) { fprintf(stderr, "tierkv run: bad -n '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--seed")) {
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            if (*end || !*v) { fprintf(stderr, "tierkv run: bad --seed '%s'\n", v); return 2; }
            so.seed = s;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_int(v, 0, 1 << 30, &lv)) { fprintf(stderr, "tierkv run: bad --top-k '%s'\n", v); return 2; }
            so.top_k = (int)lv;
        } else if (!strcmp(a, "--repeat-last-n")) {
            if (parse_int(v, -1, 1 << 30, &lv)) { fprintf(stderr, "tierkv run: bad --repeat-last-n '%s'\n", v); return 2; }
            so.repeat_last_n = (int)lv;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p") || !strcmp(a, "--repeat-penalty")) {
            if (parse_double(v, &dv) || dv < 0 || dv > 1e6) { fprintf(stderr, "tierkv run: bad %s '%s'\n", a, v); return 2; }
            if (!strcmp(a, "--temp")) so.temperature = (float)dv;
            else if (!strcmp(a, "--top-p")) so.top_p = (float)dv;
            else if (!strcmp(a, "--min-p")) so.min_p = (float)dv;
            else {
                if (dv <= 0) { fprintf(stderr, "tierkv run: --repeat-penalty must be > 0\n"); return 2; }
                so.repeat_penalty = (float)dv;
            }
        } else { fprintf(stderr, "tierkv run: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (!!prompt + !!prompt_file + !!tok_file != 1) {
        fprintf(stderr, "tierkv run: give exactly one of -p, -f, --tokens\n");
        usage(stderr);
        return 2;
    }
    if (tok_file && chat) { fprintf(stderr, "tierkv run: --chat needs text (-p or -f), not --tokens\n"); return 2; }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); return 1; }

    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    tok_vocab *vocab = NULL;
    tkv_engine *e = NULL;
    float *logits = NULL;
    int32_t *hist = NULL;
    sampler smp;
    int smp_init = 0;
    stop_matcher sm;
    stop_init(&sm, stops, n_stops);

    size_t text_len;
    if (prompt_file && eval_read_file(prompt_file, &text, &text_len, err, sizeof err)) { fprintf(stderr, "tierkv run: cannot read %s\n", err); goto out; }
    if (tok_file && read_token_file(tok_file, &ids, &n_ids, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }

    /* the context must hold prompt and generation: size it once the prompt is known */
    {
        gguf_file gf;
        if (gguf_open(c.model_path, &gf, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
        vocab = tok_load(&gf, err, sizeof err);
        if (!vocab) { fprintf(stderr, "tierkv run: %s\n", err); gguf_free(&gf); goto out; }
        if (!tok_file) {
            const char *ptext = text ? text : prompt;
            if (chat) {
                chat_template tmpl;
                if (chat_template_from_gguf(&gf, tmpl_name, &tmpl, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); gguf_free(&gf); goto out; }
                chat_msg msgs[2];
                int nm = 0;
                if (system) msgs[nm++] = (chat_msg){"system", system};
                msgs[nm++] = (chat_msg){"user", ptext};
                n_ids = chat_encode(&tmpl, vocab, msgs, nm, 1, &ids);
            } else {
                size_t len = strlen(ptext);
                int need = tok_encode(vocab, ptext, len, TOK_ADD_SPECIAL, NULL, 0);
                ids = tkv_xmalloc((size_t)(need > 0 ? need : 1) * sizeof(int32_t));
                n_ids = tok_encode(vocab, ptext, len, TOK_ADD_SPECIAL, ids, need);
            }
        }
        gguf_free(&gf);
    }
    if (n_ids < 1) { fprintf(stderr, "tierkv run: the prompt is empty after tokenization\n"); goto out; }
    if ((long)n_ids + n_predict > c.eo.n_ctx) c.eo.n_ctx = n_ids + (int)n_predict;
    if (tkv_engine_open(c.model_path, &c.eo, &e, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    int V = tkv_n_vocab(e);
    logits = tkv_xmalloc((size_t)V * sizeof(float));
    hist = tkv_xmalloc(((size_t)n_ids + (size_t)n_predict + 1) * sizeof(int32_t));
    memcpy(hist, ids, (size_t)n_ids * sizeof(int32_t));
    int n_hist = n_ids;
    sampler_init(&smp, &so, V);
    smp_init = 1;

    double t0 = tkv_now_s();
    if (tkv_prefill(e, 0, ids, n_ids, logits, 0, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    double t1 = tkv_now_s();
    tok_stream ts;
    tok_stream_init(&ts);
    size_t outcap = TOK_STREAM_OUT(tok_max_piece(vocab)) + 64;
    size_t stop_room = 0;
    for (int k = 0; k < n_stops; k++) stop_room += strlen(stops[k]);
    char *piece = tkv_xmalloc(outcap), *shown = tkv_xmalloc(outcap + stop_room + 16);
    int n_gen = 0, stopped = 0;
    const char *why = "length";
    for (; n_gen < n_predict; n_gen++) {
        int32_t tok = sampler_sample(&smp, logits, V, hist, n_hist);
        hist[n_hist++] = tok;
        if (!ignore_eos && tok_is_eog(vocab, tok)) { why = "end of generation token"; n_gen++; break; }
        size_t np = tok_stream_token(&ts, vocab, tok, special, piece);
        size_t ns = 0;
        stopped = stop_feed(&sm, piece, np, shown, &ns);
        fwrite(shown, 1, ns, stdout);
        fflush(stdout);
        if (stopped) { why = "stop string"; n_gen++; break; }
        if (n_gen + 1 == n_predict) { n_gen++; break; }
        int seq = 0;
        if (tkv_decode(e, &seq, &tok, 1, logits, err, sizeof err)) { fprintf(stderr, "\ntierkv run: %s\n", err); free(piece); free(shown); goto out; }
    }
    if (!stopped) {
        size_t np = tok_stream_flush(&ts, piece);
        size_t ns = 0;
        stop_feed(&sm, piece, np, shown, &ns);
        fwrite(shown, 1, ns, stdout);
        ns = stop_flush(&sm, shown);
        fwrite(shown, 1, ns, stdout);
    }
    printf("\n");
    fflush(stdout);
    double t2 = tkv_now_s();
    free(piece);
    free(shown);
    kv_cache *kv = tkv_kv_of(e);
    kv_sync(kv);
    fprintf(stderr, "\n[tierkv] model %s | kernels %s | threads %d | policy %s\n",
            strrchr(c.model_path, '/') ? strrchr(c.model_path, '/') + 1 : c.model_path, tkv_isa_name(e), c.eo.n_threads,
            kv_policy_name(c.eo.kv.policy));
    fprintf(stderr, "[tierkv] prompt %d tokens in %.2f s (%.1f tok/s) | generated %d tokens in %.2f s (%.2f tok/s) | stop: %s\n",
            n_ids, t1 - t0, n_ids / (t1 - t0), n_gen, t2 - t1, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0, why);
    if (stats) {
        kv_stats_print(stderr, kv, -1);
        kv_retier_log_print(stderr, kv);
    }
    if (stats_json) {
        FILE *fj = fopen(stats_json, "w");
        if (!fj) { fprintf(stderr, "tierkv run: cannot write '%s'\n", stats_json); goto out; }
        kv_stats_write_json(fj, kv);
        fclose(fj);
    }
    rc = 0;
out:
    if (smp_init) sampler_free(&smp);
    stop_free(&sm);
    free(logits);
    free(hist);
    free(ids);
    free(text);
    tok_free(vocab);
    tkv_engine_close(e);
    return rc;
}
