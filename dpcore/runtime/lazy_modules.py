"""Third-party modules imported on first use, so that commands which never touch them never load them.

``dpr spec check`` and ``dpr plan`` read a spec and the ledger only, yet the modules they import (the
steps' planners, the ledger, the warehouse) also hold the code that reads data and draws noise, written
against pandas and scipy. Loading those two costs a second or more per command (issue 32, section 2).
A module that needs pandas only inside its functions writes::

    from .lazy_modules import lazy_module

    pd = lazy_module("pandas")

and uses ``pd.DataFrame`` ... as before: the first attribute read imports pandas and copies its namespace
into the stand-in, so later reads are plain attribute lookups. Until then, ``"pandas" not in sys.modules``
(``tests/test_command_imports.py`` checks this for the two commands).
"""
from __future__ import annotations

import importlib
import types
from typing import Any

__all__ = ["lazy_module"]


class _LazyModule(types.ModuleType):
    """A stand-in for the module ``name`` that imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:  # called only for names not (yet) in the stand-in's namespace
        module = importlib.import_module(self.__dict__["_lazy_target"])
        if "_lazy_loaded" not in self.__dict__:
            self.__dict__.update(vars(module))  # later reads of these names are plain lookups
            self.__dict__["_lazy_loaded"] = True
        return getattr(module, attr)  # also a name the module serves itself (its __getattr__, a new submodule)

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_target']!r}>"


def lazy_module(name: str) -> types.ModuleType:
    """A stand-in for the module ``name`` (e.g. ``"pandas"``, ``"scipy.special"``) imported on first use.

    Parameters
    ----------
    name : str
        The module's full dotted name.

    Returns
    -------
    module
        An object whose attributes are the module's; the module is imported when the first one is read
        (an ``ImportError`` then names it, as a plain import would).
    """
    return _LazyModule(name)
