#!/usr/bin/env bash
# bench/gpu.sh — the one prepared GPU run (an H200; under 5 minutes in one go, everything included):
#   1. builds with `make cuda`;
#   2. runs the CUDA op checks (tests/test_cuda.c: every op against the CPU reference, relative
#      error per op printed);
#   3. measures the HBM bandwidth with a device-to-device copy (bytes read + written);
#   4. checks on the GPU that `hierarchy` at 0% eviction gives the same greedy tokens as `full`
#      (staged and direct: bit-exact by design; split: rounding-level differences allowed, reported);
#   5. on random-weight files with the shapes of DeepSeek-R1-Distill-Qwen-7B and 14B (bf16, Q8_0;
#      ONE file on disk at a time, deleted before the next) measures decode tokens/s of `full` and
#      `hierarchy` at T0 30/50/70% (staged and split) at contexts 2K/8K/32K, batch 1 and 8, with the
#      share of decode time waiting for transfers, bytes moved per step, peak device memory and the
#      share of the HBM-bandwidth bound (weight + KV bytes read per token / measured time, against the
#      measured bandwidth).
# Every step has a time estimate; a step that would not end inside BUDGET seconds is skipped and
# named in the "skipped" list. Prints one table last; writes $OUT/gpu.json, $OUT/gpu.log and
# $OUT/tests.log ($OUT from the environment, default bench/out).
#
# Flags of the engine that are still being named are variables (override from the environment):
#   BACKEND_FLAG  selects the CUDA backend                 (default "--backend cuda")
#   STAGED_FLAG   staged attention (T1 rows copied to HBM)  (default "--staged")
#   SPLIT_FLAG    split attention (T1 part where it lies)   (default "--split")
#   DEPTH_FLAG    bench: prefill the context as generated, unprotected tokens, so the hierarchy has
#                 something to tier at depth (default "--depth-generated")
#   PAR_DEPTH_FLAG bench: run --parallel 8 at each depth (default "--parallel-depth")
# Other knobs: BUDGET (280 s), MODELS, DEPTHS, RATIOS, NGEN, PARALLEL (8; 0: no batched run), WORK
# (scratch for model files), TOKSHAPE and GREEDY (the token check's model and steps). A dry run of
# the control flow on a CPU machine: BACKEND_FLAG="--threads 2" MODELS=qwen2.5-0.5b:Q8_0 DEPTHS=32
# RATIOS=0.5 NGEN=2 PARALLEL=0 TOKSHAPE=qwen2.5-0.5b GREEDY=4 bench/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
T_START=$(date +%s)
BUDGET=${BUDGET:-280}
OUT=${OUT:-bench/out}
WORK=${WORK:-/tmp/tierkv-gpu}
BIN=build-cuda/tierkv
BACKEND_FLAG=${BACKEND_FLAG:---backend cuda}
STAGED_FLAG=${STAGED_FLAG:---staged}
SPLIT_FLAG=${SPLIT_FLAG:---split}
DEPTH_FLAG=${DEPTH_FLAG:---depth-generated}
PAR_DEPTH_FLAG=${PAR_DEPTH_FLAG:---parallel-depth}
MODELS=${MODELS:-"r1-distill-qwen-7b:BF16 r1-distill-qwen-7b:Q8_0 r1-distill-qwen-14b:Q8_0 r1-distill-qwen-14b:BF16"}
DEPTHS=${DEPTHS:-"2048 8192 32768"}
RATIOS=${RATIOS:-"0.3 0.5 0.7"}
NGEN=${NGEN:-32}
PARALLEL=${PARALLEL:-8}
TOKSHAPE=${TOKSHAPE:-r1-distill-qwen-7b}
GREEDY=${GREEDY:-128}
mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
RES=$WORK/results.tsv   # one line per measurement
META=$WORK/meta.tsv     # key value
SKIPS=$WORK/skipped.txt
: >"$RES"; : >"$META"; : >"$SKIPS"

now() { echo $(($(date +%s) - T_START)); }
left() { echo $((BUDGET - $(now))); }
meta() { printf '%s\t%s\n' "$1" "$2" >>"$META"; }
skip() { echo "$*" >>"$SKIPS"; echo "SKIP: $*"; }
# fits EST: 0 if a step estimated at EST seconds ends 10 s before the budget
fits() { [ $(($(now) + $1 + 10)) -le "$BUDGET" ]; }
# run_to LIMIT cmd...: the command, killed when it would pass the budget
run_to() {
    local lim=$1; shift
    local l=$(($(left) - 8))
    [ "$l" -lt "$lim" ] && lim=$l
    [ "$lim" -lt 1 ] && return 124
    timeout -s KILL "$lim" "$@"
}
section() { echo; echo "== [$(now)s] $*"; }

