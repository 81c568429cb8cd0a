#!/usr/bin/env bash
# bench/gpu.sh — the one prepared GPU run (an H200 lent 15 minutes at a time, machine start and
# transfers included, so a full run stays under 300 s and a `--quick` rerun under 120 s: a fix and
# a second try fit).
#
# Usage:
#   bench/gpu.sh               the full plan (BUDGET 300 s)
#   bench/gpu.sh --quick       binary, op checks, token check, one engine job (BUDGET 120 s)
#   bench/gpu.sh --dry-run [--quick]   prints the plan: every job, its estimated seconds, whether it
#                              fits, and the sum; touches no GPU, runs no nvidia-smi, builds nothing
# Before a run, on the dev machine: `bash scripts/gpu-carry.sh` (it builds `make cuda SERVE=0`, packs
# build-cuda/tierkv and build-cuda/tierkv-tests into build-cuda/carry.tar.xz, the one path to carry:
# the tree and the two binaries unpacked exceed what travels; puts the graph check's fixture in
# shared/ and checks the size; a GPU machine has no libmicrohttpd or jansson, and building there
# costs time). Without a runnable prebuilt binary of this tree the script builds there: `make cuda SERVE=0
# WERROR=` (with a BACKEND_FLAG other than cuda, the CPU dry run's: `make BUILD=BIN_DIR`, so that
# BIN_DIR=build stays a CPU build).
#
# The plan, in priority order (a job whose estimate would not end MARGIN seconds before BUDGET is
# skipped and named; a decode job over two depths that does not fit runs the first depth alone):
#   1. preflight: nvcc and gcc versions, nvidia-smi (GPU, driver, free memory), the machine's
#      available memory recorded (bytes: MemAvailable, or the cgroup's room when smaller; the
#      engine reads both itself, src/base/meminfo.c); where neither the loader's path nor the
#      toolkit has libcublas.so.13, TIERKV_CUBLAS set to Python's CUDA wheel's copy if there is one;
#   2. binary: the prebuilt BIN_DIR/tierkv (unpacked first from BIN_DIR/carry.tar.xz, what
#      scripts/gpu-carry.sh packs, where a binary is missing or older) when `--version` runs, ldd
#      resolves and the sources' hash it prints is this tree's (scripts/sources-hash.sh; a binary
#      without one: its commit against what the Makefile stamps for this tree, git describe
#      --always --dirty --abbrev=12 --exclude '*', or EXPECT_COMMIT where the copy has no .git;
#      neither: recorded as not compared), else a build (a stale binary whose build fails ends the
#      run); the record names both and the sha256;
#   3. CUDA op checks: BIN_DIR/tierkv-tests cuda (every op against the CPU reference; its first
#      GPU line names what runs the many-token matmuls: cuBLAS, or the kernels and why); where they
#      fail, the graph check alone (cuda_graph: decode steps as CUDA graphs against op by op; if it
#      fails, no job runs graphs and the checks run again with TIERKV_CUDA_GRAPH=off), then, if they
#      still fail, again with TIERKV_CUDA_GEMM=off, and if that passes the run goes on without cuBLAS;
#      a suite stopped at its limit (a hang) is not run again: only its failed tests, once. A GPU test
#      that skips because the device did not open (its reason "CUDA: ...") fails the checks and, with
#      the cuda backend, ends the run before any model file is written (other skips are recorded);
#   4. HBM bandwidth: a torch device-to-device copy (bytes read + written; else the datasheet figure
#      for the GPU nvidia-smi names: H100 SXM/HBM3 3.35e12, PCIe 2.0e12, NVL 3.9e12, H200 4.8e12;
#      another GPU: no HBM bound), and host to device from pinned memory (H2D; PCIE_BPS if the probe fails);
#   5. token check: greedy tokens of `hierarchy` at 0% eviction (direct, staged: must be identical;
#      split: rounding-level differences allowed) against `full`, on a TOKLAYERS-layer TOKTYPE file of
#      TOKSHAPE; an unpinned prompt fed in calls of 4 against `full` fed the same way (identical);
#      and the logits of a lossy hierarchy (T2, 10% evicted) with the scores added up on the
#      GPU against --host-scores: identical bits; each run stopped at GREEDY_S (the later ones at 3 x
#      the first's wall, 10 s at least), and after one stops at its limit the rest are skipped;
#   5b. profile, on the token check's file: TIERKV_CUDA_PROFILE=1 bench of `full` at 2048 and staged at
#      8192 (64 steps): each op's calls, device time and the gap before it, per phase;
#   6. kernel microbenchmark: `tierkv bench-ops` when the binary has it (else recorded as skipped);
#   7. the models of MODELS (random weights from gen-random, in MODEL_DIR), in two phases so that
#      every model's check of the issue's targets comes before the first model's long jobs:
#      phase 1, per model: decode tok/s of `full`, one PREFILL-token prefill (the backend's 512-token
#      chunks through cuBLAS), then `hierarchy` at T0 HBM_RATIO (0% eviction, no T2) staged and split
#      at DEPTHS (the hierarchy with DEPTH_FLAG, so it has generated tokens to tier), on the first
#      model the kernels' prefill (TIERKV_CUDA_GEMM=off -b 64: the before of cuBLAS) and `full` at
#      the first depth with TIERKV_CUDA_GRAPH=on (decode steps as CUDA graphs, beside `full`'s
#      launches one by one); phase 2: on the first model staged and split at LONG_DEPTH, then
#      direct at DEPTHS per model, and on the first model, where time is left, staged with
#      --host-scores at the deepest of DEPTHS (the attention weights read back every step: the
#      before of the score update on the GPU). A model's file stays between its phases where memory
#      (or, for files on disk, the disk) holds every model's (MODEL_KEEP), else it is written again;
#   8. where time is left: Qwen3 on the GPU: tierkv-tests qwen3_reference_logits_gpu (the F16
#      test-qwen3 and test-qwen3moe files against the reference engine's logits, with the CPU's
#      bounds; the per-head q/k norms and the experts' combine_rows), recorded on its own;
#   9. where time is left: a mixture of experts' decode (qwen3-30b-a3b, MOE_LAYERS layers, Q8_0,
#      `full`, one sequence and MOE_PARALLEL together), its experts routed on the host, on the device,
#      and on the device with graphs (TIERKV_CUDA_ROUTE, TIERKV_CUDA_GRAPH); and its 512-token prefill
#      routed on the host and on the device (the pairs grouped by expert);
#  10. where time is left: `bench-ops --tokens 512` (the 7B's matmuls of a prompt chunk, TFLOP/s)
#      in BF16 and Q8_0 through cuBLAS and in BF16 through the kernels.
#   The 32K pair does not fit the default plan; a run for it alone (Q8_0: half BF16's file):
#   MODELS=r1-distill-qwen-7b:Q8_0 DEPTHS=8192 BUDGET=360 bench/gpu.sh (no time left for a rerun)
#   The 4-bit integer products: MODELS=r1-distill-qwen-7b:Q4_K bench/gpu.sh (any of BF16, F16, Q8_0,
#   Q6_K, Q5_0, Q4_K, Q4_0; the estimates know their bytes per weight).
#   The MoE routing jobs (9) with no 7B before them: MODELS= bench/gpu.sh
#   `full` with and without graphs in one plan (the default plan's time runs out before the pair):
#   MODELS=r1-distill-qwen-7b:Q8_0 DEPTHS=2048 LONG_DEPTH= bench/gpu.sh
#   --quick: 1, 2, 3, 5 and one `full` decode job at the first depth on the token check's file.
#   --sanitize: 1, 2, then the CUDA checks (tierkv-tests cuda) under compute-sanitizer (SANITIZER,
#      else on PATH or in the toolkit): memcheck, racecheck and synccheck over the kernels' own
#      checks (shared memory, barriers), memcheck over the engines' (graphs, the profile), initcheck
#      over all where time is left (BUDGET 300 s); each records the tool's error count and its first
#      report (a runtime where the tool cannot attach, "Device not supported", is recorded as such,
#      not as the kernels' fault). Nothing is timed.
#
# Estimates (seconds; each job's is SAFETY x its parts + 3, the dry run prints them). Today's
# constants, overridable: GEN_S_PER_GB 4.0 (gen-random writing to disk, as the first device runs
# measured; in memory on all cores it writes much faster, and the token check's measured rate
# replaces the figure before any model is planned), LOAD_S_PER_GB 0.6 and PROC_S 4
# (open, CUDA context, pools), BUILD_S 45 (23 s for the whole CUDA build on 2 cores here). Decode and
# prefill from the shapes: a weight pass is weight bytes / (HBM_BPS, else the GPU's datasheet figure,
# 3.35e12 until nvidia-smi names it, x MM_EFF 0.5); decode is
# one pass per token plus its KV (T0 at HBM speed, T1 over PCIe at PCIE_BPS 25e9, or by the CPU at
# CPU_ATT_BPS 20e9 for split); prefill (and DEPTH_FLAG's appended context, chunked like a prompt)
# reads the weights once per PP_TOK tokens (64: the GEMMs' 512-token chunks, discounted for their
# arithmetic; 8 for the kernels' prefill job), and each appended token attends to everything before it, so
# the T1 part grows with depth squared (direct: every row over PCIe per token; staged, and split
# when SPLIT_FLAG has --staged: per chunk of 64; split alone: on the CPU). Measured rates refine them during the run: gen-random's rate from the
# token check's file, and every job's wall time against its estimate (a factor kept for the rest;
# a job stopped at its limit raises it to 3 at least).
# 7B: BF16 15.2 GB, Q8_0 8.1 GB of weights.
#
# Variables (environment): OUT (bench/out), WORK (scratch, /tmp/tierkv-gpu), MODEL_DIR (gen-random's
# files: /dev/shm/tierkv-gpu where memory holds them, else WORK; "model files in" below), MODEL_KEEP
# (0/1: every model's file kept between the phases; default 1 where the memory or disk they are on holds all),
# BUDGET, MARGIN (10), BIN_DIR (build-cuda), THREADS (nproc), MODELS ("r1-distill-qwen-7b:Q8_0
# r1-distill-qwen-7b:BF16": Q8_0 first, so its block fits the 300 s), DEPTHS ("2048 8192"), LONG_DEPTH (32768; empty: none), HBM_RATIO (0.5),
# NGEN (32 decode steps), REPS (2), PREFILL (2048), TOKSHAPE (r1-distill-qwen-7b), TOKLAYERS (2), TOKTYPE (Q8_0),
# GREEDY (64 steps), GREEDY_S (20), MOE_LAYERS (8), MOE_PARALLEL (4), HBM_BPS (empty: by the GPU's name), EXPECT_COMMIT (the binary's
# commit where the tree has no .git), OPS_DEPTHS (2048,8192,32768), and the flags of the engine: BACKEND_FLAG
# ("--backend cuda"), STAGED_FLAG ("--staged"), SPLIT_FLAG ("--staged --split": prefill chunks, the
# appended context included, staged; decode steps split; "--split" alone splits the fill too, whose
# T1 part the CPU then reads for every 16-token sub-batch), DEPTH_FLAG ("--depth-generated").
# The control flow on a CPU machine (no GPU, small model; op checks and the torch probe then report
# their skip): BACKEND_FLAG="--backend cpu" BIN_DIR=build MODELS=qwen2.5-0.5b:Q8_0 DEPTHS=32 LONG_DEPTH=
# TOKSHAPE=qwen2.5-0.5b GREEDY=4 NGEN=2 PREFILL=16 THREADS=1 bench/gpu.sh
#
# Outputs under $OUT: gpu.jsonl (one JSON line per step, written as each ends, so a run killed at
# the time limit still returns what it measured: "kind" is meta, preflight, binary, job, result,
# bench-ops, moe or skipped; the first meta names the arguments, the variables and the TIERKV_* exported,
# and each job's result its `cmd` and `env`; "target" lines last: issue 46's targets, met, not met or
# not measured, from bench/gpu_targets.py), gpu.log (everything printed), summary.txt (the table printed last) and
# gpu-logs.tar.gz (build log, tests log, each job's stderr, bench output and stats JSON; repacked
# after every job and on exit). Decode rows carry tok/s, the share of the HBM bound, for staged and
# direct the share of the step their T1 rows take on the bus at the probe's H2D rate ("PCIe%":
# depth x (1 - HBM_RATIO) positions a step; near 100 the bus bounds the step), the share of the
# step the host was not blocked on the device ("host%", from the bench's host_wait_s_per_step: near
# 100 the device waited for the host's launches and planning), peak device
# memory, bytes moved per decode step ("MB moved/step (run)": the job's tier moves, fills included,
# over its 1 + REPS x NGEN decode steps a depth; the bench prints no per-step figure), bytes read back to the host per step ("MB back/step": the logits,
# split's queries, the hierarchy's scores when the host ranks them (its attention weights stay on
# the GPU unless --host-scores); the bench's read_back rows), bytes split sends up per step ("MB
# up/step": the host's partial results) and the copy wait: copy_stall_seconds
# from --stats-json when the engine reports it (device time the compute stream waited for the copy
# stream), else fence_wait_seconds, named in "wait_from", as a share of the job's time after loading
# ("load s": the bench's load row, the model and the session opened; load_s and weights_copied in
# gpu.jsonl; where a bench prints none, the time after loading is estimated from PROC_S and
# LOAD_S_PER_GB).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ulimit -c 0 # an abort must not leave a multi-GB core in the tree (it would travel back with it)
ARGS="$*"

