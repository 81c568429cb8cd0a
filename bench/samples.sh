#!/usr/bin/env bash
# bench/samples.sh — self-consistency under one T0 budget: `tierkv eval --samples K` on N GSM8K
# problems for `full` and for hierarchy, evict and R-KV at one --hbm-budget, the same bytes for each,
# fixed before the run from the model's shape: half of what K full chains of MAX_TOKENS tokens hold
# (the prompt once, shared, plus K generated tails). Prints per policy pass@1, maj@K and pass@K (the
# summaries' own numbers) and McNemar (exact, two-sided) of each policy's maj@K against full's, paired
# per problem. The K chains of a problem decode side by side (PARALLEL = K by default), so they
# compete for the budget together.
#
#   bench/samples.sh                 # 50 problems x 8 chains, 1.5B: hours on 2 cores
#   N=10 MAX_TOKENS=256 bench/samples.sh
#
# Optional: MODEL (the 1.5B Qwen2.5-Coder in the model cache), DATA (../shared/data/gsm8k_test.jsonl),
#   N (50), K (8), MAX_TOKENS (512), TEMP (0.6), TOP_P (0.95), SEED (1), PARALLEL (K), THREADS (2),
#   POLICIES ("full hierarchy evict rkv"), PROMPT_EST (tokens a GSM8K prompt takes, 160: only for the
#   budget), BUDGET (bytes; overrides the computed one), BIN (build/tierkv), OUT (bench/out/samples:
#   one results file and summary per policy, kept, so a killed run resumes).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/tierkv}
MODEL=${MODEL:-$HOME/.cache/tierkv/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
DATA=${DATA:-../shared/data/gsm8k_test.jsonl}
N=${N:-50}
K=${K:-8}
MAX_TOKENS=${MAX_TOKENS:-512}
TEMP=${TEMP:-0.6}
TOP_P=${TOP_P:-0.95}
SEED=${SEED:-1}
PARALLEL=${PARALLEL:-$K}
THREADS=${THREADS:-2}
POLICIES=${POLICIES:-full hierarchy evict rkv}
PROMPT_EST=${PROMPT_EST:-160}
OUT=${OUT:-bench/out/samples}
for f in "$BIN" "$MODEL" "$DATA"; do [ -e "$f" ] || { echo "samples.sh: $f not found" >&2; exit 2; }; done
mkdir -p "$OUT"
# bytes of one token's K/V in f16 (the default cache type): 2 (K and V) x layers x kv heads x head dim x 2
per_tok=$("$BIN" inspect "$MODEL" --json | python3 -c '
import json, sys
m = json.load(sys.stdin)["metadata"]
a = m["general.architecture"]
heads, kv = m[a + ".attention.head_count"], m[a + ".attention.head_count_kv"]
hd = m.get(a + ".attention.key_length", m[a + ".embedding_length"] // heads)
print(2 * m[a + ".block_count"] * kv * hd * 2)')
BUDGET=${BUDGET:-$(( (PROMPT_EST + K * MAX_TOKENS) * per_tok / 2 ))}
echo "samples.sh: $N problems x $K chains, max $MAX_TOKENS tokens, temperature $TEMP, top-p $TOP_P, seed $SEED;"
echo "  T0 budget $BUDGET bytes ($per_tok bytes a token) for every policy but full; $(basename "$MODEL"); $("$BIN" --version | paste -sd ';' -)"
for p in $POLICIES; do
    flags=(--policy "$p")
    [ "$p" != full ] && flags+=(--hbm-budget "$BUDGET")
    echo "== $p: ${flags[*]}"
    "$BIN" eval -m "$MODEL" --task gsm8k --data "$DATA" --n "$N" --samples "$K" --temp "$TEMP" --top-p "$TOP_P" \
        --seed "$SEED" --max-tokens "$MAX_TOKENS" --parallel "$PARALLEL" -t "$THREADS" "${flags[@]}" \
        --out "$OUT/$p.jsonl" --summary-json "$OUT/$p.summary.json" --quiet | grep -E "^(pass|maj|problems)"
done
python3 - "$OUT" "$K" $POLICIES <<'PY'
import json, math, sys
out, K, pols = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def maj(path):
    by = {}
    for l in open(path):
        d = json.loads(l)
        by.setdefault(d["id"], []).append((d.get("sample", 0), d["pred"], d["correct"]))
    res = {}
    for i, ch in by.items():
        ch = sorted(ch)[:K]
        best, bn = None, 0
        for a, (_, p, c) in enumerate(ch):
            if not p or any(q[1] == p for q in ch[:a]): continue
            n = sum(q[1] == p for q in ch)
            if n > bn: best, bn = c, n
        res[i] = bool(best)
    return res
def exact(b, c):
    n = b + c
    if n == 0: return 1.0
    k = min(b, c)
    return min(1.0, 2 * sum(math.comb(n, j) for j in range(k + 1)) / 2 ** n)
full = maj(f"{out}/full.jsonl") if "full" in pols else None
print(f"{'policy':12} {'pass@1':>8} {'maj@K':>8} {'pass@K':>8} {'mean T0 MiB':>12}  McNemar maj@K vs full")
for p in pols:
    s = json.load(open(f"{out}/{p}.summary.json"))
    line = f"{p:12} {s['pass_at_1']:8.3f} {s['maj_at_k']:8.3f} {s['pass_at_k']:8.3f} {s['mean_peak_t0_bytes'] / 2**20:12.2f}"
    if full is not None and p != "full":
        m = maj(f"{out}/{p}.jsonl")
        b = sum(full[i] and not m.get(i, False) for i in full)
        c = sum(m.get(i, False) and not full[i] for i in full)
        line += f"  b={b} c={c} p={exact(b, c):.3f}"
    print(line)
PY
