/* cmd_chat.c — `tierkv chat`: a conversation in the terminal on one sequence of one session, kept
 * from turn to turn, so that a turn computes only the tokens it adds (its message, the template's
 * markers and its answer), never the conversation before it.
 *
 * A turn renders the whole conversation with the model's chat template and feeds the sequence the
 * ids after the ones it holds (tools/chat_ids.h: the held ids stay as they were sampled). A template
 * that rewrites earlier turns (DeepSeek-R1 and Qwen3 drop earlier reasoning) makes the held ids no
 * prefix of the text: the sequence is then opened again and the whole conversation prefilled, said
 * on stderr.
 * Every printed answer token is fed back at once, so at a turn's end the sequence holds the whole
 * conversation but the end-of-generation token that closed the answer: that one is fed with the next
 * message when the template writes it there (ChatML's <|im_end|>), else dropped.
 *
 * The context: --ctx positions for the whole conversation (default 4096, at most the model's
 * context_length). A message that does not fit with room for one answer token is refused with a
 * message and the conversation stays as it was; an answer stops when the context is full; /reset
 * starts again. A failed step (a budget the KV flags cannot hold) drops the sequence: the next turn
 * prefills the conversation anew.
 *
 * Lines come from stdin (a terminal or a pipe; a line ending in '\' continues on the next), answers
 * go to stdout token by token, the turn's counts to stderr. Ctrl-C stops an answer (what it said so
 * far stays in the conversation); at the prompt it only says how to leave. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/meminfo.h"
#include "chat_conv.h"
#include "chat_save.h"
#include "chat_ids.h"
#include "chat_stream.h"
#include "cmds.h"
#include "common.h"
#include "kv_flags.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: tierkv chat [-m MODEL.gguf] [options]   (lines on stdin; /help for the commands)\n"
            "  a conversation whose turns reuse the KV cache of the turns before: each turn prefills only\n"
            "  its own message; answers stream to stdout, each turn's token counts go to stderr\n"
            "      --system TEXT       system prompt (default: the template's own)\n"
            "      --template NAME     chat template: chatml, deepseek-r1, llama3, llama3.1, qwen3 (default: from the file)\n"
            "      --think on|off      thinking on (the default) or off (Qwen3's enable_thinking; a format\n"
            "                          without the switch refuses off)\n"
            "  -n, --n-predict N       at most N tokens per answer (default: until end of generation or a\n"
            "                          full context)\n"
            SAMPLING_USAGE
            "      --ignore-eos        do not stop an answer at end-of-generation tokens\n"
            "      --dump-ids FILE     write, at each turn, the ids the answer follows (one line per turn,\n"
            "                          the format of tierkv run --tokens)\n"
            "  commands: /stats (the sequence's length and tiers, the last turn's counts), /reset (a new\n"
            "  conversation), /save FILE and /load FILE (the conversation with its cache: a new process\n"
            "  continues it, nothing recomputed), /help, /exit (also Ctrl-D). Ctrl-C stops an answer.\n"
            "  -c, --ctx N: positions for the whole conversation (default 4096, at most the model's\n"
            "  context_length); a message that does not fit is refused (/reset starts again)\n"
            "%s%s",
            common_usage(), kv_flags_usage());
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

typedef struct {
    tkv_model *m;
    tkv_session *s;
    tkv_chat *ct;
    tkv_sampler *smp;
    chat_conv cv;         /* the messages and the ids the sequence holds */
    int seq;              /* the sequence, -1 when none is open (before a turn, after /reset or a failure) */
    int n_ctx;            /* positions the sequence may hold */
    long n_max;           /* tokens per answer, -1: no cap */
    int ignore_eos;
    float *logits;        /* [n_vocab] */
    char *piece;          /* [tkv_detok_out_size] */
    chat_stream out;
    FILE *dump;           /* --dump-ids, or NULL */
    int reused, prefilled, generated; /* the last turn's counts (/stats) */
} chat;

static void drop_sequence(chat *c) {
    if (c->seq >= 0) tkv_seq_close(c->s, c->seq);
    c->seq = -1;
    c->cv.n_held = 0;
    c->cv.pending = -1;
}

