#!/usr/bin/env bash
# valgrind.sh [BIN] — memcheck on the two long paths of tierkv with a fixture model (small, so it
# takes a minute, not hours): 64-token generations through the memory hierarchy (T0 30%, 3%
# evicted; a second one whose small window makes tokens move to T1, T2 and eviction), and an eval
# of 4 problems (two at a time, results file, summary JSON). Passes when memcheck reports 0 errors and 0 bytes definitely lost in both; prints
# both summaries. BIN defaults to build/tierkv (make first); fixtures from $TIERKV_SHARED
# (default ../shared): without them it says so and skips (exit 0), as the tests do.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/tierkv}
shared=${TIERKV_SHARED:-../shared}
model=$shared/fixtures/models/qwen2-Q4_K_M.gguf
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed (scripts/setup.sh)" >&2; exit 1; }
[ -x "$bin" ] || { echo "valgrind.sh: $bin is not built (make)" >&2; exit 1; }
# without the shared fixtures there is nothing to run: skipped, as the tests skip
[ -r "$model" ] || { echo "valgrind.sh: skipped: no fixture model at $model (set TIERKV_SHARED)" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
vg=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --show-leak-kinds=definite
    --errors-for-leak-kinds=definite --track-origins=yes)
status=0
check() { # NAME LOG: prints the summary lines, fails on errors or definite leaks
  local name=$1 log=$2 errs lost
  errs=$(grep -oE 'ERROR SUMMARY: [0-9,]+ errors' "$log" | tail -1 | grep -oE '[0-9,]+' | head -1 | tr -d ,)
  lost=$(grep -oE "definitely lost: [0-9,]+ bytes" "$log" | tail -1 | grep -oE "[0-9,]+" | head -1 | tr -d ,)
  echo "valgrind $name: $(grep -E 'ERROR SUMMARY' "$log" | tail -1 | sed 's/^==[0-9]*== //')"
  grep -E 'definitely lost|in use at exit|All heap blocks were freed' "$log" | sed 's/^==[0-9]*== /  /' | head -2
  if [ "${errs:-1}" != 0 ] || [ "${lost:-0}" != 0 ]; then status=1; echo "valgrind $name: FAILED (see $log)"; cp "$log" "valgrind-$name.log"; fi
}
# the generation as the issue states it, then one whose window and sinks are small enough that
# 64 tokens move through T1, T2 and eviction (with the default window of 64 nothing leaves T0)
runs=("run:--policy hierarchy --hbm-ratio 0.3 --evict-ratio 0.03"
      "run-moves:--policy hierarchy --hbm-ratio 0.3 --t2-ratio 0.3 --evict-ratio 0.03 --delta 8 --window 8 --sinks 2")
for r in "${runs[@]}"; do
  name=${r%%:*}
  read -r -a flags <<<"${r#*:}"
  "${vg[@]}" --log-file="$tmp/$name.log" "$bin" run -m "$model" -t 2 -n 64 --ignore-eos --stats "${flags[@]}" \
    -p "Once upon a time, in a land far away, there lived a small dragon who" >"$tmp/$name.out" 2>"$tmp/$name.err"
  check "$name" "$tmp/$name.log"
  grep -q 'generated 64 tokens' "$tmp/$name.err" || { echo "valgrind $name: the generation did not finish: $(tail -3 "$tmp/$name.err")"; status=1; }
  grep -E 're-tierings' "$tmp/$name.err" | sed 's/^ */  /'
done
for i in 0 1 2 3; do
  printf '{"id": "v-%d", "question": "Tom has %d apples and buys %d more. How many apples does he have?", "answer": "%d"}\n' \
    $i $((i + 2)) $((i + 3)) $((2 * i + 5))
done >"$tmp/data.jsonl"
"${vg[@]}" --log-file="$tmp/eval.log" "$bin" eval -m "$model" --task gsm8k --data "$tmp/data.jsonl" --template chatml \
  -t 2 --parallel 2 --max-tokens 24 --out "$tmp/r.jsonl" --summary-json "$tmp/s.json" >"$tmp/eval.out" 2>"$tmp/eval.err"
check eval "$tmp/eval.log"
[ "$(grep -c . "$tmp/r.jsonl" 2>/dev/null)" = 4 ] || { echo "valgrind eval: the results file does not hold 4 lines: $(tail -3 "$tmp/eval.err")"; status=1; }
exit $status
