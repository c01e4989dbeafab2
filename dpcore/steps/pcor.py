"""Private step ``pcor``: explain outliers by a private context (seed 003, PCOR).

For each target record V (the spec's ``record_ids`` plus, optionally, the
detector's top flagged records: :func:`detector_targets`) release one context — a conjunction of
disjunctions over the full public domains of the context attributes — in
which V is an outlier of the metric attribute, chosen by a sampler and the
exponential mechanism (:mod:`dpcore.mechanisms.pcor`). Each explanation is
one ledger charge of the operator's total ε with notion ``ocdp``
(output-constrained DP, Definition 2.5) and neighbour relation add/remove.
The detector's choice is non-private (issue 28, section 4): ``from_detector``
always makes that many charges (an unfilled slot is answered
``no_valid_context``), and the explanations of detector-chosen records go to
the bundle's ``owner/`` folder unless ``publish_detector_chosen_ids`` is on
(:func:`pcor_output`).

The step is split so a flow can map the searches over outliers on a Dask
cluster while the warehouse and the ledger stay in the flow process:

1. :func:`plan_pcor` — validate parameters (ids must be on the spec's public
   roster: a public refusal, before any charge), build the per-cell index once
   from one aggregate query (no column of the table is loaded: memory grows
   with the occupied (cell, value) pairs, not the rows; issue 21), resolve the
   targets and look their own values up by id (an absent or quarantined roster
   id is *not* refused: rule 8; ``from_detector`` picks among the records
   flagged by the metric's templates that are outliers in their own cell,
   issue 16);
2. :func:`reserve_pcor` — per target: return the stored release if the key
   was released before, otherwise reserve its cost (one charge each);
3. :func:`compute_explanation` — pure function of the prepared arrays and one
   target's held row: the mechanism's search and draws (worker-safe);
4. :func:`store_pcor` — store every computed release, mark failed ones
   (their charge stays, DESIGN.md rule 2), write the internal diagnostics and
   build the bundle section.

:func:`pcor_step` runs the four in sequence. Only the released context (its
rendering and bit vector) and the status leave the warehouse; population
sizes, utilities, the starting context and search statistics are
data-dependent and stay in ``internal.pcor_diagnostics``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpcore.mechanisms.accuracy import Accuracy, level_text
from dpcore.budget.amounts import charge_under
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from dpcore.budget.ledger import ChargeRequest
from ..mechanisms.pcor.contexts import ContextSpace
from ..mechanisms.pcor.evaluator import ContextEvaluator
from ..mechanisms.pcor.index import CellIndex
from ..mechanisms.pcor.mechanism import PCORMechanism
from ..mechanisms.pcor.verifiers import make_verifier
from ..noise import NoiseSource
from dpcore.storage.quoting import md_cell
from dpcore.storage.settings import Settings
from dpcore.release.spec import PcorSpec, ReleaseSpec, pcor_source_templates
from .common import (
    PlannedCharge, StepInputError, charge_request, check_record_ids, noise_source, noise_test_seed, open_stores,
    require_public_completeness, validated_table,
)
from .detect import detector_choice_not_protected, detector_choice_owner_only, flagged_by_score, flagged_records
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


class NoValidContextError(RuntimeError):
    """The mechanism ran and found no context in which the record is an outlier (charged, stored)."""


@dataclass(frozen=True)
class PcorJob:
    """What a search needs: public context space, the per-cell index, parameters. No warehouse handle.

    Attributes
    ----------
    space : ContextSpace
        Context attributes and their full public domains.
    index : CellIndex or None
        Per-cell statistics and sorted metric values of the validated table, holding one row per target:
        its record, or a randomly drawn stand-in for a target without one (:func:`_with_stand_ins`); built
        from one public record when the validated table holds no record (every target is then recordless).
    verifier : str
        ``grubbs``, ``lof`` or ``histogram``.
    verifier_params : dict
        Keyword arguments of :func:`~dpcore.mechanisms.pcor.verifiers.make_verifier`.
    mechanism_params : dict
        Keyword arguments of :class:`~dpcore.mechanisms.pcor.mechanism.PCORMechanism`.
    noise_seed : int or None
        None in production (OS CSPRNG); a test seed marks releases not-for-publication.
    seed_offsets : tuple of int
        Test noise only (empty in production): per held row of ``index``, the
        record's position in the validated table in input-row order; a
        search's test noise is seeded ``noise_seed + offset``, as when the
        index held every row, so seeded releases do not depend on which
        records are held; a stand-in row's offset follows the table's positions.
    """

    space: ContextSpace
    index: CellIndex | None
    verifier: str
    verifier_params: dict[str, Any]
    mechanism_params: dict[str, Any]
    noise_seed: int | None = None
    seed_offsets: tuple[int, ...] = ()

    def mechanism(self) -> PCORMechanism:
        """The (unvalidated) mechanism of these parameters."""
        return PCORMechanism(**self.mechanism_params)


@dataclass(frozen=True)
class PcorTarget:
    """One record to explain: its public id, its held row in the job's index, its request.

    A negative ``row``, ``-(k + 1)``, marks a target with no record (not in the data, or an unfilled detector
    slot): its search runs on the stand-in held at row ``k`` and is discarded (:func:`compute_explanation`).
    """

    record_id: str
    row: int
    request: ChargeRequest


@dataclass(frozen=True)
class PcorPlan:
    """Targets and the shared job; after :func:`reserve_pcor`, which ones need a search.

    Attributes
    ----------
    stored : dict of int to dict
        Target position -> payload already released under the same key (re-run).
    to_compute : tuple of int
        Target positions charged (by this run, or by a crashed one that never
        stored the answer) whose search must run now.
    """

    job: PcorJob
    targets: tuple[PcorTarget, ...]
    from_detector: int
    stored: dict[int, dict[str, Any]] = field(default_factory=dict)
    to_compute: tuple[int, ...] = ()


def _context_attributes(spec: ReleaseSpec, cfg: PcorSpec) -> list[str]:
    cats = spec.public_schema.categorical
    attrs = list(cfg.attributes) if cfg.attributes else [a for a, c in cats.items() if not c.nullable]
    if not attrs:
        raise StepInputError("steps.pcor.attributes: no categorical attribute to build contexts from")
    return attrs


def _metric(spec: ReleaseSpec, cfg: PcorSpec) -> str:
    if cfg.metric:
        return cfg.metric
    if not spec.public_schema.numeric:
        raise StepInputError("steps.pcor.metric: the schema has no numeric attribute")
    return next(iter(spec.public_schema.numeric))


def _verifier_params(cfg: PcorSpec) -> dict[str, Any]:
    if cfg.verifier == "grubbs":
        return {"alpha": cfg.alpha}
    if cfg.verifier == "lof":
        return {"k": cfg.lof_k, "threshold": cfg.lof_threshold}
    return {"min_share": cfg.histogram_min_share}


#: Detector candidates checked per batch by the own-cell rule (score order; stops once enough pass).
OWN_CELL_BATCH = 4096

#: Bytes per row of a chunk of the (cell, value) aggregate: a short text per context attribute, the metric, the count.
_TEXT_BYTES = 60


def aggregate_index(wh, spec: ReleaseSpec, ingested: IngestResult, space: ContextSpace,
                    metric: str) -> CellIndex | None:
    """The per-cell index of ``metric`` over the validated table, from one ``GROUP BY`` in the warehouse.

    ``SELECT <context attributes>, <metric>, count(*) ... GROUP BY ALL``
    gives every distinct ``(attribute values, metric value)`` pair with its
    multiplicity: everything the verifiers of seed 003 (Section 6.5) read
    about any population. The result is streamed in chunks sized by
    ``DPR_MEMORY_LIMIT`` (:class:`~dpcore.runtime.chunks.MemoryBudget`, from the
    number of columns only), each chunk's values encoded by
    :meth:`ContextSpace.encode` (so the codes are those of the records), and
    passed to :meth:`CellIndex.from_aggregates`. Memory grows with the
    occupied ``(cell, value)`` pairs, not with the rows; the index holds no
    row (:meth:`CellIndex.with_rows` adds the explained records).

    Parameters
    ----------
    wh : Warehouse
    spec : ReleaseSpec
    ingested : IngestResult
    space : ContextSpace
        The context attributes (columns of the validated table) and their public domains.
    metric : str
        The metric column.

    Returns
    -------
    CellIndex or None
        None when the validated table holds no record (then every target is
        absent: :func:`plan_pcor`).

    Raises
    ------
    ValueError
        A null or out-of-domain attribute value or a non-finite metric value
        (messages name the column, never a value or a count).
    """
    count = "__pcor_count"
    sql = f"SELECT {_columns(space, metric)}, count(*) AS {count} FROM {validated_table(spec, ingested)} GROUP BY ALL"
    rows = wh.memory.chunk_rows(_TEXT_BYTES * space.m + 16)  # the warehouse's cap (DPR_MEMORY_LIMIT)
    encoded = _encoded_chunks(wh.iter_chunks(sql, rows=rows), space, metric, count)
    if encoded is None:  # no validated record: a private fact, so not an error (rule 8; see plan_pcor)
        return None
    return CellIndex.from_aggregates(space, *encoded)


def _columns(space: ContextSpace, metric: str, alias: str = "") -> str:
    """The SQL select list of the context attributes and the metric (columns of the validated table ``alias``)."""
    return ", ".join(f'{alias}"{c}"' for c in [*space.attributes, metric])


def _encoded_chunks(chunks, space: ContextSpace, metric: str, count: str | None = None):
    """Warehouse chunks of :func:`_columns` as the arrays of :class:`CellIndex`, concatenated.

    Each chunk's attribute values are encoded by :meth:`ContextSpace.encode`
    (so the codes are those of the records), its metric read as float64 and
    its ``count`` column (multiplicities, if given) as int64; one chunk's
    frame is in memory at a time besides the arrays.

    Parameters
    ----------
    chunks : iterable of pandas.DataFrame
        E.g. :meth:`~dpcore.storage.warehouse.Warehouse.iter_chunks` of a query selecting :func:`_columns`.
    space : ContextSpace
    metric : str
    count : str, optional
        The column of multiplicities.

    Returns
    -------
    tuple or None
        ``codes`` (n, m) int32, ``values`` (n,) float64 and, with ``count``,
        ``counts`` (n,) int64; None when there is no chunk.

    Raises
    ------
    ValueError
        A null or out-of-domain attribute value (:meth:`ContextSpace.encode`; names the column, never a value).
    """
    attrs = list(space.attributes)
    codes, values, counts = [], [], []
    for chunk in chunks:
        codes.append(space.encode(chunk[attrs]))
        values.append(chunk[metric].to_numpy(dtype=float))
        if count is not None:
            counts.append(chunk[count].to_numpy(dtype=np.int64))
    if not codes:
        return None
    return (np.concatenate(codes), np.concatenate(values)) + ((np.concatenate(counts),) if count is not None else ())


def lookup_records(wh, spec: ReleaseSpec, ingested: IngestResult, space: ContextSpace, metric: str, ids: list[str],
                   *, positions: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Codes and metric value of the validated records with the given ids, looked up in the warehouse.

    Parameters
    ----------
    wh, spec, ingested, space, metric
        As :func:`aggregate_index`.
    ids : list of str
        Distinct record ids (a bounded list: the explained records, a batch of candidates).
    positions : bool
        Also return each found record's position in the validated table in
        input-row order (for test noise seeds, :attr:`PcorJob.seed_offsets`;
        one counting pass over the table).

    Returns
    -------
    held : (len(ids),) int64
        For each id, its position among the found records (``-1``: absent or
        quarantined; never refused, rule 8).
    codes : (F, m) int32; values : (F,) float64
        The found records, in the order of ``ids``.
    position : (F,) int64
        Input-row-order positions (empty unless ``positions``).
    """
    rid = spec.dataset.record_id
    table = validated_table(spec, ingested)
    held = np.full(len(ids), -1, dtype=np.int64)
    if not ids:
        return held, np.zeros((0, space.m), dtype=np.int32), np.zeros(0), np.zeros(0, dtype=np.int64)
    wanted = pd.DataFrame({"_i": np.arange(len(ids), dtype=np.int64), "_id": pd.Series(ids, dtype=object)})
    sql = (f'SELECT w._i, {_columns(space, metric, "v.")}, v._row FROM _pcor_wanted w '
           f'JOIN {table} v ON v."{rid}" = w._id ORDER BY w._i')

    def op(con):
        con.register("_pcor_wanted", wanted)
        try:
            return con.execute(sql).df()
        finally:
            con.unregister("_pcor_wanted")

    found = wh.run(op)
    held[found["_i"].to_numpy(dtype=np.int64)] = np.arange(len(found))
    codes, values = _encoded_chunks([found], space, metric)
    position = np.zeros(0, dtype=np.int64)
    if positions and len(found):
        marks = found["_row"].to_numpy(dtype=np.int64).tolist()
        parts = []
        for lo in range(0, len(marks), 256):  # one pass counts the records before each found one
            part = marks[lo: lo + 256]
            filters = ", ".join("count(*) FILTER (WHERE _row < ?)" for _ in part)
            parts.extend(wh.query(f"SELECT {filters} FROM {table}", part)[0])
        position = np.asarray(parts, dtype=np.int64)
    return held, codes, values, position


