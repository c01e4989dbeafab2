"""One BLAS thread while row-wise numerical work runs: a process-wide, reference-counted limit.

Why (issue 29, goal 3; BENCHMARKS "detect_blas"): the detector's passes over
chunks of rows make many small BLAS calls (``D^T W D``, ``Z^T W y``, dot
products over ~10^5 rows). Multi-threaded OpenBLAS wakes its second thread for
each; when the two templates are fitted at once on this 2-core machine (the
flow's thread pool), or anything else runs, that thread is often not scheduled
and every call waits for a time slice. Measured at 10x: the two fits in 2
threads took 17.0 s with the default threads and 11.0 s with one on a quiet
machine, 90.8 s and 24.5 s at a load of 3-7; one template's E-step passes
alone, at a load of 3-4, 17.0 s and 7.1 s. The
same limit keeps the q x q solves fast (``mixture_em._solve``) and the
neighbour counts' thread pool from oversubscribing (``dpcore.mechanisms.neighbors``).

One thread also fixes the summation order of OpenBLAS's dot products, so a
fit no longer depends, in its last bits, on how many threads BLAS happened to
use.

``threadpoolctl`` sets the limit for the whole process (every thread), so
concurrent users share one limit: the first to enter sets it, the last to
leave restores the libraries' original thread counts. (A plain
``threadpool_limits`` per call would let one fit's exit restore two threads
while the other fit still runs.)
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .shared_scope import SharedScope

_LIMITER = None


def _controller():
    """A ``threadpoolctl.ThreadpoolController`` of the libraries loaded now (None without threadpoolctl).

    Built afresh at each outermost entry (about 0.6 ms here), so a BLAS loaded
    since the last use (scipy's, imported lazily) is limited too.
    """
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        return None
    return ThreadpoolController()


def _limit() -> None:
    global _LIMITER
    ctl = _controller()
    if ctl:
        with _openblas_control():
            _LIMITER = ctl.limit(limits=1, user_api="blas")


def _restore() -> None:
    global _LIMITER
    if _LIMITER is not None:
        with _openblas_control():
            _LIMITER.restore_original_limits()
        _LIMITER = None


#: ``with one_blas_thread():`` runs the block with every loaded BLAS library limited to one thread
#: (re-entrant, thread-safe). Nested and concurrent uses share one limit, set by the first to enter and
#: restored by the last to leave (:class:`dpcore.runtime.shared_scope.SharedScope`). Without ``threadpoolctl`` it
#: does nothing. A library loaded while the limit holds keeps its own thread count until the next
#: outermost entry.
one_blas_thread = SharedScope(_limit, _restore)


@contextlib.contextmanager
def _openblas_control() -> Iterator[None]:
    """Let this thread's call set OpenBLAS's process-wide thread count, and leave the control free after.

    threadpoolctl lets only one "controlling" thread change OpenBLAS's limit
    (the first to set one, until its ``with threadpool_limits`` blocks end);
    the calls of any other thread silently do nothing. A fit runs in a worker
    thread of the flow, and the last fit to finish (the one that restores)
    may not be the one that set the limit, so the control is released
    before and after each change (:meth:`threadpoolctl.OpenBLASController.clear_controlling_thread`).
    """
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:  # pragma: no cover - an older threadpoolctl has no controlling thread
        yield
        return
    OpenBLASController.clear_controlling_thread(force=True)
    try:
        yield
    finally:
        OpenBLASController.clear_controlling_thread(force=True)
