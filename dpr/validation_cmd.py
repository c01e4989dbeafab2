"""``dpr validation show``: the data owner reads the stored validation results (issue 32, section 5).

The data owner's command (like ``dpr dataset add`` and ``dpr spec check --data``): it prints exact
counts and data row numbers of the owner's data, on this terminal only. Nothing it prints is logged,
stored or published, and no cell value or record id is printed (DESIGN.md rules 6 and 7): rule names,
columns, counts, row numbers and the public bounds of ``in_bounds`` rules only.
"""
from __future__ import annotations

import click

from .console import out, print_json, refusals, refuse, table


@click.group("validation")
def validation_group() -> None:
    """Read the stored validation results (the data owner only: exact counts and row numbers)."""


def _when(ts) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC") if hasattr(ts, "strftime") else str(ts)


@validation_group.command("show")
@click.option("--spec", "spec_path", type=click.Path(dir_okay=False),
              help="Only the dataset of this spec, and say whether its result was made under the spec's "
                   "current rules (default: every dataset with a stored result).")
@click.option("--max-rows", type=click.IntRange(min=0), default=50, show_default=True,
              help="Row numbers shown per rule (0: all). --json always lists them all.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def show(spec_path, max_rows, as_json) -> None:
    """The latest validation result of each dataset, per rule (the data owner only).

    For each dataset of the warehouse (or SPEC's only, with --spec): when its latest validation was
    stored, the input it read, its row counts, and per failed rule: the rule, the column, the number of
    rows breaking it, every data row number that broke it (for a CSV 1 is the first row after the header,
    blank lines not counted, so not line numbers of the file; for a PostgreSQL or DuckDB query 1 is the
    first row it returned, in its ORDER BY; the output says which) and what the rule means, with the
    public bounds of in_bounds rules; rows the CSV reader could not parse, with their file line and the
    reason. The rows are in the quarantine table; no cell value and no record id is printed. Exact counts
    of your data: do not publish them.
    Exit code 2 when there is no stored result (of SPEC's dataset).
    """
    from dpcore.budget.ledger_home import open_home_warehouse
    from dpcore.storage.settings import Settings
    from dpcore.validation.outcome import plural, rule_text, summary_lines
    from dpcore.validation.results import hash_matches, latest_validations, row_numbers_text, row_ranges

    spec = None
    if spec_path:
        from dpcore.release.spec import SpecError, load_spec

        try:
            spec = load_spec(spec_path)
        except SpecError as exc:
            refuse(str(exc))
    with refusals():
        wh = open_home_warehouse(Settings.from_env(), create=False)
        if wh is None:
            refuse("no warehouse in this home ($DPR_HOME or --home) yet: nothing has been validated; "
                   "`dpr run SPEC` validates the input and stores the result")
        found = latest_validations(wh, spec.dataset.name if spec is not None else None)
    if not found:
        which = f"of dataset {spec.dataset.name!r} " if spec is not None else ""
        refuse(f"no validation result {which}is stored in this home's warehouse yet: `dpr run SPEC` validates "
               "the input and stores its result (`dpr spec check SPEC --data` validates without storing)")
    with refusals():
        current = {v.dataset: hash_matches(v, spec_path, wh) for v in found} if spec is not None else None
    if as_json:
        print_json([{
            "dataset": v.dataset, "validated_at": v.created_at, "input": v.source_path,
            **({"under_current_spec": current[v.dataset]} if current is not None else {}),
            **v.summary,
            "unreadable_rows": [{"row": r, "line": ln, "reason": why} for r, ln, why in v.unreadable],
            "row_failures": [{**f, "rows": v.rows_of(f["rule"], f["column"]),
                              "rows_complete": v.complete_rows()} for f in v.summary.get("row_failures", [])],
            "row_numbers": row_numbers_text(v.source_kind),
        } for v in found])
        return
    for v in found:
        s = v.summary
        out.print(f"dataset {v.dataset}: latest validation stored {_when(v.created_at)}"
                  + (f", input {v.source_path}" if v.source_path else ""), markup=False)
        if current is not None:
            out.print("made under this spec's current rules" if current[v.dataset] else
                      "made under other rules than this spec's current ones (the spec changed since): "
                      "`dpr run` validates the input again under them", markup=False)
        out.print(summary_lines(s)[0], markup=False)
        rows = [[f["rule"], f["column"] or "", "table rule", "", rule_text(f["rule"])]
                for f in s.get("table_failures", [])]
        for f in s.get("row_failures", []):
            numbers = v.rows_of(f["rule"], f["column"])
            shown = row_ranges(numbers, max_rows)
            if not v.complete_rows() and f["count"] > len(numbers):
                shown += f", ... (first {len(numbers)} only: the quarantine table is gone)"
            rows.append([f["rule"], f["column"], plural(f["count"], "row"), shown,
                         rule_text(f["rule"], f.get("bounds"))])
        if v.unreadable:
            shown = v.unreadable if max_rows == 0 else v.unreadable[:max_rows]
            out.print(table("rows the CSV reader could not parse (quarantined: every cell empty, so the record id "
                            "is null; file lines as the reader counts them: a quoted cell's line breaks do not "
                            "count)",
                            ["data row", "file line", "reason"], [[str(r), str(ln), why] for r, ln, why in shown]))
            if len(shown) < len(v.unreadable):
                out.print(f"... ({len(v.unreadable) - len(shown)} more unreadable rows; --max-rows 0 shows all)",
                          markup=False)
        if rows:
            out.print(table(f"failed rules ({row_numbers_text(v.source_kind)})",
                            ["rule", "column", "failing", "data rows", "what it means"], rows))
        else:
            out.print("all rules passed", markup=False)
        ignored = [ln for ln in summary_lines(s) if ln.startswith("ignored extra columns")]
        for ln in ignored:
            out.print(ln, markup=False)
    out.print("(the data owner's view: exact counts and row numbers of your data; do not publish it)", markup=False)
