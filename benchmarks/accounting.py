"""Composition accounting for a release (issue 16, part 4): plain sum vs PLD, RDP and zCDP.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/accounting.py [--spec specs/demo.yaml] [--dry-run]``.
Writes the ``accounting`` section of BENCHMARKS.md via :func:`benchmarks._record.record`
(every figure is computed here; ``--dry-run`` prints the section without recording it).
Needs ``dp-accounting`` (the ``bench`` extra: ``pip install -e ".[bench]"``; a benchmark-only dependency).

What it does
------------
1. Builds the list of charges one release of the spec makes, from the spec
   (:func:`dpcore.release.spec.load_spec`) and the steps' own public checks and
   mechanisms -- no data is read, nothing is charged:

   * ``record_counts``: discrete Laplace of scale ``noise_scale()`` on the
     pair (accepted, input rows), L1 sensitivity 2, add/remove, pure epsilon;
   * ``outlier_subspaces``: ``h`` exponential-mechanism draws at
     ``epsilon_select / h`` each (weights ``e^{eps u / 2}``, ``Delta u = 1``),
     replace-one (the union relation), pure epsilon;
   * ``outlier_count`` (``h`` of them): the smooth-sensitivity Gaussian, whose
     sigma depends on the data -- only its ``(epsilon, delta)`` guarantee is
     usable (with ``method: global`` it is a Gaussian with public sigma and
     sensitivity ``GS_up``: shown as a what-if);
   * ``coco_level<l>``: discrete Laplace of scale ``noise_scale(l)`` on the
     level's cells, L1 sensitivity ``sensitivity()``, add/remove, pure epsilon;
   * ``pcor`` (one per target, at most ``len(record_ids) + from_detector``):
     OCDP, ``aiq`` (one batch): sensitive privacy. **Neither is a DP notion**:
     no PLD, RDP or zCDP statement exists for them, so every accountant below
     can only add their epsilon to its DP total, as the ledger does.

2. States every charge under the budget's neighbour relation, the way the
   ledger does (:func:`dpcore.budget.amounts.charge_under`). With a ``replace-one``
   budget an add/remove mechanism is a group of two add/remove steps; the
   ledger charges ``(2 eps, (1 + e^eps) delta)``. The accountants use the same
   conversion at the level of the mechanism: for additive discrete Laplace
   noise the replace-one shift is the sum of the two add/remove shifts, so its
   L1 norm is at most ``2 Delta`` (its worst case is checked below); pure
   epsilon becomes ``2 eps``; zCDP ``rho`` becomes ``4 rho`` (group privacy
   ``k^2 rho``, the same as ``(2 eps)^2 / 2``).

3. Totals, for 1, 2 and 5 releases of the same spec (the budget composes over
   the dataset's whole history), of

   (a) the plain sum the ledger records today (exact fractions, each charge
       rounded up to 10^-18 units; cross-checked against a real
       :class:`~dpcore.budget.ledger.PrivacyLedger` in a temporary warehouse);
   (b) PLD composition with ``dp_accounting.pld`` (pessimistic estimates):
       discrete Laplace PLDs at the noise scale actually used, the
       exponential mechanism as a pure-epsilon pair, the smooth Gaussian as the
       worst-case pair of its ``(eps, delta)``; and the same with every charge
       as the worst-case pair of its charged ``(eps, delta)`` (what a ledger
       knowing only the charged numbers could do);
   (c) RDP (exact Renyi divergences of the discrete Laplace shifts; the
       exponential mechanism as ``min(RR_eps, alpha eps^2 / 8)``), converted
       with ``dp_accounting.rdp``'s ``compute_epsilon``; the smooth Gaussian
       has no RDP bound and is added by basic composition, its delta taken off
       the target delta first;
   (d) zCDP: ``rho = eps^2 / 2`` (pure eps), ``eps^2 / 8`` (exponential
       mechanism, bounded range), ``Delta^2 / (2 sigma^2)`` (Gaussian), then
       ``eps(delta) = rho + 2 sqrt(rho ln(1/delta))``; smooth Gaussian as in (c).

   at the budget's delta, plus the releases that fit the spec's cap under each.
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._record import machine, record  # noqa: E402
from dpcore.budget.amounts import PrivacyCost, charge_under  # noqa: E402
from dpcore.budget.ledger import ChargeRequest, PrivacyLedger  # noqa: E402
from dpcore.mechanisms.aiq import AnomalyIdentification  # noqa: E402
from dpcore.mechanisms.outlier_count import OutlierCountMechanism  # noqa: E402
from dpcore.mechanisms.row_counts import L1_SENSITIVITY, InputRowCounts  # noqa: E402
from dpcore.mechanisms.neighbors import scale_by_bounds  # noqa: E402
from dpcore.release.spec import load_spec  # noqa: E402
from dpcore.steps.aiq import check_aiq  # noqa: E402
from dpcore.steps.coco import check_coco  # noqa: E402
from dpcore.steps.outlier_counts import _checked as check_outlier_counts  # noqa: E402
from dpcore.steps.pcor import check_pcor  # noqa: E402
from dpcore.storage.warehouse import Warehouse  # noqa: E402

try:
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
    import dp_accounting  # noqa: F401
    from importlib.metadata import version as _version
    DP_ACCOUNTING_VERSION = _version("dp-accounting")
except ImportError as exc:  # pragma: no cover - benchmark-only dependency
    raise SystemExit(
        f"benchmarks/accounting.py needs dp-accounting ({exc}); install the bench extra: "
        "python -m pip install -e '.[bench]' (or python -m pip install dp-accounting)"
    ) from None

#: PLD discretisation (dp-accounting's default): the privacy loss is rounded up to multiples of it.
PLD_INTERVAL = 1e-4
#: Releases of the same spec composed (the brief's 1, 2, 5) and further ones for illustration.
RELEASES = (1, 2, 5)
ILLUSTRATIVE = (10, 20, 50)
#: Renyi orders: dense near 1, then integers and powers of two.
ORDERS = np.unique(np.concatenate([
    1 + np.arange(1, 100) / 100.0, np.arange(2, 20.01, 0.25), np.arange(21, 257), 2.0 ** np.arange(9, 13),
]))
#: "Material" gain (issue 16): the composition total at the budget's delta at least this much below the plain sum.
MATERIAL = 0.20


# --------------------------------------------------------------------------- charges


@dataclass(frozen=True)
class Charge:
    """One ledger charge of a release, with what the accountants need to know of its mechanism.

    ``model``:
      * ``dlap`` -- additive discrete Laplace noise of ``scale`` on integer cells, stated L1 sensitivity ``l1``
        under ``neighbour``, ``cells`` cells (``None``: more than any shift needs);
      * ``em`` -- ``draws`` exponential-mechanism draws of ``eps_draw`` each (``e^{eps u / (2 Delta u)}``);
      * ``gauss`` -- Gaussian noise of public ``sigma``, L2 sensitivity ``l2``;
      * ``eps_delta`` -- only the ``(epsilon, delta)`` guarantee is usable (data-dependent sigma);
      * ``summed`` -- not a DP notion (``ocdp``, ``sp``): can only be added.
    ``group`` is 2 when the stated relation is add/remove and the budget's replace-one.
    """

    step: str
    mechanism: str
    notion: str
    neighbour: str
    stated: PrivacyCost
    charged: PrivacyCost
    model: str
    group: int
    scale: float | None = None
    l1: int | None = None
    cells: int | None = None
    eps_draw: Fraction | None = None
    draws: int = 0
    sigma: float | None = None
    l2: float | None = None

    @property
    def shift(self) -> int:
        """L1 norm bound of the noise-free change under the budget's relation (``dlap`` only)."""
        return int(self.group * self.l1)


