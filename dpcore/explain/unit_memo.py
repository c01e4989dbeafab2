"""The spec's unit check without importing pint each time: a memo of the unit texts pint accepted.

Importing pint costs most of a second (it also loads scipy and dask when they are installed), and every
``dpr spec check`` and ``dpr plan`` of a spec that declares units (the demo does) checks them (issue 32,
section 2). :func:`check_unit` asks pint (:func:`dpcore.explain.units.check_unit`) only for a text it has
not accepted before, and remembers the texts it accepted in a small JSON file in the user's cache folder
(``$XDG_CACHE_HOME/dpr``, else ``~/.cache/dpr``). The file's name holds pint's version and a digest of
:mod:`dpcore.explain.units` (the registry's own definitions, e.g. ``usd``), so a new pint or a changed
registry starts a new memo. A rejected text is never remembered: pint rejects it again with its message.

Privacy: the memo holds unit texts from specs (public schema facts), nothing read from data. A missing,
damaged or unwritable memo only means pint is asked.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

__all__ = ["check_unit", "memo_path"]


@lru_cache(maxsize=1)
def _memo_name() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        pint_version = version("pint")
    except PackageNotFoundError:
        pint_version = "unknown"
    registry = hashlib.sha256((Path(__file__).parent / "units.py").read_bytes()).hexdigest()[:16]
    return f"units-pint{pint_version}-{registry}.json"


def memo_path() -> Path:
    """The memo file for the installed pint and this registry (see the module docstring)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpr" / _memo_name()


def _known(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {t for t in data if isinstance(t, str)} if isinstance(data, list) else set()


def _remember(path: Path, known: set[str]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted(known)), encoding="utf-8")
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new memo
    except OSError:
        pass  # no cache folder: pint is asked next time


def check_unit(text: str) -> None:
    """Raise :class:`~dpcore.explain.units.UnitError` naming ``text`` when it is not a unit pint knows.

    Parameters
    ----------
    text : str
        A unit expression (``"mile"``, ``"minute"``, ``"usd"``; ``"1"`` or ``""`` is dimensionless).

    Raises
    ------
    UnitError
        As :func:`dpcore.explain.units.check_unit` (pint is asked for every text not accepted before).
    """
    if isinstance(text, str) and text.strip() in ("", "1"):
        return  # dimensionless, as parse_unit reads it without pint
    path = memo_path()
    known = _known(path)
    if isinstance(text, str) and text in known:
        return
    from .units import check_unit as pint_check

    pint_check(text)  # raises UnitError for an unknown unit (never remembered)
    _remember(path, known | {text})
