"""The validation rules: their names, what each checks, and the validator's derived columns.

Rules
-----
Table level (any failure stops the run in :func:`~dpcore.validation.enforce`):

``column_exists``
    The record-id column and every declared attribute are present.
``row_count``
    The table has at least one row.
``extra_columns``
    With ``dataset.extra_columns: error``, no undeclared columns. With
    ``ignore`` the extras stay in ``raw`` and are listed in
    :attr:`~dpcore.validation.ValidationOutcome.ignored_columns`.
``reserved_column``
    An input column uses a name reserved for the validator's derived columns.

Row level (a failing row is quarantined once per broken rule and column):

``not_null``
    Cell is neither null nor the empty string (unless ``nullable``).
``unique``
    Record ids are unique over the whole table (decided in DuckDB before the
    chunks are checked, :func:`~dpcore.validation.duplicates._duplicated_rows_sql`). Every row sharing an id is rejected: keeping one of
    them would let one added raw row *replace* a validated record (two
    add/remove steps for every step reading ``validated``); rejecting all
    keeps the validated table within one record of its neighbour's, and the
    record counts are charged for their true sensitivity on raw rows
    (:mod:`dpcore.steps.record_counts`).
``id_pattern``
    Record id matches ``dataset.record_id_pattern``.
``in_domain``
    Categorical cell text equals the text of a domain value (``str(v)``).
``number``
    Numeric cell text is a decimal number (``nan``, ``inf``, ``abc`` fail).
``finite``
    The number is finite as a float64 (``1e400`` overflows and fails).
``integer``
    For ``integer: true`` attributes, the number is whole.
``in_bounds``
    The number lies in the public bounds ``[min, max]``.
"""
from __future__ import annotations


#: A decimal number written in plain or scientific notation, nothing else
#: (no surrounding spaces, no ``nan``/``inf``, no thousands separators).
#: ``\A``/``\Z`` anchor the whole cell: great-expectations uses ``re.search``.
_NUMBER_BODY = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
NUMBER_PATTERN = rf"\A{_NUMBER_BODY}\Z"

#: Prefix of the derived (parsed) columns the validator adds to its working frame.
DERIVED_PREFIX = "__dpv_"

TABLE_RULES = ("column_exists", "row_count", "extra_columns", "reserved_column")
ROW_RULES = ("not_null", "unique", "id_pattern", "in_domain", "number", "finite", "integer", "in_bounds")

#: What a broken rule means (the owner's summary text and :func:`~dpcore.validation.enforce`'s message).
_RULE_TEXT = {
    "column_exists": "required column is missing",
    "row_count": "the table has no data rows",
    "extra_columns": "column is not declared in the spec (dataset.extra_columns: error)",
    "reserved_column": "column name is reserved for the validator",
    "not_null": "empty or null cell in a non-nullable column",
    "unique": "record id is not unique",
    "id_pattern": "record id does not match dataset.record_id_pattern",
    "in_domain": "value is not in the categorical domain",
    "number": "cell is not a decimal number",
    "finite": "number is not finite (overflows float64)",
    "integer": "number is not a whole number (integer: true)",
    "in_bounds": "number is outside the public bounds [min, max]",
}

#: What each rule checks (the public rule set, :func:`~dpcore.validation.public_rule_set`).
_RULE_CHECK = {
    "column_exists": "the column is present",
    "row_count": "the table has at least one row",
    "extra_columns": "no column outside the spec",
    "reserved_column": "no column uses a reserved name",
    "not_null": "the cell is not empty",
    "unique": "the record id is unique (every row sharing an id is rejected)",
    "id_pattern": "the record id matches dataset.record_id_pattern",
    "in_domain": "the value is in the public domain",
    "number": "the cell is a decimal number",
    "finite": "the number is finite",
    "integer": "the number is whole",
    "in_bounds": "the number lies in the public bounds [min, max]",
}


def _num_col(col: str) -> str:
    return f"{DERIVED_PREFIX}num__{col}"


def _whole_col(col: str) -> str:
    return f"{DERIVED_PREFIX}whole__{col}"