DRY=0 QUICK=0 SANITIZE=0
for a in "$@"; do
    case $a in
    --dry-run) DRY=1 ;;
    --quick) QUICK=1 ;;
    --sanitize) SANITIZE=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu.sh: unknown argument '$a' (--dry-run, --quick, --sanitize, --help)" >&2; exit 2 ;;
    esac
done

if [ "$QUICK" = 1 ]; then BUDGET=${BUDGET:-120}; else BUDGET=${BUDGET:-300}; fi
MARGIN=${MARGIN:-10}
GRAPHS_OK=1 # 0 once the graph check failed (op checks)
OUT=${OUT:-bench/out}
WORK=${WORK:-/tmp/tierkv-gpu}
BIN_DIR=${BIN_DIR:-build-cuda}
BIN=$BIN_DIR/tierkv
TBIN=$BIN_DIR/tierkv-tests
export TIERKV_BIN=$BIN # the tests' models made by gen-random (cuda_moe_decode's, the Qwen3 check's): this binary's
# the fixtures the GPU checks read (the graph check's model): a shared/ folder inside the checkout
# travels to the GPU machine, the one beside it does not (scripts/gpu-carry.sh fills it)
if [ -z "${TIERKV_SHARED:-}" ] && [ -d shared/fixtures ]; then export TIERKV_SHARED=$PWD/shared; fi
THREADS=${THREADS:-$(nproc)}
BACKEND_FLAG=${BACKEND_FLAG:---backend cuda}
STAGED_FLAG=${STAGED_FLAG:---staged}
SPLIT_FLAG=${SPLIT_FLAG:---staged --split}
DEPTH_FLAG=${DEPTH_FLAG:---depth-generated}
MODELS=${MODELS-"r1-distill-qwen-7b:Q8_0 r1-distill-qwen-7b:BF16"} # set and empty: no model jobs
DEPTHS=${DEPTHS:-"2048 8192"}
LONG_DEPTH=${LONG_DEPTH-32768}
HBM_RATIO=${HBM_RATIO:-0.5}
NGEN=${NGEN:-32}
REPS=${REPS:-2}
PREFILL=${PREFILL:-2048}
TOKSHAPE=${TOKSHAPE:-r1-distill-qwen-7b}
TOKLAYERS=${TOKLAYERS:-2}
MOE_LAYERS=${MOE_LAYERS:-8}
MOE_PARALLEL=${MOE_PARALLEL:-4}
TOKTYPE=${TOKTYPE:-Q8_0} # half BF16's bytes: the file is written and loaded 4 times faster than a BF16 one
GREEDY=${GREEDY:-64}
GREEDY_S=${GREEDY_S:-20} # the limit of each token check run (the later ones: 3 x the first's wall, 10 s at least)
OPS_DEPTHS=${OPS_DEPTHS:-2048,8192,32768}
GEN_S_PER_GB=${GEN_S_PER_GB:-4.0}
LOAD_S_PER_GB=${LOAD_S_PER_GB:-0.6}
PROC_S=${PROC_S:-4}
PP_TOK=${PP_TOK:-64}
BUILD_S=${BUILD_S:-45}
HBM_BPS=${HBM_BPS:-} # empty: the datasheet figure of the GPU nvidia-smi names (preflight)
HBM_EST=${HBM_BPS:-3.35e12} # the estimates' figure: HBM_BPS, else the GPU's datasheet once known (H100 SXM until then)
MM_EFF=${MM_EFF:-0.5}
PCIE_BPS=${PCIE_BPS:-25e9}
CPU_ATT_BPS=${CPU_ATT_BPS:-20e9}
SAFETY=${SAFETY:-1.3}
HIER="--policy hierarchy --evict-ratio 0 --t2-ratio 0 --hbm-ratio $HBM_RATIO"
JOB_FACTOR=1   # measured wall / estimate of the engine jobs so far (clamped 0.5..3)
BW=$HBM_BPS    # the HBM bound's figure: HBM_BPS, else the GPU's datasheet (preflight), replaced by the probe's measurement
BW_FROM="HBM_BPS (set)"
[ -z "$HBM_BPS" ] && BW_FROM="none yet"
H2D=$PCIE_BPS  # replaced by the probe's host-to-device measurement
H2D_FROM="assumed (PCIE_BPS)"
MODEL_OK=0 STEP_WALL=

T_START=$(date +%s)
SIM=0 # the dry run's clock
now() { if [ "$DRY" = 1 ]; then echo "$SIM"; else echo $(($(date +%s) - T_START)); fi; }
calc() { awk "BEGIN { print $* }"; }
int() { awk -v x="$1" 'BEGIN { printf "%d\n", x + 0.999 }'; }

if [ "$DRY" = 0 ]; then
    mkdir -p "$OUT" "$WORK/logs"
    OUT=$(cd "$OUT" && pwd)
    rm -f "$WORK"/logs/* "$OUT/gpu.jsonl" "$OUT/summary.txt" "$OUT/gpu-logs.tar.gz"
    exec > >(tee "$OUT/gpu.log") 2>&1
fi
L=$WORK/logs
J=${OUT}/gpu.jsonl

# jl KEY=VALUE ...: one JSON line on gpu.jsonl (numbers stay numbers); the dry run writes nothing
jl() {
    [ "$DRY" = 1 ] && return 0
    python3 - "$@" >>"$J" <<'PY'
import json, sys
d = {}
for kv in sys.argv[1:]:
    k, _, v = kv.partition("=")
    try: d[k] = int(v)
    except ValueError:
        try: d[k] = float(v)
        except ValueError: d[k] = v
print(json.dumps(d))
PY
}
tierkv_env() { # the TIERKV_* variables exported now, as NAME=value words (printf %q)
    local v e=
    for v in $(compgen -e | grep '^TIERKV_' | sort); do e+="$(printf '%q' "$v=${!v}") "; done
    echo "${e% }"
}
pack() { # the logs as one tarball, replaced atomically
    [ "$DRY" = 1 ] && return 0
    tar czf "$OUT/.gpu-logs.tmp" -C "$WORK" logs 2>/dev/null && mv -f "$OUT/.gpu-logs.tmp" "$OUT/gpu-logs.tar.gz"
}
section() { echo; echo "== [$(now)s] $*"; }
fits() { [ $(($(now) + $1 + MARGIN)) -le "$BUDGET" ]; }
SKIPPED=0 PLANNED=0
skip() { # name est why
    SKIPPED=$((SKIPPED + 1))
    if [ "$DRY" = 1 ]; then printf '  %-58s %5ss  skip: %s\n' "$1" "$2" "$3"; else echo "SKIP: $1 (est $2 s): $3"; fi
    jl kind=skipped job="$1" est_s="$2" why="$3"
}
# step NAME EST CMD...: runs CMD if it fits (the dry run only counts it); 0 if it ran and succeeded
step() {
    local name=$1 est=$2; shift 2
    if ! fits "$est"; then skip "$name" "$est" "over budget (at $(now) s of $BUDGET)"; return 1; fi
    PLANNED=$((PLANNED + 1))
    if [ "$DRY" = 1 ]; then
        SIM=$((SIM + est))
        printf '  %-58s %5ss  (ends by %s s)\n' "$name" "$est" "$SIM"
        return 0
    fi
    section "$name (est ${est} s)"
    local t0; t0=$(date +%s.%N)
    "$@"
    local rc=$?
    STEP_WALL=$(calc "$(date +%s.%N) - $t0")
    echo "-- $name: rc $rc in $(printf '%.1f' "$STEP_WALL") s (est $est s)"
    jl kind=step job="$name" rc=$rc wall_s="$STEP_WALL" est_s="$est" at_s="$(now)"
    pack
    return $rc
}
# run_to LIMIT CMD...: CMD with stdout line-buffered, stopped at LIMIT seconds or at the budget
run_to() {
    local lim=$1; shift
    local l=$((BUDGET - $(now) - 3))
    [ "$l" -lt "$lim" ] && lim=$l
    [ "$lim" -lt 1 ] && return 124
    timeout -k 3 "$lim" stdbuf -oL "$@"
}

# Shapes (tools/cmd_gen_random.c): layers embd heads kv_heads ff vocab tied
shape_of() {
    case $1 in
    qwen2.5-0.5b) echo "24 896 14 2 4864 151936 1" ;;
    r1-distill-qwen-1.5b | qwen2.5-coder-1.5b) echo "28 1536 12 2 8960 151936 0" ;;
    r1-distill-qwen-7b) echo "28 3584 28 4 18944 152064 0" ;;
    r1-distill-qwen-14b) echo "48 5120 40 8 13824 152064 0" ;;
    *) return 1 ;;
    esac
}
bpe_of() { # bytes per weight of a type (gen-random's file)
    case $1 in BF16 | F16) echo 2 ;; Q8_0) echo 1.0625 ;; Q6_K) echo 0.8203 ;; Q5_0) echo 0.6875 ;;
    Q4_K | Q4_0) echo 0.5625 ;; F32) echo 4 ;; *) echo 2 ;; esac
}
# model_gb SHAPE TYPE [LAYERS]: sets GB (weight bytes / 1e9) and KVTOK (f16 K and V bytes of one
# position, all layers); 1 for an unknown shape
model_gb() {
    local s; s=$(shape_of "$1") || return 1
    set -- $s "$(bpe_of "$2")" "${3:-}"
    local nl=$1 e=$2 h=$3 kvh=$4 ff=$5 v=$6 tied=$7 bpe=$8
    [ -n "${9:-}" ] && nl=$9
    local kvd=$((e / h * kvh))
    KVTOK=$((nl * 2 * kvd * 2))
    GB=$(calc "($v * $e * (2 - $tied) + $nl * ($e * ($e + 2 * $kvd) + $e * $e + 3 * $e * $ff)) * $bpe / 1e9")
}
gen_est() { int "$(calc "$1 * $GEN_S_PER_GB + 5")"; }
# bench_est GB KVTOK MODE DEPTHS(space-separated) PROMPT NGEN: seconds for one `tierkv bench`
# MODE: full, direct, staged, split, prefill
bench_est() {
    # tokens per weight pass of a prompt chunk: the GEMMs' PP_TOK, the kernels' 8 (the /kernels variant)
    local ppt=$PP_TOK; case $3 in */kernels) ppt=8 ;; esac
    awk -v gb="$1" -v kv="$2" -v mode="${3%%/*}" -v depths="$4" -v pp="$5" -v ng="$6" -v reps="$REPS" -v ppt="$ppt" \
        -v load="$LOAD_S_PER_GB" -v proc="$PROC_S" -v bw="$HBM_EST" -v eff="$MM_EFF" -v pcie="$PCIE_BPS" \
        -v cpu="$CPU_ATT_BPS" -v r="$HBM_RATIO" -v safety="$SAFETY" -v f="$JOB_FACTOR" \
        -v split_staged="$(case " $SPLIT_FLAG " in *" --staged "*) echo 1 ;; *) echo 0 ;; esac)" 'BEGIN {
        w = gb * 1e9 / (bw * eff)             # one pass over the weights
        t1 = (mode == "full" || mode == "prefill") ? 0 : 1 - r
        slow = mode == "split" ? cpu : pcie     # where a decode step reads the T1 part
        fill_staged = mode == "staged" || (mode == "split" && split_staged)
        fslow = fill_staged ? pcie : slow       # where the appended context reads it
        per = fill_staged ? 64 : 1              # staged: T1 rows cross once per 64-token chunk
        t = proc + gb * load
        n = split(depths, ds, " ")
        for (i = 1; i <= n; i++) {
            d = ds[i]
            tri = d * d / 2 * kv              # KV bytes the appended tokens attend to, together
            t += (d / ppt) * w + tri * (1 - t1) / (bw * 0.5) + tri * t1 / (fslow * per)
            t += (1 + reps * ng) * (w + d * kv * (1 - t1) / bw + d * kv * t1 / slow)
            if (pp > 0) t += reps * (pp / ppt) * w
        }
        printf "%d\n", safety * t * f + 3.999
    }'
}

