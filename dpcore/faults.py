"""Faults of the machine, not of the user: a full disk, a read-only or unreadable home, a symlink loop, a bad disk.

A refusal (exit code 2) says the user's spec, input or request was wrong or
over budget. An environment failure is different: the same command works once
the machine is fixed. :func:`environment_fault` recognises one anywhere in an
exception's chain (Python's ``OSError`` with its ``errno``, or DuckDB's
``IOException``, whose text carries the operating system's message) and
states its *first* cause, the innermost one, in one line; the command line
exits 1 with it instead of a traceback (:func:`dpcore.errors.user_facing`).

The line holds the operating system's message, its errno name and the file
path involved: never a value of the data.
"""
from __future__ import annotations

import errno
import os
import re

#: errno -> what the owner does about it
ADVICE = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space or raise the disk quota",
    errno.EACCES: "give this user write access to it (or point DPR_HOME elsewhere)",
    errno.EPERM: "give this user write access to it (or point DPR_HOME elsewhere)",
    errno.EROFS: "the file system is mounted read-only: point DPR_HOME at a writable disk",
    errno.ELOOP: "a symbolic link on that path points (indirectly) at itself: fix or remove the link",
    errno.EIO: "the disk reported an input/output error: check the disk and its data",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    errno.ENFILE: "too many open files on the system",
}

#: DuckDB's ``IOException`` carries the OS message as text: message -> errno
_DUCKDB_TEXT = {os.strerror(e): e for e in ADVICE}


class EnvironmentFault(RuntimeError):
    """An environment failure stated in one line (``str(exc)``); raised by the pipeline's own checks."""

    def __init__(self, line: str, code: int):
        super().__init__(line)
        self.errno = code


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes, outermost first (each once)."""
    seen: list[BaseException] = []
    while exc is not None and all(exc is not s for s in seen):
        seen.append(exc)
        exc = exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__
    return seen


def _duckdb_fault(exc: BaseException) -> tuple[int, str | None] | None:
    try:
        import duckdb
    except ImportError:  # pragma: no cover - duckdb is a dependency
        return None
    if not isinstance(exc, duckdb.IOException):
        return None
    text = str(exc)
    for message, code in _DUCKDB_TEXT.items():
        if message in text:
            m = re.search(r'(?:file|directory) "([^"]+)"', text)
            return code, (m.group(1) if m else None)
    return None


def _fault_of(exc: BaseException) -> tuple[int, str | None] | None:
    if isinstance(exc, EnvironmentFault):
        return exc.errno, None
    if isinstance(exc, OSError) and exc.errno in ADVICE:
        return exc.errno, exc.filename
    if type(exc) is RuntimeError and str(exc).startswith("Symlink loop from "):  # pathlib's Path.resolve()
        return errno.ELOOP, str(exc)[len("Symlink loop from "):].strip("'")
    return _duckdb_fault(exc)


def environment_fault(exc: BaseException) -> str | None:
    """The one-line first cause of an environment failure in ``exc``'s chain, or None.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    str or None
        ``"<OS message> (<ERRNO>) on <path>: an environment failure, not a refusal: <advice>, then run the same
        command again"``; None when no exception in the chain is one.
    """
    found = None
    for item in _chain(exc):  # outermost first: keep the innermost (the first cause)
        fault = _fault_of(item)
        if fault is not None:
            found = (item, fault)
    if found is None:
        return None
    item, (code, filename) = found
    if isinstance(item, EnvironmentFault):
        return str(item)
    where = f" on {filename}" if filename else ""
    return (f"{os.strerror(code)} ({errno.errorcode.get(code, code)}){where}: an environment failure, not a "
            f"refusal: {ADVICE[code]}, then run the same command again")


def is_environment_fault(exc: BaseException) -> bool:
    """True when ``exc``'s chain holds an environment failure (:func:`environment_fault`)."""
    return environment_fault(exc) is not None
