"""results.py — the body of scripts/results.sh: docs/RESULTS.md (and its plots) from result directories.

    python3 scripts/results.py OUT.md [--benchmarks=DIR,...] DIR...

Every number comes from the directories' files: the per-problem JSONL lines, the *.summary.json
files, sweep.cmd and mcnemar.tsv. Two numbers come from the tierkv binary reading those lines
(TIERKV, default build/tierkv, skipped with a note when absent): `tierkv verify` (the per-line
checks that expose hand edits) and `tierkv grade` (answers right only by the percentage rule).
Plots need gnuplot (skipped with a note when absent). Standard library only.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

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


def provenance(d, sums):
    """Lines describing which builds wrote the lines and whether the lines are intact."""
    builds, kernels = Counter(), Counter()
    paths = sorted(glob.glob(os.path.join(d, "*.jsonl")))
    for p in paths:
        for r in records(p) or []:
            builds[r.get("build") or "not recorded (written before lines carried it)"] += 1
            kernels[r.get("kernels") or "not recorded (written before lines carried them)"] += 1
    out = ["- builds that wrote the lines: " + ", ".join(f"`{b}` ({n})" for b, n in builds.most_common()),
           "- kernels that wrote them (their float sums differ in order, so their texts may): "
           + ", ".join(f"`{k}` ({n})" for k, n in kernels.most_common())]
    flags = sorted({s.get("build_flags") for s in sums if s.get("build_flags")})
    commits = sorted({s.get("commit") for s in sums if s.get("commit")})
    if commits:
        out.append(f"- builds that wrote the summaries: {', '.join('`%s`' % c for c in commits)}; "
                   f"flags: {', '.join('`%s`' % f.strip() for f in flags) or 'not recorded'}")
    v = verify(paths)
    if v is None:
        out.append("- line checks: not run (no tierkv binary; set TIERKV)")
    else:
        out.append(f"- line checks (`tierkv verify`): {v[0]} intact, {v[1]} unchecked (written before "
                   f"lines carried a check), {v[2]} altered")
    return out


def plot(dirname, sums, plotdir):
    """Accuracy against the evicted share for one benchmark, one point per configuration, into
    plotdir/DIR-evicted.png; returns the file or None (no gnuplot or nothing to plot). The T2
    configurations evict nothing and would pile up at 0 with unreadable labels: they have their own
    table (t2_table), not a place here; nor do runs on fewer problems than full (the real-T0 grid's
    subsets: real_t0_table), whose accuracy is not on the same problems."""
    if not shutil.which("gnuplot"):
        return None
    n_full = next((s.get("n") for s in sums if s["_name"] == "full"), None)
    groups = {"full and hierarchy (ours)": [], "evict": [], "baselines, published setting": [],
              "baselines, prompt protected": []}
    for s in sums:
        x, n = evicted_share(s), s.get("n") or 0
        if x is None or n == 0 or s.get("accuracy") is None:
            continue
        pol, name = s.get("policy"), s["_name"]
        if "_t2-" in name or pol == "quant" or (n_full and n < n_full):
            continue
        if pol in ("full", "hierarchy"):
            g = "full and hierarchy (ours)"
        elif pol == "evict":
            g = "evict"
        elif name.endswith("_pp"):
            g = "baselines, prompt protected"
        else:
            g = "baselines, published setting"
        groups[g].append((100 * x, 100 * s["accuracy"], 100 * (s.get("ci_lo") or 0), 100 * (s.get("ci_hi") or 0), name))
    if not any(groups.values()):
        return None
    os.makedirs(plotdir, exist_ok=True)
    png = os.path.join(plotdir, f"{dirname}-evicted.png")
    dat = png[:-4] + ".dat"
    series = []
    with open(dat, "w") as f:
        for g, pts in groups.items():
            if not pts:
                continue
            f.write(f"# {g}\n")
            for p in sorted(pts):
                f.write(f"{p[0]:.3f} {p[1]:.3f} {p[2]:.3f} {p[3]:.3f} \"{p[4]}\"\n")
            f.write("\n\n")
            series.append(g)
    cmds = [
        "set terminal pngcairo size 900,560 font ',10'" if "pngcairo" in terminals() else "set terminal png size 900,560",
        f"set output '{png}'", "set termoption noenhanced",
        f"set title '{dirname}: accuracy against the share of the cache evicted (95% Wilson intervals)'",
        "set xlabel 'evicted share of the final length, mean over problems (%)'",
        "set ylabel 'accuracy (%)'", "set grid", "set key outside right top", "set yrange [0:*]",
        "set offsets 1, 4, 2, 0", "set xrange [-1:*]",
        "plot " + ", ".join(
            f"'{dat}' index {k} using 1:2:3:4 with yerrorbars pt {5 + k} title '{g}', "
            f"'' index {k} using 1:2:5 with labels offset 0.8,0.6 left font ',7' notitle"
            for k, g in enumerate(series)),
    ]
    p = subprocess.run(["gnuplot"], input="\n".join(cmds) + "\n", capture_output=True, text=True)
    os.remove(dat)
    if p.returncode != 0:
        print(f"results.sh: gnuplot failed for {dirname}: {p.stderr.strip()}", file=sys.stderr)
        return None
    return png


_terms = None


def terminals():
    global _terms
    if _terms is None:
        p = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True)
        _terms = p.stdout + p.stderr
    return _terms


def dir_section(d, sums, docdir, plotdir):
    L = [f"## {os.path.basename(os.path.normpath(d))}", ""]
    models = sorted({os.path.basename(s.get("model", "")) for s in sums})
    tasks = sorted({s.get("task", "") for s in sums})
    ns = sorted({s.get("n") for s in sums})
    L.append(f"- model: {', '.join('`%s`' % m for m in models)}")
    L.append(f"- task: {', '.join(tasks)}; problems per configuration: {', '.join(str(n) for n in ns)}")
    L.append(f"- max generated tokens: {', '.join(sorted({str(s.get('max_tokens')) for s in sums}))}; "
             f"problems decoded together: {', '.join(sorted({str(s.get('parallel')) for s in sums}))}")
    # kv_type is absent from summaries written before the f16 cache existed: those ran with f32
    kts = sorted({s.get("kv_type", "f32 (not recorded: written before the f16 cache existed)") for s in sums})
    L.append(f"- KV cache element type: {', '.join(kts)}")
    L.append(f"- files: `{shown_dir(d)}`")
    L += provenance(d, sums)
    cmdf = os.path.join(d, "sweep.cmd")
    L += ["", "Commands:", "", "```"]
    if os.path.exists(cmdf):
        L.append(no_paths(open(cmdf).read().strip()))
        L.append("# which ran, per configuration:")
    L += [no_paths(s.get("command", "")) for s in sums]
    L += ["```", ""]

    L += ["| configuration | policy | T0 ratio | T0 held | evict ratio | n | correct | by % rule | accuracy | 95% CI | mean len | max len | capped | tok/s |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def ratio(x):
        return "—" if x is None or x < 0 else f"{x:g}"
    for s in sums:
        tps = s.get("tok_per_s")
        L.append(f"| {s['_name']} | {s.get('policy')} | {ratio(s.get('hbm_ratio'))} | {t0_held(s)} | {ratio(s.get('evict_ratio'))} | "
                 f"{s.get('n')} | {s.get('correct')} | {fmt(via_percent(s), 'd')} | {fmt(s.get('accuracy'), '.3f')} | "
                 f"[{fmt(s.get('ci_lo'), '.3f')}, {fmt(s.get('ci_hi'), '.3f')}] | {fmt(s.get('mean_len'), '.1f')} | "
                 f"{fmt(s.get('max_len'), '.0f')} | {pct(s.get('length_share'))} | "
                 f"{'not measured (resumed run)' if tps is None else format(tps, '.1f')} |")
    L += ["", "T0 held: the share of the sequence in T0, mean over decode steps (NA: written before it was "
          "recorded); by % rule: of the correct answers, those right only through the grader's percentage "
          "rule (Qwen's math_equal accepts 700 for 7 and 1.4 for 140; NA without the binary); tok/s: "
          "generated tokens per second of wall time, all problems in flight together, in the last invocation "
          "that ran problems; capped: share of problems stopped by the token limit.", ""]

    prog = in_progress(d, sums)
    if prog:
        L += ["Runs in progress (lines written so far; not in any table until their summary is written):", "",
              "| configuration | problems so far | correct so far | summary n |", "| --- | --- | --- | --- |"]
        L += [f"| {n} | {k} | {c} | {'none yet' if sn is None else sn} |" for n, k, c, sn in prog]
        L.append("")

    L += ["KV hierarchy per problem (means over problems, at the end of each problem):", "",
          "| configuration | T0 tokens | T1 tokens | T2 tokens | evicted (per row) | share | peak T0 MiB | moved MiB |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sums:
        t = s.get("mean_tier_tokens") or [None] * 4
        pk, mv = s.get("mean_peak_t0_bytes"), s.get("mean_bytes_moved")
        ev = mean_dropped(s)
        L.append(f"| {s['_name']} | {fmt(t[0], '.1f')} | {fmt(t[1], '.1f')} | {fmt(t[2], '.1f')} | {fmt(ev, '.1f')} | "
                 f"{pct(evicted_share(s))} | "
                 f"{fmt(pk / 1048576 if pk is not None else None, '.2f')} | {fmt(mv / 1048576 if mv is not None else None, '.2f')} |")
    L += ["", "evicted (per row): positions whose K/V can no longer be read at the end, averaged over the "
          "(layer, kv head) rows (H2O, R-KV and SnapKV drop different positions in each row); share: of "
          "the final length. NA: recorded before this was measured, for a per-head baseline.", ""]

    # every configuration against full, paired here from the files (mcnemar.tsv holds only the grid of
    # the sweep invocation that wrote it last); its other comparisons (T0 ratio pairs) as written
    mc = os.path.join(d, "mcnemar.tsv")
    rows = [r for r in (read_tsv(mc) if os.path.exists(mc) else []) if r.get("comparison") != "vs_full"]
    full = next((s for s in sums if s["_name"] == "full"), None)
    vs = []
    for s in sums if full else []:
        n, ca, cb, oa, ob, pv = paired(s, full) if s is not full else (0,) * 6
        if n:
            vs.append({"comparison": "vs_full", "a": s["_name"], "b": "full", "n_paired": n, "a_correct": ca,
                       "b_correct": cb, "only_a": oa, "only_b": ob, "p_exact": pv})
    rows = vs + rows
    if rows:
        L += ["McNemar (paired on the same problems; only A / only B: discordant pairs; same text: problems",
              "whose generated text is identical, character for character, in A and B):", "",
              "| comparison | A | B | n | A correct | B correct | only A | only B | p (exact) | same text |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        ids_of = {s["_name"]: s.get("ids") for s in sums}
        for r in rows:
            same = same_outputs(d, r["a"], r["b"], ids_of.get(r["a"]))
            L.append(f"| {r['comparison']} | {r['a']} | {r['b']} | {r['n_paired']} | {r['a_correct']} | "
                     f"{r['b_correct']} | {r['only_a']} | {r['only_b']} | {float(r['p_exact']):.4g} | "
                     f"{'NA' if same is None else same} |")
        L.append("")
    pngs = sorted(glob.glob(os.path.join(d, "plots", "*.png")))
    mine = plot(os.path.basename(os.path.normpath(d)), sums, plotdir)
    links = ([f"[accuracy against the evicted share]({os.path.relpath(mine, docdir)})"] if mine else []) + \
            [f"[{os.path.basename(p)}]({os.path.relpath(os.path.abspath(p), docdir)})" for p in pngs]
    if links:
        L += ["Plots: " + ", ".join(links), ""]
    return L


def started_section(d):
    """A directory whose runs have all started but none finished: its lines so far, nothing more."""
    L = [f"## {os.path.basename(os.path.normpath(d))}", "", f"- files: `{shown_dir(d)}`"] + provenance(d, [])
    L += ["", "No configuration has finished here yet; lines written so far:", "",
          "| configuration | problems so far | correct so far |", "| --- | --- | --- |"]
    L += [f"| {n} | {k} | {c} |" for n, k, c, _ in in_progress(d, [])]
    return L + [""]


def budget_key(name):
    """'h2o_t0-0.5_pp' -> ('h2o', 't0-0.5', True); None for names that are not a baseline's."""
    m = re.match(r"^(h2o|rkv|snapkv|streaming)_((?:t0|tok)-[0-9.]+)(_pp)?$", name)
    return (m.group(1), m.group(2), bool(m.group(3))) if m else None


