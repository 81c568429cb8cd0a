#!/usr/bin/env bash
# bench/lm-eval.sh — a client nobody here wrote: EleutherAI's lm-evaluation-harness (PyPI `lm-eval`,
# installed with PyTorch into its own virtual environment) against `tierkv serve`, on tasks defined
# over the local data files (nothing downloaded but the packages). Run by hand, not in CI.
#
# - gsm8k_tierkv (generate_until, `local-chat-completions`): the first N GSM8K test problems with
#   `tierkv eval`'s own prompt (the question and Qwen's "reason step by step ... \boxed{}" line, the
#   template's default system prompt added by the server), greedy, MAX_TOKENS at most; lm-eval grades
#   with its own filters (the \boxed{} content; gsm8k.yaml's flexible last number) and exact match.
#   `tierkv eval` then runs the same problems with the same model and limits, and the script prints
#   both scores, how many of the N answers are the same text, and which problems the graders judge
#   differently.
# - arc_tierkv (multiple_choice, `local-completions`): the first N ARC-Challenge test questions in
#   lm-eval's arc_challenge form ("Question: ...\nAnswer:" and each choice's log-likelihood): the
#   server's `echo` + `logprobs` over token ids from a Hugging Face tokenizer built from the GGUF's
#   own vocabulary (transformers' GGUF reader; no download). Prints acc and acc_norm, then recomputes
#   the first CHECK questions' log-likelihoods from `tierkv logits` on the same ids and prints the
#   largest difference from what lm-eval read over HTTP.
#
#   bench/lm-eval.sh                       # 20 + 20 problems, the 1.5B: ~15 minutes on 2 cores
#   N=5 MAX_TOKENS=256 TASKS=arc bench/lm-eval.sh
#
# lm-eval 0.4.9 reads transformers.AutoModelForVision2Seq, which transformers 5 removed: transformers<5.
# Optional: MODEL (the cached 1.5B Qwen2.5-Coder), N (20), MAX_TOKENS (512), PARALLEL (4: server slots
#   and lm-eval's concurrent requests), THREADS (2), PORT (8093), TASKS ("gsm8k arc"), CHECK (3),
#   BIN (build/tierkv), GSM8K, ARC (the ../shared/data files), VENV (bench/out/lm-eval-venv: created and
#   filled on the first run, ~6 GB with PyTorch), LM_EVAL (0.4.9: the version pip installs),
#   OUT (bench/out/lm-eval: tasks, tokenizer, lm-eval's outputs and samples, tierkv eval's results).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${BIN:-build/tierkv}
MODEL=${MODEL:-$HOME/.cache/tierkv/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
N=${N:-20}; MAX_TOKENS=${MAX_TOKENS:-512}; PARALLEL=${PARALLEL:-4}; THREADS=${THREADS:-2}; PORT=${PORT:-8093}
TASKS=${TASKS:-gsm8k arc}; CHECK=${CHECK:-3}; LM_EVAL=${LM_EVAL:-0.4.9}
GSM8K=${GSM8K:-../shared/data/gsm8k_test.jsonl}; ARC=${ARC:-../shared/data/arc_challenge_test.jsonl}
VENV=${VENV:-bench/out/lm-eval-venv}; OUT=${OUT:-bench/out/lm-eval}
for v in N MAX_TOKENS PARALLEL THREADS PORT CHECK; do
    case "${!v}" in '' | *[!0-9]*) echo "lm-eval.sh: $v must be a non-negative integer, not '${!v}'" >&2; exit 2 ;; esac
done
for t in $TASKS; do case "$t" in gsm8k | arc) ;; *) echo "lm-eval.sh: unknown task '$t' (gsm8k, arc)" >&2; exit 2 ;; esac; done
for f in "$BIN" "$MODEL"; do [ -e "$f" ] || { echo "lm-eval.sh: $f not found" >&2; exit 2; }; done
for t in $TASKS; do
    d=$GSM8K; [ "$t" = arc ] && d=$ARC
    [ -r "$d" ] || { echo "lm-eval.sh: cannot read $d" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "lm-eval.sh: needs curl" >&2; exit 2; }
mkdir -p "$OUT/tasks"
OUT=$(cd "$OUT" && pwd)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OPENAI_API_KEY=none

# ---- lm-eval in its own environment ----
if ! "$VENV/bin/python" -c "import lm_eval, gguf, transformers" 2>/dev/null; then
    echo "lm-eval.sh: installing lm-eval $LM_EVAL (and PyTorch) into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "lm-eval[api]==$LM_EVAL" "transformers<5" gguf
