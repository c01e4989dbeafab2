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

The same block memoises ``IDDict.to_id``, the id great-expectations gives
each metric's domain and value kwargs (``MetricConfiguration.__init__``, 1,778
per run of the demo's suite): an MD5 of the JSON of the kwargs after
``convert_to_json_serializable``, which walks the 4,043 tail numbers value by
value (about 23 microseconds each) for every metric of the domain rule. Ids
are memoised by the kwargs' content, for plain values only
(:func:`_plain_key`: ``str``, ``int``, ``bool``, ``None``, ``float`` by its
``repr``, and lists, tuples, dicts and sets of them, in their iteration
order, each tagged with its exact type); any other value (a numpy array, an
enum, a pandas object) is computed by great-expectations every time. Two
kwargs with the same key hold the same values of the same types in the same
order, so great-expectations computes the same id for them; a hit returns it.

Outside the block both are great-expectations' own. Nested and
concurrent blocks share one memo, kept until the last one ends (so an id is
never reused for another expectation while it holds).
"""
from __future__ import annotations

import copy
import threading

from great_expectations.core.id_dict import IDDict
from great_expectations.expectations.expectation import Expectation

from dpcore.runtime.shared_scope import SharedScope

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


_ORIGINAL_TO_ID = IDDict.__dict__["to_id"]
#: (type of the IDDict, _plain_key of its items) -> its to_id()
_IDS: dict[tuple, object] = {}
_SCALARS = frozenset({str, int, bool, type(None)})


class _NotPlain(Exception):
    """A value :func:`_plain_key` does not key (its id is computed by great-expectations)."""


def _plain_key(v) -> tuple:
    """A hashable key equal for two values exactly when they are the same plain values of the same types, in order.

    Floats are keyed by ``repr`` (``0.0`` and ``-0.0``, which JSON writes differently, differ; a NaN equals
    itself); containers keep their iteration order (which JSON keeps). Raises :class:`_NotPlain` otherwise.
    """
    t = type(v)
    if t in _SCALARS:
        return (t, v)
    if t is float:
        return (t, repr(v))
    if t is list or t is tuple or t is set or t is frozenset:
        return (t, tuple(_plain_key(x) for x in v))
    if t is dict:
        return (t, tuple((_plain_key(k), _plain_key(x)) for k, x in v.items()))
    raise _NotPlain


def _memoised_to_id(self, id_keys=None, id_ignore_keys=None):
    if id_keys is not None or id_ignore_keys is not None or len(self) < 2:
        return _ORIGINAL_TO_ID(self, id_keys, id_ignore_keys)
    try:
        key = (type(self), _plain_key(dict(self)))
    except _NotPlain:
        return _ORIGINAL_TO_ID(self, id_keys, id_ignore_keys)
    hit = _IDS.get(key)
    if hit is None:
        hit = _ORIGINAL_TO_ID(self, id_keys, id_ignore_keys)
        with _LOCK:
            _IDS[key] = hit
    return hit


def _install() -> None:
    Expectation.configuration = property(_memoised, doc=_ORIGINAL.__doc__)
    IDDict.to_id = _memoised_to_id


def _uninstall() -> None:
    Expectation.configuration = _ORIGINAL
    IDDict.to_id = _ORIGINAL_TO_ID
    with _LOCK:
        _MEMO.clear()
        _IDS.clear()


#: ``with memoised_configurations():`` -- within the block, ``Expectation.configuration`` is built once per
#: expectation (module docstring); nested and concurrent blocks share one memo
#: (:class:`dpcore.runtime.shared_scope.SharedScope`).
memoised_configurations = SharedScope(_install, _uninstall)