# ---- 1. preflight ----------------------------------------------------------------------------
preflight() {
    local nvcc; nvcc=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
    local nv gv smi mem cg_max cg_cur
    nv=$("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo "none")
    gv=$(gcc --version 2>/dev/null | head -1 || echo "none")
    smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv,noheader 2>/dev/null | head -1)
    mem=$(awk '/^MemAvailable:/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
    cg_max=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)
    cg_cur=$(cat /sys/fs/cgroup/memory.current 2>/dev/null || echo 0)
    if [ "$cg_max" != max ] && [ -n "$cg_max" ]; then
        local room=$((cg_max > cg_cur ? cg_max - cg_cur : 0))
        [ "$room" -lt "$mem" ] && mem=$room
    fi
    # recorded, not exported: the engine reads MemAvailable and the cgroup itself when it needs them
    # (src/base/meminfo.c), after the model files in /dev/shm have taken their share
    # cuBLAS: the backend loads libcublas.so.13 from the loader's path or the toolkit's lib64; where
    # neither has it, Python's CUDA wheel may
    local cublas="loader or toolkit"
    # (grep reads the whole listing: `grep -q` would close the pipe early, and under pipefail
    # ldconfig's SIGPIPE would read as "not found")
    if [ "$(ldconfig -p 2>/dev/null | grep -c 'libcublas\.so\.13 ')" = 0 ] &&
        [ ! -e "${CUDA_HOME:-/usr/local/cuda}/lib64/libcublas.so.13" ] && [ -z "${TIERKV_CUBLAS:-}" ]; then
        # the CUDA 13 wheels keep their libraries in nvidia/cu13/lib, the CUDA 12 ones in nvidia/cublas/lib
        cublas=$(python3 -c 'import glob, os, site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
        f = os.path.join(d, sub, "libcublas.so.13")
        if os.path.exists(f): print(f); raise SystemExit' 2>/dev/null)
        if [ -n "$cublas" ] && [ -e "$cublas" ]; then export TIERKV_CUBLAS=$cublas; else cublas="none found"; fi
    fi
    # the HBM bound's datasheet figure, by the GPU's name (the probe's measured copy replaces it)
    local gname=${smi%%,*} ds=
    if [ -z "$HBM_BPS" ]; then
        case $gname in *H200*) ds=4.8e12 ;; *H100*PCIe*) ds=2.0e12 ;; *H100*NVL*) ds=3.9e12 ;; *H100*HBM3* | *H100*SXM*) ds=3.35e12 ;; esac
        if [ -n "$ds" ]; then BW=$ds HBM_EST=$ds BW_FROM="datasheet for '$gname'"
        else BW='' BW_FROM="no datasheet figure for '${gname:-no GPU}': the HBM bound is not computed unless the probe measures it"; fi
    fi
    echo "nvcc $nvcc: $nv"; echo "gcc: $gv"; echo "gpu: ${smi:-none (nvidia-smi failed)}"; echo "cuBLAS: $cublas"
    echo "memory available: $mem B ($(calc "$mem / 1073741824") GiB)"; echo "threads: $THREADS"
    echo "HBM bound: ${BW:-none} B/s ($BW_FROM); estimates at $HBM_EST B/s"
    jl kind=preflight nvcc="$nvcc" nvcc_version="$nv" gcc="$gv" gpu="${smi:-none}" \
        mem_available_bytes="$mem" cublas="$cublas" threads="$THREADS" budget_s="$BUDGET" quick="$QUICK" \
        commit="$(git describe --always --dirty --abbrev=12 --exclude '*' 2>/dev/null || echo "unknown (no .git here)")" \
        hbm_bps="$BW" hbm_from="$BW_FROM" hbm_est_bps="$HBM_EST"
    nvidia-smi >"$L/nvidia-smi.txt" 2>&1
    return 0
}

# ---- 2. binary --------------------------------------------------------------------------------
runnable() { # BIN and TBIN run and resolve their libraries
    [ -x "$BIN" ] && [ -x "$TBIN" ] && "$BIN" --version >/dev/null 2>&1 &&
        ! ldd "$BIN" "$TBIN" 2>/dev/null | grep -q "not found"
}
# stamp_check: STAMP_BIN (the commit `$BIN --version` names), STAMP_TREE (what the Makefile's
# GIT_COMMIT stamps for this tree; EXPECT_COMMIT where there is no .git), STAMP (the verdict);
# 1 when they differ (a stale binary)
stamp_check() {
    local ver hbin htree; ver=$("$BIN" --version 2>/dev/null)
    STAMP_BIN=$(awk 'NR == 1 { print $2 }' <<<"$ver")
    # the sources' hash (scripts/sources-hash.sh), where the binary prints one: needs no .git, and
    # takes uncommitted changes into account
    hbin=$(sed -n 's/^sources: //p' <<<"$ver")
    htree=$(sh scripts/sources-hash.sh 2>/dev/null)
    if [ -n "$hbin" ] && [ "$hbin" != unknown ] && [ -n "$htree" ]; then
        STAMP_TREE="sources $htree"
        if [ "$hbin" = "$htree" ]; then STAMP="match (the sources' hash, $htree; the binary names commit $STAMP_BIN)"; return 0; fi
        STAMP="DIFFERS: the binary's sources hash to $hbin, the tree's to $htree (scripts/sources-hash.sh)"
        return 1
    fi
    STAMP_TREE=$(git describe --always --dirty --abbrev=12 --exclude '*' 2>/dev/null) || STAMP_TREE=
    local from="git describe, as the Makefile" src="src include tools tests Makefile"
    if [ -z "$STAMP_TREE" ] && [ -n "${EXPECT_COMMIT:-}" ]; then STAMP_TREE=$EXPECT_COMMIT from=EXPECT_COMMIT; fi
    if [ -z "$STAMP_TREE" ]; then
        STAMP_TREE=unknown STAMP="not compared: no .git here (the tree's commit is unknown) and no EXPECT_COMMIT"
        return 0
    fi
    if [ "$STAMP_BIN" = "$STAMP_TREE" ]; then
        STAMP="match ($from)"
        case $STAMP_TREE in *-dirty) STAMP="$STAMP; both dirty: the uncommitted changes are not compared" ;; esac
        return 0
    fi
    # a clean binary's commit whose sources the tree still has (the difference lies outside them)
    # shellcheck disable=SC2086 # the paths
    if [ "$from" != EXPECT_COMMIT ] && [[ $STAMP_BIN =~ ^[0-9a-f]{12}$ ]] && git cat-file -e "$STAMP_BIN^{commit}" 2>/dev/null &&
        git diff --quiet "$STAMP_BIN" -- $src 2>/dev/null && [ -z "$(git ls-files --others --exclude-standard -- $src)" ]; then
        STAMP="same sources: the tree differs from $STAMP_BIN outside $src"
        return 0
    fi
    STAMP="DIFFERS: the binary names ${STAMP_BIN:-nothing}, the tree is $STAMP_TREE ($from)"
    return 1
}
case " $BACKEND_FLAG " in
*cuda*) BUILD_ARGS=(cuda SERVE=0 WERROR= BUILD="$BIN_DIR") ;;
*) BUILD_ARGS=(BUILD="$BIN_DIR" "$BIN" "$TBIN") ;; # not the GPU: BIN_DIR stays the CPU build it is
esac
build() {
    run_to $((BUILD_S * 3)) make -j"$(nproc)" "${BUILD_ARGS[@]}" >"$L/build.log" 2>&1
    local rc=$?
    [ $rc -ne 0 ] && tail -30 "$L/build.log"
    runnable || { echo "the built $BIN does not run"; return 1; }
    return $rc
}
binary_note() {
    stamp_check
    [ "$BINARY" != "${BINARY#built here}" ] && STAMP="built here from this tree (${STAMP})"
    local out version flags
    out=$("$BIN" --version 2>&1)
    version=$(head -1 <<<"$out")
    flags=$(sed -n 's/^built with: //p' <<<"$out")
    echo "binary: $BINARY ($version; ${flags:-no build flags printed}); the tree: $STAMP_TREE; $STAMP"
    jl kind=binary how="$BINARY" version="$version" commit_binary="$STAMP_BIN" commit_tree="$STAMP_TREE" \
        stamp="$STAMP" sha256="$(sha256sum "$BIN" 2>/dev/null | awk '{print $1}')" \
        tests_sha256="$(sha256sum "$TBIN" 2>/dev/null | awk '{print $1}')" \
        build_flags="${flags:-not printed by the --version of this binary (the sha256 names it)}" \
        ldd="$(ldd "$BIN" 2>&1 | awk '{print $1}' | tr '\n' ' ')"
}

