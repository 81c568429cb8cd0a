#!/usr/bin/env python3
"""chat_test.py -- `tierkv chat` end to end, for tests/test_chat_cmd.c.

One section per call:
  pipe     lines from a pipe: exit status 0, the second turn reuses every id the first left in the
           sequence and prefills only its own, and each answer is, byte for byte, what `tierkv run`
           answers greedily to the same ids prefilled at once (the ids --dump-ids wrote): reusing
           the cache changes nothing;
  rewrite  DeepSeek-R1's template drops earlier reasoning: the second turn says it prefilled the
           conversation again, and the reasoning is shown between [thinking] lines;
  tmux     a terminal (tmux): the prompt marker, the counts of two turns, /stats, an unknown
           command, /exit;
  save     a terminal: two turns, /save FILE, a third turn; then a new process /load FILE answers the
           third turn with the same bytes, reusing every position saved (nothing recomputed); a
           record that is not intact is refused and the conversation held goes on;
  think    Qwen3's thinking switch (--template qwen3): with --think off the ids chat dumps and run
           prefills are the template's text with its empty think block ("<think>\n\n</think>\n\n"
           after the assistant header), with --think on (the default) without it, and run answers
           as on those ids given as --tokens; --think off with a format that has no switch is
           refused naming the format, --think with a value other than on/off or without --chat too;
  ctrl-c   a terminal: Ctrl-C stops a long answer and the program stays at the prompt, the tokens
           said so far stay in the sequence (the next turn reuses them), Ctrl-C at the prompt only
           gives a hint, /exit ends it with status 0.
Exit status: 0 all checks passed, 1 a check failed, 77 skipped (tmux missing). The fixture model
has random weights: the answers are nonsense; the counts and the identity are what is checked.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

FIXTURE = "fixtures/models/qwen2-Q8_0.gguf"
N = 16  # tokens per answer where a test caps them
TURN = re.compile(r"\[(\d+) tokens reused, (\d+) prefilled, (\d+) generated, [0-9.]+ tok/s([^\]]*)\]")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("  FAIL chat_test: " + what, file=sys.stderr)
    return cond


def held_after(turn):
    """Ids the sequence holds after a turn capped at N: every answer token is fed back at once but
    an end-of-generation token (an answer shorter than N), which waits for the next message."""
    reused, prefilled, generated = turn[:3]
    return reused + prefilled + generated - (generated < N)


def section_pipe(a):
    ids = os.path.join(a.tmp, "chat-ids.txt")
    p = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "chatml", "--temp", "0", "-n", str(N),
                        "--dump-ids", ids], input=b"hi\nagain\n/exit\n", capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, "piped chat exited %d: %s" % (p.returncode, err))
    turns = [tuple(int(x) for x in m.groups()[:3]) for m in TURN.finditer(err)]
    if not check(len(turns) == 2, "two turn lines, got: " + err):
        return
    check(turns[0][0] == 0, "the first turn reuses nothing: %s" % (turns[0],))
    check(turns[1][0] == held_after(turns[0]), "turn 2 reuses all turn 1 left: %s then %s" % (turns[0], turns[1]))
    lines = open(ids).read().split("\n")
    check(len(lines) == 3 and lines[2] == "", "--dump-ids: one line per turn")
    first, second = lines[0].split(), lines[1].split()
    check(len(first) == turns[0][1], "turn 1's dumped ids are its prefill")
    check(len(second) == turns[1][0] + turns[1][1], "turn 2's dumped ids are the reused and the prefilled ones")
    check(second[:len(first)] == first, "turn 2's ids begin with turn 1's")
    # the same ids prefilled at once, answered by run: the same bytes (run ends its text with a newline, as chat)
    want = b""
    for k, line in enumerate(lines[:2]):
        f = os.path.join(a.tmp, "chat-turn%d.txt" % k)
        open(f, "w").write(line + "\n")
        r = subprocess.run([a.bin, "run", "-m", a.model, "--tokens", f, "--temp", "0", "-n", str(N)],
                           capture_output=True, timeout=60)
        check(r.returncode == 0, "run --tokens exited %d" % r.returncode)
        want += r.stdout
    check(p.stdout == want, "chat's answers are run's on the same ids:\n  chat %r\n  run  %r" % (p.stdout, want))
    # the end of input ends the program as /exit does
    p = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "chatml", "-n", "4"], input=b"hi\n",
                       capture_output=True, timeout=60)
    check(p.returncode == 0 and len(TURN.findall(p.stderr.decode())) == 1, "EOF after one turn: status 0")


def section_rewrite(a):
    p = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "deepseek-r1", "-n", "8"],
                       input=b"hi\nagain\n", capture_output=True, timeout=60)
    err, out = p.stderr.decode("utf-8", "replace"), p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0, "exit status %d" % p.returncode)
    turns = [tuple(int(x) for x in m.groups()[:3]) for m in TURN.finditer(err)]
    m = re.search(r"chat: the template rewrote earlier turns: (\d+) tokens prefilled again", err)
    if check(len(turns) == 2 and m, "two turns and the rewrite line: " + err):
        check(turns[1][0] == 0 and turns[1][1] == int(m.group(1)), "the second turn prefills everything: " + err)
    # R1's prompt opens the reasoning and the fixture never closes it: all of each answer is reasoning
    check(out.count("[thinking]\n") == 2 and out.count("\n[/thinking]\n") == 2 and "\033[" not in out,
          "reasoning between [thinking] lines on a pipe: %r" % out)


PROMPT = re.compile(r"prompt (\d+) tokens")


def section_think(a):
    def tokenize(text):
        r = subprocess.run([a.bin, "tokenize", "-m", a.model, "--special", "-p", text], capture_output=True, timeout=60)
        check(r.returncode == 0, "tokenize exited %d" % r.returncode)
        return r.stdout.decode().split()

    head = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    for think, tail in (("off", "<think>\n\n</think>\n\n"), ("on", ""), (None, "")):
        flags = ["--think", think] if think else []
        want = tokenize(head + tail)
        ids = os.path.join(a.tmp, "think-%s.txt" % think)
        p = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "qwen3", "-n", "4", "--dump-ids", ids] + flags,
                           input=b"hi\n", capture_output=True, timeout=60)
        check(p.returncode == 0, "chat --think %s exited %d: %s" % (think, p.returncode, p.stderr.decode()))
        got = open(ids).read().split("\n")[0].split()
        check(got == want, "chat --think %s prefilled %s, the template's text is %s" % (think, got, want))
        r = subprocess.run([a.bin, "run", "-m", a.model, "--chat", "--template", "qwen3", "-p", "hi", "-n", "6"] + flags,
                           capture_output=True, timeout=60)
        m = PROMPT.search(r.stderr.decode())
        check(r.returncode == 0 and m and int(m.group(1)) == len(want),
              "run --think %s: status %d, %s prompt tokens, the template's text has %d" %
              (think, r.returncode, m and m.group(1), len(want)))
        t = subprocess.run([a.bin, "run", "-m", a.model, "--tokens", ids, "-n", "6"], capture_output=True, timeout=60)
        check(t.returncode == 0 and t.stdout == r.stdout, "run --think %s answers %r, on its ids %r" % (think, r.stdout, t.stdout))
    # refusals: the format named; a bad value; --think without --chat
    for cmd in (["run", "--chat", "-p", "hi", "-n", "2"], ["chat", "-n", "2"]):
        for tmpl in ("chatml", "deepseek-r1", "llama3", "llama3.1"):
            p = subprocess.run([a.bin] + cmd[:1] + ["-m", a.model, "--template", tmpl, "--think", "off"] + cmd[1:],
                               input=b"hi\n", capture_output=True, timeout=60)
            err = p.stderr.decode()
            check(p.returncode != 0 and tmpl in err and "thinking" in err and not p.stdout,
                  "%s --template %s --think off: status %d, %r" % (cmd[0], tmpl, p.returncode, err))
            p = subprocess.run([a.bin] + cmd[:1] + ["-m", a.model, "--template", tmpl, "--think", "on"] + cmd[1:],
                               input=b"hi\n", capture_output=True, timeout=60)
            check(p.returncode == 0, "%s --template %s --think on: status %d" % (cmd[0], tmpl, p.returncode))
        p = subprocess.run([a.bin] + cmd[:1] + ["-m", a.model, "--think", "maybe"] + cmd[1:], input=b"hi\n",
                           capture_output=True, timeout=60)
        check(p.returncode == 2 and "on or off" in p.stderr.decode(), "%s --think maybe: status %d" % (cmd[0], p.returncode))
    p = subprocess.run([a.bin, "run", "-m", a.model, "-p", "hi", "--think", "off"], capture_output=True, timeout=60)
    check(p.returncode == 2 and "--chat" in p.stderr.decode(), "run --think without --chat: status %d" % p.returncode)


class Tmux:
    """One chat in a detached tmux session on a private server; stderr goes to a file, the exit
    status too (tmux may mark a pane dead before it has its status). The shell around the chat
    catches SIGINT (a caught signal is back to default in the chat, which sets its own) so that
    Ctrl-C, sent to the whole foreground group, leaves the shell waiting for the status."""

    def __init__(self, a, name, flags):
        self.sock = os.path.join(a.tmp, "tmux-" + name)
        self.t = name
        self.err = os.path.join(a.tmp, name + ".err")
        self.status = os.path.join(a.tmp, name + ".status")
        self.env = dict(os.environ, TERM=os.environ.get("TERM") or "xterm")
        cmd = "trap true INT; %s chat -m %s %s 2>%s; echo $? >%s.tmp && mv %s.tmp %s" % (
            a.bin, a.model, flags, self.err, self.status, self.status, self.status)
        self.tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "50", cmd)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.sock] + list(args), capture_output=True, env=self.env,
                              timeout=20).stdout.decode("utf-8", "replace")

    def keys(self, *keys):
        self.tmux("send-keys", "-t", self.t, *keys)

    def pane(self):
        return self.tmux("capture-pane", "-p", "-t", self.t)

    def dead(self):
        """None while it runs, else its exit status."""
        return int(open(self.status).read()) if os.path.exists(self.status) else None

    def turns(self):
        text = open(self.err, errors="replace").read() if os.path.exists(self.err) else ""
        return [(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)) for m in TURN.finditer(text)]

    def wait(self, cond, what, limit=20):
        deadline = time.time() + limit
        while time.time() < deadline:
            if cond():
                return True
            time.sleep(0.05)
        return check(False, "%s (pane:\n%s\nstderr: %s)" % (what, self.pane()[-2000:], self.turns()))

    def answering(self, msg):
        """The pane shows text after the line where msg was typed: the answer has begun."""
        lines = self.pane().rstrip().split("\n")
        at = max((i for i, l in enumerate(lines) if l.rstrip().endswith(msg)), default=-1)
        return at >= 0 and any(l.strip() for l in lines[at + 1:])

    def close(self):
        self.tmux("kill-server")


def section_tmux(a):
    t = Tmux(a, "counts", "--template chatml --temp 0 -n %d" % N)
    try:
        t.wait(lambda: t.pane().startswith(">"), "the prompt marker on a terminal")
        t.keys("hi", "Enter")
        t.wait(lambda: len(t.turns()) == 1, "turn 1's line")
        t.keys("again", "Enter")
        if not t.wait(lambda: len(t.turns()) == 2, "turn 2's line"):
            return
        one, two = t.turns()
        check(two[0] == held_after(one), "turn 2 reuses all turn 1 left: %s then %s" % (one, two))
        check(0 < two[1] < one[1], "turn 2 prefills its message only: %s then %s" % (one, two))
        t.keys("/stats", "Enter")
        t.wait(lambda: "last turn:" in t.pane(), "/stats")
        m = re.search(r"sequence: (\d+) positions", t.pane())
        check(m and int(m.group(1)) == held_after(two), "/stats length %s, turns %s %s" % (m and m.group(1), one, two))
        check("last turn: %d tokens reused, %d prefilled, %d generated" % two[:3] in t.pane(), "/stats: the last turn")
        t.keys("/nope", "Enter")
        t.wait(lambda: "unknown command /nope" in t.pane(), "an unknown command is answered")
        check(len(t.turns()) == 2, "an unknown command is not sent to the model")
        t.keys("/exit", "Enter")
        t.wait(lambda: t.dead() is not None, "/exit ends it")
        check(t.dead() == 0, "/exit: status %s" % t.dead())
    finally:
        t.close()


def section_save(a):
    rec = os.path.join(a.tmp, "chat-saved.rec")
    t = Tmux(a, "save1", "--template chatml --temp 0 -n %d" % N)
    try:
        t.wait(lambda: t.pane().startswith(">"), "the prompt marker")
        for k, line in enumerate(("hi", "again")):
            t.keys(line, "Enter")
            t.wait(lambda: len(t.turns()) == k + 1, "turn %d's line" % (k + 1))
        t.keys("/save " + rec, "Enter")
        t.wait(lambda: "saved " in t.pane(), "/save")
        check(os.path.exists(rec) and os.stat(rec).st_mode & 0o777 == 0o600, "the saved file is not there, 0600")
        t.keys("a third one", "Enter")
        if not t.wait(lambda: len(t.turns()) == 3, "turn 3's line"):
            return
        third = t.turns()[2]
        t.keys("/exit", "Enter")
        t.wait(lambda: t.dead() is not None, "/exit")
    finally:
        t.close()
    saved = held_after(t.turns()[1])
    # a new process: the same third answer from the file, every saved position reused
    bad = rec + ".bad"
    data = bytearray(open(rec, "rb").read())
    data[len(data) // 2] ^= 1
    open(bad, "wb").write(bytes(data))
    p = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "chatml", "--temp", "0", "-n", str(N)],
                       input=("/load %s\n/load %s\na third one\n/exit\n" % (bad, rec)).encode(), capture_output=True, timeout=60)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, "the loading chat exited %d: %s" % (p.returncode, err))
    check("not loaded" in out and "checksum" in out, "a flipped byte was not refused: %r" % out)
    check("loaded %d positions and 4 messages" % saved in out, "load: %r (saved %d)" % (out, saved))
    turns = [tuple(int(x) for x in m.groups()[:3]) for m in TURN.finditer(err)]
    if check(len(turns) == 1, "one turn after the load: " + err):
        check(turns[0][:3] == third[:3], "turn 3 after /load %s, in the first process %s" % (turns[0], third))
    # its bytes: those of the third answer of one process that never saved (piped, answers only)
    ref = subprocess.run([a.bin, "chat", "-m", a.model, "--template", "chatml", "--temp", "0", "-n", str(N)],
                         input=b"hi\nagain\na third one\n/exit\n", capture_output=True, timeout=60).stdout.decode("utf-8", "replace")
    ans = out.split("messages from %s\n" % rec, 1)[-1]
    check(ans.strip() != "" and ref.endswith(ans), "the third answer after /load %r is not the end of %r" % (ans, ref))


def section_ctrl_c(a):
    # no answer cap and no end token: an answer runs until the (large) context is full, unless stopped
    t = Tmux(a, "ctrlc", "--template chatml --ignore-eos --ctx 200000")
    try:
        t.wait(lambda: t.pane().startswith(">"), "the prompt marker")
        t.keys("go", "Enter")
        # a Ctrl-C before the answer runs is one at the prompt (a slow build, a busy machine): wait for
        # its first text, then a little more
        t.wait(lambda: t.answering("go"), "the answer begins")
        time.sleep(0.3)
        check(not t.turns() and t.dead() is None, "the answer is still running")
        t.keys("C-c")
        if not t.wait(lambda: len(t.turns()) == 1, "Ctrl-C ends the answer"):
            return
        one = t.turns()[0]
        check("stopped by Ctrl-C" in one[3] and one[2] > 0, "the turn line says it was stopped: %s" % (one,))
        check(t.dead() is None, "still running after Ctrl-C")
        t.wait(lambda: t.pane().rstrip().endswith(">"), "back at the prompt")
        t.keys("C-c")
        t.wait(lambda: "(/exit or Ctrl-D to quit)" in t.pane(), "Ctrl-C at the prompt gives the hint")
        check(t.dead() is None, "still running after Ctrl-C at the prompt")
        t.keys("more", "Enter")
        t.wait(lambda: t.answering("more"), "turn 2's answer begins")  # as for turn 1
        time.sleep(0.3)
        check(len(t.turns()) == 1 and t.dead() is None, "turn 2 is still running")
        t.keys("C-c")
        if t.wait(lambda: len(t.turns()) == 2, "turn 2 stopped too"):
            two = t.turns()[1]
            # stopped answers leave no end token: every token said is in the sequence and reused
            check(two[0] == one[0] + one[1] + one[2], "turn 2 reuses the stopped answer: %s then %s" % (one, two))
        t.keys("/exit", "Enter")
        t.wait(lambda: t.dead() is not None, "/exit ends it")
        check(t.dead() == 0, "/exit: status %s" % t.dead())
    finally:
        t.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("section", choices=["pipe", "rewrite", "think", "tmux", "save", "ctrl-c"])
    a = ap.parse_args()
    a.model = os.path.join(a.shared, FIXTURE)
    if a.section in ("tmux", "save", "ctrl-c") and not shutil.which("tmux"):
        print("chat_test: tmux missing", file=sys.stderr)
        return 77
    {"pipe": section_pipe, "rewrite": section_rewrite, "think": section_think, "tmux": section_tmux, "save": section_save,
     "ctrl-c": section_ctrl_c}[a.section](a)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
