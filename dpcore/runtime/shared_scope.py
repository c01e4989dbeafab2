"""A block that many threads may hold at once, set up by the first to enter and undone by the last to leave.

For process-wide switches that concurrent users share (:mod:`dpcore.runtime.blas_threads`'s BLAS limit,
:mod:`dpcore.validation.config_memo`'s memo): a per-use set-and-restore would let one user's exit
undo the switch while another still relies on it.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class SharedScope:
    """``with scope():`` runs ``begin()`` when the first holder enters and ``end()`` when the last leaves.

    Re-entrant and thread-safe; ``begin`` and ``end`` run under the scope's lock. If ``begin`` raises,
    nobody holds the scope.
    """

    def __init__(self, begin: Callable[[], None], end: Callable[[], None]) -> None:
        self._begin, self._end = begin, end
        self._lock = threading.Lock()
        self._users = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._begin()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._end()
