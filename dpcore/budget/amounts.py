"""Privacy costs as immutable values with exact arithmetic.

Following Tumult Analytics, a budget is a value, never an accumulated float:
``PrivacyCost`` holds epsilon and delta as :class:`fractions.Fraction`, so
``0.1 + 0.2`` is exactly ``3/10`` and sums over hundreds of charges are exact.

Storage in the ledger uses integer *units* of 10^-18 (HUGEINT columns in
DuckDB): a cap is rounded down and a charge rounded up when converted, so the
stored arithmetic can only over-count spending, never under-count it.

Costs are stated under a neighbour relation (DESIGN.md rule 5);
:func:`charge_under` converts a cost to the relation of the budget it is
charged to (the ledger's single spend path calls it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

#: 1 unit = 10^-18 epsilon (or delta).
UNITS_PER_ONE = 10**18

Notion = Literal["dp", "ocdp", "sp"]
#: Neighbour relations (DESIGN.md rule 5): ``add-remove`` = one record added or
#: removed (unbounded); ``replace-one`` = one record's value replaced, the
#: number of records N fixed and public (bounded).
Neighbour = Literal["add-remove", "replace-one"]
NEIGHBOURS: tuple[str, ...] = ("add-remove", "replace-one")
#: Notions from strongest to weakest guarantee (DESIGN.md rule 4): the report
#: states the weakest notion that any charge on the dataset used.
NOTION_ORDER: tuple[str, ...] = ("dp", "ocdp", "sp")
NOTION_LABELS = {
    "dp": "differential privacy (epsilon, delta)",
    "ocdp": "output-constrained differential privacy (PCOR)",
    "sp": "sensitive privacy (AIQ)",
}


def exact(x: int | float | str | Fraction) -> Fraction:
    """Convert a number to an exact fraction of its *decimal* text.

    Floats go through ``repr`` so ``0.1`` becomes ``1/10`` rather than the
    binary approximation. NaN, infinities and negative values are refused.
    """
    if isinstance(x, Fraction):
        f = x
    elif isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"privacy parameter must be finite, got {x!r}")
        f = Fraction(repr(x))
    else:
        f = Fraction(x)
    if f < 0:
        raise ValueError(f"privacy parameter must be >= 0, got {x!r}")
    return f


@dataclass(frozen=True, order=False)
class PrivacyCost:
    """An (epsilon, delta) pair with exact arithmetic.

    Parameters
    ----------
    epsilon, delta : int, float, str or Fraction
        Non-negative; floats are read through their decimal text.
    """

    epsilon: Fraction
    delta: Fraction = Fraction(0)

    def __init__(self, epsilon: int | float | str | Fraction, delta: int | float | str | Fraction = 0):
        object.__setattr__(self, "epsilon", exact(epsilon))
        object.__setattr__(self, "delta", exact(delta))
        if self.delta >= 1:
            raise ValueError(f"delta must be < 1, got {float(self.delta)}")

    def __add__(self, other: "PrivacyCost") -> "PrivacyCost":
        return PrivacyCost(self.epsilon + other.epsilon, self.delta + other.delta)

    def __sub__(self, other: "PrivacyCost") -> "PrivacyCost":
        return PrivacyCost(max(self.epsilon - other.epsilon, Fraction(0)), max(self.delta - other.delta, Fraction(0)))

    def __mul__(self, k: int | Fraction) -> "PrivacyCost":
        return PrivacyCost(self.epsilon * k, self.delta * k)

    __rmul__ = __mul__

    def fits_within(self, other: "PrivacyCost") -> bool:
        """True when both epsilon and delta are at most ``other``'s."""
        return self.epsilon <= other.epsilon and self.delta <= other.delta

    @property
    def units(self) -> tuple[int, int]:
        """(epsilon, delta) in ledger units, rounded *up* (used for charges)."""
        return (math.ceil(self.epsilon * UNITS_PER_ONE), math.ceil(self.delta * UNITS_PER_ONE))

    @property
    def units_floor(self) -> tuple[int, int]:
        """(epsilon, delta) in ledger units, rounded *down* (used for caps)."""
        return (math.floor(self.epsilon * UNITS_PER_ONE), math.floor(self.delta * UNITS_PER_ONE))

    @classmethod
    def from_units(cls, eps_units: int, delta_units: int) -> "PrivacyCost":
        """Inverse of :attr:`units` (exact)."""
        return cls(Fraction(int(eps_units), UNITS_PER_ONE), Fraction(int(delta_units), UNITS_PER_ONE))

    def __str__(self) -> str:
        return f"(epsilon={float(self.epsilon):.6g}, delta={float(self.delta):.3g})"


