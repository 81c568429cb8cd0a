/* main.c — `tierkv COMMAND ...`: dispatches to the thin command mains in tools/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "base/version.h"
#include "cmds.h"

static const struct { const char *name; int (*fn)(int, char **); const char *what; } commands[] = {
    {"run", cmd_run, "generate text (or continue token ids) with the tiered KV cache"},
    {"chat", cmd_chat, "a conversation in the terminal; each turn reuses the KV cache of the ones before"},
    {"logits", cmd_logits, "write the logits of a token sequence and greedy steps (compare with other engines)"},
    {"bench", cmd_bench, "prefill and decode speed at several context depths"},
    {"bench-ops", cmd_bench_ops, "the backend's decode matmuls and attention alone, on random data of a model's shape"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata, tensors and memory needs"},
    {"gen-random", cmd_gen_random, "write a GGUF with real shapes and random weights"},
    {"tokenize", cmd_tokenize, "text to token ids"},
    {"detokenize", cmd_detokenize, "token ids to text"},
    {"plan", cmd_plan, "KV bytes per tier and bus traffic for a model, batch and context"},
    {"grade", cmd_grade, "grade model outputs (JSONL) for gsm8k, math or arc"},
    {"eval", cmd_eval, "run a benchmark task end to end"},
    {"sweep", cmd_sweep, "run eval over a grid of KV policies and budgets, tables and plots"},
    {"verify", cmd_verify, "check that results files were not edited by hand (per-line checks)"},
#ifdef TKV_NO_SERVE
    {"serve", cmd_serve, "(not in this build: built with SERVE=0) an OpenAI-compatible HTTP server"},
#else
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching over the tiered KV cache"},
#endif
    {"mutate-gguf", cmd_mutate_gguf, "write malformed variants of a GGUF model and a manifest (loader tests)"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv COMMAND [options]   (tierkv COMMAND --help for its options; tierkv --version: the build)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("tierkv %s\nbuilt with: %s\nsources: %s\n", tkv_build_commit(), tkv_build_flags(), tkv_build_sources());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tierkv: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
