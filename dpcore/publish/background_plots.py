"""Draw the count-of-counts pictures in a child process while the release goes on (issue 29, goal 5).

The pictures (:func:`dpcore.publish.plots.coco_plots`) are post-processing of released histograms; drawn in the flow
process they took about 2.5 s of a demo release (17 PNG files), during which nothing else ran. Here:

* :func:`start` launches ``python -m dpcore.publish.background_plots``, which imports matplotlib and then waits for one
  job on its standard input (started before the values exist, its imports overlap earlier steps); the release
  starts it only when :func:`core_free` (a busy machine has no core to give it) and draws in its own process
  otherwise;
* :func:`submit` hands it the released histograms (only the nodes drawn) and returns the files' paths at once,
  the same paths :func:`~dpcore.publish.plots.coco_plots` returns;
* :func:`wait_for` (the bundle calls it before it copies a picture) waits for the job drawing those paths and
  raises :class:`PictureError` when it failed or a file is missing, the child's exception chained as its cause
  (a full disk in the child is still an environment fault, :mod:`dpcore.runtime.faults`).

The child draws with the same function, so the files are byte-identical to a drawing in the flow process
(tests/test_background_plots.py). It writes each file under a temporary name and renames it, files 0600 and
folders 0700 (:func:`~dpcore.storage.private_files.private_umask`, as the flow process did), so a killed drawing never
leaves a half-written picture under its name. It needs no signal to end with its parent: a parent that exits
or is killed closes the child's standard input (:func:`main`). (``PR_SET_PDEATHSIG``, as the temporary Prefect
server uses, would fire when the *thread* that started the child ends: a task's thread.)
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

__all__ = ["PictureError", "core_free", "start", "submit", "wait_for", "waiting"]


class PictureError(RuntimeError):
    """The count-of-counts pictures were not drawn (the drawing process failed or left a file out)."""


class _Job:
    """One drawing process and the files it draws."""

    def __init__(self, proc: subprocess.Popen, paths: list[Path]) -> None:
        self.proc, self.paths = proc, paths
        self.error: BaseException | None = None
        self.done = False

    def wait(self) -> None:
        """Block until the drawing ended; raise :class:`PictureError` if it failed."""
        if not self.done:
            report = self.proc.stdout.read()
            code = self.proc.wait()
            self.proc.stdout.close()
            self.done = True
            self.error = _failure(code, report, self.paths)
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Stop the drawing (a newer job draws the same files)."""
        if not self.done:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.done = True
            self.error = PictureError("the drawing of these pictures was replaced by a later one")


_LOCK = threading.Lock()
_idle: subprocess.Popen | None = None
_jobs: dict[Path, _Job] = {}


def _spawn() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def core_free() -> bool:
    """Whether a core is free for a drawing process: the 1-minute load average below the number of cores.

    On a busy machine the child only competes with the release for the same cores and pays its own start
    (Python, numpy and matplotlib: 0.65-0.75 s of CPU, 3 starts at a load of 7.5): measured at a load of
    6-11 on 2 cores, coco to the end of the bundle took longer with it (median of 4 runs 8.8 s against 6.2 s
    drawn in the flow process).
    """
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1)
    except OSError:  # no load average on this system
        return False


def start() -> None:
    """Start a drawing process now (its imports run while the caller goes on), unless one is waiting already."""
    global _idle
    with _LOCK:
        if _idle is None or _idle.poll() is not None:
            _idle = _spawn()


def waiting() -> bool:
    """Whether a started drawing process waits for its job (:func:`start`)."""
    with _LOCK:
        return _idle is not None and _idle.poll() is None


