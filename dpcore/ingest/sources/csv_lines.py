"""Line ends of a CSV, scanned in blocks with numpy: the lines whose end differs from the header's (issue 46.3).

DuckDB's strict CSV reader stops on the first line whose end differs from the file's (a CRLF line among LF
lines, an LF or CR-only line among CRLF lines): "The CSV Parser state machine reached an invalid state", and
its ``strict_mode = false`` reads such a file but also silently drops a row's extra field and cuts a stray
quote's cell. So the line ends are found here, before DuckDB reads the file, and each line ending otherwise
than the header's line is a *reader reject* (:func:`dpcore.ingest.raw._create` reads a private copy of the
file without those lines and stores them as unreadable rows): one such line is a rejected row, not a
refused input (DESIGN.md rule 14).

A line end is an LF, a CRLF or a lone CR outside quoted cells. Whether a byte is inside a quoted cell follows
DuckDB's reading of quotes: a quote opens a quoted cell only at a field's start (after the delimiter, a line
end or another quote: a doubled quote); inside a quoted cell any quote closes it (a doubled quote closes and
reopens); a quote elsewhere is a literal character (``a"b`` is the cell ``a"b``). So a quote that cannot open
leaves the scan outside quotes whatever came before, and between two such quotes the state is the parity of
the quotes that can open (vectorised: no loop over the quotes). Lines are numbered as DuckDB numbers them in ``reject_errors``: 1 + the line ends before the line
(blank lines counted, a quoted cell's line breaks not).

Memory: one block (:data:`BLOCK`) and a few arrays of its size at a time, plus one tuple per line that differs
(never one per row); no Python loop over the rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Bytes scanned at a time.
BLOCK = 1 << 22

LF, CRLF, CR = 1, 2, 3
_STYLE_NAME = {LF: "LF", CRLF: "CRLF", CR: "CR"}


@dataclass(frozen=True)
class OddLines:
    """The lines whose end differs from the header line's, as arrays (one entry per such line, in file order).

    ``line``: its number; ``start``/``end``: its bytes ``[start, end)``, its line end included; ``style``: its
    end (:data:`LF`, :data:`CRLF` or :data:`CR`); ``blank``: only spaces, tabs and line-end bytes. 25 bytes an
    odd line, no Python object per line.
    """

    line: np.ndarray
    start: np.ndarray
    end: np.ndarray
    style: np.ndarray
    blank: np.ndarray

    def __len__(self) -> int:
        return len(self.line)

    @staticmethod
    def style_name(style: int) -> str:
        return _STYLE_NAME[int(style)]


def _quote_states(q: np.ndarray, before_q: np.ndarray, state: int, delimiter: int) -> np.ndarray:
    """The state (1: inside a quoted cell) after each quote of a block, the quotes at ``q`` with the byte before
    each ``before_q`` (-1 at the start of the file); ``state`` is the state before the block."""
    can_open = np.isin(before_q, (delimiter, 10, 13, 34, -1))
    resets = np.where(~can_open, np.arange(len(q)), -1)
    last = np.maximum.accumulate(resets)  # the last quote at or before each that cannot open (-1: none)
    opens = np.cumsum(can_open)
    since = opens - np.where(last >= 0, opens[np.maximum(last, 0)], 0)
    return (np.where(last >= 0, 0, state) + since) & 1


_BLANK = np.zeros(256, dtype=bool)
_BLANK[[32, 9, 10, 13]] = True


def odd_line_ends(path: Path | str, block: int = BLOCK, delimiter: str = ",") -> OddLines:
    """:func:`_scan` 's odd lines."""
    return _scan(path, block, delimiter, False)[0]


def blank_lines(path: Path | str, block: int = BLOCK, delimiter: str = ",") -> tuple[np.ndarray, int]:
    """The numbers of the blank lines (only spaces, tabs and line-end bytes) of ``path``, and the header's line
    (the first non-blank one; 0 when there is none). For numbering unreadable rows in place (:mod:`dpcore.ingest`):
    8 bytes a blank line."""
    _, blanks, header = _scan(path, block, delimiter, True)
    return blanks, header


