#!/usr/bin/env bash
# make-qwen3-refs.sh IK_DIR [OUT_DIR] — the reference logits of the qwen3 and qwen3moe fixtures
# (tests/fixtures/qwen3/, read by tests/test_qwen3.c), computed by ik_llama.cpp.
#
# IK_DIR: a checkout of github:ikawrakow/ik_llama.cpp built outside this repository for the CPU
# (cmake -S IK_DIR -B IK_DIR/build -DLLAMA_CURL=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF -DBUILD_SHARED_LIBS=ON,
# then `cmake --build IK_DIR/build --target llama`); its sources are in IK_DIR or IK_DIR/src.
# OUT_DIR: where the references go (default tests/fixtures/qwen3). Needs build/tierkv (make). IK_COMMIT:
# the commit IK_DIR was built from, recorded in the JSON (default: asked of git in IK_DIR).
#
# The models are not stored: each is made by `tierkv gen-random` with a fixed seed (random weights,
# the test shapes test-qwen3 and test-qwen3moe, types F16, Q8_0 and Q4_K_M) and the test makes it
# again; the JSON records the command and the file's FNV-1a 64 hash, so a test run on a file that
# differs from the one the references were made for fails instead of comparing the wrong things.
# For each model two sequences (ref_logits.c: random prompt ids from a seed): `short`, a 64-token
# prompt with logits at every position then 16 greedy steps; `long`, 512 tokens with logits at the
# last 16 positions then 16 greedy steps. One thread, f16 KV cache, no flash attention.
set -euo pipefail
cd "$(dirname "$0")/../.."
ik=${1:?usage: tests/reference/make-qwen3-refs.sh IK_DIR [OUT_DIR]}
out=${2:-tests/fixtures/qwen3}
src=$ik; [ -f "$src/include/llama.h" ] || src=$ik/src
[ -f "$src/include/llama.h" ] || { echo "make-qwen3-refs: no include/llama.h under $ik" >&2; exit 1; }
lib=$ik/build
[ -e "$lib/src/libllama.so" ] || { echo "make-qwen3-refs: $lib/src/libllama.so missing (build IK_DIR first)" >&2; exit 1; }
[ -x build/tierkv ] || { echo "make-qwen3-refs: build/tierkv missing (run make)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O1 -std=c11 -Wall -Wextra -I"$src/include" -I"$src/ggml/include" tests/reference/ref_logits.c -o "$tmp/ref_logits" \
    -L"$lib/src" -L"$lib/ggml/src" -lllama -lggml -Wl,-rpath,"$lib/src:$lib/ggml/src"
commit=${IK_COMMIT:-$( (git -C "$ik" rev-parse HEAD 2>/dev/null || git -C "$src" rev-parse HEAD 2>/dev/null) || echo unknown)}
mkdir -p "$out"
seed=7
for shape in test-qwen3 test-qwen3moe; do
    for type in F16 Q8_0 Q4_K_M; do
        name=$shape-$type
        gen="gen-random --shape $shape --type $type --seed $seed"
        # shellcheck disable=SC2086
        build/tierkv $gen -o "$tmp/$name.gguf" >/dev/null
        "$tmp/ref_logits" "$tmp/$name.gguf" "$out/$name.short" 64 0 16 11 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
        "$tmp/ref_logits" "$tmp/$name.gguf" "$out/$name.long" 512 496 16 12 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
        for seq in short long; do
            python3 - "$out/$name.$seq.json" "$tmp/$name.gguf" "$gen" "$commit" <<'PY'
import json, sys
path, model, gen, commit = sys.argv[1:5]
h = 0xcbf29ce484222325
for b in open(model, "rb").read():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
d = json.load(open(path))
d.update({"gen": gen, "model_fnv1a64": "%016x" % h, "reference": "ik_llama.cpp " + commit})
with open(path, "w") as f:
    json.dump(d, f, separators=(", ", ": "))
    f.write("\n")
PY
        done
        echo "$name: done"
    done
done
