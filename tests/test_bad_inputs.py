"""The bad-input corpus (tests/bad_inputs/) through load_spec -> ingest -> validate -> store -> enforce.

Every case ends either in one of the three expected exception types with a
message naming the key / column / rule, or in success with exactly the expected
quarantine (rule, column) pairs. Nothing else may escape; raw stays intact and
the input file is never modified; no planted cell value reaches a message.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dpcore.ingest.raw import IngestError, ingest, load_raw, raw_digest
from dpcore.release.spec import SpecError, load_spec
from dpcore.validation import ValidationFailed, enforce, store_outcome, validate
from dpcore.storage.warehouse import Warehouse

CORPUS = Path(__file__).parent / "bad_inputs"
BASE = CORPUS / "base_spec.yaml"


@dataclass(frozen=True)
class Case:
    """One corpus case.

    ``csv``: data file run with the base spec (source path swapped); None = the
    spec file's own source. ``raises``: expected exception type, or None for
    success. ``says``: substrings the message (or, on success, the summary) must
    contain. ``quarantine``: expected set of (rule, column) on success.
    ``secrets``: cell values planted in the input that must not appear in any
    message or summary. ``never``: other text the message must not hold (where
    the input breaks -- a line, an offset, a byte -- is a fact about private
    rows; issue 15, hole 9).
    """

    csv: str | None = None
    spec: str = "base_spec.yaml"
    raises: type[Exception] | None = None
    says: tuple[str, ...] = ()
    quarantine: frozenset = frozenset()
    rejected_rows: tuple[int, ...] = ()
    ignored: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    never: tuple[str, ...] = ()


def q(*pairs: tuple[str, str]) -> frozenset:
    return frozenset(pairs)


#: What a row the reader could not parse breaks: every cell is empty, so every non-nullable column's not_null.
UNREADABLE = q(*[("not_null", c) for c in ("flight_id", "carrier", "origin", "month", "distance", "dep_delay",
                                           "arr_delay")])

CASES: dict[str, Case] = {
    "good": Case(csv="good.csv"),
    "missing_column": Case(
        csv="missing_column.csv", raises=ValidationFailed, says=("column_exists", "arr_delay")
    ),
    "wrong_type": Case(
        csv="wrong_type.csv",
        quarantine=q(("number", "distance"), ("number", "dep_delay")),
        rejected_rows=(9, 10),
        secrets=("abc", "1 000"),
    ),
    "nan_and_inf": Case(
        csv="nan_inf.csv",
        quarantine=q(("number", "arr_delay"), ("number", "distance"), ("number", "dep_delay")),
        rejected_rows=(9, 10),
        secrets=("nan", "Infinity"),
    ),
    "out_of_domain": Case(
        csv="out_of_domain.csv",
        quarantine=q(("in_domain", "carrier"), ("in_domain", "month")),
        rejected_rows=(9, 10),
        secrets=("ZZ", "13"),
    ),
    "out_of_bounds": Case(
        csv="out_of_bounds.csv",
        quarantine=q(("in_bounds", "distance"), ("in_bounds", "arr_delay")),
        rejected_rows=(9, 10),
        secrets=("98765", "-500"),
    ),
    "duplicate_id": Case(
        csv="duplicate_id.csv", quarantine=q(("unique", "flight_id")), rejected_rows=(9, 10), secrets=("F000009",)
    ),
    "empty_file": Case(csv="empty.csv", raises=IngestError, says=("empty", "0 bytes")),
    "header_only": Case(csv="header_only.csv", raises=ValidationFailed, says=("row_count",)),
    # a row that is not UTF-8 is a reader reject (issue 46.3): stored in its place with empty cells
    # (its file line and reason in raw."<table>__unreadable"), quarantined because its record id is null
    "non_utf8": Case(csv="non_utf8.csv", quarantine=UNREADABLE, rejected_rows=(10,), secrets=("caf",)),
    "extra_columns_error": Case(
        csv="extra_columns.csv", raises=ValidationFailed, says=("extra_columns", "passenger_name"), secrets=("Jane",)
    ),
    "extra_columns_ignore": Case(
        spec="extra_columns_ignore_spec.yaml",
        says=("ignored extra columns", "passenger_name"),
        ignored=("month", "air_time", "dep_delay", "arr_delay", "passenger_name"),
        secrets=("Jane",),
    ),
    "formula_cells": Case(
        csv="formula_cells.csv",
        quarantine=q(("id_pattern", "flight_id"), ("in_domain", "carrier")),
        rejected_rows=(9, 10),
        secrets=("HYPERLINK", "http://x"),
    ),
    "huge_numbers": Case(
        csv="huge_numbers.csv",
        # 1e400 overflows float64 (finite, in_bounds); 99999999999999999999 is 1e20 (in_bounds)
        quarantine=q(("finite", "distance"), ("in_bounds", "distance")),
        rejected_rows=(9, 10),
        secrets=("1e400", "99999999999999999999", "1e+20"),
    ),
    "null_cells": Case(
        csv="null_cells.csv",
        # air_time is nullable; dep_delay and arr_delay are not; 7.5 breaks integer: true
        quarantine=q(("not_null", "dep_delay"), ("not_null", "arr_delay"), ("integer", "arr_delay")),
        rejected_rows=(9, 10),
        secrets=("7.5",),
    ),
    # a row with more fields than the header: a reader reject, never a field dropped (issue 46.3)
    "ragged_row": Case(csv="ragged_row.csv", quarantine=UNREADABLE, rejected_rows=(9,), secrets=("EXTRA",)),
    "reserved_row_column": Case(csv="reserved_row_column.csv", raises=IngestError, says=("_row", "reserved")),
    "negative_epsilon": Case(spec="negative_epsilon_spec.yaml", raises=SpecError, says=("budget.epsilon",)),
    "unknown_spec_key": Case(
        spec="unknown_key_spec.yaml", raises=SpecError, says=("schema.numeric.distance.maximum", "unknown key")
    ),
    "malformed_yaml": Case(spec="malformed_spec.yaml", raises=SpecError, says=("not valid YAML",)),
    "replace_one_step_on_add_remove_budget": Case(
        spec="replace_one_step_add_remove_budget_spec.yaml", raises=SpecError,
        says=("steps.outlier_counts", "replace-one", "budget.neighbour: replace-one"),
    ),
    # a value missing from the domain quarantines its rows; the run goes on (the noisy gate decides, hole 8)
    "domain_missing_values": Case(
        spec="domain_missing_values_spec.yaml", quarantine=q(("in_domain", "origin")), rejected_rows=(2, 5, 8, 10),
        secrets=("LGA",),
    ),
}

ALLOWED = (SpecError, IngestError, ValidationFailed)


def _load(case: Case):
    if case.csv is None:
        return load_spec(CORPUS / case.spec)
    base = yaml.safe_load(BASE.read_text())
    dataset = {**base["dataset"], "source": {"kind": "csv", "path": case.csv}}
    return load_spec(CORPUS / case.spec, dataset=dataset)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_corpus_is_big_enough():
    assert len(CASES) >= 15
    files = {c.csv for c in CASES.values() if c.csv} | {c.spec for c in CASES.values()}
    for name in files:
        assert (CORPUS / name).exists(), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name: str, tmp_path: Path):
    case = CASES[name]
    input_files = sorted(p for p in CORPUS.iterdir() if p.is_file())
    before = {p.name: _sha(p) for p in input_files}
    outcome = None
    digests: list[str] = []
    error: Exception | None = None
    wh = None
    res = None
    try:
        spec = _load(case)
        wh = Warehouse(tmp_path / "w.duckdb")
        res = ingest(spec, wh, tmp_path)
        digests.append(raw_digest(wh, res.table))
        outcome = validate(load_raw(wh, res), spec)
        tables = store_outcome(wh, res, spec, outcome)
        digests.append(raw_digest(wh, res.table))
        enforce(outcome, spec)
    except ALLOWED as exc:  # anything else propagates and fails the test
        error = exc

    # input files are never modified (every corpus file, not only this case's)
    assert {p.name: _sha(p) for p in input_files} == before
    # raw is identical before and after validation
    if len(digests) == 2:
        assert digests[0] == digests[1]

    secrets = case.secrets
    if case.raises is not None:
        assert error is not None, f"{name}: expected {case.raises.__name__}, got success"
        assert type(error) is case.raises, f"{name}: expected {case.raises.__name__}, got {type(error).__name__}: {error}"
        msg = str(error)
        for s in case.says:
            assert s in msg, f"{name}: {s!r} not in message:\n{msg}"
        for s in secrets:
            assert s not in msg, f"{name}: cell value {s!r} leaked into the exception message"
        for s in case.never:
            assert s not in msg, f"{name}: {s!r} (where the private input breaks) is in the message:\n{msg}"
        return

    assert error is None, f"{name}: unexpected {type(error).__name__}: {error}"
    assert outcome is not None and wh is not None and res is not None
    got = {(r, c) for r, c in zip(outcome.quarantine["rule"], outcome.quarantine["column"])}
    assert got == set(case.quarantine)
    assert sorted(set(outcome.quarantine["_row"])) == list(case.rejected_rows)
    assert outcome.n_valid + outcome.quarantine["_row"].nunique() == outcome.n_rows
    assert sorted(outcome.ignored_columns) == sorted(case.ignored)
    text = outcome.summary_text()
    summary = json.dumps(outcome.summary())
    for s in case.says:
        assert s in text
    for s in secrets:
        assert s not in text and s not in summary, f"{name}: cell value {s!r} leaked into the summary"
    # the warehouse holds what the outcome says
    n_valid = wh.query(f"SELECT count(*) FROM {tables['validated']}")[0][0]
    n_q = wh.query(f"SELECT count(*) FROM {tables['quarantine']}")[0][0]
    assert (n_valid, n_q) == (outcome.n_valid, len(outcome.quarantine))
    assert wh.query("SELECT count(*) FROM internal.validation_results WHERE content_hash = ?", [res.content_hash])[0][0] == 1
