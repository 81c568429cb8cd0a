#!/usr/bin/env bash
# plot.sh — turns an eval sweep table into PNG charts with gnuplot.
#
#   scripts/plot.sh SWEEP.tsv OUTDIR [--t0 RATIO] [--evict RATIO] [--budget TOKENS] [--policy NAME]
#
# Table format: TSV (or CSV: the separator is taken from the header line), one header line naming
# the columns, any order, extra columns ignored; lines starting with '#' are comments:
#   policy  t0_ratio  evict_ratio  budget  n  correct  accuracy  ci_lo  ci_hi  mean_len
# policy      KV policy name (no spaces), e.g. full, h2o, tiered
# t0_ratio    fraction of the KV kept in T0 (GPU), 0..1
# evict_ratio fraction of the KV evicted (dropped), 0..1
# budget      max generated tokens
# n, correct  items graded and items correct; accuracy = correct/n
# ci_lo/ci_hi Wilson 95% interval of accuracy (src/eval/stats.c)
# mean_len    mean output length in tokens
#
# Writes into OUTDIR:
#   acc_vs_evict.png   accuracy vs eviction ratio, one line per policy, CI error bars (the
#                      "cliff vs knob" chart); rows filtered by --t0/--budget when given
#   grid_POLICY.png    accuracy over the T0 x eviction grid, one chart per policy (--budget filter)
#   len_vs_budget.png  mean output length vs token budget, one line per policy (--t0/--evict
#                      filters; rows left at one budget are averaged)
# Needs gnuplot (Debian: apt-get install -y gnuplot-nox).
set -euo pipefail

usage() { sed -n '2,/^# Needs/s/^# \{0,1\}//p' "$0"; }
[ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ] && { usage; exit 0; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
in=$1 out=$2
shift 2
t0="" evict="" budget="" only=""
while [ $# -gt 0 ]; do
    case $1 in
    --t0) t0=${2:?--t0 needs a value}; shift 2 ;;
    --evict) evict=${2:?--evict needs a value}; shift 2 ;;
    --budget) budget=${2:?--budget needs a value}; shift 2 ;;
    --policy) only=${2:?--policy needs a value}; shift 2 ;;
    *) echo "plot.sh: bad argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found (apt-get install -y gnuplot-nox)" >&2; exit 1; }
