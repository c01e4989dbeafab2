"""Cell index: the once-per-(dataset, metric) precomputation behind fast PCOR verification.

Seed 003 (Shafieinejad et al., SIGMOD'21) evaluates ``f_M(D_C, V)`` (Section 3)
by filtering the data to the population ``D_C`` and re-running a detector, for
every context the search visits; Section 6.2 reports minutes per outlier.
Here every record is assigned once to its **cell** -- the combination of its
context-attribute values, i.e. the context with exactly one bit per
attribute -- and a context's population is a union of cells.  Because a
context is a conjunction over attributes of per-attribute value sets, its
cell mask is the outer product of ``m`` per-attribute masks, so any additive
per-cell statistic of ``D_C`` is a multilinear contraction of the per-cell
statistic tensor (shaped by the domain sizes) with those masks: ``O(cells)``
per context, vectorised over a batch of contexts.

What is precomputed
-------------------
Everything the verifiers need about a population is a function of the
multiset of ``(cell, metric value)`` pairs, so the index is built from
**aggregates**: the distinct ``(codes, value)`` pairs of the data with their
multiplicities (:meth:`CellIndex.from_aggregates`; one ``GROUP BY`` in the
warehouse, issue 21), and its memory grows with the occupied
``(cell, value)`` pairs, never with the rows.  From them:

* Per cell: count, sum and sum of squares of the **centred** metric
  ``x - centre`` (the centre is the rounded median for integer-valued metrics,
  so all sums of integer metrics are exact in float64 whatever the order of
  summation; the median otherwise, taken from the value counts), and the
  min / max of the metric.
* Sorted values: ``uniq`` (the distinct metric values) and, for every
  occupied ``(cell, value)`` pair, one entry with global key
  ``cell * n_unique + rank(value)``; the entry keys are sorted, so a single
  ``np.searchsorted`` answers "how many values of each cell are below x" for
  every cell of a context at once, and ties are stored once with their
  multiplicity (integer metrics such as ``arr_delay`` have a few hundred
  distinct values among 327,346 rows).

The records a search is *about* (the explained records ``V``) are **held
rows**, attached by :meth:`CellIndex.with_rows`: their codes, value, cell and
value rank, numbered ``0 .. n_held - 1``; ``row`` arguments of the index, the
verifiers and the evaluator are positions among them.  Each must be a record
of the indexed population (its ``(cell, value)`` pair occupied).
:meth:`CellIndex.build` is the row-based entry point (tests, benchmarks): it
aggregates the rows in numpy, calls :meth:`from_aggregates` and holds every
row, so row ``r`` is the ``r``-th record given.
"""
from __future__ import annotations

import numpy as np

from dpcore.mechanisms.pcor.contexts import ContextSpace

__all__ = ["CellIndex", "DENSE_CELL_LIMIT"]

DENSE_CELL_LIMIT = 1 << 22  # above this many cells the dense tensors are not built (occupied-cell path)