def _charge(step, mech_name, notion, stated_nb, stated, budget_nb, model, **kw) -> Charge:
    charged = charge_under(stated, stated_nb, budget_nb)
    group = 1 if stated_nb == budget_nb else 2
    return Charge(step, mech_name, notion, stated_nb, stated, charged, model, group, **kw)


def release_charges(spec, global_counts: bool = False) -> list[Charge]:
    """The charges one release of ``spec`` makes, from the spec and the steps' public checks only.

    ``global_counts``: model ``outlier_count`` with ``method: global`` (a what-if: public sigma).
    """
    nb = str(getattr(spec.budget.neighbour, "value", spec.budget.neighbour))
    st = spec.steps
    out: list[Charge] = []
    rc = st.record_counts
    if getattr(rc, "enabled", True):
        m = InputRowCounts(rc.epsilon)
        out.append(_charge("record_counts", m.name, m.notion, m.neighbour, m.privacy_map(1), nb, "dlap",
                           scale=m.noise_scale(), l1=L1_SENSITIVITY, cells=2))
    if st.aiq.enabled:
        mech = check_aiq(spec)
        cfg = st.aiq
        attrs = list(cfg.attributes or spec.public_schema.numeric)
        n_ids = len(cfg.record_ids) + cfg.from_detector
        cost = mech.batch_cost(n_ids, None) if n_ids else None
        if cfg.points:
            lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
            highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
            pts = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
            pc = mech.batch_cost(len(pts), AnomalyIdentification.batch_m(scale_by_bounds(pts, lows, highs), cfg.r))
            cost = pc if cost is None else cost + pc
        out.append(_charge("aiq", f"aiq-{cfg.mechanism}", mech.notion, mech.neighbour, cost, nb, "summed"))
    if st.outlier_counts.enabled:
        cfg = st.outlier_counts
        _attrs, _cands, select, counts, _split = check_outlier_counts(spec)
        count = counts[max(counts)]  # the spec's subspace dimension (the largest candidate dimension)
        out.append(_charge("outlier_subspaces", "top-h-subspaces (exponential mechanism)", select.notion,
                           select.neighbour, select.privacy_map(), nb, "em",
                           eps_draw=select.per_draw_epsilon, draws=int(select.h)))
        if global_counts:
            count = OutlierCountMechanism(k=cfg.k, r=cfg.r, epsilon=_split.epsilon_count, delta=cfg.delta_count,
                                          method="global", size_limit=cfg.size_limit)
        for _ in range(int(cfg.h)):
            d = max(counts)
            if count.method == "global_laplace":  # public scale G / eps on one integer cell, shift <= G
                out.append(_charge("outlier_count", count.name, count.notion, count.neighbour, count.privacy_map(),
                                   nb, "dlap", scale=count.laplace_scale(d), l1=count.global_sensitivity_upper(d),
                                   cells=1))
            elif count.method == "global":
                out.append(_charge("outlier_count", count.name, count.notion, count.neighbour, count.privacy_map(),
                                   nb, "gauss", sigma=count.global_sigma(d),
                                   l2=float(count.global_sensitivity_upper(d))))
            else:
                out.append(_charge("outlier_count", count.name, count.notion, count.neighbour, count.privacy_map(),
                                   nb, "eps_delta"))
    if st.coco.enabled:
        inputs, mech = check_coco(spec)
        for level in mech.levels_measured(inputs.hierarchy):
            out.append(_charge(f"coco_level{level}", f"coco-{mech.method}", mech.notion, mech.neighbour,
                               mech.level_cost(level), nb, "dlap", scale=mech.noise_scale(level),
                               l1=mech.sensitivity(), cells=None))
    if st.pcor.enabled:
        cfg = st.pcor
        mech = check_pcor(spec)[4]
        for _ in range(len(dict.fromkeys(cfg.record_ids)) + int(cfg.from_detector)):
            out.append(_charge("pcor", f"pcor-{cfg.sampler}", mech.notion, mech.neighbour, mech.cost(), nb, "summed"))
    return out


