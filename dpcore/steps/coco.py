"""Private step ``coco``: hierarchical count-of-counts histograms (seed 004 part 2).

For every node of a public hierarchy (e.g. root → carrier → carrier × origin)
publish how many groups (planes) have each size j (number of flights), as
non-negative integer histograms that add up down the tree, under pure ε-DP for
the items (add/remove one flight).

Public inputs come only from the spec: the groups file maps every group to
one leaf (so each node's number of groups G_τ is public), the level columns,
and the maximum group size K (larger groups are clamped, as the report says).
The private input is the items' group column of the validated table, read as
one SQL aggregate (rows per group, :func:`coco_group_sizes`): no row is loaded.

Ledger: **one charge per measured level**, each made before that level's
noise is drawn (:meth:`CocoMechanism.measure_level`); the stored payload is
the level's noisy measurement. Consistency post-processing (isotonic
regression, top-down matching and merging) reads only those stored noisy
measurements and public counts, so a re-run with the same key reproduces the
same release without new noise. The true histograms exist only inside this
module's flow-process functions and in ``internal.coco_emd`` (the per-node
error, a diagnostic).

:func:`coco_step` is :func:`measure_coco` (inputs, charges, noisy
measurements; flow process) then :func:`finish_coco` (assembly, diagnostic,
table, plots; flow process). Between the two, the flows map the per-node
estimates (isotonic regression, the CPU part) over a task runner: each task
gets a :class:`~dpcore.mechanisms.coco.NodeChunk` — noisy cells, public G_τ,
the level's ε — and the public mechanism parameters.
"""
from __future__ import annotations

import hashlib
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from dpcore.mechanisms.accuracy import Accuracy, discrete_laplace_half_width, level_text
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from ..mechanisms.coco.bootstrap import BootstrapError, bootstrap_level_errors
from ..mechanisms.coco.split import SPLIT_GRID, SPLIT_OBJECTIVE, choose_split
from ..mechanisms.coco import (CocoMechanism, Hierarchy, NodeChunk, NodeEstimate, coco_histograms, emd,
                               group_sizes_from_counts)
from ..mechanisms.coco.representations import counts_from_leaf_counts
from dpcore.publish.background_plots import submit as draw_in_background
from dpcore.publish.plots import coco_plots, draw_privately, drawn_nodes
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from .common import (PlannedCharge, StepInputError, charge_request, group_item_counts, noise_source, open_stores,
                     validated_table)
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


@dataclass(frozen=True)
class CocoInputs:
    """The public side of the step, read from the groups file.

    ``group_ids`` and ``leaf_ids`` list the file's groups and the leaf each belongs to, in file order;
    :attr:`group_leaf` is the same as a pandas Series (built when the step runs: the cost plan needs no
    pandas).
    """

    hierarchy: Hierarchy
    group_ids: tuple[str, ...]
    leaf_ids: tuple[str, ...]
    group_counts: dict[str, int]
    file_hash: str

    @property
    def group_leaf(self) -> pd.Series:
        """Group id -> leaf node id (index = group id), in the groups file's order."""
        return pd.Series(list(self.leaf_ids), index=list(self.group_ids), name="leaf", dtype=object)


class _GroupsFileError(Exception):
    """Internal: the groups file is not a UTF-8 CSV with a header row (the reason, for the message)."""


def _groups_table(raw: bytes) -> tuple[list[str], list[list[str]]]:
    """The header and data rows of a groups file, every cell as text (as pandas' ``read_csv(dtype=str,
    keep_default_na=False)`` read it: a leading byte-order mark dropped, blank lines skipped)."""
    import csv

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _GroupsFileError("not UTF-8") from None
    try:
        rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r and r != [""]]
    except csv.Error:
        raise _GroupsFileError("not CSV") from None
    if not rows:
        raise _GroupsFileError("no header row")
    header, data = rows[0], rows[1:]
    for n, row in enumerate(data, start=1):
        if len(row) != len(header):
            raise _GroupsFileError(f"data row {n} has {len(row)} cells, the header {len(header)}")
    return header, data


