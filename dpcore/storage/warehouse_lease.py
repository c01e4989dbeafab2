"""A warehouse connection kept open while this process keeps using it, and given up when another waits.

DuckDB 2.0 spends about 35 ms creating a database instance (``duckdb.connect``, even in memory: it
starts and later joins its thread pool), and a release makes about 70 short warehouse operations
(:meth:`dpcore.storage.warehouse.Warehouse.run`): 2.5 s of a 6 s release of a small table went to opening
and closing the file. A *lease* keeps the process's connection, its place in the file's queue (the
advisory ``flock``) and the private umask after an operation ends, so that the next operation of the
same process reuses them. It is given up

* when another process waits for the file: a waiting process holds a shared ``flock`` on
  ``<file>.wait`` while it waits (:func:`announce_waiting`), and the holder tests for it after every
  operation and every few milliseconds while idle (:func:`someone_waits`), so a waiter waits at most
  for the operation under way plus one tick (:data:`TICK_S`);
* after :data:`IDLE_S` seconds without an operation (``DPR_WAREHOUSE_IDLE_S``; 0 turns leases off:
  every operation opens and closes its connection, as before);
* when an operation fails (the connection may be unusable), when the file was replaced, truncated or
  written by someone else since (its device, inode, size and modification time are compared), in a
  forked child (which never touches its parent's connection), and at exit.

Nothing about the data depends on it: each operation still runs in its own transaction when asked
(:meth:`~dpcore.storage.warehouse.Warehouse.run`) on a cursor of its own (its own transaction context,
temporary tables, registered frames and pending results, dropped when it ends, as with a connection of
its own before), and a crash loses exactly what it lost before (committed work is in DuckDB's write-ahead log, the ``flock`` dies with the process).

The module also owns what the warehouse and its lease share: the file's in-process lock
(:func:`process_lock`) and this process's hold of the file's queue (:data:`HOLDS`).
"""
from __future__ import annotations

import atexit
import fcntl
import os
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

#: Seconds an unused lease is kept (``DPR_WAREHOUSE_IDLE_S``; 0 = no leases)
IDLE_S = float(os.environ.get("DPR_WAREHOUSE_IDLE_S", "0.5"))
#: How often an idle lease looks for a waiting process (seconds)
TICK_S = 0.01


@dataclass
class Lease:
    """One process's open connection to one warehouse file (touch only under the file's in-process lock)."""

    pid: int
    con: object
    stamp: tuple | None
    memory: str
    stack: ExitStack
    wait_fd: int
    depth: int = 0
    last: float = field(default_factory=time.monotonic)


_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()
#: per lock file: [pid, fd, depth] of this process's hold of the file's queue, the advisory ``flock`` taken by
#: :meth:`dpcore.storage.warehouse.Warehouse._queued` (touched only under the file's :func:`process_lock`)
HOLDS: dict[str, list[int]] = {}


def process_lock(path: Path) -> threading.RLock:
    """The in-process lock of the warehouse file ``path`` (one re-entrant lock per file and process).

    Every operation of :class:`dpcore.storage.warehouse.Warehouse` on the file, and every change to its
    lease, holds it: operations of one process on one file run one at a time.
    """
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(path), threading.RLock())


def let_go(path: str | Path) -> None:
    """Close this process's kept connection to the warehouse file ``path``, if it has one and no operation of
    this process is using it (:meth:`dpcore.storage.warehouse.Warehouse.let_go`); a run unit calls it when it
    ends (also importable from :mod:`dpcore.storage.warehouse`)."""
    path = Path(path).resolve()
    with process_lock(path):
        held = get(str(path))
        if held is not None and held.depth == 0:
            close(str(path))


_LEASES: dict[str, Lease] = {}
_GUARD = threading.Lock()
_REAPER: list = [None, 0]  # [thread, pid]
_STOP = threading.Event()  # set at exit: the reaper ends before the interpreter does
#: connections inherited through ``fork``: the child never closes (checkpoints) its parent's database
_INHERITED: list = []


