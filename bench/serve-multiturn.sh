#!/usr/bin/env bash
# serve-multiturn.sh — multi-turn chat against `tierkv serve`'s kept conversations, on loopback only,
# bounded in time: CLIENTS conversations at once (bench/serve_multiturn.py), TURNS turns each,
# streamed, greedy, at most MAX_TOKENS an answer. Turn 1 is a GSM8K problem (the first CLIENTS of
# DATA, Qwen's math prompt, its system prompt sent explicitly); each later turn sends the whole
# conversation back with the assistant's returned text and a follow-up that refers to it ("Check your
# previous answer...", "Explain the same solution to a ten-year-old.", "What would change if every
# number in the question were doubled?"), as real clients do. One server at a time, each on a free
# loopback port, the same model, THREADS threads, PARALLEL requests decoding at once, CTX positions
# a request:
#   tierkv-conv       tierkv serve --parallel PARALLEL, its defaults (kept conversations: --conversations 16)
#   tierkv-noconv     the same with --conversations 0 (before kept conversations: the prefix cache only)
#   tierkv-hier       kept conversations with --policy hierarchy --hbm-ratio 0.5 (idle ones wait in T1)
#   tierkv-few        only 4 kept conversations (--conversations 4: fewer than CLIENTS fit), the rest
#                     dropped; not in the default list
#   tierkv-park       the same 4, the rest parked on disk (--park-dir, a temporary directory) and
#                     restored when continued; not in the default list
#   llama-server      llama.cpp's server, -np PARALLEL slots, -c PARALLEL x CTX (each slot CTX), its
#                     default cache reuse, requests with "cache_prompt": true
# Per server and turn: time to first token p50/p99 over the clients (queue wait included), prompt
# tokens computed and reused (tierkv: usage.prompt_tokens_details.cached_tokens; llama-server: its
# timings.prompt_n), tokens generated; per server: wall, generated tokens / wall, peak RSS (VmHWM),
# tierkv's T0 peak and kept conversations by tier (/metrics); tierkv's TTFT p50 / llama-server's.
# llama.cpp is built by you, outside this repository, from its public source; pass its build
# directory (the one holding bin/llama-server), or "-" to leave it out.
#
#   bench/serve-multiturn.sh LLAMA_BUILD_DIR [MODEL.gguf]
#   CLIENTS=2 TURNS=2 MAX_TOKENS=16 bench/serve-multiturn.sh -      # a quick smoke run, tierkv only
#
# Run from the repository root. MODEL: the cached Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M).
# Optional: CLIENTS (16), TURNS (4), MAX_TOKENS (128), THREADS (2), PARALLEL (4), CTX (4096: tierkv's
# default --ctx), LIMIT_S (900: seconds a server's run may take; no turn starts after it), SERVERS
# (tierkv-conv tierkv-noconv tierkv-hier llama-server: those to run, in that order; also tierkv-few,
# tierkv-park), DATA
# (../shared/data/gsm8k_test.jsonl), TIERKV (build/tierkv), LLAMA_COMMIT (the llama.cpp commit built, recorded
# beside llama-server --version, which says "unknown" for a build from a source archive), OUT (results/bench/serve-multiturn-COMMIT:
# run.txt with the build, versions, CPU and exact commands; per server NAME.json with every request,
# NAME.log, the server's output; table.txt and summary.json). A server that does not start is
# reported (NAME.failed) and the others still run; every server is killed at the end.
set -euo pipefail
LL=${1:?usage: bench/serve-multiturn.sh LLAMA_BUILD_DIR|- [MODEL.gguf]}
MODEL=${2:-${TIERKV_HOME:-$HOME/.cache/tierkv}/models/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf}
CLIENTS=${CLIENTS:-16}; TURNS=${TURNS:-4}; MAX_TOKENS=${MAX_TOKENS:-128}; THREADS=${THREADS:-2}
PARALLEL=${PARALLEL:-4}; CTX=${CTX:-4096}; LIMIT_S=${LIMIT_S:-900}
SERVERS=${SERVERS:-tierkv-conv tierkv-noconv tierkv-hier llama-server}
DATA=${DATA:-../shared/data/gsm8k_test.jsonl}; TIERKV=${TIERKV:-build/tierkv}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ -x "$TIERKV" ] || { echo "serve-multiturn: missing $TIERKV (make)" >&2; exit 1; }
[ -r "$MODEL" ] || { echo "serve-multiturn: cannot read $MODEL (scripts/fetch-model.sh 0.5b)" >&2; exit 1; }
[ -r "$DATA" ] || { echo "serve-multiturn: cannot read $DATA" >&2; exit 1; }
command -v python3 >/dev/null || { echo "serve-multiturn: needs python3" >&2; exit 1; }
for v in CLIENTS TURNS MAX_TOKENS THREADS PARALLEL CTX LIMIT_S; do
  case "${!v}" in '' | *[!0-9]* | 0) echo "serve-multiturn: $v must be a positive integer, not '${!v}'" >&2; exit 1 ;; esac
done
LLAMA=
if [ "$LL" != - ]; then
  LLAMA="$LL/bin/llama-server"
  [ -x "$LLAMA" ] || { echo "serve-multiturn: missing $LLAMA" >&2; exit 1; }
