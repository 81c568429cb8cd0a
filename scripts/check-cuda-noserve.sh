#!/usr/bin/env bash
# check-cuda-noserve.sh — CI: the GPU machine's build, `make cuda SERVE=0`, needs neither the
# server's headers nor its libraries (that machine has no libmicrohttpd or jansson). Builds from
# scratch into BUILD (default build-cuda-noserve) with a folder of poisoned headers first on the
# include path of cc and of nvcc's host compiler (microhttpd.h and jansson.h that are only an
# #error), then checks with ldd that tierkv and tierkv-tests link neither library and that
# `tierkv serve` says the build has no server. Any failure exits non-zero with the reason.
# Needs nvcc (PATH or CUDA_HOME: the Makefile finds it). Usage: scripts/check-cuda-noserve.sh
# Variables: BUILD (the build folder, removed first), JOBS (make -j, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda-noserve}
JOBS=${JOBS:-2}
fail() { echo "check-cuda-noserve: FAILED: $*" >&2; exit 1; }

poison=$(mktemp -d)
trap 'rm -rf "$poison"' EXIT
mkdir -p "$poison/hiredis"
for h in microhttpd.h jansson.h hiredis/hiredis.h; do
    printf '#error "%s reached in a SERVE=0 build: only src/serve and tests/test_serve.c may include it"\n' "$h" >"$poison/$h"
done

# The poison must win over /usr/include for both compilers, or the check proves nothing.
nvcc=$(make -s --no-print-directory CUDA=1 print-nvcc)
printf '#include <jansson.h>\n' >"$poison/probe.c"
cp "$poison/probe.c" "$poison/probe.cu"
if "${CC:-cc}" -I"$poison" -fsyntax-only "$poison/probe.c" 2>/dev/null; then fail "cc does not see the poisoned jansson.h first"; fi
if "$nvcc" -I"$poison" -c "$poison/probe.cu" -o "$poison/probe.o" 2>/dev/null; then fail "nvcc does not see the poisoned jansson.h first"; fi
rm -f "$poison/probe."*

rm -rf "$BUILD"
make -j"$JOBS" cuda SERVE=0 BUILD="$BUILD" EXTRA_INC="-I$poison" || fail "make cuda SERVE=0 did not build (see above)"
for b in tierkv tierkv-tests; do
    [ -x "$BUILD/$b" ] || fail "$BUILD/$b was not built"
    libs=$(ldd "$BUILD/$b") || fail "ldd $BUILD/$b"
    if grep -Ei 'microhttpd|jansson|hiredis' <<<"$libs"; then fail "$BUILD/$b links the server's libraries"; fi
done
set +e
msg=$("$BUILD/tierkv" serve 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "built with SERVE=0" <<<"$msg" || fail "tierkv serve: exit $rc, '$msg' (want 2 and the SERVE=0 message)"
echo "check-cuda-noserve: ok ($BUILD: no server headers, no libmicrohttpd, jansson or hiredis; serve refuses with exit 2)"
