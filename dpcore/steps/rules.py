"""Owner-only step ``rules``: unit-respecting rules that explain the detector's outliers (seed 004,
"Outlier Rules Discovery").

For each detector template, :class:`~dpcore.explain.RuleMiner` searches
operation trees over the numeric attributes that declare a unit
(``schema.numeric.<name>.unit``) and categorical values for the rules that
best separate the records the template flagged, ranked by F1.

Bounded memory (issue 21): the search runs on at most ``steps.rules.sample_rows``
rows (a uniform random sample when the validated table is larger; otherwise
the whole table in input order, i.e. the in-memory search), with each
template's labels joined in SQL; every kept rule's precision, recall, F1 and
support are then counted exactly over all validated rows, chunk by chunk
(:func:`rule_counts`), so the stored figures are the table's, not the sample's.

Not a release (DESIGN.md rule 9): a rule's thresholds, precision, recall and
support are exact functions of the private data and of the non-private
detector's labels, so no charge covers them. They are written to the
warehouse's ``internal.outlier_rules`` and, at bundle time, to the bundle's
``owner/outlier_rules.csv`` only; nothing about them is returned to Prefect,
logged, or put in a public file. What the public report says about the step
depends on the spec alone.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from dpcore.runtime.chunks import MemoryBudget, serial_map
from dpcore.runtime.heap import trim_heap
from dpcore.ingest.raw import IngestResult
from dpcore.storage.partitions import exported
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from .common import StepInputError, open_stores, validated_table
from .detect import require_detection
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

#: The warehouse table (schema ``internal``) holding every mined rule.
RULES_TABLE = "outlier_rules"
#: Columns of :data:`RULES_TABLE` and of the owner's CSV.
RULE_COLUMNS = ["table_suffix", "template", "rank", "rule", "precision", "recall", "f1", "support", "n_flagged",
                "note", "params", "created_at"]
#: Default cap on a categorical attribute's domain size for categorical rules.
MAX_RULE_CATEGORIES = 50
#: Seed of the uniform sample a table larger than ``steps.rules.sample_rows`` is mined on (public constant).
SAMPLE_SEED = 2013
#: The error a positional :func:`labelled_query` raises (DuckDB's ``error()``) when a score row is not its
#: validated row's (then the step reads the labels by a join instead).
OUT_OF_STEP = "dpr: validated rows and detector scores out of step"


@dataclass(frozen=True)
class RulesDone:
    """Opaque handle of a finished rules step: which templates were explained (public, from the spec).

    ``table_suffix`` names the internal tables; it is private (left out of ``repr``).
    """

    templates: tuple[str, ...]
    table_suffix: str = field(repr=False)  # private: the same for every ingest of the same bytes (dpcore.ingest.raw)


def rules_inputs(spec: ReleaseSpec, templates: list[str] | None = None) -> tuple[list[str], dict[str, str], list[str]]:
    """The templates, numeric attributes with their units, and categorical attributes the step uses (spec only).

    Raises
    ------
    StepInputError
        A named template is not in ``steps.detect.templates``, or no numeric attribute declares a unit.
    """
    cfg = spec.steps.rules
    names = [t.name for t in spec.steps.detect.templates]
    chosen = list(templates or cfg.templates or names)
    bad = [t for t in chosen if t not in names]
    if bad:
        raise StepInputError(f"steps.rules.templates {bad} are not templates of steps.detect.templates {names}")
    num = spec.public_schema.numeric
    attrs = cfg.attributes if cfg.attributes is not None else [a for a, v in num.items() if v.unit]
    if not attrs or any(a not in num or not num[a].unit for a in attrs):
        raise StepInputError("steps.rules needs numeric attributes that declare a unit (schema.numeric.<name>.unit)")
    cats = spec.public_schema.categorical
    categorical = (list(cfg.categorical) if cfg.categorical is not None
                   else [a for a, v in cats.items() if len(v.domain) <= MAX_RULE_CATEGORIES])
    return chosen, {a: num[a].unit for a in attrs}, categorical


def _q(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def _label(i: int) -> str:
    """Name of template ``i``'s label column in the step's queries."""
    return f"_dpr_label_{i}"


def labelled_query(spec: ReleaseSpec, ingested: IngestResult, suffix: str, templates: list[str],
                   columns: list[str], where: str = "", positional: bool = False) -> tuple[str, list]:
    """SQL of the validated rows with ``columns`` and one boolean label column per template (``_dpr_label_<i>``).

    Two forms, the same rows and labels:

    - ``positional=False``: the labels come from ``internal.detect_scores__<suffix>`` by a semi-join on
      ``_row`` (``EXISTS``: a record the template did not flag, or that has no score, is labelled False; a
      record is never repeated). ``where`` (a condition on the validated table ``v``) keeps some rows before
      the labels are joined.
    - ``positional=True`` (issue 51): the detect step stores each template's scores in the validated table's
      row order, one per row (:func:`dpcore.steps.detect.store_streamed_detection`), so the validated rows and
      each template's scores are read side by side (``POSITIONAL JOIN``): two scans, no hash table. Each row
      checks that its scores are its own (same ``_row``) and otherwise raises DuckDB's
      ``error(`` :data:`OUT_OF_STEP` ``)``: the caller then uses the join. ``where`` is not allowed. At 1000x
      the demo (337 million rows) the join's hash tables of the flagged rows spilled: the step's count query
      took 33 s with 6.0 GB of spill, the positional one 7.6 s with none.

    No list of records is held in Python. The query also returns ``_row`` (input row order) and has no
    ``ORDER BY``.

    Returns
    -------
    (str, list)
        The query and its parameters (the template names).
    """
    scores = f'internal."detect_scores__{suffix}"'
    table = validated_table(spec, ingested)
    cols = "".join(f", v.{_q(c)}" for c in columns)
    if positional:
        if where:
            raise ValueError("a positional labelled query keeps every row (a programming error)")
        labels = "".join(f", (s{i}.label <> 0) AS {_label(i)}" for i in range(len(templates)))
        joins = "".join(f" POSITIONAL JOIN (SELECT _row, label FROM {scores} WHERE template = ?) s{i}"
                        for i in range(len(templates)))
        own = " OR ".join(f'v."_row" IS DISTINCT FROM s{i}._row' for i in range(len(templates)))
        guard = f" WHERE CASE WHEN {own} THEN error('{OUT_OF_STEP}') ELSE true END" if templates else ""
        inner = ", ".join(dict.fromkeys(['"_row"', *(_q(c) for c in columns)]))
        return f'SELECT v."_row"{cols}{labels} FROM (SELECT {inner} FROM {table}) v{joins}{guard}', list(templates)
    labels = "".join(f", EXISTS (SELECT 1 FROM {scores} s WHERE s._row = v._row AND s.template = ? "
                     f"AND s.label <> 0) AS {_label(i)}" for i in range(len(templates)))
    cond = f" WHERE {where}" if where else ""
    return f'SELECT v."_row"{cols}{labels} FROM {table} v{cond}', list(templates)


def _out_of_step(exc: BaseException) -> bool:
    """Whether ``exc`` is the positional query's :data:`OUT_OF_STEP` error."""
    return OUT_OF_STEP in str(exc)


