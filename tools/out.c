/* out.c — checking that stdout took what a command printed (see out.h). */
#include "out.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"

int out_finish(const char *cmd) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
    fprintf(stderr, "tierkv %s: cannot write the output: %s\n", cmd, errno ? strerror(errno) : "write error");
    return 1;
}

void out_json_begin(struct json_out *j) {
    json_out_init(j);
    json_out_obj_begin(j);
}

void out_json_end(struct json_out *j) {
    json_out_obj_end(j);
    printf("%s\n", j->b.p);
    json_out_free(j);
}
