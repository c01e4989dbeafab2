"""The detector's start sample without copies, and free heap handed back after it (issue 29, goal 4).

* :func:`dpcore.runtime.heap.trim_heap` returns the free pages of a fragmented glibc heap (a child process holds
  one: 128 MiB of 64 KiB blocks, one in 16 kept; its resident memory must fall by most of the freed part);
* :func:`dpcore.detect.em_passes._column_moments` is ``X[:, active].mean(axis=0)`` / ``.std(axis=0)``
  bit for bit (C, Fortran and strided ``X``, some columns inactive), holding one column at a time;
* :func:`dpcore.detect.em_passes._design_of` reads ``X`` itself when every column is active: the same
  bits as from the copy, and no copy of ``X`` (tracemalloc);
* the streamed fit trims the heap once, after dropping the start sample, only when the start sample is
  not the whole table (so the in-memory case, the demo's, is untouched); its results do not depend on it;
* the rules step trims once, after its sample frame and search are dropped (in its run on 10x under 512 MiB
  that returned 86 MiB), with the same stored rules.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

from dpcore.detect import robust_em
from dpcore.detect.em_passes import ArrayChunks, _column_moments, _design_of
from dpcore.detect.robust_em import RobustRegressionDetector
from dpcore.runtime.heap import trim_heap

MiB = 2**20


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim (Linux)")
def test_trim_heap_returns_the_free_pages_of_a_fragmented_heap():
    script = textwrap.dedent("""
        import ctypes
        from dpcore.runtime.heap import trim_heap

        def anon():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024

        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        size, n = 64 * 1024, 2048  # below the mmap threshold: from the heap
        blocks = [libc.malloc(size) for _ in range(n)]
        for b in blocks:
            ctypes.memset(b, 1, size)
        for i, b in enumerate(blocks):
            if i % 16:  # one block in 16 kept: the free holes between them cannot shrink the heap's top
                libc.free(b)
        before = anon()
        ran = trim_heap()
        print(ran, before, anon(), size * (n - n // 16))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    ran, before, after, freed = out[0] == "True", int(out[1]), int(out[2]), int(out[3])
    assert ran
    assert before - after > 0.8 * freed, (before / MiB, after / MiB, freed / MiB)


def test_trim_heap_is_harmless_when_called_again():
    assert trim_heap() in (True, False)
    x = np.arange(1_000_000, dtype=np.float64)
    trim_heap()
    assert x.sum() == 999_999 * 1_000_000 / 2


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_column_moments_equal_the_copy_bit_for_bit(layout):
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 40)) if trial % 4 == 0 else int(rng.integers(40, 60_000))
        d = int(rng.integers(1, 18))
        X = rng.normal(size=(n, 2 * d))[:, ::2] if layout == "strided" else rng.normal(size=(n, d))
        X = X * rng.uniform(0.01, 1e5) + rng.uniform(-1e4, 1e4)
        if trial % 3 == 0:
            X[:, int(rng.integers(0, d))] = rng.random(n) < 0.2  # a 0/1 column
        if layout == "F":
            X = np.asfortranarray(X)
        active = rng.random(d) < 0.8
        if trial % 5 == 0:
            active[:] = True
        mean, std = _column_moments(X, active)
        Xa = X[:, active]
        assert np.array_equal(_bits(mean), _bits(Xa.mean(axis=0)))
        assert np.array_equal(_bits(std), _bits(Xa.std(axis=0)))


def test_column_moments_hold_one_column_at_a_time():
    X = np.random.default_rng(1).normal(size=(200_000, 16))
    tracemalloc.start()
    try:
        _column_moments(X, np.ones(16, dtype=bool))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    column = X.shape[0] * 8
    assert peak < 3 * column, (peak / MiB, X.nbytes / MiB)  # the copy X[:, active] alone was 16 columns


