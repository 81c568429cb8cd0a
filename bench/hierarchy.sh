#!/bin/sh
# bench/hierarchy.sh — decode tokens/s of policy `hierarchy` against `full` on one model, in one
# script run: T0 at 30/50/70% of the length, no T2, no eviction (T1 takes the rest), re-tiering every
# DELTA steps. Runs alternate between the settings (order A B C D, then D C B A, ...) so slow drift of
# a shared machine hits every setting alike; each setting gets REPS runs and its median is compared:
# ratio = median(hierarchy) / median(full). `paired` is the median over rounds of hierarchy / full of
# the same round (less sensitive to other jobs that come and go); `best` compares the fastest run of
# each setting (on a machine shared with intermittent jobs, the best run is the least disturbed one).
# The CPU goal is a slowdown of at
# most 5% (ratio >= 0.95).
#
# The context is generated tokens only: the DEPTH tokens before the timed decode are appended as
# generated tokens (`--depth-generated`, for every setting, `full` included, so all run the same
# path), scored and tiered like a chain of thought, so that T1 (and T2 with POLICY=quant) hold what a
# chain of thought puts there; a prompt would be protected and stay in T0, leaving nothing to move.
# DEPTH is 0 by default: the N timed tokens fill the tiers themselves (with N=384 and DELTA=64 there
# are 6 re-tierings and, at the end, T1 holds most of the sequence, about 60% at a 30% ratio: the
# window of 64 and the T0 share stay), which keeps a run short on 2 cores and comparable with the
# earlier ones; DEPTH=4096 times the decode after a long chain, T1 holding most of it from the first
# timed step. Each run is `tierkv bench -p 0 -n N -d DEPTH --depth-generated --reps 1`.
#
# TIERKV_OLD=PATH (another tierkv binary, e.g. a build before a change) runs every setting with it too,
# in the same alternation, and adds the columns `old tok/s` and `new/old` (median over rounds of the
# ratio of the two binaries' runs of that setting in the same round): a change that must not change
# speed is checked by new/old >= 0.97.
#
# POLICY=quant times T2 instead (T0 at each ratio, the rest int8 or 4-bit host memory: KVFLAGS="--t2-codec q8bh"),
# against the same full cache.
#
# usage: bench/hierarchy.sh [MODEL.gguf]   (env: REPS=5 N=384 DEPTH=0 DELTA=64 THREADS=2 RATIOS="0.3 0.5 0.7"
#                                            BIN=build/tierkv POLICY=hierarchy TIERKV_OLD=; extra KV flags in KVFLAGS, e.g. --staged)
set -eu
MODEL=${1:-$HOME/.cache/tierkv/models/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf}
BIN=${BIN:-build/tierkv}
REPS=${REPS:-5}
N=${N:-384}
DEPTH=${DEPTH:-0}
DELTA=${DELTA:-64}
THREADS=${THREADS:-2}
RATIOS=${RATIOS:-"0.3 0.5 0.7"}
KVFLAGS=${KVFLAGS:-}
POLICY=${POLICY:-hierarchy}
TIERKV_OLD=${TIERKV_OLD:-}
case $POLICY in hierarchy | quant) ;; *) echo "hierarchy.sh: POLICY is hierarchy or quant, not '$POLICY'" >&2; exit 2 ;; esac
[ -x "$BIN" ] || { echo "hierarchy.sh: $BIN not built (make)" >&2; exit 1; }
[ -r "$MODEL" ] || { echo "hierarchy.sh: model $MODEL not found" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cp "$BIN" "$OUT/tierkv" && BIN=$OUT/tierkv # a rebuild during the runs must not mix binaries
if [ -n "$TIERKV_OLD" ]; then
    [ -x "$TIERKV_OLD" ] || { echo "hierarchy.sh: TIERKV_OLD=$TIERKV_OLD is not an executable" >&2; exit 1; }
    cp "$TIERKV_OLD" "$OUT/tierkv-old"
fi

SETTINGS="full"
for r in $RATIOS; do SETTINGS="$SETTINGS $r"; done
if [ -n "$TIERKV_OLD" ]; then # each setting also as <setting>-old, run by the old binary
    for s in $SETTINGS; do ALL="${ALL:-} $s $s-old"; done
    SETTINGS=$ALL
fi
REVERSED=$(echo "$SETTINGS" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}')

run() { # setting -> one tok/s sample appended to $OUT/<setting>
    bin=$BIN
    s=$1
    case $s in *-old) bin=$OUT/tierkv-old s=${s%-old} ;; esac
    if [ "$s" = full ]; then flags=""; else flags="--policy $POLICY --hbm-ratio $s --delta $DELTA $KVFLAGS"; fi
    # shellcheck disable=SC2086
    "$bin" bench -m "$MODEL" -t "$THREADS" -p 0 -n "$N" -d "$DEPTH" --depth-generated --reps 1 --json $flags 2>/dev/null |
        sed -n 's/.*"tok_per_s": *\([0-9.]*\).*/\1/p' >>"$OUT/$1"
    printf '  %-5s %s tok/s\n' "$1" "$(tail -n 1 "$OUT/$1")" >&2
}

echo "model $MODEL, $THREADS threads, decode $N tokens from depth $DEPTH (generated), delta $DELTA, $REPS reps, $POLICY $KVFLAGS" >&2
rep=1
while [ "$rep" -le "$REPS" ]; do
    if [ $((rep % 2)) -eq 1 ]; then order=$SETTINGS; else order=$REVERSED; fi
    for s in $order; do run "$s"; done
    F=$(tail -n 1 "$OUT/full")
    for r in $RATIOS; do echo "$(tail -n 1 "$OUT/$r") $F" | awk '{print $1 / $2}' >>"$OUT/paired_$r"; done
    if [ -n "$TIERKV_OLD" ]; then
        for s in full $RATIOS; do echo "$(tail -n 1 "$OUT/$s") $(tail -n 1 "$OUT/$s-old")" | awk '{print $1 / $2}' >>"$OUT/newold_$s"; done
    fi
    rep=$((rep + 1))
done

median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
best() { sort -g "$1" | tail -n 1; }
BFULL=$(best "$OUT/full")
FULL=$(median "$OUT/full")
printf '%-10s %10s %8s %8s %8s  %s\n' setting "tok/s" ratio paired best samples
printf '%-10s %10.3f %8s %8s %8s  %s\n' full "$FULL" 1 1 1 "$(tr '\n' ' ' <"$OUT/full")"
for r in $RATIOS; do
    M=$(median "$OUT/$r")
    printf '%-4.4s %-5s %10.3f %8.4f %8.4f %8.4f  %s\n' "$POLICY" "$r" "$M" "$(echo "$M $FULL" | awk '{print $1 / $2}')" \
        "$(median "$OUT/paired_$r")" "$(echo "$(best "$OUT/$r") $BFULL" | awk '{print $1 / $2}')" "$(tr '\n' ' ' <"$OUT/$r")"
done
if [ -n "$TIERKV_OLD" ]; then
    printf '\nagainst TIERKV_OLD=%s\n%-10s %10s %12s %8s  %s\n' "$TIERKV_OLD" setting "tok/s" "old tok/s" "new/old" "old samples"
    for s in full $RATIOS; do
        printf '%-10s %10.3f %12.3f %8.4f  %s\n' "$s" "$(median "$OUT/$s")" "$(median "$OUT/$s-old")" "$(median "$OUT/newold_$s")" \
            "$(tr '\n' ' ' <"$OUT/$s-old")"
    done
fi
