"""Private files on disk: readable by the data owner only, whatever the umask (DESIGN.md rule 11).

Every file that holds private data or owner-only results (the warehouse and
its write-ahead log and spill folder, the owner key, a bundle's ``owner/``
folder, the materialised demo data, scratch exports) is *created* with mode
0600 and every folder holding them with 0700, instead of being created with
the process umask (usually 022: readable by every user) and tightened
afterwards, which leaves a window in which another user can open it.

Three ways, from the most to the least direct:

* :func:`private_open` / :func:`write_private_text` / :func:`private_dir`:
  ``os.open`` / ``mkdir`` with the private mode (files we write ourselves;
  pandas and pyarrow writers are handed the open file object).
* :func:`private_umask`: the process umask is 077 while the block runs, for
  files created by code that takes no mode: DuckDB's database file, its
  ``.wal`` and its ``.tmp`` spill folder are created while a connection is
  open, so :class:`dpcore.storage.warehouse.Warehouse` holds the block for each
  connection's life. The umask is process-wide: the blocks are counted, so
  overlapping blocks of several threads restore the owner's umask only when
  the last one ends; a public file written by another thread meanwhile comes
  out 0600 (too private, never too open), which :func:`publish` undoes for
  the public bundle.
* :func:`tighten`: files made by an older version (a warehouse created 0644)
  are set to 0600 when opened; the only place a mode is changed afterwards.

Nothing here reads or logs a file's content.
"""
from __future__ import annotations

import os
import secrets
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

#: Mode of a private file (owner read/write).
PRIVATE_FILE = 0o600
#: Mode of a private folder (owner only).
PRIVATE_DIR = 0o700

_GUARD = threading.Lock()
_DEPTH = 0
_SAVED: int | None = None


@contextmanager
def private_umask() -> Iterator[None]:
    """Run the block with the process umask 077 (files 0600, folders 0700 by default).

    Re-entrant and safe across threads: the owner's umask is saved by the
    first block to start and restored by the last one to end.
    """
    global _DEPTH, _SAVED
    with _GUARD:
        if _DEPTH == 0:
            _SAVED = os.umask(0o077)
        _DEPTH += 1
    try:
        yield
    finally:
        with _GUARD:
            _DEPTH -= 1
            if _DEPTH == 0:
                os.umask(_SAVED if _SAVED is not None else 0o022)
                _SAVED = None


def owner_umask() -> int:
    """The process umask outside any :func:`private_umask` block (the owner's own setting)."""
    with _GUARD:
        if _DEPTH:
            return int(_SAVED)
        try:  # Linux >= 4.7 shows it without changing it
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
        except (OSError, ValueError, IndexError):
            pass
        mask = os.umask(0o077)
        os.umask(mask)
        return mask


def public_mkdir(path: str | Path) -> Path:
    """Create ``path`` and its missing parents with the owner's usual folder mode (umask applied), whatever
    umask a thread of this process holds (:func:`private_umask`, a kept warehouse connection); existing folders
    are left as they are. Returns ``path``."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    mode = 0o777 & ~owner_umask()
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            if not p.is_dir():
                raise
            continue
        os.chmod(p, mode)
    return path


def private_dir(path: str | Path, *, root: str | Path | None = None) -> Path:
    """Create ``path`` as a private folder (0700), or make an existing one private.

    Parameters
    ----------
    path : str or Path
    root : str or Path, optional
        Missing folders strictly below ``root`` on the way to ``path`` are
        created 0700 too; ``root`` and the folders above it with the usual
        mode (a shared folder such as the home, which holds the public
        bundles). Default: ``path``'s parent (only ``path`` is private).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    top = Path(root) if root is not None else path.parent
    if not path.is_relative_to(top) or path == top:
        raise ValueError(f"private_dir: {path} is not below {top}")
    public_mkdir(top)
    here = top
    for part in path.relative_to(top).parts:
        here = here / part
        try:
            here.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            if not here.is_dir():
                raise
    tighten(path)
    return path


def tighten(path: str | Path) -> None:
    """Take the group and other permission bits off an existing file or folder (made by an older version).

    A missing path is left alone. Used on paths that must already be private,
    never to open one.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_IMODE(mode) & 0o077:
        os.chmod(path, stat.S_IMODE(mode) & 0o700)


def private_open(path: str | Path, mode: str = "w", **kwargs) -> IO:
    """Open ``path`` for writing as a private file (created 0600; an existing one truncated and made 0600).

    Parameters
    ----------
    path : str or Path
    mode : {"w", "wb", "x", "xb"}
        Text or binary; ``x`` refuses an existing file.
    **kwargs
        Passed to :func:`os.fdopen` (``encoding``, ``newline``).
    """
    if mode not in ("w", "wb", "x", "xb"):
        raise ValueError(f"private_open: mode must be w, wb, x or xb, got {mode!r}")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if mode.startswith("x") else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:  # an existing file keeps its mode through O_CREAT
            os.fchmod(fd, PRIVATE_FILE)
        if "b" not in mode:
            kwargs.setdefault("encoding", "utf-8")
        return os.fdopen(fd, "w" + ("b" if "b" in mode else ""), **kwargs)
    except BaseException:
        os.close(fd)
        raise


def write_private_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` as a private file; returns ``path``."""
    with private_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_private_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` as a private file through a temporary file and a rename (never half written)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")  # a random name (OS CSPRNG), never guessed
    try:
        with private_open(tmp, "x") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def publish(folder: str | Path, *, private: tuple[str, ...] = ("owner",)) -> None:
    """Give a public folder's files and folders the owner's usual modes (umask applied), except ``private``.

    A public file created while another thread held :func:`private_umask`
    would otherwise stay 0600; the named top-level entries (``owner/``) are
    left as they are.
    """
    mask = owner_umask()
    folder = Path(folder)
    os.chmod(folder, 0o777 & ~mask)
    for entry in folder.iterdir():
        if entry.name in private:
            continue
        _publish_tree(entry, mask)


def _publish_tree(path: Path, mask: int) -> None:
    if path.is_symlink():
        return
    if path.is_dir():
        os.chmod(path, 0o777 & ~mask)
        for child in path.iterdir():
            _publish_tree(child, mask)
    else:
        os.chmod(path, 0o666 & ~mask)
