/* common.c — shared model-loading flags (see common.h). Only tools read flags and environment. */
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/path.h"
#include "kv_flags.h"

void common_opts_default(common_opts *c) {
    memset(c, 0, sizeof *c);
    tkv_model_params_default(&c->mp);
    tkv_session_params_default(&c->sp);
}

int parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return -1; /* strtol would skip leading blanks */
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int parse_think(const char *v) {
    if (!strcmp(v, "on")) return 0;
    if (!strcmp(v, "off")) return TKV_CHAT_THINK_OFF;
    return -1;
}

const char *recorded_arg(const char *a) {
    return a[0] == '/' ? tkv_file_name(a) : a;
}

int decimal_text(const char *s) { return s && *s && !isspace((unsigned char)*s) && !strpbrk(s, "xX"); }

int parse_double(const char *s, double *out) {
    if (!decimal_text(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1; /* "nan" and "inf" are not values any flag takes */
    *out = v;
    return 0;
}

static int need_value(int argc, char **argv, int i, char *err, size_t errlen) {
    if (i + 1 >= argc) return tkv_errf(err, errlen, "flag %s needs a value", argv[i]);
    return 0;
}

int common_parse(common_opts *c, int argc, char **argv, int *i, char *err, size_t errlen) {
    const char *a = argv[*i];
    long v;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        c->model_path = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        if (parse_int(argv[++*i], 1, 256, &v)) return tkv_errf(err, errlen, "-t wants a thread count 1..256, got '%s'", argv[*i]);
        c->mp.n_threads = (int)v;
        return 1;
    }
    if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        if (parse_int(argv[++*i], 1, 1 << 20, &v)) return tkv_errf(err, errlen, "--ctx wants 1..1048576, got '%s'", argv[*i]);
        c->sp.max_ctx = (int)v;
        c->ctx_given = 1;
        return 1;
    }
    if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        if (parse_int(argv[++*i], 1, 4096, &v)) return tkv_errf(err, errlen, "--batch wants 1..4096, got '%s'", argv[*i]);
        c->sp.max_batch = (int)v;
        return 1;
    }
    if (!strcmp(a, "--mmap")) {
        c->mp.mmap_weights = 1;
        return 1;
    }
    if (!strcmp(a, "--keep-layout")) {
        c->mp.keep_layout = 1;
        return 1;
    }
    if (!strcmp(a, "--isa")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        const char *s = argv[++*i];
        if (strcmp(s, "generic") && strcmp(s, "avx2") && strcmp(s, "avx512") && strcmp(s, "auto"))
            return tkv_errf(err, errlen, "--isa wants generic, avx2, avx512 or auto, got '%s'", s);
        c->mp.kernels = s;
        return 1;
    }
    if (!strcmp(a, "--backend")) {
        if (need_value(argc, argv, *i, err, errlen)) return -1;
        const char *s = argv[++*i];
        if (strcmp(s, "cpu") && strcmp(s, "cuda")) return tkv_errf(err, errlen, "--backend wants cpu or cuda, got '%s'", s);
        c->mp.backend = s;
        return 1;
    }
    return kv_flags_parse(&c->sp.kv, argc, argv, i, err, errlen);
}

const char *common_usage(void) {
    return "  -m, --model FILE    GGUF model (default: the cached Qwen2.5-Coder-1.5B-Instruct Q4_K_M)\n"
           "  -t, --threads N     threads (default 2)\n"
           "  -c, --ctx N         positions per sequence, never raised silently (default: what the command needs;\n"
           "                      run: at most the model's context_length; serve: 4096); a warning when above\n"
           "                      the model's context_length\n"
           "  -b, --batch N       prefill chunk (default 64; 512 on a GPU)\n"
           "      --isa NAME      CPU kernels: auto (cpuid), generic, avx2, avx512\n"
           "      --backend NAME  cpu (default) or cuda (a `make cuda` build)\n"
           "      --mmap          map the model file instead of copying it into huge-page memory (the CUDA\n"
           "                      backend always maps it: it reads the weights once, to upload them)\n"
           "      --keep-layout   run Q4_K/Q6_K/Q5_0/Q8_0 weights in the file's layout (default: reordered at load\n"
           "                      for batched kernels)\n";
}

int common_model_path(common_opts *c, char *err, size_t errlen) {
    if (c->model_path) return 0;
    static char path[4096];
    const char *home = getenv("TIERKV_HOME");
    const char *h = getenv("HOME");
    if (home) snprintf(path, sizeof path, "%s/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", home);
    else snprintf(path, sizeof path, "%s/.cache/tierkv/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", h ? h : ".");
    if (access(path, R_OK) != 0)
        return tkv_errf(err, errlen, "no -m given and the default model is not cached (%s); fetch it with: scripts/fetch-model.sh 1.5b", path);
    c->model_path = path;
    return 0;
}

void common_ctx_warn(const char *cmd, const common_opts *c, int n_ctx_train) {
    if (c->ctx_given && n_ctx_train > 0 && c->sp.max_ctx > n_ctx_train)
        fprintf(stderr, "tierkv %s: warning: --ctx %d is more than the model's context_length %d; positions past %d were "
                "never trained on\n", cmd, c->sp.max_ctx, n_ctx_train, n_ctx_train);
}

int sampling_parse(const char *a, const char *v, tkv_sampling *so, char *err, size_t errlen) {
    long lv;
    double dv;
    if (!strcmp(a, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long sd = strtoull(v, &end, 10);
        if (*end || !*v || *v == '-' || *v == '+' || *v == ' ' || errno == ERANGE)
            return tkv_errf(err, errlen, "bad --seed '%s' (0..%llu)", v, ULLONG_MAX);
        so->seed = sd;
    } else if (!strcmp(a, "--top-k")) {
        if (parse_int(v, 0, 1 << 30, &lv)) return tkv_errf(err, errlen, "bad --top-k '%s'", v);
        so->top_k = (int)lv;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (parse_int(v, -1, 1 << 30, &lv)) return tkv_errf(err, errlen, "bad --repeat-last-n '%s'", v);
        so->repeat_last_n = (int)lv;
    } else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p") || !strcmp(a, "--min-p") || !strcmp(a, "--repeat-penalty")) {
        if (parse_double(v, &dv)) return tkv_errf(err, errlen, "bad %s '%s' (a finite number)", a, v);
        if (!strcmp(a, "--temp")) so->temperature = (float)dv;
        else if (!strcmp(a, "--top-p")) so->top_p = (float)dv;
        else if (!strcmp(a, "--min-p")) so->min_p = (float)dv;
        else so->repeat_penalty = (float)dv;
    } else {
        return 0;
    }
    return 1;
}