# --------------------------------------------------------------------------- (a) plain sum


def plain_sum(charges: list[Charge], k: int) -> PrivacyCost:
    """What the ledger records for ``k`` releases: the sum of the charged units (each rounded up)."""
    eu = sum(c.charged.units[0] for c in charges) * k
    du = sum(c.charged.units[1] for c in charges) * k
    return PrivacyCost.from_units(eu, du)


def ledger_check(charges: list[Charge], k: int, budget_nb: str) -> PrivacyCost:
    """Reserve the charges of ``k`` releases in a real ledger (temporary warehouse) and read what it spent."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = PrivacyLedger(Warehouse(Path(tmp) / "acct.duckdb"))
        ledger.ensure_budget("acct", PrivacyCost(10**6, Fraction(1, 2)), budget_nb)
        for r in range(k):
            for i, c in enumerate(charges):
                ledger.reserve(ChargeRequest(
                    dataset="acct", dataset_hash="benchmark", release_id=f"r{r}", step=c.step,
                    mechanism=c.mechanism, cost=c.stated, notion=c.notion, params={"i": i}, neighbour=c.neighbour,
                    publishable=False,
                ))
        return ledger.spent_exact("acct")


def summed_part(charges: list[Charge]) -> float:
    """Epsilon of the charges no DP accountant can compose (OCDP, SP), per release."""
    return float(sum((c.charged.epsilon for c in charges if c.model == "summed"), Fraction(0)))


# --------------------------------------------------------------------------- (b) PLD


def _pp(eps: float, delta: float = 0.0):
    return pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(eps, delta),
                                           value_discretization_interval=PLD_INTERVAL)


def _dlap(t: float, sensitivity: int):
    return pld_lib.from_discrete_laplace_mechanism(t, sensitivity=sensitivity, pessimistic_estimate=True,
                                                   value_discretization_interval=PLD_INTERVAL)


def _partitions(n: int, max_parts: int | None, largest: int | None = None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
        return
    if max_parts == 0:
        return
    for first in range(min(n, largest), 0, -1):
        for rest in _partitions(n - first, None if max_parts is None else max_parts - 1, first):
            yield (first,) + rest


def dlap_loss_pmf(t: float, shift: int) -> np.ndarray:
    """Exact privacy-loss pmf of DLap(t) against DLap(t) + ``shift``: entry ``j`` is P(loss = (j - shift) t).

    Loss ``t(|x - shift| - |x|)`` = ``shift t`` for ``x <= 0``, ``(shift - 2x) t`` for ``0 < x < shift``,
    ``-shift t`` for ``x >= shift`` (pmf ``tanh(t/2) e^{-t|x|}``).
    """
    s = int(shift)
    pmf = np.zeros(2 * s + 1)
    pmf[2 * s] = math.exp(t) / (1 + math.exp(t))                 # x <= 0
    pmf[0] += math.exp(-t * (s - 1)) / (1 + math.exp(t))          # x >= s
    for x in range(1, s):
        pmf[2 * s - 2 * x] += math.tanh(t / 2) * math.exp(-t * x)
    return pmf


def _hockey(pmf: np.ndarray, offset: int, t: float, eps: np.ndarray) -> np.ndarray:
    """``H_{e^eps} = sum_m P(m t) (1 - e^{eps - m t})_+`` for a loss pmf on ``(j - offset) t``."""
    m = (np.arange(len(pmf)) - offset) * t
    return np.sum(pmf[None, :] * np.clip(1 - np.exp(eps[:, None] - m[None, :]), 0, None), axis=1)


@functools.lru_cache(maxsize=None)
def single_shift_dominates(t: float, shift: int, cells: int | None) -> tuple[bool, int]:
    """Whether the one-cell shift ``shift`` dominates every split of it over ``cells`` cells.

    A dominating pair must have the larger hockey-stick divergence at every ``e^eps``
    (Zhu, Dong & Wang 2022); the pairs are symmetric (reflect each cell), so ``eps >= 0`` suffices.
    All losses are multiples of ``t`` and on each interval between them the difference of two
    curves is ``a - b e^eps``, monotone, so comparing them at ``eps = m t``, ``m = 0..shift``,
    decides it (exact pmfs, float64 arithmetic). Returns (verdict, splits checked).
    """
    eps = np.arange(shift + 1) * t
    single = _hockey(dlap_loss_pmf(t, shift), shift, t, eps)
    n = 0
    for parts in _partitions(shift, cells):
        if len(parts) == 1:
            continue
        n += 1
        pmf = np.ones(1)
        for s in parts:
            pmf = np.convolve(pmf, dlap_loss_pmf(t, s))
        if np.any(_hockey(pmf, shift, t, eps) > single * (1 + 1e-12) + 1e-300):
            return False, n
    return True, n


def charge_pld(c: Charge, worst_case_only: bool = False):
    """A pessimistic PLD dominating the charge under the budget's relation (``None`` for ``summed``)."""
    if c.model == "summed":
        return None
    if worst_case_only or c.model == "eps_delta":
        return _pp(float(c.charged.epsilon), float(c.charged.delta))
    if c.model == "dlap":
        t = 1.0 / c.scale
        ok, _ = single_shift_dominates(t, c.shift, c.cells)
        return _dlap(t, c.shift) if ok else _pp(c.shift * t)  # fallback: the pure eps worst case
    if c.model == "em":
        p = _pp(float(c.group * c.eps_draw))
        return p.self_compose(c.draws) if c.draws > 1 else p
    if c.model == "gauss":
        if c.group != 1:
            raise NotImplementedError("a Gaussian stated under add/remove against a replace-one budget")
        return pld_lib.from_gaussian_mechanism(c.sigma, sensitivity=c.l2, pessimistic_estimate=True,
                                               value_discretization_interval=PLD_INTERVAL)
    raise ValueError(c.model)


