"""The bytes of a PostgreSQL ``COPY … TO STDOUT`` read as a file (dpcore.sources.postgres._CopyStream), no server."""
from __future__ import annotations

import io
import random

import pytest

from dpcore.sources.postgres import _CopyStream


class _FakeCopy:
    """psycopg's ``Copy.read()``: one message (a row) per call as a memoryview, then ``b""``."""

    def __init__(self, rows: list[bytes]):
        self.rows = list(rows)
        self.calls = 0

    def read(self):
        self.calls += 1
        return memoryview(self.rows.pop(0)) if self.rows else b""


@pytest.mark.parametrize("buffer", [1, 7, 64, 1 << 20])
def test_every_byte_arrives_in_order_whatever_the_buffer(buffer):
    rng = random.Random(buffer)
    rows = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 90))) for _ in range(500)]
    stream = io.BufferedReader(_CopyStream(_FakeCopy(rows)), buffer)
    got = b"".join(iter(lambda: stream.read(rng.randrange(1, 300)), b""))
    assert got == b"".join(rows)


def test_a_block_holds_many_rows_so_the_reader_is_called_per_block_not_per_row():
    rows = [b"F%06d,1,2\n" % i for i in range(10_000)]
    raw = _CopyStream(_FakeCopy(rows))
    buf = bytearray(1 << 16)
    n = raw.readinto(buf)
    assert n == len(buf) and bytes(buf) == b"".join(rows)[:n]
    assert raw.readinto(bytearray(0)) == 0
