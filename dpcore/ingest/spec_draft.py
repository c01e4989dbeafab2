"""A starting release spec drafted from the data owner's CSV (``dpr spec draft``; issue 20).

DESIGN.md: public metadata (domains, bounds, nullability) comes from the spec,
never from the data. A draft has to start somewhere, so it proposes each
column's kind from the file, takes every bound and domain the owner gives as
public knowledge (``bounds``, ``domain_files``), and writes every value it
had to read off the data on a line ending with :data:`~dpcore.release.spec.DATA_MARKER`.
:func:`dpcore.release.spec.load_spec` refuses a spec that still carries the marker,
so a value read off the data can reach a release only after the owner has
looked at that line, replaced it with public knowledge (or decided it is
public) and deleted the marker.

The draft is written for the owner only (it may contain values of the data);
nothing here logs or publishes it.

Reading the file (issue 32, section 5): the field delimiter is detected from
the header line alone (:func:`detect_delimiter`) or given, and written to
``dataset.source.delimiter`` when it is not a comma, so ingest reads the file
the way the draft did; a header that reads as one column although another
delimiter splits it into many fields is refused. File paths are written so
that they resolve from the spec's folder (where :func:`dpcore.release.spec.load_spec`
reads them from), or absolute when that folder is not known.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from .raw import DELIMITER_NAMES, IngestError, header_fields, read_csv_text
from dpcore.release.spec import CSV_DELIMITERS, DATA_MARKER, BudgetSpec, StepsSpec
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

#: A text column with more distinct values than this is not proposed as categorical (free text, names).
MAX_CATEGORIES = 100


@dataclass(frozen=True)
class ColumnGuess:
    """What the draft proposes for one column.

    ``kind`` is ``numeric``, ``categorical`` or ``undeclared`` (free text:
    kept in ``raw`` only, ``dataset.extra_columns: ignore``).
    """

    name: str
    kind: str
    integer: bool = False
    low: float | None = None
    high: float | None = None
    values: tuple[str, ...] = ()
    has_empty: bool = False


def _numbers(col: pd.Series) -> np.ndarray | None:
    """The column's non-empty cells as finite numbers, or None if some cell is not one."""
    cells = col[col.str.strip() != ""]
    parsed = pd.to_numeric(cells.str.strip(), errors="coerce").to_numpy(dtype=float)
    if len(parsed) == 0 or np.isnan(parsed).any() or not np.isfinite(parsed).all():
        return None
    return parsed


def guess_columns(df: pd.DataFrame, id_column: str, kinds: dict[str, str] | None = None,
                  max_categories: int = MAX_CATEGORIES) -> list[ColumnGuess]:
    """Propose a kind for every column except the record id (text cells, as ingest reads them).

    Parameters
    ----------
    df : pandas.DataFrame
        The CSV as text.
    id_column : str
    kinds : dict, optional
        The owner's choice of kind per column (``numeric``, ``categorical``,
        ``undeclared``); wins over the guess.
    max_categories : int
        More distinct text values than this: ``undeclared``.

    Raises
    ------
    ValueError
        A forced ``numeric`` column has a cell that is not a number (naming the column).
    """
    kinds = kinds or {}
    out = []
    for name in df.columns:
        if name == id_column:
            continue
        col = df[name].astype(str)
        empty = bool((col.str.strip() == "").any())
        nums = _numbers(col)
        kind = kinds.get(name) or ("numeric" if nums is not None else
                                   "categorical" if col[col != ""].nunique() <= max_categories else "undeclared")
        if kind == "numeric":
            if nums is None:
                raise ValueError(f"column {name!r} is declared numeric (--numeric) but has cells that are not numbers")
            whole = bool(np.all(nums == np.round(nums)))
            out.append(ColumnGuess(name, "numeric", whole, float(nums.min()), float(nums.max()), has_empty=empty))
        elif kind == "categorical":
            values = tuple(sorted(set(col[col != ""])))
            out.append(ColumnGuess(name, "categorical", values=values, has_empty=empty))
        else:
            out.append(ColumnGuess(name, "undeclared"))
    return out


def guess_id_column(df: pd.DataFrame) -> str:
    """The first column whose cells are all non-empty and distinct (the draft's guess of the record id).

    Raises
    ------
    ValueError
        No such column: the owner names it with ``--id``.
    """
    for name in df.columns:
        col = df[name]
        if (col != "").all() and col.is_unique:
            return name
    raise ValueError("no column has a distinct, non-empty value in every row; name the record id column with --id")