def _labels_beside_first(run, positional: bool = True):
    """``(run(positional), positional)``; when the positional form raises :data:`OUT_OF_STEP`,
    ``(run(False), False)``: the labels are then joined by row number (:func:`labelled_query`)."""
    import duckdb

    if positional:
        try:
            return run(True), True
        except duckdb.Error as exc:
            if not _out_of_step(exc):
                raise
    return run(False), False


def sample_positions(n: int, m: int, seed: int = SAMPLE_SEED) -> np.ndarray | None:
    """Sorted positions (0-based, in input row order) of a uniform random sample of ``m`` of ``n`` rows.

    None when ``n <= m``: the whole table is mined. Without replacement, from
    ``numpy.random.default_rng(seed)`` (reproducible; the seed is a public
    constant), so which rows are drawn depends on ``n`` and the seed only.
    """
    if n <= m:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


def numbered_sample_sql(table: str) -> str:
    """SQL of the ``_row`` of ``table``'s rows at the positions (0-based, in row order) in column ``p`` of a
    registered ``_dpr_sample``: the rows are numbered by a window ordered by row, a sort of every row (the
    fallback of :func:`_mining_frame`; ``benchmarks.rules_sample``'s baseline)."""
    return (f'SELECT r."_row" FROM (SELECT "_row", row_number() OVER (ORDER BY "_row") - 1 AS p FROM {table}) r '
            "JOIN _dpr_sample USING (p)")