def detector_targets(
    wh, spec: ReleaseSpec, ingested: IngestResult, index: CellIndex, verifier,
) -> list[str]:
    """The records ``steps.pcor.from_detector`` adds, in record-id order (a non-private choice).

    Candidates are the records labelled outliers by the templates of
    :func:`~dpcore.release.spec.pcor_source_templates` (``steps.pcor.from_template``,
    or every template whose behavioural attribute is the metric), ranked by
    their highest detector score among those templates. With
    ``from_detector_own_cell`` (default) only candidates that the PCOR
    verifier flags in their own cell (the context of exactly their own
    attribute values) are kept; they are checked in score order, in batches
    of :data:`OWN_CELL_BATCH` (each looked up in the warehouse and held by
    the index), until ``from_detector`` pass. The first ``from_detector``
    kept are returned sorted by id: the score order never leaves this
    function (issue 15, hole 5). The ranking is read in growing prefixes
    (``LIMIT``), so only the candidates checked are ever loaded.

    Such a record's own cell is a valid context, so the mechanism's start
    search always finds one and its explanation is never ``no_valid_context``
    (seed 003 assumes the owner knows a valid starting context C_V). The
    check reads the non-private data like the detector does; the report and
    ``not_protected`` say so (:func:`pcor_choice_statement`).

    Parameters
    ----------
    wh : Warehouse
    spec : ReleaseSpec
    ingested : IngestResult
    index : CellIndex
        The per-cell index of the metric (the one the searches use); its held rows are not used.
    verifier
        The PCOR verifier (:func:`~dpcore.mechanisms.pcor.verifiers.make_verifier`).

    Returns
    -------
    list of str
    """
    cfg = spec.steps.pcor
    templates = pcor_source_templates(spec)
    if not cfg.from_detector_own_cell:
        return flagged_records(wh, spec, ingested, cfg.from_detector, templates)
    metric = _metric(spec, cfg)
    kept: list[str] = []
    done, limit = 0, OWN_CELL_BATCH
    while len(kept) < cfg.from_detector:
        ranked = flagged_by_score(wh, spec, ingested, templates, limit=limit)  # internal order
        for lo in range(done, len(ranked), OWN_CELL_BATCH):  # batches of candidates, not records
            batch = ranked[lo: lo + OWN_CELL_BATCH]
            held, codes, values, _ = lookup_records(wh, spec, ingested, index.space, metric, batch)
            present = np.asarray(batch, dtype=object)[held >= 0]  # present by construction (same validated table)
            ok = verifier.verify_own_cells(index.with_rows(codes, values), np.arange(present.size))
            kept.extend(str(i) for i in present[ok])
            if len(kept) >= cfg.from_detector:
                break
        if len(ranked) < limit:  # every candidate checked
            break
        done, limit = len(ranked), 4 * limit
    return sorted(kept[: cfg.from_detector])