def test_design_reads_x_itself_when_every_column_is_active():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200_000, 12)) * 40 + 3
    loc, scale = X.mean(axis=0), X.std(axis=0)
    everything = np.ones(12, dtype=bool)
    ref = np.empty((X.shape[0], 13))
    ref[:, 0] = 1.0
    np.subtract(X[:, everything], loc, out=ref[:, 1:])
    ref[:, 1:] /= scale
    tracemalloc.start()
    try:
        Z = _design_of(X, everything, loc, scale)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(_bits(Z), _bits(ref))
    assert peak < Z.nbytes + X.nbytes // 8, (peak / MiB, Z.nbytes / MiB)  # Z only, no copy of X
    some = everything.copy()
    some[[2, 7]] = False  # with inactive columns: the selected copy, as before
    Zs = _design_of(X, some, loc[some], scale[some])
    ref_s = np.empty((X.shape[0], 11))
    ref_s[:, 0] = 1.0
    np.subtract(X[:, some], loc[some], out=ref_s[:, 1:])
    ref_s[:, 1:] /= scale[some]
    assert np.array_equal(_bits(Zs), _bits(ref_s))


def _data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    X = np.column_stack([rng.normal(size=n), rng.integers(0, 2, size=n).astype(float)])
    y = 1.5 * X[:, 0] - 2.0 * X[:, 1] + rng.normal(scale=0.5, size=n)
    y[rng.random(n) < 0.05] += 25.0
    return X, y


@pytest.mark.parametrize("start_sample, trims", [(500, 1), (10**6, 0)])
def test_the_streamed_fit_trims_once_after_dropping_a_start_sample(monkeypatch, start_sample, trims):
    X, y = _data(4000, np.random.default_rng(11))
    kw = dict(random_state=3, sigma2_floor=1 / 12, start_sample=start_sample)
    calls = []
    monkeypatch.setattr(robust_em, "trim_heap", lambda: calls.append(1) or True)
    trimmed = RobustRegressionDetector(**kw).fit_chunks(ArrayChunks(X, y, rows=700))
    assert len(calls) == trims
    monkeypatch.setattr(robust_em, "trim_heap", lambda: True)  # not trimmed: the same fit, bit for bit
    plain = RobustRegressionDetector(**kw).fit_chunks(ArrayChunks(X, y, rows=700))
    for name in ("coef_", "intercept_", "sigma2_", "p_", "b_", "log_likelihood_", "K_", "n_iter_"):
        assert np.array_equal(_bits(np.atleast_1d(getattr(trimmed, name))), _bits(np.atleast_1d(getattr(plain, name))))


def test_the_rules_step_trims_once_after_its_search_with_the_same_rules(tmp_path, small_spec_path, monkeypatch):
    """The rules step hands the free heap back after its frame and search are dropped; the rules are unchanged."""
    from owner_registration import register_spec

    from dpcore.run.pipeline import ingest_stage, validate_stage
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.steps import rules as rules_step
    from dpcore.steps.common import open_stores
    from dpcore.steps.detect import run_detection_streamed

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "home"))
    settings = Settings.from_env()
    register_spec(small_spec_path, settings)
    spec = load_spec(small_spec_path)
    ing = ingest_stage(spec, settings)
    validate_stage(spec, settings, ing)
    run_detection_streamed(spec, settings, ing, rows=700)
    wh = open_stores(settings).warehouse
    sql = ("SELECT template, rank, rule, precision, recall, f1, support, n_flagged, note FROM internal.outlier_rules "
           "ORDER BY template, rank")
    calls = []
    monkeypatch.setattr(rules_step, "trim_heap", lambda: calls.append(1) or True)
    rules_step.mine_rules(spec, settings, ing, sample_rows=1000, chunk_rows=700)
    assert len(calls) == 1
    trimmed = wh.query_df(sql)
    monkeypatch.setattr(rules_step, "trim_heap", lambda: True)
    rules_step.mine_rules(spec, settings, ing, sample_rows=1000, chunk_rows=700)
    assert len(trimmed) > 0
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(trimmed, wh.query_df(sql))


