"""Typed flow parameters (the Prefect UI renders them as a form with these constraints)."""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import Field

DEMO_SPEC = "specs/demo.yaml"

SpecPath = Annotated[
    str,
    Field(
        min_length=1,
        description="Path to the release spec YAML (relative to the working directory). It must lie inside a "
        "folder the data owner allows (DPR_SPECS_DIR; default the project's specs/ and $DPR_HOME/specs).",
    ),
]
Period = Annotated[
    Optional[str],
    Field(
        default=None,
        pattern=r"^[0-9]{4}(-([0-9]{2}|W[0-9]{2}|Q[1-4]|[0-9]{2}-[0-9]{2}))?$",
        description="A series spec's period: 2013-05 (monthly), 2013-W05 (ISO week), 2013-05-31 (daily), 2013-Q2 "
        "(quarterly), 2018 (yearly). Empty on a deployment's run: the period that ended before its scheduled start time (UTC).",
    ),
]
ReleaseId = Annotated[
    Optional[str],
    Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="Overrides the spec's release_id. Same id = same release: nothing is spent again.",
    ),
]
