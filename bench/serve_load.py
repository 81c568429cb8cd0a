#!/usr/bin/env python3
"""serve_load.py -- the load client of bench/serve-load.sh: CLIENTS streaming clients send GSM8K
chat requests to an OpenAI-compatible server (tierkv serve or llama-server) on loopback, each
taking the next problem as soon as its previous answer is complete, until REQUESTS have been sent
or the time limit passes (then in-flight requests finish, up to a hard limit).

For every request it keeps the status, the streamed text (content and reasoning), the times of
the first delta and of every later one, usage.completion_tokens, finish_reason and whether the
stream was whole (every chunk parsed, one id, a finish_reason, [DONE]). While the run goes it
polls /metrics (when the server has one) for the largest T0 bytes held. Writes one JSON line per
request to --out (with "id", "output", "answer": what `tierkv grade` reads) and prints a summary
as one JSON object: throughput (over the whole run, and over the saturated window: until the first
client finds nothing more to send, so without the drain at the end), time to first token and inter-token latency percentiles, errors,
503s and other refusals, incomplete streams, the T0 peak seen. Standard library only.
"""
import argparse
import http.client
import json
import re
import threading
import time

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(port, body, timeout, t_begin):
    rec = {"status": None, "content": "", "reasoning": "", "t_first": None, "gaps": [], "arrivals": [], "tokens": None,
           "finish": None, "whole": False, "error": None, "chunks": 0}
    t0 = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        rec["status"] = r.status
        if r.status != 200:
            rec["error"] = r.read()[:300].decode("utf-8", "replace")
            rec["retry_after"] = r.getheader("Retry-After")
            c.close()
            rec["seconds"] = time.time() - t0
            return rec
        ids, done, last = set(), False, None
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line or line.startswith(":"):
                continue
            if not line.startswith("data: "):
                rec["error"] = "not an SSE data line: " + line[:100]
                break
            if line[6:] == "[DONE]":
                done = True
                continue
            ch = json.loads(line[6:])
            if "error" in ch:
                rec["error"] = json.dumps(ch["error"])[:300]
                continue
            ids.add(ch.get("id"))
            if ch.get("usage"):
                rec["tokens"] = ch["usage"].get("completion_tokens")
                rec["prompt_tokens"] = ch["usage"].get("prompt_tokens")
            for choice in ch.get("choices") or []:
                d = choice.get("delta") or {}
                piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
                if piece:
                    now = time.time()
                    if rec["t_first"] is None:
                        rec["t_first"] = now - t0
                    elif last is not None:
                        rec["gaps"].append(now - last)
                    last = now
                    rec["arrivals"].append(now - t_begin)
                    rec["chunks"] += 1
                rec["content"] += d.get("content") or ""
                rec["reasoning"] += d.get("reasoning_content") or ""
                if choice.get("finish_reason"):
                    rec["finish"] = choice["finish_reason"]
        c.close()
        rec["whole"] = done and len(ids) == 1 and rec["finish"] is not None and rec["error"] is None
    except Exception as e:  # a broken connection is a lost response, reported, never fatal
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    rec["seconds"] = time.time() - t0
    return rec


