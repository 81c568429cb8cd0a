"""serve_conv_test.py -- kept conversations in `tierkv serve`, end to end over HTTP (tests/test_serve.c
runs it): a next turn takes the finished request's sequence over (prompt and answer reused, counted in
usage.prompt_tokens_details.cached_tokens), with the same log-probabilities as the whole transcript
prefilled from scratch, also after the sequence waited idle in T1 (hierarchy); cache_salt isolates,
cache_prompt false neither reuses nor keeps; /metrics counts it all.

usage: serve_conv_test.py --bin build/tierkv --shared ../shared conversations
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_test as st  # noqa: E402  (the Server class, check and its failure count)

check = st.check

# Completions over raw text: the transcript is plain text, so the next turn's prompt is the last one's
# prompt, its answer and more text. The fixture answers garbage that stops being valid UTF-8 after a few
# tokens, so answers here are 3 tokens long (their text comes back byte for byte).
TURN1 = "User: name a color and say why it is your favourite one.\nAssistant:"
MORE = "\nUser: and a second one, please?\nAssistant:"


def complete(srv, prompt, n, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 2}
    body.update(kw)
    s, _, b = srv.post("/v1/completions", body)
    check(s == 200, "status %d: %s" % (s, b))
    return b


def conv_metrics(srv):
    return {k.replace("tierkv_conversations_", ""): v for k, v in srv.metrics().items() if k.startswith("tierkv_conversations")}


def two_turns(args, flags, ref_flags):
    """Turn 2 on a server keeping conversations (flags) against a fresh server that keeps none."""
    srv = st.Server(args, "--parallel", "2", *flags)
    try:
        b1 = complete(srv, TURN1, 3)
        a1 = b1["choices"][0]["text"]
        n1 = b1["usage"]["prompt_tokens"]
        held = n1 + b1["usage"]["completion_tokens"] - 1  # the last sampled token was never decoded
        m = conv_metrics(srv)
        check(m["kept"] == 1 and m["kept_total"] == 1, "%s: not kept: %s" % (flags, m))
        tiers = [m['tokens{tier="T%d"}' % t] for t in range(4)]
        check(sum(tiers) == held, "%s: the kept conversation holds %s tokens, want %d" % (flags, tiers, held))
        if "hierarchy" in flags:
            check(tiers[0] == 0 and tiers[1] == held, "%s: an idle conversation still in T0: %s" % (flags, tiers))
        else:
            check(tiers[0] == held, "%s: policy full keeps it where it is: %s" % (flags, tiers))
        t2 = TURN1 + a1 + MORE
        b2 = complete(srv, t2, 12)
        check(b2["usage"]["prompt_tokens_details"]["cached_tokens"] == held,
              "%s: turn 2 reused %s tokens, want the %d held" % (flags, b2["usage"]["prompt_tokens_details"], held))
        m = conv_metrics(srv)
        check(m["hits_total"] == 1 and m["reused_tokens_total"] == held and m["kept"] == 1 and m["kept_total"] == 2,
              "%s: metrics after turn 2: %s" % (flags, m))
    finally:
        srv.stop()
    ref = st.Server(args, "--parallel", "2", "--conversations", "0", *ref_flags)
    try:
        r2 = complete(ref, t2, 12)
        check(r2["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "the reference reused %s" % r2["usage"])
        # the same ids when the answer's text tokenises back to the ids generated (this prompt's does), so
        # the same logits bit for bit: the JSON numbers are printed from the same floats
        if check(r2["usage"]["prompt_tokens"] == b2["usage"]["prompt_tokens"], "%s: the turn-2 prompt is %d tokens kept, %d "
                 "fresh" % (flags, b2["usage"]["prompt_tokens"], r2["usage"]["prompt_tokens"])):
            check(b2["choices"][0]["text"] == r2["choices"][0]["text"], "%s: turn 2 differs from a recompute:\n  %r\n  %r" %
                  (flags, b2["choices"][0]["text"], r2["choices"][0]["text"]))
            check(b2["choices"][0]["logprobs"] == r2["choices"][0]["logprobs"], "%s: turn 2's log-probabilities differ" % flags)
    finally:
        ref.stop()


def isolation(args):
    srv = st.Server(args, "--parallel", "2")
    try:
        b1 = complete(srv, TURN1, 3, cache_salt="alice")
        t2 = TURN1 + b1["choices"][0]["text"] + MORE
        b = complete(srv, t2, 4, cache_salt="bob")
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "another salt reused %s" % b["usage"])
        b = complete(srv, t2, 4)
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "no salt reused alice's: %s" % b["usage"])
        kept = conv_metrics(srv)["kept_total"]
        b = complete(srv, t2, 4, cache_salt="alice", cache_prompt=False)
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "cache_prompt false reused %s" % b["usage"])
        check(conv_metrics(srv)["kept_total"] == kept, "cache_prompt false kept its conversation")
        b = complete(srv, t2, 4, cache_salt="alice")
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "alice's own salt reused nothing: %s" % b["usage"])
        for bad in ({"cache_salt": 3}, {"cache_salt": ""}, {"cache_salt": "x" * 257}, {"cache_prompt": "yes"}):
            body = {"prompt": "hi", "max_tokens": 1}
            body.update(bad)
            s, _, e = srv.post("/v1/completions", body)
            field = list(bad)[0]
            check(s == 400 and e["error"]["param"] == field, "%s: %d %s" % (bad, s, e))
    finally:
        srv.stop()


def park_metrics(srv):
    return {k.replace("tierkv_park_", ""): v for k, v in srv.metrics().items() if k.startswith("tierkv_park_")}


def restart(args):
    """Kept conversations parked at exit and restored by the next server on the same directory; a
    count bound parks instead of dropping; records that are not intact are refused and recomputed."""
    flags = ["--policy", "hierarchy", "--hbm-ratio", "0.3", "--delta", "8", "--prefix-cache", "0"]
    d = os.path.join(args.tmp, "park-restart")
    srv = st.Server(args, "--parallel", "2", "--park-dir", d, *flags)
    try:
        b1 = complete(srv, TURN1, 3)
        held = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
        other = complete(srv, "Something else entirely, to be parked as well:", 3)
    finally:
        srv.stop()  # SIGTERM: every kept conversation is parked
    files = sorted(f for f in os.listdir(d) if f.endswith(".tkvrec"))
    check(len(files) == 2, "parked at exit: %s" % files)
    check(all(os.stat(os.path.join(d, f)).st_mode & 0o777 == 0o600 for f in files), "records not 0600")
    check(oct(os.stat(d).st_mode & 0o777) == oct(0o700), "the directory is not 0700")
    with open(os.path.join(d, "0123456789abcdef.tkvrec"), "wb") as f:  # not a record: ignored at start
        f.write(b"junk" * 40)
    t2 = TURN1 + b1["choices"][0]["text"] + MORE
    srv = st.Server(args, "--parallel", "2", "--park-dir", d, *flags)
    try:
        m = park_metrics(srv)
        check(m["records"] == 2, "the second server indexed %s records" % m["records"])
        check(any("0123456789abcdef" in line and "ignored" in line for line in srv.log), "the junk record was not reported")
        b2 = complete(srv, t2, 12)
        check(b2["usage"]["prompt_tokens_details"]["cached_tokens"] == held,
              "after a restart turn 2 reused %s of the %d held" % (b2["usage"]["prompt_tokens_details"], held))
        m = park_metrics(srv)
        check(m["restores_total"] == 1 and m["records"] == 1 and m["restore_failures_total"] == 0, "restores: %s" % m)
    finally:
        srv.stop()
    ref = st.Server(args, "--parallel", "2", "--conversations", "0")
    try:
        r2 = complete(ref, t2, 12)
    finally:
        ref.stop()
    check(r2["choices"][0]["logprobs"] == b2["choices"][0]["logprobs"], "restored turn 2 differs from a recompute")
    # a flipped byte in every record left: refused at its restore, the request recomputed, the server well
    for f in os.listdir(d):
        if f.endswith(".tkvrec") and not f.startswith("0123"):
            p = os.path.join(d, f)
            data = bytearray(open(p, "rb").read())
            data[len(data) // 2] ^= 0x40
            open(p, "wb").write(bytes(data))
    srv = st.Server(args, "--parallel", "2", "--park-dir", d, *flags)
    try:
        b = complete(srv, "Something else entirely, to be parked as well:" + other["choices"][0]["text"] + MORE, 4)
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "a corrupted record was used: %s" % b["usage"])
        m = park_metrics(srv)
        check(m["restore_failures_total"] == 1 and m["restores_total"] == 0, "corrupted record: %s" % m)
        check(any("not restored" in line and "checksum" in line for line in srv.log), "the corrupted record was not reported")
        s, _, _ = srv.request("GET", "/health")
        check(s == 200, "health after a bad record: %d" % s)
    finally:
        srv.stop()
    # a bound of one kept conversation: the older one is parked, and restored when continued
    d2 = os.path.join(args.tmp, "park-bound")
    srv = st.Server(args, "--parallel", "2", "--park-dir", d2, "--conversations", "1", *flags)
    try:
        a = complete(srv, TURN1, 3)
        complete(srv, "Something else entirely, to be parked as well:", 3)
        m = park_metrics(srv)
        check(m["parks_total"] == 1 and m["records"] == 1, "the bound parked %s" % m)
        b = complete(srv, TURN1 + a["choices"][0]["text"] + MORE, 4)
        check(b["usage"]["prompt_tokens_details"]["cached_tokens"] == held, "the parked one reused %s" % b["usage"])
        check(park_metrics(srv)["restores_total"] == 1, "not restored")
    finally:
        srv.stop()
    p = subprocess.run([args.bin, "serve", "-m", os.path.join(args.shared, st.FIXTURE), "--port", "0", "--park-dir", d2,
                        "--conversations", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    check(p.returncode != 0 and b"--park-dir" in p.stderr, "--park-dir without conversations: %d %s" % (p.returncode, p.stderr))
    # keep mode needs a format with reasoning (R1's), and kept conversations; a wrong word is refused
    for extra, want in ((["--template", "chatml", "--history-thinking", "keep"], b"no reasoning"),
                        (["--template", "deepseek-r1", "--history-thinking", "keep", "--conversations", "0"], b"none are kept"),
                        (["--history-thinking", "sometimes"], b"keep or strip")):
        p = subprocess.run([args.bin, "serve", "-m", os.path.join(args.shared, st.FIXTURE), "--port", "0"] + extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        check(p.returncode != 0 and want in p.stderr, "%s: %d %s" % (extra, p.returncode, p.stderr))


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def redis_ready(port, proc, wait=20.0):
    """Whether the Redis server just started answers PING on the loopback port (polled until `wait`
    seconds pass or it exits): a loaded machine can take more than a second to open it."""
    import socket
    import time
    t_end = time.monotonic() + wait
    while time.monotonic() < t_end and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as so:
                so.sendall(b"PING\r\n")
                if so.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def replicas(args):
    """Two servers sharing one Redis (started here on a loopback port, stopped after): turn 1 on A,
    turn 2 on B reuses all of turn 1 with a recompute's log-probabilities; Redis killed: requests are
    still answered (recomputed) and the servers stay well."""
    import shutil
    if not shutil.which("redis-server"):
        print("serve_conv_test: redis-server missing (scripts/setup.sh installs it): the two-replica test skipped",
              file=sys.stderr)
        return
    port = free_port()
    rd = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    flags = ["--policy", "hierarchy", "--hbm-ratio", "0.3", "--delta", "8", "--prefix-cache", "0",
             "--park-store", "redis://127.0.0.1:%d" % port]
    a = b = None
    try:
        check(redis_ready(port, rd), "redis-server on port %d did not answer PING within 20 s" % port)
        a = st.Server(args, "--parallel", "2", *flags)
        b = st.Server(args, "--parallel", "2", *flags)
        b1 = complete(a, TURN1, 3)
        held = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
        check(park_metrics(a)["parks_total"] == 1, "A did not write its conversation through; its store lines:\n%s" %
              "".join(line for line in a.log if "[park]" in line))
        t2 = TURN1 + b1["choices"][0]["text"] + MORE
        b2 = complete(b, t2, 12)
        check(b2["usage"]["prompt_tokens_details"]["cached_tokens"] == held,
              "replica B reused %s of the %d tokens A held" % (b2["usage"]["prompt_tokens_details"], held))
        check(park_metrics(b)["restores_total"] == 1, "B did not restore")
        rd.terminate()
        rd.wait(10)
        b3 = complete(a, "A question while the store is down, long enough to be kept:", 4)
        check(b3["usage"]["completion_tokens"] == 4, "no answer with the store down: %s" % b3)
        b4 = complete(b, TURN1 + b1["choices"][0]["text"] + "\nUser: one more?\nAssistant:", 4)
        check(b4["usage"]["completion_tokens"] == 4, "no answer with the store down: %s" % b4)
        for srv in (a, b):
            s, _, _ = srv.request("GET", "/health")
            check(s == 200 and srv.alive(), "a replica is unwell with the store down")
        check(any("not answering" in line or "cannot connect" in line or "failed" in line for line in a.log + b.log),
              "the store's outage was not logged")
    finally:
        for srv in (a, b):
            if srv:
                srv.stop()
        if rd.poll() is None:
            rd.kill()
    ref = st.Server(args, "--parallel", "2", "--conversations", "0")
    try:
        r2 = complete(ref, t2, 12)
    finally:
        ref.stop()
    check(r2["choices"][0]["logprobs"] == b2["choices"][0]["logprobs"], "turn 2 on the other replica differs from a recompute")


def real_chat(args):
    """The real 0.5B (TIERKV_SLOW_TESTS=1): a two-turn chat whose answer comes back as text reuses all of
    turn 1 and answers as a server that recomputes it, log-probabilities included; so does one whose
    turn 1 was parked when its server stopped and restored by the next."""
    model = st.real_model()
    if not model:
        print("serve_conv_test: the real 0.5B two-turn chat needs it cached and TIERKV_SLOW_TESTS=1: skipped", file=sys.stderr)
        return
    q1 = {"role": "user", "content": "Write a Python function that checks whether a number is prime."}
    q2 = {"role": "user", "content": "Now make it faster for large numbers."}
    answers = []
    for flags in (["--policy", "hierarchy", "--hbm-ratio", "0.5"], ["--conversations", "0"]):
        srv = st.Server(args, "--parallel", "2", *flags, model=model)
        try:
            s, _, b1 = srv.post("/v1/chat/completions", {"messages": [q1], "max_tokens": 120, "temperature": 0})
            check(s == 200, "turn 1: %d" % s)
            held = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
            a1 = {"role": "assistant", "content": b1["choices"][0]["message"]["content"]}
            s, _, b2 = srv.post("/v1/chat/completions", {"messages": [q1, a1, q2], "max_tokens": 60, "temperature": 0,
                                                         "logprobs": True})
            check(s == 200, "turn 2: %d %s" % (s, b2))
            cached = b2["usage"]["prompt_tokens_details"]["cached_tokens"]
            if "--conversations" in flags:
                check(cached == b1["usage"]["prompt_tokens"], "without conversations turn 2 shared %d (the prefix cache)" % cached)
            else:
                check(cached == held, "turn 2 reused %d tokens of the %d held" % (cached, held))
            answers.append((b2["usage"]["prompt_tokens"], b2["choices"][0]))
        finally:
            srv.stop()
    # turn 1 on one server, parked at its stop; turn 2 on the next server on the same directory
    d = os.path.join(args.tmp, "park-real")
    flags = ["--policy", "hierarchy", "--hbm-ratio", "0.5", "--park-dir", d]
    srv = st.Server(args, "--parallel", "2", *flags, model=model)
    try:
        s, _, b1 = srv.post("/v1/chat/completions", {"messages": [q1], "max_tokens": 120, "temperature": 0})
        check(s == 200, "turn 1 before the restart: %d" % s)
        held = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
        a1 = {"role": "assistant", "content": b1["choices"][0]["message"]["content"]}
    finally:
        srv.stop()
    srv = st.Server(args, "--parallel", "2", *flags, model=model)
    try:
        s, _, b2 = srv.post("/v1/chat/completions", {"messages": [q1, a1, q2], "max_tokens": 60, "temperature": 0,
                                                     "logprobs": True})
        check(s == 200 and b2["usage"]["prompt_tokens_details"]["cached_tokens"] == held,
              "after a restart turn 2 reused %s of the %d held" % (b2.get("usage"), held))
        answers.append((b2["usage"]["prompt_tokens"], b2["choices"][0]))
    finally:
        srv.stop()
    for k, what in ((0, "kept"), (2, "parked and restored")):
        check(answers[k][0] == answers[1][0], "turn 2 is %d tokens %s, %d recomputed" % (answers[k][0], what, answers[1][0]))
        check(answers[k][1] == answers[1][1], "turn 2 %s differs from turn 2 recomputed" % what)


def two_clients(args):
    """Two clients whose prompts share a long system prompt: the second must not take the first's
    conversation over (it would lose its answer's rows); the first's next turn reuses all of it."""
    sys_text = ("System: you are a careful assistant. Answer briefly, check every step twice, and say so "
                "when a question cannot be answered from what it gives.\n")
    for flags in ([], ["--prefix-cache", "0"]):
        srv = st.Server(args, "--parallel", "2", *flags)
        try:
            a1 = complete(srv, sys_text + TURN1, 3)
            held = a1["usage"]["prompt_tokens"] + a1["usage"]["completion_tokens"] - 1
            b1 = complete(srv, sys_text + "User: something else entirely?\nAssistant:", 3)
            check(b1["usage"]["prompt_tokens_details"]["cached_tokens"] < held - 8,
                  "%s: the second client reused %s" % (flags, b1["usage"]))
            a2 = complete(srv, sys_text + TURN1 + a1["choices"][0]["text"] + MORE, 4)
            check(a2["usage"]["prompt_tokens_details"]["cached_tokens"] == held,
                  "%s: the first client's turn 2 reused %s of its %d" % (flags, a2["usage"]["prompt_tokens_details"], held))
            # a regenerated answer (the same prompt again) takes its own conversation over (or the prefix)
            r = complete(srv, sys_text + "User: something else entirely?\nAssistant:", 3)
            check(r["usage"]["prompt_tokens_details"]["cached_tokens"] == r["usage"]["prompt_tokens"] - 1,
                  "%s: a regenerated answer reused %s" % (flags, r["usage"]))
        finally:
            srv.stop()


def squeezed(args):
    """A conversation bigger than --conv-host-budget but not its int8 rows: moved to T2, kept, reused."""
    srv = st.Server(args, "--parallel", "2", "--policy", "hierarchy", "--hbm-ratio", "0.3", "--prefix-cache", "0",
                    "--conv-host-budget", "24KiB")
    try:
        b1 = complete(srv, TURN1, 3)
        held = b1["usage"]["prompt_tokens"] + b1["usage"]["completion_tokens"] - 1
        m = conv_metrics(srv)
        check(m["kept"] == 1 and m["compressed_total"] == 1 and m['tokens{tier="T2"}'] == held and
              m["bytes"] <= 24 * 1024 and m["dropped_total"] == 0, "not squeezed into T2: %s" % m)
        b2 = complete(srv, TURN1 + b1["choices"][0]["text"] + MORE, 4)
        check(b2["usage"]["prompt_tokens_details"]["cached_tokens"] == held, "the squeezed one reused %s" % b2["usage"])
    finally:
        srv.stop()


def sec_conversations(args):
    two_turns(args, [], [])
    two_turns(args, ["--policy", "hierarchy", "--hbm-ratio", "0.3", "--delta", "8", "--prefix-cache", "0"], [])
    isolation(args)
    two_clients(args)
    squeezed(args)
    restart(args)
    replicas(args)
    real_chat(args)


SECTIONS = {"conversations": sec_conversations}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("section", choices=sorted(SECTIONS))
    args = ap.parse_args()
    try:
        SECTIONS[args.section](args)
    except Exception as e:  # a crash of the script or the server is a failure with its reason
        import traceback
        traceback.print_exc()
        check(False, "%s: %s" % (args.section, e))
    return 1 if st.failures else 0


if __name__ == "__main__":
    sys.exit(main())
