#!/usr/bin/env bash
# serve-load.sh — `tierkv serve` under load, on loopback only, bounded in requests and time:
# CLIENTS streaming clients (bench/serve_load.py) on the first REQUESTS GSM8K problems, greedy,
# Qwen's math prompt with its system prompt sent explicitly, at most MAX_TOKENS each. Runs, one
# server at a time on the same requests:
#   1. full, unlimited memory: the reference answers; throughput, time to first token and
#      inter-token latency percentiles, lost or incomplete responses, T0 held (sampled from
#      /metrics during the run) and the T0 peak /metrics reports;
#   2-4. one absolute T0 budget BUDGET too small for the full caches of all clients (default: half
#      of what run 1's clients would hold at full length): hierarchy with 0% eviction (must give run
#      1's answers), evict (degrades: accuracy by `tierkv grade`), full (queues or refuses: how many,
#      how long); in each, T0 held and its peak against BUDGET;
#   5. llama.cpp's llama-server with SLOTS slots (-np) on the same requests, if LLAMA_BUILD is given:
#      throughput side by side (the goal: tierkv at least 3x). It serves all REQUESTS too (its own
#      time limit, LLAMA_TIME_LIMIT), so both whole-run rates include their own drain at the end; the
#      saturated rates (until the first client has nothing left to send) leave the drain out.
#
#   bench/serve-load.sh [DATA.jsonl] [MODEL.gguf]
#
# Defaults: DATA ../shared/data/gsm8k_test.jsonl, MODEL the cached 1.5B (the default model). Environment: CLIENTS (16),
# REQUESTS (64), MAX_TOKENS (512), THREADS (2), BUDGET (bytes for --hbm-budget; default half of the
# full caches, at least what the session accepts), PREFIX (2: --prefix-cache entries),
# TIME_LIMIT (600: seconds per run before no new request is sent), LLAMA_TIME_LIMIT (3600, the same
# for llama-server, long enough for all requests), RUNS (the runs to do, of full-unlimited,
# hierarchy-e0, evict, full-budget, llama-server; default all; without BUDGET the budget runs need full-unlimited), LLAMA_BUILD (a llama.cpp build
# directory holding bin/llama-server; empty: run 5 skipped), SLOTS (4), PORT (8090), TIERKV
# (build/tierkv), OUT (bench/out/serve-load-DATE). A tiny smoke run:
#   CLIENTS=2 REQUESTS=2 MAX_TOKENS=8 bench/serve-load.sh
set -euo pipefail
DATA=${1:-../shared/data/gsm8k_test.jsonl}
MODEL=${2:-${TIERKV_HOME:-$HOME/.cache/tierkv}/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
CLIENTS=${CLIENTS:-16}; REQUESTS=${REQUESTS:-64}; MAX_TOKENS=${MAX_TOKENS:-512}; THREADS=${THREADS:-2}
TIME_LIMIT=${TIME_LIMIT:-600}; LLAMA_TIME_LIMIT=${LLAMA_TIME_LIMIT:-3600}; SLOTS=${SLOTS:-4}; PORT=${PORT:-8090}; TIERKV=${TIERKV:-build/tierkv}
LLAMA_BUILD=${LLAMA_BUILD:-}; BUDGET=${BUDGET:-}; PREFIX=${PREFIX:-2}
RUNS=${RUNS:-full-unlimited,hierarchy-e0,evict,full-budget,llama-server}
want() { case ",$RUNS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
OUT=${OUT:-bench/out/serve-load-$(date +%Y%m%d-%H%M%S)}
CTX=$((MAX_TOKENS + 512))
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
for f in "$TIERKV" ; do [ -x "$f" ] || { echo "serve-load: missing $f (make)" >&2; exit 1; }; done
[ -r "$DATA" ] || { echo "serve-load: cannot read $DATA" >&2; exit 1; }
[ -r "$MODEL" ] || { echo "serve-load: cannot read $MODEL (scripts/fetch-model.sh 1.5b)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "serve-load: needs python3" >&2; exit 1; }
mkdir -p "$OUT"
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
metric() { grep -E "^$2 " "$1" | awk '{print $2}' | head -1; }

wait_health() { # $1 log file
  server_up "$PORT" "$SPID" 1200 || { echo "serve-load: the server did not come up:" >&2; tail -5 "$1" >&2; exit 1; }
}

fetch_metrics() { # $1 file
  python3 -c "import http.client; c=http.client.HTTPConnection('127.0.0.1',$PORT,timeout=10); c.request('GET','/metrics'); print(c.getresponse().read().decode(), end='')" >"$1"
}

# run NAME FLAGS...: one tierkv server, the load, its metrics; leaves $OUT/NAME.{json,jsonl,metrics}
run_tierkv() {
  local name=$1; shift
  want "$name" || return 0
  "$TIERKV" serve -m "$MODEL" -t "$THREADS" --host 127.0.0.1 --port "$PORT" --parallel "$CLIENTS" --max-queue "$REQUESTS" \
    --ctx "$CTX" --prefix-cache "$PREFIX" "$@" >"$OUT/$name.log" 2>&1 &
  SPID=$!
  wait_health "$OUT/$name.log"
  python3 "$HERE/serve_load.py" --port "$PORT" --data "$DATA" --requests "$REQUESTS" --clients "$CLIENTS" \
    --max-tokens "$MAX_TOKENS" --time-limit "$TIME_LIMIT" --out "$OUT/$name.jsonl" >"$OUT/$name.json"
  fetch_metrics "$OUT/$name.metrics"
  kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  printf '%-26s %s\n' "$name" "$(cat "$OUT/$name.json")"
}


echo "# serve-load: model $(basename "$MODEL"), $REQUESTS problems of $(basename "$DATA"), $CLIENTS streaming clients," \
  "max $MAX_TOKENS tokens, $THREADS threads, out $OUT" | tee "$OUT/run.txt"
echo "# build: $("$TIERKV" --version 2>&1 | head -1); command: CLIENTS=$CLIENTS REQUESTS=$REQUESTS" \
  "MAX_TOKENS=$MAX_TOKENS THREADS=$THREADS SLOTS=$SLOTS BUDGET=$BUDGET TIME_LIMIT=$TIME_LIMIT" \
  "LLAMA_TIME_LIMIT=$LLAMA_TIME_LIMIT RUNS=$RUNS bench/serve-load.sh $DATA $(basename "$MODEL")" |
  tee -a "$OUT/run.txt"
run_tierkv full-unlimited --policy full
# what all clients' caches take at full length (their mean prompt + MAX_TOKENS), and the least
# budget the session takes today: it splits --hbm-budget equally over its sequences (clients and
# prefix entries), and each must hold its prompt and window (64) in T0
if [ -z "$BUDGET" ] && [ -r "$OUT/full-unlimited.metrics" ]; then
  tb=$(metric "$OUT/full-unlimited.metrics" tierkv_kv_t0_token_bytes)
  read -r full floor < <(python3 - "$OUT/full-unlimited.jsonl" "$tb" "$CLIENTS" "$MAX_TOKENS" "$PREFIX" <<'PY'
import json, sys
p = [r["prompt_tokens"] for r in map(json.loads, open(sys.argv[1])) if r.get("prompt_tokens")]
tb, c, mt, px = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print(int(tb * c * (sum(p) / len(p) + mt)), int(tb * (c + px) * (max(p) + 64) * 1.1))
PY
)
  BUDGET=$(( full / 2 > floor ? full / 2 : floor ))
  echo "# tight T0 budget: $BUDGET bytes for all $CLIENTS clients together; their full caches: $full bytes"
  [ "$BUDGET" -lt "$full" ] || echo "# note: at this size the session's least budget ($floor bytes) is not below the full caches: the budget runs are not tight"
fi
if [ -n "$BUDGET" ]; then
  run_tierkv hierarchy-e0 --policy hierarchy --evict-ratio 0 --hbm-budget "$BUDGET"
  run_tierkv evict --policy evict --hbm-budget "$BUDGET"
  run_tierkv full-budget --policy full --hbm-budget "$BUDGET"
elif want hierarchy-e0 || want evict || want full-budget; then
  echo "# the budget runs skipped: no BUDGET given and no full-unlimited run in $OUT to size it from"
fi
if [ -n "$LLAMA_BUILD" ] && want llama-server; then
  "$LLAMA_BUILD/bin/llama-server" -m "$MODEL" -t "$THREADS" -np "$SLOTS" -c $((SLOTS * CTX)) --host 127.0.0.1 --port "$PORT" \
    --no-webui >"$OUT/llama-server.log" 2>&1 &
  SPID=$!
  wait_health "$OUT/llama-server.log"
  python3 "$HERE/serve_load.py" --port "$PORT" --data "$DATA" --requests "$REQUESTS" --clients "$CLIENTS" \
    --max-tokens "$MAX_TOKENS" --time-limit "$LLAMA_TIME_LIMIT" --out "$OUT/llama-server.jsonl" >"$OUT/llama-server.json"
  kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  printf '%-26s %s\n' "llama-server-np$SLOTS" "$(cat "$OUT/llama-server.json")"
fi

echo "# summary"
python3 - "$OUT" "${BUDGET:-0}" "$TIERKV" <<'PY'
import json, os, re, subprocess, sys
out, budget, tierkv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(n):
    p = os.path.join(out, n)
    return json.load(open(p + ".json")) if os.path.exists(p + ".json") else None
def texts(n):
    if not os.path.exists(os.path.join(out, n + ".jsonl")):
        return {}
    return {r["id"]: r["output"] for r in map(json.loads, open(os.path.join(out, n + ".jsonl"))) if r["status"] == 200}
def metrics(n):
    m = {}
    for l in open(os.path.join(out, n + ".metrics")):
        if not l.startswith("#") and " " in l:
            k, v = l.rsplit(" ", 1)
            m[k] = float(v)
    return m
def grade(n):
    r = subprocess.run([tierkv, "grade", "--task", "gsm8k", "--in", os.path.join(out, n + ".jsonl")], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    line = [l for l in r.stdout.splitlines() if l.startswith("accuracy:")]
    return line[-1][10:] if line else "?"
ref = texts("full-unlimited")
print("%-16s %9s %9s %8s %8s %8s %8s %8s %5s %5s %5s %12s %12s %7s %s" % ("run", "tok/s", "sat tok/s", "ttft50", "ttft99", "itl50ms", "itl99ms",
      "ok/sent", "lost", "incpl", "same", "t0_max", "t0_peak", "refused", "accuracy"))
for n in ("full-unlimited", "hierarchy-e0", "evict", "full-budget", "llama-server"):
    s = load(n)
    if not s:
        continue
    t = texts(n)
    same = sum(1 for k, v in t.items() if ref.get(k) == v)
    m = metrics(n) if n != "llama-server" else {}
    seen, peak = s.get("t0_bytes_seen_max"), m.get("tierkv_kv_t0_peak_bytes")
    refused = sum(v for k, v in s["status"].items() if k != "200")
    fmt = lambda v: "%d" % v if v is not None else "-"
    print("%-16s %9.2f %9.2f %8s %8s %8s %8s %8s %5d %5d %5d %12s %12s %7d %s" % (n, s["tok_per_s"] or 0,
          s.get("saturated_tok_per_s") or 0, s["ttft_s"]["50"], s["ttft_s"]["99"],
          s["itl_ms"]["50"], s["itl_ms"]["99"], "%d/%d" % (s["ok"], s["sent"]), s["lost"], s["incomplete"], same, fmt(seen), fmt(peak),
          refused, grade(n)))
    if n != "full-unlimited" and n != "llama-server":
        for what, v in (("T0 held (sampled)", seen), ("the T0 peak /metrics reports", peak)):
            if v is not None and v > budget:
                print("  !! %s: %s, %d bytes, is above --hbm-budget %d" % (n, what, v, budget))
    if n == "hierarchy-e0" and same != len(ref):
        print("  !! hierarchy at 0%% eviction gave %d of %d answers of full with unlimited memory" % (same, len(ref)))
    if n == "full-budget":
        print("  full under the budget: %d refused (%s), the longest refused request waited %.2f s, queue seen up to %s" %
              (refused, s["status"], s["refused_wait_s"], s["queue_seen_max"]))
ll, fu, hi = load("llama-server"), load("full-unlimited"), load("hierarchy-e0")
for key, what in (("tok_per_s", "whole runs"), ("saturated_tok_per_s", "saturated windows")):
    if ll and ll.get(key) and (fu or hi):
        r = lambda x: "%.2fx" % (x[key] / ll[key]) if x and x.get(key) else "-"
        print("throughput vs llama-server (%s, %s of %s requests served): full %s, hierarchy at the budget %s (goal 3x)" %
              (what, ll["sent"], ll["requests"], r(fu), r(hi)))
PY
