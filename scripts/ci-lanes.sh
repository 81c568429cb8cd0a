#!/usr/bin/env bash
# ci-lanes.sh: CI's runs that keep one core busy each, in two lanes at once where the machine has two
# cores or more: the GPU tests on the CPU against the emulated device (docs/CUDA.md: the emulation
# runs a kernel's threads as fibers of one host thread), the libFuzzer targets' short run and
# memcheck; beside them the builds of the sanitizer suites CI runs next. Lane a: the plain emulated
# build, then AddressSanitizer's, scripts/valgrind.sh and `make fuzz-smoke`; lane b:
# ThreadSanitizer's emulated build, then `make asan-ubsan-build` and `make tsan-build` (in CI the
# lanes end within a minute or two of each other). The lanes share nothing but the sources (each
# build has its own folder; valgrind.sh runs build/tierkv, which `make` built before).
# Each lane's lines come prefixed with its name, each run's wall time and exit status follow it
# ("ci: N s: ..."), and the script fails when any run failed, once both lanes have ended (a lane
# stops at its first failure).
#   scripts/ci-lanes.sh            # as CI runs it (after make; SHARED as make's)
#   LANES=1 scripts/ci-lanes.sh    # one lane after the other (the default on a single core)
# The emulated runs: the kernel, copy, split and ordering tests in the emulation's orders 1 and 2r
# plain and order 0 under ASan (which checks what the plain order 0 would, and memory); the reference
# logits test (the model's arithmetic; its MoE kernels' ordering is cuda_moe_decode's) in order 0;
# ThreadSanitizer's list after its race check (the whole-engine tests take over an hour there), and
# cuda_matmul_sel_tiles in a process of its own (after the others ThreadSanitizer runs it twice as
# slowly).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LANES=${LANES:-$(nproc 2>/dev/null || echo 1)}

step() {
    local t0=$SECONDS rc=0
    "$@" || rc=$?
    echo "ci: $((SECONDS - t0)) s: $* (exit $rc)"
    return "$rc"
}
# the emulated runs need the CUDA toolkit's headers and nvcc (for its version): the nvcc make finds
if [ -x "$(make -s --no-print-directory CUDA=1 print-nvcc)" ]; then
    emu=step
else
    emu=no_nvcc
fi
no_nvcc() { echo "ci: no nvcc (CUDA toolkit): not run: $*"; }

lane_a() {
    $emu make -j2 cuda-emu-test EMU_MODES="1 2r" EMU_TESTS="cuda split gpu_order" &&
        $emu make -j2 cuda-emu-test EMU_MODES=0 EMU_TESTS=qwen3_reference_logits_gpu &&
        $emu make -j2 cuda-emu-test EMU_ASAN=1 EMU_MODES=0 EMU_TESTS="cuda split gpu_order" &&
        step env TIERKV_SHARED="${SHARED:-../shared}" scripts/valgrind.sh &&
        step make -j2 fuzz-smoke
}
tsan_tests="cuda_attention cuda_combine cuda_copy cuda_dense cuda_embed cuda_expand cuda_gemm cuda_gemv"
tsan_tests+=" cuda_graph_env cuda_host cuda_kv =cuda_matmul cuda_matmul_forced cuda_prof cuda_route cuda_score split gpu_order"
lane_b() {
    $emu make -j2 cuda-emu-test EMU_TSAN=1 EMU_MODES=0 EMU_TESTS="$tsan_tests" &&
        $emu make -j2 cuda-emu-test EMU_TSAN=1 EMU_MODES=0 EMU_TESTS=cuda_matmul_sel_tiles &&
        step make -j2 asan-ubsan-build &&
        step make -j2 tsan-build
}
# a lane with its lines prefixed; its status goes to a file (the pipe's would be sed's)
prefixed() {
    local name=$1
    ( "lane_$name" 2>&1; echo $? >"$tmp/$name.rc" ) | sed -u "s/^/lane-$name: /"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$LANES" -ge 2 ]; then
    prefixed a &
    prefixed b
    wait
else
    prefixed a
    prefixed b
fi
rc=0
for name in a b; do
    r=$(cat "$tmp/$name.rc" 2>/dev/null || echo 1)
    [ "$r" = 0 ] || { echo "ci-lanes: lane $name failed (exit $r)" >&2; rc=1; }
done
exit $rc
