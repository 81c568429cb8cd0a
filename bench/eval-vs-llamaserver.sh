#!/usr/bin/env bash
# eval-vs-llamaserver.sh — evaluation throughput in one run: `tierkv eval` against llama.cpp's
# server with SLOTS parallel slots, on the same first N GSM8K test problems, the same model and
# threads, greedy, Qwen's math prompt with the template's default system prompt sent explicitly
# (llama.cpp's built-in ChatML adds none), at most MAX_TOKENS generated per problem. Prints each
# engine's aggregate tok/s (generated tokens / wall seconds, the model already loaded) and the
# ratio tierkv / llama.cpp. llama.cpp is built by you, outside this repository, from its public
# source; pass its build directory (the one holding bin/llama-server).
#
#   bench/eval-vs-llamaserver.sh LLAMA_BUILD_DIR [MODEL.gguf]
#
# Without a model: the cached default (Qwen2.5-Coder-1.5B-Instruct Q4_K_M). Environment: N (40),
# SLOTS (4), PARALLEL (16: tierkv's problems decoded at once), MAX_TOKENS (1024), THREADS (2),
# PORT (8089), TIERKV (build/tierkv), DATA (../shared/data/gsm8k_test.jsonl), TIERKV_FLAGS (extra
# eval flags, e.g. --no-prefix-cache), REPEAT (1: rounds; round k runs the server first when k is odd
# and tierkv first when it is even, so that a slow drift of the shared machine falls on both engines
# alike; each round prints its own ratio, and with REPEAT > 1 the median of the rounds' ratios is
# printed last). Needs curl and jq. Each request is sent once the previous one on its slot has
# returned (xargs -P SLOTS), as a client of a 4-slot server would.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
LL=${1:?usage: bench/eval-vs-llamaserver.sh LLAMA_BUILD_DIR [MODEL.gguf]}
MODEL=${2:-$(scripts/fetch-model.sh 1.5b)}
N=${N:-40}; SLOTS=${SLOTS:-4}; PARALLEL=${PARALLEL:-16}; MAX_TOKENS=${MAX_TOKENS:-1024}; THREADS=${THREADS:-2}
REPEAT=${REPEAT:-1}; PORT=${PORT:-8089}; TIERKV=${TIERKV:-build/tierkv}; DATA=${DATA:-../shared/data/gsm8k_test.jsonl}
SYSTEM="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
SERVER="$LL/bin/llama-server"
for b in "$SERVER" "$TIERKV"; do [ -x "$b" ] || { echo "eval-vs-llamaserver: missing $b" >&2; exit 1; }; done
for t in curl jq; do command -v $t >/dev/null || { echo "eval-vs-llamaserver: needs $t" >&2; exit 1; }; done
[ -r "$DATA" ] || { echo "eval-vs-llamaserver: cannot read $DATA" >&2; exit 1; }
[ -r "$MODEL" ] || { echo "eval-vs-llamaserver: cannot read $MODEL" >&2; exit 1; }
case "$REPEAT" in '' | *[!0-9]* | 0) echo "eval-vs-llamaserver: REPEAT must be a positive integer, not '$REPEAT'" >&2; exit 1 ;; esac
W=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
now() { date +%s.%N; }

echo "# model $(basename "$MODEL"), first $N problems of $(basename "$DATA"), max $MAX_TOKENS tokens, $THREADS threads"

# ---- llama.cpp server, SLOTS slots: sets ll_tps ----
run_server() {
  "$SERVER" -m "$MODEL" -t "$THREADS" -np "$SLOTS" -c $((SLOTS * (MAX_TOKENS + 512))) --port "$PORT" --no-webui \
    >"$W/server.log" 2>&1 &
  SPID=$!
  server_up "$PORT" "$SPID" || { echo "eval-vs-llamaserver: llama-server did not come up:" >&2; tail -5 "$W/server.log" >&2; exit 1; }
  rm -rf "$W/resp"; mkdir -p "$W/resp"
  t0=$(now)
  seq 0 $((n_req - 1)) |
    xargs -P "$SLOTS" -I{} curl -sf -H 'Content-Type: application/json' --data-binary @"$W/req.{}.json" \
      -o "$W/resp/{}.json" "http://127.0.0.1:$PORT/v1/chat/completions"
  t1=$(now)
  kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
  ll_tok=$(cat "$W"/resp/*.json | jq -s 'map(.usage.completion_tokens) | add')
  ll_n=$(ls "$W/resp" | wc -l)
  ll_s=$(echo "$t1 - $t0" | bc -l)
  ll_tps=$(echo "$ll_tok / $ll_s" | bc -l)
  printf 'llama.cpp server  %d slots: %d problems, %d tokens in %.1f s: %.2f tok/s\n' "$SLOTS" "$ll_n" "$ll_tok" "$ll_s" "$ll_tps"
}

# ---- tierkv eval: sets tk_tps ----
run_tierkv() {
  # shellcheck disable=SC2086
  "$TIERKV" eval -m "$MODEL" -t "$THREADS" --task gsm8k --data "$DATA" --n "$N" --max-tokens "$MAX_TOKENS" \
    --parallel "$PARALLEL" --quiet --out "$W/tierkv.$round.jsonl" ${TIERKV_FLAGS:-} </dev/null >"$W/tierkv.txt" 2>&1 ||
    { echo "eval-vs-llamaserver: tierkv eval failed:" >&2; tail -5 "$W/tierkv.txt" >&2; exit 1; }
  line=$(grep 'tok/s aggregate' "$W/tierkv.txt")
  tk_tok=$(echo "$line" | sed -E 's/.* ([0-9]+) tokens in .*/\1/')
  tk_s=$(echo "$line" | sed -E 's/.* tokens in ([0-9.]+) s.*/\1/')
  tk_tps=$(echo "$tk_tok / $tk_s" | bc -l)
  printf 'tierkv eval       %d at once: %d problems, %d tokens in %.1f s: %.2f tok/s\n' "$PARALLEL" "$N" "$tk_tok" "$tk_s" "$tk_tps"
}

head -n "$N" "$DATA" | jq -c --arg sys "$SYSTEM" --argjson max "$MAX_TOKENS" \
  '{messages: [{role: "system", content: $sys},
               {role: "user", content: (.question + "\nPlease reason step by step, and put your final answer within \\boxed{}.")}],
    max_tokens: $max, temperature: 0, top_k: 1, seed: 0}' >"$W/requests.jsonl"
n_req=0 # one request file per problem, written once for every round
while IFS= read -r line; do
  printf '%s\n' "$line" >"$W/req.$n_req.json"
  n_req=$((n_req + 1))
done <"$W/requests.jsonl"
ratios=()
for round in $(seq 1 "$REPEAT"); do
  [ "$REPEAT" -gt 1 ] && echo "# round $round"
  if [ $((round % 2)) -eq 1 ]; then run_server; run_tierkv; else run_tierkv; run_server; fi
  r=$(echo "$tk_tps / $ll_tps" | bc -l)
  ratios+=("$r")
  printf 'ratio             %.2fx\n' "$r"
done
if [ "$REPEAT" -gt 1 ]; then
  printf 'median ratio      %.2fx over %d rounds\n' "$(printf '%s\n' "${ratios[@]}" | sort -g |
    awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')" "$REPEAT"
fi
