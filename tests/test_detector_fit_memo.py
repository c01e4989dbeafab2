"""tests/detector_fit_memo.py: the flow tests' memo of the detector's fits answers exactly what the fit returns."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest


@pytest.mark.real_detector_fit
def test_the_memo_answers_a_repeated_fit_with_the_fits_own_result_and_fits_other_inputs_for_real(
        dpr_home, small_spec_path):
    import detector_fit_memo as memo
    from test_detect_stream import _prepared

    from dpcore.runtime.pooled_map import pooled_map
    from dpcore.steps.detect import close_detection_partitions, fit_streamed, open_detection_partitions, templates_of

    spec, settings, ing = _prepared(dpr_home, small_spec_path)
    a, b = templates_of(spec)[:2]
    parts = open_detection_partitions(spec, settings, ing, rows=997)
    try:
        real = fit_streamed(parts, a, spec)
        before = dict(memo.COUNTS)
        first = memo.memo_fit_streamed(parts, a, spec, mapper=pooled_map)
        again = memo.memo_fit_streamed(parts, a, spec, mapper=pooled_map)
        other = memo.memo_fit_streamed(parts, b, spec, mapper=pooled_map)
        assert memo.COUNTS["hits"] - before["hits"] == 1 and memo.COUNTS["misses"] - before["misses"] == 2
        for fit in (first, again):
            assert fit.params == real.params and fit.K == real.K and fit.template == a
            assert fit.scores_path != real.scores_path and fit.scores_path.parent == real.scores_path.parent
            assert (fit.scores_path.stat().st_mode & 0o777) == 0o600
            pd.testing.assert_frame_equal(pd.read_parquet(fit.scores_path), pd.read_parquet(real.scores_path),
                                          check_exact=True)
        assert other.params != real.params  # another template: fitted, not answered
        again.params["K"] = -1  # a caller changing its copy does not change the memo
        assert memo.memo_fit_streamed(parts, a, spec, mapper=pooled_map).params == real.params
        dask_like = memo.memo_fit_streamed(parts, a, spec, mapper=lambda fn, items: [fn(x) for x in items])
        assert dataclasses.asdict(dask_like)["params"] == real.params  # another mapper: fitted for real
        assert memo.COUNTS["misses"] - before["misses"] == 3
    finally:
        close_detection_partitions(parts)
