"""A deterministic fault-injection hook for the crash tests (issue 33 §3).

Named points sit at every task boundary (``before:<task>``, ``after:<task>``,
from :func:`tasks.common.private_task`) and inside the charging path of every
step (``charged:<step>``: after the ledger charge, before the noise is
drawn; ``computed:<step>``: after the answer is computed, before it is
stored). Setting ``DPR_FAULT_AT`` to one point's name makes the process die
there:

* ``DPR_FAULT_MODE=kill`` (default): ``SIGKILL`` to the own process, as an
  operator's ``kill -9`` or the OOM killer would (no handler runs);
* ``DPR_FAULT_MODE=raise``: :class:`InjectedFault` is raised (for in-process
  tests; handlers run, as after any exception).

Unset (always, outside tests), every point is a dictionary lookup and nothing
else. ``DPR_FAULT_LOG=<file>`` appends each point reached, one per line, so a
test can list the points a run passes through.

In a run of a Prefect deployment every point is inert, whatever the
environment says: the flows' preamble (:func:`tasks.common.resolve`) calls
:func:`make_inert` (and refuses the run when a ``DPR_FAULT_*`` switch is set),
so no operator or worker setting can make a deployed run die or append to a
file here.
"""
from __future__ import annotations

import os
import signal

__all__ = ["InjectedFault", "fault_point", "make_inert"]

#: Environment variables read by :func:`fault_point` (test suite only).
FAULT_SWITCHES = ("DPR_FAULT_AT", "DPR_FAULT_MODE", "DPR_FAULT_LOG")

_inert = False


class InjectedFault(RuntimeError):
    """Raised at the point named by ``DPR_FAULT_AT`` when ``DPR_FAULT_MODE=raise`` (tests only)."""


def make_inert() -> None:
    """Turn every fault point of this process into a no-op for good (a run of a deployment)."""
    global _inert
    _inert = True


def fault_point(name: str) -> None:
    """Die here if ``DPR_FAULT_AT`` names this point (see the module docstring); otherwise do nothing.

    Does nothing at all after :func:`make_inert` (runs of a deployment).
    """
    if _inert:
        return
    log = os.environ.get("DPR_FAULT_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(name + "\n")
    if os.environ.get("DPR_FAULT_AT") != name:
        return
    if os.environ.get("DPR_FAULT_MODE", "kill") == "raise":
        raise InjectedFault(f"injected fault at {name}")
    os.kill(os.getpid(), signal.SIGKILL)