def detect_delimiter(fields: dict[str, list[str]]) -> str:
    """The delimiter that splits the header into the most fields (ties: the order of ``CSV_DELIMITERS``).

    Parameters
    ----------
    fields : dict
        The header split by each accepted delimiter (:func:`dpcore.ingest.raw.header_fields`).

    Returns
    -------
    str
        ``,`` when no delimiter splits the header (a one-column file).
    """
    best = ","
    for d in CSV_DELIMITERS:
        if d in fields and len(fields[d]) > len(fields.get(best, [""])):
            best = d
    return best


def delimiter_flag(delimiter: str) -> str:
    """How ``dpr spec draft --delimiter`` names a delimiter (``semicolon``, ``tab``, ...)."""
    return DELIMITER_NAMES[delimiter]


def _one_column_refusal(path: Path, delimiter: str, fields: dict[str, list[str]]) -> str | None:
    """The refusal of a header read as one column that another delimiter splits into several, or None."""
    splits = {d: f for d, f in fields.items() if d != delimiter and len(f) > 1}
    if len(fields.get(delimiter, [])) != 1 or not splits:
        return None
    best = detect_delimiter(splits)
    return (f"the header of {path.name} reads as one column with --delimiter {delimiter_flag(delimiter)}, but "
            f"{delimiter_flag(best)} ({best!r}) splits it into {len(splits[best])} fields: pass --delimiter "
            f"{delimiter_flag(best)} (or leave --delimiter out to detect it from the header)")


def _budget_problem(epsilon: float, delta: float, neighbour: str) -> str | None:
    """The draft's budget checked by the spec's own rule (:class:`~dpcore.release.spec.BudgetSpec`), naming the flag."""
    try:
        BudgetSpec(epsilon=epsilon, delta=delta, neighbour=neighbour)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else "epsilon"
        given = epsilon if field == "epsilon" else delta
        want = ("a finite number > 0" if field == "epsilon" else "a number in [0, 1)")
        why = f" ({err['msg'].removeprefix('Value error, ')})" if err.get("type") == "value_error" else ""
        return (f"--{field} {given!r}: the dataset's total {field} (budget.{field}) must be {want}{why}; "
                f"pass e.g. --{field} {'1.0' if field == 'epsilon' else '1e-6'}")
    return None


def _spec_relative(file: str | Path, spec_dir: str | Path | None) -> str:
    """``file`` (relative to the working directory) as the spec should hold it.

    Relative to ``spec_dir`` when the file lies under it (:func:`dpcore.release.spec.load_spec` resolves relative
    paths from the spec's folder), absolute otherwise or when ``spec_dir`` is None (standard output: the
    spec's folder is not known).
    """
    absolute = Path(os.path.abspath(file))
    if spec_dir is not None:
        try:
            return str(absolute.relative_to(Path(os.path.abspath(spec_dir))))
        except ValueError:
            pass
    return str(absolute)


def _decimal_comma(col: pd.Series) -> bool:
    """Some cell holds a comma and every non-empty cell is a number once its decimal comma is read as a point.

    Asked of columns that are not numbers as written (validation reads a decimal point only).
    """
    cells = col[col.str.strip() != ""].str.strip()
    if cells.empty or not cells.str.contains(",", regex=False).any():
        return False
    parsed = pd.to_numeric(cells.str.replace(",", ".", regex=False), errors="coerce").to_numpy(dtype=float)
    return bool(np.isfinite(parsed).all())


def _off_steps() -> list[str]:
    """The spec's steps that are off unless the spec turns them on (in the order of :class:`StepsSpec`)."""
    defaults = StepsSpec()
    return [n for n in StepsSpec.model_fields if getattr(getattr(defaults, n), "enabled", True) is False]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _text(v: str) -> str:
    """A YAML scalar for any text (a JSON string is a YAML double-quoted scalar)."""
    return json.dumps(v, ensure_ascii=False)


