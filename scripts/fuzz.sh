#!/usr/bin/env bash
# fuzz.sh SECONDS TARGET... — runs each libFuzzer target (build-fuzz/fuzz_bin/TARGET, `make fuzz`)
# for SECONDS from its seed corpus fuzz/corpus/TARGET; new inputs collect in build-fuzz/corpus/TARGET
# (kept between runs), crashes, leaks and timeouts in build-fuzz/crashes/TARGET-*. Prints one line per
# target: seconds this run, seconds in all runs so far (build-fuzz/fuzz-time.tsv), executions, and
# the coverage libFuzzer reached (cov: edges, ft: features; fuzz_tokenizer and fuzz_chat, which load
# a vocabulary of the shared fixtures from $TIERKV_SHARED, say "skipped" without them), and exits 1 if any target found a
# problem (copy the input into fuzz/corpus/TARGET/ once it is fixed: it stays a regression test).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:?usage: scripts/fuzz.sh SECONDS TARGET...}
shift
export TIERKV_SHARED=${TIERKV_SHARED:-../shared}
mkdir -p build-fuzz/crashes build-fuzz/logs
times=build-fuzz/fuzz-time.tsv
touch "$times"
status=0
for t in "$@"; do
  bin=build-fuzz/fuzz_bin/$t
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (make fuzz)" >&2; exit 2; }
  # the targets that load a vocabulary of the shared fixtures skip cleanly where there are none
  need=
  case $t in
    fuzz_tokenizer) need=$TIERKV_SHARED/fixtures/tokenizer/extra/ggml-vocab-gpt-2.gguf ;;
    fuzz_chat) need=$TIERKV_SHARED/fixtures/tokenizer/extra/vocab-qwen2.5-coder.gguf ;;
  esac
  if [ -n "$need" ] && [ ! -r "$need" ]; then
    echo "$t: skipped: needs $need (the shared fixtures; TIERKV_SHARED names their folder)"
    continue
  fi
  mkdir -p "build-fuzz/corpus/$t"
  case $t in
    fuzz_gguf|fuzz_model|fuzz_json) max_len=65536 ;;
    *) max_len=8192 ;;
  esac
  log=build-fuzz/logs/$t.log
  start=$SECONDS
  "$bin" "build-fuzz/corpus/$t" "fuzz/corpus/$t" -max_total_time="$secs" -max_len=$max_len -timeout=20 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$t-" >"$log" 2>&1
  rc=$?
  ran=$((SECONDS - start)) # less than the budget when it stopped at a crash
  total=$(awk -F'\t' -v t="$t" '$1 == t { s += $2 } END { print s + 0 }' "$times")
  total=$((total + ran))
  printf '%s\t%s\n' "$t" "$ran" >>"$times"
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
  if [ $rc -ne 0 ]; then
    status=1
    echo "$t: FAILED after ${ran}s (exit $rc); see $log and build-fuzz/crashes/$t-*"
    grep -E 'ERROR|SUMMARY|assertion failed|runtime error|Test unit written' "$log" | head -5
  else
    printf '%-15s %4ss (total %ss)  %10s execs  cov: %s  ft: %s\n' "$t" "$ran" "$total" "${execs:-?}" "${cov:-?}" "${ft:-?}"
  fi
done
exit $status
