#!/usr/bin/env python3
"""gpu_targets.py: issue 46's targets, read off a bench/gpu.sh run's gpu.jsonl.

usage: python3 bench/gpu_targets.py GPU.jsonl [--baseline GPU.jsonl] [--json | --append-json FILE]

--json prints the verdicts as JSON lines (kind=target); --append-json prints the text and appends those
lines to FILE (gpu.sh: to the run's own gpu.jsonl, after reading it).

Each target says "met", "not met" or "not measured" (with why), and the rows it read:
  decode BF16   `full` at batch 1, every depth measured, at least 70% of the HBM bound (bytes per
                token / the run's measured copy bandwidth: gpu.sh's hbm_bound_pct)
  decode Q8_0   the same, at least 60% (`full/graphs` rows are listed, not counted: graphs are off
                by default)
  prefill 2K    the run's prefill of PREFILL=2048 tokens (mode `prefill`: the backend's own chunk)
                at least 10x the baseline run's pp2048 of the same weight type ("today's" when the
                issue was filed: the first device run, results/bench/gpu-h200-49b5671 for BF16 and
                gpu-h200-q8-49b5671 for Q8_0, unless --baseline names another run)
  T0 50% at 8K  a hierarchy mode (staged, direct or split) at depth 8192 with T0 at 50% within 7% of
                `full`'s tok/s at 8192 on the same weights, with its copy wait under 5% of the step
  split vs staged  both at 8192 and 32768, side by side; met when split is ahead at 32768
Rows of the 7B (r1-distill-qwen-7b) only: the token check's 2-layer file is not the issue's model.
The run's T0 share is gpu.sh's HBM_RATIO (its first meta line); a run at another share measures
none of the hierarchy targets. Every target that has rows prints them, met or not."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINES = [os.path.join(ROOT, "results/bench/gpu-h200-49b5671/gpu.jsonl"),
             os.path.join(ROOT, "results/bench/gpu-h200-q8-49b5671/gpu.jsonl")]
HIER_MODES = ("staged", "direct", "split")


def records(path):
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a run stopped mid-write
    return out


def rows_of(recs):
    return [r for r in recs if r.get("kind") == "result" and "test" in r and r.get("tok_s") is not None
            and r.get("model", "").split(" ")[0] == "r1-distill-qwen-7b"]


def wtype(r):
    return r.get("model", "").split(" ")[-1]


def run_meta(recs):
    return next((r for r in recs if r.get("kind") == "meta" and "script" in r), {})


def gpu_of(recs):
    """the GPU's name a run's preflight recorded (nvidia-smi's first field), or None"""
    g = next((r.get("gpu") for r in recs if r.get("kind") == "preflight"), None)
    return g.split(",")[0].strip() if g and g != "none" else None


def fmt_row(r, extra=""):
    s = f'{r.get("model")} {r.get("mode")} {r.get("test")} d={r.get("depth")}: {r["tok_s"]:.1f} tok/s'
    if r.get("hbm_bound_pct") is not None:
        s += f', {r["hbm_bound_pct"]:.1f}% of the HBM bound'
    if r.get("wait_pct") is not None:
        s += f', wait {r["wait_pct"]:.1f}%'
    if r.get("rc"):
        s += f' (rc {r["rc"]})'
    return s + extra


def target(name, need, verdict, why, rows):
    return {"target": name, "need": need, "verdict": verdict, "why": why, "rows": rows}


def decode_target(rows, wt, pct):
    name, need = f"decode {wt}", f"`full` at batch 1, at least {pct}% of the HBM bound at every depth"
    rs = [r for r in rows if wtype(r) == wt and r.get("mode") == "full" and r.get("test", "").startswith("tg")
          and r.get("hbm_bound_pct") is not None]
    if not rs:
        return target(name, need, "not measured", f"no `full` decode row of {wt} with an HBM bound", [])
    low = min(r["hbm_bound_pct"] for r in rs)
    ok = low >= pct and all(not r.get("rc") for r in rs)
    why = f"lowest {low:.1f}%" + ("" if all(not r.get("rc") for r in rs) else ", a job stopped early")
    graphs = [fmt_row(r, " (graphs: listed, not counted)") for r in rows
              if wtype(r) == wt and r.get("mode") == "full/graphs" and r.get("hbm_bound_pct") is not None]
    return target(name, need, "met" if ok else "not met", why, [fmt_row(r) for r in rs] + graphs)


def prefill_target(rows, base_rows, wt, gpu=None):
    name, need = f"prefill 2K {wt}", "pp2048 at least 10x the baseline run's"
    rs = [r for r in rows if wtype(r) == wt and r.get("mode") == "prefill" and r.get("test") == "pp2048"]
    bs = [r for r in base_rows if wtype(r) == wt and r.get("mode") == "prefill" and r.get("test") == "pp2048"]
    if not rs:
        return target(name, need, "not measured", f"no pp2048 row of {wt} (mode prefill)", [])
    if not bs:
        return target(name, need, "not measured", f"the baseline has no pp2048 row of {wt}", [fmt_row(r) for r in rs])
    b = bs[0]["tok_s"]
    best = max(r["tok_s"] for r in rs)
    ok = best >= 10 * b and all(not r.get("rc") for r in rs)
    other = bs[0].get("_gpu")
    note = f"; the baseline ran on {other}, this run on {gpu}" if other and gpu and other != gpu else ""
    return target(name, need, "met" if ok else "not met", f"{best / b:.2f}x the baseline's {b:.1f} tok/s{note}",
                  [fmt_row(r, f" ({r['tok_s'] / b:.2f}x)") for r in rs])


def tier_target(rows, ratio):
    name, need = "T0 50% at 8K", "a hierarchy mode within 7% of `full`'s tok/s at 8192, wait under 5%"
    if ratio != 0.5:
        return target(name, need, "not measured", f"the run's T0 share is {ratio}, not 0.5", [])
    seen = []  # (share of full's tok/s, met, line)
    for wt in dict.fromkeys(wtype(r) for r in rows):
        full = [r for r in rows if wtype(r) == wt and r.get("mode") == "full" and r.get("depth") == 8192]
        if not full:
            continue
        f = full[0]["tok_s"]
        for r in rows:
            if wtype(r) != wt or r.get("mode") not in HIER_MODES or r.get("depth") != 8192:
                continue
            rel = r["tok_s"] / f
            good = rel >= 0.93 and r.get("wait_pct") is not None and r["wait_pct"] < 5 and not r.get("rc")
            seen.append((rel, good, fmt_row(r, f" = {100 * rel:.1f}% of full's {f:.1f}")))
    if not seen:
        return target(name, need, "not measured", "no hierarchy row at 8192 beside a `full` one", [])
    met = [s for s in seen if s[1]]
    best = max(met or seen, key=lambda s: s[0])
    return target(name, need, "met" if met else "not met", "best: " + best[2], [s[2] for s in seen])


def split_target(rows, ratio):
    name, need = "split vs staged", "both at 8192 and 32768; split ahead at 32768"
    if ratio != 0.5:
        return target(name, need, "not measured", f"the run's T0 share is {ratio}, not 0.5", [])
    pick = {}
    for r in rows:
        if r.get("mode") in ("staged", "split") and r.get("depth") in (8192, 32768):
            pick.setdefault((wtype(r), r["depth"], r["mode"]), r)
    lines = [fmt_row(pick[k]) for k in sorted(pick)]
    long = [wt for (wt, d, m) in pick if d == 32768 and m == "split" and (wt, d, "staged") in pick]
    if not long:
        return target(name, need, "not measured", "no staged and split pair at 32768 on one weight type", lines)
    ahead = [wt for wt in long if pick[(wt, 32768, "split")]["tok_s"] > pick[(wt, 32768, "staged")]["tok_s"]
             and not pick[(wt, 32768, "split")].get("rc")]
    why = "; ".join(f'{wt}: split {pick[(wt, 32768, "split")]["tok_s"]:.1f}, '
                    f'staged {pick[(wt, 32768, "staged")]["tok_s"]:.1f} tok/s' for wt in long)
    return target(name, need, "met" if ahead else "not met", why, lines)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    as_json = "--json" in argv
    opt = {}
    for name in ("--baseline", "--append-json"):
        if name in argv:
            i = argv.index(name)
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                print(f"gpu_targets: {name} needs a file", file=sys.stderr)
                return 2
            opt[name] = argv[i + 1]
            args.remove(argv[i + 1])
    base_paths = [opt["--baseline"]] if "--baseline" in opt else BASELINES
    if len(args) != 1:
        print(__doc__.split("\n\n")[1].splitlines()[0], file=sys.stderr)
        return 2
    try:
        recs = records(args[0])
        base = []
        for p in base_paths:
            brecs = records(p)
            base += [dict(r, _gpu=gpu_of(brecs)) for r in rows_of(brecs)]
    except OSError as e:
        print(f"gpu_targets: {e}", file=sys.stderr)
        return 2
    rows = [r for r in rows_of(recs)]
    ratio = run_meta(recs).get("hbm_ratio", 0.5)
    gpu = gpu_of(recs)
    ts = [decode_target(rows, "BF16", 70), decode_target(rows, "Q8_0", 60), prefill_target(rows, base, "BF16", gpu),
          prefill_target(rows, base, "Q8_0", gpu), tier_target(rows, ratio), split_target(rows, ratio)]
    lines = [json.dumps(dict(kind="target", **t)) for t in ts]
    if as_json:
        print("\n".join(lines))
        return 0
    if "--append-json" in opt:
        try:
            with open(opt["--append-json"], "a") as f:
                f.write("".join(l + "\n" for l in lines))
        except OSError as e:
            print(f"gpu_targets: {e}", file=sys.stderr)
            return 2
    print("issue 46's targets (bench/gpu_targets.py):")
    for t in ts:
        print(f'  {t["target"]}: {t["verdict"].upper()} ({t["why"]}); needs {t["need"]}')
        for line in t["rows"]:
            print(f"      {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
