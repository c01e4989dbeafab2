"""What every private step shares: stores, the noise source, charge requests,
and reading the validated table."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from dpcore.budget.amounts import PrivacyCost
from dpcore.ingest.raw import IngestResult
from dpcore.budget.ledger import ChargeRequest, PrivacyLedger
from ..noise import NoiseSource
from dpcore.storage.settings import Settings
from dpcore.release.spec import ReleaseSpec, public_completeness_problems
from dpcore.storage.warehouse import Warehouse
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it


class StepInputError(ValueError):
    """A private step was called with bad parameters; nothing was charged."""


@dataclass(frozen=True)
class PlannedCharge:
    """One kind of ledger charge a step will make, known from the spec alone (the cost plan).

    Parameters
    ----------
    step : str
        The ledger's step label (``record_counts``, ``aiq``, ``coco_level1``, ...).
    mechanism : str
        The mechanism's name, as the ledger records it.
    notion : {"dp", "ocdp", "sp"}
    neighbour : {"add-remove", "replace-one"}
        The relation ``cost`` is stated under.
    cost : PrivacyCost
        The stated cost of one charge (the mechanism's privacy map).
    count : int
        How many such charges (PCOR: one per explained record).
    upper_bound : bool
        ``count`` is a public upper bound, not the exact number: the number of
        detector-chosen targets is data-dependent (at most ``from_detector``).
    match : dict
        Parameters (spec-derived only) that every charge of this kind carries:
        with the spec's validation hash they name the planned line
        (:func:`dpcore.budget.charge_keys.line_key`) the run reserves and its charges
        draw from.
    """

    step: str
    mechanism: str
    notion: str
    neighbour: str
    cost: PrivacyCost
    count: int = 1
    upper_bound: bool = False
    match: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, step: str, mechanism: Any, cost: PrivacyCost, match: dict[str, Any], count: int = 1,
           upper_bound: bool = False) -> "PlannedCharge":
        """The planned charge of ``mechanism`` (which supplies name, notion and neighbour)."""
        return cls(step, mechanism.name, mechanism.notion, mechanism.neighbour, cost, count, upper_bound, match)


@dataclass(frozen=True)
class Stores:
    """Warehouse and ledger handles for one settings object."""

    warehouse: Warehouse
    ledger: PrivacyLedger


def open_stores(settings: Settings) -> Stores:
    """Open (creating if needed) the warehouse file and its ledger tables.

    Refuses a home whose marker or bundles name a ledger its warehouse does not
    hold (:func:`dpcore.budget.ledger_home.open_home_warehouse`): a lost warehouse
    never gives a fresh budget.
    """
    from dpcore.budget.ledger_home import open_home_warehouse

    wh = open_home_warehouse(settings)
    return Stores(wh, PrivacyLedger(wh))


def require_public_completeness(spec: ReleaseSpec, step: str) -> None:
    """Refuse to run ``step`` if it could abort on a private fact (issue 15, hole 9).

    A thin call to :func:`dpcore.release.spec.public_completeness_problems`, the one
    place the rules live (nullable attributes of a step that needs a value in
    every row, a ``log`` transform without a public ``min > 0``). The spec
    loader already refuses such specs for enabled steps; this repeats the
    check for the step about to run, whatever its ``enabled`` flag, so a spec
    built without validation cannot reach the data either.

    Raises
    ------
    StepInputError
        Naming each problem's spec path and rule; nothing charged, no data read.
    """
    problems = public_completeness_problems(spec, [step])
    if problems:
        raise StepInputError("; ".join(problems))


def check_record_ids(spec: ReleaseSpec, ids: list[str], where: str) -> None:
    """Public checks of a request by record id (DESIGN.md rule 8: no free probes).

    A request may be refused for free only on public facts: the request's
    form, the id pattern and the spec's public roster. Whether an id is
    present, quarantined or absent is private, so it is never checked here:
    every roster id is charged and answered through the mechanism (a record
    that is not in the validated table gets the step's data-independent
    answer).

    Parameters
    ----------
    spec : ReleaseSpec
    ids : list of str
        The requested record ids, in request order.
    where : str
        The spec key of the request, named in errors (``steps.aiq.record_ids``).

    Raises
    ------
    StepInputError
        An id repeated, not matching ``dataset.record_id_pattern``, not on
        ``dataset.roster``, or any id requested while the spec declares no
        roster. The message names the ids: they are the operator's own
        request, checked against public facts only.
    """
    import re

    if not ids:
        return
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise StepInputError(f"{where} lists these ids more than once: {dup[:10]}")
    pattern = re.compile(spec.dataset.record_id_pattern)
    bad = [i for i in ids if not isinstance(i, str) or not pattern.fullmatch(i)]
    if bad:
        raise StepInputError(
            f"{where}: {bad[:10]} do not match dataset.record_id_pattern {spec.dataset.record_id_pattern!r}"
        )
    roster = spec.dataset.roster
    if roster is None:
        raise StepInputError(
            f"{where}: requests by record id need a public roster of ids (dataset.roster: ids, or file + column). "
            "Without one, whether an id is present or valid is private and cannot be refused for free; "
            "declare the roster, or ask about public points instead"
        )
    off = roster.missing(ids)
    if off:
        raise StepInputError(
            f"{where}: {off[:10]} are not on the public roster (dataset.roster); only roster ids may be asked "
            "about by id. Add them to the roster if they are public, or remove them from the request"
        )


def noise_source() -> NoiseSource:
    """The release noise source: OS CSPRNG, unless ``DPR_TEST_NOISE_SEED`` is set.

    A seeded source is for tests only: every charge made with it is recorded
    ``publishable = false`` and the bundle says NOT FOR PUBLICATION.
    """
    seed = noise_test_seed()
    return NoiseSource() if seed is None else NoiseSource(seed=seed)


class SeededNoiseRefusedError(RuntimeError):
    """``DPR_TEST_NOISE_SEED`` is set outside a test: seeded noise gives no privacy."""


#: The explicit test flag that allows ``DPR_TEST_NOISE_SEED`` (set by the test suite only).
TEST_NOISE_FLAG = "DPR_ALLOW_TEST_NOISE"

#: Environment variables that switch on seeded noise (test suite only).
TEST_NOISE_SWITCHES = ("DPR_TEST_NOISE_SEED", TEST_NOISE_FLAG)

_test_noise_forbidden = False


def forbid_test_noise() -> None:
    """Refuse seeded noise in this process for good, whatever the environment says (a run of a deployment).

    Called by the flows' preamble (:func:`tasks.common.resolve`) when the flow run belongs to a
    deployment; dpcore itself does not know about deployments.
    """
    global _test_noise_forbidden
    _test_noise_forbidden = True


def noise_test_seed() -> int | None:
    """The test seed from ``DPR_TEST_NOISE_SEED``, or None in production.

    Refused unless the explicit test flag ``DPR_ALLOW_TEST_NOISE=1`` is set
    too: a deployment, a worker or the demo/CLI path that inherits the seed by
    mistake fails before any charge instead of releasing subtractable noise.
    Steps whose draws run elsewhere (a Dask worker) pass this value along, so
    the worker's noise source is in the same mode as the ledger's record.

    After :func:`forbid_test_noise` (a run of a deployment) either variable set is refused,
    with the test flag or without.

    Raises
    ------
    SeededNoiseRefusedError
        The seed is set without the test flag, or is not an integer, or a switch is set after
        :func:`forbid_test_noise`.
    """
    seed = os.environ.get("DPR_TEST_NOISE_SEED")
    if _test_noise_forbidden and (seed or os.environ.get(TEST_NOISE_FLAG)):
        raise SeededNoiseRefusedError(
            "DPR_TEST_NOISE_SEED / DPR_ALLOW_TEST_NOISE are set in a run of a deployment: seeded noise is for the "
            "test suite only; unset them in the environment the worker is started with."
        )
    if not seed:
        return None
    if os.environ.get(TEST_NOISE_FLAG) != "1":
        raise SeededNoiseRefusedError(
            "DPR_TEST_NOISE_SEED is set: a seeded noise generator gives no privacy and is for tests only. "
            f"Unset it for releases (deployments, workers, the demo); a test must also set {TEST_NOISE_FLAG}=1."
        )
    try:
        return int(seed)
    except ValueError:
        raise SeededNoiseRefusedError("DPR_TEST_NOISE_SEED must be an integer") from None


def charge_request(
    spec: ReleaseSpec,
    step: str,
    mechanism: Any,
    cost: PrivacyCost,
    params: dict[str, Any],
    noise: NoiseSource,
    flow_run_id: str | None,
) -> ChargeRequest:
    """The ledger request of a step; ``mechanism`` supplies name, notion, neighbour.

    The spec's validation hash is part of the parameters, so the same query
    under different validation rules is a different charge. Nothing about the
    input's content is: the key (:func:`dpcore.budget.charge_keys.charge_key`) names
    the release, not the data (DESIGN.md rule 2).
    """
    return ChargeRequest(
        dataset=spec.dataset.name,
        release_id=spec.release_id,
        step=step,
        mechanism=mechanism.name,
        cost=cost,
        notion=mechanism.notion,
        params={**params, "validation": spec.validation_hash()},
        neighbour=mechanism.neighbour,
        publishable=noise.publishable,
        flow_run_id=flow_run_id,
    )


def validated_table(spec: ReleaseSpec, ingested: IngestResult) -> str:
    """Qualified name of the validated table of an input under a spec."""
    from ..validation import validated_table_name  # great-expectations loads in ~2 s: only when data is read

    return f'validated."{validated_table_name(ingested, spec)}"'


def quarantine_table(spec: ReleaseSpec, ingested: IngestResult) -> str:
    """Qualified name of the quarantine table of an input under a spec."""
    from ..validation import validated_table_name

    return f'quarantine."{validated_table_name(ingested, spec)}"'


def load_columns(wh: Warehouse, spec: ReleaseSpec, ingested: IngestResult, columns: list[str]) -> pd.DataFrame:
    """Record id plus ``columns`` of the validated table, in input row order."""
    cols = ", ".join(f'"{c}"' for c in [spec.dataset.record_id, *columns])
    return wh.query_df(f"SELECT {cols} FROM {validated_table(spec, ingested)} ORDER BY _row")


def group_item_counts(wh: Warehouse, table: str, column: str) -> pd.DataFrame:
    """Rows per distinct non-null value of ``column`` of ``table``: one SQL aggregate, no row loaded.

    Returns columns ``g`` (the value as DuckDB's text, ``CAST(... AS VARCHAR)``) and ``n`` (int64), one row
    per distinct value, in no particular order. Private (exact counts): the caller keeps them internal.
    """
    col = column.replace('"', '""')
    return wh.query_df(f'SELECT CAST("{col}" AS VARCHAR) AS g, count(*) AS n FROM {table} '
                       f'WHERE "{col}" IS NOT NULL GROUP BY 1')
