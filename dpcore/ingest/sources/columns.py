"""Column types of a typed source, checked against the spec before any row is read (issue 31).

A typed source (PostgreSQL, a DuckDB file, a Parquet dataset) is ingested as text cells, exactly like a
CSV, so the text of a typed value must be the text the spec's public schema expects. A column whose text
form cannot match (a floating-point column read as a category: DOUBLE ``1.0`` reads ``1.0``, never the
domain's ``1``) is refused before ingest, naming the column and its type only. Types are public metadata of
the source (the catalogue), not data: nothing here reads a row.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import SourceError

if TYPE_CHECKING:
    from dpcore.release.spec import ReleaseSpec

#: The row-number column ingest adds (``dpcore.ingest.raw.ROW``; repeated here so this package imports nothing of ingest).
ROW = "_row"

#: Families of source types by the text their values read as.
TEXT, INTEGER, DECIMAL, FLOAT, BOOLEAN, OTHER = "text", "integer", "decimal", "float", "boolean", "other"
#: Lists, arrays, structs, maps and unions: never read as a number, a domain value or a record id (issue 47.4).
NESTED = "nested"

_DUCKDB_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                    "UBIGINT", "UHUGEINT"}
_INT_TEXT = re.compile(r"-?(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class Column:
    """One column of a source: its name, its type as the source names it, and the type's family."""

    name: str
    type_name: str
    family: str


def duckdb_family(type_name: str) -> str:
    """The family of a DuckDB type name (``DECIMAL(p,0)`` reads as an integer)."""
    t = type_name.upper()
    if t.endswith("]") or t.startswith(("STRUCT(", "MAP(", "UNION(", "LIST(")):
        return NESTED
    if t == "VARCHAR" or t.startswith("VARCHAR("):
        return TEXT
    if t in _DUCKDB_INTEGERS:
        return INTEGER
    if t in ("FLOAT", "DOUBLE", "REAL"):
        return FLOAT
    if t == "BOOLEAN":
        return BOOLEAN
    m = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", t)
    if m:
        return INTEGER if m.group(2) == "0" else DECIMAL
    return OTHER


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_names(where: str, columns: list[Column]) -> None:
    """Refuse column names that ingest cannot store: repeated, empty, reserved ``_row``, a NUL or a line break."""
    names = [c.name for c in columns]
    if not names:
        raise SourceError(f"{where} has no columns; point the source at a table or query with the spec's columns")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SourceError(f"{where} repeats column names {dup}; give each column its own name (AS ...) in a query")
    if ROW in names:
        raise SourceError(f"{where} has a column named {ROW!r}, which is reserved for row numbers; rename it "
                          "(AS ...) in a query")
    bad = [n for n in names if n == "" or "\x00" in n or "\n" in n or "\r" in n]
    if bad:
        raise SourceError(f"{where} has a column name that is empty or holds a NUL or a line break; rename it")


def _canonical_domain(values: list) -> bool:
    """Every domain value is an integer or the text of one as an integer column reads (``12``, ``-3``; not ``012``)."""
    return all((isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and _INT_TEXT.fullmatch(v))
               for v in values)


def check_types(where: str, columns: list[Column], spec: "ReleaseSpec") -> None:
    """Refuse, before ingest, a declared column whose type's text cannot read as the spec expects.

    Rules (the text a value of the family reads as, against what validation expects of the column):

    * the record id: text or integer types (a float or decimal id reads ``1.0`` / ``1.50``);
    * a categorical attribute: text; integer types when every domain value is an integer written as an
      integer column reads it; boolean when the domain is ``true``/``false``; other types (dates, ...) when
      the domain is text; never float or decimal types (DOUBLE ``1.0`` reads ``1.0``, not the domain's ``1``);
    * a numeric attribute: text, integer, decimal or float types (read as numbers); never boolean or other types;
    * no declared column of a nested type (a list or array, a struct or record, a map, a union; issue 47.4):
      its text is never a number, a domain value or a record id.

    Columns the spec does not declare are kept in ``raw`` as text whatever their type.

    Raises
    ------
    SourceError
        Names the column, its type, the spec key and the fix; never a value.
    """
    rid = spec.dataset.record_id
    cats = spec.public_schema.categorical
    nums = spec.public_schema.numeric
    fix = "cast it in the source (a query with CAST(... AS ...)) or change the spec; nothing was read or charged"
    for c in columns:
        f = c.family
        if f == NESTED and (c.name == rid or c.name in cats or c.name in nums):
            raise SourceError(f"{where}: column {c.name!r} is {c.type_name}, a nested type whose values never read "
                              f"as the spec's numbers, domain values or record ids: {fix}")
        if c.name == rid and f not in (TEXT, INTEGER):
            raise SourceError(f"{where}: column {c.name!r} (dataset.record_id) is {c.type_name}, whose values do "
                              "not read as record ids (a decimal point, a date): cast it to text or an integer type "
                              "in the source (a query with CAST(... AS TEXT)); nothing was read or charged")
        elif c.name in cats:
            domain = list(cats[c.name].domain)
            ok = (f == TEXT or (f == INTEGER and _canonical_domain(domain))
                  or (f == BOOLEAN and {str(v) for v in domain} <= {"true", "false"})
                  or (f == OTHER and all(isinstance(v, str) for v in domain)))
            if not ok:
                raise SourceError(
                    f"{where}: column {c.name!r} is {c.type_name}, whose text form differs from the text of "
                    f"schema.categorical.{c.name}.domain (a DOUBLE 1.0 reads '1.0', never '1'; an integer never "
                    f"reads '01'): so every row would be quarantined. {fix[0].upper()}{fix[1:]}")
        elif c.name in nums and f not in (TEXT, INTEGER, DECIMAL, FLOAT):
            raise SourceError(f"{where}: column {c.name!r} (schema.numeric.{c.name}) is {c.type_name}, whose "
                              f"values do not read as numbers: {fix}")


def text_cells(columns: list[Column], prefix: str = "") -> str:
    """SQL selecting every column as text (NULL as the empty cell, as a CSV holds it), named as in the source."""
    return ", ".join(f"coalesce(CAST({prefix}{_ident(c.name)} AS VARCHAR), '') AS {_ident(c.name)}" for c in columns)