def _scan(path: Path | str, block: int, delimiter: str, want_blank: bool) -> tuple[OddLines, np.ndarray, int]:
    """Every line of ``path`` whose line end differs from the first non-blank line's (the header's).

    Parameters
    ----------
    path : path
        A CSV file (any encoding: bytes only are looked at; quotes are ``"``).
    block : int
        Bytes read at a time.
    delimiter : str
        The field delimiter (a quote after it opens a quoted cell).

    Returns
    -------
    OddLines
        In file order; empty when every line end is the same kind (the usual case).

    Cost: three byte comparisons over each block, then work on its quotes and line ends only; the blank test
    runs on blocks holding odd lines (and until the header's line is found).
    """
    state = 0  # inside a quoted cell (1) before the block's first byte
    prev = -1  # the byte before the block (-1: none)
    line_no = 1  # number of the current line
    line_start = 0  # byte offset of the current line's first byte
    carried_nonblank = False  # the current line has a non-blank byte in earlier blocks
    ref = 0  # the header's line end (0: not seen yet)
    pending_cr = -1  # offset of a CR outside quotes that ended the previous block (its next byte unknown)
    odd: list[tuple] = []  # one tuple of arrays per block holding odd lines
    blank_parts: list[np.ndarray] = []  # with want_blank: the blank lines' numbers, per block
    header = 0
    offset = 0
    d = ord(delimiter)

    def emit(ends: np.ndarray, styles: np.ndarray, b: np.ndarray, base: int) -> None:
        """Record the line ends ``ends`` (file offsets, sorted) of block ``b`` (at file offset ``base``)."""
        nonlocal line_no, line_start, carried_nonblank, ref, header
        if not len(ends):
            return
        starts = np.empty_like(ends)
        starts[0] = line_start
        starts[1:] = ends[:-1] + 1
        numbers = line_no + np.arange(len(ends))
        blank = None

        def blanks() -> np.ndarray:
            nb = np.concatenate([[0], np.cumsum(~_BLANK[b])])  # non-blank bytes before each offset of the block
            lo = np.clip(starts - base, 0, len(b))
            hi = np.clip(ends - base, 0, len(b))
            out = nb[hi] == nb[lo]
            out[0] &= not (carried_nonblank and line_start < base)
            return out

        if ref == 0 or want_blank:
            blank = blanks()
            if want_blank:
                blank_parts.append(numbers[blank])
        if ref == 0:
            first = np.flatnonzero(~blank)
            if len(first):
                ref = int(styles[first[0]])
                header = int(numbers[first[0]])
        if ref:
            bad = np.flatnonzero(styles != ref)
            if len(bad):
                blank = blanks() if blank is None else blank
                odd.append((numbers[bad], starts[bad], ends[bad] + 1, styles[bad].astype(np.int8), blank[bad]))
        line_no += len(ends)
        line_start = int(ends[-1]) + 1
        carried_nonblank = False

    with Path(path).open("rb") as fh:
        while True:
            data = fh.read(block)
            if not data:
                break
            b = np.frombuffer(data, dtype=np.uint8)
            q = np.flatnonzero(b == 34)
            lf = np.flatnonzero(b == 10)
            cr = np.flatnonzero(b == 13)

            def byte_before(at: np.ndarray) -> np.ndarray:
                out = b[np.maximum(at - 1, 0)].astype(np.int16)
                out[at == 0] = prev
                return out

            after_q = _quote_states(q, byte_before(q), state, d) if len(q) else np.array([], dtype=np.int64)

            def outside(at: np.ndarray) -> np.ndarray:
                k = np.searchsorted(q, at)  # quotes before each position
                st = np.where(k > 0, after_q[np.maximum(k - 1, 0)] if len(q) else 0, state)
                return st == 0

            lf = lf[outside(lf)]
            cr = cr[outside(cr)]
            next_of_cr = np.where(cr + 1 < len(b), b[np.minimum(cr + 1, len(b) - 1)].astype(np.int16), -1)
            ends_list, styles_list = [], []
            if pending_cr >= 0 and b[0] != 10:  # a CR ending the previous block was a CR-only line end
                emit(np.array([pending_cr], dtype=np.int64), np.array([CR]), b[:0], offset)
            pending_cr = -1
            cr_only = cr[(next_of_cr != 10) & (next_of_cr != -1)]
            at = np.concatenate([lf, cr_only])
            style = np.concatenate([np.where(byte_before(lf) == 13, CRLF, LF), np.full(len(cr_only), CR)])
            order = np.argsort(at, kind="stable")
            emit((at[order] + offset).astype(np.int64), style[order], b, offset)
            if len(cr) and cr[-1] == len(b) - 1:
                pending_cr = offset + len(b) - 1
            tail_from = max(line_start - offset, 0)
            carried_nonblank = carried_nonblank or bool((~_BLANK[b[tail_from:]]).any())
            state = int(after_q[-1]) if len(q) else state
            prev = int(b[-1])
            offset += len(b)
    if pending_cr >= 0:
        emit(np.array([pending_cr], dtype=np.int64), np.array([CR]), np.zeros(0, dtype=np.uint8), offset)
    blanks = np.concatenate(blank_parts) if blank_parts else np.array([], dtype=np.int64)
    if header == 0 and line_start < offset and carried_nonblank:
        header = line_no  # the file's last line, with no line end, is its first non-blank one
    if not odd:
        e = np.array([], dtype=np.int64)
        return OddLines(e, e, e, np.array([], dtype=np.int8), np.array([], dtype=bool)), blanks, header
    return OddLines(*(np.concatenate(parts) for parts in zip(*odd))), blanks, header


def copy_without(path: Path | str, lines: OddLines, out, block: int = BLOCK) -> None:
    """Write ``path``'s bytes to the open binary file ``out`` without the bytes of ``lines`` (in file order).

    The input file itself is never modified; ``out`` is the caller's private file.
    """
    pos = 0
    with Path(path).open("rb") as fh:
        for start, end in [*zip(lines.start.tolist(), lines.end.tolist()), (None, None)]:
            stop = start  # copy [pos, start) then skip [start, end)
            while stop is None or pos < stop:
                want = block if stop is None else min(block, stop - pos)
                data = fh.read(want)
                if not data:
                    break
                out.write(data)
                pos += len(data)
            if end is None:
                break
            fh.seek(end)
            pos = end
