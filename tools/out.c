/* out.c — checking that stdout took what a command printed (see out.h). */
#include "out.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int out_finish(const char *cmd) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    fprintf(stderr, "tierkv %s: cannot write the output: %s\n", cmd, errno ? strerror(errno) : "write error");
    return 1;
}
