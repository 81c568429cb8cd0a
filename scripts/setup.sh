#!/usr/bin/env bash
# setup.sh — installs what tierkv needs on a fresh Debian machine (compiler, make, unzip for the
# model wheels, pip, gnuplot for plots, clang for fuzzing, libmicrohttpd and jansson for
# `tierkv serve`). Only what is missing is installed. The tests of the server also use the official
# `openai` Python client, installed with pip when missing (for the tests only: the server never
# needs it).
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v make >/dev/null || need+=(make)
command -v unzip >/dev/null || need+=(unzip)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v clang >/dev/null || need+=(clang)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
[ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
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
