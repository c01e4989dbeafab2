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
* ``cell_of_row``: mixed-radix cell id ``sum_i code_i * stride_i`` (C order
  over the domain sizes).
* Per cell: count, sum and sum of squares of the **centred** metric
  ``x - centre`` (the centre is the rounded median for integer-valued metrics,
  so all sums of integer metrics are exact in float64 whatever the order of
  summation; the median otherwise), and the min / max of the metric.
* Sorted values: ``uniq`` (the distinct metric values) and, for every
  occupied ``(cell, value)`` pair, one entry with global key
  ``cell * n_unique + rank(value)``; the entry keys are sorted, so a single
  ``np.searchsorted`` answers "how many values of each cell are below x" for
  every cell of a context at once, and ties are stored once with their
  multiplicity (integer metrics such as ``arr_delay`` have a few hundred
  distinct values among 327,346 rows).
"""
from __future__ import annotations

import numpy as np

from dpcore.mechanisms.pcor.contexts import ContextSpace

__all__ = ["CellIndex", "DENSE_CELL_LIMIT"]

DENSE_CELL_LIMIT = 1 << 22  # above this many cells the dense tensors are not built (occupied-cell path)


class CellIndex:
    """Per-cell statistics and sorted values of one metric over one context space.

    Build with :meth:`build`.  Attributes are read-only by convention.

    Attributes
    ----------
    space : ContextSpace
    codes : (N, m) int32 record codes;  metric : (N,) float64
    n_rows, n_cells : int
    cell_of_row : (N,) int64
    centre : float, subtracted from the metric before the sums (``integer_metric``: whether it is an integer)
    occupied : (n_occ,) int64 ids of the non-empty cells, ascending
    occupied_codes, occupied_bits : (n_occ, m) int64 value codes / context bit of each occupied cell
    occupied_count : (n_occ,) int64; occupied_sum, occupied_sumsq : (n_occ,) float64 of ``x - centre``
    occupied_min, occupied_max : (n_occ,) float64 metric range of each occupied cell
    occupied_entry_start, occupied_entry_stop : (n_occ,) int64 range of each cell's entries
    cell_count : (n_cells,) int64 (property, dense)
    sum_tensor : (|A_1|, ..., |A_m|, 3) float64 count / sum / sum of squares per cell (dense only)
    minmax_tensor : (|A_1|, ..., |A_m|, 2) float64 ``(min, -max)`` per cell, ``+inf`` if empty (dense only)
    uniq : (U,) sorted distinct metric values; row_rank : (N,) int64 position of each record's value in ``uniq``
    entry_key : (E,) int64 sorted ``cell * U + rank``; entry_count : (E,) int64 multiplicity
    entry_rank, entry_cell : (E,) int64; entry_value : (E,) float64 ``uniq[entry_rank]``
    entry_cum : (E + 1,) int64 prefix sums of ``entry_count``; cell_ptr : (n_cells + 1,) int64 first entry of each cell
    dense : bool, whether the dense per-cell tensors are used for contractions
    """

    def __init__(self):  # pragma: no cover - use build()
        raise TypeError("use CellIndex.build(space, codes, metric)")

    # ------------------------------------------------------------------ build

    @classmethod
    def build(cls, space: ContextSpace, codes, metric, *, dense_limit: int = DENSE_CELL_LIMIT) -> "CellIndex":
        """Precompute the index once per (dataset, context attributes, metric).

        Parameters
        ----------
        space : ContextSpace
            The context attributes and their public domains.
        codes : array_like
            ``(N, m)`` integer codes from :meth:`ContextSpace.encode`.
        metric : array_like
            ``(N,)`` metric attribute ``M`` (Section 3), finite.
        dense_limit : int, optional
            Largest number of cells for which dense per-cell tensors are used
            in the batched contractions; larger spaces use the occupied cells
            only (same results).

        Returns
        -------
        CellIndex

        Raises
        ------
        ValueError
            Shape mismatch, codes out of range, or a non-finite metric value
            (the message names the first such row, not its value).
        """
        self = object.__new__(cls)
        codes = np.asarray(codes)
        metric = np.asarray(metric, dtype=np.float64).reshape(-1)
        if codes.ndim != 2 or codes.shape[1] != space.m:
            raise ValueError(f"codes must have shape (N, {space.m}), got {codes.shape}")
        if codes.shape[0] != metric.shape[0]:
            raise ValueError("codes and metric must have one entry per record each (their lengths differ)")
        if codes.shape[0] == 0:
            raise ValueError("the dataset is empty")
        bad = ~np.isfinite(metric)
        if bad.any():
            raise ValueError("metric: some rows are not finite numbers (declare the metric nullable: false)")
        codes = codes.astype(np.int32, copy=False)
        if (codes < 0).any() or (codes >= space.sizes[None, :]).any():
            _, i = np.argwhere((codes < 0) | (codes >= space.sizes[None, :]))[0]
            raise ValueError(f"codes: column {space.attributes[int(i)]!r} holds codes out of the domain range")
        self.space = space
        self.codes = codes
        self.metric = metric
        self.n_rows = int(metric.shape[0])
        sizes = space.sizes
        self.n_cells = int(np.prod(sizes, dtype=np.int64))
        strides = np.ones(space.m, dtype=np.int64)
        for i in range(space.m - 2, -1, -1):
            strides[i] = strides[i + 1] * sizes[i + 1]
        self.strides = strides
        self.cell_of_row = codes.astype(np.int64) @ strides

        # centred sums (exact for integer metrics: integer centre, integer sums below 2**53)
        integer = bool(np.all(metric == np.round(metric)))
        med = float(np.median(metric))
        self.centre = float(np.round(med)) if integer else med
        self.integer_metric = integer
        x = metric - self.centre
        occupied, inv, cnt = np.unique(self.cell_of_row, return_inverse=True, return_counts=True)
        self.occupied = occupied.astype(np.int64)
        self.occupied_codes = (occupied[:, None] // strides[None, :]) % sizes[None, :]
        self.occupied_bits = space.offsets[None, :] + self.occupied_codes
        self.occupied_count = cnt.astype(np.int64)
        self.occupied_sum = np.bincount(inv, weights=x, minlength=occupied.size)
        self.occupied_sumsq = np.bincount(inv, weights=x * x, minlength=occupied.size)

        # sorted values: (cell, rank) entries with multiplicities
        self.uniq, row_rank = np.unique(metric, return_inverse=True)
        self.row_rank = row_rank.astype(np.int64).reshape(-1)
        self.n_unique = int(self.uniq.size)
        keys = self.cell_of_row * self.n_unique + self.row_rank
        self.entry_key, ecount = np.unique(keys, return_counts=True)
        self.entry_count = ecount.astype(np.int64)
        self.entry_rank = self.entry_key % self.n_unique
        self.entry_cell = self.entry_key // self.n_unique
        self.entry_value = self.uniq[self.entry_rank]
        self.entry_cum = np.concatenate([[0], np.cumsum(self.entry_count)]).astype(np.int64)
        first = np.searchsorted(self.entry_key, self.occupied * self.n_unique, side="left")
        last = np.searchsorted(self.entry_key, (self.occupied + 1) * self.n_unique, side="left")
        self.occupied_entry_start = first.astype(np.int64)
        self.occupied_entry_stop = last.astype(np.int64)
        self.occupied_min = self.entry_value[first]
        self.occupied_max = self.entry_value[last - 1]

        self.dense = self.n_cells <= dense_limit
        if self.dense:
            shape = tuple(int(s) for s in sizes)
            sums = np.zeros((self.n_cells, 3))
            sums[occupied, 0] = cnt
            sums[occupied, 1] = self.occupied_sum
            sums[occupied, 2] = self.occupied_sumsq
            self.sum_tensor = sums.reshape(shape + (3,))
            mm = np.empty((self.n_cells, 2))
            mm[:, 0] = np.inf
            mm[:, 1] = np.inf
            mm[occupied, 0] = self.occupied_min
            mm[occupied, 1] = -self.occupied_max
            self.minmax_tensor = mm.reshape(shape + (2,))  # (min, -max): both reduce with np.minimum
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
        """The centred metric value of one record."""
        return float(self.metric[row] - self.centre)

    def row_codes(self, row: int) -> np.ndarray:
        """``(m,)`` codes of record ``row`` (``IndexError`` naming the row when out of range)."""
        row = self.check_row(row)
        return self.codes[row].astype(np.int64)

    def check_row(self, row) -> int:
        """Validate a record position and return it as an int."""
        if isinstance(row, bool) or not isinstance(row, (int, np.integer)):
            raise TypeError(f"row must be an integer record position, got {type(row).__name__}")
        row = int(row)
        if not 0 <= row < self.n_rows:
            raise IndexError("row is out of range of the dataset's records")  # no sizes: private
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