def _source_model(source: dict):
    """The ``dataset.source`` mapping of a draft, validated by the spec's own model (messages name the flag)."""
    from pydantic import TypeAdapter

    from dpcore.release.spec import Source

    try:
        return TypeAdapter(Source).validate_python(source)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        flags = {"dsn_env": "--dsn-env", "dsn_file": "--dsn-file", "table": "--table", "query": "--query",
                 "partitioning": "--partitioning"}
        where = [str(x) for x in err.get("loc", ()) if str(x) in flags]
        raise ValueError(f"--source {source.get('kind')}: {flags[where[-1]] + ': ' if where else ''}{msg}") from None


def _source_lines(model, spec_dir: str | Path | None) -> tuple[list[str], str]:
    """The draft's ``source:`` block for a database or Parquet-folder source, and a default dataset name."""
    lines = [f"    kind: {model.kind}"]
    if model.kind == "postgres":
        if model.dsn_env:
            lines.append(f"    dsn_env: {model.dsn_env}  # the variable's NAME: the connection string is never "
                         "written in a spec")
        else:
            lines.append(f"    dsn_file: {_text(_spec_relative(model.dsn_file, spec_dir))}  # an owner-only "
                         "file (chmod 600) holding the connection string")
    else:
        lines.append(f"    path: {_text(_spec_relative(model.path, spec_dir))}")
    if getattr(model, "partitioning", None):
        lines.append(f"    partitioning: {model.partitioning}")
    if getattr(model, "table", None):
        lines.append(f"    table: {model.table}")
        name = model.table.rsplit(".", 1)[-1]
    elif getattr(model, "query", None):
        lines.append(f"    query: {_text(model.query)}")
        name = Path(getattr(model, "path", "") or "data").stem or "data"
    else:
        name = Path(model.path.rstrip("/")).name
    return lines, name


