#!/usr/bin/env bash
# bench/identity.sh — do two builds generate the same texts? Runs the first N GSM8K problems of every
# KV configuration below with build OLD and with build NEW (greedy, ISA pinned, same machine) and
# compares, per problem, the generated text ("output") and the KV statistics ("kv": tokens per tier,
# bytes moved, re-tierings, evictions). Prints one line per configuration and ALL IDENTICAL, or the
# first differing problem of each configuration and exits 1. For refactors that must change nothing.
#
#   OLD=path/to/old/tierkv bench/identity.sh
#
# Required: OLD (a tierkv binary built from the revision to compare against).
# Optional: NEW (default build/tierkv), MODEL (default the 0.5B Qwen2.5-Coder in the model cache),
#   DATA (default ../shared/data/gsm8k_test.jsonl), N (problems, default 50), MAX_TOKENS (320),
#   ISA (avx2), THREADS (2), CONFIGS (names from the list below, default all), OUT (a directory for
#   the .jsonl files, default a temporary one, removed after), KEEP_OLD=1 (reuse OLD's files already in
#   OUT: run the old build once, while the new one is still being written).
# Configurations: full; hier3 (hierarchy, T0 50%, 3% evicted); hiert2 (hierarchy, T0 30%, 40% in
# T2); evict, quant, h2o, rkv, snapkv, streaming (T0 50%); sink.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD:?set OLD to the tierkv binary to compare against}"
NEW=${NEW:-build/tierkv}
MODEL=${MODEL:-$HOME/.cache/tierkv/models/qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf}
DATA=${DATA:-../shared/data/gsm8k_test.jsonl}
N=${N:-50}
MAX_TOKENS=${MAX_TOKENS:-320}
ISA=${ISA:-avx2}
THREADS=${THREADS:-2}
CONFIGS=${CONFIGS:-full hier3 hiert2 evict quant h2o rkv snapkv streaming sink}
for f in "$OLD" "$NEW"; do [ -x "$f" ] || { echo "identity.sh: $f is not an executable" >&2; exit 2; }; done
for f in "$MODEL" "$DATA"; do [ -f "$f" ] || { echo "identity.sh: $f not found" >&2; exit 2; }; done
if [ -n "${OUT:-}" ]; then mkdir -p "$OUT"; else OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT; fi

flags_of() {
    case "$1" in
    full) echo "--policy full" ;;
    hier3) echo "--policy hierarchy --hbm-ratio 0.5 --evict-ratio 0.03" ;;
    hiert2) echo "--policy hierarchy --hbm-ratio 0.3 --t2-ratio 0.4" ;;
    evict | quant | h2o | rkv | snapkv | streaming) echo "--policy $1 --hbm-ratio 0.5" ;;
    sink) echo "--policy sink" ;;
    *) echo "identity.sh: unknown configuration $1" >&2; exit 2 ;;
    esac
}

echo "# OLD: $("$OLD" --version 2>&1 | head -1)"
echo "# NEW: $("$NEW" --version 2>&1 | head -1)"
echo "# eval --task gsm8k --n $N --max-tokens $MAX_TOKENS --isa $ISA -t $THREADS, model $(basename "$MODEL")"
for c in $CONFIGS; do
    fl=$(flags_of "$c")
    for b in old new; do
        bin=$OLD; [ $b = new ] && bin=$NEW
        if [ $b = old ] && [ "${KEEP_OLD:-0}" = 1 ] && [ -s "$OUT/$c-old.jsonl" ]; then continue; fi
        # shellcheck disable=SC2086
        "$bin" eval --task gsm8k --data "$DATA" --n "$N" --max-tokens "$MAX_TOKENS" --isa "$ISA" -t "$THREADS" \
            --quiet -m "$MODEL" $fl --out "$OUT/$c-$b.jsonl" >/dev/null
    done
done
python3 - "$OUT" $CONFIGS <<'EOF'
import json, sys
out, configs, bad = sys.argv[1], sys.argv[2:], 0
def load(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        if "output" in r: rows[r.get("id", len(rows))] = r
    return rows
for c in configs:
    a, b = load(f"{out}/{c}-old.jsonl"), load(f"{out}/{c}-new.jsonl")
    same_t = sum(1 for k in a if k in b and a[k]["output"] == b[k]["output"])
    same_kv = sum(1 for k in a if k in b and a[k].get("kv") == b[k].get("kv"))
    line = f"{c:10} problems {len(b):3} / {len(a):3}, identical texts (output): {same_t}, identical kv stats: {same_kv}"
    if same_t != len(a) or same_kv != len(a) or len(a) != len(b):
        bad = 1
        first = next((k for k in a if k not in b or a[k]["output"] != b[k]["output"] or a[k].get("kv") != b[k].get("kv")), None)
        line += f"  FIRST DIFFERENCE: problem {first}"
    print(line)
print("DIFFERENCES" if bad else "ALL IDENTICAL")
sys.exit(bad)
EOF
