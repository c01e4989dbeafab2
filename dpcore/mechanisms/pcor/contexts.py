"""Contexts of PCOR as bit vectors over the full public domains (Section 3 of seed 003).

Shafieinejad, Kerschbaum and Ilyas, "PCOR: Private Contextual Outlier
Release via Differentially Private Search", SIGMOD'21, Section 3: a context
is a conjunction of disjunctions of attribute-value predicates
``[P_11 v ... v P_1|A_1|] ^ ... ^ [P_m1 v ... v P_m|A_m|]``, represented as a
binary vector ``<c_11, ..., c_1|A_1|, ..., c_m1, ..., c_m|A_m|>`` of length
``t = sum_i |A_i|``; bit ``c_ij`` is 1 when predicate ``P_ij`` (attribute
``A_i`` equals its ``j``-th domain value) is in the context.  Section 4
requires the bits to range over the **full public domains** (from the release
spec), not over the values present in the data, so the domain is an input
here and is never derived from the records.

Conventions fixed by this module (shared by the whole ``pcor`` package)
-----------------------------------------------------------------------
* Bit order: attribute order, then the order of each attribute's domain.
* Packed keys: ``np.uint64`` with bit ``i`` of the key equal to bit ``i`` of
  the context (little-endian: bit 0 is the first value of the first
  attribute), hence ``t <= 64``.
* Rendering (``render``/``parse``), one clause per attribute in attribute
  order joined by ``" ∧ "``:

  - one value set: ``origin = JFK``
  - several (not all) values set: ``carrier ∈ {AA, UA}`` (domain order)
  - every value of a domain with more than one value set: ``month: any``
    (the attribute does not restrict the population; writing out a
    105-value domain helps nobody)
  - no value set: ``carrier ∈ ∅`` (the population is empty)

  Values are written as ``str(value)``, bare when that text cannot be
  mistaken for the syntax and otherwise as a JSON string literal
  (:func:`dpcore.storage.quoting.quote`): ``status = "Unemployed, Laid Off"``,
  ``city ∈ {"Washington, D.C.", " lead space", Zürich}``. A value is quoted
  when it is empty, has leading or trailing whitespace, starts with ``"``,
  holds a character that is not printable (line break, tab, no-break space,
  ...) or one of ``, { } ∧ ∈ ∅``, or is the word ``any``. Attribute names
  follow the same rule and are also quoted when they hold ``=`` or ``:``.
  Plain values (``AA``, ``JFK``, ``12``, ``a b``, ``x-y``, ``a=b``) render
  exactly as they always did, so stored releases read the same; ``parse``
  reads both forms (also a bare ``any`` after ``=`` or inside braces, as
  releases made before quoting wrote it). Any text is allowed in a domain:
  :meth:`ContextSpace.from_domains` only rejects domains whose string forms
  collide, so ``parse(render(c)) == c`` holds exactly for every context
  ``c``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpcore.storage.quoting import needs_quotes, quote, read_quoted
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["ContextSpace", "MAX_BITS"]

MAX_BITS = 64
_AND = " ∧ "
_ANY = "any"
_EMPTY = "∅"
# characters of the syntax: a value (name) holding one of them is written quoted (dpcore.storage.quoting)
_VALUE_SPECIALS = ",{}∧∈∅"
_NAME_SPECIALS = ",{}∧∈∅=:"
_RESERVED = (_ANY,)


def _text(text: str, specials: str) -> str:
    """``text`` bare when it cannot be mistaken for the syntax, else as a JSON string literal."""
    return quote(text) if needs_quotes(text, specials, _RESERVED) else text


def _skip_spaces(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _read_token(text: str, pos: int, stops: str) -> tuple[str | None, int]:
    """A quoted value, or bare text up to the first of ``stops`` (stripped), starting at ``pos``.

    Returns ``(value, end)``; ``value`` is None when there is neither (empty bare text).
    """
    if text.startswith('"', pos):
        return read_quoted(text, pos)
    end = pos
    while end < len(text) and text[end] not in stops:
        end += 1
    bare = text[pos:end].strip()
    return (bare or None), end


@dataclass(frozen=True)
class ContextSpace:
    """The space of contexts over ``m`` categorical attributes (Section 3).

    Parameters
    ----------
    attributes : tuple of str
        The context attributes ``A_1, ..., A_m`` in bit order.
    domains : tuple of tuple
        The full public domain of each attribute (from the release spec), in
        bit order.  Values may be ints or strings (anything hashable whose
        ``str`` is unique within its domain).

    Notes
    -----
    Build it with :meth:`from_domains`, which validates the input; the
    dataclass constructor itself does not.
    """

    attributes: tuple
    domains: tuple

    # -- construction ----------------------------------------------------------------

    @classmethod
    def from_domains(cls, attributes, domains) -> "ContextSpace":
        """Validated constructor.

        Parameters
        ----------
        attributes : sequence of str
            Distinct attribute names.
        domains : sequence of sequence
            One non-empty domain of distinct values per attribute.

        Returns
        -------
        ContextSpace

        Raises
        ------
        ValueError
            No attribute, duplicated attribute names, an empty domain,
            repeated values, two values of a domain with the same ``str``
            form (a rendered context could not be parsed back), or ``t > 64``
            (packed keys are ``np.uint64``). Any text is allowed in names and
            values: the rendering quotes what needs it.
        """
        attributes = tuple(str(a) for a in attributes)
        domains = tuple(tuple(d) for d in domains)
        if not attributes:
            raise ValueError("a context space needs at least one attribute")
        if len(attributes) != len(domains):
            raise ValueError(f"{len(attributes)} attributes but {len(domains)} domains")
        if len(set(attributes)) != len(attributes):
            raise ValueError(f"attribute names must be distinct, got {list(attributes)}")
        for name, dom in zip(attributes, domains):
            if len(dom) == 0:
                raise ValueError(f"attribute {name!r}: the public domain is empty")
            if len(set(dom)) != len(dom):
                raise ValueError(f"attribute {name!r}: the public domain has repeated values")
            texts = [str(v) for v in dom]
            if len(set(texts)) != len(texts):
                raise ValueError(f"attribute {name!r}: two domain values have the same text form, "
                                 "so a rendered context could not be parsed back")
        t = sum(len(d) for d in domains)
        if t > MAX_BITS:
            raise ValueError(f"the context space has t = {t} attribute values; at most {MAX_BITS} are supported "
                             "(contexts are packed into uint64 keys)")
        return cls(attributes, domains)

    # -- shape ------------------------------------------------------------------------

    @cached_property
    def sizes(self) -> np.ndarray:
        """``(m,)`` int64: the domain sizes ``|A_i|``."""
        return np.array([len(d) for d in self.domains], dtype=np.int64)

    @cached_property
    def offsets(self) -> np.ndarray:
        """``(m,)`` int64: index of each attribute's first bit."""
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    @property
    def t(self) -> int:
        """Number of bits ``t = sum_i |A_i|`` (Section 3)."""
        return int(self.sizes.sum())

    @property
    def m(self) -> int:
        """Number of context attributes."""
        return len(self.attributes)

    @cached_property
    def attribute_of_bit(self) -> np.ndarray:
        """``(t,)`` int64: the attribute index of each bit."""
        return np.repeat(np.arange(self.m), self.sizes)

    @cached_property
    def _rendered_values(self) -> tuple:
        """Each domain's values as :meth:`render` writes them (bare or quoted)."""
        return tuple(tuple(_text(str(v), _VALUE_SPECIALS) for v in dom) for dom in self.domains)

    @cached_property
    def _text_maps(self) -> tuple:
        return tuple({str(v): j for j, v in enumerate(dom)} for dom in self.domains)

    # -- records ----------------------------------------------------------------------

    def encode(self, frame: pd.DataFrame) -> np.ndarray:
        """Codes of each record's attribute values.

        Parameters
        ----------
        frame : pandas.DataFrame
            Must hold a column per attribute.

        Returns
        -------
        numpy.ndarray
            ``(N, m)`` int32: ``codes[r, i]`` is the position of record
            ``r``'s value of ``A_i`` in the domain of ``A_i``.

        Raises
        ------
        ValueError
            A missing column, or the first record (by position, with its
            index label) whose value is null or outside the public domain;
            the message names the column and the row but not the value (no
            raw data in error messages, DESIGN rule 6).
        """
        missing = [a for a in self.attributes if a not in frame.columns]
        if missing:
            raise ValueError(f"the data has no column {missing[0]!r} (context attributes: {list(self.attributes)})")
        n = len(frame)
        codes = np.empty((n, self.m), dtype=np.int32)
        for i, (name, dom) in enumerate(zip(self.attributes, self.domains)):
            col = frame[name]
            null = col.isna().to_numpy()
            if null.any():  # no row, index or count: which rows is private (issue 15, hole 9)
                raise ValueError(f"column {name!r}: some rows are null; context attributes must not be null")
            idx = pd.Index(list(dom), dtype=object).get_indexer(col.to_numpy(dtype=object))
            bad = idx < 0
            if bad.any():
                # values equal as numbers (e.g. 1 vs 1.0) but of another type: fall back to the text form
                texts = col.astype(str).to_numpy()
                alt = pd.Index(list(self._text_maps[i].keys()), dtype=object).get_indexer(texts[bad])
                idx[bad] = alt
                bad = idx < 0
            if bad.any():
                raise ValueError(f"column {name!r}: some rows hold a value outside the public domain of "
                                 f"{len(dom)} values given in the spec")
            codes[:, i] = idx
        return codes

    def _check_codes_row(self, codes_row) -> np.ndarray:
        row = np.asarray(codes_row, dtype=np.int64).reshape(-1)
        if row.shape[0] != self.m:
            raise ValueError(f"a codes row has {self.m} entries (one per attribute), got {row.shape[0]}")
        if np.any(row < 0) or np.any(row >= self.sizes):
            raise ValueError("codes row out of range of the domains")
        return row

    def cell_context(self, codes_row) -> np.ndarray:
        """The context holding exactly one value per attribute: the record's own cell.

        Parameters
        ----------
        codes_row : array_like
            ``(m,)`` codes of one record (a row of :meth:`encode`).

        Returns
        -------
        numpy.ndarray
            ``(t,)`` bool with the bits ``offsets + codes_row`` set.
        """
        row = self._check_codes_row(codes_row)
        c = np.zeros(self.t, dtype=bool)
        c[self.offsets + row] = True
        return c

    def contains(self, contexts, codes_row) -> np.ndarray:
        """Whether each context contains the record (``V in D_C``, Section 3).

        Parameters
        ----------
        contexts : array_like
            ``(B, t)`` or ``(t,)`` bool.
        codes_row : array_like
            ``(m,)`` codes of the record.

        Returns
        -------
        numpy.ndarray
            ``(B,)`` bool.
        """
        ctx = self._as_batch(contexts)
        row = self._check_codes_row(codes_row)
        return ctx[:, self.offsets + row].all(axis=1)

    def flip_all(self, context) -> np.ndarray:
        """The ``t`` graph neighbours of a context (Section 5.2).

        Returns
        -------
        numpy.ndarray
            ``(t, t)`` bool; row ``i`` is ``context`` with bit ``i`` flipped.
        """
        c = self._as_single(context)
        return np.logical_xor(c[None, :], np.eye(self.t, dtype=bool))

    # -- packing ----------------------------------------------------------------------

    def _as_batch(self, contexts) -> np.ndarray:
        ctx = np.asarray(contexts)
        if ctx.ndim == 1:
            ctx = ctx[None, :]
        if ctx.ndim != 2 or ctx.shape[1] != self.t:
            raise ValueError(f"contexts must have shape (B, {self.t}), got {np.shape(contexts)}")
        if ctx.dtype != bool:
            if not np.isin(ctx, (0, 1)).all():
                raise ValueError("contexts must be 0/1 or boolean")
            ctx = ctx.astype(bool)
        return ctx

    def _as_single(self, context) -> np.ndarray:
        c = np.asarray(context)
        if c.shape != (self.t,):
            raise ValueError(f"a context must have shape ({self.t},), got {c.shape}")
        return self._as_batch(c)[0]

    def pack(self, contexts) -> np.ndarray:
        """Packed keys: bit ``i`` of the key is bit ``i`` of the context.

        Parameters
        ----------
        contexts : array_like
            ``(B, t)`` or ``(t,)`` bool.

        Returns
        -------
        numpy.ndarray
            ``(B,)`` uint64.
        """
        ctx = self._as_batch(contexts)
        b = ctx.shape[0]
        packed = np.packbits(ctx, axis=1, bitorder="little")
        buf = np.zeros((b, 8), dtype=np.uint8)
        buf[:, : packed.shape[1]] = packed
        return buf.view("<u8").reshape(b).astype(np.uint64)

    def unpack(self, keys) -> np.ndarray:
        """Inverse of :meth:`pack`.

        Parameters
        ----------
        keys : array_like
            ``(B,)`` unsigned integer keys (or a scalar).

        Returns
        -------
        numpy.ndarray
            ``(B, t)`` bool.

        Raises
        ------
        ValueError
            A key with a bit set at position ``>= t``.
        """
        k = np.atleast_1d(np.asarray(keys)).astype("<u8")
        if self.t < 64 and np.any(k >> np.uint64(self.t)):
            raise ValueError(f"a key has bits beyond t = {self.t}")
        bits = np.unpackbits(k.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        return bits[:, : self.t].astype(bool)

    def bitstring(self, context) -> str:
        """The context as a string of ``0``/``1`` in bit order (Section 3's ``<101001010>``)."""
        c = self._as_single(context)
        return "".join("1" if b else "0" for b in c)

    def from_bitstring(self, s: str) -> np.ndarray:
        """Inverse of :meth:`bitstring`; ``ValueError`` on a wrong length or a character other than 0/1."""
        s = str(s).strip()
        if len(s) != self.t or set(s) - {"0", "1"}:
            raise ValueError(f"a context bit string has {self.t} characters 0/1, got {len(s)} characters")
        return np.frombuffer(s.encode("ascii"), dtype=np.uint8) == ord("1")

    # -- text -------------------------------------------------------------------------

    def render(self, context) -> str:
        """Readable predicate form of a context (see the module docstring for the grammar).

        Example: ``"carrier ∈ {AA, UA} ∧ origin = JFK ∧ month: any"``; a value
        that needs it is quoted: ``status = "Unemployed, Laid Off"``.
        """
        c = self._as_single(context)
        parts = []
        for name, dom, off, texts in zip(self.attributes, self.domains, self.offsets, self._rendered_values):
            bits = c[off: off + len(dom)]
            chosen = [tx for tx, b in zip(texts, bits) if b]
            name = _text(name, _NAME_SPECIALS)
            if len(chosen) == 0:
                parts.append(f"{name} ∈ {_EMPTY}")
            elif len(chosen) == 1:
                parts.append(f"{name} = {chosen[0]}")
            elif len(chosen) == len(dom):
                parts.append(f"{name}: {_ANY}")
            else:
                parts.append(f"{name} ∈ {{{', '.join(chosen)}}}")
        return _AND.join(parts)

    def parse(self, text: str) -> np.ndarray:
        """Inverse of :meth:`render`: ``parse(render(c)) == c`` for every context.

        Clauses may come in any order but each attribute must appear exactly
        once; spaces around the operators, commas and braces are optional.
        Names and values are either quoted (a JSON string literal, taken
        exactly) or bare (taken up to the next delimiter, surrounding spaces
        removed). Values are matched on their text form and mapped back to
        the domain's own values (so ``month = 3`` means the int ``3`` when
        the domain holds ints).

        Parameters
        ----------
        text : str
            A rendered context.

        Returns
        -------
        numpy.ndarray
            ``(t,)`` bool.

        Raises
        ------
        ValueError
            Unknown or repeated attribute, unknown or repeated value, or a
            malformed clause (the message quotes the offending text).
        """
        text = str(text)
        c = np.zeros(self.t, dtype=bool)
        seen = set()
        index = {a: i for i, a in enumerate(self.attributes)}
        expected = (f"expected 'attr = v', 'attr ∈ {{v, w}}', 'attr ∈ {_EMPTY}' or 'attr: {_ANY}', "
                    "with a value quoted as \"...\" when it holds one of , { } ∧ ∈ ∅")
        pos = _skip_spaces(text, 0)
        while True:
            start = pos
            name, pos = _read_token(text, pos, "=∈:∧")
            pos = _skip_spaces(text, pos)
            op = text[pos] if pos < len(text) else ""
            if op not in ("=", "∈", ":") or name is None:
                raise ValueError(f"cannot parse the clause {self._clause_at(text, start)!r} ({expected})")
            if name not in index:
                raise ValueError(f"unknown attribute {name!r} in {self._clause_at(text, start)!r}")
            if name in seen:
                raise ValueError(f"attribute {name!r} appears twice")
            seen.add(name)
            i = index[name]
            off = int(self.offsets[i])
            tmap = self._text_maps[i]
            pos = _skip_spaces(text, pos + 1)
            if op == ":":
                if not text.startswith(_ANY, pos):
                    raise ValueError(f"cannot parse the clause {self._clause_at(text, start)!r} ({expected})")
                c[off: off + len(self.domains[i])] = True
                pos += len(_ANY)
                values = []
            elif op == "=":
                v, pos = _read_token(text, pos, "∧")
                if v is None:
                    raise ValueError(f"cannot parse the clause {self._clause_at(text, start)!r} ({expected})")
                values = [v]
            elif text.startswith(_EMPTY, pos):
                pos += len(_EMPTY)
                values = []
            elif text.startswith("{", pos):
                values = []
                pos = _skip_spaces(text, pos + 1)
                while True:
                    v, pos = _read_token(text, pos, ",}∧")
                    if v is None:
                        raise ValueError(f"cannot parse the value set of attribute {name!r} in "
                                         f"{self._clause_at(text, start)!r} (an empty item; {expected})")
                    values.append(v)
                    pos = _skip_spaces(text, pos)
                    if text.startswith("}", pos):
                        pos += 1
                        break
                    if not text.startswith(",", pos):
                        raise ValueError(f"cannot parse the value set of attribute {name!r} in "
                                         f"{self._clause_at(text, start)!r} (expected ',' or '}}')")
                    pos = _skip_spaces(text, pos + 1)
            else:
                raise ValueError(f"cannot parse the value set of attribute {name!r} in "
                                 f"{self._clause_at(text, start)!r} ({expected})")
            for v in values:
                if v not in tmap:
                    raise ValueError(f"attribute {name!r}: {v!r} is not in its public domain")
                if c[off + tmap[v]]:
                    raise ValueError(f"attribute {name!r}: value {v!r} listed twice")
                c[off + tmap[v]] = True
            pos = _skip_spaces(text, pos)
            if pos == len(text):
                break
            if text[pos] != "∧":
                raise ValueError(f"cannot parse the clause {self._clause_at(text, start)!r}: unexpected "
                                 f"{text[pos:pos + 20]!r} after it ({expected})")
            pos = _skip_spaces(text, pos + 1)
        if len(seen) != self.m:
            missing = [a for a in self.attributes if a not in seen]
            raise ValueError(f"the context text has no clause for attribute {missing[0]!r}")
        return c

    @staticmethod
    def _clause_at(text: str, start: int) -> str:
        """The clause starting at ``start`` as far as the next ``∧`` (for error messages)."""
        end = text.find("∧", start)
        return text[start: end if end >= 0 else len(text)].strip()
