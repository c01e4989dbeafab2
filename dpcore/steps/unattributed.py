"""Private step ``unattributed``: the sorted list of group sizes (seed 004, last part; issue 17).

For a group column of the validated table (e.g. the plane of each flight),
publish how large the groups are, largest first, with the labels dropped
(an unattributed histogram): a vector of ``G`` non-negative integers sorted
non-increasing, under pure epsilon-DP for the items (add or remove one row,
which changes one group's size by one).

Public inputs come only from the spec: the group column's public domain (the
list of groups, so ``G`` is public), the public maximum group size ``K``
(larger groups are counted as ``K``, as the report says), the method and
epsilon. ``method: auto`` is resolved by
:func:`dpcore.mechanisms.unattributed.choose_method` from ``(epsilon, G, K,
metric)`` only. The private input is the items' group column; rows whose
group is null belong to no group.

Ledger: one charge, made before the noise is drawn; the stored payload is the
released vector itself (a re-run with the same key returns it without new
noise). The true sizes exist only inside this module's flow-process function.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dpcore.mechanisms.accuracy import Accuracy, level_text
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from ..mechanisms.unattributed import UnattributedHistogramMechanism, accuracy, choose_method
from dpcore.publish.plots import draw_privately, rank_size_plot
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from .common import (PlannedCharge, StepInputError, charge_request, group_item_counts, noise_source, open_stores,
                     validated_table)
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

#: DESIGN.md rule 9 statement for a group domain computed from the protected data.
DERIVED_DOMAIN_NOT_PROTECTED = (
    "The list of groups (the domain of steps.unattributed.group_column, declared groups_provenance: "
    "derived_from_data) was computed from the protected data: the number of groups G, the length of the "
    "released vector, is a function of the data that no charge covers. Only the released sizes are protected."
)


def unattributed_groups(spec: ReleaseSpec) -> list[str]:
    """The public list of groups: the group column's domain as text (its size is ``G``)."""
    cfg = spec.steps.unattributed
    cat = spec.public_schema.categorical.get(cfg.group_column)
    if cat is None or not cat.domain_strings:
        raise StepInputError(f"steps.unattributed.group_column {cfg.group_column!r} must be a categorical attribute "
                             "of schema with a public domain (the list of groups)")
    return list(cat.domain_strings)


def check_unattributed(spec: ReleaseSpec) -> UnattributedHistogramMechanism:
    """Every public check of ``steps.unattributed``; touches no data (the release's preflight).

    Returns
    -------
    UnattributedHistogramMechanism
        Validated, with ``auto`` resolved from ``(epsilon, G, K, metric)``.

    Raises
    ------
    StepInputError
        A group column without a public domain, or parameters the mechanism refuses. Nothing is charged.
    """
    cfg = spec.steps.unattributed
    G = len(unattributed_groups(spec))
    method = cfg.method
    if method == "auto":
        method = choose_method(cfg.epsilon, G, cfg.max_group_size, cfg.metric)
    mech = UnattributedHistogramMechanism(method, cfg.epsilon, cfg.max_group_size, groups=G)
    try:
        mech.validate()
    except ValueError as exc:
        raise StepInputError(f"steps.unattributed: {exc}") from None
    return mech


def _params(spec: ReleaseSpec, mech: UnattributedHistogramMechanism) -> dict[str, Any]:
    cfg = spec.steps.unattributed
    return {"method": cfg.method, "resolved_method": mech.method, "epsilon": cfg.epsilon, "K": cfg.max_group_size,
            "metric": cfg.metric, "group_column": cfg.group_column, "G": len(unattributed_groups(spec))}


def unattributed_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The step's one charge, from the spec alone (:mod:`dpcore.run.cost_plan`)."""
    mech = check_unattributed(spec)
    return [PlannedCharge.of("unattributed", mech, mech.privacy_map(), _params(spec, mech))]