finish() {
    section "results"
    python3 - "$RES" "$META" "$SKIPS" "$OUT/gpu.json" <<'PY'
import json, sys
res, meta, skips, out = sys.argv[1:5]
rows = [l.rstrip("\n").split("\t") for l in open(res) if l.strip()]
keys = ["model", "type", "policy", "t0", "mode", "depth", "batch", "tok_s", "wait_share", "bytes_step",
        "peak_mib", "bw_share", "note"]
recs = [dict(zip(keys, r)) for r in rows]
m = dict(l.rstrip("\n").split("\t", 1) for l in open(meta) if "\t" in l)
sk = [l.strip() for l in open(skips) if l.strip()]
json.dump({"meta": m, "decode": recs, "skipped": sk}, open(out, "w"), indent=1)
for k in sorted(m): print(f"  {k:28s} {m[k]}")
if recs:
    hdr = ["model", "type", "policy", "t0", "mode", "depth", "batch", "tok/s", "wait%", "MB/step", "peak MiB", "HBM bound%", "note"]
    print(" | ".join(hdr))
    for r in recs:
        print(" | ".join([r["model"], r["type"], r["policy"], r["t0"], r["mode"], r["depth"], r["batch"], r["tok_s"],
                          r["wait_share"], r["bytes_step"], r["peak_mib"], r["bw_share"], r.get("note", "")]))
else:
    print("  no decode measurements")
print("skipped:" if sk else "skipped: nothing")
for s in sk: print("  -", s)
PY
}
main() {
# ---- 1. build -------------------------------------------------------------------------------
section "build (make cuda)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee "$WORK/gpu.txt"
meta gpu "$(head -1 "$WORK/gpu.txt")"
t0=$(now)
if ! run_to 150 make -j"$(nproc)" cuda >"$WORK/build.log" 2>&1; then
    tail -30 "$WORK/build.log"
    meta build "FAILED (see gpu.log)"
    return 1
fi
meta build "ok in $(($(now) - t0)) s"

# ---- 2. op checks ---------------------------------------------------------------------------
section "CUDA op checks"
t0=$(now)
run_to 90 ./build-cuda/tierkv-tests cuda >"$OUT/tests.log" 2>&1
rc=$?
grep -E "rel err|exact|FAIL|^ok|^skip|passed" "$OUT/tests.log"
meta op_checks "rc $rc in $(($(now) - t0)) s: $(tail -1 "$OUT/tests.log")"

# ---- 3. bandwidth ---------------------------------------------------------------------------
section "HBM bandwidth (device-to-device copy)"
BW=$(run_to 60 python3 - <<'PY' 2>/dev/null
import torch
n = 4 << 30  # bytes per buffer, far above the 60 MB L2
a = torch.empty(n // 2, dtype=torch.float16, device="cuda").normal_()
b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize()
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize()
    ts.append(s.elapsed_time(e) / 1e3)
ts.sort()
print(f"{2 * n / ts[len(ts) // 2]:.4e}")  # bytes read + written per second, median of 10
PY
)
if [ -z "$BW" ]; then BW=4.8e12; meta hbm_bandwidth "4.8e12 B/s (datasheet: the copy probe failed)"; else meta hbm_bandwidth "$BW B/s (d2d copy, read+write, median of 10)"; fi
echo "bandwidth $BW B/s"

# ---- engine availability --------------------------------------------------------------------
HELP=$($BIN bench --help 2>&1) # bench's flags: its own, the common ones and the KV ones
have() { grep -q -e "$1" <<<"$HELP"; }
ENGINE=1
have "${BACKEND_FLAG%% *}" || { ENGINE=0; skip "engine runs: the tools have no ${BACKEND_FLAG%% *} flag (the forward is not on the backend seam in this build)"; }
HAVE_STATS=0; have "--stats-json" && HAVE_STATS=1
HAVE_SPLIT=1; have "${SPLIT_FLAG%% *}" || { HAVE_SPLIT=0; skip "split mode: no ${SPLIT_FLAG%% *} flag in this build"; }
HAVE_DEPTH=0; [ -n "$DEPTH_FLAG" ] && have "${DEPTH_FLAG%% *}" && HAVE_DEPTH=1
HAVE_PDEPTH=0; [ -n "$PAR_DEPTH_FLAG" ] && have "${PAR_DEPTH_FLAG%% *}" && HAVE_PDEPTH=1
HIER="--policy hierarchy --evict-ratio 0 --t2-ratio 0"

# ---- 4. hierarchy == full on the GPU ---------------------------------------------------------
if [ "$ENGINE" = 1 ] && fits 60; then
    section "greedy tokens: hierarchy (0% eviction) against full"
    python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(1000, 30000)) for _ in range(32)))" >"$WORK/ids.txt"
    if run_to 60 $BIN gen-random --shape "$TOKSHAPE" --type BF16 --layers 4 -o "$WORK/tok.gguf" >/dev/null 2>&1; then
        greedy() { # name, flags... -> $WORK/greedy.<name>.json
            local name=$1; shift
            run_to 40 $BIN logits -m "$WORK/tok.gguf" $BACKEND_FLAG --tokens "$WORK/ids.txt" --greedy "$GREEDY" --first-pos 31 \
                -o "$WORK/l.f32" --window 8 --sinks 4 --delta 8 "$@" >"$WORK/greedy.$name.json" 2>"$WORK/greedy.$name.err"
        }
        greedy full --policy full
        greedy staged $HIER --hbm-ratio 0.3 $STAGED_FLAG
        greedy direct $HIER --hbm-ratio 0.3
        [ "$HAVE_SPLIT" = 1 ] && greedy split $HIER --hbm-ratio 0.3 $SPLIT_FLAG
        python3 - "$WORK" "$META" <<'PY'
