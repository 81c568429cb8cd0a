#!/bin/sh
# sources-hash.sh — prints a hash of what a build compiles: every file under src, include, tools and
# tests, and the Makefile, by name and bytes (build outputs and Python caches left out). The Makefile
# stamps it into the binaries (`tierkv --version`: "sources: ..."), and bench/gpu.sh computes it
# again on the GPU machine, whose copy of the tree has no .git, to tell a carried binary of this very
# tree from a stale one, uncommitted changes included.
cd "$(dirname "$0")/.." || exit 1
find src include tools tests Makefile -name __pycache__ -prune -o -type f ! -name '*.pyc' ! -name '*.o' ! -name '*.d' \
    ! -name '*.gguf' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