def release_pld(charges: list[Charge], worst_case_only: bool = False):
    plds = [p for p in (charge_pld(c, worst_case_only) for c in charges) if p is not None]
    total = plds[0]
    for p in plds[1:]:
        total = total.compose(p)
    return total


# --------------------------------------------------------------------------- (c) RDP


def rdp_rr(eps: float, a: np.ndarray) -> np.ndarray:
    """Renyi divergence of binary randomized response with ``eps`` (the worst eps-DP pair), order ``a > 1``."""
    num = np.logaddexp(a * eps, (1 - a) * eps) - np.log1p(np.exp(eps))
    return num / (a - 1)


def rdp_dlap(t: float, shift: int, a: np.ndarray) -> np.ndarray:
    """Exact Renyi divergence of DLap(t) and DLap(t) + ``shift`` (pmf ``tanh(t/2) e^{-t|x|}``), order ``a > 1``.

    Privacy loss ``L(x) = t(|x - shift| - |x|)``: ``t shift`` for ``x <= 0``, ``t(shift - 2x)`` for
    ``0 < x < shift``, ``-t shift`` for ``x >= shift``; ``D_a = log E[e^{(a-1) L}] / (a - 1)``.
    """
    s = int(shift)
    logp_le0 = t - math.log1p(math.exp(t))                        # P(X <= 0) = e^t / (1 + e^t)
    logp_ges = -t * (s - 1) - math.log1p(math.exp(t))             # P(X >= s) = e^{-t(s-1)} / (1 + e^t)
    terms = [logp_le0 + (a - 1) * t * s, logp_ges - (a - 1) * t * s]
    log_tanh = math.log(math.tanh(t / 2))
    for x in range(1, s):
        terms.append(log_tanh - t * x + (a - 1) * t * (s - 2 * x))
    return np.logaddexp.reduce(np.vstack(terms), axis=0) / (a - 1)


def charge_rdp(c: Charge) -> np.ndarray | None:
    """RDP curve (over :data:`ORDERS`) under the budget's relation; ``None`` when there is none."""
    a = ORDERS
    if c.model in ("summed", "eps_delta"):
        return None
    if c.model == "dlap":
        t = 1.0 / c.scale
        ok, _ = single_shift_dominates(t, c.shift, c.cells)
        return rdp_dlap(t, c.shift, a) if ok else rdp_rr(c.shift * t, a)
    if c.model == "em":
        e = float(c.group * c.eps_draw)
        return c.draws * np.minimum(rdp_rr(e, a), a * e * e / 8)
    if c.model == "gauss":
        return a * c.l2**2 / (2 * c.sigma**2)
    raise ValueError(c.model)


# --------------------------------------------------------------------------- (d) zCDP


def charge_rho(c: Charge) -> float | None:
    if c.model in ("summed", "eps_delta"):
        return None
    if c.model == "dlap":
        return (c.shift / c.scale) ** 2 / 2  # pure eps = shift / scale (>= the stated eps' noise: rounded up)
    if c.model == "em":
        return c.draws * float(c.group * c.eps_draw) ** 2 / 8
    if c.model == "gauss":
        return c.l2**2 / (2 * c.sigma**2)
    raise ValueError(c.model)


