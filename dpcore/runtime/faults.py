"""Faults of the machine, not of the user: a full disk, a read-only or unreadable home, a symlink loop, a bad disk.

A refusal (exit code 2) says the user's spec, input or request was wrong or
over budget. An environment failure is different: the same command works once
the machine is fixed. :func:`environment_fault` recognises one anywhere in an
exception's chain (Python's ``OSError`` with its ``errno``, or DuckDB's
``IOException``, whose text carries the operating system's message) and
states its *first* cause, the innermost one, in one line; the command line
exits 1 with it instead of a traceback (:func:`dpcore.run.errors.user_facing`).

Three faults have a line of their own: a write-ahead log DuckDB cannot
replay (:func:`wal_damaged`), the Prefect server going away during a command
(:func:`orchestrator_gone`) and DuckDB running out of its share of
``DPR_MEMORY_LIMIT`` (:func:`out_of_memory`).

The line holds the operating system's message, its errno name and the file
path involved (or the setting's name and value): never a value of the data.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

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


#: DuckDB's texts for a write-ahead log it cannot replay (duckdb 2.0): the log, not the main file, is damaged
_WAL_TEXTS = ("Failure while replaying WAL file", "Corrupt WAL file")
#: httpx's errors of a server that stopped answering (connection refused or dropped), by class name
_GONE = {"ConnectError", "ConnectTimeout", "RemoteProtocolError", "ReadError", "WriteError"}


def wal_damaged(exc: BaseException) -> EnvironmentFault | None:
    """The one-line fault of a DuckDB error saying the warehouse's write-ahead log cannot be replayed, or None.

    A damaged ``<warehouse>.wal`` (a crash mid-write, then changed bytes) stops every open of the file. Deleting
    the log to get past it would silently drop what it holds (charges among it: the ledger would roll back), so
    the line says to restore the backup instead. It names the log's path only.
    """
    try:
        import duckdb
    except ImportError:  # pragma: no cover - duckdb is a dependency
        return None
    text = str(exc)
    if not isinstance(exc, duckdb.Error) or not any(t in text for t in _WAL_TEXTS):
        return None
    m = re.search(r'WAL file "([^"]+)"', text)
    wal = m.group(1) if m else "the warehouse's .wal file"
    return EnvironmentFault(
        f"the warehouse's write-ahead log {wal} is damaged (DuckDB cannot replay it): an environment failure, not "
        "a refusal: restore the warehouse and the owner key from your latest backup (docs/backups.md, 'What, when and how'). Do not "
        "delete the .wal to get past this (the charges it holds would be lost); without a backup, move the "
        "warehouse and its .wal aside and run `dpr budget recover --from-bundles`", errno.EIO)


def orchestrator_gone(exc: BaseException) -> EnvironmentFault | None:
    """The one-line fault of the Prefect API going away during a command (an httpx connection error), or None.

    The release's charges live in the warehouse's ledger, not in Prefect: running the same release id again
    resumes within its reservation and charges nothing more (docs/operating.md, "Retries, refusals, crashes and progress").
    """
    if type(exc).__name__ not in _GONE or not type(exc).__module__.startswith(("httpx", "httpcore")):
        return None
    url = os.environ.get("PREFECT_API_URL") or "the Prefect API"
    return EnvironmentFault(
        f"the Prefect server at {url} stopped answering ({type(exc).__name__}: {exc}): the orchestrator went away, "
        "an environment failure, not a refusal: start it again (`dpr server start`, or unset PREFECT_API_URL for "
        "a temporary one) and run the same command again: a release id run again resumes within its "
        "reservation and charges nothing more", errno.ECONNREFUSED)


def out_of_memory(exc: BaseException) -> EnvironmentFault | None:
    """The one-line fault of DuckDB running out of its share of ``DPR_MEMORY_LIMIT``, or None.

    Names the setting and its value, never a value of the data.
    """
    try:
        import duckdb
    except ImportError:  # pragma: no cover - duckdb is a dependency
        return None
    if not isinstance(exc, duckdb.OutOfMemoryException):
        return None
    cap = os.environ.get("DPR_MEMORY_LIMIT") or "unset (2 GiB)"
    return EnvironmentFault(
        f"DuckDB ran out of memory under DPR_MEMORY_LIMIT={cap}: an environment failure, not a refusal: raise "
        "DPR_MEMORY_LIMIT (docs/scale.md) or free memory, then run the same command again (a "
        "release id run again resumes within its reservation)", errno.ENOMEM)


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
        named = wal_damaged(item) or orchestrator_gone(item) or out_of_memory(item)
        if named is not None:
            item = named
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


#: This process's details log, once created (:func:`save_details`)
_DETAILS: list[Path] = []


def _details_file() -> Path | None:
    """This process's details log (created empty, 0600, on first use), or None when no folder takes it.

    ``$DPR_HOME/logs/dpr-<UTC time>-<pid>.log`` (the folder 0700), else the same name in
    ``<temp dir>/dpr-logs-<uid>`` when the home cannot take it (read-only, full); a folder of another user or
    a link is never used, and the file is created new (``O_EXCL``, no link followed).
    """
    if _DETAILS:
        return _DETAILS[0]
    import tempfile
    import time

    name = f"dpr-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.log"
    home = Path(os.environ.get("DPR_HOME") or "var")
    for folder in (home / "logs", Path(tempfile.gettempdir()) / f"dpr-logs-{os.getuid()}"):
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
        except OSError:
            continue
        _DETAILS.append(folder / name)
        return _DETAILS[0]
    return None


def save_details(text: str) -> Path | None:
    """Append ``text`` (a traceback, a log record) to this process's details log; its path, or None if unwritable.

    The owner's terminal gets the one line (:func:`environment_fault`); what Prefect and Python print with it
    goes here, readable by the owner only. Exception texts carry no private values (DESIGN.md), so neither
    does the log.
    """
    path = _details_file()
    if path is None:
        return None
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
    except OSError:
        return None
    return path


def is_environment_fault(exc: BaseException) -> bool:
    """True when ``exc``'s chain holds an environment failure (:func:`environment_fault`)."""
    return environment_fault(exc) is not None