[ -r "$in" ] || { echo "plot.sh: cannot read $in" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Normalise to whitespace-separated columns in a fixed order, one file per policy:
#   t0_ratio evict_ratio budget accuracy ci_lo ci_hi mean_len
awk -v dir="$tmp" -v want_t0="$t0" -v want_evict="$evict" -v want_budget="$budget" -v only="$only" '
    /^[ \t]*#/ || /^[ \t]*$/ { next }
    !hdr {
        FS = index($0, "\t") ? "\t" : ","; $0 = $0
        for (i = 1; i <= NF; i++) { gsub(/^[ \t]+|[ \t\r]+$/, "", $i); col[$i] = i }
        split("policy t0_ratio evict_ratio budget accuracy ci_lo ci_hi mean_len", need, " ")
        for (k in need) if (!(need[k] in col)) { print "plot.sh: column " need[k] " missing in header" > "/dev/stderr"; bad = 1; exit 1 }
        hdr = 1; next
    }
    {
        for (i = 1; i <= NF; i++) gsub(/^[ \t]+|[ \t\r]+$/, "", $i)
        p = $col["policy"]
        if (only != "" && p != only) next
        # column 8: the share of the KV actually evicted when the table measured it (the baselines
        # evict through their budget, not through --evict-ratio), else the flag; for a baseline
        # without the measurement, its nominal share 1 - budget
        ev = ("evicted_share" in col && $col["evicted_share"] != "NA" && $col["evicted_share"] != "") ? $col["evicted_share"] : \
             (p ~ /^(streaming|h2o|rkv|snapkv)$/ ? 1 - $col["t0_ratio"] : $col["evict_ratio"])
        line = $col["t0_ratio"] " " $col["evict_ratio"] " " $col["budget"] " " $col["accuracy"] " " \
               $col["ci_lo"] " " $col["ci_hi"] " " $col["mean_len"] " " ev
        print line > (dir "/all_" p ".dat")
        if ((want_t0 == "" || $col["t0_ratio"] + 0 == want_t0 + 0) && (want_budget == "" || $col["budget"] + 0 == want_budget + 0))
            print line > (dir "/evict_" p ".dat")
        if (want_budget == "" || $col["budget"] + 0 == want_budget + 0) print line > (dir "/grid_" p ".dat")
        if ((want_t0 == "" || $col["t0_ratio"] + 0 == want_t0 + 0) && (want_evict == "" || $col["evict_ratio"] + 0 == want_evict + 0))
            print line > (dir "/len_" p ".dat")
        if (!(p in seen)) { seen[p] = 1; print p > (dir "/policies") }
    }
    END { if (!bad && !hdr) { print "plot.sh: no header line" > "/dev/stderr"; exit 1 } }
' "$in"
[ -s "$tmp/policies" ] || { echo "plot.sh: no data rows" >&2; exit 1; }
mapfile -t policies < "$tmp/policies"

# Sorts a data file by column k (numerically) so lines join points left to right.
sorted() { sort -g -k"$2","$2" "$1" > "$1.s"; echo "$1.s"; }

common='set terminal pngcairo size 1000,650 font "sans,11"
set grid lc rgb "#dddddd"
set key outside right top
set border lc rgb "#444444"'
filt=""
[ -n "$t0" ] && filt="$filt T0=$t0"
[ -n "$budget" ] && filt="$filt budget=$budget"

# 1. accuracy vs eviction ratio
plots=()
for p in "${policies[@]}"; do
    f=$tmp/evict_$p.dat
    [ -s "$f" ] || continue
    s=$(sorted "$f" 8)
    plots+=("'$s' using 8:4:5:6 with yerrorlines lw 2 pt 7 ps 1.2 title '$p'")
done
if [ ${#plots[@]} -gt 0 ]; then
    gnuplot <<EOF
$common
set output '$out/acc_vs_evict.png'
set title "Accuracy vs share of the KV evicted (measured)${filt:+ ($filt)} — bars: Wilson 95% CI"
set xlabel 'eviction ratio (fraction of KV dropped)'
set ylabel 'accuracy'
set yrange [0:1.05]
set autoscale xfix
set offsets graph 0.03, graph 0.03, 0, 0
plot $(IFS=,; echo "${plots[*]}")
EOF
fi

# 2. accuracy over the T0 x eviction grid, one chart per policy
for p in "${policies[@]}"; do
    f=$tmp/grid_$p.dat
    [ -s "$f" ] || continue
    gnuplot <<EOF
$common
set output '$out/grid_$p.png'
set title "Accuracy over T0 ratio x eviction ratio — policy $p${budget:+ (budget=$budget)}"
set xlabel 'eviction ratio'
set ylabel 'T0 ratio (fraction of KV on the GPU)'
set cblabel 'accuracy'
set cbrange [0:1]
set palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 '#2166ac')
set autoscale xfix
set autoscale yfix
set offsets graph 0.1, graph 0.1, graph 0.1, graph 0.1
unset key
plot '$f' using 2:1:4 with points pt 5 ps 7 lc palette, \
     '' using 2:1:(sprintf('%.2f', \$4)) with labels font 'sans,9'
EOF
done

# 3. mean output length vs budget
plots=()
for p in "${policies[@]}"; do
    f=$tmp/len_$p.dat
    [ -s "$f" ] || continue
    s=$(sorted "$f" 3)
    plots+=("'$s' using 3:7 smooth unique with linespoints lw 2 pt 7 ps 1.2 title '$p'")
done
if [ ${#plots[@]} -gt 0 ]; then
    gnuplot <<EOF
$common
set output '$out/len_vs_budget.png'
set title "Mean output length vs token budget${t0:+ T0=$t0}${evict:+ evict=$evict}"
set xlabel 'token budget'
set ylabel 'mean output length (tokens)'
set logscale xy 2
set offsets graph 0.03, graph 0.03, 0, 0
plot $(IFS=,; echo "${plots[*]}"), x with lines dt 2 lc rgb '#888888' title 'budget'
EOF
fi
ls "$out"/*.png
