/* common.h — flags shared by the commands that load a model (run, logits, bench, eval, serve):
 * -m MODEL, -t THREADS, --ctx N, --batch N, --isa generic|avx2|avx512, --backend cpu|cuda, and the KV
 * hierarchy flags (tools/kv_flags.h). Also the default model path. */
#ifndef TKV_TOOLS_COMMON_H
#define TKV_TOOLS_COMMON_H
#include <stddef.h>

#include "tierkv.h"

typedef struct {
    const char *model_path; /* NULL: the cached default */
    tkv_model_params mp;    /* -t, --isa, --mmap, --keep-layout, --backend */
    tkv_session_params sp;  /* -c (max_ctx), -b (max_batch), the KV flags (sp.kv) */
    int ctx_given;          /* 1: -c was given (a command must not raise it silently) */
} common_opts;

void common_opts_default(common_opts *c);
/* Consumes one flag at argv[*i] (advancing *i past its value). Returns 1 if consumed, 0 if not a
 * common flag, -1 on a bad value (message in err). */
int common_parse(common_opts *c, int argc, char **argv, int *i, char *err, size_t errlen);
const char *common_usage(void);
/* Resolves the model path: -m, else the cached default model; -1 with a how-to-fetch message. */
int common_model_path(common_opts *c, char *err, size_t errlen);
/* An explicit -c above the model's context_length is allowed (a user may know the model extrapolates),
 * but not silently: one warning on stderr naming both numbers. Nothing when -c was not given. */
void common_ctx_warn(const char *cmd, const common_opts *c, int n_ctx_train);
/* --think on|off (run --chat, chat): the tkv_chat_open flag it asks for, 0 (on) or TKV_CHAT_THINK_OFF;
 * -1 for another value. */
int parse_think(const char *v);
/* Parses an integer flag value with range checking. */
int parse_int(const char *s, long lo, long hi, long *out);
/* 1 when s may be read as a decimal number: not empty, no leading blank (strtod and strtol skip them),
 * no 'x' (strtod reads hex floats such as "0x1p-1"). */
int decimal_text(const char *s);
int parse_double(const char *s, double *out);
/* The sampling flags of run and eval, for flag a with value v: --temp, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --seed. Returns 1 if consumed, 0 if a is not one of them, -1 on
 * a bad value (message in err; ranges are tkv_sampler_open's). */
int sampling_parse(const char *a, const char *v, tkv_sampling *so, char *err, size_t errlen);
#define SAMPLING_USAGE                                                                 \
    "      --temp T            temperature (default 0: greedy)\n"                       \
    "      --top-k K, --top-p P, --min-p P, --repeat-penalty R, --repeat-last-n N\n"    \
    "      --seed S            sampling seed (default 0)\n"
/* An argument as a results file records it (summaries, sweep.cmd): an absolute path by its file
 * name, so that no path of the machine that ran it is kept; anything else as it is. */
const char *recorded_arg(const char *a);

#endif
