"""Every unattributed method has a public accuracy statement or says plainly which number is approximate and how
(issue 32, section 4: with G = 4 the report said "the estimate's own error is not bounded")."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dpcore.mechanisms.unattributed import METHODS, UnattributedHistogramMechanism
from dpcore.noise import NoiseSource
from dpcore.steps.unattributed import unattributed_accuracy

SPEC = SimpleNamespace(accuracy_alpha=0.05)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_states_its_accuracy_or_what_is_approximate(method):
    K, G = 30_000, 4
    mech = UnattributedHistogramMechanism(method, 0.5, K, groups=G)
    acc = unattributed_accuracy(SPEC, mech, G)["sorted_sizes"]
    text = acc["statement"]
    assert "not bounded" not in text and "no public error bound" not in text
    if acc["kind"] in ("interval",) or "L1 error" in text:
        assert acc["kind"] == "interval" or "at most" in text
    else:
        # the approximate number is named, how it is made, and the bound that holds for every dataset
        assert text.startswith("Approximate: the 4 released sizes are ")
        assert f"method `{method}`" in text and f"no released size is off by more than {K:,}" in text
        assert "measured on benchmark data, not guaranteed" in text
        if method.startswith("hmm_"):
            assert acc["kind"] == "measurement" and f"within ± {acc['bound']:,}" in text


@pytest.mark.parametrize("method", [m for m in METHODS if m.startswith(("hmm_", "pfl", "dawa", "ahp", "hbtree"))])
def test_the_stated_every_dataset_bound_holds(method):
    """The approximate methods' stated bound: every released size lies in 0..K (as every true size does)."""
    K = 40
    sizes = np.array([40, 40, 3, 0, 0, 17])
    mech = UnattributedHistogramMechanism(method, 0.05, K, groups=len(sizes))
    noise = NoiseSource(seed=3)
    for _ in range(5):
        out = mech.release(sizes, noise)
        assert out.min() >= 0 and out.max() <= K
        assert np.abs(out - np.sort(sizes)[::-1]).max() <= K