def coco_inputs(spec: ReleaseSpec) -> CocoInputs:
    """Read and check the public groups file; build the hierarchy and G_τ per node.

    Reads the file with the :mod:`csv` module (no pandas: ``dpr spec check`` and ``dpr plan`` run this).

    Raises
    ------
    StepInputError
        Missing or unreadable file (not UTF-8 CSV, no header, a row with another number of cells than the
        header), a missing column, a level listed twice, a group mapped to no leaf (empty level value, or a
        group of the public domain absent from the file) or to two leaves (listed twice).
    """
    cfg = spec.steps.coco
    gid = cfg.group_id or cfg.group_column
    path = Path(cfg.groups_file)
    try:
        raw = path.read_bytes()
        header, rows = _groups_table(raw)
    except FileNotFoundError:
        raise StepInputError(f"steps.coco.groups_file not found: {path}") from None
    except (OSError, _GroupsFileError) as exc:
        why = str(exc) if isinstance(exc, _GroupsFileError) else type(exc).__name__
        raise StepInputError(
            f"steps.coco.groups_file {path} is not a readable UTF-8 CSV with a header row ({why})"
        ) from None
    if len(set(cfg.levels)) != len(cfg.levels):
        raise StepInputError(f"steps.coco.levels {list(cfg.levels)} repeats a column; list each level once")
    missing = [c for c in (gid, *cfg.levels) if c not in header]
    if missing:
        raise StepInputError(f"steps.coco.groups_file {path.name} has no column(s) {missing}")
    at_gid = header.index(gid)
    at_levels = [header.index(c) for c in cfg.levels]
    groups = [r[at_gid] for r in rows]
    seen: set[str] = set()
    dup = []
    for g in groups:
        if g in seen:
            dup.append(g)
        seen.add(g)
    if dup:
        raise StepInputError(
            f"steps.coco.groups_file: {len(set(dup))} group(s) are mapped to more than one leaf, e.g. {sorted(dup)[:5]}"
        )
    paths = [tuple(r[i] for i in at_levels) for r in rows]
    empty = [g for g, p in zip(groups, paths) if "" in p]
    if empty:
        raise StepInputError(f"steps.coco.groups_file: {len(empty)} group(s) are mapped to no leaf, e.g. {empty[:5]}")
    domain = set(spec.public_schema.categorical[cfg.group_column].domain_strings)
    unmapped = sorted(domain - seen)
    if unmapped:
        raise StepInputError(
            f"steps.coco: {len(unmapped)} group(s) of schema.categorical.{cfg.group_column} are mapped to no leaf "
            f"in {path.name}, e.g. {unmapped[:5]}"
        )
    try:
        hierarchy = Hierarchy.from_leaf_rows(list(dict.fromkeys(paths)), list(cfg.levels))
        hierarchy.validate()
    except ValueError as exc:
        raise StepInputError(f"steps.coco hierarchy: {exc}") from None
    leaves = tuple(ids[-1] for ids in Hierarchy.row_node_ids(paths, list(cfg.levels)))
    per_leaf = Counter(leaves)
    leaf_counts = np.array([per_leaf.get(leaf, 0) for leaf in hierarchy.leaves], dtype=np.int64)
    return CocoInputs(hierarchy, tuple(groups), leaves, counts_from_leaf_counts(leaf_counts, hierarchy),
                      hashlib.sha256(raw).hexdigest())


def level_epsilons(spec: ReleaseSpec, inputs: CocoInputs):
    """The spec's ε per level; with ``epsilon_per_level: auto`` the split of ``epsilon_total`` chosen from the
    public hierarchy, public G_τ and K only (:func:`~dpcore.mechanisms.coco.split.choose_split`; exact
    fractions summing to the total, identical for any data with the same public parameters)."""
    cfg = spec.steps.coco
    if cfg.epsilon_per_level != "auto":
        return cfg.epsilon_per_level
    return choose_split(inputs.hierarchy, inputs.group_counts, cfg.max_group_size, cfg.epsilon_total, cfg.method)


def check_coco(spec: ReleaseSpec) -> tuple[CocoInputs, CocoMechanism]:
    """Every public check of ``steps.coco``; reads only the spec and its public groups file (the release's preflight).

    Returns
    -------
    (CocoInputs, CocoMechanism)
        The public inputs and the validated mechanism.

    Raises
    ------
    StepInputError
        Groups file missing or malformed, a group of the public domain mapped
        to no leaf or to two, a bad hierarchy, or mechanism parameters the
        hierarchy does not fit (e.g. one epsilon per level of the wrong
        length). Nothing is charged.
    """
    inputs = coco_inputs(spec)
    cfg = spec.steps.coco
    try:
        eps = level_epsilons(spec, inputs)
        mech = CocoMechanism(cfg.method, eps, cfg.max_group_size)
        mech.validate(inputs.hierarchy)
    except ValueError as exc:
        raise StepInputError(f"steps.coco: {exc}") from None
    return inputs, mech