def draft_spec(
    csv_path: str | Path | None = None,
    *,
    id_column: str | None = None,
    name: str | None = None,
    bounds: dict[str, tuple[float, float]] | None = None,
    domain_files: dict[str, tuple[str, str]] | None = None,
    kinds: dict[str, str] | None = None,
    nullable: list[str] | None = None,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    neighbour: str = "add-remove",
    spec_dir: str | Path | None = None,
    delimiter: str | None = None,
    source: dict | None = None,
) -> str:
    """The YAML text of a starting spec for ``csv_path`` (or for ``source``: a database or a Parquet dataset).

    Parameters
    ----------
    csv_path : path
        The owner's CSV (UTF-8, header row).
    id_column : str, optional
        The record id column; guessed by :func:`guess_id_column` when None.
    name : str, optional
        Dataset name (default: the file's stem).
    bounds : dict, optional
        Public bounds per numeric column (``{col: (min, max)}``), from the
        owner: written without the marker.
    domain_files : dict, optional
        Public domain per categorical column from a public CSV
        (``{col: (file, column)}``): written as ``domain_from``, without the marker.
    kinds : dict, optional
        Forced kinds (see :func:`guess_columns`).
    nullable : list of str, optional
        Columns the owner declares nullable (public); other columns with an
        empty cell get ``nullable: true`` with the marker.
    epsilon, delta, neighbour
        The budget (the owner's decision; defaults are placeholders stated in a comment). Checked by the
        spec's own rule: epsilon finite and > 0, delta in [0, 1).
    spec_dir : path, optional
        Folder the spec will be written to: the source and domain file paths (given relative to the working
        directory) are written relative to it when they lie under it, else absolute. None (the draft goes to
        standard output): absolute paths. A comment in the draft says which.
    delimiter : str, optional
        The CSV's field delimiter, one of :data:`~dpcore.release.spec.CSV_DELIMITERS`; None: detected from the header
        line (:func:`detect_delimiter`). Written as ``dataset.source.delimiter`` when not a comma.
    source : dict, optional
        Instead of ``csv_path``: a ``dataset.source`` mapping of kind ``postgres``, ``duckdb`` or ``parquet``
        (issue 31), read as ingest reads it (text cells, :func:`dpcore.ingest.raw.read_source_columns`). A column
        of a floating-point or decimal type is proposed numeric unless the owner chose its kind (as a category
        it would be refused by ingest's type check).

    Returns
    -------
    str
        YAML; every line holding a value read from the data ends with
        :data:`~dpcore.release.spec.DATA_MARKER`.

    Raises
    ------
    IngestError
        The CSV cannot be read (as ingest would refuse it).
    ValueError
        A named column is not in the file, a bound is not ``min < max``, the budget is not a valid
        ``budget`` (naming ``--epsilon`` or ``--delta``), the delimiter is not accepted, or the header reads
        as one column although another delimiter splits it (naming ``--delimiter``).
    """
    problem = _budget_problem(epsilon, delta, neighbour)
    if problem:
        raise ValueError(problem)
    if source is not None and source.get("kind") != "csv":
        from .raw import read_source_columns
        from .sources import SourceError
        from .sources.columns import DECIMAL, FLOAT

        model = _source_model(source)
        if model.kind == "parquet" and not Path(model.path).is_dir():
            raise ValueError(f"--source parquet: {model.path} is not a folder; a single Parquet file keeps its own "
                             "types and is drafted by hand (or give the dataset's folder)")
        try:
            df, columns = read_source_columns(model)
        except SourceError as exc:
            raise IngestError(str(exc)) from None
        kinds = dict(kinds or {})
        for c in columns:
            if c.family in (FLOAT, DECIMAL):
                kinds.setdefault(c.name, "numeric")
        src_lines, default_name = _source_lines(model, spec_dir)
        return _draft_text(df, f"the {model.kind} source", src_lines, default_name, id_column=id_column, name=name,
                           bounds=bounds, domain_files=domain_files, kinds=kinds, nullable=nullable,
                           epsilon=epsilon, delta=delta, neighbour=neighbour, spec_dir=spec_dir)
    if csv_path is None:
        raise ValueError("give the CSV file (DATA), or --source postgres|duckdb|parquet with its flags")
    path = Path(csv_path)
    if delimiter is not None and delimiter not in CSV_DELIMITERS:
        raise ValueError(f"--delimiter {delimiter!r}: give one of " + ", ".join(
            f"{DELIMITER_NAMES[d]} ({d!r})" for d in CSV_DELIMITERS))
    if not path.exists():
        raise IngestError(f"input file not found: {path}")
    fields = header_fields(path)
    detected = delimiter is None
    delimiter = detect_delimiter(fields) if detected else delimiter
    problem = _one_column_refusal(path, delimiter, fields)
    if problem:
        raise ValueError(problem)
    df = read_csv_text(path, delimiter)
    source = _spec_relative(path, spec_dir)
    src_lines = ["    kind: csv", f"    path: {_text(source)}"]
    if delimiter != ",":
        how = "detected from the header line" if detected else "given with --delimiter"
        src_lines.append(f"    delimiter: {_text(delimiter)}  # {delimiter_flag(delimiter)}, {how}")
    default_name = ''.join(c if c.isalnum() or c in '_.-' else '_' for c in path.stem) or 'data'
    return _draft_text(df, path.name, src_lines, default_name, id_column=id_column, name=name, bounds=bounds,
                       domain_files=domain_files, kinds=kinds, nullable=nullable, epsilon=epsilon, delta=delta,
                       neighbour=neighbour, spec_dir=spec_dir)


