"""The start of every operator flow: the spec it runs on and the values it uses, stated before any charge."""
from __future__ import annotations

from typing import Any, Mapping

from prefect import get_run_logger

from dpcore.run.operator_values import OperatorValues, operator_values, require_spec_path
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec
from tasks.common import resolve


def operator_request(
    flow: str, spec_path: str | None, release_id: str | None, request: Mapping[str, Any]
) -> tuple[ReleaseSpec, Settings, OperatorValues]:
    """Load the spec (refused without one), resolve the flow's parameters against it, log the values used.

    A parameter left empty takes the spec's value (:mod:`dpcore.run.operator_values`); one that spends budget or
    describes the data and is set nowhere is refused here, before the input is read or anything is charged.
    The logged line holds public parameters only.
    """
    path = require_spec_path(spec_path)
    spec, settings = resolve(path, release_id)
    values = operator_values(flow, path, spec, request)
    get_run_logger().info(values.line())
    return spec, settings, values