# ---- 3. op checks -----------------------------------------------------------------------------
OPS_NOGPU= # why the op checks did not reach the GPU (their GPU tests skipped), if they did not
op_checks() {
    # --quick: a shorter limit, and no rerun after a hang (a hung suite would take most of its 120 s)
    local lim=60; [ "$QUICK" = 1 ] && lim=40
    run_to $lim "$TBIN" cuda >"$L/tests.log" 2>&1
    local rc=$?
    grep -E "rel err|exact|FAIL|^ok|^skip|passed|cuda: |cuBLAS" "$L/tests.log" | tail -60
    # a GPU test that skips because the device did not open (GPU_OR_SKIP's reason is the backend's
    # "CUDA: ..." message) is a failure here; other skips (cuBLAS not in use, TIERKV_CUDA_GRAPH=off, a
    # fixture of the shared folder not on this machine) are recorded and do not stop the plan
    # (a build without CUDA in BIN_DIR skips them all "built without CUDA": no GPU under it either)
    local nogpu other re='^skip cuda_[a-z0-9_]+: (CUDA: |built without CUDA)'
    nogpu=$(grep -E "$re" "$L/tests.log")
    other=$(grep -E '^skip cuda_' "$L/tests.log" | grep -v -E "$re" | paste -sd ';' -)
    [ -n "$nogpu" ] && OPS_NOGPU="$(wc -l <<<"$nogpu") GPU tests skipped, the first: $(head -1 <<<"$nogpu")"
    [ -n "$other" ] && echo "op checks skipped (not for the device): $other"
    local gskip; gskip=$(grep -E '^skip cuda_graph_decode' "$L/tests.log")
    [ -n "$gskip" ] && jl kind=meta graphs=unchecked why="$gskip (the full graphs job measures, unchecked)"
    jl kind=result job=op_checks rc=$rc summary="$(tail -1 "$L/tests.log")" \
        failed="$(grep -c '^FAIL\|  FAIL' "$L/tests.log")" gpu_skipped="${OPS_NOGPU:-none}" other_skips="${other:-none}"
    if [ -n "$OPS_NOGPU" ]; then echo "op checks failed: $OPS_NOGPU"; return 1; fi
    # stopped at the limit (a hang): no full suite again; the tests that failed before it, once, and
    # the graph job only if its check passed before the hang
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        local last failing
        last=$(grep -E '^(ok|FAIL|skip) ' "$L/tests.log" | tail -1 | awk '{ print $2 }')
        failing=$(grep -E '^FAIL ' "$L/tests.log" | awk '{ print $2 }' | paste -sd ' ' -)
        echo "op checks stopped at the limit after ${last:-no test}: the next test hung; no full rerun"
        if ! grep -q '^ok   cuda_graph_decode' "$L/tests.log"; then
            GRAPHS_OK=0
            jl kind=meta graphs=unchecked why="the op checks hung before the graph check passed"
        fi
        if [ -n "$failing" ] && [ "$QUICK" = 0 ]; then
            # shellcheck disable=SC2086 # the names
            run_to 30 "$TBIN" $failing >"$L/tests-rerun.log" 2>&1
            local rcr=$?
            grep -E "FAIL|passed" "$L/tests-rerun.log" | tail -10
            jl kind=result job=op_checks_rerun_failed tests="$failing" rc="$rcr" summary="$(tail -1 "$L/tests-rerun.log")"
        fi
        jl kind=result job=op_checks_hang rc="$rc" last_ended="${last:-none}" failed_before="${failing:-none}"
        return "$rc"
    fi
    # a failure (or an abort, which ends the suite): the decode steps' graph check alone first; if it
    # fails, the `full graphs` job is not run (graphs are off unless asked for) and the suite runs
    # again with TIERKV_CUDA_GRAPH=off (the check skips), so that what follows judges the rest
    local graph_env=
    if [ $rc -ne 0 ]; then
        run_to 40 "$TBIN" cuda_graph >"$L/tests-graph.log" 2>&1
        local rcg=$?
        grep -E "FAIL|captured|passed|^skip" "$L/tests-graph.log" | tail -10
        # a skipped graph check (no fixture) passes nothing: the graphs stay unchecked
        grep -q '^skip cuda_graph_decode' "$L/tests-graph.log" && jl kind=meta graphs=unchecked \
            why="the graph check skipped: $(grep -m1 '^skip cuda_graph_decode' "$L/tests-graph.log")"
        jl kind=result job=op_checks_graph rc=$rcg summary="$(tail -1 "$L/tests-graph.log")"
        if [ $rcg -ne 0 ]; then
            GRAPHS_OK=0 graph_env=off
            echo "the graph check failed: no job with TIERKV_CUDA_GRAPH=on; the checks again without it"
            jl kind=meta graphs=failed why="the graph check failed"
            TIERKV_CUDA_GRAPH=off run_to 60 "$TBIN" cuda >"$L/tests-graph-off.log" 2>&1
            rc=$?
            grep -E "FAIL|passed" "$L/tests-graph-off.log" | tail -10
            jl kind=result job=op_checks_graph_off rc=$rc summary="$(tail -1 "$L/tests-graph-off.log")"
        fi
    fi
    # with cuBLAS in use: again with the kernels alone; if they pass, the rest of the run keeps
    # cuBLAS off, so the engine jobs still measure (not after a hang, nor without the GPU)
    if [ $rc -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ -z "${TIERKV_CUDA_GEMM:-}" ]; then
        echo "op checks failed: again with TIERKV_CUDA_GEMM=off (the matmul kernels alone)"
        TIERKV_CUDA_GRAPH=$graph_env TIERKV_CUDA_GEMM=off run_to 60 "$TBIN" cuda >"$L/tests-gemm-off.log" 2>&1
        local rc2=$?
        grep -E "FAIL|passed" "$L/tests-gemm-off.log" | tail -10
        jl kind=result job=op_checks_gemm_off rc=$rc2 summary="$(tail -1 "$L/tests-gemm-off.log")"
        if [ $rc2 -eq 0 ]; then
            export TIERKV_CUDA_GEMM=off
            echo "cuBLAS off for the rest of the run (TIERKV_CUDA_GEMM=off)"
            jl kind=meta gemm=off why="op checks failed with cuBLAS and passed without"
        fi
    fi
    return $rc
}

