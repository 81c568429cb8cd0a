#!/usr/bin/env bash
# gpu-carry.sh — makes this checkout ready to send to a lent GPU machine for bench/gpu.sh:
#   1. builds the CUDA binaries without the server (`make cuda SERVE=0`, into build-cuda/);
#   2. packs build-cuda/tierkv and build-cuda/tierkv-tests into build-cuda/carry.tar.xz (xz: about a
#      quarter of their size, debug information kept for compute-sanitizer's lines), the one path to
#      carry: gpu.sh unpacks it there;
#   3. copies the fixture the graph check reads (fixtures/models/qwen2-Q4_K_M.gguf, from TIERKV_SHARED
#      or ../shared) into shared/ inside the checkout (ignored by git), which travels with the tree;
#   4. adds up what travels (tracked files, untracked files git does not ignore, shared/ and the
#      archive) and fails when it is over the transfer limit (LIMIT_MIB, 64).
# Usage: bash scripts/gpu-carry.sh   (then run `bash bench/gpu.sh` there, carrying build-cuda/carry.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=${LIMIT_MIB:-64}
SHARED=${TIERKV_SHARED:-../shared}
FIXTURE=fixtures/models/qwen2-Q4_K_M.gguf

make -j"$(nproc)" cuda SERVE=0 >/tmp/gpu-carry-build.log 2>&1 || { tail -20 /tmp/gpu-carry-build.log; exit 1; }
tar -cf - -C build-cuda tierkv tierkv-tests | xz -T0 -6 >build-cuda/carry.tar.xz.tmp
mv build-cuda/carry.tar.xz.tmp build-cuda/carry.tar.xz
echo "packed: build-cuda/carry.tar.xz ($(du -k build-cuda/carry.tar.xz | cut -f1) KiB): $(build-cuda/tierkv --version | paste -sd ';' -)"

if [ -f "$SHARED/$FIXTURE" ]; then
    mkdir -p "shared/$(dirname "$FIXTURE")"
    cp -f "$SHARED/$FIXTURE" "shared/$FIXTURE"
    echo "fixture: shared/$FIXTURE (the graph check's model)"
else
    echo "fixture: $SHARED/$FIXTURE not found: the graph check will skip there (graphs unchecked)"
fi

# what travels: tracked files, untracked ones git does not ignore, shared/, and the archive
bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null |
    awk '{ s += $1 } END { print s + 0 }')
sh_bytes=$(find shared -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
ar_bytes=$(stat -c %s build-cuda/carry.tar.xz)
total=$((bytes + sh_bytes + ar_bytes))
awk -v t="$total" -v b="$bytes" -v s="$sh_bytes" -v a="$ar_bytes" -v l="$LIMIT_MIB" 'BEGIN {
    m = 1048576; printf "travels: %.1f MiB (tree %.1f, shared/ %.1f, archive %.1f) of %d MiB\n", t / m, b / m, s / m, a / m, l }'
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu-carry: over the limit: carry less (results/ is the largest tracked folder)" >&2
    exit 1
fi
echo "carry: build-cuda/carry.tar.xz; command: bash bench/gpu.sh (or --quick)"
