#!/usr/bin/env bash
# vs-llamacpp.sh — tierkv against llama.cpp on the same GGUF files and threads, side by side in one
# run, printing ratios (tierkv / llama.cpp). llama.cpp is built by you, outside this repository,
# from its public source; pass its build directory (the one holding bin/llama-bench).
#
#   bench/vs-llamacpp.sh LLAMA_BUILD_DIR [MODEL.gguf ...]
#
# Without models: the two cached default models. Environment: THREADS (2), REPS (3),
# DEPTHS ("0 1024 4096"), NGEN (32), NPP (512), PARALLEL (16), TIERKV (build/tierkv), KV_TYPE (f16:
# the KV cache element type of both engines; f16 is llama.cpp's default, f32 tierkv's), LOAD
# (default: each engine's own way of loading weights, tierkv reads them into huge-page memory and
# llama.cpp maps the file; mmap: both map the file, tierkv --mmap; copy: both read it into memory,
# llama.cpp -mmp 0 / --no-mmap).
# Measures, per model:
#   pp      prefill tok/s of NPP tokens at depth 0   (llama-bench -p NPP -n 0; NPP=0 skips it)
#   tg@0    decode tok/s at depth 0                  (llama-bench -p 0 -n NGEN)
#   tg@D    decode tok/s after a D-token prompt      (llama-batched-bench -npp D -ntg NGEN -npl 1, S_TG)
#   tgxP    aggregate decode of P sequences          (llama-batched-bench -npp 128 -ntg NGEN -npl P, S_TG;
#           PARALLEL=1 skips it)
# Each tierkv number is the median of REPS runs; llama-bench reports its own mean over REPS.
# ROUNDS (1) repeats every test that many times, the engines alternating inside each round, and
# prints the median of the rounds. TIERKV_OLD (unset): a second tierkv binary (an earlier build)
# timed the same way beside the first; its column and the ratio new/old are added (the check that
# a change costs no speed). LLAMA_BUILD_DIR "-" leaves llama.cpp out (needs TIERKV_OLD: then only
# new against old is measured, on a machine without a llama.cpp build).
set -euo pipefail
LL=${1:?usage: bench/vs-llamacpp.sh LLAMA_BUILD_DIR [MODEL.gguf ...]}
shift
THREADS=${THREADS:-2}; REPS=${REPS:-3}; DEPTHS=${DEPTHS:-"0 1024 4096"}; NGEN=${NGEN:-32}; NPP=${NPP:-512}
PARALLEL=${PARALLEL:-16}; TIERKV=${TIERKV:-build/tierkv}; KV_TYPE=${KV_TYPE:-f16}
ROUNDS=${ROUNDS:-1}; TIERKV_OLD=${TIERKV_OLD:-}
case "$KV_TYPE" in f16|f32) ;; *) echo "vs-llamacpp: KV_TYPE must be f16 or f32, got '$KV_TYPE'" >&2; exit 1;; esac
LOAD=${LOAD:-default}; TK_LOAD=(); LB_LOAD=(); LBB_LOAD=()
case "$LOAD" in
  default) ;;
  mmap) TK_LOAD=(--mmap) ;;
  copy) LB_LOAD=(-mmp 0); LBB_LOAD=(--no-mmap) ;;
  *) echo "vs-llamacpp: LOAD must be default, mmap or copy, got '$LOAD'" >&2; exit 1;;
esac
LB="$LL/bin/llama-bench"; LBB="$LL/bin/llama-batched-bench"; LLBINS=("$LB" "$LBB")
if [ "$LL" = - ]; then
  [ -n "$TIERKV_OLD" ] || { echo "vs-llamacpp: without llama.cpp (-) TIERKV_OLD must name the build to compare against" >&2; exit 1; }
  LLBINS=()
fi
for b in ${LLBINS[@]+"${LLBINS[@]}"} "$TIERKV" ${TIERKV_OLD:+"$TIERKV_OLD"}; do [ -x "$b" ] || { echo "vs-llamacpp: missing $b" >&2; exit 1; }; done
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$(scripts/fetch-model.sh 1.5b)" "$(scripts/fetch-model.sh 0.5b)")
fi

