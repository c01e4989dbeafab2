"""Masking by clusters of bad leverage points: the detector's high-breakdown start (issue 22).

Run: ``PYTHONPATH=. .venv/bin/python -m benchmarks.detect_leverage [--quick] [--seeds N] [--dry-run]``.
Writes the ``detect_leverage`` section of BENCHMARKS.md (:func:`benchmarks._record.record`);
the Kuo protocol benchmark (``benchmarks/detect.py``) is separate.

Fixture (:func:`masked`): ``n`` rows, ``p`` contextual attributes ``X ~ N(0, I_p)``,
``y = X w + 1 + N(0, 1)`` with ``w ~ N(0, 2^2 I_p)``; a fraction ``eps`` of the rows is
replaced by a tight cluster of **bad leverage points**, ``X ≈ 10`` (sd 0.5 per attribute)
and ``y ≈ -3 mean|X w| - 20`` (sd 0.5), and 5% of the other rows get **vertical outliers**
``±U(10, 20)`` added to ``y``. Planted = cluster + vertical rows. Least squares through
the cluster and the clean centroid fits the cluster well and flags clean rows: the
masking of Rousseeuw and Leroy (1987, Ch. 1) that least trimmed squares (Rousseeuw
1984) resists up to ~50% contamination.

Methods, each scored by ROC AUC and PR AUC (``average_precision_score``) of its
outlier score against the planted labels, all in the same run on the same data:
EM = ``RobustRegressionDetector(random_state=seed)`` (the default, ``start="auto"``)
scored by ``decision_scores_``; EM legacy = the same with ``start="legacy"`` (the start
before issue 22); LTS = |residual| of the detector's own FAST-LTS fit (the raw LTS
coefficients of the default fit, before reweighting and EM); scikit-learn
``HuberRegressor()``, ``RANSACRegressor(random_state=seed)`` (defaults: residual
threshold = MAD of y), ``TheilSenRegressor(random_state=seed)`` (defaults: at most
10,000 random subsets of size p+1, i.e. a subsample of the subsets for large n) and OLS,
each by |residual|. Cells: p ∈ {1, 2, 3, 5}, n ∈ {30, 100, 1000, 10000},
eps ∈ {0.1, 0.2, 0.3, 0.4}; (n, p) with n < 3p + 5 are skipped.

Goal (issue 22): EM mean ROC AUC ≥ 0.98 in every cell where LTS reaches a mean of 0.98.
Where LTS fails, the script says why, per failing seed: LTS's own criterion prefers the
masked fit (the fit concentrated from the clean rows -- an oracle start -- has a larger
trimmed objective than the one found) or the search missed it (smaller).

Why those cells are not judged, and why no S/MM start was added: where LTS fails, the
fixture is ambiguous for every 50%-breakdown *majority* criterion, not only LTS's. The
cluster (residual sd 0.5 about a plane through it) plus the clean rows nearest that
plane make a tighter half of the data than the clean rows do. Checked while building
issue 22 on the 25 LTS-failing seeds of (n, p, eps) = (100, 1, .4), (1000, 2, .3),
(100, 5, .4), (30, 3, .4), (1000, 3, .4): the 50%-breakdown bisquare M-scale (the
S-estimator's criterion, Rousseeuw and Yohai 1984; Salibian-Barrera and Yohai 2006) of
the masked fit was smaller than that of the clean fit (OLS on the clean rows, or LTS
concentrated from it) in all 25, so an S- or MM-start would choose the masked fit too.
Theil-Sen, a median of elemental fits rather than a majority criterion, ranks better
there (the cluster's elemental fits scatter, as its rows are not coplanar).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import HuberRegressor, LinearRegression, RANSACRegressor, TheilSenRegressor
from sklearn.metrics import average_precision_score, roc_auc_score

from benchmarks._record import machine, record

PS = (1, 2, 3, 5)
NS = (30, 100, 1000, 10000)
EPSS = (0.1, 0.2, 0.3, 0.4)
VERTICAL = 0.05
GOAL = 0.98
METHODS = ("EM", "EM legacy", "LTS", "Huber", "RANSAC", "TheilSen", "OLS")


def masked(n: int, p: int, eps: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The masking fixture (module docstring): ``X`` (n, p), ``y`` (n,), planted labels (bool, n)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    w = rng.normal(size=p) * 2
    y = X @ w + 1 + rng.normal(size=n)
    out = np.zeros(n, bool)
    nb = int(eps * n)
    idx = rng.choice(n, nb, replace=False)
    X[idx] = 10 + 0.5 * rng.normal(size=(nb, p))
    y[idx] = -3 * np.abs(X[idx] @ w).mean() - 20 + 0.5 * rng.normal(size=nb)
    rest = np.setdiff1d(np.arange(n), idx)
    nv = int(VERTICAL * n)
    v = rng.choice(rest, nv, replace=False)
    y[v] += rng.choice([-1, 1], nv) * rng.uniform(10, 20, nv)
    out[idx] = True
    out[v] = True
    return X, y, out


def _abs_resid(model, X, y) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Huber's / TheilSen's convergence warnings: a benchmark, not the product
        model.fit(X, y)
    return np.abs(y - model.predict(X))


def scores(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[dict, dict]:
    """Every method's outlier score on one data set, and diagnostics of the LTS fit."""
    from dpcore.detect import RobustRegressionDetector
    from dpcore.detect import robust_start

    new = RobustRegressionDetector(random_state=seed).fit(X, y)
    Z, ys = new._design(X), new._std_y(y)
    out = {"EM": new.decision_scores_,
           "EM legacy": RobustRegressionDetector(random_state=seed, start="legacy").fit(X, y).decision_scores_,
           "LTS": np.abs(ys - Z @ new._lts_beta),
           "Huber": _abs_resid(HuberRegressor(), X, y),
           "OLS": _abs_resid(LinearRegression(), X, y),
           "TheilSen": _abs_resid(TheilSenRegressor(random_state=seed), X, y)}
    try:
        out["RANSAC"] = _abs_resid(RANSACRegressor(random_state=seed), X, y)
    except ValueError:  # no consensus set found: scored as chance
        out["RANSAC"] = np.zeros(len(y))
    h = robust_start._lts_h(*Z.shape)
    found, _ = robust_start._lts_objective(Z, ys, new._lts_beta[None], h)
    return out, {"Z": Z, "ys": ys, "h": h, "found": float(found[0])}