def pcor_choice_statement(spec: ReleaseSpec) -> str:
    """How ``from_detector`` chose its records, as the rule 9 statement (public: from the spec only)."""
    cfg = spec.steps.pcor
    condition = extra = ""
    if cfg.from_detector_own_cell:
        condition = (f"that the {cfg.verifier} verifier also flags as outliers of {_metric(spec, cfg)} in their "
                     f"own cell (the context of exactly their own {', '.join(_context_attributes(spec, cfg))} "
                     "values), a check made on the non-private data like the detector's score")
        extra = ("Appearing in the list therefore also reveals that the record is such an outlier among the other "
                 "records of its cell, a fact about those records too.")
    return detector_choice_not_protected(cfg.from_detector, pcor_source_templates(spec), condition, extra)


def check_pcor(spec: ReleaseSpec) -> tuple[list[str], str, dict[str, Any], dict[str, Any], PCORMechanism, ContextSpace]:
    """Every public check of ``steps.pcor``; touches no data (the release's preflight).

    Returns
    -------
    tuple
        Context attributes, metric, mechanism parameters, verifier parameters,
        the mechanism and the public context space.

    Raises
    ------
    StepInputError
        Bad parameters (ε ≤ 0, n < 1, nullable or unknown attributes, ...),
        ids off the public roster (or ids without a roster), or no target at
        all; nothing charged. Presence is never checked (rule 8).
    """
    cfg = spec.steps.pcor
    require_public_completeness(spec, "pcor")
    attrs = _context_attributes(spec, cfg)
    metric = _metric(spec, cfg)
    if not cfg.record_ids and not cfg.from_detector:
        raise StepInputError("steps.pcor: no record to explain; give record_ids or from_detector")
    check_record_ids(spec, list(cfg.record_ids), "steps.pcor.record_ids")
    mech_params = {
        "sampler": cfg.sampler, "epsilon": cfg.epsilon, "n_samples": cfg.n_samples, "utility": cfg.utility,
        "max_start_evaluations": cfg.max_start_evaluations, "max_direct_contexts": cfg.max_contexts,
        "start": cfg.start, "final_share": cfg.final_share,
    }
    vparams = _verifier_params(cfg)
    try:
        mech = PCORMechanism(**mech_params)
        mech.validate()
        make_verifier(cfg.verifier, **vparams)
        space = ContextSpace.from_domains(attrs, [spec.public_schema.categorical[a].domain for a in attrs])
    except ValueError as exc:
        raise StepInputError(f"steps.pcor: {exc}") from None
    return attrs, metric, mech_params, vparams, mech, space


