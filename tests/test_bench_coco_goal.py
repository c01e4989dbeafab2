"""The goal-only mode of benchmarks/coco.py: its paired test and its splice into BENCHMARKS.md (issue 19)."""
from types import SimpleNamespace

import numpy as np

from benchmarks import coco as bc


def _ds():
    return SimpleNamespace(h=SimpleNamespace(levels=2))


def _per_seed(new, base_shift, n=20, seed=0):
    rng = np.random.default_rng(seed)
    common = rng.normal(100, 10, size=(n, 2))
    ps = {}
    for e in bc.GOAL_EPS:
        ps[(e, bc.GOAL_NEW)] = common + new
        for j, m in enumerate(bc.BASELINES):
            ps[(e, m)] = common + base_shift + 5 * j + rng.normal(0, 1, size=(n, 2))
    return ps


def test_goal_cells_paired_verdicts():
    # new clearly worse than the best baseline -> not met; clearly better -> met and better
    worse = bc.goal_cells(_ds(), _per_seed(new=20.0, base_shift=0.0), bc.GOAL_NEW)
    assert len(worse) == 2 * len(bc.GOAL_EPS)
    assert not any(c["met"] for c in worse) and all(c["best"] == bc.BASELINES[0] for c in worse)
    better = bc.goal_cells(_ds(), _per_seed(new=-20.0, base_shift=0.0), bc.GOAL_NEW)
    assert all(c["met"] and c["better"] for c in better)
    # equal up to noise -> met (CI reaches 0), not significantly better
    ps = _per_seed(new=0.0, base_shift=0.0)
    rng = np.random.default_rng(1)
    for e in bc.GOAL_EPS:  # new = the best baseline plus zero-mean noise, exactly symmetric: mean(d) = 0
        z = rng.normal(0, 1, size=(10, 2))
        ps[(e, bc.GOAL_NEW)] = ps[(e, bc.BASELINES[0])] + np.concatenate([z, -z])
    tie = bc.goal_cells(_ds(), ps, bc.GOAL_NEW)
    assert all(c["met"] and not c["better"] for c in tie)
    assert all(abs(c["ratio"] - 1) < 1e-9 for c in tie)


def test_insert_goal_before_summary_and_replace():
    body = "## head\n\n### Scale: x\n\nscale text\n\n### Which of the slides' expectations held (v)\n\n- a\n"
    sub1 = f"{bc.GOAL_HEAD} (run 1)\n\n#### (a) x\n\nt1\n"
    once = bc._insert_goal(body, sub1)
    assert once.index(bc.GOAL_HEAD) < once.index("### Which of the slides")
    assert once.index("### Scale") < once.index(bc.GOAL_HEAD)
    sub2 = f"{bc.GOAL_HEAD} (run 2)\n\n#### (a) x\n\nt2\n"
    twice = bc._insert_goal(once, sub2)
    assert twice.count(bc.GOAL_HEAD) == 1 and "t2" in twice and "t1" not in twice
    assert twice.replace("(run 2)", "(run 1)").replace("t2", "t1") == once
