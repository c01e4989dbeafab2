"""Before the first charge: the paths a run will write and read are usable (issue 33, part 4).

A run that finds out only at its end that it cannot write its bundle has
already charged its steps. So every flow checks, when it starts (and
``dpr run`` before Prefect starts), the paths it will need, each fault in one
line naming the path and what to do (:class:`PathsRefusedError`, exit 2):

* the home, the warehouse's folder and the bundles folder exist as folders
  (or can be created) and this user can create files in them (a real probe:
  a file created and removed, which also catches read-only mounts and holds
  for root, whom permission bits do not stop);
* the warehouse, if it exists, is a file;
* the bundle's folder ``<bundles>/<dataset>/<release id>`` and its parents
  are folders where they exist (not files);
* the input named by ``dataset.source.path`` is a file, not a folder (except a Parquet dataset's folder).

An operating-system failure met while checking (a symlink loop, an I/O
error, a full disk) is not turned into a refusal: it propagates and the
command line reports it as an environment failure (exit 1,
:mod:`dpcore.runtime.faults`).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from dpcore.storage.lineage import new_nonce
from dpcore.storage.settings import Settings
from .spec import DemoSource, ReleaseSpec

#: errno values of a folder this user cannot write (a refusal: the owner fixes the setting or the permissions)
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class PathsRefusedError(RuntimeError):
    """A path the run needs is unusable (a file where a folder belongs, a folder not writable, ...); nothing charged."""


def _existing_ancestor(path: Path) -> Path:
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def _probe_writable(folder: Path, what: str) -> None:
    """Create and remove a file in ``folder`` (or its nearest existing ancestor); refuse if this user cannot."""
    here = _existing_ancestor(folder)
    if not here.is_dir():
        raise PathsRefusedError(f"{what} {folder}: {here} exists and is not a folder; move it away or point "
                                f"the setting elsewhere (nothing was charged)")
    probe = here / f".dpr-write-check-{new_nonce(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            raise PathsRefusedError(
                f"{what} {here} is not writable by this user ({os.strerror(exc.errno)}): give this user write "
                "access to it, or point DPR_HOME (or DPR_WAREHOUSE / DPR_BUNDLES) at a writable folder "
                "(nothing was charged)"
            ) from None
        raise
    os.close(fd)
    os.unlink(probe)


def check_paths(spec: ReleaseSpec, settings: Settings) -> None:
    """Refuse, before any charge, a run whose home, warehouse, bundle or input path is unusable.

    Parameters
    ----------
    spec : ReleaseSpec
        Names the dataset, the release id and the input.
    settings : Settings
        The home's paths.

    Raises
    ------
    PathsRefusedError
        One line naming the path and the fix.
    OSError
        An environment failure met while checking (ELOOP, EIO, ENOSPC, ...).
    """
    _probe_writable(settings.home, "the home (DPR_HOME)")
    if settings.warehouse.exists() and not settings.warehouse.is_file():
        raise PathsRefusedError(f"the warehouse {settings.warehouse} exists and is not a file; point DPR_WAREHOUSE "
                                "at the warehouse file (nothing was charged)")
    if settings.warehouse.parent != settings.home:
        _probe_writable(settings.warehouse.parent, "the warehouse's folder")
    bundle = settings.bundles / spec.dataset.name / spec.release_id
    for folder in (settings.bundles, settings.bundles / spec.dataset.name, bundle):
        if folder.exists() and not folder.is_dir():
            raise PathsRefusedError(
                f"the bundle path {folder} exists and is not a folder: move it away, or choose another release id "
                "(--release-id) or DPR_BUNDLES (nothing was charged)"
            )
    if settings.bundles != settings.home:
        _probe_writable(settings.bundles, "the bundles folder (DPR_BUNDLES)")
    if settings.data.exists() and not settings.data.is_dir():
        raise PathsRefusedError(f"{settings.data} exists and is not a folder; move it away (nothing was charged)")
    src = spec.dataset.source
    if src.kind == "postgres":
        return  # a database: dpcore.ingest.sources.postgres refuses what it cannot reach, before any charge
    if not isinstance(src, DemoSource):
        path = Path(src.path)
        if src.kind == "parquet" and path.is_dir():
            return  # a Parquet dataset (issue 31): a folder of files
        if os.path.lexists(path):
            os.stat(path)  # a symlink loop raises ELOOP here: an environment failure, not a refusal
        if path.is_dir():
            raise PathsRefusedError(
                f"the input {path} (dataset.source.path) is a folder; give the path of the input file "
                "(nothing was charged)"
            )
