"""A starting release spec drafted from the data owner's CSV (``dpr spec draft``; issue 20).

DESIGN.md: public metadata (domains, bounds, nullability) comes from the spec,
never from the data. A draft has to start somewhere, so it proposes each
column's kind from the file, takes every bound and domain the owner gives as
public knowledge (``bounds``, ``domain_files``), and writes every value it
had to read off the data on a line ending with :data:`~dpcore.spec.DATA_MARKER`.
:func:`dpcore.spec.load_spec` refuses a spec that still carries the marker,
so a value read off the data can reach a release only after the owner has
looked at that line, replaced it with public knowledge (or decided it is
public) and deleted the marker.

The draft is written for the owner only (it may contain values of the data);
nothing here logs or publishes it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .ingest import IngestError, read_csv_text
from .spec import DATA_MARKER

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


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _text(v: str) -> str:
    """A YAML scalar for any text (a JSON string is a YAML double-quoted scalar)."""
    return json.dumps(v, ensure_ascii=False)


def draft_spec(
    csv_path: str | Path,
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
) -> str:
    """The YAML text of a starting spec for ``csv_path``.

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
        The budget (the owner's decision; defaults are placeholders stated in a comment).
    spec_dir : path, optional
        Folder the spec will be written to; the source path is made relative to it.

    Returns
    -------
    str
        YAML; every line holding a value read from the data ends with
        :data:`~dpcore.spec.DATA_MARKER`.

    Raises
    ------
    IngestError
        The CSV cannot be read (as ingest would refuse it).
    ValueError
        A named column is not in the file, or a bound is not ``min < max``.
    """
    path = Path(csv_path)
    if not path.exists():
        raise IngestError(f"input file not found: {path}")
    df = read_csv_text(path)
    bounds, domain_files, kinds = dict(bounds or {}), dict(domain_files or {}), dict(kinds or {})
    nullable = list(nullable or [])
    named = [*bounds, *domain_files, *kinds, *nullable] + ([id_column] if id_column else [])
    unknown = [c for c in dict.fromkeys(named) if c not in df.columns]
    if unknown:
        raise ValueError(f"columns {unknown} are not in {path.name} (its columns: {list(df.columns)})")
    for col, (lo, hi) in bounds.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"--bounds {col}: need finite min < max, got {lo}:{hi}")
        kinds.setdefault(col, "numeric")
    for col in domain_files:
        kinds.setdefault(col, "categorical")
    guessed_id = id_column is None
    rid = id_column or guess_id_column(df)
    cols = guess_columns(df, rid, kinds)
    source = Path(path).resolve()
    if spec_dir is not None:
        try:
            source = source.relative_to(Path(spec_dir).resolve())
        except ValueError:
            pass
    m = f"  {DATA_MARKER}"
    lines = [
        f"# Release spec drafted by `dpr spec draft` from {path.name}.",
        "# Public metadata only may remain: every line ending with the marker below holds a value read",
        "# from the data. Replace it with public knowledge (a published code list, a physical or legal",
        "# limit), then delete the marker; `dpr spec check` and every release refuse the spec until then.",
        "# The README's spec reference explains every key.",
        "release_id: r1",
        "dataset:",
        f"  name: {_text(name or ''.join(c if c.isalnum() or c in '_.-' else '_' for c in path.stem) or 'data')}",
        "  source:",
        "    kind: csv",
        f"    path: {_text(str(source))}",
        f"  record_id: {rid}" + ("  # guessed: its cells are distinct and non-empty; choose with --id" if guessed_id else ""),
        "  # dataset.roster: a public list of record ids that may be asked about by id (aiq, pcor)",
    ]
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
                lines.append(f"      domain_from: {{file: {_text(f)}, column: {_text(col)}}}")
            else:
                lines.append(f"      domain: [{', '.join(_text(v) for v in c.values)}]{m}")
            if c.name in nullable:
                lines.append("      nullable: true")
            elif c.has_empty:
                lines.append(f"      nullable: true{m}")
    if nums:
        lines.append("  numeric:")
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
            elif c.has_empty:
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
        "  # detect, aiq, outlier_counts, coco and pcor are off until configured (README: spec reference)",
        "  detect: {enabled: false}",
        "  aiq: {enabled: false}",
        "  outlier_counts: {enabled: false}",
        "  coco: {enabled: false}",
        "  pcor: {enabled: false}",
    ]
    return "\n".join(lines) + "\n"


def marked_lines(text: str) -> list[int]:
    """1-based numbers of the lines that still carry :data:`~dpcore.spec.DATA_MARKER`."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if DATA_MARKER in line]