static int dump_ids(chat *c) {
    if (!c->dump) return 0;
    for (int i = 0; i < c->cv.n_held; i++) fprintf(c->dump, i ? " %d" : "%d", c->cv.held[i]);
    fputc('\n', c->dump);
    return fflush(c->dump) ? -1 : 0;
}

/* The ids this turn feeds (malloc'd in *feed) after the held ones, the pending end token first when
 * the text holds it; with a reset (no sequence, or the held ids no prefix of the text) everything.
 * The pending token stays until a prefill took it (or passed it over): a refused turn keeps it. */
static int ids_to_feed(chat *c, const char *text, size_t len, int32_t **feed, int *rewrote) {
    chat_conv *v = &c->cv;
    int32_t *add = NULL;
    int n = CHAT_IDS_NOT_PREFIX, with_pending = 0;
    *rewrote = 0;
    if (c->seq >= 0 && v->pending >= 0) {
        v->held[v->n_held] = v->pending; /* room kept for it: held has n_ctx + 1 entries */
        n = chat_ids_after(c->m, v->held, v->n_held + 1, text, len, &add);
        with_pending = n >= 0;
    }
    if (c->seq >= 0 && n == CHAT_IDS_NOT_PREFIX) n = chat_ids_after(c->m, v->held, v->n_held, text, len, &add);
    if (n >= 0 && n + with_pending == 0) n = CHAT_IDS_NOT_PREFIX, free(add), add = NULL; /* nothing to give logits */
    if (n == CHAT_IDS_NOT_PREFIX) {
        *rewrote = c->seq >= 0;
        drop_sequence(c);
        with_pending = 0;
        n = chat_ids_after(c->m, NULL, 0, text, len, &add);
    }
    if (n < 0) return TKV_ERR;
    *feed = tkv_xmalloc(((size_t)n + 1) * sizeof **feed);
    if (with_pending) (*feed)[0] = v->pending;
    if (n) memcpy(*feed + with_pending, add, (size_t)n * sizeof *add);
    free(add);
    return n + with_pending;
}

/* Samples, prints and feeds back the answer; its ids in *ans (the caller's, n_ctx + 1 entries). */
static int answer(chat *c, int32_t *ans, int *n_ans, int *n_gen, int *n_dec, const char **why, char *err, size_t errlen) {
    chat_conv *v = &c->cv;
    tkv_detok d;
    tkv_detok_init(&d);
    *n_ans = *n_gen = *n_dec = 0;
    *why = NULL;
    for (;;) {
        if (interrupted) { *why = "stopped by Ctrl-C"; break; }
        if (c->n_max >= 0 && *n_gen >= c->n_max) break;
        if (v->n_held >= c->n_ctx) { *why = "the context is full: /reset starts a new conversation"; break; }
        int32_t tok = tkv_sampler_sample(c->smp, c->logits, v->held, v->n_held);
        ++*n_gen;
        if (!c->ignore_eos && tkv_token_is_eog(c->m, tok)) { v->pending = tok; break; }
        ans[(*n_ans)++] = tok;
        size_t np = tkv_detok_token(&d, c->m, tok, 0, c->piece);
        if (chat_stream_feed(&c->out, c->piece, np)) return tkv_errf(err, errlen, "writing the answer to stdout failed");
        if (tkv_decode(c->s, &c->seq, &tok, 1, c->logits, err, errlen)) return TKV_ERR;
        v->held[v->n_held++] = tok;
        ++*n_dec;
    }
    size_t np = tkv_detok_flush(&d, c->piece);
    if (chat_stream_feed(&c->out, c->piece, np) || chat_stream_end(&c->out))
        return tkv_errf(err, errlen, "writing the answer to stdout failed");
    return 0;
}

/* One turn. Returns 0 when the program goes on (also after a refused or failed turn, said on
 * stderr), -1 when stdout failed. */