def cliffs(all_sums):
    """Where each baseline's cliff comes from: the published setting against the prompt-protected one
    at the same budget, both paired with full on the same problems."""
    rows = []
    for d, sums in all_sums:
        by = {s["_name"]: s for s in sums}
        full = by.get("full")
        for s in sums:
            k = budget_key(s["_name"])
            if not k or k[2] or not full:
                continue
            pp = by.get(s["_name"] + "_pp")
            if not pp:
                continue
            cf, cpub, cpp = correct_by_id(full), correct_by_id(s), correct_by_id(pp)
            ids = [i for i in cf if i in cpub and i in cpp]
            if not ids:
                continue
            n = len(ids)
            af, apub, app = (sum(c[i] for i in ids) / n for c in (cf, cpub, cpp))
            oa = sum(1 for i in ids if cpp[i] and not cpub[i])
            ob = sum(1 for i in ids if cpub[i] and not cpp[i])
            rows.append(f"| {os.path.basename(d)} | {k[0]} | {k[1]} | {n} | {pct(af)} | {pct(apub)} | {pct(app)} | "
                        f"{100 * (app - apub):+.1f} | {100 * (af - app):+.1f} | {mcnemar_p(oa, ob):.3g} |")
    if not rows:
        return []
    return ["## Where each baseline's cliff comes from", "",
            "The same baseline at the same budget in the published setting (the prompt counts inside the "
            "budget and may be dropped) and with the prompt protected (`--protect-prompt`: the prompt is "
            "kept and the method chooses among the generated tokens), paired with `full` on the problems "
            "all three ran. Lost to the prompt: protected minus published; lost to eviction of the chain: "
            "full minus protected (points of accuracy). p: exact McNemar, published against protected.", "",
            "| benchmark | baseline | budget | n | full | published | prompt protected | lost to the prompt | lost to the chain | p |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


PAPER_ROWS = (("full", "full cache"), ("hierarchy_t0-0.5_ev-0.03", "hierarchy, 3% evicted (T0 50%)"),
              ("hierarchy_t0-0.5_ev-0.1", "hierarchy, 10% evicted (T0 50%)"), ("evict_t0-0.5", "evict, T0 50%"),
              ("h2o_t0-0.5", "H2O 50%, published"), ("h2o_t0-0.5_pp", "H2O 50%, prompt protected"),
              ("rkv_t0-0.5", "R-KV 50%, published"), ("rkv_t0-0.5_pp", "R-KV 50%, prompt protected"),
              ("streaming_t0-0.5", "StreamingLLM 50%, published"), ("streaming_t0-0.5_pp", "StreamingLLM 50%, prompt protected"),
              ("snapkv_t0-0.5", "SnapKV 50%, published"), ("snapkv_t0-0.5_pp", "SnapKV 50%, prompt protected"))


def paper_table(all_sums, bench_dirs):
    """The paper's comparison on each benchmark named by --benchmarks: one column per directory, one
    row per configuration, accuracy and the exact McNemar p against full on the same problems."""
    if not bench_dirs:
        return []
    have = {os.path.normpath(d): sums for d, sums in all_sums}
    cols = [(d, have.get(os.path.normpath(d)) or load_summaries(d)) for d in bench_dirs if os.path.isdir(d)]
    missing = [os.path.basename(os.path.normpath(d)) for d in bench_dirs if not os.path.isdir(d)]
    L = ["## The paper's comparison on every benchmark", "",
         "Accuracy of each configuration, and in brackets the exact McNemar p against `full` paired on the "
         "same problems (n: problems of full). Running: lines written so far by a run not finished (not "
         "compared). —: not run yet. Every directory's own section below has the intervals, lengths and "
         "the T0 share actually held.", ""]
    L.append("| configuration | " + " | ".join(f"{os.path.basename(os.path.normpath(d))}" for d, _ in cols) + " |")
    L.append("| --- |" + " --- |" * len(cols))
    fulls = [next((s for s in sums if s["_name"] == "full"), None) for _, sums in cols]
    L.append("| n | " + " | ".join(str(f.get("n")) if f else "—" for f in fulls) + " |")
    running = [{n: k for n, k, _, _ in in_progress(d, sums)} for d, sums in cols]  # lines so far
    for name, label in PAPER_ROWS:
        cells = []
        for (d, sums), full, run in zip(cols, fulls, running):
            s = next((x for x in sums if x["_name"] == name), None)
            if s is None:
                cells.append(f"running {run[name]}" if run.get(name) else "—")
            elif s is full or full is None:
                cells.append(pct(s.get("accuracy")))
            else:
                n, _, b, _, _, pv = paired(full, s)
                cells.append(f"{pct(b / n if n else None)} (p {pv:.2g})")
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    L.append("")
    if missing:
        L += ["Not started yet: " + ", ".join(f"`{m}`" for m in missing) + ".", ""]
    return L


def t2_table(all_sums):
    """The T2 codecs: each configuration holding tokens in T2, paired with full."""
    rows = []
    for d, sums in all_sums:
        by = {s["_name"]: s for s in sums}
        full = by.get("full")
        for s in sums:
            t = s.get("mean_tier_tokens") or [0] * 4
            if not ((t[2] or 0) > 0 or s.get("policy") == "quant" or "_t2-" in s["_name"]):
                continue
            rs = summary_records(s)
            codec = next((r.get("t2_codec") for r in rs if r.get("t2_codec")), None) or "q8h"
            tot = sum(x or 0 for x in t)
            rows.append(f"| {os.path.basename(d)} | {s['_name']} | {codec} | {t0_held(s)} | "
                        f"{pct((t[2] or 0) / tot if tot else None)} | {vs_full_cells(full, s)} |")
    if not rows:
        return []
    return ["## T2 codecs", "",
            "Every configuration that held tokens in T2 (int8 or 4-bit host memory), paired with `full` on "
            "the same problems. Codecs (docs/T2-CODECS.md): q8h int8 per (token, layer, head), the paper's; "
            "q8b/q8bh keys per 32-channel block (h: Hadamard-rotated first), values per token; q4bh 4-bit; "
            "q8bhc/q4bhc: q8bh/q4bh with the keys centred on the model's K bias first. "
            "Results lines name the codec only when it is not q8h (so that lines written before codecs existed "
            "stay comparable): a line without one ran q8h. "
            "T2 share: of the final length, mean over problems. only full / only T2: discordant pairs.", "",
            "| benchmark | configuration | codec | T0 held | T2 share | n | full | with T2 | only full | only T2 | p |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


def real_t0_table(all_sums):
    """The hierarchy without T2: the T0 share requested against the one held (mean over decode steps),
    the prompt pinned in T0 or not, and accuracy against full; configurations that differ only in T0
    (same eviction, window and sinks) are compared text for text."""
    rows = []
    for d, sums in all_sums:
        full = next((s for s in sums if s["_name"] == "full"), None)
        hs = []
        for s in sums:
            t = s.get("mean_tier_tokens") or [0] * 4
            if s.get("policy") != "hierarchy" or (t[2] or 0) > 0 or "_t2-" in s["_name"]:
                continue
            r0 = next(iter(summary_records(s)), {})
            tok = r0.get("t0_tokens")
            hs.append((s, (s.get("evict_ratio"), r0.get("window", 64), r0.get("sinks", 4)),
                       f"{tok} tokens" if tok else pct(s.get("hbm_ratio")), bool(r0.get("unpin_prompt"))))
        hs.sort(key=lambda h: (h[1][0] or 0, h[1][1], h[3], h[0].get("hbm_ratio") or 0))
        first = {}
        for s, key, req, unpin in hs:
            # nothing evicted: the texts should be full's (T0 and T1 hold the same values)
            ref = full if full and not (key[0] or 0) > 0 else first.setdefault(key, s)
            if ref is s:
                same = "—"
            else:
                k = same_outputs(d, ref["_name"], s["_name"], s.get("ids"))
                m = len(set(correct_by_id(ref)) & set(correct_by_id(s)))
                same = "NA" if k is None else f"{k}/{m} ({ref['_name']})"
            rows.append(f"| {os.path.basename(d)} | {s['_name']} | {'unpinned' if unpin else 'pinned'} | {key[1]} | "
                        f"{pct(key[0])} | {req} | {t0_held(s)} | {vs_full_cells(full, s)} | {same} |")
    if not rows:
        return []
    return ["## The T0 share requested and held", "",
            "Every hierarchy configuration without T2. T0 held: the share of the sequence in T0, mean over "
            "decode steps (the budget is raised to the protected tokens: the prompt when pinned, the first 4 "
            "and the last `window` positions). Unpinned (`--unpin-prompt`): the prompt is never evicted nor "
            "lossy but waits in T1 when it does not rank into T0. Same texts: problems whose generated text is "
            "identical to full's when nothing is evicted, else to the first configuration listed with the same "
            "eviction, window and sinks (T1 holds T0's exact values, so the T0 share should change no text).", "",
            "| benchmark | configuration | prompt | window | evict | T0 requested | T0 held | n | full | "
            "configuration acc. | only full | only config. | p | same texts as |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


def builds_of(s):
    """The builds that wrote a configuration's lines, else its summary's commit."""
    return ", ".join(sorted({r.get("build") for r in summary_records(s) if r.get("build")})) or \
        s.get("commit") or "not recorded"


def noise_table(all_sums):
    """full against full: two lossless runs of the same task and token cap from different directories,
    which differ in the cache's element type (f16, f32) or in the build, paired on the same problems.
    Neither drops or quantises anything; what differs is rounding, so their discordant pairs show how
    far greedy chains move under a perturbation smaller than any T2 codec's, the scale against which
    the other p-values read. A run whose texts are all an earlier run's (one directory resumed from
    another) is left out."""
    fulls = []
    for d, sums in all_sums:
        for s in sums:
            if s.get("policy") != "full":
                continue
            t = outputs(d, s["_name"])
            # a run whose every text is an earlier run's (a directory resumed from another) adds no pair
            if not any(t and all(k in u and u[k] == v for k, v in t.items()) for _, _, u, _ in fulls):
                fulls.append((d, s, t, {r.get("id"): r.get("prompt_tokens") for r in summary_records(s)}))
    rows = []
    for i, (da, a, ta, pa) in enumerate(fulls):
        for db, b, tb, pb in fulls[i + 1:]:
            if (a.get("task"), a.get("max_tokens"), a.get("model")) != (b.get("task"), b.get("max_tokens"), b.get("model")):
                continue
            if any(pa[k] != pb[k] for k in pa if k in pb):
                continue  # another prompt (a system turn or not, another template)
            n, ca, cb, oa, ob, p = paired(a, b)
            if n == 0:
                continue
            same = sum(1 for k in ta if k in tb and ta[k] == tb[k])
            rows.append(f"| {a.get('task')} | {a.get('max_tokens')} | {os.path.basename(da)} | "
                        f"{a.get('kv_type') or 'f32'}, {builds_of(a)} | {os.path.basename(db)} | "
                        f"{b.get('kv_type') or 'f32'}, {builds_of(b)} | {n} | {ca} | {cb} | {oa} | {ob} | "
                        f"{p:.3g} | {same}/{n} |")
    if not rows:
        return []
    return ["## Noise floor: full against full", "",
            "Pairs of `full` runs of one benchmark from different directories: the cache's element type (f16 "
            "as llama.cpp, or f32; a summary without one was written before f16 existed and ran f32) or the "
            "build differs. Nothing is evicted or quantised in either, and the f16 rounding of K and V "
            "(relative 2^-11) is smaller than any T2 codec's error, yet a greedy chain that passes a near-tie "
            "diverges from there. Their discordant pairs are the scale of chance against which the other "
            "tables' p-values read. A run whose texts all equal an earlier run's (a directory resumed from "
            "another) is left out.", "",
            "| task | max tokens | A | A: cache, build | B | B: cache, build | n | A correct | B correct | only A | "
            "only B | p | same texts |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


def main():
    out, dirs, bench_dirs = sys.argv[1], sys.argv[2:], []
    if dirs and dirs[0].startswith("--benchmarks="):
        bench_dirs = [x for x in dirs[0].split("=", 1)[1].split(",") if x]
        dirs = dirs[1:]
    docdir = os.path.dirname(os.path.abspath(out))
    plotdir = os.path.join(docdir, "plots")
    L = ["# Results", "",
         "Generated by `scripts/results.sh` from the result directories below; every number is read from",
         "their files (per-problem JSONL, `*.summary.json`, `sweep.tsv`, `mcnemar.tsv`). Accuracy intervals are",
         "Wilson 95%; McNemar p-values are exact two-sided, paired on the same problem ids. Each results line",
         "names the build and the kernels that wrote it and carries a check (FNV-1a 64 of the line before it) that `tierkv verify`",
         "recomputes: a line edited by hand shows as altered.", "",
         "This file was written by:", "", "```",
         "scripts/results.sh" + (" --benchmarks " + ",".join(shown_dir(d) for d in bench_dirs) if bench_dirs else "")
         + "".join(" " + shown_dir(d) for d in dirs), "```", ""]
    all_sums = []
    for d in dirs:
        sums = load_summaries(d)
        if not sums and not glob.glob(os.path.join(d, "*.jsonl")):
            print(f"results.sh: {d}: no results files, skipped", file=sys.stderr)
            continue
        all_sums.append((d, sums))
    L += paper_table(all_sums, bench_dirs)
    L += cliffs(all_sums)
    L += noise_table(all_sums)
    L += t2_table(all_sums)
    L += real_t0_table(all_sums)
    for d, sums in all_sums:
        L += dir_section(d, sums, docdir, plotdir) if sums else started_section(d)
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