def submit(est: dict, hierarchy, out_dir: Path, K: int, bins: int = 40, accuracy: dict | None = None) -> list[Path]:
    """Draw :func:`~dpcore.publish.plots.coco_plots` ``(est, hierarchy, out_dir, K, bins, accuracy)`` in the drawing process.

    Parameters
    ----------
    est : dict of str to array
        Released histograms per node id (only the drawn nodes are sent).
    hierarchy : Hierarchy
    out_dir : Path
    K : int
    bins : int
    accuracy : dict, optional
        The stated accuracy the pictures print (:func:`~dpcore.publish.plots.coco_accuracy_labels`).

    Returns
    -------
    list of Path
        The files the drawing writes (overview first), before they exist: :func:`wait_for` them.
    """
    from .plots import coco_plot_paths, drawn_nodes

    global _idle
    paths = coco_plot_paths(hierarchy, out_dir)
    payload = pickle.dumps(({n: est[n] for n in drawn_nodes(hierarchy)}, hierarchy, out_dir, K, bins, accuracy))
    with _LOCK:
        for old in {id(j): j for p in paths if (j := _jobs.get(p)) is not None}.values():
            old.cancel()
        proc = _idle if _idle is not None and _idle.poll() is None else _spawn()
        _idle = None
        job = _Job(proc, paths)
        _jobs.update(dict.fromkeys(paths, job))
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:  # the child died first: wait_for reports how
        pass
    return paths


def wait_for(paths: list[Path]) -> None:
    """Wait for the drawings of ``paths`` still running (paths drawn otherwise are left alone).

    Raises
    ------
    PictureError
        A drawing failed (its exception chained), was killed, or did not write one of its files.
    """
    with _LOCK:
        jobs = {id(j): j for p in paths if (j := _jobs.get(Path(p))) is not None}
    for job in jobs.values():
        job.wait()
        with _LOCK:
            for p in job.paths:
                if _jobs.get(p) is job:
                    del _jobs[p]


def _failure(code: int, report: bytes, paths: list[Path]) -> PictureError | None:
    """The error of a finished drawing process (None when it wrote every file)."""
    head = "the count-of-counts pictures were not drawn: the drawing process (dpcore.publish.background_plots)"
    if code == 0:
        missing = [str(p) for p in paths if not p.exists()]
        return PictureError(f"{head} ended without writing {', '.join(missing)}") if missing else None
    cause: BaseException | None = None
    if report:
        try:
            cause, text = pickle.loads(report)
        except Exception:  # noqa: BLE001  (an unreadable report: say so)
            cause, text = None, "its error report could not be read"
        if not isinstance(cause, BaseException):  # an exception that did not pickle: its traceback's text
            cause = RuntimeError(text)
            error = PictureError(f"{head} failed: {text.strip().splitlines()[-1]}")
        else:
            error = PictureError(f"{head} failed: {type(cause).__name__}: {cause}")
    else:
        how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        error = PictureError(f"{head} {how} (its messages, if any, are above)")
    error.__cause__ = cause
    return error


@atexit.register
def _shutdown() -> None:
    """At exit: a waiting drawing process ends (end of file), an unfinished job is killed (its files, if any,
    are whole: each is renamed into place when written)."""
    with _LOCK:
        procs = [j.proc for j in _jobs.values() if not j.done] + ([_idle] if _idle is not None else [])
    for proc in procs:
        if proc.poll() is None:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
            else:
                proc.kill()


def main() -> int:
    """The drawing process: import matplotlib, read one job from standard input, draw it, report a failure.

    A parent that dies (even by SIGKILL) closes the standard input: a waiting process ends at once, a drawing
    one when its job is done (its files are whole: each is renamed into place).
    """
    report = os.fdopen(os.dup(1), "wb")  # the failure report; anything printed goes to standard error
    os.dup2(2, 1)
    from .plots import coco_plots, pyplot
    from dpcore.storage.private_files import private_umask

    pyplot()
    job = sys.stdin.buffer.read()
    if not job:
        return 0  # never given a job: the parent is done
    try:
        est, hierarchy, out_dir, K, bins, accuracy = pickle.loads(job)
        with private_umask():  # the owner's private data folder (0700 folders, 0600 files); the bundle's copy is public
            coco_plots(est, hierarchy, out_dir, K, bins, accuracy)
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, which raises it)
        text = traceback.format_exc()
        try:
            report.write(pickle.dumps((exc, text)))
        except Exception:  # noqa: BLE001  (an exception that does not pickle: its text only)
            report.write(pickle.dumps((None, text)))
        report.close()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