def pcor_cost_statement(spec: ReleaseSpec, mech: PCORMechanism | None = None) -> str:
    """What one explanation costs as the ledger counts it, e.g. "epsilon = 0.2 per record (add-remove
    neighbours), counted as 0.4 against your replace-one cap".

    The mechanism's cost is stated under add/remove neighbours; against a replace-one cap the ledger counts
    it converted (:func:`dpcore.budget.amounts.charge_under`: twice the epsilon), and this says both numbers.
    """
    mech = mech if mech is not None else check_pcor(spec)[4]
    cost = mech.cost()
    charged = charge_under(cost, mech.neighbour, spec.budget.neighbour)
    delta = f", delta = {float(charged.delta):g}" if charged.delta else ""
    return (f"epsilon = {float(cost.epsilon):g} per record ({mech.neighbour} neighbours), counted as "
            f"{float(charged.epsilon):g}{delta} against your {spec.budget.neighbour} cap")


def _common_params(attrs: list[str], metric: str, verifier: str, vparams: dict[str, Any],
                   mech_params: dict[str, Any]) -> dict[str, Any]:
    """Every target's idempotency parameters except its record id."""
    return {"attributes": attrs, "metric": metric, "verifier": verifier, "verifier_params": vparams, **mech_params}


def pcor_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """One charge per explained record, from the spec alone (:mod:`dpcore.run.cost_plan`).

    Exact: one charge per listed ``record_ids`` entry and one per ``from_detector`` slot, whether or not the
    detector fills it (:func:`plan_pcor`: how many records qualify is private, so it changes no charge).
    Each listed record is its own line (its match names the record id), so two queries about different
    records under one release id are different run units with different charges, never one the stored
    answer of the other; the detector's slots share one line (the records it picks are private).
    """
    cfg = spec.steps.pcor
    attrs, metric, mech_params, vparams, mech, _ = check_pcor(spec)
    common = _common_params(attrs, metric, cfg.verifier, vparams, mech_params)
    lines = [PlannedCharge.of("pcor", mech, mech.cost(), {**common, "record_id": rid})
             for rid in dict.fromkeys(cfg.record_ids)]
    if cfg.from_detector:
        lines.append(PlannedCharge.of("pcor", mech, mech.cost(), common, count=cfg.from_detector))
    return lines


