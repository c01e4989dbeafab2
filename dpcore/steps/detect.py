"""Non-private step ``detect``: robust contextual outlier detection per template.

Seed 004 part 1 ("Outlier Detector Overview"): one filter per correlation
template (j, S); each fits :class:`~dpcore.detect.robust_em.RobustRegressionDetector`
and scores every record; a record is an outlier if at least one filter flags
it. Everything this step computes is **internal**: scores, labels, fitted
parameters and convergence diagnostics go to the warehouse's ``internal``
schema only, never to logs, artifacts or the bundle. The private steps use it
to choose which records to talk about.

Diagnostics are data, never warnings or log records (DESIGN.md, privacy rule 6;
issue 15, hole 12). The detector emits no Python warning: non-convergence and
the like are attributes of the fitted detector (``converged_``,
``diagnostics_``), copied into the fit's params and stored in
``internal.detect_models``. This module never touches the process-global
``warnings`` state (``warnings.catch_warnings`` is not thread-safe, and the
template fits run concurrently in Prefect's thread pool). Exceptions raised
here name templates, attributes and public parameters only, never data values,
row counts or row positions.

Tables (suffix = the validated table's name):

``internal."detect_scores__<t>"``   ``_row``, template, score, label
``internal."detect_flags__<t>"``    ``_row``, flagged (any template), max score, templates flagging it
``internal.detect_models``          template, fitted parameters and diagnostics as JSON (``params``)

The score tables are keyed by ``_row``, the validated table's input row
number (unique, BIGINT), not by the record id: the record id is read from
the validated table by ``_row`` where it is needed (:func:`flagged_by_score`,
a few records), so the detector's 2 x n scores and n flags never copy an id
(issue 29, goal 3: at 100x the store wrote 33.7M ids three times, most of its
49 s; BENCHMARKS "detect_store").
"""
from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from dpcore.runtime.chunks import MemoryBudget, serial_map
from ..detect.combine import Template, TemplateFit, combine, fit_template
from ..detect.settings import DetectorSettings
from ..detect.kth_pair import kth_pair
from ..detect.streaming import StreamedFit, fit_partitions
from dpcore.storage.lineage import new_nonce
from dpcore.storage.partitions import NotInOrder, Partitions, export_partitions, scratch_dir
from dpcore.ingest.raw import ROW, IngestResult
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from ..validation import validated_table_name
from dpcore.storage.warehouse import Warehouse
from .common import StepInputError, load_columns, open_stores, require_public_completeness, validated_table
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


@dataclass(frozen=True)
class DetectionDone:
    """What the detect step may say publicly: which templates ran (no counts, no scores).

    ``table_suffix`` names the internal tables; it is private (left out of ``repr``).
    """

    templates: tuple[str, ...]
    table_suffix: str = field(repr=False)  # private: the same for every ingest of the same bytes (dpcore.ingest.raw)


def templates_of(spec: ReleaseSpec) -> list[Template]:
    """The spec's correlation templates as :class:`Template` values."""
    return [
        Template(t.name, t.behavioural, tuple(t.contextual), tuple(sorted(t.transforms.items())))
        for t in spec.steps.detect.templates
    ]


def detection_frame(spec: ReleaseSpec, settings: Settings, ingested: IngestResult) -> pd.DataFrame:
    """Record id and every attribute any template uses, from the validated table.

    Raises
    ------
    StepInputError
        A template uses a nullable attribute (the regression needs complete
        rows) or a transform outside its public domain (``log`` without a
        public ``min > 0``): :func:`~dpcore.steps.common.require_public_completeness`,
        before any data is read.
    """
    require_public_completeness(spec, "detect")
    attrs = sorted({a for t in templates_of(spec) for a in (t.behavioural, *t.contextual)})
    return load_columns(open_stores(settings).warehouse, spec, ingested, attrs)


