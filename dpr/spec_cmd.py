"""``dpr spec draft`` and ``dpr spec check``."""
from __future__ import annotations

from pathlib import Path

import click

from .console import REFUSED, err, out, refusals, refuse


@click.group("spec")
def spec_group() -> None:
    """Draft a release spec from a CSV, and check a spec (and its data)."""


def _pairs(values: tuple[str, ...], flag: str, sep: str) -> dict[str, str]:
    pairs = {}
    for v in values:
        name, eq, rest = v.partition("=")
        if not eq or not name or not rest or sep not in rest:
            refuse(f"{flag} {v!r}: expected COLUMN=A{sep}B")
        pairs[name] = rest
    return pairs


@spec_group.command("draft")
@click.argument("data", type=click.Path(), required=False)
@click.option("--source", "source_kind", type=click.Choice(["csv", "parquet", "duckdb", "postgres"]), default="csv",
              show_default=True, help="What DATA is: a CSV file, a Parquet dataset folder, a DuckDB file; or postgres "
                                      "(no DATA: give --dsn-env or --dsn-file and --table or --query).")
@click.option("--dsn-env", metavar="VAR", help="postgres: the environment variable holding the connection string.")
@click.option("--dsn-file", metavar="FILE", help="postgres: an owner-only file (chmod 600) holding it.")
@click.option("--table", metavar="NAME", help="postgres, duckdb: the table to read (name or schema.name).")
@click.option("--query", metavar="SQL", help="postgres, duckdb: instead of --table, a read-only SELECT.")
@click.option("--partitioning", type=click.Choice(["none", "hive"]),
              help="parquet: the dataset folder's layout (hive: key=value sub-folders become columns).")
@click.option("--id", "id_column", help="The record id column (default: the first column with distinct, non-empty cells).")
@click.option("--name", help="Dataset name (default: the file name). The budget is kept per dataset.")
@click.option("--bounds", multiple=True, metavar="COL=MIN:MAX",
              help="Public bounds of a numeric column (repeatable). Written as public, without the marker.")
@click.option("--domain-from", multiple=True, metavar="COL=FILE:COLUMN",
              help="Public domain of a categorical column from a column of a public CSV (repeatable).")
@click.option("--numeric", multiple=True, metavar="COL", help="Treat COL as numeric (repeatable).")
@click.option("--categorical", multiple=True, metavar="COL", help="Treat COL as categorical (repeatable).")
@click.option("--ignore", multiple=True, metavar="COL", help="Leave COL undeclared (kept in raw only; repeatable).")
@click.option("--nullable", multiple=True, metavar="COL", help="COL may be empty (a public fact; repeatable).")
@click.option("--delimiter", metavar="D",
              help="The CSV's field delimiter: comma, semicolon, tab or pipe (or the character itself). Default: "
                   "detected from the header line; written to dataset.source.delimiter unless a comma.")
@click.option("--epsilon", type=float, default=1.0, show_default=True,
              help="The dataset's total epsilon (finite, > 0).")
