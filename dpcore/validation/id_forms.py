"""Record ids by their *form* (issue 29, goal 2): the id rules decided once per form instead of once per row.

The record id's ``id_pattern`` rule is a regular expression over the id's text, and the ids are all
different, so grouping by value shares nothing. But a regular expression tells characters apart only
through its *atoms* (literal characters, classes such as ``\\d``, bracket sets, ``.``): two characters
that every atom of the pattern accepts or rejects alike are interchangeable. Replacing, in an id, each
such character by one representative of its class (its *form*, :func:`form_map`) changes no atom's
verdict at any position, hence (by induction over concatenation, alternation, repetition and groups;
anchors depend on positions and on word characters only, and the replaced characters are all word
characters) not whether the pattern matches anywhere in the text. Nor whether the text is missing (an
empty text stays empty). So great-expectations' ``not_null`` and ``id_pattern`` verdicts on an id are
its verdicts on the id's form, and ``F00000001`` .. ``F03367760`` under ``F[0-9]{8}`` are one form.

Only ASCII letters and digits are replaced (every other character is its own class), and only patterns
written in the syntax that Python's ``re`` and RE2 read alike (pandas may run a pattern through either,
depending on the data: :func:`pattern_atoms`); any other pattern returns None and the ids are validated
row by row as before. Each atom's verdict on a character is taken from Python's ``re`` itself (the
atom compiled alone), not re-implemented.

The map is public (a function of the spec's public pattern only).
"""
from __future__ import annotations

import re
import string
import warnings
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dpcore.storage.private_files import private_open

__all__ = ["form_map", "forms_of", "id_text_sql", "pattern_atoms", "to_form", "write_form_counts", "write_rows_of_forms"]

#: The characters a form may replace: ASCII letters and digits (both engines agree on every class for them).
ALNUM = string.ascii_letters + string.digits
_CLASS_ESCAPES = frozenset("dDwWsS")
_ANCHOR_ESCAPES = frozenset("bBAZ")
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")


def _escape_atom(e: str) -> str | None:
    """The atom of ``\\e`` outside a set: a class, a literal punctuation character, or '' (an anchor); None: unsupported."""
    if e in _CLASS_ESCAPES:
        return "\\" + e
    if e in _ANCHOR_ESCAPES:
        return ""
    if e.isascii() and e.isprintable() and not e.isalnum():
        return "\\" + e
    return None