def fit_one(df: pd.DataFrame, template: Template, spec: ReleaseSpec) -> TemplateFit:
    """Fit one template with the spec's detector settings (:meth:`~dpcore.detect.settings.DetectorSettings.from_spec`).

    The detector's ``sigma2_floor`` is the behavioural attribute's measurement
    floor from the public schema (``1/12`` for ``integer: true`` without a
    transform, :func:`~dpcore.detect.design.sigma2_floor_of`: the settings'
    ``sigma2_floor="auto"``); it is stored in the fit's params (``sigma2_floor``).

    Diagnostics (non-convergence, sigma2 at its floor, ...) are data in the
    fit's params (``converged``, ``n_iter``, ``last_relative_change``,
    ``diagnostics``), which :func:`store_detection` writes to
    ``internal.detect_models`` only. The fit emits no warning and logs nothing,
    and this function touches no process-global state, so it is safe to call
    concurrently from threads (Prefect's default task runner).

    Raises
    ------
    KeyError, ValueError
        As :func:`~dpcore.detect.combine.fit_template`: messages name the
        template and its attributes, never values, row counts or positions.
    """
    return fit_template(df, template, spec.public_schema, DetectorSettings.from_spec(spec))


def store_detection(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, ids: np.ndarray, fits: list[TemplateFit]
) -> DetectionDone:
    """Write scores, combined flags and fitted parameters (with their diagnostics) to ``internal``.

    The in-memory path (tests, small tables): ``ids`` are the record ids of
    the rows the fits scored, in their order (:func:`detection_frame`); each
    is looked up in the validated table for its ``_row``, the tables' key
    (as :func:`store_streamed_detection`'s).
    ``internal.detect_models.params`` holds each fit's params as JSON,
    including ``converged`` and ``diagnostics`` (see
    :class:`~dpcore.detect.combine.TemplateFit`); nothing is logged or returned
    beyond the template names.

    Raises
    ------
    ValueError
        An id is not in the validated table (the fits are of another input).
    """
    suffix = validated_table_name(ingested, spec)
    flagged, max_score = combine(fits)
    n_flagging = np.sum([f.labels for f in fits], axis=0) if fits else np.zeros(len(ids), dtype=int)
    rid = spec.dataset.record_id
    wh = open_stores(settings).warehouse
    rows = _rows_of_ids(wh, spec, ingested, ids)
    scores = pd.concat(
        [pd.DataFrame({ROW: rows, "template": f.template.name, "score": f.scores, "label": f.labels.astype(np.int8)})
         for f in fits],
        ignore_index=True,
    )
    flags = pd.DataFrame({ROW: rows, "flagged": flagged.astype(bool), "max_score": max_score,
                          "templates_flagging": n_flagging.astype(np.int32)})
    models = pd.DataFrame({
        "table_suffix": suffix,
        "template": [f.template.name for f in fits],
        "params": [json.dumps(f.params, default=float) for f in fits],
        "created_at": datetime.now(timezone.utc),
    })

    def op(con):
        for name, df in (("detect_scores", scores), ("detect_flags", flags)):
            con.register("_df", df)
            con.execute(f'CREATE OR REPLACE TABLE internal."{name}__{suffix}" AS SELECT * FROM _df')
            con.unregister("_df")
        _write_models(con, suffix, models)

    wh.run(op, transaction=True)
    return DetectionDone(tuple(f.template.name for f in fits), suffix)


def _rows_of_ids(wh: Warehouse, spec: ReleaseSpec, ingested: IngestResult, ids: np.ndarray) -> np.ndarray:
    """The validated table's ``_row`` of each record id, in the ids' order (int64).

    Raises
    ------
    ValueError
        An id is not in the validated table (its message names no id).
    """
    rid = spec.dataset.record_id
    frame = pd.DataFrame({"_pos": np.arange(len(ids), dtype=np.int64), rid: np.asarray(ids)})  # the ids' own type

    def op(con):
        con.register("_ids", frame)
        try:
            return con.execute(
                f'SELECT v._row FROM _ids i JOIN {validated_table(spec, ingested)} v ON v."{rid}" = i."{rid}" '
                "ORDER BY i._pos").fetchnumpy()["_row"]
        finally:
            con.unregister("_ids")

    rows = np.asarray(wh.run(op), dtype=np.int64)
    if rows.shape[0] != len(ids):
        raise ValueError("store_detection: some record ids are not in the validated table of this input "
                         "(pass the ids of detection_frame's rows, in its order)")
    return rows


# --------------------------------------------------------------------------- streamed detection (issue 21)
def _bytes_per_row(spec: ReleaseSpec) -> int:
    """What one row of a chunk costs while a template works on it (public: from the schema only).

    The exported attributes as read (8 bytes per number, ~60 per text cell),
    plus, for the widest template, its design matrix three times (the raw
    ``X``, the standardised ``Z`` and the weighted ``Z * w``) and a dozen
    per-row vectors.
    """
    schema = spec.public_schema
    attrs = sorted({a for t in templates_of(spec) for a in (t.behavioural, *t.contextual)})
    raw = 8 + sum(8 if a in schema.numeric else 60 for a in attrs)
    widest = 0
    for t in templates_of(spec):
        q = 1 + sum(1 if c in schema.numeric else max(0, len(schema.categorical[c].domain_strings) - 1)
                    for c in t.contextual if c in schema.numeric or c in schema.categorical)
        widest = max(widest, q)
    return raw + 8 * 3 * widest + 8 * 12