# ---- 3b. under compute-sanitizer (--sanitize) -------------------------------------------------
# the checks of the kernels alone (shared memory, barriers, device scratch), and those that run
# whole engines on the GPU (graphs, the profile)
SAN_ENGINES="cuda_graph_decode cuda_moe_decode cuda_profile"
SAN_KERNELS="cuda_matmul cuda_gemm_range cuda_embed cuda_dense_ops cuda_combine_rows cuda_route cuda_matmul_sel cuda_expand_cols cuda_score_add cuda_kv_write_read_moves cuda_attention"
find_sanitizer() {
    local c
    for c in "${SANITIZER:-}" "$(command -v compute-sanitizer 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
        /usr/local/cuda/bin/compute-sanitizer; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    return 1
}
# sanitize LABEL TOOL LIMIT TESTS...: the tests under the tool; the result records the tests' rc (86: the
# tool reported errors), the tool's error count, its first report, and whether it attached at all
sanitize() {
    local label=$1 tool=$2 lim=$3; shift 3
    local log=$L/sanitize-$label.log
    run_to "$lim" "$SAN" --tool "$tool" --error-exitcode 86 --print-limit 20 "$TBIN" "$@" >"$log" 2>&1
    local rc=$?
    local errors first attach=yes
    errors=$(grep -o 'ERROR SUMMARY: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    # the first report and the line that places it ("at kernel+offset in file:line")
    first=$(grep -v -E 'ERROR SUMMARY|COMPUTE-SANITIZER' "$log" | grep -A1 -m1 -E '^========= [^ ]' |
        sed 's/^=========  *//' | tr '\n' ' ' | cut -c1-300)
    grep -q -i 'device not supported\|unable to attach\|failed to initialize' "$log" && attach=refused SAN_REFUSED=1
    grep -E '^=========|passed|FAIL' "$log" | grep -v '^=========     ' | head -30
    [ $rc -eq 124 ] && echo "stopped at the $lim s limit; the last test that ended: $(grep -E "^(ok|FAIL|skip)" "$log" | tail -1)"
    jl kind=result job="sanitize_$label" tool=$tool rc=$rc errors="${errors:-none}" attach=$attach first="${first:-}" \
        summary="$(grep -E 'passed' "$log" | tail -1)"
    return $rc
}
san_step() { # as step, unless the tool was refused the device
    if [ "$SAN_REFUSED" = 1 ]; then skip "$1" "$2" "compute-sanitizer could not attach to the device (above)"; return 1; fi
    step "$@"
}
sanitize_plan() {
    if [ "$DRY" = 1 ]; then SAN=compute-sanitizer; elif ! SAN=$(find_sanitizer); then
        skip "compute-sanitizer" 0 "no compute-sanitizer (SANITIZER, PATH, the toolkit's bin)"
        return
    fi
    [ "$DRY" = 0 ] && { echo "compute-sanitizer: $SAN ($("$SAN" --version 2>&1 | tail -1))"; jl kind=meta sanitizer="$SAN"; }
    # a tool that could not attach once will not the next time: the rest is named and skipped
    SAN_REFUSED=0
    san_step "memcheck: the kernels' checks" 60 sanitize memcheck memcheck 60 $SAN_KERNELS
    san_step "racecheck: the kernels' checks" 60 sanitize racecheck racecheck 60 $SAN_KERNELS
    san_step "memcheck: the engines' checks (graphs, profile)" 45 sanitize memcheck-engines memcheck 45 $SAN_ENGINES
    san_step "synccheck: the kernels' checks" 40 sanitize synccheck synccheck 40 $SAN_KERNELS
    san_step "initcheck: every CUDA check" 60 sanitize initcheck initcheck 60 cuda
}

# ---- 4. bandwidth -----------------------------------------------------------------------------
hbm_probe() {
    local bw
    bw=$(run_to 40 python3 - 2>"$L/hbm.err" <<'PY'
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
# host to device from pinned memory: the bus that staged and direct T1 rows cross every step
m = 1 << 30
h = torch.empty(m // 2, dtype=torch.float16, pin_memory=True)
d = torch.empty(m // 2, dtype=torch.float16, device="cuda")
for _ in range(2): d.copy_(h, non_blocking=True)
torch.cuda.synchronize()
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); d.copy_(h, non_blocking=True); e.record(); e.synchronize()
    ts.append(s.elapsed_time(e) / 1e3)
ts.sort()
print(f"{m / ts[len(ts) // 2]:.4e}")
PY
    )
    local d2d=${bw%%$'\n'*} h2d=
    [ "$d2d" != "$bw" ] && h2d=${bw##*$'\n'}
    if [ -n "$d2d" ]; then BW=$d2d; BW_FROM="d2d copy, read+write, median of 10"; fi
    if [ -n "$h2d" ]; then H2D=$h2d; H2D_FROM="pinned host to device copy of 1 GiB, median of 10"; fi
    echo "bandwidth ${BW:-none} B/s ($BW_FROM); host to device $H2D B/s ($H2D_FROM)"
    jl kind=result job=hbm_bandwidth bytes_per_s="$BW" from="$BW_FROM" h2d_bytes_per_s="$H2D" h2d_from="$H2D_FROM"
    [ -n "$d2d" ]
}

# ---- where the model files go ------------------------------------------------------------------
# MODEL_DIR, unless set: memory (/dev/shm/tierkv-gpu) where /dev/shm is a tmpfs with room for the
# largest planned file and 2 GB besides, and the memory available holds twice that file and 8 GB
# (the engine's host side: pinned pools, the weights' layouts before upload); else $WORK. In memory
# the file is written and read without the disk: the first device runs spent 44-51 s of their 300
# writing the BF16 file to disk (2.9-3.4 s/GB). Our own files there from a run cut short are removed
# first, and every exit removes them (they hold memory until the machine goes back).
SHM_DIR=/dev/shm/tierkv-gpu
pick_model_dir() {
    local shm=$SHM_DIR need=$TOKGB sum=0 mt avail= mem=
    for mt in $MODELS; do
        model_gb "${mt%%:*}" "${mt##*:}" && need=$(calc "($GB > $need) ? $GB : $need") sum=$(calc "$sum + $GB")
    done
    if [ -n "${MODEL_DIR:-}" ]; then MODEL_DIR_WHY="MODEL_DIR (set)"; else
        [ "$DRY" = 0 ] && MODEL_DIR=$shm drop_models
        avail=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 * 1024 / 1e9 }')
        mem=$(awk '/^MemAvailable:/ { print $2 * 1024 / 1e9 }' /proc/meminfo 2>/dev/null)
        MODEL_DIR=$WORK
        if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" != tmpfs ]; then MODEL_DIR_WHY="disk: /dev/shm is not a tmpfs"
        elif [ "$(calc "(${avail:-0} >= $need + 2) && (${mem:-0} >= 2 * $need + 8)")" != 1 ]; then
            MODEL_DIR_WHY=$(printf 'disk: /dev/shm has %.1f GB free, memory %.1f GB available, for files up to %.1f GB' \
                "${avail:-0}" "${mem:-0}" "$need")
        elif mkdir -p "$shm" 2>/dev/null && [ -w "$shm" ]; then
            MODEL_DIR=$shm
            MODEL_DIR_WHY=$(printf 'memory: /dev/shm has %.1f GB free, %.1f GB available, files up to %.1f GB' \
                "$avail" "$mem" "$need")
        else MODEL_DIR_WHY="disk: cannot write $shm"; fi
    fi
    # every model's file kept between the phases: MODEL_KEEP (0 or 1) if set, else where the files
    # are in memory with room for all of them and the engine's host side
    if [ -n "${MODEL_KEEP:-}" ]; then MODEL_KEEP_WHY="MODEL_KEEP (set)"
    elif [ "$MODEL_DIR" != "$shm" ]; then # on disk: kept where the disk holds them all
        local disk; disk=$(df -Pk "$(dirname "$MODEL_DIR")" 2>/dev/null | awk 'NR == 2 { print $4 * 1024 / 1e9 }')
        [ -d "$MODEL_DIR" ] && disk=$(df -Pk "$MODEL_DIR" 2>/dev/null | awk 'NR == 2 { print $4 * 1024 / 1e9 }')
        if [ "$(calc "(${disk:-0} >= $sum + 2)")" = 1 ]; then
            MODEL_KEEP=1 MODEL_KEEP_WHY=$(printf 'on disk, %.1f GB free for all %.1f GB' "$disk" "$sum")
        else MODEL_KEEP=0 MODEL_KEEP_WHY=$(printf 'on disk, %.1f GB free: not all %.1f GB' "${disk:-0}" "$sum"); fi
    elif [ "$(calc "(${avail:-0} >= $sum + 2) && (${mem:-0} >= $sum + $need + 8)")" = 1 ]; then
        MODEL_KEEP=1 MODEL_KEEP_WHY=$(printf 'memory holds all %.1f GB' "$sum")
    else MODEL_KEEP=0 MODEL_KEEP_WHY=$(printf 'memory does not hold all %.1f GB' "$sum"); fi
    [ "$DRY" = 0 ] && mkdir -p "$MODEL_DIR"
    local kept; kept=$([ "$MODEL_KEEP" = 1 ] && echo yes || echo no)
    local line="model files in $MODEL_DIR ($MODEL_DIR_WHY); kept between phases: $kept ($MODEL_KEEP_WHY)"
    if [ "$DRY" = 1 ]; then echo "  $line"; else
        echo "$line"
        jl kind=meta model_dir="$MODEL_DIR" model_dir_why="$MODEL_DIR_WHY" model_keep="$MODEL_KEEP" \
            model_keep_why="$MODEL_KEEP_WHY"
    fi
}

# ---- 5. token check ---------------------------------------------------------------------------
tok_check() {
    python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(1000, 30000)) for _ in range(32)))" >"$WORK/ids.txt"
    local tg; tg=$(date +%s.%N)
    if ! run_to 90 "$BIN" gen-random --shape "$TOKSHAPE" --type "$TOKTYPE" --layers "$TOKLAYERS" -t "$THREADS" -o "$TOKMODEL" >"$L/tok-gen.log" 2>&1; then
        tail -3 "$L/tok-gen.log"; jl kind=result job=token_check error="gen-random failed"; return 1
    fi
    local gb; gb=$(calc "$(stat -c %s "$TOKMODEL") / 1e9")
    GEN_S_PER_GB=$(calc "($(date +%s.%N) - $tg) / $gb")
    echo "gen-random: $gb GB at $GEN_S_PER_GB s/GB (estimates from here use it)"
    jl kind=meta gen_s_per_gb="$GEN_S_PER_GB" from="token check file, $gb GB"
    # each run stopped at GREEDY_S (the first) or 3 times the first's wall (10 s at least; a run
    # takes about 3 s on an H100); after a run stopped at its limit, the rest are skipped
    local glim=$GREEDY_S ghung=
    greedy() { # name, flags...
        local name=$1; shift
        if [ -n "$ghung" ]; then
            echo "token check: $name skipped ($ghung)" >"$L/greedy.$name.err"
            skip "token check: $name" "$glim" "$ghung"
            return 1
        fi
        local t0; t0=$(date +%s.%N)
        run_to "$glim" "$BIN" logits -m "$TOKMODEL" $BACKEND_FLAG -t "$THREADS" --tokens "$WORK/ids.txt" --greedy "$GREEDY" \
            --first-pos 31 -o "$WORK/l.f32" --window 8 --sinks 4 --delta 8 "$@" >"$L/greedy.$name.json" 2>"$L/greedy.$name.err"
        local rc=$?
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            ghung="the $name run stopped at its ${glim} s limit"
            echo "token check: $ghung; the runs after it are skipped"
            jl kind=result job="token_check_$name" rc="$rc" error="$ghung"
        elif [ "$name" = full ] && [ "$rc" -eq 0 ]; then
            glim=$(awk -v w="$(calc "$(date +%s.%N) - $t0")" -v m="$GREEDY_S" \
                'BEGIN { x = int(3 * w + 0.999); if (x < 10) x = 10; if (x > m) x = m; print x }')
        fi
        return "$rc"
    }
    greedy full --policy full
    greedy direct $HIER
    greedy staged $HIER $STAGED_FLAG
    greedy split $HIER $SPLIT_FLAG
    # a prompt fed in calls of 4 that read nothing back between them, unpinned and over its T0 share:
    # every call demotes rows the call before wrote (a batch that must wait for that call's
    # compute: copy_after_compute); against full fed the same way (the same matmul shapes)
    greedy full_b4 --policy full -b 4
    greedy chunked $HIER --unpin-prompt -b 4
    # lossy tiers (T2, an evicted tail: the scores decide what is lost), the scores added up on the
    # GPU and on the host: the same logits, bit for bit
    local lossy=(--t2-ratio 0.25 --evict-ratio 0.1 $STAGED_FLAG)
    greedy lossy $HIER "${lossy[@]}" && cp "$WORK/l.f32" "$WORK/lossy.f32"
    greedy lossy_host $HIER "${lossy[@]}" --host-scores && cp "$WORK/l.f32" "$WORK/lossy_host.f32"
    local verdict="no result"
    if [ -s "$WORK/lossy.f32" ] && [ -s "$WORK/lossy_host.f32" ]; then
        verdict=DIFFER
        cmp -s "$WORK/lossy.f32" "$WORK/lossy_host.f32" && verdict=IDENTICAL
    fi
    echo "logits of a lossy hierarchy, scores on the device against --host-scores: $verdict"
    jl kind=result job=logits_scores_device_vs_host must_be_identical=True verdict="$verdict" \
        bytes="$(stat -c %s "$WORK/lossy.f32" 2>/dev/null || echo 0)"
    rm -f "$WORK/l.f32" "$WORK/lossy.f32" "$WORK/lossy_host.f32"
    python3 - "$L" <<'PY' | tee -a "$J"
import json, os, sys
w = sys.argv[1]
def ids(n):
    try: return json.load(open(f"{w}/greedy.{n}.json"))["greedy"]
    except Exception: return None
for n, base in (("direct", "full"), ("staged", "full"), ("split", "full"), ("chunked", "full_b4")):
    g, full = ids(n), ids(base)
    r = {"kind": "result", "job": f"tokens_{n}_vs_{base}", "must_be_identical": n != "split"}
    if g is None or full is None:
        e = f"{w}/greedy.{n if g is None else base}.err"
        last = open(e).read().strip().splitlines()[-1:] if os.path.exists(e) else ["not run"]
        r.update(verdict="no result", error=last[0] if last else "")
    else:
        first = next((i for i, (a, b) in enumerate(zip(g, full)) if a != b), None)
        r.update(verdict="IDENTICAL" if g == full else f"differ from step {first}",
                 equal=sum(a == b for a, b in zip(g, full)), steps=len(full))
    print(json.dumps(r))
PY
}

# ---- 5b. profile ------------------------------------------------------------------------------
# where a step's device time goes, on the token check's file (the 7B's layers, TOKLAYERS of them):
# TIERKV_CUDA_PROFILE=1 prints each op's calls, device time and the gap before it (docs/CUDA.md)
prof_job() { # TAG, engine flags...
    local tag=$1; shift
    TIERKV_CUDA_PROFILE=1 run_to 60 "$BIN" bench -m "$TOKMODEL" $BACKEND_FLAG -t "$THREADS" -p 0 -n 64 --reps 1 --json \
        "$@" >"$L/prof-$tag.jsonl" 2>"$L/prof-$tag.err"
    local rc=$?
    python3 - "$L/prof-$tag.err" "$tag" "$rc" <<'PY' | tee -a "$J"
import json, re, sys
recs, untimed = [], 0
for l in open(sys.argv[1]):
    m = re.match(r"tierkv cuda-profile: (\d+) ops untimed", l)  # ops whose device time is not in the rows
    if m: untimed = int(m.group(1))
    if l.startswith("tierkv cuda-profile {"):
        try: recs.append(json.loads(l[len("tierkv cuda-profile "):]))
        except Exception: continue
for r in recs: print(json.dumps({"kind": "profile", "job": sys.argv[2], **r, "untimed_ops": untimed}))
if not recs: print(json.dumps({"kind": "profile", "job": sys.argv[2], "rc": int(sys.argv[3]), "error": "no profile lines",
                               "untimed_ops": untimed}))
PY
    return $rc
}
profile() {
    local rc=0
    prof_job full -d 2048 --policy full || rc=1
    prof_job staged -d 8192 $HIER $STAGED_FLAG $DEPTH_FLAG || rc=1
    return $rc
}

