"""Private step ``aiq``: (beta, r)-anomaly identification queries (seed 001).

For each queried record id or public point, release one bit — "is it a
(beta, r)-anomaly of the validated table?" — from
:class:`~dpcore.mechanisms.aiq.AnomalyIdentification` (sensitive privacy with
lambda_k, or epsilon-DP with Delta_G). The ball counts B_x(i, r) and
multiplicities x_i are computed inside the mechanism call and kept only in
``internal.aiq_diagnostics``; the release is the list of (query, answer) pairs.

Conventions
-----------
* Distance: Euclidean over the chosen numeric attributes, each scaled to
  [0, 1] by its public bounds (never by data statistics).
* Queries by record id (issue 15, holes 2-3): only ids on the spec's public
  roster (``dataset.roster``) may be asked about; an id off the roster, or
  any id without a roster, is refused before any charge (a public fact). A
  roster id is always charged and answered through the mechanism: present
  records with their own value as the query point, absent or quarantined ones
  with the data-independent input ``(b, xi) = (0, 0)``
  (:meth:`AnomalyIdentification.record_query_counts`), so presence and
  validity are never answered for free. The queried record's own value and
  presence are not protected (the query point is its value; rule 9, stated in
  the manifest and report); every other record keeps the charged guarantee.
* Detector-chosen records (``from_detector``, issue 28 section 4): the
  choice is the non-private detector's, so by default the answers about
  those records go to the bundle's ``owner/`` folder only
  (:func:`split_detector_answers`): the public bundle names neither the ids
  nor how many were chosen, and the batch is charged for the public bound
  ``from_detector`` whatever the choice. ``publish_detector_chosen_ids: true``
  publishes them (stated as not protected, rule 9).
* Cost (Section 3.1): record-id queries compose sequentially (Claim 3),
  ``n_ids * epsilon``; the positions of records are private, so the
  parallel-composition count of Claim 5 is not computed from them. Explicit
  public points may use Claim 5 (``m * epsilon``, m from their public
  positions). The batch's total is one ledger charge.
* Counting (issues 21 and 29): the table is never loaded whole. The queried
  records' own values come from a SQL lookup of their ids; ``B_x(i, r)`` and
  ``x_i`` of every query point are then ``2 q`` filtered counts of ONE SQL
  aggregate over the validated table
  (:func:`dpcore.mechanisms.neighbors_sql.table_ball_counts`): DuckDB scales each row by
  the public bounds and sums the squared differences with the same IEEE
  operations, in the same order, as :func:`dpcore.mechanisms.neighbors.scale_by_bounds`
  and the KD-tree's point-to-point distance, so the counts are those of the
  in-memory path (seed 001, Section 2; tested on random and tie-heavy data
  and on the demo). No export, no Parquet file, no pandas frame, memory of
  DuckDB's vectors; the scan runs on the warehouse's threads, next to the
  data (BENCHMARKS, "AIQ counting at scale": several times faster than the
  chunked KD-tree path it replaces). Only for attribute types whose conversion to DOUBLE could
  differ from numpy's (DECIMAL, ...; :func:`~dpcore.mechanisms.neighbors_sql.sql_countable`)
  does the step fall back to the chunked path: the attributes exported once
  to private Parquet partitions (:func:`dpcore.storage.partitions.exported`), each
  chunk scaled and counted by :func:`dpcore.mechanisms.neighbors.chunked_ball_counts`
  (brute force for a few queries, :func:`dpcore.mechanisms.neighbors.few_query_counts`),
  one chunk in memory at a time, chunk size from ``DPR_MEMORY_LIMIT``
  (:meth:`dpcore.runtime.chunks.MemoryBudget.chunk_rows`, public), the chunks on the
  ``mapper``'s workers.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from dpcore.mechanisms.accuracy import Accuracy
from dpcore.budget.amounts import PrivacyCost
from dpcore.publish.bundle import StepOutput
from dpcore.ingest.raw import IngestResult
from ..mechanisms.aiq import AnomalyIdentification
from dpcore.runtime.chunks import serial_map
from dpcore.mechanisms.neighbors import scale_by_bounds
from ..noise import NoiseSource
from dpcore.mechanisms.neighbors_sql import sql_countable, table_ball_counts
from dpcore.storage.partitions import Partitions, exported
from dpcore.storage.quoting import md_cell
from dpcore.storage.settings import Settings
from dpcore.release.spec import AiqSpec, ReleaseSpec
from .detect import DETECTOR_CHOICE_NOT_PROTECTED, detector_choice_owner_only, flagged_records
from .common import (
    PlannedCharge, StepInputError, charge_request, check_record_ids, noise_source, open_stores,
    require_public_completeness, validated_table,
)
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


def _check_queries(spec: ReleaseSpec, cfg: AiqSpec, attrs: list[str], record_ids: list[str]) -> None:
    if not cfg.record_ids and not cfg.points and not cfg.from_detector:
        raise StepInputError("steps.aiq: no queries; give record_ids, points or from_detector")
    check_record_ids(spec, record_ids, "steps.aiq.record_ids")
    require_public_completeness(spec, "aiq")
    for n, point in enumerate(cfg.points):
        if set(point) != set(attrs):
            raise StepInputError(
                f"steps.aiq.points[{n}] must give exactly the attributes {attrs}; got {sorted(point)}"
            )
        for a in attrs:
            b = spec.public_schema.numeric[a]
            if not (np.isfinite(point[a]) and b.min <= point[a] <= b.max):
                raise StepInputError(
                    f"steps.aiq.points[{n}].{a} = {point[a]!r} is outside the public bounds [{b.min:g}, {b.max:g}]"
                )


def check_aiq(spec: ReleaseSpec) -> AnomalyIdentification:
    """Every public check of ``steps.aiq``; touches no data (the release's preflight).

    Raises
    ------
    StepInputError, ValueError
        Bad parameters or requests (point outside the public bounds, repeated
        ids, ids off the public roster or no roster, no queries, nullable
        attributes); nothing is charged. Whether an id is present or valid is
        never checked (rule 8).
    """
    cfg = spec.steps.aiq
    mech = AnomalyIdentification(beta=cfg.beta, r=cfg.r, epsilon=cfg.epsilon, k=cfg.k, mechanism=cfg.mechanism)
    try:
        mech.validate()
    except ValueError as exc:
        raise StepInputError(f"steps.aiq: {exc}") from None
    _check_queries(spec, cfg, list(cfg.attributes or spec.public_schema.numeric), list(cfg.record_ids))
    return mech


def aiq_cost(spec: ReleaseSpec, mech: AnomalyIdentification) -> PrivacyCost:
    """The batch's charge, from the spec alone (Section 3.1).

    Record-id queries compose sequentially, ``(len(record_ids) + from_detector) * epsilon``: the number
    of detector-chosen ids is data-dependent, so the batch is charged for the public bound
    ``from_detector``; public points may use Claim 5 (``m * epsilon``, m from their public positions).
    """
    cfg = spec.steps.aiq
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    n_charged = len(cfg.record_ids) + cfg.from_detector
    cost = mech.batch_cost(n_charged, None) if n_charged else PrivacyCost(0)
    if cfg.points:
        lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
        highs = np.array([spec.public_schema.numeric[a].max for a in attrs])
        points = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
        cost = cost + mech.batch_cost(
            len(points), AnomalyIdentification.batch_m(scale_by_bounds(points, lows, highs), cfg.r))
    return cost


def _public_params(spec: ReleaseSpec) -> dict[str, Any]:
    """The batch's idempotency parameters except the queried ids (which the detector may extend)."""
    cfg = spec.steps.aiq
    return {
        "mechanism": cfg.mechanism, "epsilon": cfg.epsilon, "beta": cfg.beta, "r": cfg.r, "k": cfg.k,
        "attributes": list(cfg.attributes or spec.public_schema.numeric), "from_detector": cfg.from_detector,
        "points": [dict(p) for p in cfg.points],
    }


def aiq_planned_charges(spec: ReleaseSpec) -> list[PlannedCharge]:
    """The batch's one charge, from the spec alone (:mod:`dpcore.run.cost_plan`); checks the step first."""
    mech = check_aiq(spec)
    match = _public_params(spec)
    if not spec.steps.aiq.from_detector:
        match["record_ids"] = list(spec.steps.aiq.record_ids)
    return [PlannedCharge.of("aiq", mech, aiq_cost(spec, mech), match)]


def _bytes_per_row(n_attrs: int) -> int:
    """Bytes one row of a chunk costs while it is counted (measured: about 16 float64 copies per attribute).

    The Arrow table and its pandas copy, the float64 array, the scaling's
    temporaries and result, the counting's normalised copy and the KD-tree's
    own copy, the equality masks, plus the tree's index and nodes (64 bytes).
    """
    return 16 * 8 * n_attrs + 64


@dataclass(frozen=True)
class ScaledPartitions:
    """A chunk source over exported partitions: chunk ``i`` read and scaled by the public bounds.

    Picklable (a Dask mapper sends it to workers, which read the private
    Parquet file without the warehouse). The scaling is
    :func:`~dpcore.mechanisms.neighbors.scale_by_bounds` on each chunk's rows: the same
    elementwise float64 operations as on the whole table.
    """

    parts: Partitions
    columns: tuple[str, ...]
    lows: np.ndarray
    highs: np.ndarray

    @property
    def n_chunks(self) -> int:
        """int: number of chunks."""
        return self.parts.n_chunks

    def chunk(self, i: int) -> np.ndarray:
        """Chunk ``i``'s attributes scaled by the public bounds, float64 ``(rows, d)``."""
        cols = list(self.columns)
        return scale_by_bounds(self.parts.read(i, cols)[cols].to_numpy(dtype=float).reshape(-1, len(cols)),
                               self.lows, self.highs)


def chunk_rows(wh, n_attrs: int) -> int:
    """Rows per chunk: from the memory cap and the number of attributes only (public, never the data)."""
    return wh.memory.chunk_rows(_bytes_per_row(n_attrs))


@contextmanager
def scaled_chunks(wh, spec: ReleaseSpec, ingested: IngestResult, attrs: list[str], lows, highs,
                  rows: int | None = None) -> Iterator[ScaledPartitions]:
    """The validated table's ``attrs`` exported to private partitions, as a scaled chunk source (removed on exit)."""
    cols = ", ".join(f'"{a}"' for a in attrs)
    rows = chunk_rows(wh, len(attrs)) if rows is None else int(rows)
    with exported(wh, f"SELECT {cols} FROM {validated_table(spec, ingested)}", rows=rows) as parts:
        yield ScaledPartitions(parts, tuple(attrs), np.asarray(lows, float), np.asarray(highs, float))


def record_points(wh, spec: ReleaseSpec, ingested: IngestResult, attrs: list[str], record_ids: list[str],
                  lows, highs) -> tuple[np.ndarray, np.ndarray]:
    """The queried records' own values (a SQL lookup of their ids), scaled by the public bounds.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The query points (zeros for an id not in the validated table: the
        step counts a stand-in point instead, :func:`stand_in_points`) and
        which ids are present. Internal only: whether an id is present is
        private (DESIGN.md rule 8), the values too.

    Raises
    ------
    RuntimeError
        The validated table holds an id twice (validation quarantines every
        row of a repeated id, so this means the warehouse was altered); the
        message names the column only.
    """
    queries = np.zeros((len(record_ids), len(attrs)), dtype=np.float64)
    present = np.zeros(len(record_ids), dtype=bool)
    if not record_ids:
        return queries, present
    rid = spec.dataset.record_id
    cols = ", ".join(f'"{a}"' for a in attrs)
    df = wh.query_df(
        f'SELECT "{rid}" AS _dpr_id, {cols} FROM {validated_table(spec, ingested)} '
        f'WHERE "{rid}" IN (SELECT unnest(?::VARCHAR[]))', [list(record_ids)])
    if df["_dpr_id"].duplicated().any():
        raise RuntimeError(f"the validated table repeats a value of the record id column '{rid}'; re-run validation")
    pos = np.asarray(pd.Index(df["_dpr_id"].astype(str)).get_indexer(list(record_ids)), dtype=np.int64)
    present = pos >= 0
    vals = df[attrs].to_numpy(dtype=float).reshape(-1, len(attrs))
    queries[present] = scale_by_bounds(vals[pos[present]], lows, highs)
    return queries, present


def stand_in_points(wh, spec: ReleaseSpec, ingested: IngestResult, attrs: list[str], k: int, lows, highs,
                    noise: NoiseSource) -> np.ndarray:
    """``k`` query points, each the values of a record drawn uniformly at random from the validated table.

    Issue 46.2, DESIGN.md rule 14: the point counted for a query without a
    record (an absent or quarantined id, an unfilled detector slot) is a
    real record's, so the aggregate does the work of a query about a
    uniformly random present record (a fixed point such as the public lower
    bounds made the count ten times faster). Always the same two queries
    (the table's size, then the drawn rows), whoever is present; the draws
    go through ``noise`` (:mod:`dpcore.noise`) and are never released.

    Parameters
    ----------
    wh, spec, ingested, attrs
        As :func:`record_points`.
    k : int
        How many points (the batch's record-id queries and detector slots: public).
    lows, highs : numpy.ndarray
        Public bounds of ``attrs``.
    noise : NoiseSource
        The release's noise source (OS CSPRNG; seeded only in tests).

    Returns
    -------
    numpy.ndarray, shape (k, len(attrs))
        Scaled by the public bounds; zeros when the validated table is empty. Internal only.
    """
    table = validated_table(spec, ingested)
    points = np.zeros((k, len(attrs)), dtype=np.float64)
    n = int(wh.query(f"SELECT count(*) FROM {table}")[0][0])
    draws = noise.integers(0, max(n, 1), size=k)
    cols = ", ".join(f'"{a}"' for a in attrs)
    df = wh.query_df(f"SELECT _k, {cols} FROM (SELECT row_number() OVER () - 1 AS _k, {cols} FROM {table}) "
                     "WHERE _k IN (SELECT unnest(?::BIGINT[]))", [sorted({int(d) for d in draws})])
    if len(df):
        pos = pd.Index(df["_k"].to_numpy(dtype=np.int64)).get_indexer(draws)
        points = scale_by_bounds(df[attrs].to_numpy(dtype=float)[pos].reshape(k, len(attrs)), lows, highs)
    return points


def column_types(wh, spec: ReleaseSpec, ingested: IngestResult, attrs: list[str]) -> dict[str, str]:
    """The SQL types of the validated table's ``attrs`` (a public fact of the schema, not of the rows)."""
    cols = ", ".join(f'"{a}"' for a in attrs)
    return {str(row[0]): str(row[1]) for row in wh.query(f"DESCRIBE SELECT {cols} FROM {validated_table(spec, ingested)}")}


def _store_diagnostics(wh, diag: pd.DataFrame) -> None:
    """Ball counts and multiplicities (non-private) go to ``internal`` only."""

    def op(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS internal.aiq_diagnostics "
            "(key VARCHAR, query VARCHAR, ball_count BIGINT, multiplicity BIGINT)"
        )
        con.register("_diag", diag)
        con.execute("INSERT INTO internal.aiq_diagnostics SELECT * FROM _diag")

    wh.run(op, transaction=True)


def aiq_step(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, flow_run_id: str | None = None,
    mapper=serial_map,
) -> StepOutput:
    """Answer the spec's AIQ batch (``steps.aiq``) with one ledger charge.

    Parameters
    ----------
    spec : ReleaseSpec
        ``spec.steps.aiq`` holds mechanism, epsilon, beta, r, k, attributes,
        record_ids and points.
    settings : Settings
    ingested : IngestResult
    flow_run_id : str, optional
    mapper : callable
        Runs the per-chunk counting of the chunked fallback only
        (:func:`dpcore.runtime.chunks.serial_map`; a Dask mapper from the flow layer
        runs it on workers). The SQL count, the normal path, is one scan on
        the warehouse's own threads: shipping chunks to workers would need the
        Parquet export, which alone costs more than the whole aggregate. Noise
        and the ledger stay in this process.

    Returns
    -------
    StepOutput
        Table ``answers`` (query, anomaly) and a report section; with
        ``from_detector`` and ``publish_detector_chosen_ids`` off, the
        answers about detector-chosen records are the owner-only table
        ``detector_answers`` (:func:`split_detector_answers`).

    Raises
    ------
    StepInputError, ValueError
        Bad parameters or queries (id off the public roster, point outside
        the public bounds, beta < 1, r < 0, k < 1, epsilon <= 0); nothing is
        charged. An absent or quarantined roster id is answered, not refused.
    BudgetExceededError
        The batch's cost does not fit the remaining budget.
    """
    cfg = spec.steps.aiq
    mech = check_aiq(spec)
    attrs = list(cfg.attributes or spec.public_schema.numeric)
    stores = open_stores(settings)
    wh = stores.warehouse
    record_ids = list(cfg.record_ids)
    if cfg.from_detector:  # present by construction; their choice is stated as not protected
        record_ids += [i for i in flagged_records(wh, spec, ingested, cfg.from_detector) if i not in record_ids]
    lows = np.array([spec.public_schema.numeric[a].min for a in attrs])
    highs = np.array([spec.public_schema.numeric[a].max for a in attrs])

    points = np.array([[p[a] for a in attrs] for p in cfg.points], dtype=float).reshape(-1, len(attrs))
    cost = aiq_cost(spec, mech)
    noise = noise_source()
    params = {**_public_params(spec), "record_ids": record_ids}
    req = charge_request(spec, "aiq", mech, cost, params, noise, flow_run_id)
    labels = [f"record:{i}" for i in record_ids] + [_point_label(p) for p in cfg.points]

    def compute() -> dict[str, Any]:
        # record-id queries: the records' own values by a SQL lookup; absent/quarantined ids get the
        # data-independent input (0, 0), never a refusal
        q_r, present = record_points(wh, spec, ingested, attrs, record_ids, lows, highs)
        q_p = scale_by_bounds(points, lows, highs) if len(points) else np.zeros((0, len(attrs)))
        # issue 46.2, rule 14: every query point is counted, present or not, and so is one stand-in per
        # detector slot left unfilled (the public bound from_detector): the same aggregate over the same
        # number of points whoever is in the table; the counts of a recordless query are then discarded
        # (whose points are real records' drawn at random: stand_in_points, always the same queries)
        n_listed, n_slots = len(cfg.record_ids), len(cfg.record_ids) + cfg.from_detector
        draw = noise_source()  # its own source: the answers' draws stay as they were (a seeded test's too)
        stand = stand_in_points(wh, spec, ingested, attrs, n_slots, lows, highs, draw)
        q_r = np.where(present[:, None], q_r, stand[: len(record_ids)])
        n_pad = n_slots - len(record_ids)
        chosen = q_r[n_listed:]  # the detector's chosen records: an unfilled slot counts one of them, drawn
        pad = (chosen[[int(draw.integers(0, len(chosen))) for _ in range(n_pad)]] if len(chosen)
               else stand[len(record_ids):])
        counted = np.vstack([q_r, q_p, pad.reshape(n_pad, len(attrs))])
        live = np.concatenate([present, np.ones(len(q_p), dtype=bool)])
        cap = mech.saturation_cap()
        if sql_countable(column_types(wh, spec, ingested, attrs)):
            # one SQL aggregate over the validated table: every count exact, the unsaturated ones kept for
            # the rare saturated query whose answer needs its exact B (no second pass)
            b, xi, exact = _kept(live, *table_ball_counts(
                wh.query, validated_table(spec, ingested), attrs, lows, highs, counted, float(mech.r), cap=cap))
            answers = mech.answer(b, xi, noise, cap=cap, exact_count=lambda j: int(exact[j]))
        else:
            with scaled_chunks(wh, spec, ingested, attrs, lows, highs) as source:
                # one pass over the chunks for every query, saturated at cap: exact answers
                cb, cxi, cap = mech.counts(source, counted, mapper=mapper)
                b, xi = _kept(live, cb, cxi)
                answers = mech.answer(
                    b, xi, noise, cap=cap,
                    exact_count=lambda j: mech.exact_count(source, counted[j], mapper=mapper) if live[j] else 0,
                )
        _store_diagnostics(wh, pd.DataFrame({"key": req.key, "query": labels, "ball_count": b, "multiplicity": xi}))
        return {"answers": [{"query": q, "anomaly": bool(a)} for q, a in zip(labels, answers)]}

    released = stores.ledger.release_once(req, compute)
    p_err = mech.max_error_probability()
    table, owner = split_detector_answers(spec, pd.DataFrame(released.payload["answers"], columns=["query", "anomaly"]))
    table["max_error_probability"] = p_err
    for t in owner.values():
        t["max_error_probability"] = p_err
    rate = "epsilon / 2" if cfg.mechanism == "compiler" else "epsilon"
    accuracy = Accuracy(
        p_err, 1.0, "error_probability",
        f"each answer is wrong with probability at most {p_err:.3g} = 1 / (1 + e^({rate})), attained only at the "
        f"anomaly boundary; a query lambda changes away from the other answer is wrong with probability "
        f"e^(-({rate}) (lambda - 1)) / (1 + e^({rate})) (seed 001, Section 4)",
    )
    notion = "sensitive privacy" if mech.notion == "sp" else "differential privacy"
    md = (
        f"## Anomaly identification queries ({notion})\n\n"
        f"(beta, r) = ({cfg.beta}, {cfg.r:g}) over {', '.join(attrs)} scaled by their public bounds; "
        f"mechanism {mech.name}, epsilon = {cfg.epsilon:g} per query"
        + (f", k = {cfg.k}" if cfg.mechanism == "sp" else "")
        + f"; batch charged epsilon = {float(cost.epsilon):g}.\n\n"
        + (
            f"The queried ids include the detector's top {cfg.from_detector} flagged records: that choice is made by "
            "the non-private detector, so the list of queried ids itself is not protected; only the answers are.\n\n"
            if cfg.from_detector and cfg.publish_detector_chosen_ids else ""
        )
        + (detector_choice_owner_only("aiq", cfg.from_detector, "answers") + "\n\n"
           if cfg.from_detector and not cfg.publish_detector_chosen_ids else "")
        + f"Accuracy: {accuracy.statement}.\n\n"
        + "| query | anomaly? | wrong with probability at most |\n|---|---|---|\n"
        + "\n".join(f"| {md_cell(r.query)} | {'yes' if r.anomaly else 'no'} | {p_err:.3g} |"
                    for r in table.itertuples(index=False))
    )
    published_detector = bool(cfg.from_detector) and cfg.publish_detector_chosen_ids
    not_protected = []
    if cfg.record_ids or published_detector:
        not_protected.append(
            "The queried record's own value and presence: a record-id query uses that record's private values "
            "as the query point (a roster id that is absent or quarantined is answered from a data-independent "
            "input instead), so the guarantee covers every other record, not the queried one."
        )
    if published_detector:
        not_protected.append(DETECTOR_CHOICE_NOT_PROTECTED)
    return StepOutput("aiq", {"answers": table}, md, keys=[released.key], not_protected=not_protected,
                      accuracy={"answers": accuracy.as_dict()}, owner_tables=owner)


def _kept(live: np.ndarray, *counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """The counts of the first ``len(live)`` queries, zero where ``live`` is False (a recordless query's input).

    The counts of every query point were computed (issue 46.2: the same work whether a record is there);
    an absent or quarantined id's answer is drawn from the data-independent ``(b, xi) = (0, 0)`` as before,
    and the stand-ins of unfilled detector slots (the rows after ``len(live)``) are dropped.
    """
    out = []
    for c in counts:
        kept = np.zeros(len(live), dtype=np.int64)
        kept[live] = np.asarray(c, dtype=np.int64)[: len(live)][live]
        out.append(kept)
    return tuple(out)


def _point_label(point: dict[str, float]) -> str:
    """The ``query`` label of a public point (its coordinates, sorted by attribute)."""
    return f"point:{json.dumps(point, sort_keys=True)}"


def split_detector_answers(spec: ReleaseSpec, answers: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The batch's answers split into the public table and the owner-only answers about detector-chosen records.

    Issue 28, section 4: which records the non-private detector chose is
    protected by no guarantee, so unless ``steps.aiq.publish_detector_chosen_ids``
    is on, the answers about them go to the bundle's ``owner/`` folder only.
    A row is public when its query is one the spec names (a listed record id
    or a public point); every other row of the stored answers is about a
    detector-chosen record. The public table therefore depends on the spec
    and the noisy answers to the spec's own queries only, never on the
    detector's choice (nor on how many it chose); the owner table exists
    whenever ``from_detector`` is set (possibly empty), a fact of the spec.

    Parameters
    ----------
    spec : ReleaseSpec
    answers : pandas.DataFrame
        ``query`` and ``anomaly`` of every query of the batch (the ledger's payload).

    Returns
    -------
    (pandas.DataFrame, dict of str to pandas.DataFrame)
        The public answers (spec order kept) and ``{"detector_answers": ...}``
        when the detector's answers stay owner-only, else ``{}``.
    """
    cfg = spec.steps.aiq
    if not cfg.from_detector or cfg.publish_detector_chosen_ids:
        return answers.reset_index(drop=True), {}
    named = {f"record:{i}" for i in cfg.record_ids} | {_point_label(p) for p in cfg.points}
    public = answers["query"].isin(named).to_numpy()
    return (answers[public].reset_index(drop=True),
            {"detector_answers": answers[~public].reset_index(drop=True)})