def detection_chunk_rows(spec: ReleaseSpec, budget: MemoryBudget | None = None) -> int:
    """Rows per chunk of the detect step: :meth:`~dpcore.runtime.chunks.MemoryBudget.chunk_rows` of :func:`_bytes_per_row`.

    A function of ``DPR_MEMORY_LIMIT`` and the spec's public schema only, never of the data.
    """
    return (budget or MemoryBudget.from_env()).chunk_rows(_bytes_per_row(spec))


def open_detection_partitions(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, *, rows: int | None = None
) -> Partitions:
    """The validated table's ``_row`` and every template attribute, exported once in chunks.

    No record id: the stored tables are keyed by ``_row`` (the module's
    docstring); the fits read only their attributes.

    :func:`dpcore.storage.partitions.export_partitions` into a fresh folder of the
    warehouse's private scratch folder, in input row order, ``rows`` per chunk
    (default :func:`detection_chunk_rows`). The templates' fits read it
    without the warehouse's lock, concurrently; their score files go next to
    it. Remove it with :func:`close_detection_partitions` (or use
    :func:`detection_partitions`).

    The rows are read as stored (validation stores them in row order) with their ``_row`` checked to
    increase, and read again with ``ORDER BY _row`` only if they do not: at 1000x the demo (337 million
    rows) a sort of every row spills beyond DuckDB's share of the cap (issue 51).

    Raises
    ------
    StepInputError
        As :func:`detection_frame` (checked before any data is read).
    """
    require_public_completeness(spec, "detect")
    attrs = sorted({a for t in templates_of(spec) for a in (t.behavioural, *t.contextual)})
    cols = ", ".join(f'"{c}"' for c in dict.fromkeys([ROW, *attrs]))
    sql = f"SELECT {cols} FROM {validated_table(spec, ingested)}"
    wh = open_stores(settings).warehouse
    folder = scratch_dir(wh) / new_nonce(8)
    folder.mkdir(mode=0o700)
    rows = int(rows or detection_chunk_rows(spec))
    try:
        try:  # the rows as stored (validation writes them in row order): a scan, no sort of the table
            return export_partitions(wh, sql, None, rows, folder, distinct=(ROW,), increasing=ROW)
        except NotInOrder:  # stored otherwise: sorted by DuckDB (spilled beyond its share of the cap)
            return export_partitions(wh, f"{sql} ORDER BY {ROW}", None, rows, folder, distinct=(ROW,))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def close_detection_partitions(parts: Partitions) -> None:
    """Remove an export of :func:`open_detection_partitions` and the score files next to it."""
    shutil.rmtree(Path(parts.path).parent, ignore_errors=True)


@contextmanager
def detection_partitions(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, *, rows: int | None = None
) -> Iterator[Partitions]:
    """:func:`open_detection_partitions`, removed when the block ends (also on error)."""
    parts = open_detection_partitions(spec, settings, ingested, rows=rows)
    try:
        yield parts
    finally:
        close_detection_partitions(parts)


def fit_streamed(parts: Partitions, template: Template, spec: ReleaseSpec, mapper=serial_map) -> StreamedFit:
    """Fit one template over the export's chunks with the spec's detector settings (as :func:`fit_one`).

    Seed 004, "Parameters Learning": the same fit as :func:`fit_one` on the
    whole table (:func:`dpcore.detect.streaming.fit_partitions`); the scores
    go to a private Parquet file next to the export, for
    :func:`store_streamed_detection`. Diagnostics are data in the params;
    nothing is warned or logged; it reads no warehouse (safe in threads and on
    a Dask worker of the same machine).
    """
    return fit_partitions(parts, template, spec.public_schema, DetectorSettings.from_spec(spec), mapper=mapper)


