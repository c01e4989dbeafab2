"""Outlier rules discovery (seed 004, slides "Outlier Rules Discovery"): readable rules that respect units.

Given a table and labels marking its outliers, :class:`RuleMiner` finds rules
such as ``distance / air_time < 3.46 mph`` or ``|t1 - t2| ≥ 180 s ∧ carrier = CMT``:

* :mod:`.units` -- the shared :mod:`pint` registry, :class:`UnitError`, :func:`check_unit`,
  conversions and readable units of derived dimensions;
* :mod:`.trees` -- operation trees over numeric attributes, typed by their units,
  with equivalent and constant trees pruned;
* :mod:`.ranges` -- vectorised one- and two-sided threshold search;
* :mod:`.categories` -- categorical values with reasonable precision and recall;
* :mod:`.rules` -- :class:`Rule` (text with units, precision, recall, F1, support,
  ``covers``, ``as_dict``) and the rule builders;
* :mod:`.select` -- grouping of near-duplicate rules and ranking by F1;
* :mod:`.miner` -- :class:`RuleMiner`, the whole search.

A plain library (numpy, pandas, pint): no Prefect. The rules are internal
(non-private), like the detector's labels they explain.

Who may import it: :mod:`dpcore.release` (a spec's units are checked by :mod:`.unit_memo`) and every
package above it, and ``tasks/``/``flows/``. It imports :mod:`dpcore.storage` and :mod:`dpcore.runtime`
only (nothing of its layer's siblings :mod:`dpcore.budget`, :mod:`dpcore.noise`).
"""
from dpcore.runtime.lazy_exports import lazy_getattr

#: Each public name -> the submodule that defines it, loaded on first use (PEP 562): the spec's unit check
#: imports :mod:`.units` alone, not the rule miner and its trees.
_EXPORTS: dict[str, str] = {
    "RuleMiner": "miner", "Rule": "rules", "Tree": "trees", "generate_trees": "trees",
    "UnitError": "units", "check_unit": "units", "ureg": "units",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["RuleMiner", "Rule", "Tree", "generate_trees", "UnitError", "check_unit", "ureg"]
