"""Defer a library's heavy imports that it never uses on our path until their first use (issue 29, goals 4-5).

great-expectations imports ``scipy.stats`` and ``altair`` when it is imported (its KS-test metrics and its
KL-divergence expectation, at the top of their modules), but uses them only inside those expectations'
functions, which no suite of this project builds (:mod:`dpcore.validation.rule_set`). Imported, the two
take about 90 MiB of memory (scipy.stats about 60, altair about 30) and about a second, for as long as the
process lives. :func:`defer` puts a stand-in module under each name in ``sys.modules`` before such an
import; ``import altair as alt`` and ``from scipy import stats`` then bind the stand-in, and the real
module is imported on the first attribute read through it (``stats.kstest``), by whoever reads it first,
and replaces the stand-in in ``sys.modules``. Code that never reads an attribute never loads the module;
code that does gets the real module's attribute, the same object an eager import gives.

Only modules not imported yet are deferred; a stand-in whose module cannot be found is not installed (the
real import then fails where it would have). Thread-safe: one lock per stand-in.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

__all__ = ["defer"]


class _Deferred(types.ModuleType):
    """A stand-in for a module not imported yet: the first attribute read imports it (:func:`defer`)."""

    def __init__(self, name: str, spec) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        self.__dict__["_deferred_lock"] = threading.Lock()
        self.__dict__["_deferred_real"] = None

    def _real(self) -> types.ModuleType:
        with self.__dict__["_deferred_lock"]:
            real = self.__dict__["_deferred_real"]
            if real is None:
                name = self.__name__
                if sys.modules.get(name) is self:
                    del sys.modules[name]
                try:
                    real = importlib.import_module(name)  # the real import; it sets itself on its parent package
                except BaseException:
                    sys.modules.setdefault(name, self)
                    raise
                self.__dict__["_deferred_real"] = real
            return real

    def __getattr__(self, attr: str):  # only for names the stand-in does not hold itself
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return getattr(self._real(), attr)

    def __dir__(self):
        return dir(self._real())


def defer(*names: str) -> list[str]:
    """Install a stand-in for each module of ``names`` not imported yet; return the names deferred.

    Parameters
    ----------
    names : str
        Dotted module names (``"scipy.stats"``, ``"altair"``).

    Returns
    -------
    list of str
        The names that got a stand-in (already imported, deferred before, or not installed: left alone).
    """
    done = []
    for name in names:
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(name)  # imports the parent package (scipy), not the module itself
        except (ImportError, ValueError):
            spec = None
        if spec is None or name in sys.modules:
            continue
        sys.modules[name] = _Deferred(name, spec)
        done.append(name)
    return done
