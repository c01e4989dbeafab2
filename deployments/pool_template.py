"""Render the process work pool's base job template (deployments/process_pool_template.json; DESIGN.md rule 13).

    python deployments/pool_template.py OUT.json [PROJECT_ROOT] [PYTHON]

Fills the absolute project root (the flow runs' working directory) and the
venv's python (the command ``PYTHON -m prefect.engine``) into the template and
writes it to ``OUT.json``, for ``prefect work-pool create/update
--base-job-template``. Defaults: this checkout and ``ROOT/.venv/bin/python``.

The template has no variables (``"additionalProperties": false``): the server
refuses a deployment run that sets any job variable, and the worker has no
placeholder to put one in. ``env`` is not in ``job_configuration`` at all: a
fixed ``env`` dictionary there would still be merged with a run's ``env`` job
variable by Prefect's worker (``BaseJobConfiguration.from_template_and_values``),
so the flow runs get the environment the worker was started with, and nothing else.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().with_name("process_pool_template.json")


def render(root: Path, python: Path) -> dict:
    """The base job template with ``@PROJECT_ROOT@`` and ``@PYTHON@`` replaced by absolute paths.

    Parameters
    ----------
    root : Path
        The project root: the working directory of every flow run.
    python : Path
        The interpreter that runs ``-m prefect.engine`` (the project's venv).

    Returns
    -------
    dict
        The template, as ``prefect work-pool create --base-job-template`` reads it.
    """
    root, python = Path(root).resolve(), Path(python).absolute()
    for path, what in ((root, "project root"), (python, "python")):
        if not path.exists():
            raise SystemExit(f"pool_template.py: the {what} {path} does not exist")
    template = json.loads(TEMPLATE.read_text())
    job = template["job_configuration"]
    job["command"] = job["command"].replace("@PYTHON@", shlex.quote(str(python)))
    job["working_dir"] = job["working_dir"].replace("@PROJECT_ROOT@", str(root))
    return template


def main(argv: list[str]) -> None:
    if not 2 <= len(argv) <= 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    root = Path(argv[2]) if len(argv) > 2 else TEMPLATE.parents[1]
    python = Path(argv[3]) if len(argv) > 3 else root / ".venv" / "bin" / "python"
    Path(argv[1]).write_text(json.dumps(render(root, python), indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv)
