#!/usr/bin/env bash
# vs-llamacpp.sh — tierkv against llama.cpp-family engines (llama.cpp, ik_llama.cpp) on the same
# GGUF files and threads, side by side in one run, printing ratios (tierkv / each engine). The
# engines are built by you, outside this repository, from their public source; pass each one's
# build directory (the one holding bin/llama-bench and bin/llama-batched-bench).
#
#   bench/vs-llamacpp.sh ENGINE_BUILD_DIR[=LABEL] ... [-- MODEL.gguf ...]
#   bench/vs-llamacpp.sh LLAMA_BUILD_DIR [MODEL.gguf ...]         (the older call: one engine, its models)
#   LLAMA_DIRS="DIR[=LABEL] ..." bench/vs-llamacpp.sh [MODEL.gguf ...]
#   TIERKV_OLD=OLD_TIERKV bench/vs-llamacpp.sh - [MODEL.gguf ...]  (no engine: new against old alone)
#
# Engines and models: with "--", the arguments before it are engine build directories and those
# after it models; without it the first argument is an engine directory (or "-") and so is every
# directory after it, the rest are models; with LLAMA_DIRS (whitespace-separated) and no engine on
# the command line, every argument is a model. Without models: the two cached default models.
# Which engine a directory holds is read from its llama-bench's help (ik_llama.cpp lists -rtr); the
# column is named after it (llama.cpp, ik_llama.cpp; a second build of one kind gets -2), or LABEL.
# Each engine runs with its own best CPU flags on the same file, printed at the top of the output:
#   llama.cpp      LLAMACPP_BENCH_FLAGS ("-fa 1") to llama-bench, LLAMACPP_BATCHED_FLAGS ("-fa on",
#                  or "-fa" where that build's llama-batched-bench takes no value) to llama-batched-bench
#   ik_llama.cpp   IK_BENCH_FLAGS ("-rtr 1 -fa 1": weights repacked at load for its CPU kernels, which
#                  also reads them into memory whatever LOAD says; flash attention on the CPU),
#                  IK_BATCHED_FLAGS ("-rtr -fa on", or "-rtr -fa" as above)
# An empty value passes no flag (LLAMACPP_BENCH_FLAGS= LLAMACPP_BATCHED_FLAGS= run llama.cpp with its
# own defaults, flash attention off, as every run before ik_llama.cpp was added did). llama-bench
# writes JSON lines (-o jsonl) where it knows them, else a JSON array (-o json, ik_llama.cpp);
# llama-batched-bench's table is read from stdout (llama.cpp) or stderr (ik_llama.cpp). The engines
# run in a temporary folder (ik_llama.cpp writes llama.log where it runs).
#
# Environment: THREADS (2), REPS (3), DEPTHS ("0 4096 16384"), NGEN (32), NPP (512), PARALLEL (16),
# TIERKV (build/tierkv), KV_TYPE (f16: the KV cache element type of every engine; f16 is llama.cpp's
# default, f32 tierkv's), LOAD (default: each engine's own way of loading weights, tierkv reads them
# into huge-page memory and llama.cpp maps the file; mmap: all map the file, tierkv --mmap; copy: all
# read it into memory, -mmp 0 / --no-mmap).
# Measures, per model:
#   pp      prefill tok/s of NPP tokens at depth 0   (llama-bench -p NPP -n 0; NPP=0 skips it)
#   tg@0    decode tok/s at depth 0                  (llama-bench -p 0 -n NGEN)
#   tg@D    decode tok/s after a D-token prompt      (llama-batched-bench -npp D -ntg NGEN -npl 1, S_TG)
#   tgxP    aggregate decode of P sequences          (llama-batched-bench -npp 128 -ntg NGEN -npl P, S_TG;
#           PARALLEL=1 skips it)
# Columns: tierkv, then each engine's tok/s under its name, then tierkv/NAME for each engine ("-" and
# n/a where a run gave no number). Each tierkv number is the median of REPS runs; llama-bench reports
# its own mean over REPS.
# floor, tierkv/floor: the decode floor of a tg row, the tok/s at which each step only reads its bytes at
# the machine's read bandwidth: bandwidth / (weight bytes + depth x KV bytes per position), from
# `tierkv bench --membw` on the same threads (its median over the rounds; the KV of every layer and kv
# head in KV_TYPE), and tierkv's share of it; "-" and n/a for pp and tgxP rows.
# ROUNDS (1) repeats every test that many times, the engines alternating inside each round, and
# prints the median of the rounds. TIERKV_OLD (unset): a second tierkv binary (an earlier build)
# timed the same way beside the first; its column `old` and the ratio new/old are added (the check
# that a change costs no speed). "-" for the engines leaves them out (needs TIERKV_OLD: then only
# new against old is measured, on a machine without an engine build).
set -euo pipefail
USAGE="usage: bench/vs-llamacpp.sh ENGINE_BUILD_DIR[=LABEL] ... [-- MODEL.gguf ...]  (or LLAMA_DIRS=\"DIR ...\"; - for none)"
die() { echo "vs-llamacpp: $*" >&2; exit 1; }
THREADS=${THREADS:-2}; REPS=${REPS:-3}; DEPTHS=${DEPTHS:-"0 4096 16384"}; NGEN=${NGEN:-32}; NPP=${NPP:-512}
PARALLEL=${PARALLEL:-16}; TIERKV=${TIERKV:-build/tierkv}; KV_TYPE=${KV_TYPE:-f16}
ROUNDS=${ROUNDS:-1}; TIERKV_OLD=${TIERKV_OLD:-}; LLAMA_DIRS=${LLAMA_DIRS:-}
case "$KV_TYPE" in f16|f32) ;; *) die "KV_TYPE must be f16 or f32, got '$KV_TYPE'";; esac
LOAD=${LOAD:-default}; TK_LOAD=(); LB_LOAD=(); LBB_LOAD=()
case "$LOAD" in
  default) ;;
  mmap) TK_LOAD=(--mmap) ;;
  copy) LB_LOAD=(-mmp 0); LBB_LOAD=(--no-mmap) ;;
  *) die "LOAD must be default, mmap or copy, got '$LOAD'";;
