"""Exact integer rounding of continuous noise by lazy uniforms and interval arithmetic.

Some smooth-sensitivity noise distributions (Bun & Steinke 2019, Section 3:
Laplace log-normal, arsinh-normal) are continuous, have no algebraic CDF and
are defined as *transformations* of standard uniforms (through the normal and
exponential distributions).  This module releases, exactly,

    K = round(F(U_1, ..., U_m)),   round(y) = floor(y + 1/2),

for a function ``F`` of independent uniforms on [0, 1) built from ``+ - * /``,
``sqrt``, ``exp``, ``ln`` and ``sinh``, with an optional rejection region
(e.g. the polar method's unit disc).  Rounding to an integer is
post-processing of ``F(U)``, so it keeps the privacy guarantee proved for the
continuous ``F(U)``, and it is what makes exact sampling possible.

Validity argument (why the output has exactly the stated distribution)
---------------------------------------------------------------------
1. *Lazy uniforms.*  Each ``U_i = 0.b_1 b_2 ...`` is the binary expansion of
   fair bits (``os.urandom`` in production), read ``L`` at a time: after
   ``L`` bits ``U_i`` lies in the dyadic interval ``[a_i 2^-L, (a_i + 1) 2^-L)``
   and every point of it is equally likely to be the final ``U_i``.
2. *Enclosures.*  :class:`Interval` evaluates ``F`` on the box of those
   intervals in decimal arithmetic with ``prec`` digits.  Every elementary
   operation of Python's :mod:`decimal` used here (``+ - * /``, ``sqrt``,
   ``exp``, ``ln``) is *correctly rounded* (round-half-even: the result is
   within half a unit in the last place of the exact value; General Decimal
   Arithmetic specification, which :mod:`decimal` implements), and each
   result is then widened one unit outward (``next_minus`` / ``next_plus``),
   so the computed ``[lo, hi]`` *contains* the exact value of the operation
   on every point of its input intervals (monotone functions are evaluated at
   the endpoints; products take the min/max of the four endpoint products).
   By induction the final interval contains ``F(u)`` for every ``u`` in the
   box.
3. *Decisions.*  If the enclosure of the rejection test lies wholly inside
   (outside) the acceptance region, every continuation of the bits accepts
   (rejects); if ``floor(lo + 1/2) == floor(hi + 1/2)``, every continuation
   rounds to that same integer, which is therefore ``round(F(U))`` for the
   exact uniforms the bits define.  Otherwise more bits are read (and the
   precision raised) and the box is evaluated again.  A rejection redraws all
   uniforms (fresh bits), as rejection sampling prescribes.
4. *Termination.*  The enclosure width tends to 0 as ``L`` and ``prec`` grow
   (``F`` is continuous on the open acceptance region), so a decision is
   reached unless ``F(U)`` lies exactly on a rounding boundary or ``U`` on the
   rejection boundary: events of probability 0.  The loop therefore stops
   with probability 1, after few refinements in practice (the first
   evaluation, with 64 bits per uniform and 40 digits, decides unless
   ``F(U)`` is within about ``1e-15`` relative of a half-integer).

No binary floating point touches a sampled value, so Mironov's (2012)
attack on floating-point samplers does not apply; the only decisions are
exact comparisons of rigorous bounds.
"""
from __future__ import annotations

import decimal
from decimal import Decimal
from fractions import Fraction
from typing import Callable, Sequence

__all__ = ["Interval", "REJECT", "UNDECIDED", "round_exactly", "interval_of_fraction"]

#: Returned by an evaluation callback when the drawn uniforms fall in the rejection region.
REJECT = "reject"
#: Returned by an evaluation callback when the current box cannot decide (read more bits).
UNDECIDED = "undecided"

_FIRST_BITS = 64
_STEP_BITS = 32
_FIRST_DIGITS = 40
_STEP_DIGITS = 12
#: Refinements after which the sampler gives up (probability ~0 on a sound callback): a safeguard
#: against a callback that can never decide (a bug), not a privacy parameter.
_MAX_ROUNDS = 200