def _frame_memory_limit() -> int:
    """Bytes of DuckDB's ``memory_limit`` while :func:`_mining_frame` fetches its rows:
    :attr:`dpcore.runtime.chunks.MemoryBudget.held_duckdb_bytes` (1/16 of the cap, at least 64 MiB; public: the cap
    only). DuckDB then spills the query's sort, window and joins beyond it while the frame is built beside it
    in Python. Under a 1 GiB cap on 10x the demo (issue 29, goal 4), with :func:`_arrow_frame`: the fetch's
    peak 297 -> 61 MiB over its start (one process, the same frame), and the rules stage's process-tree peak
    in ``benchmarks.scale`` 1,173 -> 1,043 MiB."""
    return MemoryBudget.from_env().held_duckdb_bytes


def _arrow_frame(con, table) -> pd.DataFrame:
    """``table`` (a DuckDB result as an Arrow table) as the pandas frame DuckDB's ``.df()`` returns.

    Arrow's conversion keeps text in Arrow buffers (pandas' ``str`` columns
    are Arrow-backed), where ``.df()`` makes a Python string per cell first:
    about 80 MiB more for two text columns of 400,000 rows. The two agree on
    the columns of the mined attributes: integers and booleans without NULLs,
    floating point, text (``tests/test_frame_memory.py``). Any other column
    (an integer with NULLs is ``Int64`` in ``.df()``, ``float64`` in Arrow; a
    decimal, a date) goes back through DuckDB (``con.from_arrow(...).df()``),
    so the frame is ``.df()``'s whatever the types.
    """
    import pyarrow as pa

    def same(field: pa.Field, column) -> bool:
        t = field.type
        if pa.types.is_integer(t) or pa.types.is_boolean(t):
            return column.null_count == 0
        return (pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t))

    if all(same(f, table.column(i)) for i, f in enumerate(table.schema)):
        return table.to_pandas(self_destruct=True)
    return con.from_arrow(table).df()


