/* test_chat_cmd.c — `tierkv chat` end to end (tests/chat_test.py): through a pipe (the second turn
 * reuses every id of the first and answers as `tierkv run` does on the same ids prefilled at once),
 * DeepSeek-R1's rewriting template (the conversation prefilled again, reasoning apart), Qwen3's
 * thinking switch (--think on|off in chat and run: the prompt's ids, refusals), and on a
 * terminal under tmux (prompt, counts, /stats, Ctrl-C during an answer and at the prompt, /exit).
 * Skips with one line without the fixtures, the binary, python3 or (the terminal ones) tmux. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

static void chat_section(const char *section) {
    NEED("fixtures/models/qwen2-Q8_0.gguf");
    if (access(t_bin(), X_OK)) SKIP("built binary missing");
    if (system("python3 -c '' >/dev/null 2>&1")) SKIP("python3 missing");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 tests/chat_test.py --bin %s --shared %s --tmp %s %s", t_bin(), t_shared(""),
             t_tmpdir(), section);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77) SKIP("tmux missing");
    CHECKF(rc == 0, "chat_test.py %s exited %d", section, rc);
}

TEST(chat_cmd_pipe) { chat_section("pipe"); }
TEST(chat_cmd_rewrite) { chat_section("rewrite"); }
TEST(chat_cmd_think) { chat_section("think"); }
TEST(chat_cmd_tmux) { chat_section("tmux"); }
TEST(chat_cmd_save_load) { chat_section("save"); }
TEST(chat_cmd_ctrl_c) { chat_section("ctrl-c"); }
