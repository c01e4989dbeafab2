"""Detection on tables larger than memory: the EM fit and the scoring streamed over Parquet chunks (issue 21).

Seed 004 part 1, slide "Parameters Learning": the E-step of the mixture
regression is per row and its M-step needs only sums over rows, so
:meth:`~dpcore.detect.robust_em.RobustRegressionDetector.fit_chunks` passes
over chunks of rows and keeps nothing per row. This module is its chunk
source over a warehouse export (:class:`PartitionChunks`, on
:class:`dpcore.storage.partitions.Partitions`: one Parquet row group per chunk, read
without the warehouse's lock, so templates fit concurrently in threads and a
Dask mapper can read the chunks too) and the scoring pass that writes each
chunk's scores to a private Parquet file next to the export
(:func:`fit_partitions`), which the detect step loads into
``internal.detect_scores__<t>`` with SQL.

The design matrix of every chunk comes from the public schema
(:func:`~dpcore.detect.combine.template_arrays`: bounds and full domains), so
it never depends on which rows a chunk holds. Everything here is internal:
scores and fitted parameters never leave the warehouse and its private
scratch folder; nothing is logged or warned; errors name the template and
the attribute, never values, row counts or positions (DESIGN.md, rule 6).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dpcore.runtime.chunks import serial_map
from dpcore.storage.lineage import new_nonce
from dpcore.storage.partitions import Partitions
from dpcore.release.spec import PublicSchema
from .chunk_cache import load_npy, save_npys
from .combine import Template, detector_of, fit_params, template_arrays, template_encoded
from .design import DesignColumns, design_columns
from .em_passes import _standardised
from .level_design import FactoredDesign
from .robust_em import DataSpreadError, model_parameters
from .settings import DetectorSettings
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["PartitionChunks", "StreamedFit", "fit_partitions", "template_columns"]

#: The export's column of input row positions (the validated table's ``_row``).
ROW = "_row"


def template_columns(template: Template) -> list[str]:
    """The attributes a template reads: behavioural first, then the contexts."""
    return [template.behavioural, *template.contextual]


@dataclass
class PartitionChunks:
    """Chunk source of one template over an export (the protocol of :class:`~dpcore.detect.em_passes.ArrayChunks`).

    Parameters
    ----------
    parts : dpcore.storage.partitions.Partitions
        The export: ``_row`` and at least the template's attributes, in row order.
    template : Template
    schema : dpcore.release.spec.PublicSchema
    mapper : callable, optional
        ``mapper(fn, items) -> list`` (default :func:`dpcore.runtime.chunks.serial_map`);
        not pickled (a Dask worker gets the handle without it).
    """

    parts: Partitions
    template: Template
    schema: PublicSchema
    mapper: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        import pyarrow.parquet as pq

        if self.parts.n_chunks:
            meta = pq.ParquetFile(self.parts.path).metadata
            self._sizes = np.array([meta.row_group(i).num_rows for i in range(self.parts.n_chunks)], dtype=np.int64)
        else:
            self._sizes = np.zeros(0, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)])
        empty = pd.DataFrame({c: pd.Series([], dtype="float64" if c in self.schema.numeric else "string")
                              for c in self.template.contextual})
        # the design's columns from the public schema alone (no row is read)
        cols = design_columns(empty, list(self.template.contextual), self.schema, self.template.transform_of)
        self._names, self._widths = cols.names, cols.widths

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["mapper"] = None
        return state

    @property
    def n_rows(self) -> int:
        return int(self._starts[-1])

    @property
    def n_features(self) -> int:
        return len(self._names)

    @property
    def names(self) -> list[str]:
        """Design-matrix column names (public: from the schema)."""
        return list(self._names)

    @property
    def n_chunks(self) -> int:
        return int(self.parts.n_chunks)

    def frame(self, i: int, with_row: bool = False) -> pd.DataFrame:
        """Chunk ``i``'s template attributes (and ``_row``)."""
        cols = template_columns(self.template) + ([ROW] if with_row else [])
        return self.parts.read(i, columns=cols)

    def rows(self, i: int) -> np.ndarray:
        """Chunk ``i``'s ``_row`` values (the validated table's row positions)."""
        return self.parts.read(i, columns=[ROW])[ROW].to_numpy(dtype=np.int64)

    def encoded(self, i: int) -> tuple[DesignColumns, np.ndarray]:
        """Chunk ``i``'s contexts as :class:`~dpcore.detect.design.DesignColumns` and ``y``, decoded once.

        The first call decodes the chunk's Parquet row group and encodes it
        (:func:`~dpcore.detect.combine.template_encoded`: the checks, the
        bounds' scaling, the domains' codes) and keeps the result next to the
        export (:mod:`dpcore.detect.chunk_cache`: a byte or two per categorical
        cell); the fit's later passes that need the raw rows (the robust
        start's sample, the first EM pass, the scoring) read that instead of
        Parquet (issue 29: four decodings of every chunk became one).
        """
        files = self._encoded_files(i)
        if all(f.exists() for f in files):
            got = [load_npy(f) for f in files]
            return DesignColumns(self._widths, got[:-1], self._names, got[-1].shape[0]), got[-1]
        cols, y = template_encoded(self.frame(i), self.template, self.schema)
        save_npys(files, [*cols.columns, y])
        return cols, y

    def load(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ``i`` as the detector's ``(X, y)`` (:func:`~dpcore.detect.combine.template_arrays`, from :meth:`encoded`)."""
        cols, y = self.encoded(i)
        return cols.toarray(), y

    def standardised(self, i: int, std) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ``i``'s standardised ``(Z, y)``, encoded once per standardisation and kept next to the export.

        The EM passes over the chunks tens of times with one standardisation:
        the first pass writes each chunk's ``Z`` and ``y`` as ``.npy`` files in
        a private folder next to the export (removed with it), the later ones
        read them back instead of decoding Parquet and re-encoding the
        categories. Byte for byte what :func:`~dpcore.detect.em_passes._standardised`
        returns; with a level layout in ``std`` (issue 29) that is the factored
        design, stored as its dense columns and level codes (a byte or two per
        row and categorical context instead of eight per one-hot column). Files are written to a temporary name and renamed, so
        concurrent readers (threads, Dask workers) never see half a file.

        Once a chunk's standardised files are written, its :meth:`encoded` files are removed (issue 51: the two
        caches of a template took 34 bytes a row, 2.3 GB of scratch for two templates at 100x the demo, the
        release's disk peak): the fit's later passes and its scoring read the standardised ones; a later caller
        needing the encoded rows again (another standardisation) decodes the chunk from Parquet once more, to the
        same arrays.
        """
        if std is None:
            return self.load(i)
        arrays, layout = (std[:5], std[5]) if len(std) > 5 else (std, None)
        h = hashlib.sha256()
        for part in arrays:
            h.update(np.ascontiguousarray(np.asarray(part, dtype=np.float64)).tobytes())
        if layout is not None:
            h.update(layout.key())
        folder = Path(self.parts.path).parent / f"enc-{self.template.name}-{h.hexdigest()[:16]}"
        names = ("Z", "y") if layout is None else ("D", "codes", "y")
        files = [folder / f"{i}-{name}.npy" for name in names]
        if all(f.exists() for f in files):
            got = [load_npy(f) for f in files]
            return (got[0], got[1]) if layout is None else (FactoredDesign(layout, got[0], got[1]), got[2])
        X, y = self.load(i)
        Z, ys = _standardised(X, y, std)
        save_npys(files, (Z, ys) if layout is None else (Z.D, Z.codes, ys))
        for f in self._encoded_files(i):  # the standardised files replace them (docstring)
            f.unlink(missing_ok=True)
        return Z, ys

    def _encoded_files(self, i: int) -> list[Path]:
        """:meth:`encoded`'s cache files of chunk ``i``."""
        folder = Path(self.parts.path).parent / f"raw-{self.template.name}"
        return [folder / f"{i}-c{k}.npy" for k in range(len(self._widths))] + [folder / f"{i}-y.npy"]

    def drop_caches(self) -> None:
        """Remove this template's chunk caches (:meth:`encoded`'s and :meth:`standardised`'s folders) next to the
        export, once its fit has scored every row (issue 51: they are not read again)."""
        base = Path(self.parts.path).parent
        if not base.is_dir():
            return
        mine = re.compile(re.escape(f"enc-{self.template.name}-") + "[0-9a-f]{16}")
        for folder in [base / f"raw-{self.template.name}", *(p for p in base.iterdir() if mine.fullmatch(p.name))]:
            shutil.rmtree(folder, ignore_errors=True)

    def take(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """The rows at sorted positions ``rows`` (None: all rows) as ``(X, y)``, one chunk read at a time.

        Each chunk's rows are encoded on their own (the design is the public
        schema's, row by row: :func:`~dpcore.detect.combine.template_arrays`)
        into ``X`` and ``y`` allocated once for all the rows, so one chunk's
        frame is held at a time and never a frame of all the rows (its text
        cells cost ~60 bytes each; issue 29, goal 4); the arrays are the ones
        the whole frame gives.
        """
        total = self.n_rows if rows is None else len(rows)
        X = y = None
        at = 0
        for i in range(self.n_chunks):
            if rows is not None:
                a, b = self._starts[i], self._starts[i + 1]
                lo, hi = np.searchsorted(rows, [a, b])
                if lo == hi:
                    continue
            cols, yc = self.encoded(i)
            if rows is not None:
                local = rows[lo:hi] - a
                cols, yc = cols.take(local), yc[local]
            Xc = cols.toarray()
            del cols
            if X is None:
                X = np.empty((total, Xc.shape[1]), dtype=Xc.dtype)
                y = np.empty(total, dtype=yc.dtype)
            X[at:at + len(yc)] = Xc
            y[at:at + len(yc)] = yc
            at += len(yc)
        if X is None:  # no row taken: the arrays of an empty frame of the template's attributes
            X, y, _ = template_arrays(self._empty(), self.template, self.schema)
        return X, y

    def _empty(self) -> pd.DataFrame:
        """An empty frame of the template's attributes, typed from the public schema."""
        return pd.DataFrame({c: pd.Series([], dtype="float64" if c in self.schema.numeric else "string")
                             for c in template_columns(self.template)})

    def map(self, fn, state) -> list:
        """``mapper(fn, [(self, i, state) for every chunk])``."""
        return (self.mapper or serial_map)(fn, [(self, i, state) for i in range(self.n_chunks)])


def score_chunk(item) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's ``(_row, score)``: the fitted detector's posterior log-odds (a module-level function a mapper can ship).

    From the chunk's standardised rows in the chunk cache (:meth:`PartitionChunks.standardised`, written
    by the EM's first pass) with :meth:`~dpcore.detect.robust_em.RobustRegressionDetector.standardised_scores`:
    the values of ``decision_function`` on the chunk's rows, without encoding them again.
    """
    src, i, det = item
    if det._constant:
        X, y = src.load(i)
        return src.rows(i), det.decision_function(X, y)
    # the chunk as the fit's passes standardised it (the chunk cache): decision_function's values, bit for bit
    Z, ys = src.standardised(i, (*det._std(), det._layout))
    return src.rows(i), det.standardised_scores(Z, ys)


@dataclass
class StreamedFit:
    """A template fitted over chunks; its scores are in a private Parquet file (``_row``, ``score``).

    Attributes
    ----------
    template : Template
    params : dict
        As :attr:`dpcore.detect.combine.TemplateFit.params`; ``threshold`` is
        None until the detect step has ranked the scores in the warehouse.
    scores_path : Path
        Parquet file next to the export (removed with it).
    K : int
        Records the filter labels: the top ``K`` scores, ties by lower row.
    export_path : Path or None
        The export the fit read (its rows in the order of the score file's rows).
    """

    template: Template
    params: dict
    scores_path: Path
    K: int
    export_path: Path | None = None


def fit_partitions(
    parts: Partitions,
    template: Template,
    schema: PublicSchema,
    settings: DetectorSettings = DetectorSettings(),
    *,
    mapper=serial_map,
) -> StreamedFit:
    """Fit one filter over an export's chunks and write every row's score next to it.

    Seed 004, slides "Outlier Detector Overview" and "Parameters Learning":
    :meth:`~dpcore.detect.robust_em.RobustRegressionDetector.fit_chunks` (the
    same fit as :func:`~dpcore.detect.combine.fit_template` on the whole
    table), then one scoring pass, chunk by chunk (one chunk's scores in
    memory at a time), into ``scores-<nonce>.parquet`` in the export's
    private folder (mode 0600).

    Parameters
    ----------
    parts : Partitions
        Export of ``_row`` and the template's attributes, in row order.
    template, schema, settings
        As :func:`~dpcore.detect.combine.fit_template`.
    mapper : callable
        Runs the per-chunk work (default: in this process).

    Returns
    -------
    StreamedFit

    Raises
    ------
    KeyError, ValueError
        As :func:`~dpcore.detect.combine.fit_template`, prefixed with the
        template's name; except for the data-dependent ones, which give an
        unfitted filter (:func:`_unfitted`; the reason in its params only):
        fewer rows than the model's parameters, and a spread that leaves no
        finite scale (:class:`~dpcore.detect.robust_em.DataSpreadError`).
    """
    src = PartitionChunks(parts, template, schema, mapper)
    det, floor = detector_of(template, schema, settings)
    path = Path(parts.path).parent / f"scores-{new_nonce(8)}.parquet"
    if src.n_rows < model_parameters(src.n_features):  # fewer rows than parameters: an unfitted filter, not an abort
        return _unfitted(src, template, floor, path)
    try:
        det.fit_chunks(src)
    except DataSpreadError as exc:  # the data's spread (private): an unfitted filter, not an abort
        return _unfitted(src, template, floor, path, exc.code)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith(f"template {template.name!r}") else f"template {template.name!r}: {msg}") from None
    with _score_writer(path) as write:
        for i in range(src.n_chunks):
            write(*(mapper or serial_map)(score_chunk, [(src, i, det)])[0])
    src.drop_caches()  # every row scored: the template's chunk caches are not read again (issue 51)
    params = fit_params(template, det, src.names, floor, src.n_rows, None)
    return StreamedFit(template=template, params=params, scores_path=path, K=int(det.K_),
                      export_path=Path(parts.path))


@contextmanager
def _score_writer(path: Path):
    """A private (0600) Parquet file of ``(_row, score)``, without dictionaries; yields ``write(rows, scores)`` for one chunk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    schema_pa = pa.schema([(ROW, pa.int64()), ("score", pa.float64())])
    # no dictionary: every _row and nearly every score is distinct, and trying one first made writing
    # the scores about twice as slow (issue 29, BENCHMARKS "detect_blas")
    with pq.ParquetWriter(path, schema_pa, use_dictionary=False) as writer:
        yield lambda rows, scores: writer.write_table(pa.table({ROW: rows, "score": scores}, schema=schema_pa))


def _unfitted(src: PartitionChunks, template: Template, floor, path: Path, code: str = "too_few_rows") -> StreamedFit:
    """The filter of a table the model cannot be fitted to: no fit, no score, no label.

    Two private facts lead here: fewer rows than the model has parameters
    (``code`` ``too_few_rows``), or a spread of the data that leaves the fit
    no finite scale (a :class:`~dpcore.detect.robust_em.DataSpreadError`:
    ``x_scale_overflow``, ``y_scale_overflow``, ``sigma2_floor_overflow``;
    issue 28, section 6). Neither is an error after the release's earlier
    steps have charged (DESIGN.md, rule 8): every row gets a missing score
    (NaN), the filter labels no record (``K = 0``), and the params say why
    (``diagnostics``: ``code``), in ``internal.detect_models`` only.
    """
    with _score_writer(path) as write:
        for i in range(src.n_chunks):
            rows = src.frame(i, with_row=True)[ROW].to_numpy(dtype=np.int64)
            write(rows, np.full(rows.shape[0], np.nan))
    params = fit_params(template, None, src.names, floor, src.n_rows, None, code)
    return StreamedFit(template=template, params=params, scores_path=path, K=0, export_path=Path(src.parts.path))
