"""User-facing error handling for command-line entry points.

Known, expected failures (a bad spec, unreadable input, failed validation,
exhausted budget, a busy warehouse) are printed as one clear message and exit
code 2 instead of a traceback. Their messages never carry private values.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


def expected_errors() -> tuple[type[BaseException], ...]:
    """The exception types a user can cause and fix."""
    from .budget import BudgetExceededError
    from .ingest import IngestError
    from .ledger import LedgerError
    from .spec import SpecError
    from .lineage import OwnerKeyError
    from .steps.common import SeededNoiseRefusedError, StepInputError
    from .steps.pcor import NoValidContextError
    from .validation import ValidationFailed
    from .warehouse import WarehouseBusyError

    return (
        SpecError, IngestError, ValidationFailed, StepInputError, BudgetExceededError, LedgerError, WarehouseBusyError,
        SeededNoiseRefusedError, OwnerKeyError, NoValidContextError,
    )


@contextmanager
def user_facing() -> Iterator[None]:
    """Turn expected errors into a message on stderr and ``SystemExit(2)``."""
    try:
        yield
    except expected_errors() as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
