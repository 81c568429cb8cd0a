#!/usr/bin/env bash
# bench/gpu-ab.sh — a paired A/B of the kernels of two builds, and of the one-token matmul's
# variants, with `tierkv bench-ops`: runs alternate (A first in odd rounds, B first in even ones),
# each op's median over the rounds is printed with its ratio to A's, measured in the same run.
#
# Usage:
#   A=build-cuda-old B=build-cuda bench/gpu-ab.sh
# Before a device call, on the dev machine: build the baseline (e.g. `make cuda SERVE=0
# BUILD=build-cuda-old` on a worktree of the older commit, binaries copied into the repo) and the
# candidate (`make cuda SERVE=0`), strip both and carry both directories.
#
# Variables (environment): A (build-cuda-old: the baseline's directory, holding tierkv), B (build-cuda),
# ROUNDS (3), REPS (50, bench-ops --reps), TYPES ("BF16 Q8_0"), SHAPE (r1-distill-qwen-7b),
# DEPTHS (2048,8192,32768), VARIANTS ("tile,2 direct,1 direct,2": values of TIERKV_CUDA_GEMV run with B
# besides its default; empty: none), BACKEND (cuda), OUT (bench/out).
# The control flow on a CPU machine (the variants mean nothing there: leave them out):
#   BACKEND=cpu A=build B=build VARIANTS= TYPES=Q8_0 SHAPE=qwen2.5-0.5b DEPTHS=256 ROUNDS=1 REPS=2 bench/gpu-ab.sh
#
# Outputs under $OUT: ab.jsonl (one line per bench-ops row: label, round, type and the row) and
# ab.txt (the table printed last: per op and type, each label's median microseconds and its ratio
# to A; a ratio under 1 is faster than A). Each run's stderr goes to ab-<label>-<round>.err.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

A=${A:-build-cuda-old}
B=${B:-build-cuda}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-50}
TYPES=${TYPES:-BF16 Q8_0}
SHAPE=${SHAPE:-r1-distill-qwen-7b}
DEPTHS=${DEPTHS:-2048,8192,32768}
VARIANTS=${VARIANTS-tile,2 direct,1 direct,2}
BACKEND=${BACKEND:-cuda}
OUT=${OUT:-bench/out}

for d in "$A" "$B"; do
    [ -x "$d/tierkv" ] || { echo "gpu-ab.sh: no runnable $d/tierkv (A and B name build directories)" >&2; exit 2; }
done
mkdir -p "$OUT"
J=$OUT/ab.jsonl
: >"$J"

# one bench-ops run: label, directory, round, type, TIERKV_CUDA_GEMV value (may be empty)
one() {
    local label=$1 dir=$2 round=$3 type=$4 gemv=$5 safe
    safe=$(printf '%s' "$label" | tr -c 'A-Za-z0-9._-' '_')
    if ! TIERKV_CUDA_GEMV=$gemv "$dir/tierkv" bench-ops --backend "$BACKEND" --shape "$SHAPE" --type "$type" \
        --depths "$DEPTHS" --reps "$REPS" --json >"$OUT/ab.tmp" 2>"$OUT/ab-$safe-$type-$round.err"; then
        echo "gpu-ab.sh: $label ($type, round $round) failed: $(tail -n 2 "$OUT/ab-$safe-$type-$round.err")" >&2
        return 1
    fi
    python3 - "$label" "$round" "$type" "$OUT/ab.tmp" >>"$J" <<'PY'
import json, sys
label, rnd, typ, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    print(json.dumps({"label": label, "round": rnd, "type": typ, **r}))
PY
}

rc=0
for round in $(seq 1 "$ROUNDS"); do
    for type in $TYPES; do
        runs=("A|$A|" "B|$B|")
        for v in $VARIANTS; do runs+=("B gemv=$v|$B|$v"); done
        if [ $((round % 2)) = 0 ]; then # reversed order in even rounds
            rev=()
            for ((i = ${#runs[@]} - 1; i >= 0; i--)); do rev+=("${runs[i]}"); done
            runs=("${rev[@]}")
        fi
        for r in "${runs[@]}"; do
            IFS='|' read -r label dir gemv <<<"$r"
            echo "round $round, $type: $label" >&2
            one "$label" "$dir" "$round" "$type" "$gemv" || rc=1
        done
    done
done
rm -f "$OUT/ab.tmp"

python3 - "$J" "$A" "$B" <<'PY' | tee "$OUT/ab.txt"
import json, statistics, sys
path, a_dir, b_dir = sys.argv[1:4]
rows = [json.loads(l) for l in open(path) if l.strip()]
labels = []
for r in rows:
    if r["label"] not in labels:
        labels.append(r["label"])
def key(r):
    if r.get("op") == "attention":
        return ("attention", str(r.get("depth")))
    return (r.get("op"), r.get("name"))
med = {}
for r in rows:
    med.setdefault((r["type"], key(r)), {}).setdefault(r["label"], []).append(r["us"] if "us" in r else r["us_per_layer"])
print(f"A = {a_dir}, B = {b_dir}; median microseconds over rounds, (ratio to A)")
print("type  op/name              " + "".join(f"{l:>22}" for l in labels))
totals = {}
for (typ, k), by in med.items():
    base = statistics.median(by["A"]) if "A" in by else None
    cells = []
    for l in labels:
        if l not in by:
            cells.append(f"{'-':>22}")
            continue
        m = statistics.median(by[l])
        totals.setdefault((typ, k[0], l), 0.0)
        totals[(typ, k[0], l)] += m
        cells.append(f"{m:10.1f} ({m / base:5.2f})".rjust(22) if base else f"{m:10.1f}".rjust(22))
    print(f"{typ:5} {k[0][:9]:9} {str(k[1])[:11]:11}" + "".join(cells))
for typ in sorted({t for t, _, _ in totals}):
    for op in ("matmul", "attention"):
        if (typ, op, "A") not in totals:
            continue
        base = totals[(typ, op, "A")]
        line = "".join(f"{l}: {totals[(typ, op, l)]:.1f} ({totals[(typ, op, l)] / base:.2f})  " for l in labels if (typ, op, l) in totals)
        print(f"sum {typ} {op}: {line}")
PY
exit $rc
