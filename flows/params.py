"""Typed flow parameters (the Prefect UI renders them as a form with these constraints)."""
from __future__ import annotations

from typing import Annotated, Optional, Union

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

#: A record id as a run is asked for it: text, or a whole number (a numeric id column: the Prefect CLI's
#: ``-p record_id=61458`` and a UI form send a JSON number). :func:`record_id_text` turns it into the text the
#: spec's public roster holds (``61458`` -> ``"61458"``); a bool or a float is refused by the type.
RecordId = Union[
    Annotated[str, Field(min_length=1, max_length=200)],
    Annotated[int, Field(strict=True, ge=-(10**18), le=10**18)],
]


def record_id_text(record_id: "str | int") -> str:
    """The roster's text of a record id given as text or as a whole number (``61458`` -> ``"61458"``)."""
    if isinstance(record_id, bool) or not isinstance(record_id, (str, int)):
        raise TypeError(f"record_id must be text or a whole number, got {type(record_id).__name__}")
    return record_id if isinstance(record_id, str) else str(int(record_id))
