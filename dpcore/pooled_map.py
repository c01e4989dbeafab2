"""A mapper whose chunks run on one process-wide pool of threads, one per core (issue 29, goals 1 and 3).

The detect step fits its templates concurrently, one task thread each, and
each fit's EM makes tens of passes over the exported chunks
(:func:`dpcore.detect.em_passes.chunk_pass`). With :func:`~dpcore.chunks.serial_map`
a fit's chunks run on its own task thread, so once the fastest template is
done its core idles while the slowest finishes alone (at 100x the demo,
about 15 s of one idle core; BENCHMARKS "Scale"). :func:`pooled_map` sends
every chunk of every caller to one shared pool of ``os.cpu_count()``
threads: while several fits run, their chunks share the cores as before;
when one is left, its chunks use them all. numpy releases the GIL in the
passes' array work, and each pass holds one BLAS thread
(:mod:`dpcore.blas_threads`).

Same numbers as :func:`~dpcore.chunks.serial_map`: the results come back in
item order and the caller combines them in that order, so sums over chunks
are added in the same order. At most ``os.cpu_count()`` chunks are in work
at once in the whole process (the pool's size), which is what the detect
step's concurrent fits held before (one chunk per fit, one fit per core).
A call from one of the pool's own threads runs its items there, in order
(a pool thread never waits on the pool: no deadlock).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["pooled_map", "pool_size"]

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_IN_POOL = threading.local()


def pool_size() -> int:
    """int: the pool's threads, one per core (``os.cpu_count()``, at least 1)."""
    return max(1, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="dpr-chunks",
                                       initializer=_mark_pool_thread)
        return _POOL


def _mark_pool_thread() -> None:
    _IN_POOL.active = True


def pooled_map(fn, items) -> list:
    """``[fn(x) for x in items]`` with the items run on the shared pool; results in item order.

    A mapper (``mapper(fn, items)``) as :func:`dpcore.chunks.serial_map`.

    Parameters
    ----------
    fn : callable
        Called once per item, on one of the pool's threads (thread-safe).
    items : iterable

    Returns
    -------
    list
        ``fn(item)`` for each item, in item order.

    Raises
    ------
    Exception
        The first exception in item order (the items not started yet are cancelled).
    """
    items = list(items)
    if len(items) <= 1 or getattr(_IN_POOL, "active", False):
        return [fn(x) for x in items]
    pool = _pool()
    futures = [pool.submit(fn, x) for x in items]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise
