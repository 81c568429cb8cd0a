#!/usr/bin/env python3
"""serve_multiturn.py -- the driver of bench/serve-multiturn.sh: multi-turn chat conversations
against an OpenAI-compatible server (tierkv serve or llama-server) on loopback. Standard library only.

  serve_multiturn.py run --port P --data GSM8K.jsonl --name NAME --out NAME.json [--pid PID] ...
      CLIENTS conversations at once, one thread each, TURNS turns each through /v1/chat/completions
      (stream, temperature 0, at most MAX_TOKENS): turn 1 asks GSM8K problem i (the first CLIENTS of
      the file), each later turn appends the assistant's returned content and a follow-up that refers
      to it, as a real client does. Per request: time to first token (the first content or reasoning
      byte, counted from the request's send, so a request waiting in the server's queue waits in its
      TTFT), prompt tokens, the prompt tokens reused (usage.prompt_tokens_details.cached_tokens when
      the server says it; else prompt_tokens - timings.prompt_n, llama-server's count of the prompt
      tokens it evaluated) and those computed, the tokens generated. At the end: the server's
      VmHWM and VmRSS (/proc/PID/status) and, when it has one, its /metrics. No new turn starts after
      --limit-s; a request in flight then is given 120 s more before it counts as lost.
  serve_multiturn.py report --dir OUT NAME...
      One table from the runs' NAME.json: rows server x turn, TTFT p50 and p99 over the clients, the
      prompt tokens computed and reused (sums over the clients), tokens generated; per server the wall
      time, generated tokens / wall, peak RSS, T0 peak and the kept conversations by tier; the ratio
      of each tierkv row's TTFT p50 to llama-server's at the same turn. Writes OUT/table.txt and
      OUT/summary.json.
"""
import argparse
import http.client
import json
import os
import threading
import time

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
FOLLOW_UPS = [
    "Check your previous answer step by step and state the final number again.",
    "Explain the same solution to a ten-year-old.",
    "What would change if every number in the question were doubled?",
]


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def http_get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, body


def chat(port, body, timeout):
    """One streamed chat request; never raises: a failure is recorded in "error"."""
    rec = {"status": None, "content": "", "reasoning": "", "ttft_s": None, "prompt_tokens": None,
           "cached_tokens": None, "prompt_n": None, "completion_tokens": None, "chunks": 0,
           "finish": None, "done": False, "error": None}
    t0 = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        rec["status"] = r.status
        if r.status != 200:
            rec["error"] = r.read()[:300].decode("utf-8", "replace")
        else:
            for raw in r:
                line = raw.decode("utf-8").strip()
                if not line or line.startswith(":"):
                    continue
                if not line.startswith("data: "):
                    rec["error"] = "not an SSE data line: " + line[:100]
                    break
                if line[6:] == "[DONE]":
                    rec["done"] = True
                    continue
                ch = json.loads(line[6:])
                if "error" in ch:
                    rec["error"] = json.dumps(ch["error"])[:300]
                    continue
                u = ch.get("usage")
                if u:
                    rec["prompt_tokens"] = u.get("prompt_tokens")
                    rec["completion_tokens"] = u.get("completion_tokens")
                    d = u.get("prompt_tokens_details") or {}
                    if d.get("cached_tokens") is not None:
                        rec["cached_tokens"] = d["cached_tokens"]
                tm = ch.get("timings")
                if tm and tm.get("prompt_n") is not None:
                    rec["prompt_n"] = tm["prompt_n"]
                for choice in ch.get("choices") or []:
                    d = choice.get("delta") or {}
                    piece_c, piece_r = d.get("content") or "", d.get("reasoning_content") or ""
                    if (piece_c or piece_r) and rec["ttft_s"] is None:
                        rec["ttft_s"] = time.time() - t0
                    rec["chunks"] += bool(piece_c or piece_r)
                    rec["content"] += piece_c
                    rec["reasoning"] += piece_r
                    if choice.get("finish_reason"):
                        rec["finish"] = choice["finish_reason"]
        c.close()
    except Exception as e:  # a broken connection is a lost answer, reported, never fatal
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    rec["seconds"] = time.time() - t0
    # prompt tokens computed: the server's own count of reused tokens when it gives one (tierkv's
    # usage; a llama-server that reports cached_tokens), else llama-server's timings.prompt_n
    pt = rec["prompt_tokens"]
    if pt is not None and rec["cached_tokens"] is not None:
        rec["computed"], rec["computed_from"] = pt - rec["cached_tokens"], "usage.cached_tokens"
    elif rec["prompt_n"] is not None:
        rec["computed"], rec["computed_from"] = rec["prompt_n"], "timings.prompt_n"
        if pt is not None:
            rec["cached_tokens"] = pt - rec["prompt_n"]
    else:
        rec["computed"], rec["computed_from"] = pt, "prompt_tokens (no reuse reported)"
    rec["ok"] = rec["status"] == 200 and rec["error"] is None and rec["finish"] is not None
    return rec


def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS"):
                    out[k] = int(v.split()[0]) * 1024  # kB
    except OSError as e:
        out["error"] = str(e)
    return out


def parse_metrics(text):
    m = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        try:
            m[k] = float(v)
        except ValueError:
            pass
    return m


def cmd_run(a):
    items = []
    with open(a.data) as f:
        for line in f:
            if line.strip():
                items.append(json.loads(line))
            if len(items) == a.clients:
                break
    t_begin = time.time()
    recs = []
    lock = threading.Lock()

    def conversation(i):
        it = items[i]
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": it["question"] + SUFFIX}]
        for turn in range(1, a.turns + 1):
            if turn > 1:
                msgs.append({"role": "user", "content": FOLLOW_UPS[(turn - 2) % len(FOLLOW_UPS)]})
            if time.time() - t_begin > a.limit_s:
                return
            body = {"model": a.model, "messages": msgs, "max_tokens": a.max_tokens, "temperature": 0, "seed": 0,
                    "stream": True, "stream_options": {"include_usage": True}, "cache_prompt": True}
            t_send = time.time() - t_begin
            rec = chat(a.port, body, max(30.0, a.limit_s + 120 - (time.time() - t_begin)))
            rec.update({"client": i, "id": it["id"], "turn": turn, "t_send": round(t_send, 3),
                        "t_end": round(time.time() - t_begin, 3)})
            with lock:
                recs.append(rec)
            if not rec["ok"]:
                return  # a conversation whose turn failed ends there
            msgs.append({"role": "assistant", "content": rec["content"]})

    ts = [threading.Thread(target=conversation, args=(i,), daemon=True) for i in range(len(items))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(1.0, a.limit_s + 180 - (time.time() - t_begin)))
    wall = time.time() - t_begin
    lost = sum(t.is_alive() for t in ts)
    res = {"name": a.name, "kind": a.kind, "clients": len(items), "turns": a.turns, "max_tokens": a.max_tokens,
           "limit_s": a.limit_s, "data": os.path.basename(a.data), "wall_s": round(wall, 3),
           "conversations_unfinished": lost, "limit_hit": wall > a.limit_s}
    if a.pid:
        res["proc"] = proc_status(a.pid)
    try:
        st, text = http_get(a.port, "/metrics")
        if st == 200:
            res["metrics"] = parse_metrics(text)
    except Exception as e:
        res["metrics_error"] = str(e)
    with lock:
        res["requests"] = sorted(recs, key=lambda r: (r["client"], r["turn"]))
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    ok = sum(r["ok"] for r in res["requests"])
    gen = sum(r["completion_tokens"] or 0 for r in res["requests"] if r["ok"])
    print("%s: %d/%d turns answered, %d tokens in %.1f s" % (a.name, ok, len(items) * a.turns, gen, wall))


def mib(v):
    return "%.1f" % (v / 2**20) if v is not None else "-"


def fmt(v, f="%.3f"):
    return f % v if v is not None else "-"


