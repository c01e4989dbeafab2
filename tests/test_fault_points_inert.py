"""Issue 46.1: after the deployment-run preamble, every fault point of the process is inert.

:func:`tasks.common.refuse_test_switches_in_deployment_runs` refuses a run of a deployment whose
environment sets a ``DPR_FAULT_*`` switch, and calls :func:`dpcore.runtime.fault_injection.make_inert` so that a
switch set later in the process (by any code the run reaches) changes nothing either: no fault raised or
killed, no line appended to a file. Cheap: the preamble runs in this process with the run's deployment id
and the server's (empty) job variables given by stubs, then real fault points are reached.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import dpcore.runtime.fault_injection as fi
import dpcore.steps.common
import tasks.common


class _Client:
    """What the preamble reads from the Prefect API: the deployment's job variables (none)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def read_deployment(self, deployment_id):
        return SimpleNamespace(job_variables={})


@pytest.fixture
def deployment_run(monkeypatch):
    """The preamble of a run of deployment ``dep-1``, in this process; the process-wide switches given back after."""
    import prefect.client.orchestration

    monkeypatch.setattr(fi, "_inert", False)
    monkeypatch.setattr(dpcore.steps.common, "_test_noise_forbidden", False)
    for name in fi.FAULT_SWITCHES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(tasks.common, "deployment_of_this_run", lambda: "dep-1")
    monkeypatch.setattr(prefect.client.orchestration, "get_client", lambda **kw: _Client())
    return tasks.common.refuse_test_switches_in_deployment_runs


def test_fault_points_reached_after_the_deployment_preamble_are_inert(deployment_run, tmp_path, monkeypatch):
    deployment_run()  # no switch set: the run goes on
    log = tmp_path / "faults.log"
    monkeypatch.setenv("DPR_FAULT_AT", "charged:aiq")
    monkeypatch.setenv("DPR_FAULT_MODE", "raise")
    monkeypatch.setenv("DPR_FAULT_LOG", str(log))
    for point in ("before:aiq", "charged:aiq", "computed:aiq", "after:aiq"):
        fi.fault_point(point)  # would raise InjectedFault at charged:aiq, and log every point, if not inert
    assert not log.exists()


def test_outside_a_deployment_the_same_switches_still_work(tmp_path, monkeypatch):
    """The control: the same switches make the same point raise and log in a run that is not a deployment's."""
    monkeypatch.setattr(fi, "_inert", False)
    monkeypatch.setattr(tasks.common, "deployment_of_this_run", lambda: None)
    tasks.common.refuse_test_switches_in_deployment_runs()
    log = tmp_path / "faults.log"
    monkeypatch.setenv("DPR_FAULT_AT", "charged:aiq")
    monkeypatch.setenv("DPR_FAULT_MODE", "raise")
    monkeypatch.setenv("DPR_FAULT_LOG", str(log))
    with pytest.raises(fi.InjectedFault):
        fi.fault_point("charged:aiq")
    assert log.read_text() == "charged:aiq\n"


def test_a_fault_switch_set_before_the_preamble_refuses_the_run(deployment_run, tmp_path, monkeypatch):
    log = tmp_path / "faults.log"
    monkeypatch.setenv("DPR_FAULT_LOG", str(log))
    with pytest.raises(tasks.common.DeploymentRunRefusedError, match="^DPR_FAULT_LOG set in a run of a deployment"):
        deployment_run()
    fi.fault_point("before:aiq")  # inert already: the refusal came after make_inert
    assert not log.exists()