def plan_pcor(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> PcorPlan:
    """Validate, build the index from warehouse aggregates, one charge request per target (nothing charged).

    Parameters
    ----------
    spec : ReleaseSpec
        ``spec.steps.pcor`` holds attributes, metric, verifier and its
        parameters, sampler, n_samples, utility, epsilon and the targets.
    settings : Settings
    ingested : IngestResult
    flow_run_id : str, optional

    Returns
    -------
    PcorPlan

    Raises
    ------
    StepInputError
        Ids off the public roster, no targets, nullable or unknown
        attributes, bad mechanism or verifier parameters (ε ≤ 0, n < 1, ...).
        A roster id whose record is absent or quarantined is planned like any
        other (a negative held row naming its stand-in) and charged; :func:`compute_explanation` gives it
        the data-independent outcome ``no_valid_context``.

    Notes
    -----
    No column of the validated table is loaded: the index comes from one
    aggregate (:func:`aggregate_index`) and the targets' own codes and values
    from a lookup by id (:func:`lookup_records`), so memory grows with the
    occupied (cell, value) pairs and the targets, not with the rows.
    ``from_detector`` targets come from :func:`detector_targets` (after the
    index is built: the own-cell check uses it). The plan always has
    ``from_detector`` detector slots (issue 28, section 4): a slot the
    detector does not fill (fewer records qualify, or one is also listed in
    ``record_ids``) is a target with no record (id ``""``, a negative held row naming its stand-in),
    charged like the others and answered with the data-independent
    ``no_valid_context``. So the number of charges, the logs and the progress
    counts are the spec's, never how many records qualified; the release
    never aborts for lack of targets after its earlier steps charged.
    """
    import duckdb

    cfg = spec.steps.pcor
    attrs, metric, mech_params, vparams, mech, space = check_pcor(spec)
    stores = open_stores(settings)
    wh = stores.warehouse
    try:
        index = aggregate_index(wh, spec, ingested, space, metric)
    except ValueError as exc:
        raise StepInputError(f"steps.pcor: {exc}") from None
    ids = list(dict.fromkeys(cfg.record_ids))
    seed = noise_test_seed()

    def targets_and_lookup():
        chosen = []
        if cfg.from_detector and index is not None:  # no validated record: the detector flagged none
            chosen = detector_targets(wh, spec, ingested, index, make_verifier(cfg.verifier, **vparams))
        wanted = ids + [i for i in chosen if i not in ids]
        return wanted, lookup_records(wh, spec, ingested, space, metric, wanted, positions=seed is not None)

    # the index is held while the detector's candidates are ranked and looked up: those queries run under
    # DuckDB's lower limit for such work (MemoryBudget.held_duckdb_bytes; issue 29, goal 4), again under the
    # budget's own if DuckDB cannot spill enough (the same reads: the same records)
    try:
        with wh.memory_limited(wh.memory.held_duckdb_bytes):
            ids, (held, codes, values, position) = targets_and_lookup()
    except duckdb.OutOfMemoryException:
        ids, (held, codes, values, position) = targets_and_lookup()
    unfilled = len(dict.fromkeys(cfg.record_ids)) + cfg.from_detector - len(ids)  # detector slots with no record
    noise = noise_source()
    n_listed = len(dict.fromkeys(cfg.record_ids))
    # every target without a record (absent or quarantined listed id, unfilled detector slot) gets a stand-in
    # held row whose search runs and is discarded (issue 46.2: no shortcut on presence; rule 14)
    held_index, rows, extra = _with_stand_ins(index, space, spec, metric, codes, values, held, n_listed,
                                              cfg.from_detector, unfilled)
    # test noise only: a found target's search is seeded by its table position; a stand-in's by its row
    # (after the table's positions), as its output is discarded
    offsets = tuple(int(position[h]) if h >= 0 else int(index.n_rows if index is not None else 1) + p
                    for p, h in enumerate(held.tolist() + [-1] * unfilled)) if seed is not None else ()
    job = PcorJob(space, held_index, cfg.verifier, vparams, mech_params, seed, offsets)
    common = _common_params(attrs, metric, cfg.verifier, vparams, mech_params)
    # a listed record's charge is named by its (public) id; a detector-chosen record's by its slot only: the
    # chosen id is private and may differ on a resumed run of changed data, which then finds the slot's
    # charge (and its stored answer, which names the record it explains) instead of a charge outside the plan
    targets = tuple(
        PcorTarget(
            rid, int(row),
            charge_request(spec, "pcor", mech, mech.cost(),
                           {**common, "record_id": rid} if i < n_listed
                           else {**common, "record_id": None, "detector_slot": i - n_listed}, noise, flow_run_id),
        )
        for i, (rid, row) in enumerate(zip(ids, rows))
    ) + tuple(
        PcorTarget(
            "", row,
            charge_request(spec, "pcor", mech, mech.cost(),
                           {**common, "record_id": None, "detector_slot": k}, noise, flow_run_id),
        )
        for k, row in zip(range(cfg.from_detector - unfilled, cfg.from_detector), extra)
    )
    return PcorPlan(job, targets, cfg.from_detector)


def stand_in_row(row: int) -> int:
    """The held row searched for a target without a record: ``row`` ``-(k + 1)`` names held row ``k``."""
    return -int(row) - 1


def _with_stand_ins(index: CellIndex | None, space: ContextSpace, spec: ReleaseSpec, metric: str, codes, values,
                    held: np.ndarray, n_listed: int, from_detector: int, unfilled: int,
                    noise: NoiseSource | None = None):
    """The index holding one row per target (its record, or a random stand-in); each target's held row.

    Issue 46.2, DESIGN.md rule 14: a target without a record (a listed id
    that is absent or quarantined, a detector slot left unfilled) runs the
    same search as a present one, on a stand-in record, and the search's
    output is discarded (:func:`compute_explanation`), so the step's work
    does not say whether the record is there. The stand-in is drawn through
    ``noise`` (:mod:`dpcore.noise`: the OS CSPRNG in a release), independently
    for each recordless target, from records of the same kind as a present
    target's:

    * a listed id: a record drawn uniformly at random from the validated
      table (every record equally likely, by the index's multiplicities), so
      the absent id's search is distributed exactly as the search of a
      present id whose record is a uniformly random record of the table;
    * an unfilled detector slot: one of the records the detector did choose,
      uniformly (a filled slot's record), or a uniform record of the table
      when it chose none.

    The draw depends on which ids are present only through the set of
    targets needing a stand-in; the index always holds exactly one row per
    target (listed ids and detector slots, a public count), so building it
    is the same work too. With no validated record at all, every stand-in is
    one public record (the first value of every context attribute's public
    domain and the metric's public lower bound), indexed alone.

    Parameters
    ----------
    index : CellIndex or None
        The aggregate index (no held row); None when the validated table is empty.
    space, spec, metric
        The context space, the spec (public bounds) and the metric.
    codes, values : numpy.ndarray
        The found targets' codes and metric values (:func:`lookup_records`).
    held : (T,) int64
        Each listed or chosen target's position among the found records, ``-1`` when absent.
    n_listed, from_detector, unfilled : int
        Listed targets, detector slots, unfilled detector slots.
    noise : NoiseSource, optional
        Draws the stand-ins (never released); default :func:`~dpcore.steps.common.noise_source`, the
        release's source (OS CSPRNG; seeded only in tests).

    Returns
    -------
    (CellIndex, numpy.ndarray, list of int)
        The index holding ``T + unfilled`` rows, row ``p`` being target
        ``p``'s record or its stand-in; each of the ``T`` targets' held row
        (``p``, or ``-(p + 1)`` when ``p`` is a stand-in: :func:`stand_in_row`);
        the encoded stand-in rows ``-(T + k + 1)`` of the unfilled slots.
    """
    noise = noise_source() if noise is None else noise
    held = np.asarray(held, dtype=np.int64).reshape(-1)
    codes = np.asarray(codes, dtype=np.int32).reshape(-1, space.m)
    values = np.asarray(values, dtype=float).reshape(-1)
    n_targets = held.size + int(unfilled)
    if index is None:  # no validated record: a one-record index of public values (nothing private to search)
        bound = float(spec.public_schema.numeric[metric].min)
        public_codes = np.zeros((1, space.m), dtype=np.int32)
        index = CellIndex.from_aggregates(space, public_codes, np.array([bound]), np.array([1], dtype=np.int64))
    row_codes = np.zeros((n_targets, space.m), dtype=np.int32)
    row_values = np.zeros(n_targets, dtype=float)
    found = np.flatnonzero(held >= 0)
    row_codes[found] = codes[held[found]]
    row_values[found] = values[held[found]]
    chosen = [int(p) for p in found if p >= n_listed]  # detector-chosen records' rows

    def from_table(p: int) -> None:  # a uniformly random record: entry e with probability count_e / n_rows
        e = int(np.searchsorted(index.entry_cum, noise.integers(0, index.n_rows), side="right")) - 1
        cell = int(index.entry_cell[e])
        row_codes[p] = (cell // index.strides) % space.sizes
        row_values[p] = float(index.entry_value[e])

    out = np.arange(n_targets, dtype=np.int64)
    for p in range(n_targets):
        if p < held.size and held[p] >= 0:
            continue
        if p >= n_listed and chosen:  # a detector slot: like a filled slot
            q = chosen[noise.integers(0, len(chosen))]
            row_codes[p], row_values[p] = row_codes[q], row_values[q]
        else:
            from_table(p)
        out[p] = -(p + 1)
    return index.with_rows(row_codes, row_values), out[: held.size], [int(r) for r in out[held.size:]]


def reserve_pcor(settings: Settings, plan: PcorPlan) -> PcorPlan:
    """Per target: reuse a stored release, or charge it (flow process only).

    In a release run every charge draws from the run's reservation
    (:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve_lines`, made before the
    run's first charge), so nothing here can go over the budget. A target
    charged by a crashed run whose answer was never stored is searched again
    within that charge (:meth:`~dpcore.budget.ledger.PrivacyLedger.reserve` returns
    False: never charged twice).

    Raises
    ------
    BudgetExceededError
        Library use without a reservation: the batch's charges do not fit
        together; none of them was made.
    """
    ledger = open_stores(settings).ledger
    stored: dict[int, dict[str, Any]] = {}
    pending: list[int] = []
    for i, t in enumerate(plan.targets):
        found = ledger.lookup(t.request.key)
        if found is not None:
            stored[i] = found.payload
            continue
        pending.append(i)
    ledger.reserve_many([plan.targets[i].request for i in pending])  # the batch, or nothing of it
    return replace(plan, stored=stored, to_compute=tuple(pending))


def _search(job: PcorJob, row: int):
    """The mechanism's search and draws for held row ``row`` of ``job.index`` (a :class:`PCORResult`)."""
    verifier = make_verifier(job.verifier, **job.verifier_params)
    evaluator = ContextEvaluator(job.index, verifier, row, job.mechanism_params["utility"])
    if job.noise_seed is not None:  # tests only: seeded by the record's table position when known
        noise = NoiseSource(seed=job.noise_seed + (job.seed_offsets[row] if row < len(job.seed_offsets) else row))
    else:
        noise = NoiseSource()
    return job.mechanism().explain(evaluator, noise)


def compute_explanation(job: PcorJob, row: int) -> dict[str, Any]:
    """Run one PCOR search for the record at ``row`` (pure; safe on a Dask worker).

    Parameters
    ----------
    job : PcorJob
    row : int
        The record's held row in ``job.index``; negative, ``-(k + 1)``, for a
        target without a record (a roster id whose record is absent or
        quarantined, an unfilled detector slot): the same search runs on the
        stand-in held at row ``k`` (:func:`_with_stand_ins`) and its output
        is discarded, so the work does not depend on presence (rule 14); the
        outcome is ``no_valid_context``, released exactly as for a present
        record without a valid context (the charge is the same; the released
        outcome depends on nothing in the data).

    Returns
    -------
    dict
        ``release``: the publishable part (``status``; ``context`` rendered as
        predicates and ``bits``, or None when no valid context was found);
        ``internal``: data-dependent diagnostics (start context, utility of
        the released context, contexts verified) for the warehouse only.
    """
    if row < 0:  # no record: the same search on the stand-in, discarded; the data-independent outcome (rule 8)
        try:
            _search(job, stand_in_row(row))
        except Exception:  # noqa: BLE001 - the stand-in's search is discarded whatever it does
            pass
        return {
            "release": {"status": "no_valid_context", "context": None, "bits": None},
            "internal": {"start_context": None, "n_verified": 0, "n_candidates": 0, "population": None},
        }
    result = _search(job, row)
    space = job.space
    released = result.context is not None
    internal = {
        "start_context": space.bitstring(result.start_context) if result.start_context is not None else None,
        "n_verified": int(result.n_verified),
        "n_candidates": int(result.n_candidates),
        "population": int(job.index.population_size(result.context[None, :])[0]) if released else None,
    }
    return {
        "release": {
            "status": result.status,
            "context": space.render(result.context) if released else None,
            "bits": space.bitstring(result.context) if released else None,
        },
        "internal": internal,
    }


def _store_diagnostics(wh, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    diag = pd.DataFrame(rows)

    def op(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS internal.pcor_diagnostics (key VARCHAR, record_id VARCHAR, "
            "start_context VARCHAR, n_verified BIGINT, n_candidates BIGINT, population BIGINT)"
        )
        con.register("_diag", diag)
        con.execute("INSERT INTO internal.pcor_diagnostics SELECT key, record_id, start_context, "
                    "n_verified, n_candidates, population FROM _diag")

    wh.run(op, transaction=True)


def store_pcor(
    spec: ReleaseSpec, settings: Settings, plan: PcorPlan, results: dict[int, dict[str, Any] | BaseException]
) -> StepOutput:
    """Store the computed releases, mark failed searches, build the bundle section.

    Parameters
    ----------
    results : dict of int to dict or exception
        For every position in ``plan.to_compute``: the output of
        :func:`compute_explanation`, or the exception its search raised.

    Raises
    ------
    Exception
        The first failed search's exception, after everything else is stored
        (its charge stays spent, status ``failed``; a re-run searches it again within that charge).
    """
    stores = open_stores(settings)
    payloads = dict(plan.stored)
    diag, first_error = [], None
    for i in plan.to_compute:
        t = plan.targets[i]
        res = results.get(i)
        if res is None:
            res = RuntimeError("search result missing")
        if isinstance(res, BaseException):
            stores.ledger.mark_failed(t.request, type(res).__name__)
            first_error = first_error or res
            continue
        release = res["release"] if "record_id" in t.request.params and t.request.params["record_id"] is not None \
            else {**res["release"], "record_id": t.record_id}  # a detector slot's answer names its record
        payloads[i] = stores.ledger.store_result(t.request, release)  # the first stored answer wins
        diag.append({"key": t.request.key, "record_id": t.record_id, **res["internal"]})
    _store_diagnostics(stores.warehouse, diag)
    if first_error is not None:
        raise first_error
    return pcor_output(spec, plan, payloads)


def _choice_summary(spec: ReleaseSpec) -> str:
    cfg = spec.steps.pcor
    templates = pcor_source_templates(spec)
    how = ("named in steps.pcor.from_template" if cfg.from_template is not None
           else f"whose behavioural attribute is the metric {_metric(spec, cfg)}")
    text = (f"the highest-scoring records flagged by the template{'s' if len(templates) > 1 else ''} "
            f"{', '.join(templates)} ({how}), ranked by the detector's own score")
    if cfg.from_detector_own_cell:
        text += (f", keeping only those the {cfg.verifier} verifier flags in their own cell (exactly their own "
                 f"{', '.join(_context_attributes(spec, cfg))} values), so each has a valid starting context")
    return text + ". They are listed in record-id order."


def pcor_output(spec: ReleaseSpec, plan: PcorPlan, payloads: dict[int, dict[str, Any]]) -> StepOutput:
    """The released table (record, context, bits, status) and the report section.

    Issue 28, section 4: the explanations of detector-chosen records (every
    target not listed in ``steps.pcor.record_ids``, including the slots the
    detector left unfilled) go to the owner-only table
    ``detector_explanations`` (``owner/pcor__detector_explanations.csv``; an
    unfilled slot has an empty ``record_id``) unless
    ``publish_detector_chosen_ids`` is on; then the chosen records join the
    public table as before (unfilled slots are not listed). The public table
    and report depend on the spec's listed records alone by default.
    """
    cfg = spec.steps.pcor
    job = plan.job
    mech = job.mechanism()
    columns = ["record_id", "status", "context", "bits"]
    rows = [
        {
            # a detector slot's stored answer names the record it explains (a resumed run may choose another)
            "record_id": payloads[i].get("record_id", t.record_id),
            "status": payloads[i]["status"],
            "context": payloads[i]["context"],
            "bits": payloads[i]["bits"],
        }
        for i, t in enumerate(plan.targets)
    ]
    listed = set(cfg.record_ids)
    publish = not plan.from_detector or cfg.publish_detector_chosen_ids
    table = pd.DataFrame([r for r in rows if r["record_id"] in listed or (publish and r["record_id"])],
                         columns=columns)
    owner = {} if publish else {
        "detector_explanations": pd.DataFrame([r for r in rows if r["record_id"] not in listed], columns=columns)}
    if mech.n_exponential_calls() > 1:  # DFS / BFS: n search selections + the final one
        split = (f"{cfg.n_samples} search selections at epsilon {float(mech.selection_epsilon()):.6g} each and the "
                 f"final selection at {float(mech.final_epsilon()):.6g}")
    else:
        split = "one exponential-mechanism selection"
    lines = [
        "## Private contextual outlier explanations (PCOR, output-constrained DP)",
        "",
        f"Each record below is explained by one context over {', '.join(job.space.attributes)} "
        f"(full public domains, t = {job.space.t}) in which it is an outlier of "
        f"{_metric(spec, cfg)} under the {cfg.verifier} verifier, chosen by "
        f"{cfg.sampler} sampling (n = {cfg.n_samples}) and the exponential mechanism with "
        f"{cfg.utility} utility. Cost: {pcor_cost_statement(spec, mech)} ({split}); "
        "notion OCDP: the guarantee covers neighbouring datasets (one record added or removed) that leave the "
        "set of valid contexts of the record unchanged (Shafieinejad et al., Definition 2.5).",
        "",
    ]
    if plan.from_detector and publish:
        lines += [
            f"The records include up to {plan.from_detector} chosen by the non-private detector: "
            f"{_choice_summary(spec)} That choice is not protected, so the list of explained ids is not either; "
            "only the contexts are.",
            "",
        ]
    elif plan.from_detector:
        lines += [detector_choice_owner_only("pcor", plan.from_detector, "explanations"), ""]
    lines += ["| record | context | status |", "|---|---|---|"]
    lines += [
        f"| {md_cell(r.record_id)} | {md_cell(r.context) if isinstance(r.context, str) else '(none)'} | {r.status} |"
        for r in table.itertuples()
    ]
    shortfall = mech.utility_shortfall(spec.accuracy_alpha)
    what = "population (records in the context)" if cfg.utility == "population" else "overlap with the record's cell"
    accuracy = Accuracy(
        shortfall, 1 - spec.accuracy_alpha, "utility",
        f"with probability at least {level_text(spec.accuracy_alpha)}, the released context's {what} is within "
        f"{shortfall:.1f} of the best of the at most {mech.final_candidates_bound()} contexts the search compared "
        f"(exponential mechanism: 2/eps_f (ln R + ln(1/alpha)), eps_f = {float(mech.final_epsilon()):.4g}); "
        "no_valid_context means no valid context was found (charged)",
    )
    at = lines.index("| record | context | status |")
    lines[at:at] = [f"Accuracy: {accuracy.statement}.", ""]
    not_protected = [
        "The explained record's own value and presence: its context is searched around its own private values.",
        "Neighbouring datasets that change the explained record's set of valid contexts (OCDP, Definition 2.5 "
        "of Shafieinejad et al.): the guarantee holds only for neighbours that keep that set.",
    ]
    if plan.from_detector and publish:
        not_protected.append(pcor_choice_statement(spec))
    for t in (table, *owner.values()):
        t["utility_shortfall_bound"] = shortfall
        t["ci_level"] = 1 - spec.accuracy_alpha
    return StepOutput("pcor", {"explanations": table}, "\n".join(lines), keys=[t.request.key for t in plan.targets],
                      not_protected=not_protected, accuracy={"explanations": accuracy.as_dict()}, owner_tables=owner)


def pcor_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None
) -> StepOutput:
    """Explain every target record, one charge each, searches run in this process.

    Returns
    -------
    StepOutput
        Table ``explanations`` (record_id, status, context, bits) and a report section.

    Raises
    ------
    StepInputError
        Bad parameters or unknown records; nothing charged.
    BudgetExceededError
        The explanations do not fit the remaining budget.
    """
    plan = reserve_pcor(settings, plan_pcor(spec, settings, ingested, flow_run_id))
    results: dict[int, dict[str, Any] | BaseException] = {}
    for i in plan.to_compute:
        try:
            results[i] = compute_explanation(plan.job, plan.targets[i].row)
        except Exception as exc:  # stored as failed by store_pcor, then re-raised
            results[i] = exc
    return store_pcor(spec, settings, plan, results)