def cmd_report(a):
    runs = []
    for n in a.names:
        p = os.path.join(a.dir, n + ".json")
        if os.path.exists(p):
            runs.append(json.load(open(p)))
        else:
            runs.append({"name": n, "missing": True})
    llama = next((r for r in runs if r.get("kind") == "llama" and not r.get("missing")), None)
    ref = next((r for r in runs if r.get("name") == "tierkv-noconv" and not r.get("missing")), None)

    def turns_of(r):
        by = {}
        for q in r["requests"]:
            by.setdefault(q["turn"], []).append(q)
        return by

    def prev_total(r):  # (client, turn) -> what the conversation held after that turn: prompt + answer
        return {(q["client"], q["turn"]): (q["prompt_tokens"] or 0) + (q["completion_tokens"] or 0)
                for q in r["requests"] if q["ok"]}

    ll_p50 = {}
    if llama:
        for t, qs in turns_of(llama).items():
            ll_p50[t] = pct([q["ttft_s"] for q in qs if q["ok"] and q["ttft_s"] is not None], 50)
    ref_text = {}
    if ref:
        ref_text = {(q["client"], q["turn"]): q["content"] for q in ref["requests"] if q["ok"]}

    lines = []
    hdr = "%-17s %4s %6s %8s %8s %9s %9s %9s %9s %10s %9s" % ("server", "turn", "ok", "ttft p50", "ttft p99", "computed",
                                                             "reused", "prompt", "generated", "whole prev", "vs llama")
    lines.append(hdr)
    summary = {"servers": []}
    for r in runs:
        if r.get("missing"):
            lines.append("%-17s did not run (see its .log / .failed)" % r["name"])
            summary["servers"].append({"name": r["name"], "ran": False})
            continue
        prev = prev_total(r)
        srow = {"name": r["name"], "ran": True, "turns": []}
        for t, qs in sorted(turns_of(r).items()):
            ok = [q for q in qs if q["ok"]]
            tt = [q["ttft_s"] for q in ok if q["ttft_s"] is not None]
            p50, p99 = pct(tt, 50), pct(tt, 99)
            comp = sum(q["computed"] or 0 for q in ok)
            reused = sum(q["cached_tokens"] or 0 for q in ok)
            prompt = sum(q["prompt_tokens"] or 0 for q in ok)
            gen = sum(q["completion_tokens"] or 0 for q in ok)
            # turns that reused all the previous turn computed: its prompt and its answer but the last
            # sampled token, which was never run through the model (no K/V of its own)
            whole = [q for q in ok if t > 1 and (q["client"], t - 1) in prev]
            n_whole = sum(1 for q in whole if (q["cached_tokens"] or 0) >= prev[(q["client"], t - 1)] - 1)
            ratio = p50 / ll_p50[t] if r.get("kind") == "tierkv" and ll_p50.get(t) and p50 is not None else None
            same = sum(1 for q in ok if ref_text.get((q["client"], t)) == q["content"]) if ref_text else None
            lines.append("%-17s %4d %6s %8s %8s %9d %9d %9d %9d %10s %9s" % (
                r["name"], t, "%d/%d" % (len(ok), len(qs)), fmt(p50), fmt(p99), comp, reused, prompt, gen,
                "%d/%d" % (n_whole, len(whole)) if t > 1 else "-", "%.2fx" % ratio if ratio is not None else "-"))
            srow["turns"].append({"turn": t, "ok": len(ok), "sent": len(qs), "ttft_p50_s": p50, "ttft_p99_s": p99,
                                  "prompt_computed": comp, "prompt_reused": reused, "prompt_tokens": prompt,
                                  "generated": gen, "reused_whole_previous_turn": n_whole if t > 1 else None,
                                  "ttft_p50_vs_llama": ratio, "answers_equal_to_tierkv_noconv": same,
                                  "computed_from": sorted({q["computed_from"] for q in ok})})
        gen = sum(q["completion_tokens"] or 0 for q in r["requests"] if q["ok"])
        m = r.get("metrics") or {}
        proc = r.get("proc") or {}
        srow.update({"wall_s": r["wall_s"], "generated": gen, "tok_per_s": gen / r["wall_s"] if r["wall_s"] else None,
                     "peak_rss_bytes": proc.get("VmHWM"), "rss_end_bytes": proc.get("VmRSS"),
                     "t0_peak_bytes": m.get("tierkv_kv_t0_peak_bytes"),
                     "conversations_tokens_by_tier": {t: m.get('tierkv_conversations_tokens{tier="%s"}' % t)
                                                      for t in ("T0", "T1", "T2", "T3")} if m else None,
                     "conversations": {k: m.get("tierkv_conversations_" + k) for k in
                                       ("kept", "hits_total", "misses_total", "reused_tokens_total", "kept_total",
                                        "dropped_total")} if m else None,
                     "park": {k: m.get("tierkv_park_" + k) for k in
                              ("parks_total", "restores_total", "restore_failures_total", "restore_seconds_total",
                               "dropped_total")} if m else None,
                     "errors": [q["error"] for q in r["requests"] if not q["ok"]][:5],
                     "failed_turns": sum(1 for q in r["requests"] if not q["ok"]),
                     "conversations_unfinished": r.get("conversations_unfinished"), "limit_hit": r.get("limit_hit")})
        if ref_text and r is not ref:
            srow["answers_equal_to_tierkv_noconv"] = sum(1 for q in r["requests"] if q["ok"] and
                                                         ref_text.get((q["client"], q["turn"])) == q["content"])
        summary["servers"].append(srow)
    lines.append("")
    for s in summary["servers"]:
        if not s["ran"]:
            continue
        ct = s["conversations_tokens_by_tier"]
        conv = s["conversations"]
        line = "%-17s wall %.1f s, %d tokens, %.2f tok/s, peak RSS %s MiB, T0 peak %s MiB" % (
            s["name"], s["wall_s"], s["generated"], s["tok_per_s"] or 0, mib(s["peak_rss_bytes"]), mib(s["t0_peak_bytes"]))
        if ct and any(v is not None for v in ct.values()):
            line += ", kept conversations' tokens T0/T1/T2/T3 %s" % "/".join("%d" % (v or 0) for v in ct.values())
        if conv and conv.get("hits_total") is not None:
            line += ", hits %d misses %d reused %d" % (conv["hits_total"], conv["misses_total"], conv["reused_tokens_total"])
        pk = s.get("park")
        if pk and pk.get("parks_total"):
            line += ", parked %d restored %d (%.2f s) failed %d" % (pk["parks_total"], pk["restores_total"] or 0,
                                                                   pk["restore_seconds_total"] or 0, pk["restore_failures_total"] or 0)
        if conv and conv.get("dropped_total"):
            line += ", dropped %d" % conv["dropped_total"]
        if "answers_equal_to_tierkv_noconv" in s:
            line += ", answers equal to tierkv-noconv's %d" % s["answers_equal_to_tierkv_noconv"]
        if s["failed_turns"] or s["conversations_unfinished"] or s["limit_hit"]:
            line += "; FAILED turns %d, unfinished conversations %s, time limit hit %s, first errors %s" % (
                s["failed_turns"], s["conversations_unfinished"], s["limit_hit"], s["errors"][:2])
        lines.append(line)
    lines.append("")
    lines.append("ttft: seconds from a request's send to its first content byte, queue wait included; computed: prompt "
                 "tokens the server evaluated, summed over the clients; reused: prompt tokens it took from its cache; whole "
                 "prev: turns whose reused tokens cover all the previous turn's prompt and answer (but its last "
                 "sampled token, never run through the model); vs llama: the row's "
                 "ttft p50 / llama-server's at the same turn (below 1: tierkv answers sooner); tok/s: generated tokens / "
                 "wall; peak RSS: the server's VmHWM (file pages of a mapped model included).")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.dir, "table.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--name", required=True)
    r.add_argument("--kind", choices=("tierkv", "llama"), required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--pid", type=int, default=0)
    r.add_argument("--clients", type=int, default=16)
    r.add_argument("--turns", type=int, default=4)
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--limit-s", type=float, default=900)
    r.add_argument("--model", default="x")
    p = sub.add_parser("report")
    p.add_argument("--dir", required=True)
    p.add_argument("names", nargs="+")
    a = ap.parse_args()
    cmd_run(a) if a.cmd == "run" else cmd_report(a)


if __name__ == "__main__":
    main()
