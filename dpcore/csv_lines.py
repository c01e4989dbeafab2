"""Line ends of a CSV, scanned in blocks with numpy: the lines whose end differs from the header's (issue 46.3).

DuckDB's strict CSV reader stops on the first line whose end differs from the file's (a CRLF line among LF
lines, an LF or CR-only line among CRLF lines): "The CSV Parser state machine reached an invalid state", and
its ``strict_mode = false`` reads such a file but also silently drops a row's extra field and cuts a stray
quote's cell. So the line ends are found here, before DuckDB reads the file, and each line ending otherwise
than the header's line is a *reader reject* (:func:`dpcore.ingest._create` reads a private copy of the
file without those lines and stores them as unreadable rows): one such line is a rejected row, not a
refused input (DESIGN.md rule 14).

A line end is an LF, a CRLF or a lone CR outside quoted cells. Whether a byte is inside a quoted cell is the
parity of the double quotes before it (RFC 4180: a quote inside a quoted cell is doubled, so it toggles
twice). Lines are numbered as DuckDB numbers them in ``reject_errors``: 1 + the line ends before the line
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


def odd_line_ends(path: Path | str, block: int = BLOCK) -> OddLines:
    """Every line of ``path`` whose line end differs from the first non-blank line's (the header's).

    Parameters
    ----------
    path : path
        A CSV file (any encoding: bytes only are looked at; quotes are ``"``).
    block : int
        Bytes read at a time.

    Returns
    -------
    OddLines
        In file order; empty when every line end is the same kind (the usual case).
    """
    parity = 0  # inside a quoted cell before the block's first byte
    prev = -1  # the byte before the block (-1: none)
    line_no = 1  # number of the current line
    line_start = 0  # byte offset of the current line's first byte
    nonblank_before = 0  # non-blank bytes seen in the file before the block
    line_nonblank_at = 0  # value of the non-blank byte count at the current line's start
    ref = 0  # the header's line end (0: not seen yet)
    pending_cr = -1  # offset of a CR outside quotes that ended the previous block (its next byte unknown)
    odd: list[tuple] = []  # one tuple of arrays per block holding odd lines
    offset = 0

    def emit(ends: np.ndarray, styles: np.ndarray, nb_at_end: np.ndarray) -> None:
        nonlocal line_no, line_start, line_nonblank_at, ref
        if not len(ends):
            return
        starts = np.empty_like(ends)
        starts[0] = line_start
        starts[1:] = ends[:-1] + 1
        nb_start = np.empty_like(nb_at_end)
        nb_start[0] = line_nonblank_at
        nb_start[1:] = nb_at_end[:-1]
        blank = nb_at_end == nb_start
        numbers = line_no + np.arange(len(ends))
        if ref == 0:
            first = np.flatnonzero(~blank)
            if len(first):
                ref = int(styles[first[0]])
        if ref:
            bad = np.flatnonzero(styles != ref)
            if len(bad):
                odd.append((numbers[bad], starts[bad], ends[bad] + 1, styles[bad].astype(np.int8), blank[bad]))
        line_no += len(ends)
        line_start = int(ends[-1]) + 1
        line_nonblank_at = int(nb_at_end[-1])

    with Path(path).open("rb") as fh:
        while True:
            data = fh.read(block)
            if not data:
                break
            b = np.frombuffer(data, dtype=np.uint8)
            q = (b == 34).astype(np.int64)
            inside = ((parity + np.cumsum(q) - q) & 1).astype(bool)  # inside a quoted cell before each byte
            nonblank = ~np.isin(b, (32, 9, 10, 13))
            nb_cum = nonblank_before + np.cumsum(nonblank)  # non-blank bytes up to and including each byte
            is_lf = (b == 10) & ~inside
            is_cr = (b == 13) & ~inside
            before = np.empty(len(b), dtype=np.int16)
            before[0] = prev
            before[1:] = b[:-1]
            after = np.empty(len(b), dtype=np.int16)
            after[:-1] = b[1:]
            after[-1] = -1  # unknown: decided with the next block
            ends_list, styles_list, nb_list = [], [], []
            if pending_cr >= 0 and b[0] != 10:  # a CR ending the previous block was a CR-only line end
                ends_list.append(np.array([pending_cr]))
                styles_list.append(np.array([CR]))
                nb_list.append(np.array([nonblank_before]))
            pending_cr = -1
            lf_at = np.flatnonzero(is_lf)
            cr_at = np.flatnonzero(is_cr & (after != 10) & (after != -1))
            at = np.concatenate([lf_at, cr_at])
            style = np.concatenate([np.where(before[lf_at] == 13, CRLF, LF), np.full(len(cr_at), CR)])
            order = np.argsort(at, kind="stable")
            at, style = at[order], style[order]
            ends_list.append(at + offset)
            styles_list.append(style)
            nb_list.append(nb_cum[at])
            emit(np.concatenate(ends_list).astype(np.int64), np.concatenate(styles_list),
                 np.concatenate(nb_list).astype(np.int64))
            if is_cr[-1]:
                pending_cr = offset + len(b) - 1
            parity = int((parity + int(q.sum())) & 1)
            prev = int(b[-1])
            nonblank_before = int(nb_cum[-1])
            offset += len(b)
    if pending_cr >= 0:
        emit(np.array([pending_cr], dtype=np.int64), np.array([CR]), np.array([nonblank_before], dtype=np.int64))
    if not odd:
        e = np.array([], dtype=np.int64)
        return OddLines(e, e, e, np.array([], dtype=np.int8), np.array([], dtype=bool))
    return OddLines(*(np.concatenate(parts) for parts in zip(*odd)))


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
