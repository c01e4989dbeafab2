"""A mapper whose chunks run on one process-wide pool of threads, one per core (issue 29, goals 1 and 3).

The detect step fits its templates concurrently, one task thread each, and
each fit's EM makes tens of passes over the exported chunks
(:func:`dpcore.detect.em_passes.chunk_pass`). With :func:`~dpcore.runtime.chunks.serial_map`
a fit's chunks run on its own task thread, so once the fastest template is
done its core idles while the slowest finishes alone (at 100x the demo,
about 15 s of one idle core; BENCHMARKS "Scale"). :func:`pooled_map` sends
every chunk of every caller to one shared pool of ``os.cpu_count()``
threads: while several fits run, their chunks share the cores as before;
when one is left, its chunks use them all. numpy releases the GIL in the
passes' array work, and each pass holds one BLAS thread
(:mod:`dpcore.runtime.blas_threads`).

Same numbers as :func:`~dpcore.runtime.chunks.serial_map`: the results come back in
item order and the caller combines them in that order, so sums over chunks
are added in the same order. At most :func:`pool_size` chunks are in work at
once in the whole process, one per thread: the cores this process may run
on, never more than :data:`MAX_THREADS` (each chunk is sized to
:data:`dpcore.runtime.chunks.CHUNK_SHARE` of the memory cap, so the pool holds at
most ``MAX_THREADS / 32`` of it, whatever the machine's core count). On
this 2-core machine that is 2, what the two concurrent fits held before.
A call from one of the pool's own threads runs its items there, in order
(a pool thread never waits on the pool: no deadlock).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["MAX_THREADS", "pooled_map", "pool_size"]

#: The pool's threads never exceed this: each holds one chunk in memory (module docstring).
MAX_THREADS = 4

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_IN_POOL = threading.local()


def pool_size() -> int:
    """int: the pool's threads: one per core this process may run on (its CPU affinity), 1 to :data:`MAX_THREADS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


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

    A mapper (``mapper(fn, items)``) as :func:`dpcore.runtime.chunks.serial_map`.

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
