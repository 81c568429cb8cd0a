"""results_tables.py — the tables of docs/RESULTS.md that read across result directories: the paper's
comparison on every benchmark, where each baseline's cliff comes from, the absolute token budgets,
the noise floor (full against full), the T2 codecs and their goals, the T0 share requested and held.

Each returns the Markdown lines of one section, or nothing when no directory has its runs. Numbers
come from results_data.py; nothing here reads a file itself.
"""
import os
import re

from results_data import (correct_by_id, evicted_share, in_progress, load_summaries, mcnemar_p, outputs, paired,
                          pct, same_outputs, summary_records, t0_held, vs_full_cells)


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
                        f"{100 * (app - apub):+.1f} | {100 * (af - app):+.1f} | {mcnemar_p(oa, ob):.3g} | "
                        f"{pct(evicted_share(s))} / {pct(evicted_share(pp))} |")
    if not rows:
        return []
    return ["## Where each baseline's cliff comes from", "",
            "The same baseline at the same budget in the published setting (the prompt counts inside the "
            "budget and may be dropped) and with the prompt protected (`--protect-prompt`: the prompt is "
            "kept and the method chooses among the generated tokens), paired with `full` on the problems "
            "all three ran. Lost to the prompt: protected minus published; lost to eviction of the chain: "
            "full minus protected (points of accuracy). p: exact McNemar, published against protected. "
            "Evicted: the share of the final length no longer readable at the end, mean over problems, "
            "published / protected. SnapKV as published compresses the prompt once, at its end, and never "
            "evicts a generated token, so all it evicts is prompt; protected, it has no prompt to compress and "
            "runs as the R-KV paper's decode-time SnapKV (R-KV's schedule, importance only).", "",
            "| benchmark | baseline | budget | n | full | published | prompt protected | lost to the prompt | "
            "lost to the chain | p | evicted |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


BUDGET_COLS = (("evict_{b}", "evict"), ("hierarchy_{b}_ev-0.03", "hierarchy 3%"),
               ("hierarchy_{b}_ev-0.03_unpin", "hierarchy 3%, prompt unpinned"),
               ("h2o_{b}", "H2O published"), ("h2o_{b}_pp", "H2O protected"),
               ("rkv_{b}", "R-KV published"), ("rkv_{b}_pp", "R-KV protected"),
               ("snapkv_{b}", "SnapKV published"), ("snapkv_{b}_pp", "SnapKV protected"),
               ("streaming_{b}", "StreamingLLM published"), ("streaming_{b}_pp", "StreamingLLM protected"))


def budget_order(b):
    """'t0-0.5' before 'tok-128' before 'tok-512'."""
    kind, v = b.split("-", 1)
    return (kind != "t0", float(v))


def token_budgets(all_sums):
    """Every method at the same budgets: a share of the length (t0-R) and the absolute T0 budgets in
    tokens (tok-N) as R-KV and SnapKV are run, for each directory that ran a token budget. A cell is
    accuracy, the exact McNemar p against full on the same problems and the evicted share held; the
    heading gives the range of full's prompt lengths, which a budget in tokens is measured against."""
    L = []
    for d, sums in all_sums:
        by = {s["_name"]: s for s in sums}
        full = by.get("full")
        budgets = {m.group(1) for m in (re.match(r"^[a-z0-9]+_((?:t0|tok)-[0-9.]+)", n) for n in by) if m}
        if not full or not any(b.startswith("tok-") for b in budgets):
            continue
        budgets = sorted(budgets, key=budget_order)
        cols = [(c, label) for c, label in BUDGET_COLS if any(c.format(b=b) in by for b in budgets)]
        rows = []
        for b in budgets:
            cells = []
            for c, _ in cols:
                s = by.get(c.format(b=b))
                if s is None:
                    cells.append("—")
                    continue
                n, _, k, _, _, pv = paired(full, s)
                few = f"n {n}, " if n != full.get("n") else ""
                cells.append(f"{pct(k / n if n else None)} ({few}p {pv:.2g}, {pct(evicted_share(s))} ev.)")
            if any(x != "—" for x in cells):
                label = f"{b[4:]} tokens" if b.startswith("tok-") else f"{pct(float(b[3:]))} of the length"
                rows.append(f"| {label} | " + " | ".join(cells) + " |")
        plen = [v for v in prompts_of(full).values() if isinstance(v, int)]
        span = f", prompts {min(plen)}–{max(plen)} tokens" if plen else ""
        L += [f"### {os.path.basename(d)} (full {pct(full.get('accuracy'))}, n {full.get('n')}{span})", "",
              "| T0 budget | " + " | ".join(label for _, label in cols) + " |",
              "| --- |" + " --- |" * len(cols)] + rows + [""]
    if not L:
        return []
    return ["## Every method at the same budgets", "",
            "Each method at a T0 budget given as a share of the current length and as an absolute number "
            "of tokens per sequence (`--t0-tokens`, as R-KV and SnapKV are usually run; the budget is raised "
            "to the protected tokens where a method protects some). Published: the prompt counts inside the "
            "budget; protected: `--protect-prompt`. A cell: accuracy (exact McNemar p against `full` on the "
            "same problems, n when fewer than full's; the evicted share of the final length, mean over "
            "problems). The hierarchy's texts at a T0 budget are those of any other T0 budget with the same "
            "eviction (T1 holds T0's exact values), so it is run once as a check. —: not run.", ""] + L


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


def holds_t2(s):
    t = s.get("mean_tier_tokens") or [0] * 4
    return (t[2] or 0) > 0 or s.get("policy") == "quant" or "_t2-" in s["_name"]


def codec_of(s):
    """The T2 codec as the lines name it; lines name it only when it is not q8h (so that lines written
    before codecs existed stay comparable)."""
    return next((r.get("t2_codec") for r in summary_records(s) if r.get("t2_codec")), None) or "q8h"


def t2_table(all_sums):
    """The T2 codecs: each configuration holding tokens in T2, paired with full."""
    rows = []
    for d, sums in all_sums:
        by = {s["_name"]: s for s in sums}
        full = by.get("full")
        for s in filter(holds_t2, sums):
            t = s.get("mean_tier_tokens") or [0] * 4
            tot = sum(x or 0 for x in t)
            rows.append(f"| {os.path.basename(d)} | {s['_name']} | {codec_of(s)} | {t0_held(s)} | "
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


PLACEMENT = {"--n": 1, "--offset": 1, "--out": 1, "--summary-json": 1, "--parallel": 1, "-t": 1, "--threads": 1,
             "--spread": 0}


def setting_of(s):
    """What makes two runs of full comparable whichever problems they ran: the recorded command without
    the flags that only choose problems or place the run (paths reduced to file names), and the cache
    type (f32 where a summary predates the field)."""
    words, out = (s.get("command") or "").split(), []
    i = 0
    while i < len(words):
        if words[i] in PLACEMENT:
            i += 1 + PLACEMENT[words[i]]
            continue
        out.append(os.path.basename(words[i]))
        i += 1
    return (" ".join(out), s.get("kv_type") or "f32")


def prompts_of(s):
    """id -> prompt length in tokens of a configuration's lines."""
    return {r.get("id"): r.get("prompt_tokens") for r in summary_records(s)}


def same_prompts(pa, pb):
    """Whether two runs saw the same prompts (the same length on every problem both ran); another system
    turn or template is another experiment."""
    return all(pa[k] == pb[k] for k in pa if k in pb)


def without_kv_type(setting):
    """A setting's command without its cache type flag: f16 and f32 runs of full share it."""
    return re.sub(r" --kv-type \S+", "", setting[0])


def t2_goals(all_sums):
    """Each T2 configuration against the issue's goals: int8 within the noise of full (exact McNemar
    p > 0.3), 4-bit keeping at least 95% of full's accuracy. Directories whose full runs have the same
    setting (model, task, prompt, token cap, cache type) on disjoint problems are pooled: their
    discordant pairs add up. Where full also ran with an f32 cache on some of the same problems, the
    configuration is paired with that too: the f16 cache's own rounding is a perturbation as well."""
    groups, f32_fulls = {}, {}
    for d, sums in all_sums:
        by = {s["_name"]: s for s in sums}
        if "full" in by:
            setting = setting_of(by["full"])
            groups.setdefault(setting, []).append((d, by))
            if by["full"].get("kv_type") == "f32":  # recorded, not assumed from an older summary
                f32_fulls.setdefault(without_kv_type(setting), []).append(by["full"])
    rows = []
    for setting, members in groups.items():
        # the f32 runs of full this group's full can be paired with (none when its own full is f32)
        f32s = [] if members[0][1]["full"].get("kv_type") == "f32" else \
            [(f, prompts_of(f)) for f in f32_fulls.get(without_kv_type(setting), [])]
        names = sorted({n for _, by in members for n, s in by.items() if holds_t2(s)})
        for name in names:
            parts = [(d, by["full"], by[name]) for d, by in members if name in by]
            seen, overlap = set(), False
            for _, _, s in parts:
                ids = set(correct_by_id(s))
                overlap |= bool(seen & ids)
                seen |= ids
            if overlap:  # the same problems twice: keep the first directory alone
                parts = parts[:1]
            n = a = b = oa = ob = 0
            for _, full, s in parts:
                pn, pa, pb, poa, pob, _ = paired(full, s)
                n, a, b, oa, ob = n + pn, a + pa, b + pb, oa + poa, ob + pob
            if not n:
                continue
            codec, pv = codec_of(parts[0][2]), mcnemar_p(oa, ob)
            # against full with an f32 cache, on the problems it ran (the first f32 run that has them)
            fn = fa = fb = foa = fob = 0
            for _, _, s in parts:
                ps = prompts_of(s) if f32s else {}
                for f32, pf in f32s:
                    pn, pa, pb, poa, pob, _ = paired(f32, s)
                    if pn and same_prompts(pf, ps):
                        fn, fa, fb, foa, fob = fn + pn, fa + pa, fb + pb, foa + poa, fob + pob
                        break
            vs_f32 = f"{fn} | {fa} | {fb} | {foa} | {fob} | {mcnemar_p(foa, fob):.3g}" if fn else "— | — | — | — | — | —"
            kept = b / a if a else None
            if codec.startswith("q4"):
                goal, met = "keeps ≥ 95%", "yes" if kept is not None and kept >= 0.95 else "no"
            else:
                goal, met = "p > 0.3", "yes" if pv > 0.3 else ("no (T2 ahead)" if b > a else "no")
            where = " + ".join(os.path.basename(d) for d, _, _ in parts)
            rows.append(f"| {where} | {name} | {codec} | {n} | {pct(a / n)} | {pct(b / n)} | {pct(kept)} | {oa} | "
                        f"{ob} | {pv:.3g} | {goal} | {met} | {vs_f32} |")
    if not rows:
        return []
    return ["## T2 against its goals", "",
            "The goals of the T2 tier: an int8 codec within the noise of `full` (exact McNemar p > 0.3), and a "
            "4-bit codec that keeps at least 95% of full's accuracy (kept: accuracy with T2 over full's on "
            "the same problems). Directories that ran full with the same setting (command but for the "
            "problems chosen, and cache type) on different problems are pooled (joined by +): their "
            "discordant pairs add up. A p-value at or under 0.3 misses the goal in either direction; "
            "T2 ahead says which. The last six columns pair the same configuration with `full` run with an "
            "f32 cache, where one ran on the same problems (n: the problems both ran; f32: full's correct "
            "answers there): the f16 cache that the goal's `full` uses rounds K and V too, and the two "
            "lossless runs differ by chance as much as a codec may (see the noise floor below).", "",
            "| benchmark | configuration | codec | n | full | with T2 | kept | only full | only T2 | p | goal | met | "
            "f32: n | f32 | with T2 | only f32 | only T2 | p |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
            "--- |"] + rows + [""]


def real_t0_table(all_sums):
    """The hierarchy without T2: the T0 share requested against the one held (mean over decode steps),
    the prompt pinned in T0 or not, and accuracy against full; configurations that differ only in T0
    (same eviction, window and sinks) are compared text for text."""
    rows = []
    for d, sums in all_sums:
        full = next((s for s in sums if s["_name"] == "full"), None)
        hs = []
        for s in sums:
            if s.get("policy") != "hierarchy" or holds_t2(s):
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
            "and the last `window` positions; a re-tiering fills T0 only to the budget less the room the next "
            "Δ tokens take, since they enter T0, so above that floor the share held is below the one "
            "requested). Unpinned (`--unpin-prompt`): the prompt is never evicted nor "
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
                fulls.append((d, s, t, prompts_of(s)))
    rows = []
    for i, (da, a, ta, pa) in enumerate(fulls):
        for db, b, tb, pb in fulls[i + 1:]:
            if (a.get("task"), a.get("max_tokens"), a.get("model")) != (b.get("task"), b.get("max_tokens"), b.get("model")):
                continue
            if not same_prompts(pa, pb):
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