def _set_end(pattern: str, i: int) -> int | None:
    """Index just past the bracket set opening at ``i``; None when it uses syntax the engines may read apart."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":  # a leading ']' (literal in Python): not in the safe syntax
        return None
    while j < len(pattern):
        ch = pattern[j]
        if ch == "]":
            return j + 1 if j > i + 1 else None
        if ch == "[":  # nested sets / POSIX classes ([:alpha:]) read differently
            return None
        if ch == "\\":
            if j + 1 >= len(pattern):
                return None
            e = pattern[j + 1]
            if not (e in _CLASS_ESCAPES or (e.isascii() and e.isprintable() and not e.isalnum())):
                return None
            j += 2
            continue
        j += 1
    return None


def pattern_atoms(regex: str) -> list[str] | None:
    """The character atoms of ``regex`` as stand-alone patterns, or None when it is outside the safe syntax.

    The safe syntax (read alike by Python's ``re`` and RE2): literal characters; ``\\d \\D \\w \\W \\s \\S``;
    the anchors ``^ $ \\A \\Z \\b \\B``; escaped ASCII punctuation; bracket sets of those (no nested ``[``);
    ``.``; ``* + ?`` and their lazy forms; ``{m}``, ``{m,}``, ``{m,n}``; groups ``( )`` and ``(?: )``; ``|``.
    Anything else (flags, lookarounds, back-references, possessive quantifiers, ``{,n}``, other escapes)
    returns None.

    Parameters
    ----------
    regex : str
        The pattern as great-expectations receives it.

    Returns
    -------
    list of str or None
        Each atom as a pattern matching one character (``.`` and anchors left out: they treat every
        ASCII letter and digit alike).
    """
    try:
        with warnings.catch_warnings():  # e.g. "possible nested set": refused below anyway
            warnings.simplefilter("ignore")
            re.compile(regex)
    except re.error:
        return None
    atoms: list[str] = []
    i, n = 0, len(regex)
    while i < n:
        ch = regex[i]
        if ch == "\\":
            atom = _escape_atom(regex[i + 1]) if i + 1 < n else None
            if atom is None:
                return None
            if atom:
                atoms.append(atom)
            i += 2
        elif ch == "[":
            end = _set_end(regex, i)
            if end is None:
                return None
            atoms.append(regex[i:end])
            i = end
        elif ch == "{":
            m = _QUANTIFIER.match(regex, i)
            if m is None:
                return None
            i = m.end()
            if i < n and regex[i] == "+":
                return None
        elif ch == "(":
            if regex.startswith("(?:", i):
                i += 3
            elif regex.startswith("(?", i):
                return None
            else:
                i += 1
        elif ch in "*+?":
            i += 1
            if i < n and regex[i] == "+":  # possessive (Python 3.11+, not RE2)
                return None
        elif ch in ")|^$.":
            i += 1
        elif ch in "]}":
            return None
        else:
            atoms.append(re.escape(ch))
            i += 1
    return atoms


def form_map(regex: str) -> tuple[str, str] | None:
    """The replacement that maps an id to its form under ``regex``: ``(from, to)`` characters, or None.

    Each ASCII letter or digit goes to the smallest character with the same verdict under every atom of
    the pattern (:func:`pattern_atoms`); characters that are their own representative are left out.

    Returns
    -------
    tuple of str or None
        ``(from, to)`` of equal length, for ``str.maketrans`` and DuckDB's ``translate``; None when the
        pattern is outside the safe syntax (validate the ids row by row).
    """
    atoms = pattern_atoms(regex)
    if atoms is None:
        return None
    compiled = [re.compile(a) for a in dict.fromkeys(atoms)]
    rep: dict[tuple[bool, ...], str] = {}
    src, dst = [], []
    for ch in sorted(ALNUM):
        key = tuple(c.fullmatch(ch) is not None for c in compiled)
        first = rep.setdefault(key, ch)
        if first != ch:
            src.append(ch)
            dst.append(first)
    return "".join(src), "".join(dst)


def to_form(text: str | None, mapping: tuple[str, str]) -> str | None:
    """An id's form in Python (the reference for :func:`forms_of`; tests)."""
    return None if text is None else text.translate(str.maketrans(*mapping))


def _lut(mapping: tuple[str, str]) -> np.ndarray:
    """A byte table applying ``mapping`` to UTF-8 text: ASCII bytes never occur inside a multi-byte character."""
    lut = np.arange(256, dtype=np.uint8)
    for a, b in zip(*mapping):
        lut[ord(a)] = ord(b)
    return lut


def forms_of(texts: pa.Array, mapping: tuple[str, str]) -> pa.Array:
    """The form of every text of an Arrow string array (nulls stay null): :func:`to_form`, byte by byte."""
    if texts.type not in (pa.string(), pa.large_string()):
        texts = texts.cast(pa.large_string())
    if texts.offset:  # a slice: its own buffers, so that only its bytes are mapped
        texts = pa.concat_arrays([texts])
    validity, offsets, data = texts.buffers()
    if data is None or not mapping[0]:
        return texts
    mapped = pa.py_buffer(_lut(mapping)[np.frombuffer(data, dtype=np.uint8)].tobytes())
    return pa.Array.from_buffers(texts.type, len(texts), [validity, offsets, mapped], texts.null_count, texts.offset)


def id_text_sql(rid: str, duck_type: str, alias: str = "") -> str:
    """SQL for the id's text as :func:`~dpcore.validation.cells._as_text` writes text and integer ids."""
    col = (f"{alias}." if alias else "") + '"' + rid.replace('"', '""') + '"'
    return col if duck_type.upper() == "VARCHAR" else f"CAST({col} AS VARCHAR)"


def write_form_counts(wh, source: str, rid: str, duck_type: str, mapping: tuple[str, str], rows: int,
                      max_forms: int, path: Path) -> bool:
    """Count the ids of ``source`` by form into the private Parquet ``path`` (``v``, ``n``); False past ``max_forms``.

    The ids are streamed ``rows`` at a time (Arrow batches); the counts held are at most ``max_forms``
    forms (public: from the cap), so memory stays bounded whatever the ids.

    Returns
    -------
    bool
        True when written; False when the ids have more than ``max_forms`` forms (nothing written).
    """
    counts: dict[str | None, int] = {}
    sql = f"SELECT {id_text_sql(rid, duck_type)} AS v FROM {source}"
    with closing(wh.iter_batches(sql, rows=rows)) as batches:  # closed (the connection handed back) on return
        for batch in batches:
            vc = pc.value_counts(forms_of(batch.column(0), mapping))
            for v, n in zip(vc.field(0).to_pylist(), vc.field(1).to_pylist()):
                counts[v] = counts.get(v, 0) + int(n)
            if len(counts) > max_forms:
                return False
    table = pa.table({"v": pa.array(list(counts), type=pa.string()), "n": pa.array(list(counts.values()), type=pa.int64())})
    with private_open(path, "wb") as fh:
        pq.write_table(table, fh)
    return True


def write_rows_of_forms(wh, source: str, rid: str, duck_type: str, mapping: tuple[str, str], rows: int,
                        forms: dict[str | None, int], path: Path) -> None:
    """The rows whose id has one of ``forms`` (form -> its position), as private Parquet ``path`` (``_row``, ``pos``)."""
    keys = pa.array(list(forms), type=pa.string())
    positions = pa.array(list(forms.values()), type=pa.int64())
    schema = pa.schema([("_row", pa.int64()), ("pos", pa.int64())])
    sql = f'SELECT "_row", {id_text_sql(rid, duck_type)} AS v FROM {source}'
    with private_open(path, "wb") as fh, pq.ParquetWriter(fh, schema) as out, \
            closing(wh.iter_batches(sql, rows=rows)) as batches:
        for batch in batches:
            idx = pc.index_in(forms_of(batch.column(1), mapping), keys, skip_nulls=False)
            hit = pc.is_valid(idx)
            out.write_table(pa.table({"_row": pc.filter(batch.column(0), hit).cast(pa.int64()),
                                      "pos": pc.take(positions, pc.filter(idx, hit))}, schema=schema))
