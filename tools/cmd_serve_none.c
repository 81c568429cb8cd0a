/* cmd_serve_none.c — `tierkv serve` in a build without the server (`make SERVE=0`, built with
 * -DTKV_NO_SERVE instead of tools/cmd_serve.c): the command stays listed and says why it cannot run,
 * so a script that asks for it fails with a reason rather than "unknown command". Such a build links
 * neither libmicrohttpd nor jansson (the GPU machine has neither). */
#include <stdio.h>

#include "cmds.h"

#ifndef TKV_NO_SERVE
#error "cmd_serve_none.c is for SERVE=0 builds only (the Makefile picks it)"
#endif

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tierkv serve: this build has no server (built with SERVE=0; rebuild with the server's "
                    "libraries, libmicrohttpd and jansson)\n");
    return 2;
}