def lts_failure_kind(diag: dict, clean: np.ndarray) -> str:
    """'criterion' when the oracle-started LTS fit has a larger trimmed objective than the one found, else 'search'."""
    from dpcore.detect import robust_start

    Z, ys, h = diag["Z"], diag["ys"], diag["h"]
    b0 = np.linalg.lstsq(Z[clean], ys[clean], rcond=None)[0]
    _, oo = robust_start._concentrate(Z, ys, b0[None], h, robust_start._C_STEPS_MAX)
    return "criterion" if oo[0] >= diag["found"] else "search"


def run(seeds: int) -> dict:
    res = {}
    for p in PS:
        for n in NS:
            if n < 3 * p + 5:
                continue
            for eps in EPSS:
                t0 = time.perf_counter()
                roc = {m: [] for m in METHODS}
                pr = {m: [] for m in METHODS}
                kinds = []
                for seed in range(seeds):
                    X, y, lab = masked(n, p, eps, seed)
                    sc, diag = scores(X, y, seed)
                    for m in METHODS:
                        roc[m].append(roc_auc_score(lab, sc[m]))
                        pr[m].append(average_precision_score(lab, sc[m]))
                    if roc["LTS"][-1] < GOAL:
                        kinds.append(lts_failure_kind(diag, ~lab))
                res[(p, n, eps)] = {"roc": {m: np.array(v) for m, v in roc.items()},
                                    "pr": {m: np.array(v) for m, v in pr.items()}, "lts_fail": kinds,
                                    "time": time.perf_counter() - t0}
                r = res[(p, n, eps)]["roc"]
                print(f"p={p} n={n:>5} eps={eps}: " + " ".join(f"{m}={r[m].mean():.3f}" for m in METHODS)
                      + f" | {time.perf_counter() - t0:.1f}s", flush=True)
    return res