def store_streamed_detection(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, fits: list[StreamedFit]
) -> DetectionDone:
    """Scores, labels, combined flags and models of streamed fits, written in SQL (one transaction).

    The labels are each template's top ``K`` scores, ties by lower input
    row (slide "Parameters Learning"; as
    :class:`~dpcore.detect.robust_em.RobustRegressionDetector`), a record is
    flagged if any template labels it (slide "Outlier Detector Overview"; as
    :func:`~dpcore.detect.combine.combine`), ``max_score`` is its highest
    score and ``templates_flagging`` the number of templates labelling it.
    The tables have :func:`store_detection`'s columns and row order
    (template by template, input row order). No score passes through Python.

    Issue 29: no full sort, no join and no record id. Each template's top
    ``K`` are chosen by a threshold, the ``K``-th pair ``(score, _row)`` in
    descending score, ascending row, found by radix selection over the score
    file (:func:`dpcore.detect.kth_pair.kth_pair`: the pair of ``ORDER BY
    score DESC, _row LIMIT 1 OFFSET K - 1`` in a few streamed passes, not a
    heap of ``K`` rows; DuckDB's query for a file with a NaN score), so a row is labelled when its score is above the
    threshold's or equal to it with a row no later. The tables are keyed by
    the score files' ``_row`` (the module's docstring), and the score files
    hold the same rows in the same order (the scoring pass writes chunk by
    chunk, in the export's row order), so the per-record flags come from the
    score files side by side (``POSITIONAL JOIN``) instead of a join on
    ``_row`` and a ``GROUP BY``. The fits' ``threshold`` (the ``K``-th score)
    is stored in ``internal.detect_models``.

    Raises
    ------
    ValueError
        No fit, or fits of different exports (``StreamedFit.export_path``).
    """
    if not fits:
        raise ValueError("store_streamed_detection needs at least one fitted template")
    exports = {str(f.export_path) for f in fits}
    if len(exports) != 1 or None in {f.export_path for f in fits}:
        raise ValueError("store_streamed_detection needs fits of one export (fit them with fit_streamed on one export)")
    suffix = validated_table_name(ingested, spec)

    def op(con):
        labels, thresholds = [], []
        for f in fits:
            top = None
            if int(f.K) > 0:
                top = kth_pair(f.scores_path, int(f.K))  # radix selection over the score file
                if top is None:  # a NaN score: DuckDB's order (NaN first)
                    top = con.execute("SELECT score, _row FROM read_parquet(?) ORDER BY score DESC, _row LIMIT 1 "
                                      "OFFSET ?", [str(f.scores_path), int(f.K) - 1]).fetchone()
            thresholds.append(None if top is None else float(top[0]))
            labels.append(("CAST(0 AS TINYINT)", []) if top is None else (
                "CAST(s.score > ? OR (s.score = ? AND s._row <= ?) AS TINYINT)", [top[0], top[0], int(top[1])]))
        for k, (f, (label, largs)) in enumerate(zip(fits, labels)):
            head = (f'CREATE OR REPLACE TABLE internal."detect_scores__{suffix}" AS ' if k == 0
                    else f'INSERT INTO internal."detect_scores__{suffix}" ')
            con.execute(
                head + f"SELECT s._row, CAST(? AS VARCHAR) AS template, s.score, {label} AS label "
                "FROM read_parquet(?) s",
                [f.template.name, *largs, str(f.scores_path)],
            )
        joins = " POSITIONAL JOIN ".join(f"(SELECT _row, score FROM read_parquet(?)) s{k}" for k in range(len(fits)))
        lab = [label.replace("s.", f"s{k}.") for k, (label, _a) in enumerate(labels)]
        largs = [a for _l, a in labels for a in a]
        con.execute(
            f'CREATE OR REPLACE TABLE internal."detect_flags__{suffix}" AS '
            f'SELECT s0._row, ({" OR ".join(f"({x}) = 1" for x in lab)}) AS flagged, '
            f'{"greatest(" + ", ".join(f"s{k}.score" for k in range(len(fits))) + ")" if len(fits) > 1 else "s0.score"} '
            f'AS max_score, CAST({" + ".join(lab)} AS INTEGER) AS templates_flagging '
            f"FROM {joins}",
            [*largs, *largs, *[str(f.scores_path) for f in fits]],
        )
        params = []
        for f, thr in zip(fits, thresholds):
            p = dict(f.params)
            p["threshold"] = thr
            params.append(json.dumps(p, default=float))
        models = pd.DataFrame({
            "table_suffix": suffix, "template": [f.template.name for f in fits], "params": params,
            "created_at": datetime.now(timezone.utc),
        })
        _write_models(con, suffix, models)

    open_stores(settings).warehouse.run(op, transaction=True)
    return DetectionDone(tuple(f.template.name for f in fits), suffix)


