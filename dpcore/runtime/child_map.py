"""A mapper that runs a chunked stage's work in one short-lived child Python process (issue 29, goal 4).

``child_map(fn, items)`` is ``[fn(x) for x in items]`` (a mapper, as :func:`dpcore.runtime.chunks.serial_map`), with
every call made in a child process (``python -m dpcore.runtime.child_map``) that ends when the map does. What the
child imports to do the work stays out of the caller's process. The release uses it for validation under
a small memory cap (:attr:`dpcore.runtime.chunks.MemoryBudget.validates_in_child`): great-expectations and what
it loads (pandas, pyarrow, sqlalchemy, pydantic: about 190 MiB; docs/scale.md, "Under a cap below 1 GiB: memory before speed") would otherwise
stay resident in the flow process for the whole run, after validation needs them no more; the pictures'
matplotlib likewise (:func:`dpcore.publish.plots.draw_privately`).

Protocol: the parent writes one length-prefixed pickle ``(fn, item)`` at a time to the child's standard input
and reads one back from its standard output: ``("ok", result)`` or ``("error", exception, traceback text)``.
``fn`` must be picklable by reference (a module-level function). The items run one after the other, in
order, as :func:`~dpcore.runtime.chunks.serial_map` runs them; a result is the same object a call in the caller's
process returns (the work is the same function on the same input). Anything the child prints goes to its
standard error (the caller's), never into the protocol.

Errors: an exception raised by ``fn`` in the child is raised again in the caller, the same type and
message (a note says it came from the child; its traceback text is chained as the cause), so the caller
sees what an in-process call raises: a full disk is still an ``OSError`` (``ENOSPC``, :mod:`dpcore.runtime.faults`).
A child that dies (killed, out of memory) raises :class:`ChildProcessFailed` naming its exit status.

Ending: the child ends when its standard input closes: after the map, or when the caller dies (even by
SIGKILL), so a killed release leaves no child behind once the call in progress returns. Files the work
writes carry the modes the work gives them (the validation chunks' are 0600, :mod:`dpcore.storage.private_files`).

Privacy: the items and results travel over the two pipes between the two processes only (private
file names, small verdicts); nothing is logged.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import traceback
from typing import Any, BinaryIO, Callable, Iterable

__all__ = ["ChildProcessFailed", "child_map"]

_HEADER = struct.Struct("<Q")


class ChildProcessFailed(RuntimeError):
    """The child process of :func:`child_map` ended without answering (killed, out of memory, crashed)."""


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _write(stream: BinaryIO, data: bytes) -> None:
    """One message: its length, then the pickled bytes."""
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    """``n`` bytes, or None at end of file before the first byte (a partial message is an end of file too)."""
    chunks, got = [], 0
    while got < n:
        b = stream.read(n - got)
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _receive(stream: BinaryIO) -> tuple[bool, Any]:
    """``(True, object)``, or ``(False, None)`` at end of file."""
    head = _read_exact(stream, _HEADER.size)
    if head is None:
        return False, None
    body = _read_exact(stream, _HEADER.unpack(head)[0])
    if body is None:
        return False, None
    return True, pickle.loads(body)


def child_map(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]``, every call made in one child process started for this map.

    Parameters
    ----------
    fn : callable
        A module-level function (pickled by reference; the child imports its module).
    items : iterable
        Picklable inputs.

    Returns
    -------
    list
        ``fn(item)`` for each item, in item order.

    Raises
    ------
    Exception
        The first exception ``fn`` raised in the child, re-raised here (same type and message).
    ChildProcessFailed
        The child ended without answering.
    """
    items = list(items)
    if not items:
        return []
    from .heap import trim_heap

    trim_heap()  # the caller's free heap goes back to the system before a second process adds its own (dpcore.runtime.heap)
    proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out: list = []
    try:
        for item in items:
            try:
                _write(proc.stdin, _dumps((fn, item)))
            except BrokenPipeError:  # the child died: its exit status says how (below)
                break
            ok, reply = _receive(proc.stdout)
            if not ok:
                break
            if reply[0] == "ok":
                out.append(reply[1])
                continue
            _, exc, text = reply
            error = exc if isinstance(exc, BaseException) else RuntimeError(text.strip().splitlines()[-1])
            error.add_note(f"(raised in the child process of dpcore.runtime.child_map running {fn.__module__}.{fn.__qualname__})")
            raise error from RuntimeError(f"the child process's traceback:\n{text}")
    finally:
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        code = proc.wait()
    if len(out) == len(items):
        return out
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    raise ChildProcessFailed(
        f"the child process running {fn.__module__}.{fn.__qualname__} (dpcore.runtime.child_map) {how} before it answered; "
        "its messages, if any, are above (signal 9 is also what the system sends when the machine runs out of memory)"
    )


def main() -> int:
    """The child: answer each ``(fn, item)`` on standard input until it closes.

    The work is private (DESIGN.md rule 6): as in a private task of the flow process, whose warnings are
    dropped (``tasks.common``), no Python warning and no log record of the libraries it calls is shown; an
    error travels back to the caller only.
    """
    import logging
    import warnings

    warnings.simplefilter("ignore")  # a warning's text can quote a value
    logging.disable(logging.CRITICAL)  # as can a library's log record (the child has no owner-facing log)
    report: BinaryIO = os.fdopen(os.dup(1), "wb")  # the protocol; anything printed goes to standard error
    os.dup2(2, 1)
    requests: BinaryIO = sys.stdin.buffer
    while True:
        ok, job = _receive(requests)
        if not ok:
            return 0
        fn, item = job
        try:
            answer = _dumps(("ok", fn(item)))  # a result that does not pickle is an error too
        except BaseException as exc:  # noqa: BLE001  (reported to the parent, which raises it)
            text = traceback.format_exc()
            try:
                answer = _dumps(("error", exc, text))
            except Exception:  # noqa: BLE001  (an exception that does not pickle: its text only)
                answer = _dumps(("error", None, text))
        _write(report, answer)


if __name__ == "__main__":
    sys.exit(main())
