/* kv_flags.c — parsing of the KV hierarchy flags (see kv_flags.h). */
#include "kv_flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "common.h"

int kv_flags_parse_size(const char *s, uint64_t *out) {
    if (!decimal_text(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"b", 1}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
        {"k", 1024.0}, {"m", 1048576.0}, {"g", 1073741824.0},
        {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    };
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        if (strcasecmp(end, units[u].suffix) != 0) continue;
        double b = floor(v * units[u].mult);
        if (b > 1.8e19) return -1;
        *out = (uint64_t)b;
        return 0;
    }
    return -1;
}

static int parse_ratio(const char *flag, const char *s, double *out, char *err, size_t errlen) {
    double v = 0;
    if (parse_double(s, &v) || !(v >= 0.0 && v <= 1.0))
        return tkv_errf(err, errlen, "%s wants a share of the length in [0, 1], got '%s'", flag, s ? s : "");
    *out = v;
    return 0;
}

static int parse_count(const char *flag, const char *s, long lo, long hi, int *out, char *err, size_t errlen) {
    long v = 0;
    if (parse_int(s, lo, hi, &v))
        return tkv_errf(err, errlen, "%s wants an integer in %ld..%ld, got '%s'", flag, lo, hi, s ? s : "");
    *out = (int)v;
    return 0;
}

int kv_flags_parse(tkv_kv_params *o, int argc, char **argv, int *i, char *err, size_t errlen) {
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0) return 0;
    static const char *with_value[] = {"--policy", "--hbm-ratio", "--hbm-budget", "--t2-ratio", "--evict-ratio",
                                       "--delta", "--sinks", "--window", "--kv-type", "--t0-tokens", "--t2-codec"};
    char name[32];
    const char *eq = strchr(a, '='), *val = NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name) return 0;
    memcpy(name, a, len);
    name[len] = 0;
    if (!strcmp(name, "--staged") || !strcmp(name, "--stage-t2") || !strcmp(name, "--sync-transfers") ||
        !strcmp(name, "--split") || !strcmp(name, "--protect-prompt") || !strcmp(name, "--unpin-prompt") ||
        !strcmp(name, "--host-scores")) {
        if (eq) return tkv_errf(err, errlen, "%s takes no value", name);
        if (!strcmp(name, "--staged")) o->staged = 1;
        else if (!strcmp(name, "--stage-t2")) o->stage_t2 = 1;
        else if (!strcmp(name, "--split")) o->split = 1;
        else if (!strcmp(name, "--protect-prompt")) o->protect_prompt = 1;
        else if (!strcmp(name, "--unpin-prompt")) o->unpin_prompt = 1;
        else if (!strcmp(name, "--host-scores")) o->host_scores = 1;
        else o->sync_transfers = 1;
        return 1;
    }
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(name, with_value[k]);
    if (!known) return 0;
    if (eq) val = eq + 1;
    else if (*i + 1 < argc) val = argv[++*i];
    else return tkv_errf(err, errlen, "%s needs a value", name);

    if (!strcmp(name, "--policy")) {
        tkv_policy p;
        if (tkv_policy_parse(val, &p))
            return tkv_errf(err, errlen, "--policy wants full, hierarchy, evict, quant, streaming, h2o, rkv, snapkv or sink, got '%s'", val);
        o->policy = p;
        return 1;
    }
    if (!strcmp(name, "--t2-codec")) {
        if (!tkv_t2_codec_known(val))
            return tkv_errf(err, errlen, "--t2-codec wants one of %s, got '%s'", tkv_t2_codec_names(), val);
        o->t2_codec = val;
        return 1;
    }
    if (!strcmp(name, "--kv-type")) {
        if (strcmp(val, "f32") && strcmp(val, "f16"))
            return tkv_errf(err, errlen, "--kv-type wants f32 or f16, got '%s'", val);
        o->f16 = !strcmp(val, "f16");
        return 1;
    }
    if (!strcmp(name, "--hbm-ratio")) return parse_ratio(name, val, &o->t0_ratio, err, errlen) ? -1 : 1;
    if (!strcmp(name, "--t2-ratio")) return parse_ratio(name, val, &o->t2_ratio, err, errlen) ? -1 : 1;
    if (!strcmp(name, "--evict-ratio")) return parse_ratio(name, val, &o->evict_ratio, err, errlen) ? -1 : 1;
    if (!strcmp(name, "--hbm-budget")) {
        uint64_t b;
        if (strstr(val, "tok"))
            return tkv_errf(err, errlen, "--hbm-budget takes bytes, not tokens ('%s'): bytes per token depend on the model "
                            "(tierkv plan prints them); use --hbm-ratio for a share of the tokens", val);
        if (kv_flags_parse_size(val, &b) || b == 0)
            return tkv_errf(err, errlen, "--hbm-budget wants a size like 4096, 64KB, 256MiB or 1.5GB, got '%s'", val);
        o->t0_budget_bytes = b;
        return 1;
    }
    if (!strcmp(name, "--delta")) return parse_count(name, val, 1, 1 << 30, &o->delta, err, errlen) ? -1 : 1;
    if (!strcmp(name, "--t0-tokens")) return parse_count(name, val, 1, 1 << 30, &o->t0_tokens, err, errlen) ? -1 : 1;
    if (!strcmp(name, "--sinks")) return parse_count(name, val, 0, 1 << 30, &o->sinks, err, errlen) ? -1 : 1;
    return parse_count(name, val, 0, 1 << 30, &o->window, err, errlen) ? -1 : 1; /* --window */
}

