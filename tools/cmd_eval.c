/* cmd_eval.c — placeholder until the evaluation harness lands (issue 7). */
#include <stdio.h>

#include "cmds.h"

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tierkv eval: not available in this build yet\n");
    return 2;
}
