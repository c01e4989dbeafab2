"""Package attributes loaded on first use (PEP 562), so importing a package does not import its heavy parts."""
from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<exports[name]>`` when ``name`` is first asked for.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : dict of str to str
        Public name -> the submodule (relative to ``package``) that defines it.
    namespace : dict
        The package's ``globals()``: a loaded name is stored there, so it is looked up only once.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
