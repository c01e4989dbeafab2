"""Differentially private hierarchical count-of-counts ("coco") histograms.

Kuo et al., PVLDB 2018 (seed 004, part 2).  Modules:

* :mod:`.hierarchy` — the public hierarchy (:class:`Hierarchy`).
* :mod:`.representations` — H, H_g, H_c, group sizes, earthmover's distance.
* :mod:`.isotonic` — L1 (median PAV) and L2 isotonic regression.
* :mod:`.consistency` — per-node estimators, optimal matching, merging,
  top-down consistency, bottom-up aggregation, tree-wide least squares
  with a consistent integer projection (post-processing only).
* :mod:`.split` — the per-level ε split from public parameters only.
* :mod:`.arrays` — the array-native path at census scale (per-level
  ``(nodes, K + 1)`` matrices, top-down consistency on runs).
* :mod:`.mechanism` — :class:`CocoMechanism` (measurement = the only
  privacy-critical step, then post-processing).
"""
from .consistency import (CONSISTENT_ANCHORS, aggregate_up, consistent_hc, distribute_to_children, gls_tree,
                          gls_tree_variances, hc_estimate, hc_variances, hg_estimate, hg_variances,
                          largest_remainder_round, match_level, merge_estimates, naive_estimate,
                          project_simplex, top_down)
from .arrays import hc_estimate_rows, hc_variance_runs, level_histograms, sum_levels, top_down_runs
from .hierarchy import ROOT, Hierarchy
from .isotonic import isotonic, isotonic_l1, isotonic_l2
from .mechanism import CocoMechanism, NodeChunk, NodeEstimate
from .split import SPLIT_GRID, SPLIT_OBJECTIVE, choose_split, split_errors
from .representations import (coco_histograms, emd, from_hc, from_hg, group_counts,
                              group_sizes_by_leaf, group_sizes_from_counts, to_hc, to_hg)

__all__ = [
    "ROOT", "Hierarchy", "CocoMechanism", "NodeChunk", "NodeEstimate",
    "group_sizes_by_leaf", "group_sizes_from_counts", "group_counts", "coco_histograms",
    "to_hg", "from_hg", "to_hc", "from_hc", "emd",
    "isotonic", "isotonic_l1", "isotonic_l2",
    "naive_estimate", "hg_estimate", "hc_estimate", "hg_variances", "hc_variances",
    "project_simplex", "largest_remainder_round", "match_level", "merge_estimates",
    "top_down", "aggregate_up", "consistent_hc", "gls_tree", "distribute_to_children",
    "gls_tree_variances", "level_histograms", "sum_levels", "hc_estimate_rows", "hc_variance_runs",
    "top_down_runs", "CONSISTENT_ANCHORS", "choose_split", "split_errors", "SPLIT_GRID", "SPLIT_OBJECTIVE",
]