def group_sizes(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> np.ndarray:
    """The true size of every group of the public list (0 for an absent group), clamped at ``K``.

    One SQL aggregate in the warehouse (no rows loaded); internal: never returned outside this module's
    release, logged or stored.
    """
    cfg = spec.steps.unattributed
    groups = unattributed_groups(spec)
    counts = group_item_counts(open_stores(settings).warehouse, validated_table(spec, ingested), cfg.group_column)
    pos = pd.Index(groups).get_indexer(counts["g"])
    if (pos < 0).any():  # cannot happen once check_group_column passed, unless the warehouse was altered since
        raise RuntimeError(f"steps.unattributed.group_column {cfg.group_column!r}: the validated table holds a "
                           "value outside the public domain; the warehouse was altered after validation, re-run it")
    sizes = np.zeros(len(groups), dtype=np.int64)
    sizes[pos] = counts["n"].to_numpy()
    return np.minimum(sizes, cfg.max_group_size)


#: DuckDB types of a validated categorical column whose public domain is all integers (else ``VARCHAR``).
_INTEGER_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT")


def check_group_column(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> None:
    """The pre-charge check of the group column's SQL type (issue 28, section 6): public facts only.

    :func:`group_sizes` reads the group of each row as DuckDB's text of the
    validated column and finds it in the domain's text. Validation types a
    categorical column from its public domain alone (``BIGINT`` when every
    domain value is an integer, else the validated text, ``VARCHAR``:
    :func:`dpcore.validation.cells._typed`), whatever the input's own type (a
    Parquet ``DOUBLE`` ``1.0`` is validated as the text ``1``), so each
    validated value then reads exactly as a domain text. This check refuses,
    before the step's charge, a validated column of any other type (a
    warehouse written by other code): the type is a function of the spec,
    never of the values, and the message names the column and the types only.

    Raises
    ------
    StepInputError
        The validated group column is missing or not of its domain's type; nothing was charged.
    """
    from ..validation import validated_table_name

    cfg = spec.steps.unattributed
    col = cfg.group_column
    unattributed_groups(spec)  # a categorical attribute with a public domain (else a StepInputError naming it)
    domain = spec.public_schema.categorical[col].domain
    integers = all(isinstance(v, int) and not isinstance(v, bool) for v in domain)
    want = _INTEGER_TYPES if integers else ("VARCHAR",)
    found = open_stores(settings).warehouse.query(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = 'validated' AND table_name = ? "
        "AND column_name = ?", [validated_table_name(ingested, spec), col])
    have = str(found[0][0]).upper() if found else None
    if have not in want:
        raise StepInputError(
            f"steps.unattributed.group_column {col!r}: the validated table's column is "
            f"{have or 'missing'}, not {want[0]} as its public domain (schema.categorical.{col}) gives; re-run "
            "validation of this input under this spec. Nothing was charged"
        )


def unattributed_step(spec: ReleaseSpec, settings: Settings, ingested: IngestResult,
                      flow_run_id: str | None = None, plot_dir: Path | None = None) -> StepOutput:
    """Charge once, release the sorted sizes, build the table, report section and plot.

    Cost: ``steps.unattributed.epsilon``, pure epsilon-DP, add/remove one row
    (:meth:`UnattributedHistogramMechanism.privacy_map`).
    """
    cfg = spec.steps.unattributed
    mech = check_unattributed(spec)
    check_group_column(spec, settings, ingested)  # before the charge: public facts only
    stores = open_stores(settings)
    noise = noise_source()
    req = charge_request(spec, "unattributed", mech, mech.privacy_map(), _params(spec, mech), noise,
                         flow_run_id)

    def compute() -> dict[str, Any]:
        return {"sizes": [int(v) for v in mech.release(group_sizes(spec, settings, ingested), noise)]}

    released = stores.ledger.release_once(req, compute)
    est = np.asarray(released.payload["sizes"], dtype=np.int64)
    G = len(est)
    acc = unattributed_accuracy(spec, mech, G)
    table = pd.DataFrame({"size": est})  # row order is the rank (largest first)
    a = acc["sorted_sizes"]
    table["ci_level"] = a["level"]
    table["ci_half_width"] = a["bound"]
    # private modes (the bundle's copy is public); in a child process under a small cap (dpcore.publish.plots.draw_privately)
    images = [draw_privately(rank_size_plot, est, (plot_dir or settings.data / "plots" / spec.release_id) / "unattributed.png",
                             f"{cfg.group_column}: released group sizes, largest first ({mech.method})")]
    top = ", ".join(f"{v:,}" for v in est[:10])
    chosen = (f"`auto` chose `{mech.method}` from public parameters only (epsilon, G, K, metric {cfg.metric}; "
              "`dpcore.mechanisms.unattributed.choose_method`)" if cfg.method == "auto" else f"method `{mech.method}`")
    md = (
        "## Group sizes, largest first (differentially private unattributed histogram)\n\n"
        f"How many rows each {cfg.group_column} has, sorted from largest to smallest with the labels dropped, for "
        f"all G = {G:,} groups of the public list; {chosen}; {_guarantee(mech)} (add or remove one row, which "
        f"changes one group's size by one). Sizes above the public maximum K = "
        f"{cfg.max_group_size:,} are counted as K; rows without a {cfg.group_column} belong to no group. The "
        "released vector is non-negative, integral and sorted. Largest ten: " + top + ". "
        f"Table: `tables/unattributed__sorted_sizes.csv` (one row per group, largest first).\n\n"
        f"**Accuracy ({level_text(spec.accuracy_alpha)}):** {a['statement']}"
    )
    if cfg.groups_provenance == "derived_from_data":
        md += "\n\n**Not public:** " + DERIVED_DOMAIN_NOT_PROTECTED
    not_protected = [DERIVED_DOMAIN_NOT_PROTECTED] if cfg.groups_provenance == "derived_from_data" else []
    return StepOutput("unattributed", {"sorted_sizes": table}, md, images=images, keys=[released.key],
                      not_protected=not_protected, accuracy=acc)


def _guarantee(mech: UnattributedHistogramMechanism) -> str:
    """The release's privacy statement in words (every method, pfl included, is pure epsilon-DP today)."""
    c = mech.privacy_map()
    if c.delta == 0:
        return f"epsilon = {float(c.epsilon):g}, pure epsilon-DP"
    return f"(epsilon, delta) = ({float(c.epsilon):g}, {float(c.delta):.3g})-DP"


def unattributed_accuracy(spec: ReleaseSpec, mech: UnattributedHistogramMechanism, G: int) -> dict[str, dict]:
    """The public accuracy statement of the released vector (issue 16), from ``(method, epsilon, G, K, alpha)`` only.

    Uses :func:`dpcore.mechanisms.unattributed.accuracy`: a per-entry bound where the method has one (every
    entry within the stated half-width with probability ``1 - alpha``), an L1 bound for the ``H_c`` route;
    for the HMM, PFL and range-query methods :func:`approximate_statement` says plainly that the released
    sizes are approximate, how they are made, what is exact (the HMM's measured half-width) and the one bound
    that holds for every dataset (each entry is within ``K``, as released and true sizes lie in ``0..K``).
    """
    alpha = spec.accuracy_alpha
    a = accuracy(mech.method, mech.epsilon, G, mech.size_bound, alpha)
    lv = 1 - alpha
    if a.get("max_entry_error") is not None:
        b = a["max_entry_error"]
        acc = Accuracy(b, lv, "interval", f"every released size is within ± {b} of the true sorted size (union "
                       f"bound over the {G:,} entries; sorting, clipping, isotonic regression and rounding never "
                       "increase the largest entry error)")
    elif a.get("l1_bound") is not None:
        b = a["l1_bound"]
        acc = Accuracy(None, lv, "none", f"no per-entry figure; the total L1 error (sum of |released - true| over "
                       f"all entries) is at most {b:,} (the H_c route: L1 error = earthmover's distance, bounded "
                       "cell by cell)")
    elif a.get("entry_half_width") is not None:
        b = a["entry_half_width"]
        acc = Accuracy(b, lv, "measurement", approximate_statement(mech, G, measured=b, level=lv))
    else:
        acc = Accuracy(None, lv, "none", approximate_statement(mech, G))
    return {"sorted_sizes": acc.as_dict()}


#: How each method without a proven error bound makes its released sizes (the approximate number, and how).
_HOW_APPROXIMATE = {
    "hmm": ("the estimate of a hidden Markov model over the sorted sizes (Lin & Kifer 2013), fitted to one vector "
            "of noisy sorted sizes: a smoothing of the noisy sizes whose error has no proven bound"),
    "pfl": ("one sample of the exponential mechanism over sorted size vectors scored by the L1 distance to the true "
            "sizes (PFL, Blocki, Datta & Bonneau 2016): close vectors are exponentially more likely, but no per-entry "
            "bound is stated"),
    "range": ("the output of a data-adaptive range-query algorithm (DAWA, AHP or a hierarchical tree) run on noisy "
              "measurements, then sorted and made consistent: how the noise is spread depends on the data, so no "
              "per-entry bound is stated"),
}


def approximate_statement(mech: UnattributedHistogramMechanism, G: int, measured: int | None = None,
                          level: float = 0.95) -> str:
    """Plain words for a method without a proven per-entry bound: which number is approximate and how (issue 32).

    Parameters
    ----------
    mech : UnattributedHistogramMechanism
        Its method and public ``K`` (``size_bound``).
    G : int
        Public number of groups.
    measured : int, optional
        The exact half-width of each noisy measured size before the estimate (HMM methods).
    level : float
        ``1 - alpha``.

    Returns
    -------
    str
        Says that the released sizes are approximate and how they are made, what is exact (the measurement's
        half-width, when there is one), and the bound that holds for every dataset: every released and every true
        size lies in ``0..K``, so no entry is off by more than ``K`` (public parameters only).
    """
    family = "hmm" if mech.method.startswith("hmm_") else "pfl" if mech.method == "pfl" else "range"
    text = (f"Approximate: the {G:,} released sizes are {_HOW_APPROXIMATE[family]} (method `{mech.method}`).")
    if measured is not None:
        text += (f" Exact: each noisy sorted size the estimate starts from is within ± {measured:,} of the true "
                 f"sorted size with probability {level:g}; the released estimate is not bound by that figure.")
    K = mech.size_bound
    if K is not None:
        text += (f" Proven for every dataset: each released size and each true size lies between 0 and K = {K:,}, "
                 f"so no released size is off by more than {K:,}; the typical error is much smaller and is measured "
                 "on benchmark data, not guaranteed (BENCHMARKS.md, unattributed histograms).")
    else:
        text += (" No bound holds for every dataset (no public maximum group size K was given); the typical error is "
                 "measured on benchmark data, not guaranteed (BENCHMARKS.md, unattributed histograms).")
    return text


def unattributed_payload_summary(out: StepOutput) -> dict[str, Any]:
    """What the operator flow returns: public facts about the release (no private value)."""
    t = out.tables["sorted_sizes"]
    return {"groups": int(len(t)), "largest": [int(v) for v in t["size"].head(5)]}