def _mining_frame(wh, spec: ReleaseSpec, ingested: IngestResult, suffix: str, templates: list[str],
                  columns: list[str], n: int, m: int, bounds: tuple[int, int] | None = None) -> tuple[pd.DataFrame, bool]:
    """The rows to mine with their labels, in input row order: all ``n`` rows, or a uniform random sample
    of ``m`` of them when ``n > m`` (picked in the warehouse before the labels are joined).

    The sample is drawn from the row numbers (:func:`dpcore.storage.row_sample.sample_row_numbers`, public
    seed :data:`SAMPLE_SEED`; ``bounds`` = the table's least and greatest ``_row``): one pass with a
    semi-join, no sort of the table. When that draw would not fit the memory (a table whose row numbers are
    mostly gaps) or ``bounds`` is None, the rows are numbered in row order and the :func:`sample_positions`
    rows kept (a sort of every row, spilled beyond DuckDB's share).

    Fetched as Arrow and converted by :func:`_arrow_frame` (the same frame as
    ``.df()``, with less memory), with DuckDB's ``memory_limit`` lowered to
    :func:`_frame_memory_limit` while the query runs
    (:meth:`dpcore.storage.warehouse.Warehouse.run`); if DuckDB runs out of memory
    under it, the query runs again under the budget's own limit. The rows
    and their order do not depend on the limit.
    """
    import duckdb

    from ..storage.row_sample import BYTES_PER_DRAWN, sample_row_numbers

    sampled = n > m
    table = validated_table(spec, ingested) if sampled else None
    rows = None
    if sampled and bounds is not None:
        max_draw = MemoryBudget.from_env().chunk_rows(BYTES_PER_DRAWN, minimum=1)
        rows = wh.run(lambda con: sample_row_numbers(con, table, n, bounds[0], bounds[1], m, SAMPLE_SEED,
                                                     max_draw=max_draw))
    if not sampled:
        sql, params = labelled_query(spec, ingested, suffix, templates, columns)
        query, picked = f'SELECT * FROM ({sql}) ORDER BY "_row"', None
    elif rows is not None:
        picked = pd.DataFrame({"_row": rows})
        sql, params = labelled_query(spec, ingested, suffix, templates, columns,
                                     where='v."_row" IN (SELECT "_row" FROM _dpr_sample)')
        query = f'SELECT * FROM ({sql}) ORDER BY "_row"'
    else:
        picked = pd.DataFrame({"p": sample_positions(n, m).astype(np.int64)})
        sql, params = labelled_query(spec, ingested, suffix, templates, columns,
                                     where='v."_row" IN (SELECT "_row" FROM picked)')
        query = f'WITH picked AS ({numbered_sample_sql(table)}) SELECT * FROM ({sql}) ORDER BY "_row"'

    def op(con):
        if picked is not None:
            con.register("_dpr_sample", picked)
        try:
            table = con.sql(query, params=params or None).to_arrow_table()
        finally:
            if picked is not None:
                con.unregister("_dpr_sample")
        return _arrow_frame(con, table)

    try:
        frame = wh.run(op, memory_limit=_frame_memory_limit())
    except duckdb.OutOfMemoryException:
        frame = wh.run(op)
    return frame, sampled


def _tree_spec(tree):
    """A picklable description of an operation tree: a leaf's column, or ``(op, left, right)``."""
    if tree.op == "leaf":
        return tree.column
    a, b = tree.children
    return (tree.op, _tree_spec(a), _tree_spec(b))


def _tree_from(spec, units: dict[str, str]):
    """The tree of :func:`_tree_spec`, rebuilt with this process's unit registry."""
    from ..explain.trees import combine, leaf

    if isinstance(spec, str):
        return leaf(spec, units[spec])
    op, a, b = spec
    return combine(op, _tree_from(a, units), _tree_from(b, units))


def rule_spec(rule) -> tuple:
    """A picklable description of a :class:`~dpcore.explain.Rule`'s predicate (no score):
    ``(tree, lower, upper, column, values)``; :func:`rule_from_spec` rebuilds it in any process
    (pint units do not pickle across unit registries)."""
    return (None if rule.tree is None else _tree_spec(rule.tree), float(rule.lower), float(rule.upper),
            rule.column, tuple(rule.values))


def rule_from_spec(spec: tuple, units: dict[str, str]):
    """The :class:`~dpcore.explain.Rule` (predicate only, scores zero) of :func:`rule_spec`."""
    from ..explain import Rule

    tree, lower, upper, column, values = spec
    return Rule(tree=None if tree is None else _tree_from(tree, units), lower=lower, upper=upper,
                column=column, values=values)


def _chunk_counts(item) -> np.ndarray:
    """Mapped over the chunks by :func:`rule_counts`: ``(tp, support)`` of every rule on chunk ``i``.

    ``item = (parts, i, units, rules)`` with ``rules`` a list of
    ``(label column, rule_spec)``. Module level and picklable (a Dask mapper
    may run it on a worker).
    """
    parts, i, units, rules = item
    frame = parts.read(i)
    out = np.zeros((len(rules), 2), dtype=np.int64)
    values: dict = {}  # tree spec -> its values on this chunk (rules of one tree share them)
    for k, (label, spec) in enumerate(rules):
        rule = rule_from_spec(spec, units)
        v = None
        if rule.tree is not None:
            v = values.get(spec[0])
            if v is None:
                v = values[spec[0]] = rule.tree.values(frame)
        cov = rule.covers(frame, tree_values=v)
        out[k] = (np.count_nonzero(cov & frame[label].to_numpy(dtype=bool)), np.count_nonzero(cov))
    return out