def _checked_records(space: ContextSpace, codes, metric, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and metric of records (or aggregate entries) validated: shapes, domain range, finite values.

    Errors name the argument and the column, never a value, a row or a count (DESIGN rule 6).
    """
    codes = np.asarray(codes)
    metric = np.asarray(metric, dtype=np.float64).reshape(-1)
    if codes.ndim != 2 or codes.shape[1] != space.m:
        raise ValueError(f"codes must have shape (N, {space.m}), got {codes.shape}")
    if codes.shape[0] != metric.shape[0]:
        raise ValueError(f"codes and metric must have one entry per {what} each (their lengths differ)")
    if not np.isfinite(metric).all():
        raise ValueError("metric: some rows are not finite numbers (declare the metric nullable: false)")
    codes = codes.astype(np.int32, copy=False)
    if (codes < 0).any() or (codes >= space.sizes[None, :]).any():
        _, i = np.argwhere((codes < 0) | (codes >= space.sizes[None, :]))[0]
        raise ValueError(f"codes: column {space.attributes[int(i)]!r} holds codes out of the domain range")
    return codes, metric


def _median_of_counts(uniq: np.ndarray, count: np.ndarray) -> float:
    """``np.median`` of the multiset holding ``uniq[i]`` ``count[i]`` times, bit for bit.

    ``np.median`` takes the middle element (odd size) or ``np.mean`` of the
    two middle ones (even size) of the sorted data; here they are located on
    the cumulative counts of the sorted distinct values and averaged by the
    same ``np.mean``.
    """
    cum = np.cumsum(count)
    n = int(cum[-1])
    middle = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2]
    return float(np.mean(uniq[np.searchsorted(cum, middle, side="right")]))


class CellIndex:
    """Per-cell statistics and sorted values of one metric over one context space.

    Build with :meth:`from_aggregates` (plus :meth:`with_rows` for the
    explained records) or, from records, :meth:`build`.  Attributes are
    read-only by convention.

    Attributes
    ----------
    space : ContextSpace
    n_rows : int, records of the indexed population; n_cells : int
    centre : float, subtracted from the metric before the sums (``integer_metric``: whether it is an integer)
    occupied : (n_occ,) int64 ids of the non-empty cells, ascending
    occupied_codes, occupied_bits : (n_occ, m) int64 value codes / context bit of each occupied cell
    occupied_count : (n_occ,) int64; occupied_sum, occupied_sumsq : (n_occ,) float64 of ``x - centre``
    occupied_min, occupied_max : (n_occ,) float64 metric range of each occupied cell
    occupied_entry_start, occupied_entry_stop : (n_occ,) int64 range of each cell's entries
    cell_count : (n_cells,) int64 (property, dense)
    sum_tensor : (|A_1|, ..., |A_m|, 3) float64 count / sum / sum of squares per cell (dense only)
    minmax_tensor : (|A_1|, ..., |A_m|, 2) float64 ``(min, -max)`` per cell, ``+inf`` if empty (dense only)
    uniq : (U,) sorted distinct metric values
    entry_key : (E,) int64 sorted ``cell * U + rank``; entry_count : (E,) int64 multiplicity
    entry_rank, entry_cell : (E,) int64; entry_value : (E,) float64 ``uniq[entry_rank]``
    entry_cum : (E + 1,) int64 prefix sums of ``entry_count``; cell_ptr : (n_cells + 1,) int64 first entry of each cell
    dense : bool, whether the dense per-cell tensors are used for contractions
    n_held : int, held rows (the records ``row`` arguments refer to)
    codes : (n_held, m) int32 codes of the held rows;  metric : (n_held,) float64 their values
    cell_of_row : (n_held,) int64 cell of each held row; row_rank : (n_held,) int64 position of its value in ``uniq``
    """

    def __init__(self):  # pragma: no cover - use from_aggregates() or build()
        raise TypeError("use CellIndex.from_aggregates(space, codes, metric, counts) or CellIndex.build(space, codes, "
                        "metric)")

    # ------------------------------------------------------------------ build

    @classmethod
    def from_aggregates(cls, space: ContextSpace, codes, metric, counts, *,
                        dense_limit: int = DENSE_CELL_LIMIT) -> "CellIndex":
        """Precompute the index from ``(codes, value) -> multiplicity`` aggregates (no held row).

        The statistics of every population depend only on how many records
        share each ``(cell, value)`` pair, so this is the whole input the
        verifiers of Section 6.5 of seed 003 need; e.g. the result of
        ``SELECT <context attributes>, <metric>, count(*) ... GROUP BY ALL``
        with the attributes encoded by :meth:`ContextSpace.encode`.  Time
        and memory grow with the number of entries, not with the records
        they count.

        Parameters
        ----------
        space : ContextSpace
            The context attributes and their public domains.
        codes : array_like
            ``(E, m)`` integer codes from :meth:`ContextSpace.encode`.
        metric : array_like
            ``(E,)`` metric values (Section 3's ``M``), finite.
        counts : array_like
            ``(E,)`` multiplicities, integers ``>= 1``. Repeated
            ``(codes, value)`` pairs are merged (their counts add), so partial
            aggregates of chunks can be passed together.
        dense_limit : int, optional
            Largest number of cells for which dense per-cell tensors are used
            in the batched contractions; larger spaces use the occupied cells
            only (same results).

        Returns
        -------
        CellIndex
            With no held row (:meth:`with_rows` adds the explained records).

        Raises
        ------
        ValueError
            Shape mismatch, codes out of range, a non-finite metric value, a
            count that is not a positive integer, or no record at all (the
            message names the argument and the column, never a value).

        Notes
        -----
        Integer metrics (the demo's ``arr_delay``) give sums that are exact,
        hence equal to a row-by-row summation bit for bit. For other metrics
        the per-cell sums add ``count * (x - centre)`` per distinct value in
        ``(cell, value)`` order: the same sums up to rounding, and independent
        of the order of the records (a row-by-row sum is not).
        """
        self = object.__new__(cls)
        codes, metric = _checked_records(space, codes, metric, "aggregate entry")
        counts = np.asarray(counts).reshape(-1)
        if counts.shape[0] != metric.shape[0]:
            raise ValueError("counts must have one entry per aggregate entry (the lengths differ)")
        if counts.size and not (np.issubdtype(counts.dtype, np.integer)
                                or (np.issubdtype(counts.dtype, np.floating)
                                    and bool(np.all(counts == np.round(counts))))):
            raise ValueError("counts: some entries are not integers")
        counts = counts.astype(np.int64)
        if (counts < 1).any():
            raise ValueError("counts: some entries are not positive (every aggregate entry counts >= 1 record)")
        if counts.size == 0:
            raise ValueError("the dataset is empty")
        self.space = space
        sizes = space.sizes
        self.n_cells = int(np.prod(sizes, dtype=np.int64))
        strides = np.ones(space.m, dtype=np.int64)
        for i in range(space.m - 2, -1, -1):
            strides[i] = strides[i + 1] * sizes[i + 1]
        self.strides = strides

        # sorted values: (cell, rank) entries with multiplicities (repeated pairs merged)
        self.uniq = np.unique(metric)
        self.n_unique = int(self.uniq.size)
        keys = (codes.astype(np.int64) @ strides) * self.n_unique + np.searchsorted(self.uniq, metric)
        self.entry_key, inv = np.unique(keys, return_inverse=True)
        if self.entry_key.size == keys.size:  # already distinct (a GROUP BY): place the counts, no float detour
            ecount = np.empty_like(counts)
            ecount[inv.reshape(-1)] = counts
        else:
            ecount = np.zeros(self.entry_key.size, dtype=np.int64)
            np.add.at(ecount, inv.reshape(-1), counts)
        self.entry_count = ecount
        self.entry_rank = self.entry_key % self.n_unique
        self.entry_cell = self.entry_key // self.n_unique
        self.entry_value = self.uniq[self.entry_rank]
        self.entry_cum = np.concatenate([[0], np.cumsum(self.entry_count)]).astype(np.int64)
        self.n_rows = int(self.entry_cum[-1])

        # centre: the median of the records (from the counts of each distinct value), rounded for integer metrics
        integer = bool(np.all(self.uniq == np.round(self.uniq)))
        value_count = np.bincount(self.entry_rank, weights=self.entry_count, minlength=self.n_unique)
        med = _median_of_counts(self.uniq, value_count.astype(np.int64))  # counts < 2**53: exact in float64
        self.centre = float(np.round(med)) if integer else med
        self.integer_metric = integer

        # per occupied cell: count, centred sum and sum of squares, min, max
        starts = np.flatnonzero(np.concatenate([[True], self.entry_cell[1:] != self.entry_cell[:-1]]))
        occupied = self.entry_cell[starts]
        self.occupied = occupied.astype(np.int64)
        self.occupied_codes = (occupied[:, None] // strides[None, :]) % sizes[None, :]
        self.occupied_bits = space.offsets[None, :] + self.occupied_codes
        cell_of_entry = np.repeat(np.arange(starts.size), np.diff(np.append(starts, self.entry_key.size)))
        self.occupied_count = np.add.reduceat(self.entry_count, starts).astype(np.int64)
        x = self.entry_value - self.centre
        self.occupied_sum = np.bincount(cell_of_entry, weights=self.entry_count * x, minlength=starts.size)
        self.occupied_sumsq = np.bincount(cell_of_entry, weights=self.entry_count * (x * x), minlength=starts.size)
        first = starts.astype(np.int64)
        last = np.append(starts[1:], self.entry_key.size).astype(np.int64)
        self.occupied_entry_start = first
        self.occupied_entry_stop = last
        self.occupied_min = self.entry_value[first]
        self.occupied_max = self.entry_value[last - 1]

        self.dense = self.n_cells <= dense_limit
        if self.dense:
            shape = tuple(int(s) for s in sizes)
            sums = np.zeros((self.n_cells, 3))
            sums[occupied, 0] = self.occupied_count
            sums[occupied, 1] = self.occupied_sum
            sums[occupied, 2] = self.occupied_sumsq
            self.sum_tensor = sums.reshape(shape + (3,))
            mm = np.empty((self.n_cells, 2))
            mm[:, 0] = np.inf
            mm[:, 1] = np.inf
            mm[occupied, 0] = self.occupied_min
            mm[occupied, 1] = -self.occupied_max
            self.minmax_tensor = mm.reshape(shape + (2,))  # (min, -max): both reduce with np.minimum
        return self._hold(np.zeros((0, space.m), dtype=np.int32), np.zeros(0), np.zeros(0, dtype=np.int64),
                          np.zeros(0, dtype=np.int64))

    @classmethod
    def build(cls, space: ContextSpace, codes, metric, *, dense_limit: int = DENSE_CELL_LIMIT) -> "CellIndex":
        """Precompute the index from records, holding every record (row ``r`` is the ``r``-th record).

        A thin wrapper: the records are aggregated in numpy into distinct
        ``(codes, value)`` pairs with counts, passed to
        :meth:`from_aggregates`, and all held (:meth:`with_rows`).  Memory
        grows with the records; pipelines build from warehouse aggregates
        instead.

        Parameters
        ----------
        space : ContextSpace
            The context attributes and their public domains.
        codes : array_like
            ``(N, m)`` integer codes from :meth:`ContextSpace.encode`.
        metric : array_like
            ``(N,)`` metric attribute ``M`` (Section 3), finite.
        dense_limit : int, optional
            See :meth:`from_aggregates`.

        Returns
        -------
        CellIndex

        Raises
        ------
        ValueError
            Shape mismatch, codes out of range, or a non-finite metric value
            (the message names the column, not a value or a row).
        """
        codes, metric = _checked_records(space, codes, metric, "record")
        if codes.shape[0] == 0:
            raise ValueError("the dataset is empty")
        strides = np.ones(space.m, dtype=np.int64)
        for i in range(space.m - 2, -1, -1):
            strides[i] = strides[i + 1] * space.sizes[i + 1]
        uniq, rank = np.unique(metric, return_inverse=True)
        keys = (codes.astype(np.int64) @ strides) * uniq.size + rank.reshape(-1)
        _, first, count = np.unique(keys, return_index=True, return_counts=True)
        index = cls.from_aggregates(space, codes[first], metric[first], count, dense_limit=dense_limit)
        return index.with_rows(codes, metric)

    def with_rows(self, codes, metric) -> "CellIndex":
        """This index holding the given records as rows ``0 .. n - 1`` (the records to explain).

        Shares every population statistic with ``self`` (no copy); only the
        held rows differ.  Each record must belong to the indexed population:
        its ``(cell, value)`` pair occupied.

        Parameters
        ----------
        codes : array_like
            ``(n, m)`` integer codes from :meth:`ContextSpace.encode`.
        metric : array_like
            ``(n,)`` metric values.

        Returns
        -------
        CellIndex

        Raises
        ------
        ValueError
            Shape mismatch, codes out of range, a non-finite value, or a
            record that is not in the indexed population (no value named).
        """
        codes, metric = _checked_records(self.space, codes, metric, "record")
        cell = codes.astype(np.int64) @ self.strides
        rank = np.minimum(np.searchsorted(self.uniq, metric), self.n_unique - 1)
        key = cell * self.n_unique + rank
        pos = np.minimum(np.searchsorted(self.entry_key, key), self.entry_key.size - 1)
        if not (np.all(self.uniq[rank] == metric) and np.all(self.entry_key[pos] == key)):
            raise ValueError("rows: some records are not in the indexed population (their cell and metric value "
                             "were not aggregated)")
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        return out._hold(codes, metric, cell, rank.astype(np.int64))

    def _hold(self, codes, metric, cell, rank) -> "CellIndex":
        self.codes = codes
        self.metric = metric
        self.cell_of_row = cell
        self.row_rank = rank
        self.n_held = int(metric.shape[0])
        return self

    # ------------------------------------------------------------------ per-cell views

    @property
    def cell_count(self) -> np.ndarray:
        out = np.zeros(self.n_cells, dtype=np.int64)
        out[self.occupied] = self.occupied_count
        return out

    @property
    def cell_ptr(self) -> np.ndarray:
        return np.searchsorted(self.entry_key, np.arange(self.n_cells + 1, dtype=np.int64) * self.n_unique)

    def x_centred(self, row: int) -> float:
        """The centred metric value of held row ``row``."""
        return float(self.metric[row] - self.centre)

    def row_codes(self, row: int) -> np.ndarray:
        """``(m,)`` codes of held row ``row`` (``IndexError`` when out of range)."""
        row = self.check_row(row)
        return self.codes[row].astype(np.int64)

    def check_row(self, row) -> int:
        """Validate a held-row position and return it as an int."""
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)):
            raise TypeError(f"row must be an integer record position, got {type(row).__name__}")
        row = int(row)
        if not 0 <= row < self.n_held:
            raise IndexError("row is out of range of the index's held records")  # no sizes: private
        return row

    # ------------------------------------------------------------------ batched context statistics

    def _masks(self, contexts) -> tuple[np.ndarray, list[np.ndarray]]:
        ctx = self.space._as_batch(contexts)
        offs, sizes = self.space.offsets, self.space.sizes
        return ctx, [ctx[:, o: o + s] for o, s in zip(offs, sizes)]

    def occupied_mask(self, contexts) -> np.ndarray:
        """``(B, n_occ)`` bool: which occupied cells each context covers (outer product of attribute masks)."""
        ctx = self.space._as_batch(contexts)
        out = np.ones((ctx.shape[0], self.occupied.size), dtype=bool)
        for i in range(self.space.m):
            out &= ctx[:, self.occupied_bits[:, i]]
        return out

    def context_sums(self, contexts) -> np.ndarray:
        """``(B, 3)`` float64: count, sum and sum of squares of the centred metric over each ``D_C``.

        Dense path: sequential batched contraction of the ``(|A_1|, ..., |A_m|, 3)``
        tensor with each attribute's ``(B, |A_i|)`` mask (``O(B * cells)``);
        otherwise a masked sum over the occupied cells.
        """
        ctx, masks = self._masks(contexts)
        b = ctx.shape[0]
        if b == 0:
            return np.zeros((0, 3))
        if not self.dense:
            return self.occupied_mask(ctx).astype(np.float64) @ np.stack(
                [self.occupied_count.astype(np.float64), self.occupied_sum, self.occupied_sumsq], axis=1)
        m = self.space.m
        # first attribute: (B, s0) x (s0, rest) -> (B, rest)
        r = masks[0].astype(np.float64) @ self.sum_tensor.reshape(int(self.space.sizes[0]), -1)
        for i in range(1, m):
            s = int(self.space.sizes[i])
            r = r.reshape(b, s, -1)
            r = np.einsum("bsr,bs->br", r, masks[i].astype(np.float64))
        return r.reshape(b, 3)

    def context_minmax(self, contexts) -> tuple[np.ndarray, np.ndarray]:
        """``(B,)`` min and ``(B,)`` max of the metric over each ``D_C`` (``+inf``/``-inf`` when empty)."""
        ctx, masks = self._masks(contexts)
        b = ctx.shape[0]
        if not self.dense:
            cm = self.occupied_mask(ctx)
            mn = np.where(cm, self.occupied_min[None, :], np.inf).min(axis=1, initial=np.inf)
            mx = np.where(cm, self.occupied_max[None, :], -np.inf).max(axis=1, initial=-np.inf)
            return mn, mx
        r = self.minmax_tensor.reshape(int(self.space.sizes[0]), -1)
        if b == 1:  # one context (each verification of a search): reduce only its values' slices, no full-size
            # temporary per attribute (the same minima: most of a 2,000-row release's PCOR time, issue 48 §6)
            for i in range(self.space.m):
                r = r.reshape(int(self.space.sizes[i]), -1)[masks[i][0]].min(axis=0, initial=np.inf)
            return r[0:1], -r[1:2]
        r = np.where(masks[0][:, :, None], r[None, :, :], np.inf).min(axis=1)
        for i in range(1, self.space.m):
            s = int(self.space.sizes[i])
            r = r.reshape(b, s, -1)
            r = np.where(masks[i][:, :, None], r, np.inf).min(axis=1)
        r = r.reshape(b, 2)
        return r[:, 0], -r[:, 1]

    def population_size(self, contexts) -> np.ndarray:
        """``|D_C|`` for each context (the population-size utility of Section 3.2.1).

        Parameters
        ----------
        contexts : array_like
            ``(B, t)`` bool.

        Returns
        -------
        numpy.ndarray
            ``(B,)`` int64.
        """
        ctx, masks = self._masks(contexts)
        b = ctx.shape[0]
        if b == 0:
            return np.zeros(0, dtype=np.int64)
        if not self.dense:
            return self.occupied_mask(ctx).astype(np.int64) @ self.occupied_count
        r = masks[0].astype(np.float64) @ self.sum_tensor[..., 0].reshape(int(self.space.sizes[0]), -1)
        for i in range(1, self.space.m):
            s = int(self.space.sizes[i])
            r = np.einsum("bsr,bs->br", r.reshape(b, s, -1), masks[i].astype(np.float64))
        return np.rint(r.reshape(b)).astype(np.int64)

    def overlap(self, contexts, reference) -> np.ndarray:
        """``|D_C ∩ D_ref|`` for each context (the overlap utility of Section 3.2.2).

        The intersection of two contexts' populations is the population of
        their bitwise AND (both are conjunctions of per-attribute value sets).

        Parameters
        ----------
        contexts : array_like
            ``(B, t)`` bool.
        reference : array_like
            ``(t,)`` bool, e.g. the starting context ``C_V``.

        Returns
        -------
        numpy.ndarray
            ``(B,)`` int64.
        """
        ctx = self.space._as_batch(contexts)
        ref = self.space._as_single(reference)
        return self.population_size(ctx & ref[None, :])

    # ------------------------------------------------------------------ sorted-value queries

    def count_in_rank_range(self, cells, rank_lo, rank_hi) -> np.ndarray:
        """Number of records of each cell whose value rank lies in ``[rank_lo, rank_hi)``.

        Parameters
        ----------
        cells : array_like of int
            Cell ids (any shape).
        rank_lo, rank_hi : array_like of int
            Broadcastable to ``cells``; ranks into :attr:`uniq`.

        Returns
        -------
        numpy.ndarray
            int64 counts, the broadcast shape; one ``searchsorted`` per bound
            over the global sorted entry keys.
        """
        cells = np.asarray(cells, dtype=np.int64)
        base = cells * self.n_unique
        lo = np.searchsorted(self.entry_key, base + np.asarray(rank_lo, dtype=np.int64), side="left")
        hi = np.searchsorted(self.entry_key, base + np.asarray(rank_hi, dtype=np.int64), side="left")
        return self.entry_cum[hi] - self.entry_cum[lo]

    # ------------------------------------------------------------------ enumeration of all contexts containing a record

    def subset_keys(self, attribute: int, code: int) -> np.ndarray:
        """Packed-key parts of every value subset of one attribute that contains ``code``.

        Subset ``p`` (``0 <= p < 2**(|A_i| - 1)``) holds ``code`` plus the
        ``j``-th other value of the domain (domain order, skipping ``code``)
        for every set bit ``j`` of ``p``.

        Returns
        -------
        numpy.ndarray
            ``(2**(|A_i| - 1),)`` uint64 key bits of the attribute's part.
        """
        s = int(self.space.sizes[attribute])
        off = int(self.space.offsets[attribute])
        free = [j for j in range(s) if j != code]
        p = np.arange(1 << (s - 1), dtype=np.uint64)
        key = np.full(p.shape, np.uint64(1) << np.uint64(off + code), dtype=np.uint64)
        for j, f in enumerate(free):
            key |= ((p >> np.uint64(j)) & np.uint64(1)) << np.uint64(off + f)
        return key

    @staticmethod
    def _expand_axis(tensor: np.ndarray, code: int, op, base: np.ndarray | None = None,
                     free: list | None = None) -> np.ndarray:
        """Subset expansion along axis 0 (zeta transform restricted to supersets of ``{code}``).

        ``out[p] = op-reduction of tensor[code] and tensor[f_j]`` for the set
        bits ``j`` of ``p``, built by doubling: ``out[2**j: 2**(j+1)] =
        op(out[: 2**j], tensor[f_j])``.  Costs ``O(size of out)``.
        ``base`` (optional) replaces ``tensor[code]`` as the start value and
        ``free`` the list of positions ``f_j`` (default: every position but
        ``code``).
        """
        s = tensor.shape[0]
        if free is None:
            free = [j for j in range(s) if j != code]
        out = np.empty((1 << len(free),) + tensor.shape[1:], dtype=tensor.dtype)
        out[0] = tensor[code] if base is None else base
        for j, f in enumerate(free):
            h = 1 << j
            op(out[:h], tensor[f], out=out[h: 2 * h])
        return out

    def iter_enumeration(self, row: int, chunk: int = 1 << 20):
        """Statistics of every context containing record ``row``, chunk by chunk.

        All ``2**(t - m)`` contexts that contain the record (its ``m`` bits
        fixed to 1, the others free) are the products of one value subset
        per attribute containing the record's value.  Their count / sum /
        sum of squares / min / max are built by a subset expansion per axis
        of the per-cell tensors (``O(contexts)`` additions, no per-context
        contraction).  The last attribute is split into chunks (its high
        free bits fixed per chunk) to bound memory.  Keys come out ascending.

        Yields
        ------
        keys : (K,) uint64 packed contexts of the chunk
        sums : (K, 3) float64 count, centred sum, centred sum of squares
        mn, mx : (K,) float64 min and max of the metric (``+inf``/``-inf`` if empty)
        """
        if not self.dense:
            raise ValueError(f"exhaustive enumeration needs dense per-cell tensors; this space has {self.n_cells} "
                             f"cells (> {DENSE_CELL_LIMIT})")
        row = self.check_row(row)
        codes = self.codes[row].astype(np.int64)
        m = self.space.m
        sizes = [int(s) for s in self.space.sizes]
        npart = [1 << (s - 1) for s in sizes]
        # C order over (A_m, ..., A_1): the last attribute holds the highest key bits and every
        # attribute's subset keys increase with the subset index, so the keys come out ascending.
        # The last attribute (slowest axis) is the one split into chunks.
        order = list(range(m - 1, -1, -1))
        a0 = order[0]
        st = np.moveaxis(self.sum_tensor, order, list(range(m)))
        mm = np.moveaxis(self.minmax_tensor, order, list(range(m)))
        # expand every attribute but the chunked one (axes 1..m-1)
        for ax in range(1, m):
            i = order[ax]
            st = np.moveaxis(self._expand_axis(np.moveaxis(st, ax, 0), int(codes[i]), np.add), 0, ax)
            mm = np.moveaxis(self._expand_axis(np.moveaxis(mm, ax, 0), int(codes[i]), np.minimum), 0, ax)
        rest = int(np.prod([npart[i] for i in order[1:]], dtype=np.int64))
        st = st.reshape(sizes[a0], rest, 3)
        mm = mm.reshape(sizes[a0], rest, 2)
        # keys of the rest, in the same (C) order as the expanded axes
        rest_keys = np.zeros(1, dtype=np.uint64)
        for i in order[1:]:
            rest_keys = (rest_keys[:, None] | self.subset_keys(i, int(codes[i]))[None, :]).reshape(-1)
        keys0 = self.subset_keys(a0, int(codes[a0]))
        free0 = [j for j in range(sizes[a0]) if j != codes[a0]]
        nfree = len(free0)
        low = 0
        while low < nfree and (1 << (low + 1)) * rest <= max(chunk, rest):
            low += 1
        c0 = int(codes[a0])
        for h in range(1 << (nfree - low)):
            hi_set = [free0[low + j] for j in range(nfree - low) if (h >> j) & 1]
            bs = st[c0].copy()
            bm = mm[c0].copy()
            for f in hi_set:
                bs += st[f]
                np.minimum(bm, mm[f], out=bm)
            s_chunk = self._expand_axis(st, c0, np.add, base=bs, free=free0[:low])
            m_chunk = self._expand_axis(mm, c0, np.minimum, base=bm, free=free0[:low])
            k_chunk = keys0[h << low: (h + 1) << low]
            keys = (k_chunk[:, None] | rest_keys[None, :]).reshape(-1)
            yield keys, s_chunk.reshape(-1, 3), m_chunk[..., 0].reshape(-1), -m_chunk[..., 1].reshape(-1)
