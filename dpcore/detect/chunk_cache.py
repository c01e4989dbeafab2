"""A streamed fit's private per-chunk arrays: written once next to the export, read back on every pass (issue 29).

The EM of :meth:`~dpcore.detect.robust_em.RobustRegressionDetector.fit_chunks`
passes over an export's chunks tens of times. :class:`dpcore.detect.streaming.PartitionChunks`
keeps two kinds of per-chunk arrays next to the export (in its private
scratch folder, removed with it): each chunk's encoded rows (the template's
contexts as :class:`~dpcore.detect.design.DesignColumns` and ``y``, written by
the first pass that decodes the chunk) and each chunk's standardised design
(written by the first EM pass). This module writes and reads them:
``.npy`` files (mode 0600, written to a temporary name and renamed, so
concurrent readers never see half a file) read back by :func:`load_npy`,
which parses each distinct ``.npy`` header once per process instead of once
per file (``numpy.load`` evaluates the header's text on every call: about a
twentieth of a pass over cached chunks). Internal: private rows, never logged.
"""
from __future__ import annotations

import ast
import os
import threading
from pathlib import Path

import numpy as np

from dpcore.storage.lineage import new_nonce
from dpcore.storage.private_files import private_open

__all__ = ["load_npy", "save_npys"]

_MAGIC = b"\x93NUMPY"
#: Parsed ``.npy`` headers (header bytes -> dtype, shape, Fortran order); bounded.
_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}
_HEADERS_MAX = 1024
_LOCK = threading.Lock()


def _parse_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], bool]:
    got = _HEADERS.get(header)
    if got is None:
        d = ast.literal_eval(header.decode("latin1"))
        got = (np.dtype(d["descr"]), tuple(int(k) for k in d["shape"]), bool(d["fortran_order"]))
        with _LOCK:
            if len(_HEADERS) >= _HEADERS_MAX:
                _HEADERS.clear()
            _HEADERS[header] = got
    return got


def load_npy(path: str | Path) -> np.ndarray:
    """The array of a version-1 ``.npy`` file without an object dtype (as :func:`numpy.save` writes them).

    The same array as ``numpy.load(path)``; other versions and object arrays
    are handed to :func:`numpy.load`.

    Raises
    ------
    OSError
        The file is shorter than its header says (a truncated file); the message names no file (a chunk's
        number is private: :meth:`dpcore.storage.partitions.Partitions.read`).
    """
    with open(path, "rb", buffering=0) as fh:
        head = fh.read(10)
        if len(head) < 10 or head[:6] != _MAGIC or head[6] != 1:
            return np.load(path)
        header = fh.read(int.from_bytes(head[8:10], "little"))
        dtype, shape, fortran = _parse_header(header)
        if dtype.hasobject:
            return np.load(path, allow_pickle=False)
        out = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        if out.nbytes:
            view = memoryview(out.reshape(-1, order="A").view(np.uint8))
            got = 0
            while got < out.nbytes:
                k = fh.readinto(view[got:])
                if not k:
                    raise OSError("a cached chunk file ends before its array does")  # its name holds a chunk number
                got += k
        return out


def save_npys(files: list[Path], arrays) -> None:
    """Write each array to its file (``.npy``, mode 0600) through a temporary name and a rename."""
    if files:
        files[0].parent.mkdir(mode=0o700, exist_ok=True)
    for path, arr in zip(files, arrays):
        tmp = path.with_name(f"{path.name}.{new_nonce(4)}.tmp")
        with private_open(tmp, "xb") as fh:
            np.save(fh, arr)
        os.replace(tmp, path)
