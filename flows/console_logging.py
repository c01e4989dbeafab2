"""The console of a command-line flow run: a refusal is one line, not a traceback (issue 32 §3).

When a flow run from ``dpr`` or ``python -m flows.release_pipeline`` stops on an
expected error (:func:`dpcore.run.errors.expected_errors`: a bad spec, input, flag or
request, or over the budget; exit code 2), Prefect's engine logs it with its
traceback at ERROR level, once for the task and once for the flow. The command
then prints the error itself. :func:`quiet_refusal_tracebacks` drops the
traceback of those records on the terminal's handlers only (the log line with
the error's message stays): their formatter leaves it out and restores the
record, so the Prefect API's log handler still gets it. Unexpected errors keep
their traceback. An environment failure (:func:`dpcore.runtime.faults.environment_fault`)
keeps its log line too; its traceback goes to the command's details log
(:func:`dpcore.runtime.faults.save_details`), which the command's last line names.
"""
from __future__ import annotations

import logging

from dpcore.run.errors import expected_errors
from dpcore.runtime.faults import is_environment_fault, save_details

__all__ = ["quiet_refusal_tracebacks"]


class _NoRefusalTraceback(logging.Formatter):
    """Formats a record with the wrapped formatter, without the traceback when its exception is an expected
    (user-fixable) error. The record itself is restored afterwards: other handlers see it unchanged."""

    def __init__(self, inner: logging.Formatter | None):
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return self.inner.format(record)
        if not isinstance(exc, expected_errors()):
            if not is_environment_fault(exc):
                return self.inner.format(record)
            # an environment failure: the command ends with its one line naming the details log; the traceback
            # goes there (issue 47 item 5)
            save_details(self.inner.format(record))
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text = saved


def _terminal_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger()] + [
        lg for name, lg in logging.Logger.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and (name == "prefect" or name.startswith("prefect."))
    ]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


def quiet_refusal_tracebacks() -> None:
    """Wrap the formatter of every terminal handler of Prefect's loggers (idempotent; call after importing prefect)."""
    for handler in _terminal_handlers():
        if not isinstance(handler.formatter, _NoRefusalTraceback):
            handler.setFormatter(_NoRefusalTraceback(handler.formatter))