def rule_counts(wh, sql: str, params: list, units: dict[str, str], rules: list[tuple[str, tuple]], *,
                rows: int, mapper=serial_map) -> np.ndarray:
    """Exact ``(tp, support)`` of every rule over every row of ``sql``, in chunks of ``rows`` rows.

    Parameters
    ----------
    wh : Warehouse
    sql, params : str, list
        A query returning the columns the rules read and their label columns
        (:func:`labelled_query`); exported once to private Parquet partitions
        (:func:`dpcore.storage.partitions.exported`), removed afterwards.
    units : dict
        Numeric attribute -> unit (to rebuild the rules' trees).
    rules : list of (str, tuple)
        ``(label column, rule_spec(rule))`` per rule.
    rows : int
        Rows per chunk (:meth:`dpcore.runtime.chunks.MemoryBudget.chunk_rows`; public).
    mapper : callable
        ``mapper(fn, items)`` (default :func:`dpcore.runtime.chunks.serial_map`; the
        flow layer may pass a Dask one); the per-chunk counts are added here.

    Returns
    -------
    numpy.ndarray
        ``(len(rules), 2)`` int64: rows covered that are labelled, rows covered.
        The same for any chunk size (integer sums).
    """
    total = np.zeros((len(rules), 2), dtype=np.int64)
    with exported(wh, sql, params, rows=rows) as parts:
        for part in mapper(_chunk_counts, [(parts, i, units, rules) for i in range(len(parts))]):
            total += part
    return total


def _chunk_rows(units: dict[str, str], categorical: list[str], n_templates: int) -> int:
    """Rows per chunk of the exact counts, from the memory cap and the columns only (never the data):
    8 bytes per numeric column and per tree value array being evaluated, ~60 per categorical text, one per
    label and per coverage mask."""
    per_row = 8 * (len(units) + 3) + 60 * len(categorical) + 2 * n_templates + 2
    return MemoryBudget.from_env().chunk_rows(per_row)