# --------------------------------------------------------------------------- totals


@dataclass
class Totals:
    """Total epsilon (at a delta) of k releases under each accountant; ``inf`` where no delta is left."""

    k: int
    plain: PrivacyCost
    pld: float
    pld_worst: float
    pld_at_plain_delta: float
    rdp: float
    zcdp: float
    dp_plain: float
    dp_pld: float
    dp_rdp: float
    dp_zcdp: float


def totals(charges: list[Charge], k: int, delta: float, base_pld=None, base_pld_worst=None) -> Totals:
    plain = plain_sum(charges, k)
    other = summed_part(charges) * k
    dp_plain = float(plain.epsilon) - other
    pld1 = base_pld if base_pld is not None else release_pld(charges)
    pldw1 = base_pld_worst if base_pld_worst is not None else release_pld(charges, worst_case_only=True)
    pk = pld1.self_compose(k) if k > 1 else pld1
    pkw = pldw1.self_compose(k) if k > 1 else pldw1
    dp_pld = pk.get_epsilon_for_delta(delta)
    dp_pld_w = pkw.get_epsilon_for_delta(delta)
    dp_pld_plain_delta = pk.get_epsilon_for_delta(float(plain.delta)) if plain.delta else pk.get_epsilon_for_delta(0)
    # (c), (d): the (eps, delta)-only charges are added by basic composition, their delta taken off first
    ed = [c for c in charges if c.model == "eps_delta"]
    ed_eps = float(sum((c.charged.epsilon for c in ed), Fraction(0))) * k
    ed_delta = float(sum((c.charged.delta for c in ed), Fraction(0))) * k
    left = delta - ed_delta
    curves = [r for r in (charge_rdp(c) for c in charges) if r is not None]
    rdp_total = k * np.sum(curves, axis=0) if curves else np.zeros_like(ORDERS)
    rhos = [r for r in (charge_rho(c) for c in charges) if r is not None]
    rho = k * sum(rhos)
    if left > 0:
        dp_rdp = rdp_lib.compute_epsilon(ORDERS, rdp_total, left)[0] + ed_eps
        dp_zcdp = rho + 2 * math.sqrt(rho * math.log(1 / left)) + ed_eps
    else:
        dp_rdp = dp_zcdp = math.inf
    return Totals(k, plain, dp_pld + other, dp_pld_w + other, dp_pld_plain_delta + other, dp_rdp + other,
                  dp_zcdp + other, dp_plain, dp_pld, dp_rdp, dp_zcdp)


def releases_that_fit(charges: list[Charge], cap: PrivacyCost, base_pld, base_pld_worst, up_to: int = 12) -> dict:
    """Largest number of releases whose total fits ``cap`` under each accountant (eps at the cap's delta)."""
    fit = {"plain": 0, "pld": 0, "pld_worst": 0, "rdp": 0, "zcdp": 0}
    for k in range(1, up_to + 1):
        t = totals(charges, k, float(cap.delta), base_pld, base_pld_worst)
        eps_cap = float(cap.epsilon)
        if t.plain.fits_within(cap):
            fit["plain"] = k
        for name in ("pld", "pld_worst", "rdp", "zcdp"):
            if getattr(t, name) <= eps_cap:
                fit[name] = k
        if t.pld > eps_cap and not t.plain.fits_within(cap) and t.rdp > eps_cap and t.zcdp > eps_cap:
            break
    return fit


# --------------------------------------------------------------------------- report


def _f(x: float, nd: int = 3) -> str:
    return "∞" if not math.isfinite(x) else f"{x:.{nd}f}"


def _pct(x: float, base: float) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{100 * (x - base) / base:+.1f}%"


def _model_text(c: Charge) -> str:
    if c.model == "dlap":
        ok, n = single_shift_dominates(1.0 / c.scale, c.shift, c.cells)
        how = "one-cell shift" if ok else "pure-eps worst case (a split shift is worse)"
        return (f"discrete Laplace, scale {c.scale:g}, L1 shift ≤ {c.shift} ({how}; {n} split(s) checked)")
    if c.model == "em":
        return f"{c.draws} exponential-mechanism draw(s) at eps {float(c.eps_draw):g} (pure eps; zCDP eps²/8)"
    if c.model == "eps_delta":
        return "smooth-sensitivity noise: data-dependent scale, (eps, delta) only"
    if c.model == "gauss":
        return f"Gaussian, sigma {c.sigma:.4g}, L2 sensitivity {c.l2:g} (rho {c.l2**2 / (2 * c.sigma**2):.3g})"
    return f"not DP ({c.notion}): summed"


def _saving(x: float, base: float) -> float:
    return (base - x) / base if math.isfinite(x) else -math.inf


