"""dpcore.runtime.pooled_map: chunks of every caller on one pool of a thread per core, the same numbers as serial_map.

The detector's concurrent fits send their EM passes' chunks to the pool (tasks.detect, issue 29): results come
back in item order, so each fit adds its chunks' sums in the same order and gets the same bits; a failing chunk
raises at the caller; a call from a pool thread runs in place.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from dpcore.runtime.chunks import serial_map
from dpcore.runtime.pooled_map import MAX_THREADS, pool_size, pooled_map


def _slow_square(x):
    time.sleep(0.002 * (x % 3))  # finish out of order
    return x * x, threading.current_thread().name


def test_results_come_back_in_item_order_from_the_pool():
    out = pooled_map(_slow_square, range(40))
    assert [v for v, _ in out] == [x * x for x in range(40)]
    assert {name.split("_")[0] for _, name in out} == {"dpr-chunks"}
    assert len({name for _, name in out}) <= pool_size()
    assert 1 <= pool_size() <= MAX_THREADS  # each thread holds one chunk: bounded whatever the core count


def _fail_on_7(x):
    if x == 7:
        raise ValueError("chunk 7")
    return x


def test_the_first_failing_item_raises_at_the_caller():
    with pytest.raises(ValueError, match="chunk 7"):
        pooled_map(_fail_on_7, range(20))
    assert pooled_map(_fail_on_7, range(7)) == list(range(7))  # the pool still works


def _nested(x):
    return sum(pooled_map(abs, [-x, x]))  # a pool thread never waits on the pool


def test_a_call_from_a_pool_thread_runs_in_place():
    assert pooled_map(_nested, range(3 * pool_size())) == [2 * x for x in range(3 * pool_size())]


def test_two_concurrent_fits_through_the_pool_equal_serial_fits_bit_for_bit(dpr_home, small_spec_path):
    """The demo sample's two templates fitted at once (as the flow's mapped tasks) over 97-row chunks: every
    parameter and every score equal to one fit at a time with serial_map."""
    from test_detect_stream import _prepared

    from dpcore.steps.detect import close_detection_partitions, fit_streamed, open_detection_partitions, templates_of

    spec, settings, ing = _prepared(dpr_home, small_spec_path)
    parts = open_detection_partitions(spec, settings, ing, rows=97)
    try:
        serial = [fit_streamed(parts, t, spec, serial_map) for t in templates_of(spec)]
        with ThreadPoolExecutor(2) as ex:
            pooled = list(ex.map(lambda t: fit_streamed(parts, t, spec, pooled_map), templates_of(spec)))
        for a, b in zip(serial, pooled):
            assert a.K == b.K and a.params == b.params
            pd.testing.assert_frame_equal(pd.read_parquet(a.scores_path), pd.read_parquet(b.scores_path),
                                          check_exact=True)
            assert np.isfinite(pd.read_parquet(b.scores_path)["score"]).all()
    finally:
        close_detection_partitions(parts)
