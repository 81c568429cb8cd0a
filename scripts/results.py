"""results.py — the body of scripts/results.sh: docs/RESULTS.md (and its plots) from result directories.

    python3 scripts/results.py OUT.md [--benchmarks=DIR,...] DIR...

Every number comes from the directories' files: the per-problem JSONL lines, the *.summary.json
files, sweep.cmd and mcnemar.tsv. Two numbers come from the tierkv binary reading those lines
(TIERKV, default build/tierkv, skipped with a note when absent): `tierkv verify` (the per-line
checks that expose hand edits) and `tierkv grade` (answers right only by the percentage rule).
Plots need gnuplot (skipped with a note when absent). Standard library only. This file holds each
directory's own section, its plot and main(); the files are read by results_data.py and the tables
across directories are written by results_tables.py.
"""
import glob
import os
import shutil
import subprocess
import sys
from collections import Counter

from results_data import (evicted_share, fmt, in_progress, load_summaries, mean_dropped, no_paths, paired, pct,
                          read_tsv, records, same_outputs, shown_dir, t0_held, verify, via_percent)
from results_tables import cliffs, noise_table, paper_table, real_t0_table, t2_goals, t2_table, token_budgets


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
    L += token_budgets(all_sums)
    L += noise_table(all_sums)
    L += t2_table(all_sums)
    L += t2_goals(all_sums)
    L += real_t0_table(all_sums)
    for d, sums in all_sums:
        L += dir_section(d, sums, docdir, plotdir) if sums else started_section(d)
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
