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


def _count_loads(monkeypatch) -> list[str]:
    """Replace ``load_spec`` wherever it is bound (``dpcore.release.spec`` and every importer); the list of loaded paths."""
    import dpcore.release.spec
    import dpr.run_cmd  # noqa: F401  (imported first, so that their bound name is replaced too)
    import flows.release_pipeline  # noqa: F401
    import tasks.common  # noqa: F401
    import tasks.series  # noqa: F401

    real, calls = dpcore.release.spec.load_spec, []

    def counting(path, **overrides):
        calls.append(str(path))
        return real(path, **overrides)

    for mod in list(sys.modules.values()):
        names = getattr(mod, "__dict__", None)  # a module's own names (no lazy module is loaded by looking)
        if isinstance(names, dict) and names.get("load_spec") is real:
            monkeypatch.setattr(mod, "load_spec", counting)
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
    assert calls == [str(path)]  # was three loads
    calls.clear()
    out = release_pipeline(spec_path=str(path))  # a flow run on its own (a deployment's): the stored release
    assert out["stored_release"]
    assert len(calls) == 1  # was two (the period's choice, then the run's)