fi
PY="$VENV/bin/python"
echo "# lm-eval $("$PY" -c 'import importlib.metadata as m; print(m.version("lm_eval"))'), $(basename "$MODEL"), $("$BIN" --version | paste -sd ';' -)"
echo "# N=$N MAX_TOKENS=$MAX_TOKENS PARALLEL=$PARALLEL THREADS=$THREADS TASKS=\"$TASKS\""

# ---- the tokenizer lm-eval counts with: the GGUF's own vocabulary ----
if [ ! -f "$OUT/tokenizer/tokenizer.json" ]; then
    "$PY" - "$MODEL" "$OUT/tokenizer" <<'PY' 2>&1 | grep -v -i warn || true
import os, sys
from transformers import AutoTokenizer
path, out = sys.argv[1], sys.argv[2]
AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path)).save_pretrained(out)
PY
    [ -f "$OUT/tokenizer/tokenizer.json" ] || { echo "lm-eval.sh: no tokenizer could be built from $MODEL" >&2; exit 1; }
fi

# ---- the tasks, over the local files ----
cat >"$OUT/tasks/gsm8k_tierkv.yaml" <<EOF
task: gsm8k_tierkv
dataset_path: json
dataset_kwargs:
  data_files:
    test: $(realpath "$GSM8K")
test_split: test
output_type: generate_until
doc_to_text: "{{question}}\nPlease reason step by step, and put your final answer within \\\\boxed{}."
doc_to_target: "{{answer}}"
generation_kwargs:
  until: []
  do_sample: false
  temperature: 0
  max_gen_toks: $MAX_TOKENS
filter_list:
  - name: boxed
    filter:
      - function: regex
        regex_pattern: "\\\\\\\\boxed\\\\{([^{}]*)\\\\}"
        group_select: -1
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        regex_pattern: "(-?[\$0-9.,]{2,})|(-?[0-9]+)"
        group_select: -1
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\\$", "(?s).*#### ", "\\\\.\$", "\\\\\\\\text\\\\{[^}]*\\\\}", " "]
metadata:
  version: 1.0
EOF
cat >"$OUT/tasks/arc_tierkv.yaml" <<EOF
task: arc_tierkv
dataset_path: json
dataset_kwargs:
  data_files:
    test: $(realpath "$ARC")
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\nAnswer:"
doc_to_choice: "{{choices.text}}"
doc_to_target: "{{answer_index}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
EOF

# ---- the server ----
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
"$BIN" serve -m "$MODEL" --port "$PORT" --parallel "$PARALLEL" -t "$THREADS" --name tierkv >"$OUT/server.log" 2>&1 &
SPID=$!
server_up "$PORT" "$SPID" || { echo "lm-eval.sh: the server did not come up:" >&2; tail -5 "$OUT/server.log" >&2; exit 1; }

run_lm_eval() { # TASK MODEL_TYPE MODEL_ARGS [more lm_eval flags]
    local task=$1 mt=$2 ma=$3
    shift 3
    local t0=$(date +%s)
    "$PY" -m lm_eval --model "$mt" --model_args "$ma" --tasks "$task" --include_path "$OUT/tasks" --limit "$N" \
        --output_path "$OUT/results" --log_samples "$@" >"$OUT/$task.log" 2>&1 ||
        { echo "lm-eval.sh: lm_eval $task failed:" >&2; tail -20 "$OUT/$task.log" >&2; exit 1; }
    echo "== lm-eval $task ($mt): $(($(date +%s) - t0)) s"
    grep -E "^\|" "$OUT/$task.log" || true
}
rm -rf "$OUT/results"
for t in $TASKS; do
    if [ "$t" = gsm8k ]; then
        run_lm_eval gsm8k_tierkv local-chat-completions \
            "model=tierkv,base_url=http://127.0.0.1:$PORT/v1/chat/completions,num_concurrent=$PARALLEL,max_retries=1,timeout=3600" \
            --apply_chat_template
    else
        run_lm_eval arc_tierkv local-completions \
            "model=tierkv,base_url=http://127.0.0.1:$PORT/v1/completions,tokenizer_backend=huggingface,tokenizer=$OUT/tokenizer,num_concurrent=$PARALLEL,max_retries=1,timeout=3600"
    fi
done
kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null || true
SPID=

# ---- tierkv's own harness and the log-likelihoods, beside lm-eval's ----
case " $TASKS " in *" gsm8k "*)
    rm -f "$OUT/tierkv-gsm8k.jsonl"
    t0=$(date +%s)
    "$BIN" eval -m "$MODEL" --task gsm8k --data "$GSM8K" --n "$N" --max-tokens "$MAX_TOKENS" --parallel "$PARALLEL" \
        -t "$THREADS" --out "$OUT/tierkv-gsm8k.jsonl" --summary-json "$OUT/tierkv-gsm8k.summary.json" --quiet >/dev/null
    echo "== tierkv eval gsm8k: $(($(date +%s) - t0)) s" ;;
esac
"$PY" - "$OUT" "$BIN" "$MODEL" "$CHECK" "$THREADS" $TASKS <<'PY'
import glob, json, math, os, subprocess, sys, tempfile
out, binp, model, check, threads, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:]

def samples(task):
    f = sorted(glob.glob(os.path.join(out, "results", "**", "samples_%s_*.jsonl" % task), recursive=True))
    return [json.loads(l) for l in open(f[-1])] if f else []

if "gsm8k" in tasks:
    gs = samples("gsm8k_tierkv")  # one line per problem and filter; the generated text is the same in each
    lm = {s["doc"]["id"]: s for s in gs}
    tk = {}
    for l in open(os.path.join(out, "tierkv-gsm8k.jsonl")):
        r = json.loads(l)
        if "id" in r:
            tk[r["id"]] = r
    ids = [i for i in lm if i in tk]
    def text(s):
        r = s["resps"][0]
        return r[0] if isinstance(r, list) else r
    same = sum(text(lm[i]) == (tk[i].get("output") or "") for i in ids)
    by_filter = {}
    for s in gs:
        by_filter.setdefault(s["filter"], []).append(s)
    print("gsm8k, %d problems graded by both:" % len(ids))
    for f, ss in sorted(by_filter.items()):
        print("  lm-eval %-17s exact_match %.3f (%d/%d)" % (f, sum(s["exact_match"] for s in ss) / len(ss),
                                                         sum(s["exact_match"] for s in ss), len(ss)))
    ok = sum(bool(tk[i].get("correct")) for i in ids)
    print("  tierkv eval             accuracy    %.3f (%d/%d)" % (ok / max(1, len(ids)), ok, len(ids)))
    print("  the same generated text: %d of %d" % (same, len(ids)))
    boxed_lm = {s["doc"]["id"]: s for s in by_filter.get("boxed", [])}
    for i in ids:
        if i in boxed_lm and bool(boxed_lm[i]["exact_match"]) != bool(tk[i].get("correct")):
            print("  graded differently: %s lm-eval %r -> %s, tierkv %r -> %s" % (
                i, boxed_lm[i]["filtered_resps"][0], boxed_lm[i]["exact_match"], tk[i].get("pred"), tk[i].get("correct")))

if "arc" in tasks:
    ss = samples("arc_tierkv")
    print("arc (log-likelihood, echo + logprobs), %d questions: acc %.3f, acc_norm %.3f" % (
        len(ss), sum(s["acc"] for s in ss) / max(1, len(ss)), sum(s["acc_norm"] for s in ss) / max(1, len(ss))))
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "tokenizer"))
    worst, n = 0.0, 0
    for s in ss[:check]:
        args = s["arguments"]  # {"gen_args_K": {"arg_0": context, "arg_1": continuation}}, in choice order
        for k, resp in enumerate(s["resps"]):
            ctx, cont = args["gen_args_%d" % k]["arg_0"], args["gen_args_%d" % k]["arg_1"]
            a = tok(ctx, add_special_tokens=False).input_ids
            b = tok(cont, add_special_tokens=False).input_ids
            ids = a + b
            with tempfile.TemporaryDirectory() as d:
                tf, of = os.path.join(d, "ids"), os.path.join(d, "rows.f32")
                open(tf, "w").write(" ".join(map(str, ids)) + "\n")
                subprocess.run([binp, "logits", "-m", model, "-t", threads, "--tokens", tf, "--first-pos", str(len(a) - 1),
                                "-o", of], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                import array
                rows = array.array("f")
                rows.frombytes(open(of, "rb").read())
            V = len(rows) // (len(ids) - len(a) + 1)
            ll = 0.0
            for k, t in enumerate(b):
                r = rows[k * V:(k + 1) * V]
                m = max(r)
                ll += r[t] - m - math.log(sum(math.exp(x - m) for x in r))
            got = float(resp[0][0])  # [[log-likelihood, is_greedy]], logged as strings
            worst = max(worst, abs(ll - got))
            n += 1
    print("  %d choices' log-likelihoods (first %d questions) against tierkv logits: max |difference| %.2e" % (n, check, worst))
PY
