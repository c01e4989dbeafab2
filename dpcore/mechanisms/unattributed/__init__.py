"""Differentially private unattributed histograms (seed 004, last part; issue 17).

* :mod:`.mechanism` — :class:`UnattributedHistogramMechanism` (every method
  behind one interface), :func:`choose_method` (``auto``), :func:`accuracy`.
* :mod:`.range_algorithms` — DAWA's L1 partition (Li-Hay-Miklau 2014), AHP
  (Zhang et al. 2014) and HbTree (Qardaji-Yang-Li 2013) on one vector.
* :mod:`.pfl`, :mod:`.hmm` — PFL (Blocki-Datta-Bonneau 2016) and the HMM
  estimates (Lin & Kifer 2013), imported lazily by the mechanism;
  :mod:`.pfl_messages` — PFL's backward messages as dyadic rationals
  (compiled), drawn exactly by ``NoiseSource.nonincreasing_chain``.
"""
from .mechanism import (METHODS, NEEDS_SIZE_BOUND, REPRESENTATION_METHODS, SENSITIVITY,
                        UnattributedHistogramMechanism, accuracy, as_sorted_sizes, choose_method)

__all__ = ["UnattributedHistogramMechanism", "METHODS", "NEEDS_SIZE_BOUND", "REPRESENTATION_METHODS",
           "SENSITIVITY", "accuracy", "as_sorted_sizes", "choose_method"]
