"""The line-end scan of :mod:`dpcore.csv_lines` (issue 46.3): the same lines whatever the block size, and the
same as a byte-by-byte reference of the rules it states (quotes open at a field's start only)."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from dpcore.ingest.sources.csv_lines import CR, CRLF, LF, odd_line_ends


def reference(data: bytes, delimiter: int = 44) -> list[tuple[int, int, int, int, bool]]:
    """(line, start, end, style, blank) of every odd line, by a plain loop over the bytes."""
    inside, prev, line, start, ref, out = False, -1, 1, 0, 0, []
    ends = []
    i = 0
    while i < len(data):
        c = data[i]
        if c == 34:
            inside = False if inside else prev in (delimiter, 10, 13, 34, -1)
        elif not inside and c == 10:
            ends.append((i, CRLF if prev == 13 else LF))
        elif not inside and c == 13 and (i + 1 == len(data) or data[i + 1] != 10):
            ends.append((i, CR))
        prev = c
        i += 1
    for end, style in ends:
        blank = all(ch in b" \t\r\n" for ch in data[start:end + 1])
        if ref == 0 and not blank:
            ref = style
        if ref and style != ref:
            out.append((line, start, end + 1, style, blank))
        line, start = line + 1, end + 1
    return out


def _random(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randint(1, 30)):
        parts.append(rng.choice([b"a", b"1", b",", b'"', b'""', b" ", b"\t", b"\n", b"\r\n", b"\r", b"x,y"]))
    return b"id,b\n" + b"".join(parts)


@pytest.mark.parametrize("seed", range(200))
def test_the_scan_matches_the_reference_at_every_block_size(seed: int, tmp_path: Path):
    data = _random(random.Random(seed))
    path = tmp_path / "in.csv"
    path.write_bytes(data)
    want = reference(data)
    for block in (1, 2, 3, 7, 1 << 20):
        got = odd_line_ends(path, block)
        found = list(zip(got.line.tolist(), got.start.tolist(), got.end.tolist(), got.style.tolist(),
                         got.blank.tolist()))
        assert found == want, (block, data)