@click.option("--delta", type=float, default=1e-6, show_default=True, help="The dataset's total delta, in [0, 1).")
@click.option("--neighbour", type=click.Choice(["add-remove", "replace-one"]), default="add-remove",
              show_default=True, help="Neighbour relation the budget is stated under.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the draft here (default: stdout).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
def draft(data, source_kind, dsn_env, dsn_file, table, query, partitioning, id_column, name, bounds, domain_from,
          numeric, categorical, ignore, nullable, delimiter, epsilon, delta, neighbour, output, force) -> None:
    """Write a starting spec for the CSV DATA (or a Parquet dataset, a DuckDB file's table, a PostgreSQL table).

    Examples: `dpr spec draft wages.csv`, `dpr spec draft --source postgres --dsn-env DPR_PG_DSN --table
    public.wages`, `dpr spec draft --source duckdb owner.duckdb --table wages`, `dpr spec draft --source
    parquet data/wages/ --partitioning hive`. The connection string is read from the variable or file, never
    written in the draft.

    Every value read from the data (a domain, a bound, nullability) is written on a line marked
    '# from the data: replace with public knowledge before publishing'; the spec is refused by
    `dpr spec check`, `dpr plan` and `dpr run` until each marked line is replaced with public knowledge
    (or confirmed public) and its marker deleted. Bounds and domains given with --bounds and
    --domain-from are public and not marked.

    File paths are written as the spec reads them, from the spec file's folder: relative to the folder
    of -o FILE when they lie below it, else absolute (always absolute on standard output). A header that
    reads as one column although another delimiter splits it is refused (give --delimiter).
    """
    from dpcore.ingest.raw import DELIMITER_NAMES
    from dpcore.ingest.spec_draft import draft_spec, marked_lines

    parsed_bounds = {}
    for col, rest in _pairs(bounds, "--bounds", ":").items():
        lo, _, hi = rest.partition(":")
        try:
            parsed_bounds[col] = (float(lo), float(hi))
        except ValueError:
            refuse(f"--bounds {col}={rest}: MIN and MAX must be numbers")
    domains = {c: tuple(r.rsplit(":", 1)) for c, r in _pairs(domain_from, "--domain-from", ":").items()}
    kinds = {**{c: "numeric" for c in numeric}, **{c: "categorical" for c in categorical},
             **{c: "undeclared" for c in ignore}}
    by_name = {**{n: d for d, n in DELIMITER_NAMES.items()}, **{d: d for d in DELIMITER_NAMES}, "\\t": "\t"}
    if delimiter is not None and delimiter not in by_name:
        refuse(f"--delimiter {delimiter!r}: give one of comma, semicolon, tab, pipe (or ',', ';', '|')")
    if output and Path(output).exists() and not force:
        refuse(f"{output} exists; pass --force to overwrite it")
    source = _draft_source(source_kind, data, dsn_env, dsn_file, table, query, partitioning, delimiter)
    with refusals():
        try:
            text = draft_spec(data if source is None else None, source=source, id_column=id_column, name=name, bounds=parsed_bounds, domain_files=domains,
                              kinds=kinds, nullable=list(nullable), epsilon=epsilon, delta=delta, neighbour=neighbour,
                              spec_dir=Path(output).parent if output else None,
                              delimiter=by_name[delimiter] if delimiter is not None else None)
        except ValueError as exc:
            refuse(str(exc))
    if output:
        from dpcore.storage.private_files import write_private_text

        write_private_text(output, text)  # holds values read from the data: the owner's only (0600)
        n = len(marked_lines(text))
        err.print(f"wrote {output}: {n} line(s) hold values read from the data; replace them with public knowledge "
                  "and delete their markers, then run: dpr spec check " + str(output), markup=False)
    else:
        click.echo(text, nl=False)


def _draft_source(kind, data, dsn_env, dsn_file, table, query, partitioning, delimiter) -> dict | None:
    """The ``dataset.source`` mapping ``dpr spec draft`` reads (None: a CSV, the DATA argument)."""
    given = {"--dsn-env": dsn_env, "--dsn-file": dsn_file, "--table": table, "--query": query,
             "--partitioning": partitioning}
    allowed = {"csv": (), "parquet": ("--partitioning",), "duckdb": ("--table", "--query"),
               "postgres": ("--dsn-env", "--dsn-file", "--table", "--query")}[kind]
    wrong = [f for f, v in given.items() if v is not None and f not in allowed]
    if wrong:
        refuse(f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to --source {kind}")
    if delimiter is not None and kind != "csv":
        refuse(f"--delimiter applies to --source csv only, not {kind}")
    if kind == "csv":
        if data is None:
            refuse("give the CSV file (DATA), or --source parquet|duckdb|postgres")
        if Path(data).is_dir():
            refuse(f"{data} is a folder: for a Parquet dataset pass --source parquet")
        return None
    if kind == "postgres":
        if data is not None:
            refuse("--source postgres takes no DATA argument: the connection string comes from --dsn-env or --dsn-file")
        src = {"kind": "postgres", "dsn_env": dsn_env, "dsn_file": dsn_file, "table": table, "query": query}
    elif data is None:
        refuse(f"--source {kind}: give the {'dataset folder' if kind == 'parquet' else 'DuckDB file'} (DATA)")
    elif kind == "duckdb":
        src = {"kind": "duckdb", "path": data, "table": table, "query": query}
    else:
        src = {"kind": "parquet", "path": data, "partitioning": partitioning}
    return {k: v for k, v in src.items() if v is not None}


@spec_group.command("check")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--release-id", help="Override the spec's release id.")
@click.option("--data", "with_data", is_flag=True,
              help="Also validate the spec's input against it (on this machine; nothing stored or charged) and "
                   "print the data owner's validation summary and the disk a release needs and has.")
def check(spec, release_id, with_data) -> None:
    """Check SPEC and print every problem at once, each with its spec path.

    Checks the keys and values, the rules between them, and every enabled step's public parameters
    (roster ids, attributes, hierarchy, mechanism parameters). Reads no data unless --data is given.
    Exit code 0 when there is no problem, 2 otherwise.
    """
    from dpcore.release.spec import SpecError, check_release_id_flag, load_spec
    from dpcore.run.cost_plan import plan_release

    try:
        check_release_id_flag(release_id)
        loaded = load_spec(spec, release_id=release_id)
    except SpecError as exc:
        refuse(str(exc))
    problems = [p for p in plan_release(loaded).problems if not p.startswith("budget:")]
    if problems:
        refuse(f"{spec}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
    out.print(f"{spec}: the spec is valid (dataset {loaded.dataset.name}, release {loaded.release_id})", markup=False)
    if with_data:
        from dpcore.ingest.disk_space import disk_outlook
        from dpcore.ingest.raw import read_input
        from dpcore.storage.settings import Settings
        from dpcore.validation import validate

        disk = disk_outlook(loaded, Settings.from_env())  # the figures a release's disk refusal leaves out
        if disk is not None:
            out.print(disk, markup=False, soft_wrap=True)

        with refusals():
            outcome = validate(read_input(loaded, Settings.from_env().data), loaded)
        out.print(outcome.summary_text(loaded.dataset.source.kind), markup=False)
        if not outcome.table_failures:  # the release's rejected-rows gate, with both numbers (issue 48.1)
            from dpcore.steps.record_counts import gate_outlook

            out.print(gate_outlook(loaded, int(outcome.n_rows), int(outcome.n_rejected)), markup=False)
        out.print("(the data owner's summary: exact counts and row numbers of your data; do not publish it)",
                  markup=False)
        if outcome.table_failures:
            raise SystemExit(REFUSED)