def mine_rules(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, templates: list[str] | None = None,
    max_depth: int | None = None, max_rules: int | None = None, sample_rows: int | None = None,
    chunk_rows: int | None = None, mapper=serial_map, n_jobs: int | None = None,
) -> RulesDone:
    """Mine each template's rules against its stored labels and write them to ``internal.outlier_rules``.

    Needs the detector's results for this validated table
    (``internal.detect_scores__<suffix>``, written by the detect step).
    A template that flagged no record (or every record) gets one row with a
    note instead of rules; the step never fails on a fact of the data.

    Memory is bounded, whatever the table's size (issue 21):

    1. The labels are joined to the validated rows in SQL
       (:func:`labelled_query`); the exact numbers of rows and of flagged rows
       per template are one SQL aggregate.
    2. :class:`~dpcore.explain.RuleMiner` (seed 004, "Outlier Rules
       Discovery": operation trees, ranges, categorical rules, conjunctions,
       selection) runs on at most ``sample_rows`` rows, once for all templates
       (:meth:`~dpcore.explain.RuleMiner.fit_each`: the trees, their sorts and
       the rows of each categorical value are computed once and searched with
       every template's labels; the rules are those of one fit per template): the whole table in
       input order when it has no more (the in-memory search, unchanged), else a
       uniform random sample without replacement of exactly ``sample_rows``
       rows (drawn from the row numbers without sorting the table, :func:`_mining_frame`; public seed
       :data:`SAMPLE_SEED`), kept in input order. The sample is not stratified (flagged and unflagged rows
       are drawn alike), so the miner's precision, recall and F1 on it are
       ratio estimates of the table's, and its ranking estimates the
       table's; none of these sample figures is stored:
    3. each kept rule's true positives and support are counted over **every**
       validated row in chunks of a public size (:func:`rule_counts`), and its
       precision (tp / support), recall (tp / flagged rows of the table), F1
       (2 tp / (support + flagged)) and support are those exact counts, so the
       stored figures are the table's, not the sample's; the rules are then
       ranked by that exact F1. On a table mined whole these counts equal the
       miner's own (a rule re-evaluated on its training rows covers exactly
       the rows it counted, :mod:`dpcore.explain.ranges`), so its rules and
       figures are those of the in-memory search.

    A sampled template's rules carry a note saying so; a sample holding no
    flagged row (or only flagged rows) while the table has both gets a note
    row instead of rules (raise ``steps.rules.sample_rows``).

    Parameters
    ----------
    templates : list of str, optional
        Default ``steps.rules.templates`` (or every template).
    max_depth, max_rules, sample_rows : int, optional
        Default ``steps.rules.max_depth`` / ``max_rules`` / ``sample_rows``.
    chunk_rows : int, optional
        Rows per chunk of the exact counts (default: from ``DPR_MEMORY_LIMIT``,
        :class:`~dpcore.runtime.chunks.MemoryBudget`); results do not depend on it.
    mapper : callable
        Maps the per-chunk counts (:func:`dpcore.runtime.chunks.serial_map`, or a Dask mapper).
    n_jobs : int, optional
        Threads of the rule search (:class:`~dpcore.explain.RuleMiner`'s
        ``n_jobs``; default 1); the rules do not depend on it.

    Returns
    -------
    RulesDone
        Template names and the table suffix only (no count, no rule).

    Raises
    ------
    StepInputError
        Bad templates or attributes (:func:`rules_inputs`), ``sample_rows`` / ``chunk_rows`` not an integer >= 1,
        or no detection results of this version (:func:`~dpcore.steps.detect.require_detection`).
    """
    from ..explain import RuleMiner
    from ..validation import validated_table_name

    cfg = spec.steps.rules
    chosen, units, categorical = rules_inputs(spec, templates)
    depth, top = max_depth or cfg.max_depth, max_rules or cfg.max_rules
    m = cfg.sample_rows if sample_rows is None else sample_rows
    for name, value in (("steps.rules.sample_rows", m), ("chunk_rows", chunk_rows)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise StepInputError(f"{name} must be an integer >= 1, got {value!r}")
    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ingested, spec)
    require_detection(wh, spec, ingested)
    columns = [*units, *categorical]
    flagged_sql = "".join(f", coalesce(count_if({_label(i)}), 0)" for i in range(len(chosen)))

    def count(beside: bool):
        sql, _ = labelled_query(spec, ingested, suffix, chosen, columns, positional=beside)
        return wh.query(f'SELECT count(*), min("_row"), max("_row"){flagged_sql} FROM ({sql})', list(chosen))[0]

    counts, positional = _labels_beside_first(count)  # the scores read beside the rows, joined if out of step
    n, flagged = int(counts[0]), [int(c) for c in counts[3:]]
    bounds = None if n == 0 else (int(counts[1]), int(counts[2]))
    frame, sampled = _mining_frame(wh, spec, ingested, suffix, chosen, columns, n, int(m), bounds)
    params_json = json.dumps({"max_depth": depth, "max_rules": top, "units": units, "categorical": categorical,
                              "sample_rows": int(m)})
    now = datetime.now(timezone.utc)
    rows, found = [], []  # note rows; (template index, Rule) of the kept rules
    mined: list[tuple[int, np.ndarray]] = []  # (template index, labels) of the templates to mine
    for i, template in enumerate(chosen):
        labels = frame[_label(i)].to_numpy(dtype=bool)
        k = int(labels.sum())
        note = ("the template flagged no record" if flagged[i] == 0 else
                "the template flagged every record" if flagged[i] == n else
                "the sample of steps.rules.sample_rows rows holds no flagged record: raise sample_rows"
                if k == 0 else
                "the sample of steps.rules.sample_rows rows holds flagged records only: raise sample_rows"
                if k == len(labels) else None)
        if note is not None:
            rows.append({"template": template, "n_flagged": flagged[i], "rank": 0, "rule": None,
                         "precision": np.nan, "recall": np.nan, "f1": np.nan, "support": 0, "note": note})
            continue
        mined.append((i, labels))
    if mined:  # one search over the frame for every template: trees, sorts and categorical rows are shared
        miners = RuleMiner(max_depth=depth, max_rules=top, n_jobs=n_jobs).fit_each(
            frame[columns], [labels for _, labels in mined], units=units, categorical=categorical)
        found += [(i, rule) for (i, _), miner in zip(mined, miners) for rule in miner.rules_]
        del miners
    del frame
    trim_heap()  # the sample frame and the search's trees and sorts: free heap handed back (dpcore.runtime.heap)
    if found:
        used = [c for c in columns if any(c in r.columns for _, r in found)]
        specs = [(_label(i), rule_spec(r)) for i, r in found]
        rows_per_chunk = chunk_rows or _chunk_rows(units, categorical, len(chosen))
        exact, _ = _labels_beside_first(lambda beside: rule_counts(
            wh, labelled_query(spec, ingested, suffix, chosen, used, positional=beside)[0], list(chosen), units,
            specs, rows=rows_per_chunk, mapper=mapper), positional)
        note = ("mined on a uniform random sample of steps.rules.sample_rows rows; precision, recall, F1 and "
                "support counted over every row") if sampled else None
        scored = [{"template": chosen[i], "n_flagged": flagged[i], "rule": rule.text,
                   "precision": tp / support if support else np.nan, "recall": tp / flagged[i],
                   "f1": 2.0 * tp / (support + flagged[i]), "support": support, "note": note}
                  for (i, rule), (tp, support) in zip(found, exact.tolist())]
        for template in chosen:  # ranked by the exact F1 (stable: a table mined whole keeps the miner's order)
            ranked = sorted((r for r in scored if r["template"] == template), key=lambda r: -r["f1"])
            rows += [{**r, "rank": rank} for rank, r in enumerate(ranked, start=1)]
    order = {t: j for j, t in enumerate(chosen)}
    rows.sort(key=lambda r: (order[r["template"]], r["rank"]))
    out = pd.DataFrame([{**r, "table_suffix": suffix, "params": params_json, "created_at": now} for r in rows],
                       columns=RULE_COLUMNS)

    def op(con):
        con.execute(
            f"CREATE TABLE IF NOT EXISTS internal.{RULES_TABLE} (table_suffix VARCHAR, template VARCHAR, "
            "rank INTEGER, rule VARCHAR, precision DOUBLE, recall DOUBLE, f1 DOUBLE, support BIGINT, "
            "n_flagged BIGINT, note VARCHAR, params VARCHAR, created_at TIMESTAMPTZ)"
        )
        con.execute(f"DELETE FROM internal.{RULES_TABLE} WHERE table_suffix = ? AND template IN "
                    "(SELECT unnest(?::VARCHAR[]))", [suffix, chosen])
        con.register("_rules", out)
        con.execute(f"INSERT INTO internal.{RULES_TABLE} SELECT * FROM _rules")
        con.unregister("_rules")

    wh.run(op, transaction=True)
    return RulesDone(tuple(chosen), suffix)


def owner_rules(settings: Settings, done: RulesDone) -> pd.DataFrame:
    """The stored rules of ``done``'s templates, for the bundle's owner-only folder."""
    wh = open_stores(settings).warehouse
    if not wh.table_exists("internal", RULES_TABLE):
        return pd.DataFrame(columns=RULE_COLUMNS)
    return wh.query_df(
        f"SELECT * FROM internal.{RULES_TABLE} WHERE table_suffix = ? AND template IN (SELECT unnest(?::VARCHAR[])) "
        "ORDER BY template, rank", [done.table_suffix, list(done.templates)],
    )

