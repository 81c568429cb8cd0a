/* out.h — the end of a command whose result goes to stdout: a write that failed (a full disk,
 * /dev/full, a closed pipe) is an error, said on stderr, never an exit status 0. */
#ifndef TKV_TOOLS_OUT_H
#define TKV_TOOLS_OUT_H

/* Flushes stdout; 0 if everything written so far reached it, else 1 with "tierkv CMD: cannot write
 * the output: ..." on stderr. */
int out_finish(const char *cmd);

#endif