def _exact_text(x: Fraction) -> str:
    """``x`` as a decimal with every digit the ledger keeps (at most 18 after the point), trailing zeros cut."""
    whole, rest = divmod(x.numerator * UNITS_PER_ONE // x.denominator, UNITS_PER_ONE)
    return f"{whole}.{rest:018d}".rstrip("0").rstrip(".")


def texts_apart(a: PrivacyCost, b: PrivacyCost) -> tuple[str, str]:
    """``a`` and ``b`` as text, each of epsilon and delta with as many digits as it takes to tell them apart.

    A message that compares two amounts ("would charge … but … has … left") must not print two different
    amounts as the same text: six significant digits read ``epsilon=3.2`` for 3.2 and for 3.2 less one ledger
    unit (10^-18). Where the short texts of a component are equal but its values are not, both are printed
    exactly (every digit the ledger keeps); otherwise the texts are ``str(a)``, ``str(b)``.
    """
    def part(x: Fraction, y: Fraction, short) -> tuple[str, str]:
        tx, ty = short(x), short(y)
        return (_exact_text(x), _exact_text(y)) if tx == ty and x != y else (tx, ty)

    ea, eb = part(a.epsilon, b.epsilon, lambda v: f"{float(v):.6g}")
    da, db = part(a.delta, b.delta, lambda v: f"{float(v):.3g}")
    return f"(epsilon={ea}, delta={da})", f"(epsilon={eb}, delta={db})"


def set_cap_hint(dataset: str) -> str:
    """How the data owner changes a cap; the same words in every message that points there."""
    return (f"`dpr budget set-cap {dataset} EPSILON [DELTA] --reason \"...\"` (the data owner's decision, recorded "
            "in the ledger with its time and reason), then state the same budget in the spec")


class BudgetExceededError(RuntimeError):
    """A charge (or a run's reservation) would take the budget over its cap; it is not made.

    ``release`` = (release id, what that release id holds in the ledger from
    earlier runs, its steps) when known: the message says exactly that.
    ``planned=True``: raised for a whole run's reservation before its first
    charge (:meth:`dpcore.budget.ledger.PrivacyLedger.reserve_lines`, or the
    preview of :func:`dpcore.run.pipeline.cost_preflight`); ``requested`` is its total.
    """

    def __init__(
        self, dataset: str, requested: PrivacyCost, spent: PrivacyCost, cap: PrivacyCost,
        stated: tuple[PrivacyCost, str, str] | None = None,
        release: tuple[str, PrivacyCost, list[str]] | None = None,
        planned: bool = False,
    ):
        self.dataset, self.requested, self.spent, self.cap = dataset, requested, spent, cap
        self.remaining = cap - spent
        self.release = release
        how = (f" ({stated[0]} stated under {stated[1]} neighbours, converted to the budget's {stated[2]})"
               if stated else "")
        if planned:  # a whole run's reservation, before any of its charges
            how += " for the whole run (checked before its first charge)"
            refused = "Nothing was charged by this run"
        else:
            refused = "This charge was not made and nothing was released for it"
        if release is None:
            so_far = f"{refused}."
        elif release[1] != PrivacyCost(0):
            so_far = (f"{refused}. Release {release[0]!r} already holds {release[1]} in the ledger from earlier "
                      f"runs (steps {', '.join(release[2])}); a re-run of it does not charge those again.")
        else:
            so_far = f"{refused}. Release {release[0]!r} holds nothing in the ledger."
        super().__init__(
            f"privacy budget exceeded for dataset {dataset!r}: requested {requested}{how}, "
            f"remaining {self.remaining} (spent {spent} of cap {cap}). {so_far} "
            "Lower a step's epsilon/delta or disable a step in the spec, or, if the data owner approves, raise the "
            f"cap with {set_cap_hint(dataset)}."
        )


def weakest_notion(notions: list[str] | set[str]) -> str | None:
    """The weakest privacy notion among ``notions`` (``None`` for no charges)."""
    present = [n for n in NOTION_ORDER if n in set(notions)]
    return present[-1] if present else None


def check_neighbour(value: str, name: str = "neighbour") -> str:
    """Return ``value`` if it is a known neighbour relation, else raise ``ValueError`` naming ``name``."""
    if value not in NEIGHBOURS:
        raise ValueError(f"{name} must be one of {NEIGHBOURS}, got {value!r}")
    return value


class NeighbourConversionError(ValueError):
    """A cost stated under one neighbour relation has no sound bound under the budget's relation."""


def _exp_upper(x: Fraction) -> Fraction:
    """A rational upper bound of ``e^x`` (``x >= 0``): float ``exp`` with a relative margin of 2^-40.

    ``math.exp`` is within one ulp (relative 2^-52) and reading ``x`` as a float
    changes ``e^x`` by a factor ``e^{x 2^-53}``; for ``x <= 1000`` both together
    stay far inside 2^-40.
    """
    if x > 1000:
        raise NeighbourConversionError(f"epsilon {float(x):g} is too large to convert (e^epsilon overflows)")
    return Fraction(math.exp(float(x))) * (1 + Fraction(1, 2**40))


def charge_under(cost: PrivacyCost, stated: str, budget: str) -> PrivacyCost:
    """The charge against a budget of a cost stated under another neighbour relation.

    DESIGN.md rule 5: every mechanism states its neighbour relation; the
    dataset's budget is stated under one relation, and the ledger converts.

    Parameters
    ----------
    cost : PrivacyCost
        The mechanism's true total cost under ``stated`` neighbours.
    stated : {"add-remove", "replace-one"}
        The mechanism's neighbour relation.
    budget : {"add-remove", "replace-one"}
        The relation the dataset's cap is stated under.

    Returns
    -------
    PrivacyCost
        * same relation: ``cost`` unchanged;
        * ``add-remove`` cost against a ``replace-one`` budget: replacing a
          record is removing it and adding the new one, so two add/remove
          steps ``D ~ D'' ~ D'`` (``D''`` = D without the record); group
          privacy for two steps (Dwork & Roth 2014, Theorem 2.2) gives
          ``(2 epsilon, (1 + e^epsilon) delta)`` -- the second term rounded up
          to a rational upper bound. For the ``ocdp`` and ``sp`` notions the
          same argument needs ``D''`` to satisfy the notion's own neighbour
          condition with both ends (same COE set for OCDP; a sensitive record
          for SP), which the report says.

    Raises
    ------
    NeighbourConversionError
        A ``replace-one`` cost against an ``add-remove`` budget: a guarantee
        for datasets of one fixed size says nothing about adding or removing
        a record (the mechanism may even reveal N).
    """
    check_neighbour(stated, "stated neighbour relation")
    check_neighbour(budget, "budget neighbour relation")
    if stated == budget:
        return cost
    if stated == "add-remove":
        delta = cost.delta * (1 + _exp_upper(cost.epsilon)) if cost.delta else Fraction(0)
        if delta >= 1:
            raise NeighbourConversionError(
                f"{cost} under add-remove neighbours converts to delta >= 1 under replace-one; lower delta"
            )
        return PrivacyCost(2 * cost.epsilon, delta)
    raise NeighbourConversionError(
        "the mechanism is differentially private only under replace-one neighbours (N fixed and public): "
        "it has no guarantee when a record is added or removed, so it cannot be charged to a budget stated "
        "under add-remove. State the dataset's budget under replace-one (spec: budget.neighbour: replace-one; "
        "add/remove mechanisms are then charged twice their epsilon) or drop the step."
    )