# ---- 6. kernel microbenchmark -----------------------------------------------------------------
# ops_records FILE [GEMM]: bench-ops' rows as "bench-ops" records; with GEMM (what TIERKV_CUDA_GEMM
# was), only the matmul rows, labelled, with TFLOP/s from 2 x n_in x n_out x tokens
ops_records() {
    python3 - "$1" "${2:-}" <<'PY' | tee -a "$J"
import json, sys
gemm = sys.argv[2]
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    if not isinstance(r, dict): continue
    if gemm:
        if r.get("op") != "matmul" or not r.get("us"): continue
        r = {"gemm": gemm, **r, "tflop_s": round(2 * r["n_in"] * r["n_out"] * r["tokens"] / r["us"] / 1e6, 1)}
    print(json.dumps({"kind": "bench-ops", **r}))
PY
}
bench_ops() {
    run_to 60 "$BIN" bench-ops $BACKEND_FLAG --shape r1-distill-qwen-7b --type BF16 --depths "$OPS_DEPTHS" --json \
        >"$L/bench-ops.jsonl" 2>"$L/bench-ops.err"
    local rc=$?
    ops_records "$L/bench-ops.jsonl"
    return $rc
}

# 8. Qwen3 dense and MoE on the GPU: the reference engine's logits of the F16 test shapes (the CPU's
# own check, its bounds), run on the device; made by gen-random, so TIERKV_BIN names this binary.
# Recorded beside the op checks, never turning cuBLAS or graphs off for the timed jobs before it.
qwen3_refs() {
    TIERKV_BIN="$BIN" run_to 60 "$TBIN" qwen3_reference_logits_gpu >"$L/tests-qwen3.log" 2>&1
    local rc=$?
    grep -E "max\|d\||FAIL|^skip|passed" "$L/tests-qwen3.log" | tail -20
    jl kind=result job=qwen3_references_gpu rc=$rc summary="$(tail -1 "$L/tests-qwen3.log")" \
        rows="$(grep -E 'max\|d\|' "$L/tests-qwen3.log" | sed 's/^ *//' | paste -sd ';' -)" \
        skipped="$(grep -E '^skip' "$L/tests-qwen3.log" | paste -sd ';' -)"
    return $rc
}