const char *kv_flags_usage(void) {
    return "KV cache (memory hierarchy):\n"
           "      --policy NAME       full (default) | hierarchy | evict | quant | streaming | h2o | rkv | snapkv | sink\n"
           "      --kv-type T         element type of T0/T1 rows: f16 (default, as llama.cpp) or f32\n"
           "      --hbm-ratio R       T0 (fast memory) share of the current length, 0..1\n"
           "      --hbm-budget SIZE   T0 bytes for all live sequences together: 4096, 64KB, 256MiB, 1.5GB\n"
           "      --t0-tokens N       T0 tokens per sequence (as R-KV and SnapKV budgets are given)\n"
           "      --t2-ratio R        int8 host tier share of the length (policy hierarchy)\n"
           "      --evict-ratio R     evicted share at most (hierarchy, quant)\n"
           "      --t2-codec C        T2 codec: q8h (int8, a scale per token and head; CUDA's default), q8b\n"
           "                          (keys in blocks of 32), q8bh (keys rotated, then blocks; the CPU's\n"
           "                          default), q4bh (4 bits),\n"
           "                          q8bhc, q4bhc (q8bh, q4bh with keys centred on the model's K bias)\n"
           "      --delta N           re-tier every N decode steps (64)\n"
           "      --sinks N           protected first tokens (4)\n"
           "      --window N          protected last tokens (64)\n"
           "      --staged            copy T1 rows into a staging area per layer before attention (T2 rows\n"
           "                          are staged where the backend cannot read them in place: CUDA)\n"
           "      --stage-t2          stage T2 rows on the CPU too (the reference for its in-place T2 reads)\n"
           "      --split             attend T1 where it lies and merge by log-sum-exp (no T1 row crosses the bus);\n"
           "                          with --staged only for decode steps (prefill chunks staged)\n"
           "      --protect-prompt    baselines: keep the prompt outside their budget, as our policies do;\n"
           "                          the chain keeps at least --window tokens (evict's budget exactly)\n"
           "      --unpin-prompt      hierarchy: the prompt stays exact and is never evicted, but is not pinned\n"
           "                          in T0: it competes for T0 by score and waits in T1 otherwise\n"
           "      --sync-transfers    run tier moves on the calling thread\n"
           "      --host-scores       off the CPU, add the attention weights to the scores on the host (they\n"
           "                          come back every step; the reference for the GPU's update)\n";
}
