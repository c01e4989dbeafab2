"""The count-of-counts pictures state the accuracy of the released cells (issue 48, item 5)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from dpcore.mechanisms.coco.hierarchy import Hierarchy

ACCURACY = {
    "histograms.level0": {"bound": None, "level": 0.95, "kind": "none", "statement": ""},
    "histograms.level1": {"bound": 11, "level": 0.95, "kind": "empirical", "statement": ""},
    "histograms.level1.measurement": {"bound": 7, "level": 0.95, "kind": "measurement", "statement": ""},
    "histograms.level2": {"bound": 3, "level": 0.95, "kind": "empirical", "statement": ""},
}


def test_accuracy_labels_per_level():
    from dpcore.publish.plots import coco_accuracy_labels

    labels = coco_accuracy_labels(ACCURACY)
    assert labels[1] == "each released cell ± 11 (95%, empirical)"
    assert labels[2] == "each released cell ± 3 (95%, empirical)"
    assert "no accuracy figure" in labels[0]
    only_measured = {"histograms.level1": {"bound": None, "level": 0.9, "kind": "none", "statement": ""},
                     "histograms.level1.measurement": {"bound": 7, "level": 0.9, "kind": "measurement"}}
    assert coco_accuracy_labels(only_measured)[1] == "each measured cell ± 7 (90%, before post-processing)"


def test_the_pictures_show_the_interval_and_reused_figures_stay_exact(tmp_path):
    from PIL import Image

    from dpcore.publish.plots import coco_plots

    leaves = pd.DataFrame({"r": ["a", "a", "b"], "s": ["x", "y", "x"]})
    h = Hierarchy.from_leaf_paths(leaves, ["r", "s"])
    rng = np.random.default_rng(3)
    est = {n: rng.integers(0, 30, 11) for n in h.nodes}
    plain = coco_plots(est, h, tmp_path / "plain", 10, bins=40)
    stated = coco_plots(est, h, tmp_path / "stated", 10, bins=40, accuracy=ACCURACY)
    for a, b in zip(plain, stated):  # the overview and every node's picture carry the accuracy
        assert not np.array_equal(np.asarray(Image.open(a)), np.asarray(Image.open(b))), b.name
    # the reused figure: a node drawn after another equals that node drawn alone (bars and notes replaced)
    alone_h = Hierarchy.from_leaf_paths(leaves[leaves["r"] == "b"], ["r", "s"])
    alone = coco_plots(est, alone_h, tmp_path / "alone", 10, bins=40, accuracy=ACCURACY)[1]
    mine = next(f for f in stated if f.name == alone.name)
    assert np.array_equal(np.asarray(Image.open(mine)), np.asarray(Image.open(alone)))
