"""Each expectation's configuration built once per suite run (issue 29, goal 2).

great-expectations' ``Expectation.configuration`` is a property that rebuilds an
``ExpectationConfiguration`` from the expectation's pydantic fields on every
read (``self.dict(exclude_defaults=True)``, a deep copy of every argument).
A suite run reads it thousands of times (4,742 reads for the demo's suite,
in ``get_validation_dependencies``, ``_get_success_kwargs``,
``metrics_validate``...), and each read of a domain rule copies its value
set (the 4,043 tail numbers): about 1 s of every validation, whatever the
number of rows. Within :func:`memoised_configurations`, the first read of an
expectation builds its configuration as great-expectations does; later reads
return a copy of it whose ``kwargs`` dict is new (a caller that replaces a
key changes only its own copy) and whose argument values are shared (no
caller changes a value set in place). The expectations of a suite run are
not changed while it runs (their configurations are read, never set), so
every read returns what great-expectations would have built.

Outside the block the property is great-expectations' own. Nested and
concurrent blocks share one memo, kept until the last one ends (so an id is
never reused for another expectation while it holds).
"""
from __future__ import annotations

import copy
import threading

from great_expectations.expectations.expectation import Expectation

from ..shared_scope import SharedScope

_LOCK = threading.Lock()  # the memo's writes
_ORIGINAL = Expectation.__dict__["configuration"]
#: id(expectation) -> (the expectation, kept alive while the memo holds; its configuration)
_MEMO: dict[int, tuple[object, object]] = {}


def _memoised(self):
    hit = _MEMO.get(id(self))
    if hit is None or hit[0] is not self:
        cfg = _ORIGINAL.fget(self)
        with _LOCK:
            _MEMO[id(self)] = (self, cfg)
        hit = (self, cfg)
    out = copy.copy(hit[1])
    out._kwargs = dict(hit[1]._kwargs)
    return out


def _install() -> None:
    Expectation.configuration = property(_memoised, doc=_ORIGINAL.__doc__)


def _uninstall() -> None:
    Expectation.configuration = _ORIGINAL
    with _LOCK:
        _MEMO.clear()


#: ``with memoised_configurations():`` -- within the block, ``Expectation.configuration`` is built once per
#: expectation (module docstring); nested and concurrent blocks share one memo
#: (:class:`dpcore.shared_scope.SharedScope`).
memoised_configurations = SharedScope(_install, _uninstall)
