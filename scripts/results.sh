#!/usr/bin/env bash
# results.sh — the one command that regenerates docs/RESULTS.md from result directories.
#
#   scripts/results.sh [-o docs/RESULTS.md] [--benchmarks DIR,DIR...] DIR...
#
# --benchmarks: the directories (one per benchmark, in this order) of the table that puts the
# paper's comparison (full, hierarchy 3% and 10%, evict, the baselines in both settings) side by
# side; a named directory that does not exist yet is listed as not started.
# A DIR is a `tierkv sweep --dir DIR` (sweep.tsv, mcnemar.tsv, sweep.cmd, plots/*.png, one
# NAME.summary.json + NAME.jsonl per configuration) or any folder of `tierkv eval --summary-json`
# files (each next to its results JSONL). Every number written comes from those files: accuracy,
# Wilson 95% interval, lengths and speed from the summaries, McNemar p-values from mcnemar.tsv and
# the lines, the model, n, builds and commands as recorded; `tierkv verify` and `tierkv grade` (the
# binary in TIERKV, default build/tierkv) add the line checks and the answers right only by the
# percentage rule; gnuplot draws one plot per directory of accuracy against the evicted share
# (docs/plots/). Runs still writing lines are listed as in progress, never tabulated. Nothing is
# typed by hand; rerun it after new runs. The work is done by scripts/results.py.
# Needs python3 (standard library only).
set -euo pipefail

usage() { sed -n '2,/^# Needs/s/^# \{0,1\}//p' "$0"; }
out=docs/RESULTS.md
bench=
dirs=()
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    -o) out=${2:?-o needs a file}; shift 2 ;;
    --benchmarks) bench=${2:?--benchmarks needs directories}; shift 2 ;;
    -*) echo "results.sh: bad argument '$1'" >&2; usage >&2; exit 2 ;;
    *) dirs+=("$1"); shift ;;
    esac
done
[ ${#dirs[@]} -gt 0 ] || { usage >&2; exit 2; }
for d in "${dirs[@]}"; do [ -d "$d" ] || { echo "results.sh: $d is not a directory" >&2; exit 1; }; done
command -v python3 >/dev/null || { echo "results.sh: python3 not found" >&2; exit 1; }
mkdir -p "$(dirname "$out")"

exec python3 "$(dirname "$0")/results.py" "$out" "--benchmarks=$bench" "${dirs[@]}"
