"""Shared task settings and small runtime helpers.

Every task that touches private data or draws noise is declared with
:func:`private_task`: result persistence off (persisted results would write
private values under ``PREFECT_HOME``) and no input-based caching. Retries are
safe only because the ledger's idempotency key returns the stored release
instead of drawing fresh noise (DESIGN.md rule 2).
"""
from __future__ import annotations

import re
from typing import Any, Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

from dpcore.settings import Settings
from dpcore.spec import ReleaseSpec, load_spec


def private_task(fn: Callable | None = None, **kwargs: Any):
    """``@task`` with persistence and caching off (for private data and noise)."""
    opts = dict(persist_result=False, cache_policy=NO_CACHE, log_prints=False)
    opts.update(kwargs)
    if fn is None:
        return lambda f: task(f, **opts)
    return task(fn, **opts)


def flow_run_id() -> str | None:
    """The current Prefect flow-run id (recorded with each ledger charge)."""
    from prefect.runtime import flow_run

    rid = flow_run.id
    return str(rid) if rid else None


def artifact_key(*parts: str) -> str:
    """A valid artifact key (lowercase letters, digits, dashes)."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")[:100]


def resolve(spec_path: str, release_id: str | None) -> tuple[ReleaseSpec, Settings]:
    """Load the spec (with an optional release-id override) and the settings."""
    return load_spec(spec_path, release_id=release_id), Settings.from_env()
