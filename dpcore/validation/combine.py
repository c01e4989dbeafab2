"""The verdict over the whole table from the chunks' verdicts (issue 21).

:func:`_combine` gives the :class:`~dpcore.validation.ValidationOutcome` (counts summed,
example rows in row order, the header rules from the first chunk);
:func:`_combine_results` gives great-expectations' result over the whole table, without
the per-row lists (those stay in each chunk's stored result and in the ``quarantine``
table).
"""
from __future__ import annotations

from dpcore.ingest.raw import ROW
from dpcore.release.spec import ReleaseSpec
from .check import ChunkVerdict
from .outcome import RuleSummary, ValidationOutcome


#: Entries great-expectations keeps in its "partial" example lists (SUMMARY format); the combined
#: result keeps as many, taken from the chunks in row order.
PARTIAL_EXAMPLES = 20
#: Result keys summed over the chunks (the percentages are recomputed from the sums).
_SUMMED_KEYS = ("element_count", "unexpected_count", "missing_count")


def _combine_results(verdicts: list[ChunkVerdict]) -> dict:
    """great-expectations' result over the whole table from the chunks' results.

    The combination (every chunk ran the same suite, so the expectations line up):

    - an expectation succeeds iff it succeeds on every chunk (``row_count``: on some chunk);
      the table succeeds iff all do;
    - ``element_count``, ``unexpected_count`` and ``missing_count`` are summed, and the
      percentages recomputed from the sums (``unexpected_percent`` over the non-missing
      elements when GE counts missing ones, else over all);
    - ``partial_unexpected_list`` / ``partial_unexpected_index_list``: the chunks' lists
      concatenated in row order, cut at :data:`PARTIAL_EXAMPLES` (GE's own examples);
    - ``row_count``'s ``observed_value`` is the sum of the chunks' row counts; the other header
      rules' results are the first chunk's (every chunk has the same header);
    - the per-row lists (``unexpected_index_list``, ``unexpected_list``,
      ``unexpected_index_query``, ``partial_unexpected_counts``) are not combined: each chunk's
      complete result is stored as one row of ``internal.validation_result_chunks``, and every
      failing row is in the ``quarantine`` table with its rule, column and cells;
    - ``unique`` runs as ``expect_column_values_to_not_be_in_set`` with each chunk's duplicated
      ids (found over the whole table, :func:`build_suite`); that set is left out of the
      combined kwargs.
    """
    first = verdicts[0]
    expectations = []
    for j, e0 in enumerate(first.expectations):
        parts = [v.expectations[j] for v in verdicts]
        if any((p["meta"], p["expectation_type"]) != (e0["meta"], e0["expectation_type"]) for p in parts):
            raise RuntimeError("chunks ran different expectation suites")
        res = dict(e0["result"])
        for key in _SUMMED_KEYS:
            if key in res:
                res[key] = int(sum(p["result"].get(key) or 0 for p in parts))
        if "unexpected_count" in res and "element_count" in res:
            n, u, m = res["element_count"], res["unexpected_count"], res.get("missing_count", 0)
            total = 100 * u / n if n else None
            if "missing_count" in res:
                nonmissing = 100 * u / (n - m) if n - m else None
                res["unexpected_percent"] = nonmissing
                for key, value in (("unexpected_percent_total", total), ("unexpected_percent_nonmissing", nonmissing),
                                   ("missing_percent", 100 * m / n if n else None)):
                    if key in res:
                        res[key] = value
            else:
                res["unexpected_percent"] = total
        for key in ("partial_unexpected_list", "partial_unexpected_index_list"):
            if key in res:
                res[key] = [x for p in parts for x in (p["result"].get(key) or [])][:PARTIAL_EXAMPLES]
        if e0["meta"]["rule"] == "row_count" and "observed_value" in res:
            res["observed_value"] = int(sum(v.n_rows for v in verdicts))
        out = {key: v for key, v in e0.items() if key != "meta"}
        # at least one row in the table = in some chunk; every other rule must hold in every chunk
        ok = any if e0["meta"]["rule"] == "row_count" else all
        expectations.append({**out, "success": ok(p["success"] for p in parts), "result": res})
    n_ok = sum(1 for e in expectations if e["success"])
    success = n_ok == len(expectations)
    stats = {
        "evaluated_expectations": len(expectations),
        "successful_expectations": n_ok,
        "unsuccessful_expectations": len(expectations) - n_ok,
        "success_percent": 100 * n_ok / len(expectations) if expectations else None,
    }
    header = dict(first.header)
    validation = header.pop("validation", {})
    return {
        **header,
        "success": success,
        "statistics": {
            "evaluated_validations": 1,
            "success_percent": 100.0 if success else 0.0,
            "successful_validations": int(success),
            "unsuccessful_validations": int(not success),
        },
        "validation_results": [{**validation, "success": success, "statistics": stats, "expectations": expectations}],
        "combined_from_chunks": len(verdicts),
        "per_row_detail": "quarantine table; internal.validation_result_chunks (each chunk's complete result)",
    }


def _combine(verdicts: list[ChunkVerdict], spec: ReleaseSpec) -> ValidationOutcome:
    """The outcome over the whole table from the chunks' verdicts (in row order).

    Counts are summed; a rule's example rows are the first ``examples_per_rule`` over the
    chunks in row order (so the same as over the whole table); table-level failures and ignored
    columns are the first chunk's (the same header in every chunk).

    Raises
    ------
    ValueError
        The chunks' ``_row`` numbers are not increasing from chunk to chunk (a row number repeats).
    """
    if not verdicts:
        raise ValueError("no chunk to combine (an empty table is validated as one empty chunk)")
    spans = [(v.first_row, v.last_row) for v in verdicts if v.n_rows]
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        raise ValueError(f"raw table's {ROW!r} column is not unique (or the chunks are not in {ROW!r} order)")
    # the header rules are the same in every chunk; a chunk without rows (a gap in ``_row``) fails row_count alone
    first = next((v for v in verdicts if v.n_rows), verdicts[0])
    k = spec.steps.validation.examples_per_rule
    row_failures = []
    for j, (rule, col, _, _) in enumerate(first.hits):
        count = sum(v.hits[j][2] for v in verdicts)
        if count:
            examples = [x for v in verdicts for x in v.hits[j][3]][:k]
            attr = spec.public_schema.numeric.get(col) if rule == "in_bounds" else None
            bounds = (float(attr.min), float(attr.max)) if attr is not None else None  # public spec values
            row_failures.append(RuleSummary(rule, col, int(count), examples, bounds))
    n_rows = int(sum(v.n_rows for v in verdicts))
    n_valid = int(sum(v.n_valid for v in verdicts))
    return ValidationOutcome(
        row_failures=row_failures,
        table_failures=list(first.table_failures),
        ignored_columns=list(first.ignored_columns),
        n_rows=n_rows,
        n_valid=n_valid,
        n_rejected=n_rows - n_valid,
        full_result=_combine_results(verdicts),
        examples_per_rule=k,
    )