# 10. the matmuls of 512 tokens (a prompt chunk): BF16 and Q8_0 through cuBLAS, BF16 through the
# kernels (TIERKV_CUDA_GEMM=off)
bench_ops_gemm() {
    local rc=0 t runs="BF16:auto Q8_0:auto BF16:off"
    [ "${TIERKV_CUDA_GEMM:-}" = off ] && runs="BF16:off" # cuBLAS failed the op checks
    for t in $runs; do
        TIERKV_CUDA_GEMM=${t#*:} run_to 40 "$BIN" bench-ops $BACKEND_FLAG --shape r1-distill-qwen-7b --type "${t%:*}" \
            --tokens 512 --depths 2048 --reps 5 --json >"$L/bench-ops-gemm-${t/:/-}.jsonl" 2>>"$L/bench-ops-gemm.err" || rc=1
        ops_records "$L/bench-ops-gemm-${t/:/-}.jsonl" "${t#*:}"
    done
    return $rc
}

# 9. where time is left: a mixture of experts' decode, its experts routed on the host (the router's
# logits read back every layer) and on the device (cuda_moe.cu), op by op and as graphs: the
# qwen3-30b-a3b shape, MOE_LAYERS layers in Q8_0 (one gen-random file, removed after), `full`, at
# one sequence and MOE_PARALLEL together; then a 512-token prefill (one chunk) routed on the host
# (each expert's tokens gathered and multiplied, launch by launch) and on the device (the pairs
# grouped by expert on the device: a chunk's MoE layers in a few launches)
moe_routes() {
    local f=$MODEL_DIR/moe-routes.gguf rc=0 r
    run_to 60 "$BIN" gen-random --shape qwen3-30b-a3b --type Q8_0 --layers "$MOE_LAYERS" -t "$THREADS" -o "$f" \
        >"$L/moe-gen.log" 2>&1 || { tail -3 "$L/moe-gen.log"; rm -f "$f"; return 1; }
    for r in host:off:tg device:off:tg device:on:tg host:off:pp device:off:pp; do
        local route=${r%%:*} graphs=${r#*:} t=${r##*:} tag=${r//:/-}
        graphs=${graphs%:*}
        local shape=(-p 0 -n "$NGEN" --parallel "$MOE_PARALLEL")
        [ "$t" = pp ] && shape=(-p 512 -n 0)
        TIERKV_CUDA_ROUTE=$route TIERKV_CUDA_GRAPH=$graphs run_to 40 "$BIN" bench -m "$f" $BACKEND_FLAG \
            -t "$THREADS" "${shape[@]}" -d 0 --reps "$REPS" --policy full --json \
            >"$L/moe-$tag.jsonl" 2>>"$L/moe.err" || rc=1
        python3 - "$L/moe-$tag.jsonl" "$route" "$graphs" "$MOE_LAYERS" <<'PY' | tee -a "$J"
import json, sys
path, route, graphs, layers = sys.argv[1:5]
for l in open(path):
    try: r = json.loads(l)
    except Exception: continue
    if isinstance(r, dict) and r.get("tok_per_s"):
        print(json.dumps({"kind": "moe", "job": "moe_routes", "route": route, "graphs": graphs, "layers": int(layers),
                          "test": r.get("test"), "sequences": r.get("sequences", 1), "tok_s": r["tok_per_s"],
                          "kernels": r.get("kernels")}))
PY
    done
    rm -f "$f"
    return $rc
}

# ---- 7. engine jobs ---------------------------------------------------------------------------
# bench_job LABEL MODE DEPTHS PROMPT NGEN -- engine flags: one `tierkv bench` on $MODEL, one result
# line per row it prints; degrades to the first depth when all of DEPTHS do not fit. MODE may name
# a variant after a slash (staged/host-scores): estimated as the mode, shown as given
bench_job() {
    local label=$1 mode=$2 depths=$3 pp=$4 ng=$5; shift 6
    local est; est=$(bench_est "$MGB" "$KVTOK" "$mode" "$depths" "$pp" "$ng")
    if ! fits "$est" && [ "${depths% *}" != "$depths" ]; then
        local first=${depths%% *} e1
        e1=$(bench_est "$MGB" "$KVTOK" "$mode" "$first" "$pp" "$ng")
        if fits "$e1"; then
            skip "$label d=${depths// /,}" "$est" "over budget: runs at d=$first alone"
            depths=$first est=$e1
        fi
    fi
    local name="$label d=${depths// /,}" tag=${label// /_}_${depths// /_}
    tag=${tag//\//-}
    if [ "$MODEL_OK" = 0 ]; then skip "$name" "$est" "no model file (its gen-random was skipped or failed)"; return 1; fi
    # the kill limit from the estimate at a factor of 1 at least: jobs that ran fast (full, prefill)
    # lower the factor, which must not cut a slower mode's job short
    local lim=$est
    if [ "$(calc "($JOB_FACTOR < 1)")" = 1 ]; then lim=$(JOB_FACTOR=1 bench_est "$MGB" "$KVTOK" "$mode" "$depths" "$pp" "$ng"); fi
    BJ=("$@") BJ_MODE=$mode BJ_DEPTHS=$depths BJ_PP=$pp BJ_NG=$ng BJ_TAG=$tag BJ_EST=$est BJ_LIM=$lim
    STEP_WALL=
    step "$name" "$est" bench_run
    local rc=$?
    # a job that ended refines the estimates after it; one stopped at its limit (it ran over twice
    # its estimate) raises the factor to 3 at least, so the jobs after it are not misjudged alike
    [ "$rc" = 0 ] && [ -n "$STEP_WALL" ] && JOB_FACTOR=$(awk -v f="$JOB_FACTOR" -v w="$STEP_WALL" -v e="$est" \
        'BEGIN { x = f * w / e; if (x < 0.5) x = 0.5; if (x > 3) x = 3; print x }')
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        JOB_FACTOR=$(awk -v f="$JOB_FACTOR" 'BEGIN { print f < 3 ? 3 : f }')
        echo "$name stopped at its limit: the estimates after it x $JOB_FACTOR"
        jl kind=meta job_factor="$JOB_FACTOR" why="$name stopped at its limit"
    fi
    return $rc
}
bench_run() {
    local tag=$BJ_TAG extra=() envs=()
    case $BJ_MODE in
    */kernels) envs=(TIERKV_CUDA_GEMM=off) ;;    # the matmul kernels alone: the before of cuBLAS
    */graphs) envs=(TIERKV_CUDA_GRAPH=on) ;;       # decode steps as CUDA graphs, beside `full` (op by op)
    esac
    # shellcheck disable=SC2206 # the flag may be several words
    [ "${BJ_MODE%%/*}" != full ] && [ "${BJ_MODE%%/*}" != prefill ] && [ -n "$DEPTH_FLAG" ] && extra+=($DEPTH_FLAG)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$L/$tag.mem" 2>/dev/null &
    local smi=$! t0; t0=$(date +%s.%N)
    # shellcheck disable=SC2206 # the backend flag may be several words
    local cmd=(env ${envs[@]+"${envs[@]}"} "$BIN" bench -m "$MODEL" $BACKEND_FLAG -t "$THREADS" -p "$BJ_PP" -n "$BJ_NG"
        --reps "$REPS" -d "${BJ_DEPTHS// /,}" --json --stats-json "$L/$tag.stats.json" ${extra[@]+"${extra[@]}"} "${BJ[@]}")
    run_to $((BJ_LIM * 2 + 10)) "${cmd[@]}" >"$L/$tag.jsonl" 2>"$L/$tag.err"
    local rc=$? wall; wall=$(calc "$(date +%s.%N) - $t0")
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    [ $rc -ne 0 ] && tail -3 "$L/$tag.err"
    python3 - "$L" "$tag" "$MNAME" "$BJ_MODE" "$MWBYTES" "$KVTOK" "$BW" "$wall" "$MGB" "$LOAD_S_PER_GB" "$PROC_S" "$rc" \
        "$H2D" "$HBM_RATIO" "$BW_FROM" "$(printf '%q ' "${cmd[@]}")" "$(tierkv_env)" "$REPS" <<'PY' | tee -a "$J"
import json, sys
L, tag, model, mode, wbytes, kvtok, bw, wall, gb, load, proc, rc, h2d, hbm_ratio, bw_from, cmd, env, reps = sys.argv[1:19]
wbytes, kvtok, bw, wall, gb, h2d, hbm_ratio = float(wbytes), float(kvtok), float(bw) if bw else None, float(wall), \
    float(gb), float(h2d), float(hbm_ratio)
rows = []
for l in open(f"{L}/{tag}.jsonl"):
    try: rows.append(json.loads(l))
    except Exception: pass
peak = 0
try:
    for l in open(f"{L}/{tag}.mem"):
        try: peak = max(peak, int(l.strip()))
        except ValueError: pass
except OSError: pass
wait_s = wait_from = moved = None
# the decode steps the run made: per depth one untimed warm-up step and reps x n_gen timed ones (the
# tg rows' tokens are n_gen). The stats count the whole run (the fill of every depth and the prefill
# included) and the bench prints no per-step figure, so this is the run's bytes over its decode steps
steps = sum(1 + int(reps) * r.get("tokens", 0) for r in rows if r.get("test", "").startswith("tg"))
try:
    t = json.load(open(f"{L}/{tag}.stats.json"))["total"]
    if "copy_stall_seconds" in t: wait_s, wait_from = t["copy_stall_seconds"], "copy_stall_seconds"
    elif "fence_wait_seconds" in t: wait_s, wait_from = t["fence_wait_seconds"], "fence_wait_seconds"
    mb = sum(t.get(k, 0) for k in ("bytes_moved_down", "bytes_moved_up", "bytes_moved_host", "bytes_staged"))
    moved = round(mb / steps / 1e6, 3) if steps else None
except Exception:
    pass
# the job's time after loading: the bench's own load row (model and session opened), else estimated
lrow = next((r for r in rows if r.get("test") == "load"), None)
rows = [r for r in rows if r.get("test") != "load"]
load_s = lrow["model_s"] + lrow["session_s"] if lrow else None
engine_s = max(wall - (load_s if load_s is not None else float(proc) + gb * float(load)), 1e-3)
base = {"kind": "result", "job": tag, "model": model, "mode": mode, "rc": int(rc), "wall_s": round(wall, 1),
        "load_s": None if load_s is None else round(load_s, 2), "weights_copied": lrow.get("weights_copied") if lrow else None,
        "peak_mib": peak, "wait_s": wait_s, "wait_from": wait_from,
        "wait_pct": None if wait_s is None else round(100 * wait_s / engine_s, 1),
        "mb_moved_run_per_decode_step": moved, "decode_steps": steps,
        "hbm_bound_bps": bw, "hbm_bound_from": bw_from, "cmd": cmd.strip(), "env": env}
if not rows: print(json.dumps({**base, "error": "no rows"}))
else: base["kernels"] = rows[0].get("kernels")  # the backend's description: which GEMV, cuBLAS or not
# bytes each decode step read back to the host (attention weights, split queries, logits) and split
# sent up (the host's partial results), by (test, depth)
rback = {(r.get("of"), r.get("depth")): r for r in rows if r.get("test") == "read_back"}
rows = [r for r in rows if r.get("test") != "read_back"]
for r in rows:
    out = dict(base, test=r.get("test"), depth=r.get("depth", 0), tok_s=r.get("tok_per_s"))
    rb = rback.get((r.get("test"), r.get("depth", 0)), {})
    if rb.get("bytes_per_step") is not None: out["mb_read_back_per_step"] = round(rb["bytes_per_step"] / 1e6, 3)
    if rb.get("sent_bytes_per_step"): out["mb_sent_up_per_step"] = round(rb["sent_bytes_per_step"] / 1e6, 3)
    # the share of a step the host was not blocked on the device: near 100, the device waited for
    # the host (launches, planning, split's host part); low, the host waited for the device
    if rb.get("host_wait_s_per_step") is not None and r.get("tok_per_s"):
        out["host_ms_per_step"] = round(1e3 * (r.get("sequences", 1) / r["tok_per_s"] - rb["host_wait_s_per_step"]), 3)
        out["host_pct"] = round(100 * (1 - rb["host_wait_s_per_step"] * r["tok_per_s"] / r.get("sequences", 1)), 1)
    if r.get("test", "").startswith("tg") and r.get("tok_per_s"):
        n = r.get("sequences", 1)
        step_bytes = wbytes + n * r.get("depth", 0) * kvtok  # weights once, each sequence's KV
        if bw: out["hbm_bound_pct"] = round(100 * step_bytes * r["tok_per_s"] / n / bw, 1)  # no figure: not computed
        # staged and direct: the T1 rows (all but T0's share of the depth) cross the bus every step;
        # pcie_pct is the share of the step that takes at the probe's host-to-device rate (near 100:
        # bound by the bus; well below while tok/s trails full: the time is elsewhere)
        if mode.split("/")[0] in ("staged", "direct") and r.get("depth"):
            t1 = n * r["depth"] * (1 - hbm_ratio) * kvtok
            out["pcie_ms_per_step"] = round(1e3 * t1 / h2d, 3)
            out["pcie_pct"] = round(100 * t1 * r["tok_per_s"] / n / h2d, 1)
    print(json.dumps(out))
PY
    return $rc
}

# The model jobs run in two phases, so that every model's check of the issue's targets comes before
# the first model's longer jobs: phase 1 for each model in MODELS order (full, prefill, staged and
# split at DEPTHS; on the first model the kernels' prefill and full with graphs), then phase 2 (the
# first model's long pair and host-scores, every model's direct). A model's file stays in MODEL_DIR
# between its phases where memory or disk holds every model's (MODEL_KEEP: "kept between phases" in the
# log), else it is removed after each phase and written again for the next.
declare -A MODEL_HAVE=() # SHAPE:TYPE -> 1 while its file is in MODEL_DIR
model_file() { echo "$MODEL_DIR/model-$1-$2.gguf"; }
# model_use SHAPE TYPE AGAIN(""|again) MODE DEPTH: MNAME, MGB, KVTOK, MWBYTES and MODEL of the model;
# MODEL_OK=1 when its file is there (kept from phase 1, or gen-random ran, where it fits with the
# phase's first job after it: MODE at DEPTH); 2 for an unknown shape
model_use() {
    local shape=$1 type=$2 again=$3 mode=$4 depth=$5
    MNAME="$shape $type" MODEL_OK=0
    model_gb "$shape" "$type" || { skip "$MNAME" 0 "unknown shape"; return 2; }
    MGB=$GB
    local s; s=$(shape_of "$shape"); set -- $s
    MWBYTES=$(calc "$MGB * 1e9 - $6 * $2 * $(bpe_of "$type")") # the embedding: one row per token
    MODEL=$(model_file "$shape" "$type")
    if [ -n "${MODEL_HAVE[$shape:$type]:-}" ]; then MODEL_OK=1; return 0; fi
    local eg; eg=$(gen_est "$MGB")
    local first; first=$(bench_est "$MGB" "$KVTOK" "$mode" "$depth" 0 "$NGEN")
    local label; label="$MNAME gen-random${again:+ again} ($(printf '%.1f' "$MGB") GB)"
    if ! fits $((eg + first)); then skip "$label + its first job" $((eg + first)) "over budget"; return 1; fi
    [ "$DRY" = 0 ] && rm -f "$MODEL"
    step "$label" "$eg" gen_model "$shape" "$type" || return 1
    MODEL_OK=1 MODEL_HAVE[$shape:$type]=1
}
model_done() { # SHAPE TYPE: its file is removed unless memory keeps every model's
    [ "$MODEL_KEEP" = 1 ] && return 0
    [ "$DRY" = 0 ] && rm -f "$(model_file "$1" "$2")"
    unset "MODEL_HAVE[$1:$2]"
}
model_phase1() { # SHAPE TYPE FIRST(0|1)
    local shape=$1 type=$2 first_model=$3
    model_use "$shape" "$type" "" full "${DEPTHS%% *}"
    [ $? = 2 ] && return
    bench_job "$MNAME full" full "$DEPTHS" 0 "$NGEN" -- --policy full
    # the prefill (the backend's chunk, its GEMMs through cuBLAS), staged and split (the two ways
    # the paper's T1 is read), on the first model the kernels' prefill of 64-token chunks
    # (TIERKV_CUDA_GEMM=off -b 64: the before of cuBLAS), each a check of the issue
    bench_job "$MNAME prefill $PREFILL" prefill 0 "$PREFILL" 0 -- --policy full
    bench_job "$MNAME staged T0 $HBM_RATIO" staged "$DEPTHS" 0 "$NGEN" -- $HIER $STAGED_FLAG
    bench_job "$MNAME split T0 $HBM_RATIO" split "$DEPTHS" 0 "$NGEN" -- $HIER $SPLIT_FLAG
    [ "$first_model" = 1 ] && bench_job "$MNAME prefill kernels $PREFILL" prefill/kernels 0 "$PREFILL" 0 -- --policy full -b 64
    # the decode steps as CUDA graphs (TIERKV_CUDA_GRAPH=on), beside `full` (op by op), unless the
    # graph check failed
    if [ "$first_model" = 1 ]; then
        if [ "$GRAPHS_OK" = 1 ]; then
            bench_job "$MNAME full graphs" full/graphs "${DEPTHS%% *}" 0 "$NGEN" -- --policy full
        else skip "$MNAME full graphs" 0 "the graph check failed"; fi
    fi
    model_done "$shape" "$type"
}
model_phase2() { # SHAPE TYPE FIRST(0|1)
    local shape=$1 type=$2 first_model=$3
    # nothing left for a model past the first but direct, and no file to write for it when it
    # cannot fit (direct reads every T1 row over PCIe for every token: the slowest, and the least
    # likely to be used)
    local mode=direct depth=${DEPTHS%% *}
    [ "$first_model" = 1 ] && [ -n "$LONG_DEPTH" ] && mode=staged depth=$LONG_DEPTH
    model_use "$shape" "$type" again "$mode" "$depth"
    [ $? = 2 ] && return
    # the long pair and host-scores on the first model (the default's Q8_0: half BF16's file)
    if [ "$first_model" = 1 ] && [ -n "$LONG_DEPTH" ]; then
        bench_job "$MNAME staged T0 $HBM_RATIO" staged "$LONG_DEPTH" 0 "$NGEN" -- $HIER $STAGED_FLAG
        bench_job "$MNAME split T0 $HBM_RATIO" split "$LONG_DEPTH" 0 "$NGEN" -- $HIER $SPLIT_FLAG
    fi
    bench_job "$MNAME direct T0 $HBM_RATIO" direct "$DEPTHS" 0 "$NGEN" -- $HIER
    # last of all, where time is left: staged with the scores updated on the host (every layer's
    # weights read back a step), the before of the score update on the GPU, at the deepest depth
    [ "$first_model" = 1 ] && bench_job "$MNAME staged host-scores T0 $HBM_RATIO" staged/host-scores "${DEPTHS##* }" 0 "$NGEN" -- \
        $HIER $STAGED_FLAG --host-scores
    MODEL_KEEP=0 model_done "$shape" "$type"
}
gen_model() {
    local tg; tg=$(date +%s.%N)
    run_to $(($(gen_est "$MGB") * 2 + 20)) "$BIN" gen-random --shape "$1" --type "$2" -t "$THREADS" -o "$MODEL" >"$L/gen-$1-$2.log" 2>&1 ||
        { tail -3 "$L/gen-$1-$2.log"; return 1; }
    local gb; gb=$(calc "$(stat -c %s "$MODEL") / 1e9")
    GEN_S_PER_GB=$(calc "($(date +%s.%N) - $tg) / $gb")
    jl kind=meta model="$MNAME" file_gb="$gb" gen_s_per_gb="$GEN_S_PER_GB"
}

# ---- the summary ------------------------------------------------------------------------------
summary() {
    [ "$DRY" = 1 ] && return 0
    jl kind=meta elapsed_s="$(now)" budget_s="$BUDGET" planned="$PLANNED" skipped="$SKIPPED" job_factor="$JOB_FACTOR"
    section "summary"
    python3 - "$J" <<'PY' | tee "$OUT/summary.txt"
import json, sys
recs = []
for l in open(sys.argv[1]):
    try: recs.append(json.loads(l))
    except Exception: pass
def f(x, p=1):
    return "-" if x is None else (f"{x:.{p}f}" if isinstance(x, float) else str(x))
for r in recs:
    if r.get("kind") in ("preflight", "binary"):
        print("  " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "kind"))
for r in recs:
    if r.get("kind") == "result" and "test" not in r:
        print("  " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "kind"))
rows = [r for r in recs if r.get("kind") == "result" and "test" in r]
if rows:
    hdr = ["model", "mode", "test", "depth", "tok/s", "HBM bound%", "PCIe%", "host%", "wait%", "wait from",
           "MB moved/step (run)", "MB back/step", "MB up/step", "peak MiB", "load s", "rc"]
    print(" | ".join(hdr))
    for r in rows:
        print(" | ".join([r["model"], r["mode"], f(r.get("test")), f(r.get("depth")), f(r.get("tok_s")),
                          f(r.get("hbm_bound_pct")), f(r.get("pcie_pct")), f(r.get("host_pct")), f(r.get("wait_pct")), f(r.get("wait_from")),
                          f(r.get("mb_moved_run_per_decode_step"), 3), f(r.get("mb_read_back_per_step")),
                          f(r.get("mb_sent_up_per_step")), f(r.get("peak_mib")), f(r.get("load_s"), 2),
                          f(r.get("rc"))]))
    print("  MB moved/step (run): the job's moved bytes (fills, prefill and warm-up steps included) over its decode"
          " steps (1 + REPS x NGEN a depth); the bench reports no per-step figure")
else:
    print("  no engine measurements")
prof = [r for r in recs if r.get("kind") == "profile" and "op" in r]
if prof:
    print("profile (device ms; gap: the stream idle before the op) | job | phase | op | calls | device ms | gap ms")
    for r in prof:
        print(" | ".join(["  profile", r["job"], r["phase"], r["op"], str(r.get("calls", r.get("steps"))),
                          f(r.get("device_ms"), 3), f(r.get("gap_before_ms"), 3)]))
    for j in dict.fromkeys(r["job"] for r in prof):
        u = next(r.get("untimed_ops", 0) for r in prof if r["job"] == j)
        if u: print(f"  profile {j}: {u} ops untimed (their device time is in no row)")
ops = [r for r in recs if r.get("kind") == "bench-ops"]
for r in ops: print("  bench-ops " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "kind"))
moe = [r for r in recs if r.get("kind") == "moe"]
if moe:
    print("MoE (layers; tok/s; x the host's routing for the same test and sequences) | test | route | graphs | "
          "sequences | tok/s | x host")
    host = {(r.get("test"), r["sequences"]): r["tok_s"] for r in moe if r["route"] == "host"}
    for r in moe:
        h = host.get((r.get("test"), r["sequences"]))
        print(" | ".join([f"  moe {r['layers']} layers", str(r.get("test")), r["route"], r["graphs"],
                          str(r["sequences"]), f(r["tok_s"]), f(r["tok_s"] / h, 2) if h else "-"]))