static int turn(chat *c, const char *user) {
    char err[512];
    chat_conv *v = &c->cv;
    chat_conv_add(v, "user", user, strlen(user));
    size_t len;
    char *text = tkv_chat_render(c->ct, v->msgs, v->n_msgs, 1, &len);
    int32_t *feed = NULL;
    int rewrote, n_feed = text ? ids_to_feed(c, text, len, &feed, &rewrote) : TKV_ERR;
    free(text);
    if (n_feed < 0) {
        fprintf(stderr, "chat: the conversation does not tokenize; message dropped\n");
        chat_conv_pop(v);
        return 0;
    }
    if ((long)v->n_held + n_feed + 1 > c->n_ctx) {
        fprintf(stderr, "chat: this message needs %d positions and the conversation holds %d of %d (--ctx); message "
                "dropped: /reset starts a new conversation\n", n_feed, v->n_held, c->n_ctx);
        free(feed);
        chat_conv_pop(v);
        return 0;
    }
    if (rewrote) fprintf(stderr, "chat: the template rewrote earlier turns: %d tokens prefilled again\n", n_feed);
    int reused = v->n_held;
    if (c->seq < 0 && tkv_seq_open(c->s, c->n_ctx, n_feed, &c->seq, err, sizeof err)) goto failed;
    if (tkv_prefill(c->s, c->seq, feed, n_feed, c->logits, 0, err, sizeof err)) goto failed;
    memcpy(v->held + v->n_held, feed, (size_t)n_feed * sizeof *feed);
    v->n_held += n_feed;
    v->pending = -1; /* fed first, or not in the text: either way no longer the conversation's */
    free(feed);
    feed = NULL;
    if (dump_ids(c)) { fprintf(stderr, "chat: writing --dump-ids failed\n"); return -1; }

    double t1 = tkv_now_s();
    int32_t *ans = tkv_xmalloc(((size_t)c->n_ctx + 1) * sizeof *ans);
    int n_ans, n_gen, n_dec;
    const char *why;
    int rc = answer(c, ans, &n_ans, &n_gen, &n_dec, &why, err, sizeof err);
    double t2 = tkv_now_s();
    size_t alen = 0;
    char *atext = n_ans ? tkv_detokenize(c->m, ans, n_ans, 1, &alen) : NULL;
    chat_conv_add(v, "assistant", atext ? atext : "", alen); /* what was said stays, also when cut short */
    free(atext);
    free(ans);
    c->reused = reused, c->prefilled = n_feed, c->generated = n_gen;
    if (rc) {
        if (!c->out.werr) fprintf(stderr, "chat: %s; the next turn starts the sequence again\n", err);
        drop_sequence(c);
        return c->out.werr ? -1 : 0;
    }
    fprintf(stderr, "[%d tokens reused, %d prefilled, %d generated, %.1f tok/s%s%s]\n", reused, n_feed, n_gen,
            n_dec && t2 > t1 ? n_dec / (t2 - t1) : 0.0, why ? ", " : "", why ? why : "");
    return 0;
failed:
    fprintf(stderr, "chat: %s; message dropped, the next turn starts the sequence again\n", err);
    free(feed);
    chat_conv_pop(v);
    drop_sequence(c);
    return 0;
}

static void print_stats(chat *c) {
    if (c->seq < 0) { printf("no sequence yet: the next message starts one\n"); return; }
    tkv_sync(c->s);
    tkv_stats st;
    char err[256];
    if (tkv_stats_get(c->s, c->seq, &st, err, sizeof err)) { printf("stats: %s\n", err); return; }
    printf("sequence: %d positions of %d (--ctx)%s\n", tkv_seq_len(c->s, c->seq), c->n_ctx,
           c->cv.pending >= 0 ? "; the last answer's end token is fed with the next message" : "");
    static const char *const tier[4] = {"T0 fast", "T1 host", "T2 int8", "T3 evicted"};
    for (int t = 0; t < 4; t++)
        printf("  %-10s %8lld tokens %10.2f MiB\n", tier[t], (long long)st.tokens[t], tkv_mib((double)st.bytes[t]));
    printf("last turn: %d tokens reused, %d prefilled, %d generated\n", c->reused, c->prefilled, c->generated);
}