class Interval:
    """A closed interval ``[lo, hi]`` of reals with rigorous outward-rounded arithmetic.

    Parameters
    ----------
    lo, hi : Decimal
        Bounds, ``lo <= hi``.
    ctx : decimal.Context
        Precision of every operation (rounding is round-half-even; each result
        is widened one unit outward, so it encloses the exact value).

    Notes
    -----
    Only what the smooth-sensitivity samplers need: ``+``, ``-``, ``*``
    (with intervals or exact scalars), :meth:`sqrt`, :meth:`exp`, :meth:`ln`,
    :meth:`sinh`, :meth:`square`, :meth:`reciprocal`.  A function undefined on
    part of the interval (``ln`` of an interval reaching 0) raises
    :class:`_Undecided` so the caller reads more bits.
    """

    __slots__ = ("lo", "hi", "ctx")

    def __init__(self, lo: Decimal, hi: Decimal, ctx: decimal.Context):
        self.lo = lo
        self.hi = hi
        self.ctx = ctx

    # -- construction ---------------------------------------------------------

    @classmethod
    def point(cls, value, ctx: decimal.Context) -> "Interval":
        """An enclosure of an exact rational (``int``, ``Fraction``) or a ``Decimal``."""
        return interval_of_fraction(Fraction(value), ctx)

    def _down(self, x: Decimal) -> Decimal:
        return x.next_minus(self.ctx)

    def _up(self, x: Decimal) -> Decimal:
        return x.next_plus(self.ctx)

    def _new(self, lo: Decimal, hi: Decimal) -> "Interval":
        return Interval(self._down(lo), self._up(hi), self.ctx)

    # -- arithmetic -------------------------------------------------------------

    def _coerce(self, other) -> "Interval":
        return other if isinstance(other, Interval) else Interval.point(other, self.ctx)

    def __add__(self, other) -> "Interval":
        o = self._coerce(other)
        c = self.ctx
        return self._new(c.add(self.lo, o.lo), c.add(self.hi, o.hi))

    __radd__ = __add__

    def __neg__(self) -> "Interval":
        return Interval(-self.hi, -self.lo, self.ctx)

    def __sub__(self, other) -> "Interval":
        return self + (-self._coerce(other))

    def __rsub__(self, other) -> "Interval":
        return self._coerce(other) - self

    def __mul__(self, other) -> "Interval":
        o = self._coerce(other)
        c = self.ctx
        prods = [c.multiply(a, b) for a in (self.lo, self.hi) for b in (o.lo, o.hi)]
        return self._new(min(prods), max(prods))

    __rmul__ = __mul__

    def square(self) -> "Interval":
        """``x^2`` (tighter than ``x * x`` when the interval contains 0)."""
        c = self.ctx
        a, b = abs(self.lo), abs(self.hi)
        hi = c.multiply(max(a, b), max(a, b))
        if self.lo <= 0 <= self.hi:
            return Interval(Decimal(0), self._up(hi), c)
        lo = c.multiply(min(a, b), min(a, b))
        return self._new(lo, hi)

    def reciprocal(self) -> "Interval":
        """``1 / x`` for an interval of one sign (raises :class:`_Undecided` if it contains 0)."""
        if self.lo <= 0 <= self.hi:
            raise _Undecided
        c = self.ctx
        return self._new(c.divide(Decimal(1), self.hi), c.divide(Decimal(1), self.lo))

    def __truediv__(self, other) -> "Interval":
        return self * self._coerce(other).reciprocal()

    # -- monotone functions -------------------------------------------------------

    def sqrt(self) -> "Interval":
        if self.lo < 0:
            raise _Undecided
        c = self.ctx
        lo = c.sqrt(self.lo)
        return Interval(max(Decimal(0), self._down(lo)), self._up(c.sqrt(self.hi)), c)

    def exp(self) -> "Interval":
        c = self.ctx
        return Interval(max(Decimal(0), self._down(c.exp(self.lo))), self._up(c.exp(self.hi)), c)

    def ln(self) -> "Interval":
        if self.lo <= 0:
            raise _Undecided
        c = self.ctx
        return self._new(c.ln(self.lo), c.ln(self.hi))

    def sinh(self) -> "Interval":
        """``sinh`` (increasing): a rigorous lower bound at ``lo`` and upper bound at ``hi``."""
        def enclose(x: Decimal) -> "Interval":
            p = Interval(x, x, self.ctx)
            return (p.exp() - (-p).exp()) * Fraction(1, 2)
        return Interval(enclose(self.lo).lo, enclose(self.hi).hi, self.ctx)

    def __repr__(self) -> str:
        return f"Interval({self.lo}, {self.hi})"


