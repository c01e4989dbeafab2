"""The console of a command-line flow run: a refusal is one line, not a traceback (issue 32 §3).

When a flow run from ``dpr`` or ``python -m flows.release_pipeline`` stops on an
expected error (:func:`dpcore.errors.expected_errors`: a bad spec, input, flag or
request, or over the budget; exit code 2), Prefect's engine logs it with its
traceback at ERROR level, once for the task and once for the flow. The command
then prints the error itself. :func:`quiet_refusal_tracebacks` drops the
traceback of those records on the terminal's handlers only (the log line with
the error's message stays); unexpected errors keep their traceback, and the
Prefect API's log handler is left as it is.
"""
from __future__ import annotations

import logging

from dpcore.errors import expected_errors

__all__ = ["quiet_refusal_tracebacks"]


class _NoRefusalTraceback(logging.Filter):
    """Clears ``exc_info`` of a record whose exception is an expected (user-fixable) error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, expected_errors()):
            record.exc_info = None
            record.exc_text = None
        return True


def _terminal_handlers() -> list[logging.Handler]:
    loggers = [logging.getLogger()] + [
        lg for name, lg in logging.Logger.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and (name == "prefect" or name.startswith("prefect."))
    ]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


def quiet_refusal_tracebacks() -> None:
    """Install the filter on every terminal handler of Prefect's loggers (idempotent; call after importing prefect)."""
    for handler in _terminal_handlers():
        if not any(isinstance(f, _NoRefusalTraceback) for f in handler.filters):
            handler.addFilter(_NoRefusalTraceback())
