"""The keys that name charges, planned lines and release runs: one place, used by the ledger, the plan and the flows.

DESIGN.md rule 2 (**a release id names one release**): every key here is a
function of *public* names only (dataset name, release id, step label,
spec-derived parameters), never of the data. A re-run of a release id on
changed data therefore finds the same keys and gets the stored release back,
with no new charge and no new draw; new data needs a new release id.

Three keys, each the SHA-256 of a canonical JSON document:

* :func:`charge_key` names one charge (one private output): the ledger's
  idempotency key (``ledger.charges.key`` and ``releases.outputs.key``).
* :func:`line_key` names one planned line of a release (a step's charges of
  one kind, :class:`dpcore.steps.common.PlannedCharge`): the cost plan and the
  ledger's release reservations (``ledger.reservations.line_key``) use it, so
  the plan's "new" charges are by construction what the run reserves.
* :func:`run_key` names one run unit: the whole release pipeline of a release
  id, or one operator query (its flow and its planned lines). Its lock and its
  stored outcome (:mod:`dpcore.run.release_runs`) hang off it.

These keys stay inside the ledger (rule 7: they identify the request, not the
data, but they are not published either; charges carry a random
``public_ref`` for public lineage).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical", "charge_key", "line_key", "run_key", "matches", "PIPELINE"]

#: The run unit of a whole release (``release_pipeline``): one per release id, whatever its spec.
PIPELINE = "pipeline"


def canonical(obj: Any) -> Any:
    """``obj`` as it round-trips through JSON with sorted keys (tuples become lists, other values text)."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _digest(doc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def charge_key(dataset: str, release_id: str, step: str, params: dict[str, Any]) -> str:
    """The idempotency key of one charge: (dataset name, release id, step, canonical parameters).

    Parameters
    ----------
    dataset, release_id, step : str
        Public names.
    params : dict
        The charge's public parameters (spec-derived, or the stored output of
        an earlier private step of the same release, e.g. a chosen subspace).

    Returns
    -------
    str
        64 hex digits. No content hash of the input is part of it.
    """
    return _digest({"kind": "charge", "dataset": dataset, "release": release_id, "step": step,
                    "params": canonical(params)})


def line_key(dataset: str, release_id: str, step: str, match: dict[str, Any]) -> str:
    """The key of one planned line: (dataset name, release id, step, the line's match parameters).

    A charge belongs to the line of its release whose step is its step and
    whose ``match`` parameters are all among the charge's parameters
    (:func:`matches`).
    """
    return _digest({"kind": "line", "dataset": dataset, "release": release_id, "step": step,
                    "match": canonical(match)})


def run_key(dataset: str, release_id: str, unit: str, lines: list[str] | None = None) -> str:
    """The key of one run unit of a release id.

    Parameters
    ----------
    unit : str
        :data:`PIPELINE` for the whole release (then ``lines`` is ignored: one
        release pipeline per release id, whatever its spec), else the operator
        flow's name.
    lines : list of str, optional
        An operator query's planned line keys (the same query, the same unit).
    """
    doc: dict[str, Any] = {"kind": "run", "dataset": dataset, "release": release_id, "unit": unit}
    if unit != PIPELINE:
        doc["lines"] = sorted(lines or [])
    return _digest(doc)


def matches(match: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether every entry of a line's ``match`` is among a charge's ``params`` (both canonical)."""
    m, p = canonical(match), canonical(params)
    return all(k in p and p[k] == v for k, v in m.items())
