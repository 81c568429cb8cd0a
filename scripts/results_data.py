"""results_data.py — what scripts/results.py reads: the result files of `tierkv eval` and `tierkv sweep`
(per-problem JSONL lines, summaries, mcnemar.tsv), the statistics over them (exact McNemar on paired
ids, shares of the cache) and the two counts the tierkv binary adds (`verify`, `grade`).

It writes nothing and formats only single cells; the tables are in results_tables.py and
results.py. Standard library only.
"""
import glob
import json
import math
import os
import re
import subprocess
import sys

WHOLE_TOKEN = {"full", "hierarchy", "evict", "quant", "streaming"}  # drop a position from every row at once
BASELINES = ("h2o", "rkv", "snapkv", "streaming")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TIERKV = os.environ.get("TIERKV") or os.path.join(REPO, "build", "tierkv")


def no_paths(cmd):
    """Commands as recorded name absolute paths of the machine they ran on; keep only file names."""
    return re.sub(r"(?<![\w.])/[^\s'\"]*/([^/\s'\"]+)", r"\1", cmd)


def shown_dir(d):
    """A results directory relative to the repository when inside it, else just its name."""
    a = os.path.abspath(d)
    return os.path.relpath(a, REPO) if a.startswith(REPO + os.sep) else os.path.basename(a)


def fmt(x, spec):
    return "NA" if x is None else format(x, spec)


def pct(x):
    return "NA" if x is None else f"{100 * x:.1f}%"


_records = {}


def records(path):
    """The parsed lines of a results JSONL (unparsable lines skipped), or None when it cannot be
    read; read once per file."""
    if path not in _records:
        try:
            with open(path) as f:
                rs = []
                for line in f:
                    try:
                        rs.append(json.loads(line))
                    except ValueError:
                        continue
            _records[path] = rs
        except OSError:
            _records[path] = None
    return _records[path]


def jsonl_of(s):
    return s["_path"][: -len(".summary.json")] + ".jsonl"


def summary_records(s):
    """The lines of a configuration that its summary counted (its ids), first occurrence of each id."""
    want = set(s.get("ids") or [])
    seen, out = set(), []
    for r in records(jsonl_of(s)) or []:
        i = r.get("id")
        if (want and i not in want) or i in seen:
            continue
        seen.add(i)
        out.append(r)
    return out


def mean_dropped(s):
    """Mean positions dropped per (layer, kv head) row at the end of a problem: `evicted_equiv`
    where recorded; files written before it existed only have `tokens_evicted` (tokens no row
    holds), the same number for whole-token policies and an undercount for the per-head baselines
    (None then)."""
    rs = summary_records(s)
    if not rs:
        return None
    vals = []
    for r in rs:
        kv = r.get("kv") or {}
        if "evicted_equiv" in kv:
            vals.append(kv["evicted_equiv"])
        elif r.get("policy") in WHOLE_TOKEN:
            vals.append(kv.get("tokens_evicted", 0))
        else:
            return None
    return sum(vals) / len(vals)


def evicted_share(s):
    """Mean dropped positions over the mean final length (prompt + generated), or None."""
    ev, t = mean_dropped(s), s.get("mean_tier_tokens")
    if ev is None or not t or any(x is None for x in t):
        return None
    tot = sum(t)
    return ev / tot if tot else None


def t0_held(s):
    """Mean over decode steps of the T0 share actually held (summaries since b3535cc); '—' for full."""
    if s.get("policy") == "full":
        return "—"
    v = s.get("mean_t0_share")
    return "NA" if v is None else pct(v)


def grade_task(task):
    return "math" if (task or "").startswith("math") else task


_graded = {}


def via_percent(s):
    """Answers counted correct only through math_equal's percentage rule, by `tierkv grade` over the
    configuration's results file (None when the binary or its count is missing)."""
    path = jsonl_of(s)
    if path not in _graded:
        _graded[path] = None
        if os.access(TIERKV, os.X_OK) and os.path.exists(path):
            p = subprocess.run([TIERKV, "grade", "--task", grade_task(s.get("task")), "--in", path],
                               capture_output=True, text=True)
            m = re.search(r"^via_percent: (\d+)", p.stdout, re.M)
            if m and p.returncode == 0:  # a line grade could not read leaves the count unknown
                _graded[path] = int(m.group(1))
    return _graded[path]


def verify(paths):
    """`tierkv verify` totals over files: (intact, unchecked, altered) or None without the binary."""
    if not paths or not os.access(TIERKV, os.X_OK):
        return None
    p = subprocess.run([TIERKV, "verify"] + paths, capture_output=True, text=True)
    tot = [0, 0, 0]
    for m in re.finditer(r"(\d+) intact, (\d+) unchecked, (\d+) altered", p.stdout):
        for k in range(3):
            tot[k] += int(m.group(k + 1))
    return tot


def read_tsv(path):
    rows, hdr = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cols = line.split("\t")
            if hdr is None:
                hdr = cols
            else:
                rows.append(dict(zip(hdr, cols)))
    return rows


def correct_by_id(s):
    return {r.get("id"): bool(r.get("correct")) for r in summary_records(s)}


def mcnemar_p(b, c):
    """Exact two-sided McNemar p-value from the discordant counts b, c."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(a, b):
    """(n, a correct, b correct, only a, only b, p) on the ids both configurations ran."""
    ca, cb = correct_by_id(a), correct_by_id(b)
    ids = [i for i in ca if i in cb]
    oa = sum(1 for i in ids if ca[i] and not cb[i])
    ob = sum(1 for i in ids if cb[i] and not ca[i])
    return (len(ids), sum(ca[i] for i in ids), sum(cb[i] for i in ids), oa, ob, mcnemar_p(oa, ob))


def vs_full_cells(full, s):
    """Table cells of s paired with full: n | full | s | only full | only s | p."""
    n, a, b, oa, ob, p = paired(full, s) if full else (0, 0, 0, 0, 0, 1.0)
    return f"{n} | {pct(a / n if n else None)} | {pct(b / n if n else None)} | {oa} | {ob} | {p:.3g}"


def outputs(d, name):
    """id -> generated text of a configuration's results JSONL."""
    return {r.get("id"): r.get("output") for r in records(os.path.join(d, name + ".jsonl")) or []}


def same_outputs(d, a, b, ids):
    """How many of the problems both configurations ran produced the very same text."""
    oa, ob = outputs(d, a), outputs(d, b)
    both = [i for i in (ids if ids else oa) if i in oa and i in ob]
    return sum(1 for i in both if oa[i] == ob[i]) if both else None


def load_summaries(d):
    sums = []
    for p in sorted(glob.glob(os.path.join(d, "*.summary.json"))):
        try:
            with open(p) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            print(f"results.sh: skipping {p}: {e}", file=sys.stderr)
            continue
        s["_name"] = os.path.basename(p)[: -len(".summary.json")]
        s["_path"] = p
        s["_dir"] = os.path.basename(os.path.normpath(d))
        sums.append(s)
    return sums


def in_progress(d, sums):
    """Results files with more lines than their summary counted, or with no summary yet: runs still
    going (or stopped part way), reported as such and never mixed into the tables."""
    by_name = {s["_name"]: s for s in sums}
    rows = []
    for p in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        name = os.path.basename(p)[: -len(".jsonl")]
        rs = records(p) or []
        ids = {r.get("id") for r in rs}
        s = by_name.get(name)
        if s is not None and len(ids) <= (s.get("n") or 0):
            continue
        rows.append((name, len(ids), sum(1 for r in rs if r.get("correct")), s.get("n") if s else None))
    return rows
