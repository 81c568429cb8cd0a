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
set -euo pipefail
LL=${1:?usage: bench/vs-llamacpp.sh LLAMA_BUILD_DIR [MODEL.gguf ...]}
shift
THREADS=${THREADS:-2}; REPS=${REPS:-3}; DEPTHS=${DEPTHS:-"0 1024 4096"}; NGEN=${NGEN:-32}; NPP=${NPP:-512}
PARALLEL=${PARALLEL:-16}; TIERKV=${TIERKV:-build/tierkv}; KV_TYPE=${KV_TYPE:-f16}
case "$KV_TYPE" in f16|f32) ;; *) echo "vs-llamacpp: KV_TYPE must be f16 or f32, got '$KV_TYPE'" >&2; exit 1;; esac
LOAD=${LOAD:-default}; TK_LOAD=(); LB_LOAD=(); LBB_LOAD=()
case "$LOAD" in
  default) ;;
  mmap) TK_LOAD=(--mmap) ;;
  copy) LB_LOAD=(-mmp 0); LBB_LOAD=(--no-mmap) ;;
  *) echo "vs-llamacpp: LOAD must be default, mmap or copy, got '$LOAD'" >&2; exit 1;;
esac
LB="$LL/bin/llama-bench"; LBB="$LL/bin/llama-batched-bench"
for b in "$LB" "$LBB" "$TIERKV"; do [ -x "$b" ] || { echo "vs-llamacpp: missing $b" >&2; exit 1; }; done
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
tk() { { "$TIERKV" bench -m "$1" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json "${@:2}" 2>/dev/null || true; } | sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "# KV cache element type (both engines): $KV_TYPE; weights loaded: $LOAD"
printf "%-44s %-8s %10s %10s %7s\n" model test tierkv llama.cpp ratio
for m in "${models[@]}"; do
  name=$(basename "$m")
  if [ "$NPP" -gt 0 ]; then
    a=$(tk "$m" -p "$NPP" -n 0 -d 0); b=$(ll_bench "$m" -p "$NPP" -n 0)
    printf "%-44s %-8s %10s %10s %7s\n" "$name" "pp$NPP" "$a" "$b" "$(ratio "$a" "$b")"
  fi
  for d in $DEPTHS; do
    a=$(tk "$m" -p 0 -n "$NGEN" -d "$d")
    if [ "$d" = 0 ]; then b=$(ll_bench "$m" -p 0 -n "$NGEN"); else b=$(ll_batched "$m" "$d" "$NGEN" 1 9); fi
    printf "%-44s %-8s %10s %10s %7s\n" "$name" "tg@$d" "$a" "$b" "$(ratio "$a" "$b")"
  done
  if [ "$PARALLEL" -gt 1 ]; then
    a=$("$TIERKV" bench -m "$m" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json -p 0 -n "$NGEN" -d 0 --parallel "$PARALLEL" 2>/dev/null | grep '_x' | sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p')
    b=$(ll_batched "$m" 128 "$NGEN" "$PARALLEL" 9)
    printf "%-44s %-8s %10s %10s %7s\n" "$name" "tgx$PARALLEL" "$a" "$b" "$(ratio "$a" "$b")"
  fi
done