def _draft_text(df: pd.DataFrame, title: str, src_lines: list[str], default_name: str, *, id_column, name, bounds,
                domain_files, kinds, nullable, epsilon, delta, neighbour, spec_dir) -> str:
    """The draft's YAML from the input's text cells ``df`` (any source kind) and its ``source:`` lines."""
    bounds, domain_files, kinds = dict(bounds or {}), dict(domain_files or {}), dict(kinds or {})
    nullable = list(nullable or [])
    named = [*bounds, *domain_files, *kinds, *nullable] + ([id_column] if id_column else [])
    unknown = [c for c in dict.fromkeys(named) if c not in df.columns]
    if unknown:
        raise ValueError(f"columns {unknown} are not in {title} (its columns: {list(df.columns)})")
    for col, (lo, hi) in bounds.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"--bounds {col}: need finite min < max, got {lo}:{hi}")
        kinds.setdefault(col, "numeric")
    for col in domain_files:
        kinds.setdefault(col, "categorical")
    guessed_id = id_column is None
    rid = id_column or guess_id_column(df)
    cols = guess_columns(df, rid, kinds)
    where = (f"relative file paths in a spec are read from the spec file's folder ({os.path.abspath(spec_dir)}): "
             "a file below it is written relative to it, any other absolute" if spec_dir is not None else
             "relative file paths in a spec are read from the spec file's folder; this draft went to standard "
             "output (that folder unknown), so its paths are absolute")
    m = f"  {DATA_MARKER}"
    lines = [
        f"# Release spec drafted by `dpr spec draft` from {title}.",
        "# Public metadata only may remain: every line ending with the marker below holds a value read",
        "# from the data. Replace it with public knowledge (a published code list, a physical or legal",
        "# limit), then delete the marker; `dpr spec check` and every release refuse the spec until then.",
        "# docs/spec.md (the spec reference) explains every key.",
        "release_id: r1",
        "dataset:",
        f"  name: {_text(name or default_name)}",
        "  source:",
        f"    # {where}",
        *src_lines,
        f"  record_id: {rid}" + ("  # guessed: its cells are distinct and non-empty; choose with --id" if guessed_id else ""),
        "  # dataset.roster: a public list of record ids that may be asked about by id (aiq, pcor)",
    ]
    commas = [c.name for c in cols if c.kind != "numeric" and _decimal_comma(df[c.name].astype(str))]
    if commas:
        lines.append("  # numbers with a decimal comma are not numbers to validation (it reads a decimal point only): "
                     "re-export these columns with a point to declare them numeric: " + ", ".join(commas))
    undeclared = [c.name for c in cols if c.kind == "undeclared"]
    if undeclared:
        lines.append("  # not declared (free text: too many distinct values for a categorical attribute), kept in raw only: "
                     + ", ".join(undeclared))
        lines.append("  extra_columns: ignore")
    lines.append("schema:")
    cats = [c for c in cols if c.kind == "categorical"]
    nums = [c for c in cols if c.kind == "numeric"]
    if cats:
        lines.append("  categorical:")
        for c in cats:
            lines.append(f"    {c.name}:")
            if c.name in domain_files:
                f, col = domain_files[c.name]
                lines.append(f"      domain_from: {{file: {_text(_spec_relative(f, spec_dir))}, column: {_text(col)}}}")
            else:
                lines.append(f"      domain: [{', '.join(_text(v) for v in c.values)}]{m}")
            if c.name in nullable:
                lines.append("      nullable: true")
            elif c.has_empty:
                lines.append(f"      nullable: true{m}")
    if nums:
        lines += [
            "  # unit: steps.rules (outlier rules) combines numeric attributes by their units and needs each one's:",
            "  # a pint unit (usd, year, hour, minute, mile, degC, ...; 1 if dimensionless). Fill in the placeholder",
            "  # after an attribute and move it inside the braces, e.g. {min: 0, max: 120, unit: year}.",
            "  numeric:",
        ]
        for c in nums:
            integer = ", integer: true" if c.integer else ""
            if c.name in bounds:
                lo, hi = bounds[c.name]
                lines.append(f"    {c.name}: {{min: {_num(lo)}, max: {_num(hi)}{integer}}}")
            else:
                hi = c.high if c.high > c.low else c.low + 1
                lines.append(f"    {c.name}: {{min: {_num(c.low)}, max: {_num(hi)}{integer}}}{m}")
            if c.name in nullable:
                lines[-1] = lines[-1].replace(integer + "}", integer + ", nullable: true}", 1)
            lines.append(f"    #   unit: ?  ({c.name})")
            if c.name not in nullable and c.has_empty:
                lines.append(f"    # {c.name} has empty cells: add nullable: true above if empty is a valid value{m}")
    lines += [
        "budget:",
        "  # the data owner's decision: total privacy loss allowed for this dataset over all releases",
        f"  epsilon: {_num(epsilon)}",
        f"  delta: {delta:.1e}",  # PyYAML reads 1e-06 (no dot) as text
        f"  neighbour: {neighbour}",
        "steps:",
        "  validation:",
        "    max_rejected_fraction: 0.05",
        "  record_counts:",
        "    epsilon: 0.1",
    ]
    off = _off_steps()
    lines.append(f"  # {', '.join(off[:-1])} and {off[-1]} are off until configured (docs/spec.md: the spec reference)")
    lines += [f"  {name}: {{enabled: false}}" for name in off]
    return "\n".join(lines) + "\n"


def marked_lines(text: str) -> list[int]:
    """1-based numbers of the lines that still carry :data:`~dpcore.release.spec.DATA_MARKER`."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if DATA_MARKER in line]
