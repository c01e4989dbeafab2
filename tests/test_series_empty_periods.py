"""An empty period of a series (issue 46, item 5): refused for free by default; with
``series.empty_periods: release`` released like any other (charged, noisy counts), under prefect_test_harness.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.release.spec import SpecError, load_spec
from dpcore.storage.warehouse import Warehouse
from series_fixtures import make_series_spec

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]


def _empty_march(path: Path, mode: str | None) -> None:
    """March's input keeps its header and loses every row; ``mode`` is series.empty_periods (None: unset)."""
    data = path.parent / "data" / "flights_2013-03.csv"
    header = data.read_text().splitlines()[0]
    data.write_text(header + "\n")
    spec = yaml.safe_load(path.read_text())
    spec["budget"].pop("series_cap", None)
    if mode is not None:
        spec["series"]["empty_periods"] = mode
    # the rejected-fraction gate reads the noisy counts, which on zero rows are noise alone: it would stop
    # (charged) at random, as docs/series.md says ("Empty periods"); the test keeps it open so the outcome is the release
    spec["steps"].setdefault("validation", {})["max_rejected_fraction"] = 1.0
    path.write_text(yaml.safe_dump(spec))


def test_an_empty_period_is_refused_for_free_by_default(tmp_path, small_spec_path, small_flights_csv, dpr_home,
                                                         register_dataset):
    from flows.release_pipeline import release_pipeline

    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv)
    _empty_march(path, None)
    register_dataset(path)
    with pytest.raises(Exception, match="row_count") as info:
        release_pipeline(spec_path=str(path), period="2013-03")
    assert "dpr validation show" in str(info.value) and "internal.validation_results" not in str(info.value)
    led = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    assert led.status("nycflights13").spent.epsilon == 0


def test_an_empty_period_is_released_when_the_owner_chooses(tmp_path, small_spec_path, small_flights_csv, dpr_home,
                                                             register_dataset):
    from flows.release_pipeline import release_pipeline

    path = make_series_spec(tmp_path, small_spec_path, small_flights_csv)
    _empty_march(path, "release")
    register_dataset(path)
    out = release_pipeline(spec_path=str(path), period="2013-03")
    counts = pd.read_csv(Path(out["bundle"]) / "tables" / "record_counts__counts.csv").set_index("cell")
    assert set(counts.index) >= {"input_rows", "accepted_rows"}
    assert (counts["noisy_count"] >= 0).all()  # noisy counts near 0, clamped at 0
    led = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    assert led.status("nycflights13").spent.epsilon > 0  # charged like any other period
