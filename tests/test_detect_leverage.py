"""Issue 22: high-breakdown starts, so clusters of bad leverage points cannot mask themselves.

FAST-LTS (Rousseeuw and Van Driessen 2006) as the detector's start (``start="auto"`` / ``"lts"``),
the inlier-driven coefficient step that keeps EM in the LTS basin, the C-step theorem,
reproducibility and parameter validation. The fixtures are the masking fixture of
``benchmarks/detect_leverage.py``: a tight cluster of bad leverage points plus 5% vertical outliers.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpcore.detect import RobustRegressionDetector
from dpcore.detect import em_passes, mixture_em, robust_start
from benchmarks.detect_leverage import masked


# --------------------------------------------------------------------------- masking
@pytest.mark.parametrize(
    "n, p, eps, seed",
    [(30, 1, 0.4, 1), (30, 1, 0.4, 2), (100, 2, 0.3, 4), (100, 5, 0.4, 0), (1000, 3, 0.3, 4), (1000, 5, 0.3, 2)],
)
def test_leverage_cluster_masks_the_legacy_start_but_not_the_default(n, p, eps, seed):
    """The old start (``start="legacy"``, the default before issue 22) is captured by the cluster
    (ROC AUC near or below chance: clean rows flagged instead); the default recovers every planted row."""
    X, y, out = masked(n, p, eps, seed)
    old = RobustRegressionDetector(random_state=0, start="legacy").fit(X, y)
    new = RobustRegressionDetector(random_state=0).fit(X, y)
    assert roc_auc_score(out, old.decision_scores_) < 0.65
    assert roc_auc_score(out, new.decision_scores_) >= 0.99
    # semantics unchanged: labels are the top K = floor(sum t_i) by score
    K = int(np.floor(new.posterior_.sum() + 1e-9))
    assert new.K_ == K == new.labels_.sum()
    assert new.decision_scores_[new.labels_ == 1].min() >= new.decision_scores_[new.labels_ == 0].max()
    # and the labelled set is essentially the planted one
    assert np.mean(new.labels_[out]) >= 0.95 and np.mean(new.labels_[~out]) <= 0.05


def test_lts_start_alone_is_right_where_em_from_it_with_exact_weights_drifts():
    """Cause (b) of issue 22, pinned: EM with the exact ECM coefficient step, started at the
    reweighted LTS fit, slides into the masked fit (the Cauchy weights of a leverage cluster pull
    it); the inlier-driven step stays. Documented in the module docstring, section "Masking"."""
    X, y, out = masked(1000, 5, 0.3, 2)
    det = RobustRegressionDetector(random_state=0).fit(X, y)
    Z, ys = det._design(X), det._std_y(y)
    assert roc_auc_score(out, np.abs(ys - Z @ det._lts_beta)) >= 0.99
    beta0 = robust_start._lts_reweight(Z, ys, det._lts_beta, robust_start._lts_h(*Z.shape), mixture_em._SIGMA2_FLOOR)
    s2, p0, b = robust_start._start_params(Z, ys, beta0, 0.1)
    aucs = {}
    for ow in (1.0, mixture_em._OUTLIER_WEIGHT):
        res = em_passes._em(Z, ys, beta0, s2, p0, b, 200, 1e-6, outlier_weight=ow)
        aucs[ow] = roc_auc_score(out, mixture_em._log_odds(ys - Z @ res["beta"], res["s2"], res["p"], res["b"]))
    assert aucs[1.0] < 0.7 and aucs[mixture_em._OUTLIER_WEIGHT] >= 0.99


def test_large_table_path_subsample_then_c_steps_on_all_rows(monkeypatch):
    """n above the start subsample: subsets and C-steps on the sample, final C-steps on all rows."""
    monkeypatch.setattr(robust_start, "_START_ROWS", 400)
    X, y, out = masked(3000, 2, 0.3, 0)
    calls = []
    orig = robust_start._concentrate

    def spy(Z, y_, B, h, max_steps):
        calls.append((Z.shape[0], h))
        return orig(Z, y_, B, h, max_steps)

    monkeypatch.setattr(robust_start, "_concentrate", spy)
    det = RobustRegressionDetector(random_state=0).fit(X, y)
    assert calls[0] == (400, (400 + 3 + 1) // 2) and calls[-1] == (3000, (3000 + 3 + 1) // 2)
    assert roc_auc_score(out, det.decision_scores_) >= 0.99


# --------------------------------------------------------------------------- FAST-LTS pieces
def test_h_is_floor_n_plus_q_plus_1_over_2():
    assert robust_start._lts_h(30, 2) == 16 and robust_start._lts_h(31, 2) == 17 and robust_start._lts_h(100, 6) == 53 and robust_start._lts_h(3, 5) == 3


def test_c_steps_never_increase_the_trimmed_objective():
    """Rousseeuw and Van Driessen (2006), Theorem 1, on 200 random starts of a contaminated sample."""
    X, y, _ = masked(200, 3, 0.3, 7)
    Z = np.c_[np.ones(len(y)), (X - X.mean(0)) / X.std(0)]
    rng = np.random.default_rng(0)
    q = Z.shape[1]
    h = robust_start._lts_h(*Z.shape)
    idx = np.argpartition(rng.random((200, len(y))), q - 1, axis=1)[:, :q]
    B = robust_start._subset_ls(Z, y, idx)
    obj, _ = robust_start._lts_objective(Z, y, B, h)
    for _ in range(10):
        B, prev, _ = robust_start._c_step(Z, y, B, h)
        np.testing.assert_allclose(prev, obj)  # _c_step reports the objective of its input
        obj, sub = robust_start._lts_objective(Z, y, B, h)
        assert np.all(obj <= prev * (1 + 1e-9) + 1e-12)
        assert sub.shape == (200, h)  # exactly h rows, ties or not
    Bc, oc = robust_start._concentrate(Z, y, B, h, 100)
    assert np.all(np.diff(oc) >= 0) and oc[0] <= obj.min() * (1 + 1e-12)


def test_n_subsets_auto_covers_40_percent_contamination():
    # 1 - (1 - 0.6**q)**N >= 0.99, at least 500, at most 3000
    for q in range(1, 20):
        N = robust_start._n_subsets_auto(q)
        assert 500 <= N <= 3000
        if N < 3000:
            assert 1 - (1 - 0.6**q) ** N >= 0.99
    assert robust_start._n_subsets_auto(9) == 500 and robust_start._n_subsets_auto(11) > 1200


def test_trimmed_variance_factor_matches_the_normal():
    rng = np.random.default_rng(0)
    x2 = np.sort(rng.standard_normal(400_000) ** 2)
    for alpha in (0.5, 0.75, 0.975):
        k = int(alpha * x2.size)
        assert robust_start._trimmed_variance_factor(alpha) == pytest.approx(x2[:k].mean(), rel=0.02)
    assert robust_start._trimmed_variance_factor(1.0) == 1.0


# --------------------------------------------------------------------------- reproducibility, params
def test_same_random_state_same_fit_and_generators_work():
    X, y, _ = masked(500, 3, 0.2, 3)
    a = RobustRegressionDetector(random_state=11).fit(X, y)
    b = RobustRegressionDetector(random_state=11).fit(X, y)
    np.testing.assert_array_equal(a.decision_scores_, b.decision_scores_)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    c = RobustRegressionDetector(random_state=np.random.default_rng(11)).fit(X, y)
    d = RobustRegressionDetector(random_state=np.random.default_rng(11)).fit(X, y)
    np.testing.assert_array_equal(c.decision_scores_, d.decision_scores_)
    e = RobustRegressionDetector(random_state=11, n_subsets=50).fit(X, y)
    assert np.all(np.isfinite(e.decision_scores_))


def test_every_start_fits_without_warnings():
    X, y, _ = masked(100, 2, 0.2, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the detector never warns (issue 15)
        for start in ("auto", "lts", "ols", "legacy"):
            det = RobustRegressionDetector(random_state=0, start=start).fit(X, y)
            assert np.all(np.isfinite(det.decision_scores_))
    # "auto" is "lts" today
    a = RobustRegressionDetector(random_state=0, start="auto").fit(X, y)
    b = RobustRegressionDetector(random_state=0, start="lts").fit(X, y)
    np.testing.assert_array_equal(a.decision_scores_, b.decision_scores_)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"start": "fast"}, r"start must be one of \['auto', 'lts', 'ols', 'legacy'\], got 'fast'"),
        ({"start": None}, r"start must be one of .*, got None"),
        ({"n_subsets": 0}, r"n_subsets must be None or an integer with 1 <= n_subsets <= 100000, got 0"),
        ({"n_subsets": 10**6}, r"n_subsets must be None or an integer with 1 <= n_subsets <= 100000"),
        ({"n_subsets": 2.5}, r"n_subsets must be None or an integer .*, got 2.5"),
        ({"n_subsets": True}, r"n_subsets must be None or an integer .*, got True"),
    ],
)
def test_parameter_validation_names_the_parameter_and_range(params, match):
    X, y, _ = masked(50, 1, 0.1, 0)
    det = RobustRegressionDetector(**params)  # __init__ only stores (scikit-learn convention)
    with pytest.raises(ValueError, match=match):
        det.fit(X, y)


def test_new_parameters_are_constructor_parameters():
    det = RobustRegressionDetector()
    params = det.get_params()
    assert params["start"] == "auto" and params["n_subsets"] is None
    det.set_params(start="legacy", n_subsets=1000)
    assert det.start == "legacy" and det.n_subsets == 1000
    assert "start='legacy'" in repr(det)


def test_spec_exposes_start_and_n_subsets_and_the_step_passes_them(monkeypatch):
    from pathlib import Path

    from pydantic import ValidationError

    import dpcore.steps.detect as step
    from dpcore.release.spec import DetectSpec, load_spec

    assert DetectSpec().start == "auto" and DetectSpec().n_subsets is None
    assert DetectSpec(start="legacy", n_subsets=1000).start == "legacy"
    with pytest.raises(ValidationError, match="start"):
        DetectSpec(start="fast")
    with pytest.raises(ValidationError, match="n_subsets"):
        DetectSpec(n_subsets=0)
    spec = load_spec(Path(__file__).resolve().parents[1] / "specs" / "demo.yaml")
    detect = spec.steps.detect.model_copy(update={"start": "legacy", "n_subsets": 777})
    spec = spec.model_copy(update={"steps": spec.steps.model_copy(update={"detect": detect})})
    seen = []
    monkeypatch.setattr(step, "fit_template", lambda df, t, schema, settings: seen.append(settings))
    monkeypatch.setattr(step, "fit_partitions", lambda parts, t, schema, settings, mapper: seen.append(settings))
    step.fit_one(None, step.templates_of(spec)[0], spec)
    step.fit_streamed(None, step.templates_of(spec)[0], spec)
    assert [(s.start, s.n_subsets) for s in seen] == [("legacy", 777)] * 2
