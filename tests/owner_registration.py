"""The data owner's registration of a dataset name, for tests (what ``dpr dataset add NAME --spec S`` does).

A run of an unregistered dataset name is refused (the registration rule), so
every test that runs a pipeline on a fresh home registers its spec first:
through the ``register_dataset`` fixture (tests/conftest.py), or this
module's :func:`register_spec` from a helper.
"""
from __future__ import annotations

from pathlib import Path


def home_settings(home) -> "Settings":
    """The settings of a pipeline home ``home`` as ``DPR_HOME=home`` (and no other DPR_* variable) gives them."""
    from dpcore.storage.settings import Settings

    home = Path(home).resolve()
    return Settings(home=home, warehouse=home / "warehouse.duckdb", bundles=home / "bundles", data=home / "data",
                    owner_key=home / "owner" / "owner.key")


def register_spec(spec_path, settings=None, *, home=None, **choice):
    """Register ``spec_path``'s dataset name as its data owner would (``dpr dataset add NAME --spec S``).

    Where: ``settings``, else the home ``home`` (as ``DPR_HOME=home`` gives it), else the current
    environment's (``$DPR_HOME``). ``choice`` is passed on (``share=``, ``separate_from=[...]``,
    ``reason=``). Returns the :class:`dpcore.run.registration.RegistrationOutcome`.
    """
    from dpcore.run.registration import register
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec

    settings = settings or (home_settings(home) if home is not None else Settings.from_env())
    return register(load_spec(spec_path), settings, **choice)
