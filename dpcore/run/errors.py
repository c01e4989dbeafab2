"""User-facing error handling for command-line entry points.

Known, expected failures (a bad spec, unreadable input, failed validation,
exhausted budget, a busy warehouse, a home whose ledger is missing) are
printed as one clear message and exit code 2 ("refused") instead of a
traceback. Failures of the machine (a full disk, a home that is not writable,
a symlink loop, an I/O error, a warehouse file that is not a database:
:mod:`dpcore.runtime.faults`; also a damaged write-ahead log, the Prefect server gone,
DuckDB out of memory) are printed as their first cause in one line and exit
code 1; the traceback goes to a details log (0600) that the line names. Their
messages never carry private values.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


def expected_errors() -> tuple[type[BaseException], ...]:
    """The exception types a user can cause and fix."""
    from dpcore.budget.amounts import BudgetExceededError
    from dpcore.runtime.chunks import MemoryLimitError
    from dpcore.ingest.raw import IngestError
    from dpcore.budget.ledger import LedgerError
    from dpcore.release.spec import SpecError
    from dpcore.storage.lineage import OwnerKeyError
    from dpcore.release.path_checks import PathsRefusedError
    from dpcore.steps.common import SeededNoiseRefusedError, StepInputError
    from dpcore.steps.pcor import NoValidContextError
    from dpcore.validation import ValidationFailed
    from dpcore.storage.warehouse import WarehouseBusyError
    from dpcore.ingest.sources.errors import SourceError

    return (
        SpecError, IngestError, ValidationFailed, StepInputError, BudgetExceededError, LedgerError, WarehouseBusyError,
        SeededNoiseRefusedError, OwnerKeyError, NoValidContextError, PathsRefusedError, SourceError,
        MemoryLimitError,
    )


@contextmanager
def user_facing() -> Iterator[None]:
    """Turn expected errors into a message on stderr and ``SystemExit(2)``, environment failures into ``SystemExit(1)``."""
    try:
        yield
    except expected_errors() as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as exc:
        environment_failure(exc)
        raise


def environment_failure(exc: BaseException) -> None:
    """If ``exc`` is an environment failure (:func:`dpcore.runtime.faults.environment_fault`): its one line, ``SystemExit(1)``.

    The traceback goes to the details log (:func:`dpcore.runtime.faults.save_details`, 0600 under ``$DPR_HOME/logs``),
    whose path ends the line.

    Otherwise returns (the caller re-raises ``exc``).
    """
    import traceback

    from dpcore.runtime.faults import environment_fault, save_details

    line = environment_fault(exc)
    if line is not None:
        saved = save_details(f"error: {line}\n" + "".join(traceback.format_exception(exc)))
        where = f" (details: {saved})" if saved is not None else ""
        print(f"\nerror: {line}{where}", file=sys.stderr)
        raise SystemExit(1) from None