# llama-bench: mean tok/s of the one test in its JSON-lines output
ll_bench() { { "$LB" -m "$1" -t "$THREADS" -r "$REPS" -ctk "$KV_TYPE" -ctv "$KV_TYPE" ${LB_LOAD[@]+"${LB_LOAD[@]}"} -o jsonl "${@:2}" 2>/dev/null || true; } | sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | tail -1; }
# llama-batched-bench: S_TG (or S_PP) column of its table's single data row
ll_batched() {  # model npp ntg npl column
  local out; out=$("$LBB" -m "$1" -t "$THREADS" -c $(( ($2 + $3) * $4 + 64 )) -b 2048 -ub 512 -ctk "$KV_TYPE" -ctv "$KV_TYPE" ${LBB_LOAD[@]+"${LBB_LOAD[@]}"} -npp "$2" -ntg "$3" -npl "$4" 2>/dev/null | grep -E '^\|\s*[0-9]' || true)
  echo "$out" | awk -F'|' -v col="$5" 'NR==1 { gsub(/ /, "", $col); print $col }'
}
tk() { { "$TKBIN" bench -m "$1" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json "${@:2}" 2>/dev/null || true; } | sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }

tkp() {  # aggregate decode of PARALLEL sequences (the "_x" line)
  { "$TKBIN" bench -m "$1" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json -p 0 -n "$NGEN" -d 0 --parallel "$PARALLEL" 2>/dev/null || true; } | grep '_x' | sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p'
}
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# one test: ROUNDS rounds, the engines' order alternating; prints the medians "new old llama"
measure() {  # name tk-args... -- llama-command...
  local tkargs=() llcmd=() seen=0 x a=() o=() b=() r
  for x in "$@"; do if [ "$x" = -- ]; then seen=1; elif [ $seen = 0 ]; then tkargs+=("$x"); else llcmd+=("$x"); fi; done
  for ((r = 0; r < ROUNDS; r++)); do
    local order=(new old ll); [ $((r % 2)) = 1 ] && order=(ll old new)
    for x in "${order[@]}"; do
      case $x in
        new) TKBIN=$TIERKV; a+=("$("${tkargs[@]}")") ;;
        old) [ -n "$TIERKV_OLD" ] && { TKBIN=$TIERKV_OLD; o+=("$("${tkargs[@]}")"); } ;;
        ll) [ "$LL" != - ] && b+=("$("${llcmd[@]}")") ;;
      esac
    done
  done
  # "-" for a column with no number (no TIERKV_OLD, or an engine that failed), so the three words
  # always reach row() (an empty one would vanish in the word splitting)
  local ma mo mb
  ma=$(echo "${a[*]:-}" | median); mo=$(echo "${o[*]:-}" | median); mb=$(echo "${b[*]:-}" | median)
  echo "${ma:--} ${mo:--} ${mb:--}"
}
row() {  # name test new old llama
  if [ -n "$TIERKV_OLD" ]; then
    printf "%-44s %-8s %10s %10s %10s %7s %7s\n" "$1" "$2" "$3" "$4" "$5" "$(ratio "$3" "$5")" "$(ratio "$3" "$4")"
  else
    printf "%-44s %-8s %10s %10s %7s\n" "$1" "$2" "$3" "$5" "$(ratio "$3" "$5")"
  fi
}

echo "# KV cache element type (both engines): $KV_TYPE; weights loaded: $LOAD; rounds: $ROUNDS; threads: $THREADS"
echo "# tierkv: $("$TIERKV" --version 2>/dev/null || echo unknown)${TIERKV_OLD:+; old: $("$TIERKV_OLD" --version 2>/dev/null || echo "a build without --version")}"
if [ -n "$TIERKV_OLD" ]; then
  printf "%-44s %-8s %10s %10s %10s %7s %7s\n" model test tierkv old llama.cpp ratio new/old
else
  printf "%-44s %-8s %10s %10s %7s\n" model test tierkv llama.cpp ratio
fi
for m in "${models[@]}"; do
  name=$(basename "$m")
  if [ "$NPP" -gt 0 ]; then
    row "$name" "pp$NPP" $(measure tk "$m" -p "$NPP" -n 0 -d 0 -- ll_bench "$m" -p "$NPP" -n 0)
  fi
  for d in $DEPTHS; do
    if [ "$d" = 0 ]; then
      row "$name" "tg@$d" $(measure tk "$m" -p 0 -n "$NGEN" -d "$d" -- ll_bench "$m" -p 0 -n "$NGEN")
    else
      row "$name" "tg@$d" $(measure tk "$m" -p 0 -n "$NGEN" -d "$d" -- ll_batched "$m" "$d" "$NGEN" 1 9)
    fi
  done
  if [ "$PARALLEL" -gt 1 ]; then
    row "$name" "tgx$PARALLEL" $(measure tkp "$m" -- ll_batched "$m" 128 "$NGEN" "$PARALLEL" 9)
  fi
done
