"""Refusals point the data owner to `dpr validation show`, not to a warehouse table (issue 48, item 5)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from dpcore.release.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_the_rejected_fraction_gate_names_the_command():
    from dpcore.steps.record_counts import rejected_fraction_gate

    spec = load_spec(ROOT / "specs" / "demo.yaml")
    counts = SimpleNamespace(tables={"counts": pd.DataFrame({"cell": ["input_rows", "accepted_rows"],
                                                              "noisy_count": [100, 10]})})
    message = rejected_fraction_gate(spec, counts)
    assert "`dpr validation show --spec SPEC`" in message and "internal.validation_results" not in message
