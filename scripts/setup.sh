#!/usr/bin/env bash
# setup.sh — installs what tierkv needs on a fresh Debian machine (compiler, make, unzip for the
# model wheels, pip, gnuplot for plots, clang and its libFuzzer runtime for fuzzing (clang++ also
# compiles the emulated GPU's code for the race check), valgrind for the memory check, libmicrohttpd,
# jansson and hiredis for `tierkv serve`, redis-server for the test of its shared park store). Only
# what is missing is installed. The tests of the server also use the official `openai` Python client
# and jsonschema, the chat template test jinja2, installed with pip when missing (for the tests only:
# tierkv never needs them).
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v make >/dev/null || need+=(make)
command -v unzip >/dev/null || need+=(unzip)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v clang >/dev/null || need+=(clang)
command -v valgrind >/dev/null || need+=(valgrind)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
[ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
[ -f /usr/include/hiredis/hiredis.h ] || need+=(libhiredis-dev)
command -v redis-server >/dev/null || need+=(redis-server) # the shared park store's test starts one on loopback
# libFuzzer ships apart from clang on Debian (libclang-rt-N-dev, N = clang's major version):
# probe it by linking an empty fuzz target
fuzz_links() {
  local d
  d=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$d/t.c"
  clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$d"
  return $rc
}
if command -v clang >/dev/null && ! fuzz_links; then
  need+=("libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev")
elif ! command -v clang >/dev/null; then
  need+=(libclang-rt-dev) # the runtime of the clang installed alongside
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${need[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  else
    echo "setup: please install: ${need[*]} (e.g. sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  echo "setup: installing the openai Python package (the server's tests use it)" >&2
  python3 -m pip install --quiet openai >&2 || echo "setup: pip install openai failed; the openai client test will skip" >&2
fi
if ! python3 -c 'import jsonschema' >/dev/null 2>&1; then
  echo "setup: installing the jsonschema Python package (the structured output test validates with it)" >&2
  python3 -m pip install --quiet jsonschema >&2 || echo "setup: pip install jsonschema failed; the structured output test will skip" >&2
fi
if ! python3 -c 'import jinja2' >/dev/null 2>&1; then
  echo "setup: installing the jinja2 Python package (the chat template test renders the files' own templates)" >&2
  python3 -m pip install --quiet jinja2 >&2 || echo "setup: pip install jinja2 failed; the tool template test will skip" >&2
fi