#: DESIGN.md rule 9 statement for a groups file computed from the protected data.
DERIVED_GROUPS_NOT_PROTECTED = (
    "The groups file (steps.coco.groups_file, declared groups_provenance: derived_from_data) was computed from "
    "the protected data: the hierarchy, which group belongs to which node, and every node's number of groups "
    "(the total each histogram sums to) are functions of the data that no charge covers, and so is any schema "
    "domain read from the same file. Only the histograms' noisy cells are protected."
)


def _level_params(spec: ReleaseSpec, inputs: CocoInputs) -> dict[str, Any]:
    """Every level's idempotency parameters except the level itself."""
    cfg = spec.steps.coco
    eps = level_epsilons(spec, inputs)
    if cfg.epsilon_per_level == "auto":  # the chosen split, exactly, and what it was chosen from
        eps = {"auto": [str(e) for e in eps], "epsilon_total": cfg.epsilon_total}
    return {
        "method": cfg.method, "epsilon_per_level": eps, "K": cfg.max_group_size,
        "levels": list(cfg.levels), "groups_file": inputs.file_hash, "group_column": cfg.group_column,
    }


def coco_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """One charge per measured level, from the spec and its public groups file (:mod:`dpcore.run.cost_plan`)."""
    inputs, mech = check_coco(spec)
    base = _level_params(spec, inputs)
    return [PlannedCharge.of(f"coco_level{level}", mech, mech.level_cost(level), {**base, "level": level})
            for level in mech.levels_measured(inputs.hierarchy)]


def not_protected(spec: ReleaseSpec) -> list[str]:
    """What the coco release does not protect, from the spec alone (rule 9)."""
    cfg = spec.steps.coco
    return [DERIVED_GROUPS_NOT_PROTECTED] if cfg.groups_provenance == "derived_from_data" else []


def _long_table(est: dict[str, np.ndarray], hierarchy: Hierarchy) -> pd.DataFrame:
    rows = []
    for level in range(hierarchy.levels):
        for node in hierarchy.nodes_at(level):
            h = np.asarray(est[node])
            nz = np.flatnonzero(h)
            rows.append(pd.DataFrame({"node": node, "level": level, "group_size": nz, "groups": h[nz]}))
    return pd.concat(rows, ignore_index=True)


@dataclass(frozen=True)
class CocoMeasured:
    """The coco step after its charges: stored noisy measurements and the public inputs.

    Lives in the flow process only: ``sizes`` are the private group sizes (for
    the internal error diagnostic). Workers get :meth:`node_chunks` — noisy
    cells, public G_τ and ε per level, nothing else.
    """

    mechanism: CocoMechanism
    inputs: CocoInputs
    sizes: dict[str, np.ndarray]
    measurements: dict[int, dict[str, list[int]]]
    keys: list[str]

    def node_chunks(self, chunk_size: int | None = None) -> list[NodeChunk]:
        """The measured levels' nodes in chunks of at most ``chunk_size`` (default: one per level),
        for :meth:`CocoMechanism.estimate_chunk` on any worker."""
        return self.mechanism.node_chunks(self.measurements, self.inputs.hierarchy, self.inputs.group_counts,
                                          chunk_size)


def coco_group_sizes(spec: ReleaseSpec, wh, ingested: IngestResult, inputs: CocoInputs) -> dict[str, np.ndarray]:
    """The true size of every public group per leaf, clamped at ``K``, from one SQL aggregate (no row loaded).

    ``SELECT group, count(*) ... GROUP BY group`` over the validated table
    (:func:`~dpcore.steps.common.group_item_counts`, shared with the
    ``unattributed`` step), mapped onto the public groups file in one
    vectorised lookup (:func:`~dpcore.mechanisms.coco.group_sizes_from_counts`):
    memory grows with the number of groups, never with rows (issue 21). Rows
    whose group is null belong to no group; a group of the public file
    without rows has size 0; a validated value that is not a group of the
    file raises the same error as :func:`~dpcore.mechanisms.coco.group_sizes_by_leaf`
    (naming no value). Internal: the sizes stay in the flow process.

    Returns
    -------
    dict[str, numpy.ndarray]
        Leaf id -> int64 sizes of its groups, in the groups file's order.

    Raises
    ------
    ValueError
        A validated value outside the groups file (e.g. a column whose type
        writes values in another text form than the file's).
    """
    cfg = spec.steps.coco
    counts = group_item_counts(wh, validated_table(spec, ingested), cfg.group_column)
    return group_sizes_from_counts(counts["g"].to_numpy(dtype=object), counts["n"].to_numpy(dtype=np.int64),
                                   inputs.group_leaf, cfg.max_group_size)


