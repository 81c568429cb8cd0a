/* cmd_run.c — `tierkv run`: generate text with the tiered KV cache, streaming it as it comes.
 * Text in and out by default (with --chat the prompt goes through the model's chat template);
 * --tokens FILE feeds token ids instead. Speed and, with --stats, the KV hierarchy's statistics
 * go to stderr, so stdout holds only the generated text. A write error on stdout or on the stats
 * file is an error (exit 1), never a silent success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <limits.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/path.h"
#include "cmds.h"
#include "common.h"
#include "eval/eval.h"
#include "kv_flags.h"
#include "tokfile.h"

#define MAX_STOPS 16

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv run [-m MODEL.gguf] (-p TEXT | -f FILE | --tokens IDS.txt) [options]\n"
            "  -p, --prompt TEXT       the prompt (with --chat: the user message)\n"
            "  -f, --file FILE         read the prompt from a file\n"
            "      --tokens FILE       feed token ids (whitespace-separated) instead of text\n"
            "  -n, --n-predict N       tokens to generate (default 256); without -c generation stops at the\n"
            "                          model's context_length (\"stop: context\"), however large N is\n"
            "      --chat              wrap the prompt in the model's chat template\n"
            "      --system TEXT       system prompt for --chat (default: the template's own)\n"
            "      --template NAME     chat template: chatml, deepseek-r1, llama3, llama3.1, qwen3 (default: from the file)\n"
            "      --think on|off      --chat: thinking on (the default) or off (Qwen3's enable_thinking; a\n"
            "                          format without the switch refuses off)\n"
            SAMPLING_USAGE
            "      --stop STR          stop when STR is generated (repeatable)\n"
            "      --ignore-eos        do not stop at end-of-generation tokens\n"
            "      --special           print special tokens\n"
            "      --stats             print KV tier statistics (table) to stderr\n"
            "      --stats-json FILE   write KV statistics and the re-tiering log as JSON\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

/* The prompt's token ids: text through the chat template (--chat) or the tokenizer, or --tokens. */
static int prompt_ids(tkv_model *m, const char *text, int chat, const char *system, const char *tmpl_name, int chat_flags,
                      int32_t **ids, int *n_ids, char *err, size_t errlen) {
    if (chat) {
        tkv_chat *ct;
        if (tkv_chat_open(m, tmpl_name, chat_flags, &ct, err, errlen)) return -1;
        tkv_chat_msg msgs[2];
        int nm = 0;
        if (system) msgs[nm++] = (tkv_chat_msg){.role = "system", .content = system};
        msgs[nm++] = (tkv_chat_msg){.role = "user", .content = text};
        *n_ids = tkv_chat_encode(ct, msgs, nm, 1, ids, err, errlen);
        tkv_chat_close(ct);
        return *n_ids < 0 ? -1 : 0;
    }
    size_t len = strlen(text);
    *n_ids = tkv_tokenize_alloc(m, text, len, TKV_TOK_ADD_SPECIAL, ids);
    if (*n_ids < 0) return tkv_errf(err, errlen, "the prompt is too large to tokenize (%zu bytes)", len);
    return 0;
}

/* Writes n bytes to stdout; 0, or -1 when stdout reports an error (a full disk, a closed pipe). */
static int out_write(const char *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) return -1;
    return fflush(stdout) ? -1 : 0;
}