def markdown(res: dict, seeds: int, quick: bool, seconds: float) -> str:
    md = ["## Detect: masking by bad leverage points (issue 22)\n"]
    md.append(
        f"`benchmarks/detect_leverage.py{' --quick' if quick else ''}`; {machine()}; whole run {seconds:.0f} s; "
        f"{seeds} seeds per cell; one BLAS thread. Fixture, methods and goal: the script's docstring. In short: "
        "a tight cluster of bad leverage points (a fraction eps of the rows at X ≈ 10, y far below the plane) plus "
        "5% vertical outliers ±U(10, 20) on y = X·w + 1 + N(0, 1); planted = both. EM = the detector's default "
        "(`start=\"auto\"`: FAST-LTS start, inlier-driven EM), EM legacy = `start=\"legacy\"` (the start before "
        "issue 22), LTS = |residual| of the detector's own FAST-LTS fit; Huber, RANSAC, TheilSen, OLS = scikit-learn "
        "defaults, |residual| (TheilSen: at most 10,000 random (p+1)-subsets, a subsample for large n).\n"
    )
    md.append("### Goal: EM ROC AUC ≥ 0.98 wherever LTS reaches it (means over seeds)\n")
    md.append("| p | n | eps | LTS ROC | EM ROC (min) | EM legacy ROC (min) | verdict |")
    md.append("|---|---|---|---|---|---|---|")
    met = missed = exempt = 0
    for (p, n, eps), r in res.items():
        roc = r["roc"]
        lts, em, leg = roc["LTS"], roc["EM"], roc["EM legacy"]
        if lts.mean() >= GOAL:
            ok = em.mean() >= GOAL
            met += ok
            missed += not ok
            verdict = "met" if ok else "**NOT met**"
        else:
            exempt += 1
            k = r["lts_fail"]
            verdict = (f"LTS < 0.98 (not judged): {len(k)} seed(s) below 0.98, LTS criterion prefers the masked fit "
                       f"in {k.count('criterion')}, search missed in {k.count('search')}")
        md.append(f"| {p} | {n} | {eps} | {lts.mean():.3f} | {em.mean():.3f} ({em.min():.3f}) | "
                  f"{leg.mean():.3f} ({leg.min():.3f}) | {verdict} |")
    md.append("")
    md.append(f"Goal cells: **{met} met, {missed} not met**; {exempt} cells where LTS itself is below 0.98 "
              "(not judged; EM is reported there too).\n")
    md.append("### All methods: mean ROC AUC / mean PR AUC\n")
    md.append("| p | n | eps | " + " | ".join(METHODS) + " | s |")
    md.append("|---|---|---|" + "---|" * (len(METHODS) + 1))
    for (p, n, eps), r in res.items():
        cells = [f"{r['roc'][m].mean():.3f} / {r['pr'][m].mean():.3f}" for m in METHODS]
        md.append(f"| {p} | {n} | {eps} | " + " | ".join(cells) + f" | {r['time']:.0f} |")
    return "\n".join(md)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 seeds per cell")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 20, quick 5)")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    seeds = args.seeds if args.seeds else (5 if args.quick else 20)
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    with threadpool_limits(limits=1):
        res = run(seeds)
    md = markdown(res, seeds, args.quick, time.perf_counter() - t0)
    print(md)
    if not args.dry_run:
        record("detect_leverage", md)


if __name__ == "__main__":
    main()