sk = [r for r in recs if r.get("kind") == "skipped"]
print("skipped:" if sk else "skipped: nothing")
for r in sk: print(f"  - {r['job']} (est {r['est_s']} s): {r['why']}")
for r in recs:
    if r.get("kind") == "meta" and "elapsed_s" in r:
        print(f"elapsed {r['elapsed_s']} s of {r['budget_s']} s")
PY
    # the issue's targets, read off the rows above: met, not met or not measured (and why)
    python3 bench/gpu_targets.py "$J" --append-json "$J" | tee -a "$OUT/summary.txt"
    pack
}
on_exit() { trap - EXIT; summary; pack; drop_models; }
drop_models() { # the model files, and the folder in memory that held them
    [ -n "${MODEL_DIR:-}" ] || return 0
    rm -f "$MODEL_DIR/tok.gguf" "$MODEL_DIR"/model-*.gguf
    [ "$MODEL_DIR" = "$SHM_DIR" ] && rmdir "$MODEL_DIR" 2>/dev/null
    return 0
}
dry_sum() {
    [ "$DRY" = 1 ] || return 0
    echo "sum: $SIM s of estimated work + $MARGIN s margin, budget $BUDGET s ($PLANNED jobs run, $SKIPPED skipped)"
    [ "$SIM" -lt "$BUDGET" ] || { echo "gpu.sh: the plan does not fit its budget" >&2; exit 1; }
}
on_signal() { echo "gpu.sh: stopped by a signal at $(now) s"; jl kind=meta stopped_at_s="$(now)"; exit 143; }

# ---- the plan ---------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
    echo "plan ($([ "$SANITIZE" = 1 ] && echo sanitize || { [ "$QUICK" = 1 ] && echo quick; } || echo full)): budget $BUDGET s, jobs end $MARGIN s before it"
else
    trap on_exit EXIT
    trap on_signal TERM INT
    jl kind=meta script=bench/gpu.sh args="$ARGS" quick="$QUICK" sanitize="$SANITIZE" budget_s="$BUDGET" margin_s="$MARGIN" \
        models="$MODELS" depths="$DEPTHS" long_depth="$LONG_DEPTH" hbm_ratio="$HBM_RATIO" ngen="$NGEN" reps="$REPS" \
        prefill="$PREFILL" threads="$THREADS" backend_flag="$BACKEND_FLAG" staged_flag="$STAGED_FLAG" split_flag="$SPLIT_FLAG" \
        depth_flag="$DEPTH_FLAG" tokshape="$TOKSHAPE" toktype="$TOKTYPE" toklayers="$TOKLAYERS" greedy="$GREEDY" \
        greedy_s="$GREEDY_S" ops_depths="$OPS_DEPTHS" bin_dir="$BIN_DIR" hbm_bps_set="$HBM_BPS" \
        expect_commit="${EXPECT_COMMIT:-}" tierkv_env="$(tierkv_env)"
fi
step "preflight" 5 preflight
# the binaries carried packed (scripts/gpu-carry.sh: the tree and two unstripped binaries exceed what
# travels to the machine): unpacked where one is missing or older than the archive (-m: they are
# then newer than it, so the next run leaves them)
CARRY=$BIN_DIR/carry.tar.xz
unpack_carry() { # tar with the xz program, else Python's lzma (an image may lack xz)
    tar -xJmf "$CARRY" -C "$BIN_DIR" tierkv tierkv-tests 2>/dev/null && return 0
    python3 - "$CARRY" "$BIN_DIR" <<'PY'
import os, sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    for n in ("tierkv", "tierkv-tests"):
        try:
            t.extract(n, sys.argv[2], filter="data")
        except TypeError:  # a Python without extraction filters
            t.extract(n, sys.argv[2])
        os.utime(os.path.join(sys.argv[2], n))  # newer than the archive, as tar -m leaves them
PY
}
if [ -f "$CARRY" ] && { [ ! -x "$BIN" ] || [ ! -x "$TBIN" ] || [ "$CARRY" -nt "$BIN" ] || [ "$CARRY" -nt "$TBIN" ]; }; then
    if unpack_carry; then echo "binaries unpacked from $CARRY"
    else echo "cannot unpack $CARRY: the binaries there are used, or built"; fi
    [ "$DRY" = 0 ] && jl kind=meta carry="$CARRY" unpacked="$([ -x "$BIN" ] && [ -x "$TBIN" ] && echo yes || echo no)"
fi
# a prebuilt binary counts only when its stamp is the tree's (stamp_check); a stale one is rebuilt
STALE=
if runnable && ! stamp_check; then
    STALE="the prebuilt $BIN is stale: $STAMP"
    echo "$STALE: rebuilding"
    jl kind=binary how="stale prebuilt (not used)" commit_binary="$STAMP_BIN" commit_tree="$STAMP_TREE" stamp="$STAMP"
fi
if [ "$DRY" = 1 ]; then
    if [ -z "$STALE" ] && runnable; then BINARY="prebuilt"; BEST=3; else BINARY="build${STALE:+ (stale prebuilt)}"; BEST=$BUILD_S; fi
    step "binary: $BINARY ($BIN_DIR)" "$BEST" true
elif [ -z "$STALE" ] && runnable; then
    BINARY="prebuilt $BIN"
    step "binary: prebuilt" 3 binary_note
else
    BINARY="built here: make ${BUILD_ARGS[*]}${STALE:+ (the prebuilt one was stale)}"
    if step "binary: build (make ${BUILD_ARGS[*]})" "$BUILD_S" build; then binary_note; else
        echo "no runnable binary of this tree${STALE:+ ($STALE)}: nothing more to do"
        jl kind=binary how="none: the build failed" refused="${STALE:-no runnable prebuilt binary}"
        exit 1
    fi
fi
if [ "$SANITIZE" = 1 ]; then sanitize_plan; dry_sum; exit 0; fi
step "CUDA op checks (tierkv-tests cuda)" 20 op_checks
if [ -n "$OPS_NOGPU" ]; then # no GPU under the engine: nothing after this would measure it
    case " $BACKEND_FLAG " in
    *cuda*)
        echo "gpu.sh: the op checks did not reach the GPU ($OPS_NOGPU): the plan stops before writing any model file"
        skip "the rest of the plan" 0 "the op checks did not reach the GPU: $OPS_NOGPU"
        exit 1 ;;
    *) echo "the backend is not cuda ($BACKEND_FLAG): the skipped GPU tests do not stop the plan" ;;
    esac
fi
[ "$QUICK" = 0 ] && step "HBM and PCIe bandwidth (torch copies)" 20 hbm_probe
model_gb "$TOKSHAPE" "$TOKTYPE" "$TOKLAYERS" || { echo "gpu.sh: unknown TOKSHAPE $TOKSHAPE" >&2; exit 2; }
TOKGB=$GB
pick_model_dir
TOKMODEL=$MODEL_DIR/tok.gguf
# gen-random, then four `logits` runs: open and load, 32 prompt tokens, GREEDY steps (a weight pass each)
TOK_EST=$(($(gen_est "$TOKGB") + $(int "$(calc "8 * $SAFETY * ($PROC_S + $TOKGB * $LOAD_S_PER_GB + ($GREEDY + 4) * $TOKGB * 1e9 / ($HBM_EST * $MM_EFF)) + 3")")))
TOKDONE=0
step "token check ($TOKSHAPE ${TOKLAYERS} layers, $(printf '%.1f' "$TOKGB") GB; full/direct/staged/split/lossy)" "$TOK_EST" tok_check && TOKDONE=1
[ "$QUICK" = 0 ] && [ "$TOKDONE" = 1 ] && step "profile (TIERKV_CUDA_PROFILE=1; full at 2048, staged at 8192)" 25 profile
if [ "$QUICK" = 1 ]; then
    MNAME="$TOKSHAPE/${TOKLAYERS}L $TOKTYPE" MGB=$TOKGB MODEL=$TOKMODEL MWBYTES=$(calc "$TOKGB * 1e9")
    MODEL_OK=$TOKDONE
    bench_job "$MNAME full" full "${DEPTHS%% *}" 0 "$NGEN" -- --policy full
else
    [ "$DRY" = 0 ] && rm -f "$TOKMODEL"
    if [ "$DRY" = 1 ] || "$BIN" --help 2>&1 | grep -q bench-ops; then
        step "bench-ops (kernel microbenchmark)" 25 bench_ops
    else
        skip "bench-ops" 0 "skipped: no bench-ops in this build"
    fi
    for phase in 1 2; do
        i=0
        for mt in $MODELS; do
            i=$((i + 1))
            "model_phase$phase" "${mt%%:*}" "${mt##*:}" "$([ "$i" = 1 ] && echo 1 || echo 0)"
        done
    done
fi
[ "$DRY" = 0 ] && rm -f "$TOKMODEL"
if [ "$QUICK" = 0 ]; then
    step "Qwen3 dense and MoE references on the GPU (F16 test shapes)" 10 qwen3_refs
    step "MoE decode and prefill: experts routed on the host and on the device (${MOE_LAYERS} layers)" 90 moe_routes
    if [ "$DRY" = 1 ] || "$BIN" --help 2>&1 | grep -q bench-ops; then
        step "bench-ops 512 tokens (GEMMs: cuBLAS, and the kernels)" 40 bench_ops_gemm
    fi
fi
dry_sum
exit 0