def _write_models(con, suffix: str, models: pd.DataFrame) -> None:
    """Replace this table's rows of ``internal.detect_models``."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS internal.detect_models "
        "(table_suffix VARCHAR, template VARCHAR, params VARCHAR, created_at TIMESTAMPTZ)"
    )
    con.execute("DELETE FROM internal.detect_models WHERE table_suffix = ?", [suffix])
    con.register("_m", models)
    con.execute("INSERT INTO internal.detect_models SELECT * FROM _m")
    con.unregister("_m")


def run_detection_streamed(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, *, rows: int | None = None, mapper=serial_map
) -> DetectionDone:
    """The whole detect step in bounded memory: export once, fit each template over the chunks, store in SQL.

    The library form of :func:`flows.detect.run_detection` (which fits the
    templates as concurrent tasks): for scripts, benchmarks and tests.
    """
    with detection_partitions(spec, settings, ingested, rows=rows) as parts:
        fits = [fit_streamed(parts, t, spec, mapper) for t in templates_of(spec)]
        return store_streamed_detection(spec, settings, ingested, fits)


#: DESIGN.md rule 9 statement for steps that use detector-chosen records.
DETECTOR_CHOICE_NOT_PROTECTED = (
    "Which records were chosen by the detector (from_detector): the choice is made by the non-private detector, "
    "so appearing in the list reveals that a record was among its top flagged ones, and the length of the list "
    "(fewer than requested when the detector flags fewer records) and the charges made for it reveal how many it "
    "flagged, up to the requested number. They are published in record-id order, which carries no score."
)


def detector_choice_not_protected(top: int, templates: list[str] | None = None, condition: str = "",
                                  extra: str = "") -> str:
    """The rule 9 statement for records chosen by the detector, naming how they were chosen.

    Parameters
    ----------
    top : int
        The requested number of records (``from_detector``).
    templates : list of str or None
        The templates whose flags the records were chosen among; None: any template.
    condition : str
        A further condition on the candidates, as a relative clause
        ("that ..."), e.g. a verifier check made on the non-private data.
    extra : str
        A further full sentence on what the choice reveals (or empty).

    Returns
    -------
    str
    """
    among = ("flagged by any template" if templates is None
             else "flagged by the template" + ("s " if len(templates) > 1 else " ") + ", ".join(templates))
    cond = f" {condition.strip()}" if condition.strip() else ""
    return (
        f"Which records were chosen by the detector (from_detector): the top {top}, by the detector's own "
        f"non-private score, of the records {among}{cond}. " + (extra.strip() + " " if extra.strip() else "")
        + "Appearing in the list reveals that a record met this choice, and the length of the list (fewer than "
        "requested when fewer records qualify) and the charges made for it reveal how many qualified, up to the "
        "requested number. They are published in record-id order, which carries no score."
    )


def detector_choice_owner_only(step: str, top: int, what: str) -> str:
    """The public report's sentence on detector-chosen records kept for the data owner (issue 28, section 4).

    Used when ``steps.<step>.publish_detector_chosen_ids`` is off (the
    default). A function of the spec alone: it names the owner file and the
    public bound ``top``, never an id nor how many records qualified.

    Parameters
    ----------
    step : str
        ``aiq`` or ``pcor``.
    top : int
        ``from_detector`` (public).
    what : str
        What the step gives about each record (``answers``, ``explanations``);
        the owner file is ``owner/<step>__detector_<what>.csv``.

    Returns
    -------
    str
    """
    return (
        f"The {what} about the records the non-private detector chose (from_detector: up to {top}) are for the data "
        f"owner only, in `owner/{step}__detector_{what}.csv` (do not publish the `owner/` folder): which records the "
        "detector chose is not protected by any guarantee, so this bundle neither names them nor tells how many "
        f"qualified; the charges are those of {top} records whatever the choice. To publish them, the data owner "
        f"sets steps.{step}.publish_detector_chosen_ids: true (the choice is then public and not protected)."
    )


def require_detection(wh: Warehouse, spec: ReleaseSpec, ingested: IngestResult, table: str = "detect_scores") -> str:
    """The qualified name of ``internal."<table>__<suffix>"``, checked to be this version's (keyed by ``_row``).

    Raises
    ------
    StepInputError
        The detect step has not run on this input under this spec, or its
        tables were stored by a version that keyed them by the record id
        (before issue 29's store): run the detect step again (it charges
        nothing).
    """
    name = f"{table}__{validated_table_name(ingested, spec)}"
    if not wh.table_exists("internal", name):
        raise StepInputError("no detection results for this input: enable and run steps.detect first")
    cols = {r[0] for r in wh.query("SELECT column_name FROM information_schema.columns "
                                   "WHERE table_schema = 'internal' AND table_name = ?", [name])}
    if ROW not in cols:
        raise StepInputError("the detection results of this input were stored by an older version (keyed by the "
                             "record id, not _row): run steps.detect again (the detector charges nothing)")
    return f'internal."{name}"'


def _check_templates(spec: ReleaseSpec, templates: list[str] | None) -> list[str] | None:
    if templates is None:
        return None
    names = [t.name for t in spec.steps.detect.templates]
    unknown = [t for t in templates if t not in names]
    if unknown or not templates:
        raise StepInputError(f"detector templates {unknown} are not in steps.detect.templates {names}")
    return list(dict.fromkeys(templates))


def flagged_by_score(
    wh: Warehouse, spec: ReleaseSpec, ingested: IngestResult, templates: list[str] | None = None,
    limit: int | None = None,
) -> list[str]:
    """Ids of flagged records in the detector's score order (internal: never publish this order).

    Parameters
    ----------
    wh : Warehouse
    spec : ReleaseSpec
    ingested : IngestResult
    templates : list of str, optional
        Only records labelled outliers by one of these templates, ranked by
        their highest score among them (``internal.detect_scores``). None:
        records flagged by any template, ranked by their highest score over
        all templates (``internal.detect_flags``).
    limit : int, optional
        At most this many ids.

    Returns
    -------
    list of str
        Highest score first; ties by record id. The order is the detector's
        non-private ranking: callers choose from it and publish only a
        record-id-sorted selection (:func:`flagged_records`).

    Raises
    ------
    StepInputError
        The detect step has not run on this input under this spec, or a
        template name is not in the spec.
    """
    templates = _check_templates(spec, templates)
    suffix = validated_table_name(ingested, spec)
    require_detection(wh, spec, ingested, "detect_flags" if templates is None else "detect_scores")
    rid = spec.dataset.record_id
    lim = "" if limit is None else f" LIMIT {int(limit)}"
    if templates is None:
        ranked, args = f'SELECT _row, max_score AS s FROM internal."detect_flags__{suffix}" WHERE flagged', []
    else:
        marks = ", ".join("?" for _ in templates)
        ranked, args = (f'SELECT _row, max(score) AS s FROM internal."detect_scores__{suffix}" '
                        f"WHERE label = 1 AND template IN ({marks}) GROUP BY _row", list(templates))
    if limit is not None:  # only the records scored at least the limit-th score need their id (ties by id)
        ranked = (f"WITH r AS ({ranked}) SELECT _row, s FROM r WHERE s >= "
                  f"(SELECT s FROM r ORDER BY s DESC LIMIT 1 OFFSET {max(int(limit), 1) - 1}) "
                  f"OR (SELECT count(*) FROM r) < {max(int(limit), 1)}")
    rows = wh.query(
        f'SELECT v."{rid}" FROM ({ranked}) f JOIN {validated_table(spec, ingested)} v USING (_row) '
        f'ORDER BY f.s DESC, v."{rid}"{lim}', args)
    return [r[0] for r in rows]


def flagged_records(
    wh: Warehouse, spec: ReleaseSpec, ingested: IngestResult, top: int, templates: list[str] | None = None
) -> list[str]:
    """Ids of the ``top`` flagged records by highest score, returned in record-id order.

    The choice is non-private (the detector's score); the order is not the
    score order, so a published list carries no ranking (issue 15, hole 5).

    Parameters
    ----------
    wh : Warehouse
    spec : ReleaseSpec
    ingested : IngestResult
    top : int
        How many records at most.
    templates : list of str, optional
        Choose among the records labelled outliers by these templates only,
        by their highest score among them (issue 16: PCOR explains records
        flagged for its own metric). None: records flagged by any template.

    Returns
    -------
    list of str
        Sorted by record id.

    Raises
    ------
    StepInputError
        The detect step has not run on this input under this spec, or a
        template name is not in the spec.
    """
    return sorted(flagged_by_score(wh, spec, ingested, templates, limit=int(top)))