class _Undecided(Exception):
    """Raised inside an evaluation when the current box is too coarse to evaluate (read more bits)."""


def interval_of_fraction(q: Fraction, ctx: decimal.Context) -> Interval:
    """A rigorous enclosure of the rational ``q`` at the precision of ``ctx``."""
    num = Decimal(q.numerator)
    den = Decimal(q.denominator)
    if den == 1 and len(num.as_tuple().digits) <= ctx.prec:
        return Interval(num, num, ctx)
    v = ctx.divide(num, den)
    return Interval(v.next_minus(ctx), v.next_plus(ctx), ctx)


class _Box:
    """``m`` uniforms on [0, 1) read lazily, ``L`` bits each, as dyadic intervals."""

    def __init__(self, m: int, next_bit: Callable[[], int]):
        self.m = m
        self.next_bit = next_bit
        self.a = [0] * m
        self.L = 0

    def extend(self, bits: int) -> None:
        nb = self.next_bit
        for i in range(self.m):
            a = self.a[i]
            for _ in range(bits):
                a = (a << 1) | (nb() & 1)
            self.a[i] = a
        self.L += bits

    def intervals(self, ctx: decimal.Context) -> list[Interval]:
        den = 1 << self.L
        out = []
        for a in self.a:
            lo = interval_of_fraction(Fraction(a, den), ctx).lo
            hi = interval_of_fraction(Fraction(a + 1, den), ctx).hi
            out.append(Interval(max(lo, Decimal(0)), min(hi, Decimal(1)), ctx))
        return out


def _round_cell(v: Interval) -> int | None:
    """``floor(y + 1/2)``, the same for every ``y`` in ``v``, or ``None`` if ``v`` straddles a boundary.

    Evaluated in exact rationals (``Fraction(Decimal)`` is exact), so no rounding enters the decision.
    """
    half = Fraction(1, 2)
    a = (Fraction(v.lo) + half).__floor__()
    b = (Fraction(v.hi) + half).__floor__()
    return int(a) if a == b else None


def round_exactly(m: int, evaluate: Callable[[Sequence[Interval]], object],
                  next_bit: Callable[[], int]) -> int:
    """Release ``round(F(U_1..U_m))`` exactly (module docstring, "Validity argument").

    Parameters
    ----------
    m : int
        Number of uniforms ``F`` needs.
    evaluate : callable
        ``evaluate(box) -> Interval | REJECT | UNDECIDED``: an enclosure of
        ``F`` over the box of uniform intervals, :data:`REJECT` when the whole
        box lies in the rejection region, :data:`UNDECIDED` (or raising
        :class:`_Undecided`) when the box straddles the region's boundary.
        Every operation must go through :class:`Interval`.
    next_bit : callable
        Fair bits (``os.urandom`` in production, a seeded generator in tests).

    Returns
    -------
    int
        ``floor(F(U) + 1/2)`` for the exact uniforms the bits define.

    Raises
    ------
    RuntimeError
        If no decision is reached after ``_MAX_ROUNDS`` refinements (only a
        callback that cannot shrink its enclosure does this).
    """
    box = _Box(m, next_bit)
    box.extend(_FIRST_BITS)
    digits = _FIRST_DIGITS
    rounds = 0
    while True:
        ctx = decimal.Context(prec=digits, rounding=decimal.ROUND_HALF_EVEN, Emax=10**6, Emin=-10**6)
        try:
            out = evaluate(box.intervals(ctx))
        except _Undecided:
            out = UNDECIDED
        if out is REJECT:
            box = _Box(m, next_bit)
            box.extend(_FIRST_BITS)
            digits = _FIRST_DIGITS
            continue
        if out is not UNDECIDED:
            k = _round_cell(out)
            if k is not None:
                return k
        rounds += 1
        if rounds > _MAX_ROUNDS:
            raise RuntimeError("exact rounding did not converge: the evaluation callback cannot narrow its enclosure")
        box.extend(_STEP_BITS)
        digits += _STEP_DIGITS
