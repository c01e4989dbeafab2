"""The spec is loaded once per run (issue 49 §1), under prefect_test_harness.

The command line loads the spec before Prefect starts (to refuse a bad one at once) and hands it to the flow
run it starts (:func:`tasks.common.given_spec`); a flow run started otherwise (a deployment's) loads it once in
:func:`tasks.common.resolve`, which also chooses a series spec's period. Before, ``python -m
flows.release_pipeline`` loaded the spec three times before the first step (its own check, the period's
choice, the run's) and a flow run twice. Counted with every module's ``load_spec`` name replaced by a counting
wrapper, so a load from any module is seen.
"""
from __future__ import annotations

import sys

import pytest
import yaml
from owner_registration import register_spec
from tiny_ids import D1, ids_spec

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _count_loads(monkeypatch) -> dict[str, list[str]]:
    """Count the spec files read and the specs validated, on every path.

    ``load_spec`` is ``SpecFile(path).load()``, and the run's paths call :class:`~dpcore.release.spec.SpecFile`
    themselves, so the class's two methods are replaced: ``reads`` lists each file read, ``loads`` each whole
    spec validated (a ``load_spec`` from any module goes through both)."""
    from dpcore.release.spec import SpecFile

    calls: dict[str, list[str]] = {"reads": [], "loads": []}
    real_init, real_load = SpecFile.__init__, SpecFile.load

    def counting_init(self, path):
        calls["reads"].append(str(path))
        real_init(self, path)

    def counting_load(self, **overrides):
        calls["loads"].append(str(self.path))
        return real_load(self, **overrides)

    monkeypatch.setattr(SpecFile, "__init__", counting_init)
    monkeypatch.setattr(SpecFile, "load", counting_load)
    return calls


def test_a_run_from_the_command_line_and_a_flow_run_each_load_the_spec_once(dpr_home, tmp_path, monkeypatch, capsys):
    """The 40-record, one-step spec of tests/tiny_ids.py: ``main`` (what ``dpr run`` and scripts/demo.sh call),
    then a flow run of the same release id on its own (the stored release, returned without reading the data)."""
    from flows.release_pipeline import main, release_pipeline

    path = ids_spec(tmp_path / "ids")
    spec = yaml.safe_load(path.read_text())
    # the noisy counts of 40 rows may put the rejected fraction anywhere: the gate is not what is tested here
    spec["steps"]["validation"] = {"max_rejected_fraction": 1.0}
    path.write_text(yaml.safe_dump(spec))
    (path.parent / "input.csv").write_text(D1)
    register_spec(path)
    calls = _count_loads(monkeypatch)
    assert main(["--spec", str(path)]) == 0  # the command line: its check before Prefect, then the flow run
    assert "bundle    :" in capsys.readouterr().out
    assert calls == {"reads": [str(path)], "loads": [str(path)]}  # was three loads
    calls["reads"].clear(), calls["loads"].clear()
    out = release_pipeline(spec_path=str(path))  # a flow run on its own (a deployment's): the stored release
    assert out["stored_release"]
    assert (len(calls["reads"]), len(calls["loads"])) == (1, 1)  # was two (the period's choice, then the run's)
    calls["reads"].clear(), calls["loads"].clear()
    from click.testing import CliRunner
    from dpr.main import cli

    # `dpr run --release-id` of that release: its stored release, from the ledger (was two loads: without the id to
    # see whether the spec is a series, then with it)
    res = CliRunner().invoke(cli, ["run", str(path), "--release-id", "ids-r1"])
    assert res.exit_code == 0, res.output
    assert (len(calls["reads"]), len(calls["loads"])) == (1, 1), calls


def test_a_deployment_run_of_a_series_spec_without_a_period_reads_and_validates_the_spec_once(tmp_path, monkeypatch):
    """A deployment's run of a series spec is given no period: its schedule chooses one from the series section
    (:func:`tasks.series.pick_period`), then the whole spec is validated once, for that period (was two loads:
    the spec read as its first period to learn the series, then read again for the chosen one)."""
    from datetime import datetime, timezone

    from prefect import flow

    import tasks.series
    from tasks.common import resolve

    folder = tmp_path / "series"
    path = ids_spec(folder)
    spec = yaml.safe_load(path.read_text())
    spec["release_id"] = "ids-{period}"
    spec["dataset"]["source"]["path"] = "input-{period}.csv"
    spec["series"] = {"period": "monthly", "first": "2024-01"}
    path.write_text(yaml.safe_dump(spec))
    (folder / "input-2024-03.csv").write_text(D1)
    monkeypatch.setenv("DPR_SPECS_DIR", str(folder))
    # a deployment's run scheduled on 2024-04-02: the last month that ended before it is 2024-03
    monkeypatch.setattr(tasks.series, "scheduled_start",
                        lambda: (datetime(2024, 4, 2, 6, tzinfo=timezone.utc), True))
    calls = _count_loads(monkeypatch)

    @flow
    def resolve_only(spec_path: str):
        loaded, _ = resolve(spec_path, None, None, choose_period=tasks.series.pick_period)
        return loaded.release_id, loaded.period

    assert resolve_only(str(path)) == ("ids-2024-03", "2024-03")
    assert (len(calls["reads"]), len(calls["loads"])) == (1, 1), calls