def measure_coco(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CocoMeasured:
    """Validate, read the inputs and make one charge per measured level (flow process: warehouse, ledger).

    ``progress(done, total)`` is called with 0 before the first measured level
    and after each one. Raises as :func:`coco_step` (bad inputs before any charge).
    """
    cfg = spec.steps.coco
    inputs, mech = check_coco(spec)
    h = inputs.hierarchy
    stores = open_stores(settings)
    noise = noise_source()
    sizes = coco_group_sizes(spec, stores.warehouse, ingested, inputs)
    base = _level_params(spec, inputs)
    measurements: dict[int, dict[str, list[int]]] = {}
    keys = []
    levels = mech.levels_measured(h)
    if progress is not None:
        progress(0, len(levels))
    for done, level in enumerate(levels, start=1):
        req = charge_request(spec, f"coco_level{level}", mech, mech.level_cost(level), {**base, "level": level},
            noise, flow_run_id,
        )
        rel = stores.ledger.release_once(
            req, lambda level=level: {"measurement": mech.measure_level(sizes, h, level, noise)}
        )
        measurements[level] = rel.payload["measurement"]
        keys.append(rel.key)
        if progress is not None:
            progress(done, len(levels))
    return CocoMeasured(mech, inputs, sizes, measurements, keys)


def finish_coco(
    spec: ReleaseSpec, settings: Settings, measured: CocoMeasured,
    estimates: Mapping[str, NodeEstimate] | None = None, plot_dir: Path | None = None,
    progress: Callable[[int, int], None] | None = None, background_plots: bool = False,
) -> StepOutput:
    """Assemble the release from the per-node estimates, store the error diagnostic, build the output.

    Parameters
    ----------
    measured : CocoMeasured
        From :func:`measure_coco`.
    estimates : dict[str, NodeEstimate], optional
        Node id -> estimate of every node of ``measured.node_chunks()``
        (computed by mapped tasks); computed here when None
        (:meth:`CocoMechanism.postprocess`, the same values).
    plot_dir : Path, optional
    progress : callable, optional
        ``progress(done, total)`` over the bootstrap replicates of the accuracy figures.
    background_plots : bool
        Draw the pictures in a child process (:mod:`dpcore.publish.background_plots`): the output names them before
        they exist, and :func:`dpcore.publish.bundle.write_bundle` waits for them (raising if the drawing failed).
        Default: drawn here, before this returns.
    """
    cfg = spec.steps.coco
    mech, h = measured.mechanism, measured.inputs.hierarchy
    if estimates is None:
        est = mech.postprocess(measured.measurements, h, measured.inputs.group_counts)
    else:
        est = mech.assemble(estimates, h)
    stores = open_stores(settings)
    _store_error(stores.warehouse, measured.keys[-1], h, coco_histograms(measured.sizes, h, cfg.max_group_size), est)

    table = _long_table(est, h)
    boot = (bootstrap_level_errors(mech, h, measured.inputs.group_counts, est, spec.accuracy_alpha,
                                   cfg.accuracy_replicates, progress=progress)
            if cfg.accuracy_replicates else {})
    accuracy = coco_accuracy(spec, mech, h, boot)
    table["ci_level"] = 1 - spec.accuracy_alpha
    table["measurement_half_width"] = table["level"].map(
        lambda lv: accuracy.get(f"histograms.level{lv}.measurement", {}).get("bound")).astype(float)
    table["empirical_half_width"] = table["level"].map(
        lambda lv: boot[lv].cell_half_width if lv in boot else None).astype(float)
    plot_dir = plot_dir or settings.data / "plots" / spec.release_id
    if background_plots:
        images = draw_in_background(est, h, plot_dir, cfg.max_group_size, accuracy=accuracy)
    else:  # private modes (the bundle's copy is public); in a child process under a small cap (draw_privately)
        images = draw_privately(coco_plots, {n: est[n] for n in drawn_nodes(h)}, h, plot_dir, cfg.max_group_size,
                                40, accuracy)
    eps = [float(mech.epsilon(lv)) for lv in range(h.levels)]
    split_note = ""
    if cfg.epsilon_per_level == "auto":
        split_note = (
            f" The split of epsilon_total = {cfg.epsilon_total:g} across the levels "
            f"({', '.join(str(mech.epsilon(lv)) for lv in range(h.levels))}) was chosen from public parameters only "
            f"(hierarchy, public group counts, K, method; `dpcore.mechanisms.coco.split.choose_split`): "
            + (SPLIT_OBJECTIVE.format(grid=SPLIT_GRID) if cfg.method == "consistent_hc" else
               "leaves-first rounding: all but 1/24 per upper level on the leaves" if cfg.method == "consistent_hc_leaf"
               else "equal split") + "."
        )
    md = (
        "## Count-of-counts histograms (differentially private)\n\n"
        f"For each node of {' → '.join(['all', *cfg.levels])}: how many groups ({cfg.group_column}) have each "
        f"size. Method `{cfg.method}`, epsilon per level {', '.join(f'{e:g}' for e in eps)} "
        f"(levels measured: {mech.levels_measured(h)}), add/remove-one-item neighbours.{split_note} "
        f"Group sizes above the public maximum K = {cfg.max_group_size} are counted as K; items without a group "
        f"(an empty {cfg.group_column}) belong to no group and are not counted. "
        "Every histogram is non-negative and integral, sums to the node's public number of groups, and "
        + ("every parent equals the sum of its children." if cfg.method.startswith(("top_down", "bottom_up", "consistent"))
           else "(per-node method) parents are not forced to equal the sum of their children.")
        + f" Table: `tables/coco__histograms.csv` ({len(table):,} non-zero cells)."
    )
    md += "\n\n" + coco_accuracy_markdown(spec, h, accuracy, boot)
    if cfg.groups_provenance == "derived_from_data":
        md += "\n\n**Not public:** " + DERIVED_GROUPS_NOT_PROTECTED
    return StepOutput("coco", {"histograms": table}, md, images=images, keys=list(measured.keys),
                      not_protected=not_protected(spec), accuracy=accuracy)


def coco_accuracy(spec: ReleaseSpec, mech: CocoMechanism, h: Hierarchy,
                  boot: Mapping[int, BootstrapError] | None = None) -> dict[str, dict[str, Any]]:
    """Public accuracy statements per level (issue 16): the measurement noise, exact, and the released cells', empirical.

    ``histograms.level{l}.measurement`` (measured levels): each noisy cell
    carries discrete Laplace noise of scale ``sensitivity / epsilon_level``, so
    it is within the exact half-width of the truth with probability
    ``>= 1 - alpha`` (``kind = "measurement"``: *before* post-processing; the
    isotonic step, an L2 projection onto a convex set holding the truth, does
    not increase a node's L2 error, but rounding and top-down matching carry
    no proven bound).

    ``histograms.level{l}`` (every level, the released cells): the ``1 - alpha``
    quantile of the cell errors of a parametric bootstrap from the release
    (:mod:`dpcore.mechanisms.coco.bootstrap`; ``kind = "empirical"``, an
    estimate, not a guarantee). It covers rounding, matching and the
    unmeasured upper levels of bottom-up methods. Without ``boot``
    (``steps.coco.accuracy_replicates: 0``) the bound is None and the
    statement says so. Everything here is a function of public parameters and
    the release.
    """
    alpha = spec.accuracy_alpha
    measured = set(mech.levels_measured(h))
    boot = boot or {}
    out: dict[str, dict[str, Any]] = {}
    for lv in range(h.levels):
        b = boot.get(lv)
        if b is not None:
            stmt = (f"Level {lv}: a released cell is within ± {b.cell_half_width} of the truth in "
                    f"{level_text(alpha)} of cases, empirical: a parametric bootstrap from the release "
                    f"({b.replicates} replicates of the same measurement and post-processing, public seed), an "
                    f"estimate, not a guarantee; mean L1 error per node {b.mean_node_l1:.3g}.")
            out[f"histograms.level{lv}"] = Accuracy(b.cell_half_width, 1 - alpha, "empirical", stmt).as_dict()
        else:
            how = "measured and post-processed" if lv in measured else "the sum of its children's estimates"
            stmt = (f"Level {lv}: {how}; no accuracy figure for the released cells "
                    "(steps.coco.accuracy_replicates is 0).")
            out[f"histograms.level{lv}"] = Accuracy(None, 1 - alpha, "none", stmt).as_dict()  # type: ignore[arg-type]
        if lv in measured:
            scale = mech.noise_scale(lv)
            t = discrete_laplace_half_width(scale, alpha)
            stmt = (f"Level {lv} measurement: each noisy cell (before post-processing) is within ± {t} of the "
                    f"truth with probability {level_text(alpha)} (discrete Laplace, scale {scale:.4g}, exact); the "
                    "isotonic step, an L2 projection onto a convex set holding the truth, does not increase a "
                    "node's L2 error; integer rounding and top-down matching carry no proven bound.")
            out[f"histograms.level{lv}.measurement"] = Accuracy(t, 1 - alpha, "measurement", stmt).as_dict()
    return out


def coco_accuracy_markdown(spec: ReleaseSpec, h: Hierarchy, accuracy: Mapping[str, dict[str, Any]],
                           boot: Mapping[int, BootstrapError]) -> str:
    """The report's accuracy paragraph and per-level table, from :func:`coco_accuracy`'s statements (and the
    bootstrap's mean L1 error per node)."""
    lv_text = level_text(spec.accuracy_alpha)
    head = (f"Accuracy ({lv_text}). Released cells: an **empirical** half-width, the {lv_text} quantile of the cell "
            "errors of a parametric bootstrap from the release (the release taken as the truth, measured and "
            f"post-processed again {spec.steps.coco.accuracy_replicates} times with the same mechanism, public "
            "seed): an estimate, not a guarantee; it covers rounding, matching and levels that are sums of their "
            "children. Measured cells (before post-processing): the exact discrete Laplace half-width; the isotonic "
            "step, an L2 projection onto a convex set holding the truth, does not increase a node's L2 error.\n\n"
            "| level | released cell ± (empirical) | mean L1 error per node (empirical) | measured cell ± (exact) |\n"
            "|---|---|---|---|\n")
    rows = []
    for lv in range(h.levels):
        b = boot.get(lv)
        emp = (str(b.cell_half_width), f"{b.mean_node_l1:.3g}") if b else ("not computed", "not computed")
        m = accuracy.get(f"histograms.level{lv}.measurement")
        rows.append(f"| {lv} | {emp[0]} | {emp[1]} | {m['bound'] if m else 'not measured'} |")
    return head + "\n".join(rows)


def coco_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None,
    plot_dir: Path | None = None, progress: Callable[[int, int], None] | None = None,
) -> StepOutput:
    """Publish consistent count-of-counts histograms for every node (one charge per level).

    :func:`measure_coco` then :func:`finish_coco` in this process; the flows
    map the per-node estimates between the two (``flows.coco_publish.run_coco``).

    Parameters
    ----------
    spec : ReleaseSpec
        ``spec.steps.coco`` holds the group column, groups file, levels, K,
        epsilon per level and method.
    settings : Settings
    ingested : IngestResult
    flow_run_id : str, optional
    plot_dir : Path, optional
        Where the PNG plots are drawn (default: a folder under the data dir).
    progress : callable, optional
        ``progress(done, total)``: called with 0 before the first measured
        level and after each one (counts of levels only, nothing private).

    Returns
    -------
    StepOutput
        Table ``histograms`` (node, level, group_size, groups; non-zero cells),
        plots and a report section.

    Raises
    ------
    StepInputError, ValueError
        Bad public inputs or parameters; raised before any charge.
    BudgetExceededError
        A level's charge does not fit (earlier levels stay charged and stored;
        re-running after raising the cap reuses them).
    """
    measured = measure_coco(spec, settings, ingested, flow_run_id, progress)
    return finish_coco(spec, settings, measured, None, plot_dir)


def _store_error(wh, key: str, h: Hierarchy, true_h: dict[str, np.ndarray], est: dict[str, np.ndarray]) -> None:
    """Earthmover's distance per node (non-private diagnostic) into ``internal.coco_emd``."""
    diag = pd.DataFrame(
        [{"key": key, "node": n, "level": lv, "emd": float(emd(true_h[n], est[n]))}
         for lv in range(h.levels) for n in h.nodes_at(lv)]
    )

    def op(con):
        con.execute("CREATE TABLE IF NOT EXISTS internal.coco_emd (key VARCHAR, node VARCHAR, level INTEGER, emd DOUBLE)")
        con.execute("DELETE FROM internal.coco_emd WHERE key = ?", [key])
        con.register("_diag", diag)
        con.execute("INSERT INTO internal.coco_emd SELECT * FROM _diag")

    wh.run(op, transaction=True)


def coco_payload_summary(out: StepOutput) -> dict[str, Any]:
    """Small public summary of a coco output (for flow return values)."""
    t = out.tables["histograms"]
    return {"nodes": int(t["node"].nunique()), "cells": int(len(t))}
