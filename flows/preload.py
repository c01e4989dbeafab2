"""Import, on a background thread, the libraries that a release's later steps need (issue 29, goal 5).

A demo release spends about 7 s importing great-expectations (validation, about 5 s), pint (the rules
step's units, about 1 s) and matplotlib (the count-of-counts pictures, about 1 s). Imported one after the
other before the flow starts, they were the longest part of its start: the temporary API server
(:mod:`flows.prefect_api`) is ready before they are. On a thread, they load while the main thread waits for
the server, creates the flow run (HTTP round trips) and ingests (DuckDB): work that releases the GIL. A
step that needs a module before the thread has loaded it waits for Python's import lock of that module and
then finds it loaded; nothing is imported twice.

Under a small memory cap (:attr:`dpcore.runtime.chunks.MemoryBudget.works_ahead` false: below 1 GiB) nothing is
loaded ahead: great-expectations runs in validation's child process then
(:attr:`~dpcore.runtime.chunks.MemoryBudget.validates_in_child`), and pint and matplotlib are imported by the steps
that need them, so they are not held through validation and the detector's fits (issue 29, goal 4).

A failed import is not reported here: the step that needs the module imports it again and fails with its
own message. At exit the thread is joined, so the interpreter never shuts down inside an import.
"""
from __future__ import annotations

import atexit
import importlib
import threading
from collections.abc import Callable


def _pyplot() -> None:
    from dpcore.publish.plots import pyplot

    pyplot()  # matplotlib.pyplot on the Agg backend, as the plots load it


#: In the order the steps need them: validation, the rules step's units, the count-of-counts plots.
LOADS: tuple[Callable[[], object], ...] = (
    lambda: importlib.import_module("dpcore.validation.suite"),
    lambda: importlib.import_module("dpcore.explain.rules"),
    _pyplot,
)

_thread: threading.Thread | None = None


def _load_all(loads: tuple[Callable[[], object], ...]) -> None:
    for load in loads:
        try:
            load()
        except Exception:  # noqa: BLE001  (the step that needs it imports it again and reports the error)
            return


def start_preload(loads: tuple[Callable[[], object], ...] | None = None) -> None:
    """Start ``loads`` (imports) on a daemon thread, in order (once per process; later calls do nothing).

    ``loads`` defaults to :data:`LOADS`, none under a small memory cap
    (:attr:`dpcore.runtime.chunks.MemoryBudget.works_ahead`).
    """
    global _thread
    if _thread is not None:
        return
    if loads is None:
        from dpcore.runtime.chunks import MemoryBudget

        loads = LOADS if MemoryBudget.from_env().works_ahead else ()
    _thread = threading.Thread(target=_load_all, args=(loads,), name="dpr-preload", daemon=True)
    _thread.start()
    atexit.register(wait_for_preload)


def wait_for_preload(timeout: float | None = 120.0) -> None:
    """Wait until the background imports are done (at most ``timeout`` seconds)."""
    if _thread is not None:
        _thread.join(timeout)
