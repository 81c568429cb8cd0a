/* cmd_plan.c — `tierkv plan`: what a KV budget means for a model shape, batch and context, without
 * running anything: KV bytes per tier, fast memory saved against the full cache, and the bus traffic
 * per decode step the tiers imply. The shape comes from a GGUF header (-m) or a named shape (--shape).
 *
 * Model of the numbers (per sequence, at length --ctx, then times --batch):
 *   kv bytes per token  = 2 (K, V) x layers x kv heads x head dim x bytes per element (--kv-type,
 *                         f16 by default, the engine's default too);
 *   T2 bytes per token  = layers x the T2 codec's record (--t2-codec; q8h, the default: 2 x kv heads x
 *                         (head dim + 4), int8 rows and one f32 scale per head; docs/T2-CODECS.md);
 *   T0 tokens           = hbm ratio x ctx, or the absolute budget / batch / kv bytes per token,
 *                         never below the protected sinks + window; T2 = t2 ratio x ctx,
 *                         evicted = evict ratio x ctx, T1 = the rest (policy hierarchy): the KV
 *                         module's own rules (tkv_plan), not a copy of them;
 *   bus per step        = T1 and T2 tokens streamed from host for every decode step (no staging cache);
 *   moves per re-tier   = at least the (1 - hbm ratio) x delta new tokens that must leave T0 every
 *                         delta steps (score reshuffles add promotions on top), amortised per step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/meminfo.h"
#include "cmds.h"
#include "gguf/gguf.h"
#include "common.h"
#include "kv_flags.h"
#include "shapes.h"

typedef struct {
    const char *name;
    int n_layer, n_head_kv, head_dim;
} plan_shape;


static void usage(FILE *f) {
    fprintf(f, "usage: tierkv plan (-m MODEL.gguf | --shape NAME) [--batch B] [--ctx N] [--prompt N] [--kv-type f16|f32] [kv flags]\n"
               "  shapes:");
    for (size_t i = 0; i < shapes_n; i++) fprintf(f, " %s", shapes_table[i].name);
    fprintf(f, "\n  --batch B (1) sequences, --ctx N (4096) positions each, --prompt N (0) of them the prompt\n%s",
            kv_flags_usage());
}

static int shape_from_gguf(const char *path, plan_shape *s, char *err, size_t errlen) {
    gguf_file f;
    if (gguf_open(path, &f, err, errlen)) return -1;
    gguf_str arch;
    char key[160];
    uint32_t v;
    int rc = -1;
    if (gguf_get_str(&f, "general.architecture", &arch, err, errlen)) goto done;
#define KEY(k) (snprintf(key, sizeof key, "%.*s." k, (int)arch.len, arch.ptr), key)
    if (gguf_get_u32(&f, KEY("block_count"), &v, err, errlen)) goto done;
    s->n_layer = (int)v;
    uint32_t n_head, n_embd;
    if (gguf_get_u32(&f, KEY("attention.head_count"), &n_head, err, errlen)) goto done;
    if (gguf_get_u32(&f, KEY("embedding_length"), &n_embd, err, errlen)) goto done;
    s->n_head_kv = gguf_find(&f, KEY("attention.head_count_kv")) && !gguf_get_u32(&f, key, &v, err, errlen) ? (int)v : (int)n_head;
    s->head_dim = n_head ? (int)(n_embd / n_head) : 0;
    if (gguf_find(&f, KEY("attention.key_length")) && !gguf_get_u32(&f, key, &v, err, errlen)) s->head_dim = (int)v;
#undef KEY
    if (s->n_layer <= 0 || s->n_head_kv <= 0 || s->head_dim <= 0) {
        tkv_errf(err, errlen, "%s: no usable shape (layers %d, kv heads %d, head dim %d)", path, s->n_layer, s->n_head_kv, s->head_dim);
        goto done;
    }
    s->name = path;
    rc = 0;
done:
    gguf_free(&f);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    tkv_kv_params o;
    tkv_kv_params_default(&o);
    o.policy = TKV_POLICY_HIERARCHY;
    const char *model = NULL, *shape_name = NULL;
    long batch = 1, ctx = 4096, prompt = 0;
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = kv_flags_parse(&o, argc, argv, &i, err, sizeof err);
        if (r < 0) { fprintf(stderr, "tierkv plan: %s\n", err); return 2; }
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "tierkv plan: %s needs a value or is unknown\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
            if (parse_int(v, 1, 1 << 20, &batch)) { fprintf(stderr, "tierkv plan: --batch wants 1..1048576, got '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (parse_int(v, 1, 1 << 30, &ctx)) { fprintf(stderr, "tierkv plan: --ctx wants a number of positions 1..2^30, got '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--prompt")) {
            if (parse_int(v, 0, 1 << 30, &prompt)) { fprintf(stderr, "tierkv plan: --prompt wants a token count, got '%s'\n", v); return 2; }
        } else { fprintf(stderr, "tierkv plan: unknown flag %s\n", a); usage(stderr); return 2; }
    }
    if (prompt > ctx) { fprintf(stderr, "tierkv plan: --prompt %ld is longer than --ctx %ld\n", prompt, ctx); return 2; }
    if (!model == !shape_name) { fprintf(stderr, "tierkv plan: give exactly one of -m MODEL.gguf and --shape NAME\n"); usage(stderr); return 2; }
    plan_shape sh = {0};
    if (model) {
        if (shape_from_gguf(model, &sh, err, sizeof err)) { fprintf(stderr, "tierkv plan: %s\n", err); return 1; }
    } else {
        const model_shape *ms = shapes_find(shape_name); /* the speed tools' table (shapes.h) */
        if (ms) sh = (plan_shape){ms->name, (int)ms->n_layer, (int)ms->n_head_kv, (int)ms->head_dim};
        if (!sh.name) { fprintf(stderr, "tierkv plan: unknown shape '%s'\n", shape_name); usage(stderr); return 2; }
    }
    if (o.policy != TKV_POLICY_FULL && o.t0_ratio < 0 && !o.t0_budget_bytes && !o.t0_tokens)
        fprintf(stderr, "tierkv plan: no T0 budget given: showing the full cache\n");
    tkv_shape ts = {sh.n_layer, sh.n_head_kv, sh.n_head_kv, sh.head_dim};
    tkv_plan_result pr;
    int prc = tkv_plan(&ts, &o, (int)batch, (int)ctx, (int)prompt, &pr, err, sizeof err);
    if (prc) { fprintf(stderr, "tierkv plan: %s\n", err); return 1; }
    if (pr.t0_raised) printf("note: T0 raised to the %lld protected tokens (prompt, sinks, window)\n", (long long)pr.protected_tokens);
    double kvb = (double)pr.token_bytes[0], t2b = (double)pr.token_bytes[2], B = (double)batch, n = (double)ctx;
    double t0 = (double)pr.t0_tokens, t1 = (double)pr.t1_tokens, t2 = (double)pr.t2_tokens, t3 = (double)pr.t3_tokens;
    printf("plan: %s (%d layers, %d kv heads, head dim %d), %s KV, batch %ld, ctx %ld, policy %s\n", sh.name, sh.n_layer,
           sh.n_head_kv, sh.head_dim, o.f16 ? "f16" : "f32", batch, ctx, tkv_policy_name(o.policy));
    printf("  KV bytes per token: %.0f (%.1f KiB); T2 (%s): %.0f\n", kvb, kvb / 1024, o.t2_codec ? o.t2_codec : tkv_t2_codec_default("cuda"), t2b);
    printf("  %-18s %12s %12s\n", "tier", "tokens/seq", "MiB (batch)");
    printf("  %-18s %12.0f %12.2f\n", "T0 fast memory", t0, tkv_mib(t0 * kvb * B));
    printf("  %-18s %12.0f %12.2f\n", "T1 host full", t1, tkv_mib(t1 * kvb * B));
    printf("  %-18s %12.0f %12.2f\n", "T2 host quantised", t2, tkv_mib(t2 * t2b * B));
    printf("  %-18s %12.0f %12s\n", "T3 evicted", t3, "0");
    double full = n * kvb * B, stage = (double)pr.stage_bytes_total, fast = t0 * kvb * B + stage;
    if (stage > 0) /* the staging mirrors: T1's with --staged, T2's always (a GPU reads T2 through STAGE) */
        printf("  %-18s %12s %12.2f\n", "STAGE fast memory", "-", tkv_mib(stage));
    printf("  full cache %.2f MiB; fast memory saved %.2f MiB (%.1f%%)\n", tkv_mib(full), tkv_mib(full - fast),
           100.0 * (1.0 - fast / full));
    double bus = (t1 * kvb + t2 * t2b) * B;
    double moves = t0 < n && o.policy != TKV_POLICY_EVICT ? (1.0 - t0 / n) * kvb * B : 0; /* evictions copy nothing */
    printf("  bus per decode step: %.2f MiB streamed from host (T1 %.2f + T2 %.2f)\n", tkv_mib(bus), tkv_mib(t1 * kvb * B), tkv_mib(t2 * t2b * B));
    printf("  tier moves: >= %.2f MiB per re-tier (every %d steps), %.3f MiB per step amortised\n", tkv_mib(moves * o.delta),
           o.delta, tkv_mib(moves));
    if (fflush(stdout) || ferror(stdout)) { fprintf(stderr, "tierkv plan: writing to stdout failed\n"); return 1; }
    return 0;
}
