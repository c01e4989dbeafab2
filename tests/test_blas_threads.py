"""dpcore.runtime.blas_threads: one BLAS thread while any user holds the limit; the last to leave restores.

The fits of two templates run at once in the flow's thread pool; each holds
the limit while it runs. A per-call ``threadpool_limits`` would let the first
fit's exit give BLAS its threads back while the second still runs.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")

from dpcore.runtime.blas_threads import one_blas_thread  # noqa: E402


def _blas_threads() -> list[int]:
    """Thread counts of numpy's BLAS (what ``@`` calls; scipy's, loaded lazily, is not used by the detector)."""
    np.ones(2) @ np.ones(2)  # numpy's BLAS is loaded
    return [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
            if lib["user_api"] == "blas" and "numpy" in lib["filepath"]]


@pytest.fixture()
def two_threads():
    """BLAS set to two threads for the test (this machine's default), restored afterwards."""
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        if not _blas_threads():
            pytest.skip("no BLAS library reported by threadpoolctl")
        yield


def test_the_limit_holds_inside_and_is_restored_after(two_threads):
    assert set(_blas_threads()) == {2}
    with one_blas_thread():
        assert set(_blas_threads()) == {1}
        with one_blas_thread():  # nested: still one
            assert set(_blas_threads()) == {1}
        assert set(_blas_threads()) == {1}  # the inner exit did not restore
    assert set(_blas_threads()) == {2}


def test_the_limit_is_restored_when_the_block_raises(two_threads):
    with pytest.raises(RuntimeError, match="boom"):
        with one_blas_thread():
            raise RuntimeError("boom")
    assert set(_blas_threads()) == {2}


def test_overlapping_users_in_two_threads_share_one_limit(two_threads):
    """A enters, B enters, A leaves (B still inside: one thread), B leaves (restored)."""
    a_in, b_in, a_out, b_check = (threading.Event() for _ in range(4))
    seen: dict[str, object] = {}

    def a():
        with one_blas_thread():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with one_blas_thread():
            b_in.set()
            a_out.wait(10)
            seen["b after a left"] = set(_blas_threads())
        b_check.set()

    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start(), tb.start()
    ta.join(20), tb.join(20)
    assert b_check.is_set(), "the threads did not finish"
    assert seen["b after a left"] == {1}
    assert set(_blas_threads()) == {2}


def test_a_fit_holds_one_blas_thread(two_threads, monkeypatch):
    """The detector's E-step pass runs with one BLAS thread (what BENCHMARKS "detect_blas" measures)."""
    from dpcore.detect import em_passes
    from dpcore.detect.robust_em import RobustRegressionDetector

    seen: list[set[int]] = []
    orig = em_passes._estep

    def spy(*args, **kwargs):
        seen.append(set(_blas_threads()))
        return orig(*args, **kwargs)

    monkeypatch.setattr(em_passes, "_estep", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2))
    y = X @ np.array([1.0, -2.0]) + rng.normal(size=400)
    RobustRegressionDetector().fit(X, y)
    assert seen and all(s == {1} for s in seen)
    assert set(_blas_threads()) == {2}