import json, os, sys
w, meta = sys.argv[1], sys.argv[2]
def ids(n):
    try: return json.load(open(f"{w}/greedy.{n}.json"))["greedy"]
    except Exception as e: return None
full = ids("full")
with open(meta, "a") as m:
    for n in ("staged", "direct", "split"):
        g = ids(n)
        if g is None or full is None:
            err = open(f"{w}/greedy.{n}.err").read().strip().splitlines()[-1:] if os.path.exists(f"{w}/greedy.{n}.err") else ["not run"]
            m.write(f"tokens_{n}_vs_full\tno result ({err[0] if err else ''})\n"); continue
        same = sum(a == b for a, b in zip(g, full))
        first = next((i for i, (a, b) in enumerate(zip(g, full)) if a != b), None)
        verdict = "IDENTICAL" if g == full else f"differ from step {first}"
        exact = n != "split"
        m.write(f"tokens_{n}_vs_full\t{verdict}: {same}/{len(full)} equal{' (must be identical)' if exact and g != full else ''}\n")
PY
        grep tokens_ "$META"
    else
        skip "token check: gen-random failed"
    fi
    rm -f "$WORK/tok.gguf" "$WORK/l.f32"
else
    [ "$ENGINE" = 1 ] && skip "token check: no time left"
fi

# ---- 5. decode benchmarks --------------------------------------------------------------------
GEN_RATE=""      # seconds per GB of gen-random output, measured on the first file
LOAD_RATE=""     # seconds per GB of model load, measured
PF_RATE=""       # seconds per prefill token per GB of weights, measured

est_gen() { python3 -c "print(int($1 * ${GEN_RATE:-4.0} + 5))"; }
est_job() { # GB, prefill tokens -> seconds
    python3 -c "print(int(1.3 * ($1 * ${LOAD_RATE:-0.6} + 4 + $2 * $1 * ${PF_RATE:-0.00005}) + 3))"
}

