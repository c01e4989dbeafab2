"""Give the C heap's free pages back to the system after a large transient working set (issue 29, goal 4).

glibc's ``malloc`` keeps the memory of freed blocks for reuse. A block above
its mmap threshold goes back to the system when it is freed, but the threshold
rises (up to 32 MiB) to the size of the largest such block freed, and every
thread that allocates gets an arena of its own; so the arrays of tens of MiB
that a stage builds and drops (numpy, pandas, Arrow through the system
allocator: :mod:`dpcore`) end up as free holes in several arenas that stay
resident, and the process keeps its high-water mark through the next phase.
``malloc_trim(0)`` hands the free pages of every arena back (``madvise``; the
blocks in use do not move, nothing is copied) in about a millisecond.

Measured (the detector's two concurrent template fits on the 10x table,
``DPR_MEMORY_LIMIT=512MiB``, 2026-11-27): the robust start works on a start
sample of 500,000 rows (61-65 MiB per dense array for the widest template) and
leaves 100-180 MiB of free but resident heap behind it; trimmed once after the
start sample is dropped, the fits' resident memory during the EM passes went
from 533-557 to 398-432 MiB and their peak from 668-697 to 597-606 MiB, at the
same CPU time (:meth:`dpcore.detect.robust_em.RobustRegressionDetector.fit_chunks`).

Trimming never changes a result (it only returns pages of free blocks), so it
is called where a phase has just dropped a large working set, not after every
allocation: a trimmed page is zero-filled again when it is reused.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading

_lock = threading.Lock()
_trim = None  # the C function, False when this platform's C library has none, None before the first call


def _malloc_trim():
    """glibc's ``malloc_trim`` (cached), or False where the C library has none (musl, macOS, Windows)."""
    global _trim
    with _lock:
        if _trim is None:
            try:
                fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
                fn.argtypes = [ctypes.c_size_t]
                fn.restype = ctypes.c_int
                _trim = fn
            except (OSError, AttributeError):
                _trim = False
        return _trim


def trim_heap() -> bool:
    """Return the free pages of every ``malloc`` arena of this process to the system (glibc ``malloc_trim(0)``).

    A no-op where the C library has no ``malloc_trim``. Safe from any thread
    at any time: glibc takes each arena's lock in turn; blocks in use are not
    touched.

    Returns
    -------
    bool
        Whether glibc's ``malloc_trim`` ran (False where there is none). Its
        own result (whether any memory was returned) is not reported.
    """
    fn = _malloc_trim()
    if not fn:
        return False
    fn(0)
    return True