fi
SPID=
stop_server() {
  [ -n "$SPID" ] || return 0
  kill "$SPID" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$SPID" 2>/dev/null || true
  wait "$SPID" 2>/dev/null || true
  SPID=
}
TMP=
trap 'stop_server; [ -z "$TMP" ] || rm -rf "$TMP"' EXIT
# the servers run a copy of the binary: a rebuild during the run does not change them halfway
TMP=$(mktemp -d)
cp "$TIERKV" "$TMP/tierkv"
BIN=$TMP/tierkv
TK_VERSION=$("$BIN" --version 2>&1 | head -1)
COMMIT=$(echo "$TK_VERSION" | awk '{print $2}' | cut -c1-7)
OUT=${OUT:-results/bench/serve-multiturn-$COMMIT}
mkdir -p "$OUT"
trap 'exit 130' INT TERM
# what the results show of this machine: file names only, never its paths
scrub() {
  sed -e "s|$BIN|$TIERKV|g" -e "s|$TMP/|TMPDIR/|g" -e "s|$HERE/|bench/|g" -e "s|$(dirname "$MODEL")/||g" ${LLAMA:+-e "s|$LL|LLAMA_BUILD_DIR|g"} \
    -e "s|$PWD/||g" -e "s|$HOME|~|g"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# serve NAME KIND COMMAND...: starts the server on a free port, drives the conversations, stops it
serve() {
  local name=$1 kind=$2; shift 2
  local port; port=$(free_port)
  local cmd=("$@" --host 127.0.0.1 --port "$port")
  echo "$name: $(printf '%q ' "${cmd[@]}" | scrub)" | tee -a "$OUT/run.txt"
  rm -f "$OUT/$name.json" "$OUT/$name.failed"
  "${cmd[@]}" >"$OUT/$name.log.raw" 2>&1 &
  SPID=$!
  local up=0
  server_up "$port" "$SPID" && up=1
  if [ "$up" = 1 ]; then
    local drv=(python3 "$HERE/serve_multiturn.py" run --port "$port" --data "$DATA" --name "$name" --kind "$kind"
      --out "$OUT/$name.json" --pid "$SPID" --clients "$CLIENTS" --turns "$TURNS" --max-tokens "$MAX_TOKENS"
      --limit-s "$LIMIT_S")
    echo "  driver: $(printf '%q ' "${drv[@]}" | scrub)" >>"$OUT/run.txt"
    timeout $((LIMIT_S + 300)) "${drv[@]}" 2>&1 | tee -a "$OUT/run.txt" ||
      echo "$name: the driver failed or ran past its limit" | tee -a "$OUT/run.txt" "$OUT/$name.failed"
  else
    echo "$name: the server did not come up; its last lines:" | tee -a "$OUT/run.txt" "$OUT/$name.failed"
    tail -5 "$OUT/$name.log.raw" | scrub | tee -a "$OUT/$name.failed" >&2
  fi
  stop_server # (llama-server may abort on SIGTERM, "terminate called without an active exception": after its answers)
  scrub <"$OUT/$name.log.raw" >"$OUT/$name.log" && rm -f "$OUT/$name.log.raw"
}

{
  echo "# serve-multiturn: $CLIENTS conversations x $TURNS turns, max $MAX_TOKENS tokens an answer, $THREADS threads," \
    "$PARALLEL at once, $CTX positions a request, limit $LIMIT_S s a server"
  echo "# command: CLIENTS=$CLIENTS TURNS=$TURNS MAX_TOKENS=$MAX_TOKENS THREADS=$THREADS PARALLEL=$PARALLEL CTX=$CTX" \
    "LIMIT_S=$LIMIT_S SERVERS='$SERVERS'${LLAMA_COMMIT:+ LLAMA_COMMIT=$LLAMA_COMMIT} bench/serve-multiturn.sh $([ -n "$LLAMA" ] && echo LLAMA_BUILD_DIR || echo -)" \
    "$(basename "$MODEL")"
  echo "# model: $(basename "$MODEL"); data: $(basename "$DATA")"
  echo "# tierkv: $TK_VERSION (repository at $(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
  if [ -n "$LLAMA" ]; then
    echo "# llama-server: $("$LLAMA" --version 2>&1 | grep -E '^(version|built)' | tr '\n' ' ')${LLAMA_COMMIT:+(source commit $LLAMA_COMMIT)}"
  fi
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
} | tee "$OUT/run.txt"

names=()
for s in $SERVERS; do
  case "$s" in
    tierkv-conv) serve "$s" tierkv "$BIN" serve -m "$MODEL" -t "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" ;;
    tierkv-noconv) serve "$s" tierkv "$BIN" serve -m "$MODEL" -t "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" --conversations 0 ;;
    tierkv-hier) serve "$s" tierkv "$BIN" serve -m "$MODEL" -t "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" \
      --policy hierarchy --hbm-ratio 0.5 ;;
    tierkv-few) serve "$s" tierkv "$BIN" serve -m "$MODEL" -t "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" --conversations 4 ;;
    tierkv-park) serve "$s" tierkv "$BIN" serve -m "$MODEL" -t "$THREADS" --ctx "$CTX" --parallel "$PARALLEL" --conversations 4 \
      --park-dir "$TMP/park" ;;
    llama-server)
      [ -n "$LLAMA" ] || { echo "llama-server: left out (LLAMA_BUILD_DIR -)" | tee -a "$OUT/run.txt"; continue; }
      serve "$s" llama "$LLAMA" -m "$MODEL" -t "$THREADS" -np "$PARALLEL" -c $((PARALLEL * CTX)) --no-webui ;;
    *) echo "serve-multiturn: unknown server '$s'" >&2; exit 1 ;;
  esac
  names+=("$s")
done
echo "# results" | tee -a "$OUT/run.txt"
python3 "$HERE/serve_multiturn.py" report --dir "$OUT" "${names[@]}" | tee -a "$OUT/run.txt"
failed=
for f in "$OUT"/*.failed; do [ -e "$f" ] && failed+="$(basename "$f" .failed) "; done
[ -z "$failed" ] || { echo "serve-multiturn: failed: $failed(see $OUT/NAME.failed and NAME.log)" >&2; exit 1; }
