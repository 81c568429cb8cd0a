/* cmds.h — the tierkv subcommands. Each is a thin main: it parses its own flags (printing usage and
 * returning 2 on a wrong flag), calls the library, and returns the process exit status.
 * tools/main.c dispatches `tierkv NAME ...` to cmd_NAME(argc, argv) with argv[0] = NAME. */
#ifndef TKV_CMDS_H
#define TKV_CMDS_H

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_ops(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_gen_random(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_grade(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_mutate_gguf(int argc, char **argv);

#endif
