"""Context evaluation for one outlier: validity with a cache, utilities, exhaustive enumeration.

Seed 003 (Shafieinejad et al., SIGMOD'21): a context ``C`` is *valid*
(matching) for the queried record ``V`` iff ``V ∈ D_C`` and
``f_M(D_C, V) = true`` (Section 3, Definition 3.1's ``COE_M(D, V)`` is the
set of all valid contexts); the utilities are the population size
``|D_C|`` (Section 3.2.1) and the overlap ``|D_C ∩ D_{C_V}|`` with the
starting context (Section 3.2.2), both of sensitivity 1 under add/remove
neighbours.  The exponential mechanism assigns ``-inf`` to invalid contexts;
that is the samplers' business -- this module only answers questions.

A :class:`ContextEvaluator` is the state of **one search** for one record:
its cache means every distinct context is verified at most once, and
:attr:`ContextEvaluator.n_verified` reports how many were.  The cache and
every answer are data-dependent and internal (DESIGN rule 6).
"""
from __future__ import annotations

import numpy as np

from dpcore.mechanisms.pcor.index import CellIndex

__all__ = ["ContextEvaluator", "UTILITIES"]

UTILITIES = ("population", "overlap")


class ContextEvaluator:
    """Validity, utility and enumeration of contexts for one record ``V``.

    Parameters
    ----------
    index : CellIndex
        Built once per (dataset, context attributes, metric).
    verifier : GrubbsVerifier | LOFVerifier | HistogramVerifier
        ``f_M`` (deterministic).
    row : int
        Position of ``V`` among the index's held rows (:meth:`CellIndex.with_rows`).
    utility : {"population", "overlap"}
        Section 3.2.1 or 3.2.2.

    Attributes
    ----------
    space : ContextSpace; t : int; row : int
    cell_context : (t,) bool
        ``V``'s own cell (one bit per attribute: ``V``'s values).
    n_verified : int
        Distinct contexts passed to the verifier so far (cache misses,
        including every context of :meth:`enumerate_valid`).
    work : dict
        The operations of the search, counted by the samplers
        (:func:`dpcore.mechanisms.pcor.samplers._tally`; internal).
    fresh_validity : bool
        ``True``: :meth:`valid` accepts ``fresh=True`` (the samplers' constant work).
    """

    fresh_validity = True

    def __init__(self, index: CellIndex, verifier, row: int, utility: str = "population"):
        if utility not in UTILITIES:
            raise ValueError(f"utility must be one of {UTILITIES}, got {utility!r}")
        if not hasattr(verifier, "verify"):
            raise TypeError(f"verifier must provide verify(index, row, contexts), got {type(verifier).__name__}")
        self.index = index
        self.verifier = verifier
        self.row = index.check_row(row)
        self.utility_name = utility
        self.space = index.space
        self.t = self.space.t
        self.codes_row = index.row_codes(self.row)
        self.cell_context = self.space.cell_context(self.codes_row)
        self._cache: dict[int, bool] = {}
        self._enum_keys = np.zeros(0, dtype=np.uint64)  # sorted keys of a finished enumeration
        self._enum_valid = np.zeros(0, dtype=bool)
        self._enum_population = np.zeros(0, dtype=np.int64)
        self.n_verified = 0
        self.work: dict[str, int] = {}

    # ------------------------------------------------------------------ validity

    def valid(self, contexts, fresh: bool = False) -> np.ndarray:
        """Whether each context is valid for ``V`` (``V ∈ D_C`` and ``f_M(D_C, V)``).

        Cached by packed key: only distinct, not-yet-seen contexts reach the
        verifier, in one batch.

        Parameters
        ----------
        contexts : (B, t) or (t,) bool
        fresh : bool
            ``True``: every row reaches the verifier (one batch), whether or
            not it was verified before, so the work is the batch's size and
            not the cache's hits (constant work, issue 46.2); the answers are
            the same (the verifier is deterministic) and fill the cache.

        Returns
        -------
        (B,) bool
        """
        ctx = self.space._as_batch(contexts)
        keys = self.space.pack(ctx)
        if fresh:
            res = np.asarray(self.verifier.verify(self.index, self.row, ctx), dtype=bool).reshape(-1)
            in_enum = np.zeros(keys.shape[0], dtype=bool)
            if self._enum_keys.size:
                pos = np.minimum(np.searchsorted(self._enum_keys, keys), self._enum_keys.size - 1)
                in_enum = self._enum_keys[pos] == keys
            cache = self._cache
            for key, v, e in zip(keys.tolist(), res.tolist(), in_enum.tolist()):
                if not e and key not in cache:
                    self.n_verified += 1
                cache[key] = v
            return res
        out = np.zeros(keys.shape[0], dtype=bool)
        known = np.zeros(keys.shape[0], dtype=bool)
        if self._enum_keys.size:
            pos = np.searchsorted(self._enum_keys, keys)
            posc = np.minimum(pos, self._enum_keys.size - 1)
            hit = self._enum_keys[posc] == keys
            out[hit] = self._enum_valid[posc[hit]]
            known |= hit
        klist = keys.tolist()
        cache = self._cache
        for i in np.flatnonzero(~known):
            v = cache.get(klist[i])
            if v is not None:
                out[i] = v
                known[i] = True
        miss = np.flatnonzero(~known)
        if miss.size:
            uk, first, inv = np.unique(keys[miss], return_index=True, return_inverse=True)
            res = np.asarray(self.verifier.verify(self.index, self.row, ctx[miss[first]]), dtype=bool)
            for key, v in zip(uk.tolist(), res.tolist()):
                cache[key] = v
            self.n_verified += int(uk.size)
            out[miss] = res[inv.reshape(-1)]
        return out

    # ------------------------------------------------------------------ utilities

    def utility(self, contexts, reference=None) -> np.ndarray:
        """Utility of each context, ignoring validity (Section 3.2).

        Parameters
        ----------
        contexts : (B, t) bool
        reference : (t,) bool, optional
            Required for ``"overlap"``: the chosen / starting context ``C_V``.

        Returns
        -------
        (B,) int64: ``|D_C|`` or ``|D_C ∩ D_reference|``.
        """
        if self.utility_name == "population":
            if self._enum_keys.size:  # after an enumeration: look the sizes up (same values, no contraction)
                ctx = self.space._as_batch(contexts)
                keys = self.space.pack(ctx)
                pos = np.minimum(np.searchsorted(self._enum_keys, keys), self._enum_keys.size - 1)
                hit = self._enum_keys[pos] == keys
                if hit.all():
                    return self._enum_population[pos]
            return self.index.population_size(contexts)
        if reference is None:
            raise ValueError("the overlap utility needs reference=<the starting context C_V>")
        return self.index.overlap(contexts, reference)

    # ------------------------------------------------------------------ enumeration (Algorithm 1)

    def n_containing(self) -> int:
        """Number of contexts containing ``V``: ``2**(t - m)``."""
        return 1 << (self.t - self.space.m)

    def enumerate_valid(self, max_contexts: int = 2 ** 20, *, with_population: bool = False):
        """Validity of **all** ``2**(t - m)`` contexts containing ``V`` (the direct approach, Algorithm 1).

        ``V``'s ``m`` bits are fixed to 1 and the other ``t - m`` bits range
        over all values.  With a verifier offering ``enumerate`` (Grubbs) the
        statistics of every context come from a subset expansion of the
        per-cell tensors (:meth:`CellIndex.iter_enumeration`), fully
        vectorised and chunked; otherwise the contexts are generated in
        chunks and verified in batches.  The results also fill the cache.

        Parameters
        ----------
        max_contexts : int
            Refuse (``ValueError``) when ``2**(t - m)`` exceeds it.
        with_population : bool
            Also return ``|D_C|`` of every context (an addition to the
            contract; population sizes fall out of the same statistics).

        Returns
        -------
        keys : (K,) uint64
            Packed contexts, ascending (read-only arrays, shared with the cache).
        valid : (K,) bool
        population : (K,) int64, only with ``with_population=True``.
        """
        free = self.t - self.space.m
        total = 1 << free
        if total > max_contexts:
            raise ValueError(f"exhaustive enumeration needs 2^{free} = {total} contexts, more than "
                             f"max_contexts = {max_contexts}")
        if self._enum_keys.size != total:
            keys, valid, pop = self._enumerate(total)
            if not np.all(keys[1:] > keys[:-1]):
                order = np.argsort(keys, kind="stable")
                keys, valid, pop = keys[order], valid[order], pop[order]
            for a in (keys, valid, pop):
                a.flags.writeable = False
            self._enum_keys, self._enum_valid, self._enum_population = keys, valid, pop
            # contexts verified before the enumeration are now counted once, in the enumeration
            dup = sum(1 for k in self._cache if self._in_enum(k))
            self.n_verified += total - dup
        if with_population:
            return self._enum_keys, self._enum_valid, self._enum_population
        return self._enum_keys, self._enum_valid

    def _in_enum(self, key: int) -> bool:
        pos = int(np.searchsorted(self._enum_keys, np.uint64(key)))
        return pos < self._enum_keys.size and int(self._enum_keys[pos]) == key

    def _enumerate(self, total: int):
        if hasattr(self.verifier, "enumerate") and self.index.dense:
            return self.verifier.enumerate(self.index, self.row)
        # generic path: every context containing V, chunk by chunk, verified in batches
        m = self.space.m
        parts = [self.index.subset_keys(i, int(self.codes_row[i])) for i in range(m)]
        keys = np.zeros(1, dtype=np.uint64)
        for p in parts:
            keys = (keys[:, None] | p[None, :]).reshape(-1)
        valid = np.zeros(total, dtype=bool)
        pop = np.zeros(total, dtype=np.int64)
        step = 1 << 12
        for s in range(0, total, step):
            ctx = self.space.unpack(keys[s: s + step])
            valid[s: s + step] = self.verifier.verify(self.index, self.row, ctx)
            pop[s: s + step] = self.index.population_size(ctx)
        return keys, valid, pop