static const char COMMANDS[] = "commands: /stats (the sequence and the last turn), /reset (a new conversation), "
                               "/save FILE, /load FILE (the conversation and its cache), /help, /exit (or Ctrl-D); "
                               "Ctrl-C stops an answer\n";

/* A /command: 1 to leave, 0 to go on. */
static int command(chat *c, const char *line) {
    if (!strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/stats")) print_stats(c);
    else if (!strcmp(line, "/reset")) {
        drop_sequence(c);
        chat_conv_reset(&c->cv);
        c->reused = c->prefilled = c->generated = 0;
        printf("a new conversation\n");
    } else if (!strncmp(line, "/save ", 6) || !strncmp(line, "/load ", 6)) {
        const char *path = line + 6;
        while (*path == ' ') path++;
        char err[512];
        if (!*path) printf("%.5s wants a file name\n", line);
        else if (line[1] == 's') {
            if (chat_save(c->s, c->seq, &c->cv, path, err, sizeof err)) printf("not saved: %s\n", err);
            else printf("saved %d positions and %d messages to %s\n", c->cv.n_held, c->cv.n_msgs, path);
        } else {
            int seq, old = c->seq;
            c->seq = -1; /* the file's sequence replaces the one held only once it is read whole */
            if (chat_load(c->s, c->m, c->n_ctx, path, &c->cv, &seq, err, sizeof err)) {
                c->seq = old;
                printf("not loaded: %s\n", err);
            } else {
                if (old >= 0) tkv_seq_close(c->s, old);
                c->seq = seq;
                c->reused = c->prefilled = c->generated = 0;
                printf("loaded %d positions and %d messages from %s\n", c->cv.n_held, c->cv.n_msgs, path);
            }
        }
    } else if (!strcmp(line, "/help")) fputs(COMMANDS, stdout);
    else printf("unknown command %s; %s", line, COMMANDS);
    fflush(stdout);
    return 0;
}

/* The next user line without its newline (a line ending in '\' continues on the next one), in
 * *line; 1 for a line, 0 at the end of input, -1 for Ctrl-C at the prompt. */
static int read_line(char **line, size_t *cap, tkv_buf *b, int tty) {
    b->n = 0;
    tkv_buf_adds(b, "");
    for (;;) {
        if (tty) { fputs(b->n ? ". " : "> ", stdout); fflush(stdout); }
        errno = 0;
        ssize_t k = getline(line, cap, stdin);
        if (k < 0) {
            if (errno == EINTR) { clearerr(stdin); return -1; }
            if (b->n) break; /* the end of input after a continued line: what was read is the line */
            return 0;
        }
        while (k > 0 && ((*line)[k - 1] == '\n' || (*line)[k - 1] == '\r')) k--;
        if (k > 0 && (*line)[k - 1] == '\\') { tkv_buf_add(b, *line, (size_t)k - 1), tkv_buf_addc(b, '\n'); continue; }
        tkv_buf_add(b, *line, (size_t)k);
        break;
    }
    return 1;
}

static int run_chat(chat *c) {
    int tty = isatty(0), rc = 0;
    char *line = NULL;
    size_t cap = 0;
    tkv_buf b = {0};
    for (;;) {
        interrupted = 0;
        int r = read_line(&line, &cap, &b, tty);
        if (r == 0) {
            if (tty) fputc('\n', stdout); /* Ctrl-D leaves the shell's prompt on a line of its own */
            break;
        }
        if (r < 0) { fputs("\n(/exit or Ctrl-D to quit)\n", stdout); fflush(stdout); continue; }
        if (!b.n) continue;
        if (b.p[0] == '/') {
            if (command(c, b.p)) break;
            continue;
        }
        if (turn(c, b.p)) { rc = 1; break; }
    }
    free(line);
    tkv_buf_free(&b);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    common_opts co;
    common_opts_default(&co);
    const char *system = NULL, *tmpl_name = NULL, *dump_path = NULL;
    int think = 0; /* the chat flag: 0 or TKV_CHAT_THINK_OFF */
    chat c = {.seq = -1, .n_max = -1};
    tkv_sampling so;
    tkv_sampling_default(&so);
    so.temperature = 0;
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        int r = common_parse(&co, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv chat: %s\n", err); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "--ignore-eos")) { c.ignore_eos = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "tierkv chat: unknown flag or missing value: %s\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--template")) tmpl_name = v;
        else if (!strcmp(a, "--think")) {
            if ((think = parse_think(v)) < 0) {
                fprintf(stderr, "tierkv chat: --think wants on or off, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--dump-ids")) dump_path = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (parse_int(v, 1, 1 << 24, &c.n_max)) { fprintf(stderr, "tierkv chat: bad -n '%s' (1..16777216)\n", v); return 2; }
        } else {
            int sr = sampling_parse(a, v, &so, err, sizeof err);
            if (sr < 0) { fprintf(stderr, "tierkv chat: %s\n", err); return 2; }
            if (!sr) { fprintf(stderr, "tierkv chat: unknown flag %s\n", a); usage(stderr); return 2; }
        }
    }
    {   /* the sampling values are checked before anything is loaded */
        tkv_sampler *probe;
        if (tkv_sampler_open(&so, 1, &probe, err, sizeof err)) { fprintf(stderr, "tierkv chat: %s\n", err); return 2; }
        tkv_sampler_close(probe);
    }
    if (common_model_path(&co, err, sizeof err)) { fprintf(stderr, "tierkv chat: %s\n", err); return 1; }

    int rc = 1;
    struct sigaction sa = {0}, old_sa;
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt returns EINTR */
    sigemptyset(&sa.sa_mask);
    if (dump_path && !(c.dump = fopen(dump_path, "w"))) {
        fprintf(stderr, "tierkv chat: cannot write --dump-ids '%s': %s\n", dump_path, strerror(errno));
        return 1;
    }
    if (tkv_model_open(co.model_path, &co.mp, &c.m, err, sizeof err)) goto fail;
    if (tkv_chat_open(c.m, tmpl_name, think, &c.ct, err, sizeof err)) goto fail;
    tkv_model_info info;
    tkv_model_get_info(c.m, &info);
    if (co.ctx_given) common_ctx_warn("chat", &co, info.n_ctx_train);
    else co.sp.max_ctx = info.n_ctx_train > 0 && info.n_ctx_train < 4096 ? info.n_ctx_train : 4096;
    c.n_ctx = co.sp.max_ctx;
    co.sp.max_seqs = 2; /* the conversation, and a /load read beside it until it is whole */
    if (tkv_session_open(c.m, &co.sp, &c.s, err, sizeof err)) goto fail;
    if (tkv_sampler_open(&so, info.n_vocab, &c.smp, err, sizeof err)) goto fail;
    chat_conv_init(&c.cv, system, c.n_ctx);
    c.logits = tkv_xmalloc((size_t)info.n_vocab * sizeof(float));
    c.piece = tkv_xmalloc(tkv_detok_out_size(c.m));
    const char *open, *close;
    int by = 0;
    tkv_chat_reasoning(c.ct, &open, &close, &by); /* NULL markers: a format without reasoning */
    chat_stream_init(&c.out, open, close, by, isatty(1));
    sigaction(SIGINT, &sa, &old_sa);
    rc = run_chat(&c);
    sigaction(SIGINT, &old_sa, NULL);
    if (rc && c.out.werr) fprintf(stderr, "tierkv chat: writing to stdout failed\n");
    goto out;
fail:
    fprintf(stderr, "tierkv chat: %s\n", err);
out:
    if (c.dump && fclose(c.dump) && !rc) rc = 1, fprintf(stderr, "tierkv chat: writing --dump-ids failed\n");
    chat_stream_free(&c.out);
    chat_conv_free(&c.cv);
    free(c.logits);
    free(c.piece);
    tkv_sampler_close(c.smp);
    tkv_chat_close(c.ct);
    tkv_session_close(c.s);
    tkv_model_close(c.m);
    return rc;
}
