/* cmd_verify.c — `tierkv verify FILE.jsonl...`: checks the per-line check of results files written by
 * `tierkv eval` (harness_verify_line: FNV-1a 64 of each line before its "check" field). A line edited
 * by hand without recomputing the check is reported with its number. Lines written before checks
 * existed are counted as unchecked, not as altered; but a file in which no line carries a check (old
 * results, or any other JSON or text) has verified nothing and fails: there is nothing else to
 * verify such lines against. Exit status: 0 every checked line intact and each file with at least
 * one checked line, 1 an altered line, a file with no checked line or an unreadable file, 2 usage. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cmds.h"
#include "out.h"
#include "eval/eval.h"
#include "eval/harness.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tierkv verify RESULTS.jsonl...\n"
               "  prints per file: lines, intact, unchecked (written before checks existed), altered (with line numbers)\n"
               "  exit 0: every file has at least one checked line and none altered; 1: a line altered, a file\n"
               "  unreadable, or a file in which no line carries a check (nothing verified); 2: usage\n"
               "  Results written before lines carried a check (\"N unchecked\") cannot be verified: the check\n"
               "  is the only record of what the line was. Rerun `tierkv eval` into a new file to get checked lines.\n");
}

int cmd_verify(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "tierkv verify: unknown flag %s\n", argv[i]); usage(stderr); return 2; }
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        char *buf, err[512];
        size_t len, pos = 0, n;
        const char *line;
        if (eval_read_file(argv[i], &buf, &len, err, sizeof err)) {
            fprintf(stderr, "tierkv verify: %s\n", err);
            rc = 1;
            continue;
        }
        long ln = 0, lines = 0, ok = 0, unchecked = 0, bad = 0;
        while (eval_next_line(buf, len, &pos, &line, &n)) {
            ln++;
            if (n == 0) continue;
            lines++;
            int v = harness_verify_line(line, n);
            if (v > 0) ok++;
            else if (v == 0) unchecked++;
            else {
                if (bad++ < 20) fprintf(stderr, "tierkv verify: %s:%ld: the line does not match its check (edited?)\n", argv[i], ln);
            }
        }
        free(buf);
        printf("%s: %ld lines, %ld intact, %ld unchecked, %ld altered\n", argv[i], lines, ok, unchecked, bad);
        if (bad) rc = 1;
        else if (!ok) { /* nothing verified is not "all intact" */
            if (!lines) fprintf(stderr, "tierkv verify: %s: no lines: nothing to verify\n", argv[i]);
            else
                fprintf(stderr, "tierkv verify: %s: no line carried a check, so none could be verified (results written "
                        "before checks existed cannot be; other JSON or text has none)\n", argv[i]);
            rc = 1;
        }
    }
    return out_finish("verify") ? 1 : rc;
}