def build_section(spec_path: Path, spec, charges, results, whatif_results, illus, whatif_illus, fit, whatif_fit,
                  ledger_ok, elapsed: float) -> str:
    nb = str(getattr(spec.budget.neighbour, "value", spec.budget.neighbour))
    cap = PrivacyCost(spec.budget.epsilon, spec.budget.delta)
    delta = float(cap.delta)
    one = results[0]
    total1 = float(one.plain.epsilon)
    other = summed_part(charges)
    dp_eps = [float(c.group * c.eps_draw) if c.model == "em" else float(c.charged.epsilon)
              for c in charges if c.model != "summed"]
    attrs_pin = [r for r in (_requires("dp-accounting") or []) if r.lower().startswith("attrs")]
    ks = ", ".join(str(t.k) for t in results)
    lines = [
        "## Composition accounting: plain sum vs PLD / RDP / zCDP (issue 16, part 4)",
        "",
        f"`PYTHONPATH=. .venv/bin/python benchmarks/accounting.py --spec {spec_path.relative_to(ROOT)}` — "
        f"{machine()}; whole run {elapsed:.0f} s; dp-accounting {DP_ACCOUNTING_VERSION} (benchmark-only, bench extra), "
        f"PLD discretisation {PLD_INTERVAL:g}, pessimistic estimates.",
        "",
        f"Release `{spec.release_id}` of `{spec.dataset.name}`; the charges are derived from the spec and the steps' "
        "own mechanisms (privacy maps, noise scales); no data is read. Budget: cap "
        f"(eps {float(cap.epsilon):g}, delta {delta:g}) under **{nb}** neighbours. Every accountant works under the "
        "budget's relation with the ledger's conversion (`charge_under`): an add/remove mechanism against a "
        "replace-one budget is a group of two add/remove steps; the ledger charges (2 eps, (1 + e^eps) delta). For "
        "additive discrete Laplace noise the replace-one change is the sum of the two add/remove changes (L1 at most "
        "2 Delta), and the accountants use the one-cell shift of that size after checking that it dominates every "
        "split of it over the cells (exact loss pmfs, hockey-stick curves compared at every loss atom); pure eps "
        "becomes 2 eps, zCDP rho becomes 4 rho.",
        "",
        "### Charges of one release",
        "",
        "| step | notion | stated under | stated (eps, delta) | charged (eps, delta) | accounting model |",
        "|---|---|---|---|---|---|",
    ]
    for c in charges:
        lines.append(
            f"| {c.step} | {c.notion} | {c.neighbour} | ({float(c.stated.epsilon):g}, {float(c.stated.delta):g}) | "
            f"({float(c.charged.epsilon):g}, {float(c.charged.delta):g}) | {_model_text(c)} |"
        )
    lines += [
        "",
        f"Plain sum of one release: eps **{total1:g}**, delta {float(one.plain.delta):g}; of it, "
        f"eps {other:g} ({100 * other / total1:.0f}%) is OCDP (PCOR) and sensitive privacy (AIQ). Those are not DP "
        "notions and have no PLD, RDP or zCDP statement, so every accountant below can only add them, as the ledger "
        "does. Cross-check: a real `PrivacyLedger` (temporary warehouse) given the same charge requests for "
        f"{ks} releases records exactly these plain sums: **{ledger_ok}**.",
        "",
        f"### Total eps at the budget's delta ({delta:g}), k releases of the spec",
        "",
        "Each cell: eps (change against the plain sum). The plain-sum row shows the delta it spends; the PLD rows "
        f"may use all of {delta:g}; RDP and zCDP get what the (eps, delta)-only smooth Gaussians leave of it "
        "(∞: nothing left).",
        "",
        "| accountant | " + " | ".join(f"k = {t.k}" for t in results) + " |",
        "|---|" + "---|" * len(results),
        "| (a) plain sum (today's ledger) | " + " | ".join(
            f"{float(t.plain.epsilon):g} (delta {float(t.plain.delta):g})" for t in results) + " |",
    ]
    rows = [
        ("(b) PLD: discrete Laplace PLDs, EM as pure eps, smooth Gaussian as its (eps, delta)", "pld"),
        ("(b') the same PLD at the plain sum's own delta", "pld_at_plain_delta"),
        ("(b'') PLD of every charge as the worst-case pair of its charged (eps, delta) (all a ledger row knows)",
         "pld_worst"),
        ("(c) RDP: exact discrete Laplace, EM min(RR, alpha eps²/8); smooth Gaussians added", "rdp"),
        ("(d) zCDP: rho + 2 sqrt(rho ln(1/delta)); smooth Gaussians added", "zcdp"),
    ]
    for label, attr in rows:
        lines.append(f"| {label} | " + " | ".join(
            f"{_f(getattr(t, attr))} ({_pct(getattr(t, attr), float(t.plain.epsilon))})" for t in results) + " |")
    lines += [
        "",
        "The DP part alone (the charges an accountant can compose; OCDP and SP left out), same delta:",
        "",
        "| accountant | " + " | ".join(f"k = {t.k}" for t in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for label, attr in (("plain sum", "dp_plain"), ("PLD", "dp_pld"), ("RDP", "dp_rdp"), ("zCDP", "dp_zcdp")):
        lines.append(f"| {label} | " + " | ".join(
            f"{_f(getattr(t, attr))} ({_pct(getattr(t, attr), t.dp_plain)})" for t in results) + " |")
    lines += [
        "",
        f"Releases of this spec that fit the cap (eps {float(cap.epsilon):g}, delta {delta:g}): plain sum "
        f"**{fit['plain']}**, PLD **{fit['pld']}** (worst-case pairs {fit['pld_worst']}), RDP {fit['rdp']}, "
        f"zCDP {fit['zcdp']}.",
        "",
        "Past the cap, for scale only (PLD at the plain sum's own delta, which then exceeds the cap's):",
        "",
        "| k | plain sum (eps, delta) | PLD eps at that delta | change |",
        "|---|---|---|---|",
    ]
    for t in illus:
        lines.append(f"| {t.k} | ({float(t.plain.epsilon):g}, {float(t.plain.delta):g}) | "
                     f"{_f(t.pld_at_plain_delta)} | {_pct(t.pld_at_plain_delta, float(t.plain.epsilon))} |")
    lines += [
        "",
        "#### What-if: `outlier_counts.method: global` (a Gaussian with public sigma, so it composes)",
        "",
        "The same release with the two outlier counts made by the global-sensitivity Gaussian (Theorem 1 of seed "
        "002; the same (eps, delta) charge, more noise than the smooth method on typical data):",
        "",
        "| accountant | " + " | ".join(f"k = {t.k}" for t in whatif_results) + " |",
        "|---|" + "---|" * len(whatif_results),
        "| plain sum | " + " | ".join(f"{float(t.plain.epsilon):g} (delta {float(t.plain.delta):g})"
                                      for t in whatif_results) + " |",
    ]
    for label, attr in (("PLD", "pld"), ("PLD at the plain sum's delta", "pld_at_plain_delta"), ("RDP", "rdp"),
                        ("zCDP", "zcdp")):
        lines.append(f"| {label} | " + " | ".join(
            f"{_f(getattr(t, attr))} ({_pct(getattr(t, attr), float(t.plain.epsilon))})" for t in whatif_results)
            + " |")
    lines += [
        "",
        f"Releases that fit the cap in the what-if: plain sum {whatif_fit['plain']}, PLD {whatif_fit['pld']}, "
        f"RDP {whatif_fit['rdp']}, zCDP {whatif_fit['zcdp']}. Past the cap (PLD at the plain sum's delta): "
        + ", ".join(f"k = {t.k}: {_f(t.pld_at_plain_delta)} vs {float(t.plain.epsilon):g} "
                    f"({_pct(t.pld_at_plain_delta, float(t.plain.epsilon))})" for t in whatif_illus) + ".",
    ]
    gain = {name: max(_saving(getattr(t, name), float(t.plain.epsilon)) for t in results)
            for name in ("pld", "pld_at_plain_delta", "pld_worst", "rdp", "zcdp")}
    best_name = max(gain, key=gain.get)
    best_gain = gain[best_name]
    zcdp_worst = min(_saving(t.zcdp, float(t.plain.epsilon)) for t in results if math.isfinite(t.zcdp))
    w_gain = max(max(_saving(getattr(t, n), float(t.plain.epsilon)) for n in ("pld", "rdp")) for t in whatif_results)
    material = best_gain >= MATERIAL
    lines += [
        "",
        "### Decision",
        "",
        f"Largest saving of any accountant over the plain sum at the budget's delta, for k = {ks} releases: "
        f"**{100 * best_gain:.2f}%** ({best_name}); the threshold for a material gain is {100 * MATERIAL:.0f}%. "
        + ("**Material.**" if material else
           "**Not material: not adopted. The ledger keeps the exact plain sum as its only figure.**"),
        "",
    ]
    if material:
        lines.append("The gain is material: adoption needs its own change behind `PrivacyLedger.reserve` "
                     "(this script does not change the ledger).")
        return "\n".join(lines)
    lines += [
        "Why:",
        "",
        f"1. *Little to gain at this scale.* One release makes {len(dp_eps)} DP charges of eps "
        f"{min(dp_eps):g} to {max(dp_eps):g} each (under {nb}) against ln(1/delta) = {math.log(1 / delta):.1f}; "
        "composition beats the plain sum only when many small-eps charges compose (the "
        "eps ~ sqrt(k ln(1/delta)) regime). PLD, the tightest of the three for the pairs it is given, saves at "
        f"most {100 * gain['pld']:.2f}% at the budget's delta ({100 * gain['pld_at_plain_delta']:.2f}% at the "
        f"plain sum's own delta); RDP at most {100 * gain['rdp']:.2f}% (from the exponential mechanism's "
        "bounded-range bound, which the PLD, taking it as pure eps, does not use); the zCDP conversion costs "
        f"more than it saves (at least {100 * -zcdp_worst:.0f}% *more* than the sum). The same number of releases "
        "fits the cap under the plain sum and under PLD. The table past the cap shows where composition starts "
        "to pay.",
        f"2. *The ledger only knows (eps, delta).* Composing the charged (eps, delta) of each row under PLD (b'') "
        f"saves {100 * gain['pld_worst']:.2f}%: any gain needs the mechanism behind each charge (noise "
        "distribution, scale, sensitivity, neighbour shift) recorded and trusted, a new attack surface on the one "
        "spend path.",
        f"3. *Mixed notions.* {100 * other / total1:.0f}% of each release's eps is OCDP (PCOR) and sensitive "
        "privacy (AIQ), which have no PLD, RDP or zCDP form and can only be summed; a saving on the DP part is "
        "diluted by that share (and the budget's total would mix a composed DP figure with summed non-DP ones).",
        "4. *Data-dependent sigma.* The smooth-sensitivity Gaussian's sigma depends on the data, so only its "
        "(eps, delta) can enter an accountant (the worst-case pair in PLD; RDP and zCDP cannot take it at all and "
        "must add it and spend its delta first: at 5 releases no delta is left for their conversion). With the "
        f"global Gaussian (what-if) PLD/RDP would save up to {100 * w_gain:.1f}% and fit "
        f"{max(whatif_fit['pld'], whatif_fit['rdp'])} releases instead of {whatif_fit['plain']}, but the global "
        "method adds more noise to every count, a utility trade the data owner has not asked for.",
        "5. *Exactness.* The ledger is an exact running sum of Fraction-valued charges rounded up to 10^-18 units "
        "and checked against the cap in one transaction. A composed total is not additive: each reservation would "
        "recompose the dataset's whole history, and dp-accounting's float64 FFT convolution has no proved rounding "
        "direction beyond its discretisation, so a figure rounded toward more spend would need its own rigorous "
        "composition code: a large change to the one spend path for the saving above.",
        f"6. *Dependency.* dp-accounting {DP_ACCOUNTING_VERSION} requires {', '.join(attrs_pin) or 'old pins'}; "
        "it stays a benchmark-only dependency (bench extra), not a runtime one.",
        "",
        "Revisit if a spec makes many small-eps DP charges (dozens of per-query Laplace or Gaussian answers) or "
        "releases become frequent and small: rerun this script; PLD with mechanism PLDs recorded per charge is "
        "the accountant to adopt then, behind `PrivacyLedger.reserve`, with the plain sum kept in the report.",
    ]
    return "\n".join(lines)


def _requires(dist: str) -> list[str] | None:
    from importlib.metadata import requires

    try:
        return requires(dist)
    except Exception:  # noqa: BLE001 - metadata is informational here
        return None


def self_checks() -> None:
    """The hand-written RDP curves against dp-accounting's accountant and a brute-force sum."""
    from dp_accounting import dp_event

    for t in (0.05, 0.5, 1.0):
        acc = rdp_lib.RdpAccountant(list(ORDERS), rdp_lib.NeighborRel.REPLACE_ONE)
        acc.compose(dp_event.RandomizedResponseDpEvent(2 / (1 + math.exp(t)), 2))
        assert np.allclose(acc.rdp, rdp_dlap(t, 1, ORDERS), rtol=1e-9), "DLap shift 1 is RR(t)"
        assert np.allclose(rdp_rr(t, ORDERS), rdp_dlap(t, 1, ORDERS), rtol=1e-9)
        x = np.arange(-4000, 4001)
        logp = math.log(math.tanh(t / 2)) - t * np.abs(x)
        for s in (2, 3, 4):
            logq = math.log(math.tanh(t / 2)) - t * np.abs(x - s)
            for a in (1.5, 2.0, 8.0):
                brute = np.logaddexp.reduce(a * logp + (1 - a) * logq) / (a - 1)
                assert abs(brute - rdp_dlap(t, s, np.array([a]))[0]) < 1e-9 * max(1.0, brute), (t, s, a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(ROOT / "specs" / "demo.yaml"))
    ap.add_argument("--dry-run", action="store_true", help="print the section, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    t0 = time.time()
    spec_path = Path(args.spec).resolve()
    spec = load_spec(spec_path)
    nb = str(getattr(spec.budget.neighbour, "value", spec.budget.neighbour))
    cap = PrivacyCost(spec.budget.epsilon, spec.budget.delta)
    delta = float(cap.delta)
    charges = release_charges(spec)
    whatif = release_charges(spec, global_counts=True)

    self_checks()
    ledger_ok = all(ledger_check(charges, k, nb) == plain_sum(charges, k) for k in RELEASES)

    base, base_w = release_pld(charges), release_pld(charges, worst_case_only=True)
    wbase, wbase_w = release_pld(whatif), release_pld(whatif, worst_case_only=True)
    results = [totals(charges, k, delta, base, base_w) for k in RELEASES]
    whatif_results = [totals(whatif, k, delta, wbase, wbase_w) for k in RELEASES]
    illus = [totals(charges, k, delta, base, base_w) for k in ILLUSTRATIVE]
    whatif_illus = [totals(whatif, k, delta, wbase, wbase_w) for k in ILLUSTRATIVE]
    fit = releases_that_fit(charges, cap, base, base_w)
    whatif_fit = releases_that_fit(whatif, cap, wbase, wbase_w)
    for t in results + illus:
        print(f"k={t.k}: plain {float(t.plain.epsilon):g} (delta {float(t.plain.delta):g}) | PLD {t.pld:.4f} | "
              f"PLD@plain-delta {t.pld_at_plain_delta:.4f} | PLD worst {t.pld_worst:.4f} | RDP {t.rdp:.4f} | "
              f"zCDP {t.zcdp:.4f}")
    section = build_section(spec_path, spec, charges, results, whatif_results, illus, whatif_illus, fit,
                            whatif_fit, ledger_ok, time.time() - t0)
    print(section)
    if not args.dry_run:
        record("accounting", section)
        print("\nrecorded section 'accounting' in BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