def poll_metrics(port, stop, out):
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/metrics")
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
            c.close()
            if r.status == 200:
                for key, name in (("t0", 'tierkv_kv_bytes{tier="t0"}'), ("queue", "tierkv_queue_length"),
                                  ("budget", "tierkv_kv_t0_budget_bytes"), ("peak", "tierkv_kv_t0_peak_bytes")):
                    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
                    if m:
                        out[key] = max(out.get(key, 0), float(m.group(1)))
        except Exception:
            pass
        stop.wait(0.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--time-limit", type=float, default=900)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="x")
    args = ap.parse_args()

    items = []
    with open(args.data) as f:
        for line in f:
            if line.strip():
                items.append(json.loads(line))
            if len(items) == args.requests:
                break
    next_i = [0]
    lock = threading.Lock()
    recs = [None] * len(items)
    t_begin = time.time()
    hard = args.time_limit + 300
    idle_at = []  # when each client found nothing more to send

    def client():
        while True:
            with lock:
                i = next_i[0]
                if i >= len(items) or time.time() - t_begin > args.time_limit:
                    idle_at.append(time.time() - t_begin)
                    return
                next_i[0] += 1
            it = items[i]
            body = {"model": args.model, "messages": [{"role": "system", "content": SYSTEM},
                                                      {"role": "user", "content": it["question"] + SUFFIX}],
                    "max_tokens": args.max_tokens, "temperature": 0, "seed": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            rec = one_request(args.port, body, max(30.0, hard - (time.time() - t_begin)), t_begin)
            rec["id"], rec["answer"] = it["id"], it["answer"]
            recs[i] = rec

    seen = {}
    stop = threading.Event()
    poller = threading.Thread(target=poll_metrics, args=(args.port, stop, seen), daemon=True)
    poller.start()
    ts = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(1.0, hard - (time.time() - t_begin)))
    wall = time.time() - t_begin
    stop.set()
    poller.join(2)

    done = [r for r in recs if r is not None]
    ok = [r for r in done if r["status"] == 200 and r["whole"]]
    with open(args.out, "w") as f:
        for r in done:
            f.write(json.dumps({"id": r["id"], "output": r["reasoning"] + r["content"], "answer": r["answer"],
                                "status": r["status"], "tokens": r["tokens"], "prompt_tokens": r.get("prompt_tokens"), "finish": r["finish"], "whole": r["whole"],
                                "t_first": r["t_first"], "seconds": r["seconds"], "error": r["error"]}) + "\n")
    def n_tokens(r):  # usage.completion_tokens, or the streamed pieces when the server gave no usage
        return r["tokens"] if r["tokens"] is not None else r["chunks"]

    tokens = sum(n_tokens(r) for r in ok)
    # the saturated window: from the start until the first client found nothing more to send (the
    # requests ran out or the time limit passed); inside it every client always had a request in
    # flight, so its rate is the server's under full load, without the drain at the end. Tokens
    # streamed in it: each request's streamed pieces before the end, weighted by its tokens per piece.
    sat_end = min(idle_at) if idle_at else wall
    sat_tokens = sum(n_tokens(r) * sum(1 for a in r["arrivals"] if a <= sat_end) / r["chunks"] for r in ok if r["chunks"])
    ttft = [r["t_first"] for r in ok if r["t_first"] is not None]
    itl = [g for r in ok for g in r["gaps"]]
    summary = {
        "requests": len(items), "sent": len(done), "ok": len(ok), "clients": args.clients, "wall_s": round(wall, 3),
        "tokens": tokens, "tok_per_s": round(tokens / wall, 3) if wall > 0 else None,
        "saturated_s": round(sat_end, 3), "saturated_tok_per_s": round(sat_tokens / sat_end, 3) if sat_end > 0 else None,
        "ttft_s": {p: round(pct(ttft, p), 4) if ttft else None for p in (50, 90, 99)},
        "itl_ms": {p: round(1000 * pct(itl, p), 2) if itl else None for p in (50, 90, 99)},
        "status": {str(s): sum(1 for r in done if r["status"] == s) for s in sorted({r["status"] for r in done}, key=str)},
        "incomplete": sum(1 for r in done if r["status"] == 200 and not r["whole"]),
        # sent but without any answer (no record, or the connection failed before a status)
        "lost": sum(1 for i in range(next_i[0]) if recs[i] is None or recs[i]["status"] is None),
        "not_sent": len(items) - next_i[0],
        "refused_wait_s": round(max([r["seconds"] for r in done if r["status"] != 200] or [0]), 3),
        # sampled from /metrics twice a second during the run
        "t0_bytes_seen_max": seen.get("t0"), "t0_budget_seen_max": seen.get("budget"), "t0_peak_seen_max": seen.get("peak"),
        "queue_seen_max": seen.get("queue"),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