int cmd_run(int argc, char **argv) {
    common_opts c;
    common_opts_default(&c);
    const char *prompt = NULL, *prompt_file = NULL, *tok_file = NULL, *system = NULL, *tmpl_name = NULL, *stats_json = NULL;
    int think = -1; /* --think: the chat flag (0 or TKV_CHAT_THINK_OFF), -1 not given */
    const char *stops[MAX_STOPS];
    int n_stops = 0, chat = 0, ignore_eos = 0, special = 0, stats = 0;
    long n_predict = 256;
    tkv_sampling so;
    tkv_sampling_default(&so);
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
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) prompt_file = v;
        else if (!strcmp(a, "--tokens")) tok_file = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--template")) tmpl_name = v;
        else if (!strcmp(a, "--think")) {
            if ((think = parse_think(v)) < 0) {
                fprintf(stderr, "tierkv run: --think wants on or off, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--stats-json")) stats_json = v;
        else if (!strcmp(a, "--stop")) {
            if (n_stops == MAX_STOPS) { fprintf(stderr, "tierkv run: at most %d --stop strings\n", MAX_STOPS); return 2; }
            if (!*v) { fprintf(stderr, "tierkv run: --stop needs a non-empty string\n"); return 2; }
            stops[n_stops++] = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (parse_int(v, 0, 1 << 24, &n_predict)) { fprintf(stderr, "tierkv run: bad -n '%s' (0..16777216)\n", v); return 2; }
        } else {
            int sr = sampling_parse(a, v, &so, err, sizeof err);
            if (sr < 0) { fprintf(stderr, "tierkv run: %s\n", err); return 2; }
            if (!sr) { fprintf(stderr, "tierkv run: unknown flag %s\n", a); usage(stderr); return 2; }
        }
    }
    if (!!prompt + !!prompt_file + !!tok_file != 1) {
        fprintf(stderr, "tierkv run: give exactly one of -p, -f, --tokens\n");
        usage(stderr);
        return 2;
    }
    if (tok_file && chat) { fprintf(stderr, "tierkv run: --chat needs text (-p or -f), not --tokens\n"); return 2; }
    if (!chat && (system || tmpl_name || think >= 0)) {
        fprintf(stderr, "tierkv run: %s applies to --chat only (add --chat)\n",
                system ? "--system" : tmpl_name ? "--template" : "--think");
        return 2;
    }
    {   /* the sampling values are checked before anything is loaded */
        tkv_sampler *probe;
        if (tkv_sampler_open(&so, 1, &probe, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); return 2; }
        tkv_sampler_close(probe);
    }
    if (common_model_path(&c, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); return 1; }

    int rc = 1;
    char *text = NULL, *piece = NULL, *shown = NULL;
    int32_t *ids = NULL, *hist = NULL;
    int n_ids = 0;
    tkv_model *m = NULL;
    tkv_session *s = NULL;
    tkv_sampler *smp = NULL;
    tkv_stop *sm = NULL;
    float *logits = NULL;
    FILE *fj = NULL;

    size_t text_len;
    if (prompt_file) {
        if (eval_read_file(prompt_file, &text, &text_len, err, sizeof err)) { fprintf(stderr, "tierkv run: cannot read %s\n", err); goto out; }
        if (memchr(text, 0, text_len)) {
            fprintf(stderr, "tierkv run: %s holds a NUL byte (at offset %zu): a text prompt cannot contain one\n", prompt_file,
                    (size_t)((char *)memchr(text, 0, text_len) - text));
            goto out;
        }
    }
    if (tok_file && read_token_file(tok_file, &ids, &n_ids, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    if (stats_json && !(fj = fopen(stats_json, "w"))) { /* before the work, not after it */
        fprintf(stderr, "tierkv run: cannot write --stats-json '%s': %s\n", stats_json, strerror(errno));
        goto out;
    }
    if (tkv_model_open(c.model_path, &c.mp, &m, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    if (!tok_file && prompt_ids(m, text ? text : prompt, chat, system, tmpl_name, think > 0 ? think : 0, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "tierkv run: %s\n", err);
        goto out;
    }
    if (n_ids < 1) { fprintf(stderr, "tierkv run: the prompt is empty after tokenization\n"); goto out; }
    tkv_model_info info;
    tkv_model_get_info(m, &info);
    for (int k = 0; k < n_ids; k++)
        if (ids[k] < 0 || ids[k] >= info.n_vocab) {
            fprintf(stderr, "tierkv run: token id %d (at %d) is out of range 0..%d\n", ids[k], k, info.n_vocab - 1);
            goto out;
        }
    /* The context holds the prompt and the generation. An explicit -c caps it and is never raised
     * silently (a prompt and -n that do not fit are refused). Without -c it is the model's
     * context_length: positions past it are ones the model was never trained on, so generation stops
     * there ("stop: context") as llama.cpp's does, however large -n is. */
    long need = (long)n_ids + n_predict;
    int ctx_stop = 0; /* 1: -n was cut to the model's context */
    if (c.ctx_given && need > c.sp.max_ctx) {
        fprintf(stderr, "tierkv run: the prompt (%d tokens) and -n %ld need %ld positions, more than --ctx %d\n", n_ids,
                n_predict, need, c.sp.max_ctx);
        goto out;
    }
    if (c.ctx_given) common_ctx_warn("run", &c, info.n_ctx_train);
    if (!c.ctx_given && info.n_ctx_train > 0) { /* a file without context_length reads as 4096; 0: unknown */
        if (n_ids > info.n_ctx_train) {
            fprintf(stderr, "tierkv run: the prompt (%d tokens) is longer than the model's context (context_length %d)\n",
                    n_ids, info.n_ctx_train);
            goto out;
        }
        if (need > info.n_ctx_train) {
            n_predict = info.n_ctx_train - n_ids;
            need = info.n_ctx_train;
            ctx_stop = 1;
        }
    }
    if (!c.ctx_given) c.sp.max_ctx = (int)need;
    c.sp.max_seqs = 1;
    if (tkv_session_open(m, &c.sp, &s, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    int seq;
    if (tkv_seq_open(s, (int)need, n_ids, &seq, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    int V = info.n_vocab;
    logits = tkv_xmalloc((size_t)V * sizeof(float));
    hist = tkv_xmalloc(((size_t)n_ids + (size_t)n_predict + 1) * sizeof(int32_t));
    memcpy(hist, ids, (size_t)n_ids * sizeof(int32_t));
    int n_hist = n_ids;
    if (tkv_sampler_open(&so, V, &smp, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    sm = tkv_stop_open(stops, n_stops);

    double t0 = tkv_now_s();
    if (tkv_prefill(s, seq, ids, n_ids, logits, 0, err, sizeof err)) { fprintf(stderr, "tierkv run: %s\n", err); goto out; }
    double t1 = tkv_now_s();
    tkv_detok ts;
    tkv_detok_init(&ts);
    size_t outcap = tkv_detok_out_size(m);
    piece = tkv_xmalloc(outcap);
    shown = tkv_xmalloc(tkv_stop_out_size(sm, outcap));
    int n_gen = 0, stopped = 0, werr = 0;
    const char *why = ctx_stop ? "context" : "length";
    for (; n_gen < n_predict; n_gen++) {
        int32_t tok = tkv_sampler_sample(smp, logits, hist, n_hist);
        hist[n_hist++] = tok;
        if (!ignore_eos && tkv_token_is_eog(m, tok)) { why = "end of generation token"; n_gen++; break; }
        size_t np = tkv_detok_token(&ts, m, tok, special, piece);
        size_t ns = 0;
        stopped = tkv_stop_feed(sm, piece, np, shown, &ns);
        werr |= out_write(shown, ns);
        if (werr) { why = "stdout write error"; n_gen++; break; }
        if (stopped) { why = "stop string"; n_gen++; break; }
        if (n_gen + 1 == n_predict) { n_gen++; break; }
        if (tkv_decode(s, &seq, &tok, 1, logits, err, sizeof err)) { fprintf(stderr, "\ntierkv run: %s\n", err); goto out; }
    }
    if (!stopped && !werr) {
        size_t np = tkv_detok_flush(&ts, piece);
        size_t ns = 0;
        tkv_stop_feed(sm, piece, np, shown, &ns);
        werr |= out_write(shown, ns);
        ns = tkv_stop_flush(sm, shown);
        werr |= out_write(shown, ns);
    }
    werr |= out_write("\n", 1);
    double t2 = tkv_now_s();
    tkv_sync(s);
    fprintf(stderr, "\n[tierkv] model %s | %s kernels %s | threads %d | policy %s\n",
            tkv_file_name(c.model_path), info.backend, info.kernels,
            c.mp.n_threads, tkv_policy_name(c.sp.kv.policy));
    char why_note[96] = "";
    if (!strcmp(why, "length")) snprintf(why_note, sizeof why_note, " (the -n cap)");
    else if (!strcmp(why, "context"))
        snprintf(why_note, sizeof why_note, " (the model's context_length, %d positions)", info.n_ctx_train);
    fprintf(stderr, "[tierkv] prompt %d tokens in %.2f s (%.1f tok/s) | generated %d tokens in %.2f s (%.2f tok/s) | stop: %s%s\n",
            n_ids, t1 - t0, n_ids / (t1 - t0), n_gen, t2 - t1, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0, why, why_note);
    if (stats) {
        tkv_stats_print(stderr, s, -1);
        tkv_retier_log_print(stderr, s);
    }
    if (werr) { fprintf(stderr, "tierkv run: writing the text to stdout failed: %s\n", strerror(errno)); goto out; }
    if (fj) {
        int jerr = tkv_stats_write_json(fj, s);
        jerr |= fclose(fj) != 0;
        fj = NULL;
        if (jerr) { fprintf(stderr, "tierkv run: writing --stats-json '%s' failed: %s\n", stats_json, strerror(errno)); goto out; }
    }
    rc = 0;
out:
    if (fj) fclose(fj);
    tkv_sampler_close(smp);
    tkv_stop_close(sm);
    free(piece);
    free(shown);
    free(logits);
    free(hist);
    free(ids);
    free(text);
    tkv_session_close(s);
    tkv_model_close(m);
    return rc;
}