def stamp(path: Path) -> tuple | None:
    """What identifies the file's state from outside: device, inode, size, modification time (None: no file)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def open_wait_fd(path: Path) -> int:
    """A descriptor of the file's ``.wait`` file (empty, 0600), where waiting processes say so."""
    return os.open(path.with_name(path.name + ".wait"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def someone_waits(wait_fd: int) -> bool:
    """True while another process holds its shared "I am waiting" lock on the file's ``.wait`` file."""
    try:
        fcntl.flock(wait_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(wait_fd, fcntl.LOCK_UN)
    return False


class announce_waiting:
    """Hold a shared lock on the file's ``.wait`` file while this process waits for the file's queue."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> "announce_waiting":
        return self

    def now(self) -> None:
        """Start announcing (idempotent): called when the first attempt to take the queue fails."""
        if self.fd is None:
            self.fd = open_wait_fd(self.path)
            fcntl.flock(self.fd, fcntl.LOCK_SH)

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the shared lock
            self.fd = None


def get(key: str) -> Lease | None:
    lease = _LEASES.get(key)
    return lease if lease is not None and lease.pid == os.getpid() else None


def put(key: str, lease: Lease) -> None:
    with _GUARD:
        _LEASES[key] = lease
    _ensure_reaper()


def close(key: str) -> None:
    """Give up this process's lease on ``key`` (call under the file's in-process lock)."""
    with _GUARD:
        lease = _LEASES.pop(key, None)
    if lease is None or lease.pid != os.getpid():
        return
    con, lease.con = lease.con, None  # nothing keeps the connection object alive past its close
    try:
        con.close()  # DuckDB checkpoints here
    except Exception:  # noqa: BLE001  (a failed close, e.g. a full disk at the checkpoint, loses nothing:
        pass  # every committed transaction is in the write-ahead log, which the next open replays)
    finally:
        del con
        try:
            os.close(lease.wait_fd)
        finally:
            lease.stack.close()  # the queue's flock, then the private umask


def _reap() -> None:
    """Give up leases that are idle for :data:`IDLE_S`, or that another process waits for (daemon thread)."""
    while not _STOP.wait(TICK_S):
        with _GUARD:
            items = [(k, v) for k, v in _LEASES.items() if v.pid == os.getpid()]
        for key, lease in items:
            lock = process_lock(Path(key))
            if not lock.acquire(blocking=False):
                continue  # in use by an operation of this process
            try:
                if _LEASES.get(key) is lease and lease.depth == 0 and (
                        time.monotonic() - lease.last > IDLE_S or someone_waits(lease.wait_fd)):
                    close(key)
            finally:
                lock.release()
        items = key = lease = None  # the sleeping thread holds no connection


def exiting() -> bool:
    """True once this process has begun to exit (no connection is kept from then on)."""
    return _STOP.is_set()


def _ensure_reaper() -> None:
    if _STOP.is_set():
        return
    with _GUARD:
        thread, pid = _REAPER
        if thread is not None and pid == os.getpid() and thread.is_alive():
            return
        thread = threading.Thread(target=_reap, name="dpr-warehouse-lease", daemon=True)
        _REAPER[:] = [thread, os.getpid()]
    thread.start()


def close_all() -> None:
    """Give up every lease of this process that no operation is using (at exit; tests before they change the
    umask or the connection factory)."""
    for key in list(_LEASES):
        let_go(key)


def _after_fork_in_child() -> None:
    """A forked child keeps its parent's connections referenced (never closes or checkpoints them) and closes
    its copies of the parent's lock descriptors, so that the parent's release of the queue is a release."""
    global _LEASES, _GUARD, _STOP
    _GUARD = threading.Lock()  # the parent's may have been held by another thread at fork time
    _STOP = threading.Event()
    _REAPER[:] = [None, 0]
    for lease in _LEASES.values():
        _INHERITED.append(lease)
        try:
            os.close(lease.wait_fd)
        except OSError:
            pass
    _LEASES = {}
    for hold in HOLDS.values():
        try:
            os.close(hold[1])
        except OSError:
            pass
    HOLDS.clear()


def _at_exit() -> None:
    """Stop the reaper (a daemon thread caught inside DuckDB when the interpreter ends aborts the process), then
    close this process's leases."""
    _STOP.set()
    thread, pid = _REAPER
    if thread is not None and pid == os.getpid() and thread is not threading.current_thread():
        thread.join(timeout=10)
    close_all()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


# ------------------------------------------------------------------------------------- leftovers of dead processes
# Issue 47 §6: a process killed while it held private chunk folders (``<warehouse>.scratch/<nonce>/``) or a
# PostgreSQL spool part (``<warehouse>.scratch/postgres-<nonce>.csv``) leaves them behind. Every process that
# opens the warehouse says it is alive for as long as it runs: an exclusive ``flock`` on its own presence file
# ``<warehouse>.locks/live-<pid>-<nonce>`` (0600; the OS drops the lock when the process dies, and a forked child
# shares it). Whatever a live process puts in the scratch folder is made after its presence file, so an entry
# older than every live presence file belongs to no live process: :func:`clear_leftovers` removes those.

#: (warehouse path, pid) -> (descriptor, presence file) of this process
_PRESENCE: dict[tuple[str, int], tuple[int, Path]] = {}


def locks_dir(path: Path) -> Path:
    """``<warehouse>.locks/`` (0700): run locks and presence files."""
    d = Path(str(path) + ".locks")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def scratch_path(path: Path) -> Path:
    """``<warehouse>.scratch/``: the private chunk folders and spool parts of running processes."""
    return path.with_name(path.name + ".scratch")


def announce_presence(path: Path) -> None:
    """Hold this process's presence file for ``path`` until it exits (idempotent; called when it opens the file)."""
    key = (str(path), os.getpid())
    if key in _PRESENCE:
        return
    from .lineage import new_nonce

    try:
        file = locks_dir(path) / f"live-{os.getpid()}-{new_nonce(4)}"
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:  # a read-only home: this process cannot write scratch files either, so none can be its own
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file of its own: never held by anyone else
    _PRESENCE[key] = (fd, file)


def _drop_presence() -> None:
    for (_, pid), (fd, file) in list(_PRESENCE.items()):
        if pid == os.getpid():
            file.unlink(missing_ok=True)
            os.close(fd)


atexit.register(_drop_presence)


def live_since(path: Path) -> float | None:
    """The modification time of the oldest presence file a live process holds (None: no live process).

    Presence files of dead processes (their lock is free) are removed on the way.
    """
    oldest = None
    folder = Path(str(path) + ".locks")
    for file in folder.glob("live-*") if folder.is_dir() else ():
        try:
            fd = os.open(file, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held: a live process (this one included)
                t = os.fstat(fd).st_mtime
                oldest = t if oldest is None else min(oldest, t)
            else:
                file.unlink(missing_ok=True)  # its process died
        finally:
            os.close(fd)
    return oldest


def clear_leftovers(path: Path) -> list[str]:
    """Remove the scratch entries of ``path`` that no live process can hold; returns their names.

    An entry (chunk folder or spool part) is removed when it is older than the presence file of every live
    process that uses the warehouse (:func:`live_since`), so it was left by a process that has died.
    """
    import shutil

    folder = scratch_path(Path(path))
    if not folder.is_dir():
        return []
    since = live_since(Path(path))
    removed = []
    for entry in sorted(folder.iterdir()):
        try:
            mtime = entry.lstat().st_mtime
        except FileNotFoundError:
            continue
        if since is not None and mtime >= since:
            continue  # possibly a live process's
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed
