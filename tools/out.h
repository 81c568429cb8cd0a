/* out.h — the end of a command whose result goes to stdout: a write that failed (a full disk,
 * /dev/full, a closed pipe) is an error, said on stderr, never an exit status 0. */
#ifndef TKV_TOOLS_OUT_H
#define TKV_TOOLS_OUT_H

/* Flushes stdout; 0 if everything written so far reached it, else 1 with "tierkv CMD: cannot write
 * the output: ..." on stderr. */
int out_finish(const char *cmd);

/* One JSON object on a line of stdout, through the engine's writer (base/json.h): out_json_begin
 * opens the object, out_json_end closes it, prints the line and frees the writer. */
struct json_out;
void out_json_begin(struct json_out *j);
void out_json_end(struct json_out *j);

#endif