esac

# the command line: engine directories, then models
dirs=(); models=(); seen=0
for a in "$@"; do [ "$a" = -- ] && seen=1; done
if [ $seen = 1 ]; then
  seen=0
  for a in "$@"; do
    if [ "$a" = -- ] && [ $seen = 0 ]; then seen=1; elif [ $seen = 0 ]; then dirs+=("$a"); else models+=("$a"); fi
  done
elif [ -n "$LLAMA_DIRS" ]; then
  models=("$@")
else
  [ $# -gt 0 ] || die "$USAGE"
  dirs=("$1"); shift
  while [ $# -gt 0 ] && { [ "$1" = - ] || [ -d "${1%%=*}" ]; }; do dirs+=("$1"); shift; done
  models=("$@")
fi
if [ ${#dirs[@]} -eq 0 ]; then
  [ -n "$LLAMA_DIRS" ] || die "$USAGE"
  read -ra dirs <<<"$LLAMA_DIRS"
fi

# the engines run in a folder of their own (ik_llama.cpp's llama-batched-bench writes llama.log there)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
# the engines: E_LABEL, E_LB (llama-bench), E_LBB (llama-batched-bench), E_LBF and E_LBBF (their flags)
E_LABEL=(); E_LB=(); E_LBB=(); E_LBF=(); E_LBBF=(); E_INFO=()
for d in "${dirs[@]}"; do
  [ "$d" = - ] && continue
  dir=$(abs "${d%%=*}"); label=""; [ "${d%%=*}" != "$d" ] && label=${d#*=}
  lb="$dir/bin/llama-bench"; lbb="$dir/bin/llama-batched-bench"
  for b in "$lb" "$lbb"; do [ -x "$b" ] || die "missing $b"; done
  help=$(cd "$TMP" && "$lb" --help 2>&1 || true); bhelp=$(cd "$TMP" && "$lbb" --help 2>&1 || true)
  if grep -q -e '-rtr' <<<"$help"; then kind=ik_llama.cpp; else kind=llama.cpp; fi
  # llama-batched-bench's -fa: a switch in older builds, a value (on|off|auto) in newer ones
  if grep -q -E -e '(^|[ ,])--flash-attn.*(on\|off|auto)' <<<"$bhelp"; then fa="-fa on"; else fa="-fa"; fi
  if [ $kind = ik_llama.cpp ]; then
    lbf=${IK_BENCH_FLAGS-"-rtr 1 -fa 1"}; lbbf=${IK_BATCHED_FLAGS-"-rtr $fa"}
  else
    lbf=${LLAMACPP_BENCH_FLAGS-"-fa 1"}; lbbf=${LLAMACPP_BATCHED_FLAGS-"$fa"}
  fi
  if grep -q -E -e '-o, --output <[^>]*jsonl' <<<"$help"; then fmt=jsonl; else fmt=json; fi
  if [ -z "$label" ]; then
    label=$kind; k=1
    for l in ${E_LABEL[@]+"${E_LABEL[@]}"}; do [ "$l" = "$label" ] && { k=$((k + 1)); label="$kind-$k"; }; done
  fi
  case "$label" in *[[:space:]]*|"") die "engine label '$label' must be one word";; esac
  E_LABEL+=("$label"); E_LB+=("$lb"); E_LBB+=("$lbb"); E_LBF+=("${lbf:+$lbf }-o $fmt"); E_LBBF+=("$lbbf")
  ver=$(cd "$TMP" && "$lbb" --version 2>&1 | grep -m1 '^version' || true); info=""; [ "$label" = "$kind" ] || info=$kind
  E_INFO+=("$info${info:+${ver:+, }}$ver")
done
NENG=${#E_LABEL[@]}
[ "$NENG" -gt 0 ] || [ -n "$TIERKV_OLD" ] || die "without an engine (-) TIERKV_OLD must name the build to compare against"
for b in "$TIERKV" ${TIERKV_OLD:+"$TIERKV_OLD"}; do [ -x "$b" ] || die "missing $b"; done
if [ ${#models[@]} -eq 0 ]; then
  models=("$(scripts/fetch-model.sh 1.5b)" "$(scripts/fetch-model.sh 0.5b)")
fi
for ((i = 0; i < ${#models[@]}; i++)); do models[i]=$(abs "${models[i]}"); done

# llama-bench of engine $1: mean tok/s of the one test (the last "avg_ts" of its JSON or JSON lines)
eng_bench() {  # engine model llama-bench-args...
  local e=$1 flags; read -ra flags <<<"${E_LBF[$1]}"
  { cd "$TMP" && "${E_LB[e]}" -m "$2" -t "$THREADS" -r "$REPS" -ctk "$KV_TYPE" -ctv "$KV_TYPE" ${LB_LOAD[@]+"${LB_LOAD[@]}"} \
      ${flags[@]+"${flags[@]}"} "${@:3}" 2>/dev/null || true; } | sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | tail -1
}
# llama-batched-bench of engine $1: the S_TG column of its table's one data row, on stdout or stderr
eng_batched() {  # engine model npp ntg npl
  local e=$1 flags; read -ra flags <<<"${E_LBBF[$1]}"
  ( cd "$TMP" && "${E_LBB[e]}" -m "$2" -t "$THREADS" -c $(( ($3 + $4) * $5 + 64 )) -b 2048 -ub 512 -ctk "$KV_TYPE" \
      -ctv "$KV_TYPE" ${LBB_LOAD[@]+"${LBB_LOAD[@]}"} ${flags[@]+"${flags[@]}"} -npp "$3" -ntg "$4" -npl "$5" ) >"$TMP/out" 2>"$TMP/err" || true
  cat "$TMP/out" "$TMP/err" | awk -F'|' -v want=S_TG '
    /^\|/ { if (!col) { for (i = 2; i < NF; i++) { h = $i; gsub(/ /, "", h); if (index(h, want) == 1) col = i } next }
            v = $col; gsub(/ /, "", v); if (v ~ /^[0-9.]+$/) { print v; exit } }'
}
tk() { { "$TKBIN" bench -m "$1" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json "${@:2}" 2>/dev/null || true; } | sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p' | tail -1; }
tkp() {  # aggregate decode of PARALLEL sequences (the "_x" line)
  { "$TKBIN" bench -m "$1" -t "$THREADS" --reps "$REPS" --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json -p 0 -n "$NGEN" -d 0 --parallel "$PARALLEL" 2>/dev/null || true; } | sed -n '/_x/s/.*"tok_per_s": *\([0-9.]*\).*/\1/p'
}
# the read bandwidth (B/s), weight bytes and KV bytes per position of `tierkv bench --membw` on model $1
membw() {
  { "$TIERKV" bench -m "$1" -t "$THREADS" --reps 1 --kv-type "$KV_TYPE" ${TK_LOAD[@]+"${TK_LOAD[@]}"} --json -p 0 -n 1 -d 0 \
      --membw 2>/dev/null || true; } | awk '/"membw"/ {
    bw = $0; sub(/.*"read_gb_per_s": */, "", bw); sub(/[,}].*/, "", bw)
    wb = $0; sub(/.*"weight_bytes": */, "", wb); sub(/[,}].*/, "", wb)
    kv = $0; sub(/.*"kv_bytes_per_position": */, "", kv); sub(/[,}].*/, "", kv)
    printf "%.0f %s %s\n", bw * 1e9, wb, kv }'
}
# the floor (tok/s) at depth $1 from "bandwidth weights kv" in $2, "-" without them
floor_at() { awk -v d="$1" -v m="$2" 'BEGIN { n = split(m, f, " "); if (n == 3 && f[1] > 0) printf "%.2f", f[1] / (f[2] + d * f[3]); else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
median() { tr ' ' '\n' | awk '/^[0-9.]+$/' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# one test: ROUNDS rounds, the runs' order reversed every other round; prints one median per column,
# "new old engine...", "-" where a column has no number (no TIERKV_OLD, or a run that failed), so
# every word reaches row() (an empty one would vanish in the word splitting)
measure() {  # tk-function tk-args... -- eng_bench|eng_batched args-after-the-engine...
  local tkargs=() llcmd=() seen=0 x r k v cols=$((2 + NENG)) order vals=() out=""
  for x in "$@"; do if [ "$x" = -- ]; then seen=1; elif [ $seen = 0 ]; then tkargs+=("$x"); else llcmd+=("$x"); fi; done
  for ((k = 0; k < cols; k++)); do vals[k]=""; done
  for ((r = 0; r < ROUNDS; r++)); do
    order=$(seq 0 $((cols - 1))); [ $((r % 2)) = 1 ] && order=$(seq $((cols - 1)) -1 0)
    for k in $order; do
      case $k in
        0) TKBIN=$TIERKV; v=$("${tkargs[@]}") ;;
        1) [ -n "$TIERKV_OLD" ] || continue; TKBIN=$TIERKV_OLD; v=$("${tkargs[@]}") ;;
        *) v=$("${llcmd[0]}" $((k - 2)) "${llcmd[@]:1}") ;;
      esac
      vals[k]+=" $v"
    done
  done
  for ((k = 0; k < cols; k++)); do v=$(echo "${vals[k]}" | median); out+="${out:+ }${v:--}"; done
  echo "$out"
}
# one line of the table: model, test, then the numbers' columns, each as wide as its header
line() { local w; printf "%-44s %-8s" "$1" "$2"; shift 2; for w in "${WIDTH[@]}"; do printf " %${w}s" "$1"; shift; done; printf "\n"; }
HEAD=(tierkv); [ -n "$TIERKV_OLD" ] && HEAD+=(old)
HEAD+=(${E_LABEL[@]+"${E_LABEL[@]}"})
for l in ${E_LABEL[@]+"${E_LABEL[@]}"}; do HEAD+=("tierkv/$l"); done
[ -n "$TIERKV_OLD" ] && HEAD+=(new/old)
HEAD+=(floor tierkv/floor)
WIDTH=(); for h in "${HEAD[@]}"; do w=${#h}; [ "$w" -lt 10 ] && w=10; WIDTH+=("$w"); done
row() {  # name test floor new old engine...
  local name=$1 test=$2 fl=$3 new=$4 old=$5 cells=("$4") e; shift 5
  [ -n "$TIERKV_OLD" ] && cells+=("$old")
  cells+=("$@")
  for e in "$@"; do cells+=("$(ratio "$new" "$e")"); done
  [ -n "$TIERKV_OLD" ] && cells+=("$(ratio "$new" "$old")")
  cells+=("$fl" "$(ratio "$new" "$fl")")
  line "$name" "$test" "${cells[@]}"
}

echo "# KV cache element type (every engine): $KV_TYPE; weights loaded: $LOAD; rounds: $ROUNDS; threads: $THREADS"
echo "# tierkv: $({ "$TIERKV" --version 2>/dev/null || echo unknown; } | paste -sd ';' -)${TIERKV_OLD:+; old: $({ "$TIERKV_OLD" --version 2>/dev/null || echo "a build without --version"; } | paste -sd ';' -)}"
for ((e = 0; e < NENG; e++)); do
  echo "# ${E_LABEL[e]}${E_INFO[e]:+ (${E_INFO[e]})}: llama-bench ${E_LBF[e]}; llama-batched-bench ${E_LBBF[e]:-(no flags)}"
done
line model test "${HEAD[@]}"
for m in "${models[@]}"; do
  name=$(basename "$m")
  bws=""; wbkv=""
  for ((r = 0; r < ROUNDS; r++)); do
    mb=$(membw "$m"); [ -n "$mb" ] || continue
    bws+=" ${mb%% *}"; wbkv=${mb#* }
  done
  bw=$(echo "$bws" | median); mem=""; [ -n "$bw" ] && mem="$bw $wbkv"
  if [ "$NPP" -gt 0 ]; then
    row "$name" "pp$NPP" - $(measure tk "$m" -p "$NPP" -n 0 -d 0 -- eng_bench "$m" -p "$NPP" -n 0)
  fi
  for d in $DEPTHS; do
    if [ "$d" = 0 ]; then
      row "$name" "tg@$d" "$(floor_at "$d" "$mem")" $(measure tk "$m" -p 0 -n "$NGEN" -d "$d" -- eng_bench "$m" -p 0 -n "$NGEN")
    else
      row "$name" "tg@$d" "$(floor_at "$d" "$mem")" $(measure tk "$m" -p 0 -n "$NGEN" -d "$d" -- eng_batched "$m" "$d" "$NGEN" 1)
    fi
  done
  if [ "$PARALLEL" -gt 1 ]; then
    row "$name" "tgx$PARALLEL" - $(measure tkp "$m" -- eng_batched "$m" 128 "$NGEN" "$PARALLEL")
  fi
done