def _lts_objective_whole(Z, y, B, h):
    """The trimmed objective as computed before issue 29's blocks (one (k, m) selection)."""
    R2 = np.square(y[None, :] - B @ Z.T)
    idx = np.argpartition(R2, h - 1, axis=1)[:, :h]
    return np.take_along_axis(R2, idx, axis=1).sum(axis=1), idx


@pytest.mark.parametrize("floats", [5_000, 10**9])  # several blocks of candidates; one
def test_lts_objective_in_blocks_gives_the_same_bits_and_rows(monkeypatch, floats):
    from dpcore.detect import robust_start

    monkeypatch.setattr(robust_start, "_gather_floats", lambda: floats)
    rng = np.random.default_rng(5)
    for trial in range(40):
        m, q, k = int(rng.integers(20, 3000)), int(rng.integers(1, 18)), int(rng.integers(1, 400))
        Z = rng.normal(size=(m, q))
        y = rng.normal(size=m)
        if trial % 3 == 0:  # ties among the residuals
            Z, y = np.round(Z), np.round(y)
        B = rng.normal(size=(k, q))
        h = min(m, (m + q + 1) // 2)
        obj, idx = robust_start._lts_objective(Z, y, B, h)
        ref_obj, ref_idx = _lts_objective_whole(Z, y, B, h)
        assert np.array_equal(_bits(obj), _bits(ref_obj))
        assert np.array_equal(idx, ref_idx)


@pytest.mark.parametrize("cap, less", [("512MiB", 4), ("2GiB", None)])
def test_lts_objective_holds_less_than_the_whole_selection(monkeypatch, cap, less):
    """Under 512 MiB (four blocks) at least a quarter of a (k, m) array less; under 2 GiB (one block) no more."""
    from dpcore.detect.robust_start import _lts_objective

    monkeypatch.setenv("DPR_MEMORY_LIMIT", cap)
    rng = np.random.default_rng(9)
    m, q, k = 3000, 17, 1153  # the robust start of the 10x table's widest template
    Z, y, B = rng.normal(size=(m, q)), rng.normal(size=m), rng.normal(size=(k, q))
    h = (m + q + 1) // 2
    peaks = []
    for fn in (_lts_objective_whole, _lts_objective):
        tracemalloc.start()
        try:
            kept = fn(Z, y, B, h)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        peaks.append(peak)
        del kept
    whole, blocked = peaks
    if less:
        assert blocked < whole - k * m * 8 // less, (whole / MiB, blocked / MiB)
    else:
        assert blocked <= whole + MiB, (whole / MiB, blocked / MiB)


@pytest.mark.parametrize("floats", [5_000, 10**9])  # several blocks of subsets; one
def test_elemental_subsets_in_blocks_are_the_same_subsets_and_leave_the_same_generator(monkeypatch, floats):
    from dpcore.detect import robust_start

    monkeypatch.setattr(robust_start, "_gather_floats", lambda: floats)
    for n_el, m, q in [(1153, 3000, 17), (500, 40, 3), (7, 10, 10), (1, 5, 1)]:
        a, b = np.random.default_rng(21), np.random.default_rng(21)
        got = robust_start._elemental_subsets(a, n_el, m, q)
        want = np.argpartition(b.random((n_el, m)), q - 1, axis=1)[:, :q]
        assert got.shape == (n_el, q) and np.array_equal(got, want)
        assert a.random() == b.random()  # the same numbers drawn: the generator is where it was


def test_elemental_subsets_hold_their_positions_only(monkeypatch):
    from dpcore.detect import robust_start

    monkeypatch.setenv("DPR_MEMORY_LIMIT", "512MiB")
    n_el, m, q = 1153, 3000, 17
    tracemalloc.start()
    try:
        idx = robust_start._elemental_subsets(np.random.default_rng(2), n_el, m, q)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    whole = n_el * m * 8  # one (n_el, m) array: the keys, or their positions
    assert kept < n_el * q * 8 + MiB and peak < whole, (kept / MiB, peak / MiB, whole / MiB)
    assert idx.base is None
