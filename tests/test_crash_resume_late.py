"""A crash never loses a release, second half of the fault points (issue 33 §3; see tests/test_crash_resume.py).

A module of its own so that the two halves of the chain run on the two test workers at once.
"""
from __future__ import annotations

import pytest

from test_crash_resume import crash_spec, run_chain  # noqa: F401  (crash_spec: the fixture)

pytestmark = [pytest.mark.usefixtures("prefect_harness"), pytest.mark.unregistered]  # registers its own cap


@pytest.mark.timeout(1800)
def test_a_release_stopped_at_every_late_point_in_turn_completes_within_its_plan(dpr_home, crash_spec, tmp_path,
                                                                                monkeypatch):
    """The second half of the fault points (the middle of the steps to the bundle), the first stop on a fresh
    release id."""
    run_chain(crash_spec, tmp_path, monkeypatch, part=1)