# one bench invocation: label fields, flags; appends one row per (depth, batch) to $RES
bench_job() {
    local model=$1 type=$2 policy=$3 t0=$4 mode=$5 depths=$6 gb=$7 wbytes=$8 kvtok=$9; shift 9
    local dlist=${depths// /,} ptoks=0 d
    for d in $depths; do ptoks=$((ptoks + d)); done
    local est; est=$(est_job "$gb" "$ptoks")
    local label="$model $type $policy t0=$t0 $mode depths=$depths"
    if ! fits "$est"; then skip "$label (estimated ${est}s)"; return; fi
    local extra=() note=""
    [ "$HAVE_STATS" = 1 ] && extra+=(--stats-json "$WORK/stats.json")
    if [ "$policy" = hierarchy ]; then
        if [ "$HAVE_DEPTH" = 1 ]; then extra+=($DEPTH_FLAG); else note="prompt-protected context (no DEPTH_FLAG): T0 holds it"; fi
    fi
    local par=()
    [ "$PARALLEL" -gt 1 ] && par=(--parallel "$PARALLEL")
    [ "$PARALLEL" -gt 1 ] && [ "$HAVE_PDEPTH" = 1 ] && par+=($PAR_DEPTH_FLAG)
    rm -f "$WORK/stats.json"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$WORK/mem.txt" 2>/dev/null &
    local smi=$!
    local t_start; t_start=$(date +%s.%N)
    echo "-- $label (est ${est}s)"
    run_to $((est * 2 + 10)) $BIN bench -m "$WORK/model.gguf" $BACKEND_FLAG "$@" -p 0 -n "$NGEN" --reps 2 -d "$dlist" \
        ${par[@]+"${par[@]}"} --json ${extra[@]+"${extra[@]}"} >"$WORK/bench.json" 2>"$WORK/bench.err"
    local rc=$?
    local wall; wall=$(python3 -c "import time; print(time.time() - $t_start)")
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    [ $rc -ne 0 ] && { tail -3 "$WORK/bench.err"; note="${note:+$note; }rc $rc"; }
    python3 - "$WORK" "$RES" "$model" "$type" "$policy" "$t0" "$mode" "$wbytes" "$kvtok" "$BW" "$note" "$wall" "$ptoks" "$gb" <<'PY'
import json, sys
w, res, model, typ, policy, t0, mode, wbytes, kvtok, bw, note, wall, ptoks, gb = sys.argv[1:15]
wbytes, kvtok, bw, wall, ptoks, gb = float(wbytes), float(kvtok), float(bw), float(wall), int(ptoks), float(gb)
rows = []
for l in open(f"{w}/bench.json"):
    try: rows.append(json.loads(l))
    except Exception: pass
peak = 0
for l in open(f"{w}/mem.txt"):
    try: peak = max(peak, int(l.strip()))
    except Exception: pass
wait = moved = "n/a"
tg = [r for r in rows if r.get("test", "").startswith("tg")]
steps = sum(r.get("tokens", 0) * 2 for r in tg)  # decode steps timed (--reps 2), single and batched
try:
    t = json.load(open(f"{w}/stats.json"))["total"]
    dec_s = sum(r["tokens"] * 2 * r.get("sequences", 1) / r["tok_per_s"] for r in tg if r.get("tok_per_s"))
    wait = f"{100 * t.get('fence_wait_seconds', 0) / dec_s:.1f}" if dec_s else "n/a"
    mb = sum(t.get(k, 0) for k in ("bytes_moved_down", "bytes_moved_up", "bytes_moved_host", "bytes_staged"))
    moved = f"{mb / max(steps, 1) / 1e6:.1f}"
except Exception:
    pass
with open(res, "a") as f:
    for r in rows:
        if not r.get("test", "").startswith("tg"): continue
        n_seq = r.get("sequences", 1)
        depth = r.get("depth", 0)
        tps = r.get("tok_per_s", 0.0)
        # bytes read per decode step: the weights once, each sequence's KV (all layers, K and V)
        step_bytes = wbytes + n_seq * depth * kvtok
        share = 100 * step_bytes * (tps / n_seq) / bw if tps else 0
        f.write("\t".join([model, typ, policy, t0, mode, str(depth), str(n_seq), f"{tps:.1f}", wait, moved,
                           str(peak), f"{share:.0f}", note]) + "\n")
with open(f"{w}/timing.tsv", "a") as f:
    f.write(f"{gb}\t{ptoks}\t{wall}\n")
PY
    # refine the prefill-rate estimate from this job (load time known from the probe)
    PF_RATE=$(python3 -c "
l = ${LOAD_RATE:-0.6} * $gb + 4
print(max(1e-6, ($wall - l) / max($ptoks, 1) / $gb))")
}

if [ "$ENGINE" = 1 ]; then
    for mt in $MODELS; do
        shape=${mt%%:*}; type=${mt##*:}
        case $shape in
        r1-distill-qwen-7b) P=7.6; NL=28; KVD=512; EMBD=3584 ;;
        r1-distill-qwen-14b) P=14.8; NL=48; KVD=1024; EMBD=5120 ;;
        qwen2.5-0.5b) P=0.49; NL=24; KVD=128; EMBD=896 ;; # dry runs of this script
        *) skip "$mt: unknown shape"; continue ;;
        esac
        case $type in BF16) BPE=2 ;; Q8_0) BPE=1.0625 ;; *) BPE=2 ;; esac
        GB=$(python3 -c "print(round($P * $BPE, 1))")
        EG=$(est_gen "$GB")
        if ! fits $((EG + 30)); then skip "$mt: generating ${GB} GB (est ${EG}s) and one run do not fit"; continue; fi
        section "$mt: gen-random (${GB} GB)"
        rm -f "$WORK/model.gguf"
        tg=$(date +%s.%N)
        if ! run_to $((EG * 2 + 20)) $BIN gen-random --shape "$shape" --type "$type" -o "$WORK/model.gguf" >"$WORK/gen.log" 2>&1; then
            tail -3 "$WORK/gen.log"; skip "$mt: gen-random failed or ran out of time"; rm -f "$WORK/model.gguf"; continue
        fi
        REAL_GB=$(python3 -c "import os; print(os.path.getsize('$WORK/model.gguf') / 1e9)")
        GEN_RATE=$(python3 -c "import time; print((time.time() - $tg) / $REAL_GB)")
        meta "gen_${shape}_${type}" "$(python3 -c "print(f'{$REAL_GB:.1f} GB in {$GEN_RATE * $REAL_GB:.0f} s')")"
        # weight bytes read per token: everything but the embedding table (one row is looked up)
        WBYTES=$(python3 -c "print(int($REAL_GB * 1e9 - 152064 * $EMBD * $BPE))")
        KVTOK=$((NL * 2 * KVD * 2)) # f16 K and V of one position, all layers
        # load-time probe (one decode step at depth 0)
        tl=$(date +%s.%N)
        if run_to 90 $BIN bench -m "$WORK/model.gguf" $BACKEND_FLAG -p 0 -n 1 --reps 1 -d 0 --json >/dev/null 2>"$WORK/probe.err"; then
            LOAD_RATE=$(python3 -c "import time; print(max(0.05, (time.time() - $tl - 2) / $REAL_GB))")
            meta "load_${shape}_${type}" "$(python3 -c "print(f'{$LOAD_RATE * $REAL_GB + 2:.1f} s to load and one step')")"
        else
            tail -3 "$WORK/probe.err"; skip "$mt: the model did not load on the backend"; rm -f "$WORK/model.gguf"; continue
        fi
        short=$(echo "$DEPTHS" | awk '{for (i = 1; i <= NF; i++) if ($i < 32768) printf "%s ", $i}' | sed 's/ $//')
        long=$(echo "$DEPTHS" | awk '{for (i = 1; i <= NF; i++) if ($i >= 32768) printf "%s ", $i}' | sed 's/ $//')
        mid=$(echo "$short" | awk '{print $NF}')
        J="$shape $type"
        A=("$GB" "$WBYTES" "$KVTOK")
        # priority: full and 50% at the short depths, then 30/70% at one depth, then the long depth
        [ -n "$short" ] && bench_job $J full - - "$short" "${A[@]}" --policy full
        [ -n "$short" ] && bench_job $J hierarchy 0.5 staged "$short" "${A[@]}" $HIER --hbm-ratio 0.5 $STAGED_FLAG
        [ -n "$short" ] && [ "$HAVE_SPLIT" = 1 ] && bench_job $J hierarchy 0.5 split "$short" "${A[@]}" $HIER --hbm-ratio 0.5 $SPLIT_FLAG
        for r in $RATIOS; do
            [ "$r" = 0.5 ] && continue
            [ -n "$mid" ] && bench_job $J hierarchy "$r" staged "$mid" "${A[@]}" $HIER --hbm-ratio "$r" $STAGED_FLAG
            [ -n "$mid" ] && [ "$HAVE_SPLIT" = 1 ] && bench_job $J hierarchy "$r" split "$mid" "${A[@]}" $HIER --hbm-ratio "$r" $SPLIT_FLAG
        done
        if [ -n "$long" ]; then
            bench_job $J full - - "$long" "${A[@]}" --policy full
            bench_job $J hierarchy 0.5 staged "$long" "${A[@]}" $HIER --hbm-ratio 0.5 $STAGED_FLAG
            [ "$HAVE_SPLIT" = 1 ] && bench_job $J hierarchy 0.5 split "$long" "${A[@]}" $HIER --hbm-ratio 0.5 $SPLIT_FLAG
        fi
        rm -f "$WORK/model.gguf"
    done
fi
meta elapsed "$(now) s of a ${BUDGET} s budget"
}

{ main; finish; } 2>&1 | tee "$OUT/gpu.log"
