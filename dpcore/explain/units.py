"""Units of numeric attributes: the type system of the outlier rules' operation trees.

Seed 004, slide "Outlier Rules Discovery - Search Space Generation": operation
trees combine numeric features "based on a pre-defined type system" so that a
rule reads ``D / (dtime - ptime) < 3.46 mph`` and never adds a distance to a
time. The type of a value is its unit; its *dimension* (``[length] / [time]``)
decides which operations are allowed (:mod:`.trees`).

One shared :data:`ureg` (a :class:`pint.UnitRegistry`) is used everywhere, with
``usd`` defined as a base ``[currency]`` dimension (pint has no currencies) and
``"1"`` parsed as dimensionless.

Offset units (``degC``, ``degF``) are temperatures on a shifted scale: they can be
compared, converted and subtracted (the difference is a temperature *interval*,
``Δ°C``), but not added, multiplied or divided (:func:`is_offset`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pint

__all__ = [
    "UnitError",
    "ureg",
    "check_unit",
    "parse_unit",
    "dimension_of",
    "same_dimension",
    "is_offset",
    "convert",
    "conversion_factor",
    "finer_unit",
    "difference_unit",
    "display_unit",
    "unit_text",
]

def _pint_cache_folder() -> Path:
    """The folder where pint keeps its parsed default definitions for *this* installation of pint.

    pint's own ``:auto:`` folder (``~/.cache/pint``) is shared by every installation of pint on the
    machine and keys its entries by the definitions' content, while an entry stores the path of the
    file it was read from; two virtual environments with the same pint then share entries, and once
    the first environment is deleted the second fails to build its registry (``FileNotFoundError`` on
    the deleted environment's ``constants_en.txt``). The folder is therefore one per pint installation:
    ``$XDG_CACHE_HOME/dpr/pint-<digest of pint's install folder>``. It holds pint's definitions only,
    nothing of any dataset.
    """
    install = str(Path(pint.__file__).resolve().parent)
    digest = hashlib.sha256(install.encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dpr" / f"pint-{digest}"


def _registry() -> pint.UnitRegistry:
    """The shared registry, with pint's parse cache (building drops from ~0.8 s to ~0.03 s after the
    first time, which keeps ``dpr spec check`` and ``dpr plan`` fast); without it when the cache
    folder cannot be made (a read-only home)."""
    folder = _pint_cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return pint.UnitRegistry()
    return pint.UnitRegistry(cache_folder=folder)


ureg = _registry()
ureg.define("usd = [currency]")

_DIMENSIONLESS = ureg.dimensionless
_IMPERIAL_LENGTHS = {"mile", "yard", "foot", "inch", "nautical_mile"}


class UnitError(ValueError):
    """A unit string that the registry cannot parse, or an operation its dimensions forbid."""


def parse_unit(text: str, attribute: str | None = None) -> pint.Unit:
    """The :class:`pint.Unit` written as ``text`` (``"mile"``, ``"min"``, ``"1"``, ``"usd"``).

    Parameters
    ----------
    text : str
        A unit expression pint understands; ``"1"`` or ``""`` is dimensionless.
    attribute : str, optional
        The attribute the unit belongs to, named in the error message.

    Raises
    ------
    UnitError
        Unknown unit (the message names it, and the attribute when given), or a
        value that is not a string.
    """
    where = f" (attribute {attribute!r})" if attribute is not None else ""
    if not isinstance(text, str):
        raise UnitError(f"unit{where} must be a string such as 'mile', 'minute' or '1', got {type(text).__name__}")
    stripped = text.strip()
    if stripped in ("", "1"):
        return _DIMENSIONLESS
    try:
        unit = ureg.parse_units(stripped)
    except (pint.errors.UndefinedUnitError, pint.errors.DefinitionSyntaxError, AttributeError, TypeError,
            ValueError, SyntaxError) as exc:
        raise UnitError(f"unknown unit {text!r}{where}: {exc}") from None
    return unit


def check_unit(text: str) -> None:
    """Raise :class:`UnitError` naming ``text`` when it is not a unit of :data:`ureg`."""
    parse_unit(text)


def dimension_of(unit: str | pint.Unit) -> pint.util.UnitsContainer:
    """The dimension of ``unit`` (e.g. ``[length] / [time]``; empty for dimensionless)."""
    return (parse_unit(unit) if isinstance(unit, str) else unit).dimensionality


def same_dimension(a: pint.Unit, b: pint.Unit) -> bool:
    """Whether ``a`` and ``b`` measure the same dimension (minutes and seconds do)."""
    return a.dimensionality == b.dimensionality


def is_offset(unit: pint.Unit) -> bool:
    """Whether ``unit`` is on an offset scale (``degC``, ``degF``): no ``+``, ``*`` or ``/``."""
    return not ureg.Quantity(1.0, unit)._ok_for_muldiv()


def conversion_factor(src: pint.Unit, dst: pint.Unit) -> float:
    """The factor ``f`` with ``x [src] = f * x [dst]`` for multiplicative units (minute -> second: 60)."""
    if is_offset(src) or is_offset(dst):
        raise UnitError(f"no conversion factor between offset units {unit_text(src)!r} and {unit_text(dst)!r}")
    try:
        return float(ureg.Quantity(1.0, src).to(dst).magnitude)
    except pint.errors.DimensionalityError:
        raise UnitError(f"cannot convert {unit_text(src)!r} to {unit_text(dst)!r}: different dimensions") from None


def convert(values, src: str | pint.Unit, dst: str | pint.Unit) -> np.ndarray:
    """``values`` (array-like, in ``src``) expressed in ``dst``; a new float array (NaN stays NaN).

    Offset scales are converted affinely (``degC`` -> ``degF``); a different
    dimension raises :class:`UnitError` naming both units.
    """
    src = parse_unit(src) if isinstance(src, str) else src
    dst = parse_unit(dst) if isinstance(dst, str) else dst
    x = np.asarray(values, dtype=float)
    if src == dst:
        return x.copy()
    if not same_dimension(src, dst):
        raise UnitError(f"cannot convert {unit_text(src)!r} to {unit_text(dst)!r}: different dimensions")
    if is_offset(src) or is_offset(dst):
        return np.asarray(ureg.Quantity(x, src).to(dst).magnitude, dtype=float)
    return x * conversion_factor(src, dst)


def finer_unit(a: pint.Unit, b: pint.Unit) -> pint.Unit:
    """Of two units of one dimension, the smaller one (second over minute); ``a`` on ties and offset scales.

    Sums and differences are computed in the finer unit so thresholds read as
    ``|t1 - t2| ≥ 180 s`` rather than ``≥ 3 min`` with lost resolution.
    """
    if a == b or is_offset(a) or is_offset(b):
        return a
    return b if conversion_factor(b, a) < 1.0 else a


def difference_unit(unit: pint.Unit) -> pint.Unit:
    """The unit of a difference of two values in ``unit`` (``degC`` -> ``delta_degC``; others unchanged)."""
    if not is_offset(unit):
        return unit
    return (ureg.Quantity(0.0, unit) - ureg.Quantity(0.0, unit)).units


def display_unit(unit: pint.Unit, inputs=()) -> pint.Unit:
    """A readable unit for a derived value of unit ``unit`` computed from leaves in ``inputs``.

    * dimensionless -> dimensionless (``minute / second`` is a pure number);
    * the dimension of one of the inputs -> that input's unit (the finest one);
    * ``[length] / [time]`` -> ``mph`` when an input length is imperial (mile, foot, ...),
      else ``km/h`` when an input length is metric;
    * ``[currency] / [length]`` and other derived units -> ``unit`` reduced (``mile * minute / minute`` -> ``mile``).
    """
    inputs = [u for u in inputs if not is_offset(u)]
    dim = unit.dimensionality
    if not dim:
        return _DIMENSIONLESS
    same = [u for u in inputs if u.dimensionality == dim]
    if same:
        best = same[0]
        for u in same[1:]:
            best = finer_unit(best, u)
        return best
    if dim == ureg.mph.dimensionality:
        names = {str(u) for u in inputs if u.dimensionality == ureg.mile.dimensionality}
        if names & _IMPERIAL_LENGTHS:
            return ureg.mph
        if names:
            return ureg.kilometer / ureg.hour
    return ureg.Quantity(1.0, unit).to_reduced_units().units


def unit_text(unit: pint.Unit) -> str:
    """Short readable symbol: ``mph``, ``mi/min``, ``s``, ``°C``, ``Δ°C``, ``usd``; ``""`` for dimensionless."""
    return format(unit, "~P")
