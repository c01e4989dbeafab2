"""Which spec files a flow run may read: only those inside the folders the data owner allows.

Every flow takes ``spec_path``, which an operator types into the Prefect UI's
form, and the worker reads that file. Without a limit an operator could make
the worker read any file of its machine (``/etc/shadow``, the owner's key) and
see pieces of it in the run's error (issue 33 item 7). The owner lists the
allowed folders in ``DPR_SPECS_DIR`` (:func:`dpcore.storage.settings.specs_dirs_from_env`);
:func:`allowed_spec_file` refuses every other path before the file is opened.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Sequence

from .spec import SpecError


class SpecPathError(SpecError):
    """A ``spec_path`` outside the folders flow runs may load specs from (or not a regular file)."""


def allowed_spec_file(spec_path: str | Path, allowed: Sequence[Path]) -> Path:
    """The real path of ``spec_path`` if it lies inside one of the ``allowed`` folders.

    Every symbolic link of ``spec_path`` is resolved first (``os.path.realpath``,
    which also applies each ``..`` to the folder it really is in), then the
    real path must lie inside the real path of an allowed folder. So a link
    inside an allowed folder that points out of it is refused, and so is a
    ``..`` that climbs out. A relative ``spec_path`` is taken against the
    working directory (the project root for deployments).

    Parameters
    ----------
    spec_path : str or Path
        The path the operator asked for.
    allowed : sequence of Path
        The allowed folders (``Settings.specs_dirs``).

    Returns
    -------
    Path
        The resolved file path; read this one, not ``spec_path`` (a link swapped
        after the check then cannot redirect the read).

    Raises
    ------
    SpecPathError
        The path is outside every allowed folder (the message names the
        requested path and the allowed folders only, never where a link
        points nor anything of the file), or it is not a regular file.
        A missing file inside an allowed folder is left to the loader
        (``spec file not found``).
    """
    requested = str(spec_path)
    roots = [Path(os.path.realpath(d)) for d in allowed]
    real = Path(os.path.realpath(requested)) if "\x00" not in requested else None
    if real is None or not any(real != root and real.is_relative_to(root) for root in roots):
        folders = ", ".join(str(r) for r in roots) or "(none: DPR_SPECS_DIR names no folder)"
        raise SpecPathError(
            f"spec_path {requested!r} is outside the folders flow runs may load specs from: {folders}. "
            "Give the path of a spec inside one of them, or ask the data owner to add its folder to "
            f"DPR_SPECS_DIR (folders separated by {os.pathsep!r}) in the environment of the worker or command"
        )
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise SpecPathError(f"spec_path {requested!r} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise SpecPathError(f"spec_path {requested!r} is not a regular file: give the path of a spec YAML file")
    return real
