"""Module-level functions for tests/test_child_map.py (a child process imports them by name)."""
from __future__ import annotations

import errno
import os
import signal
import sys


def square_and_pid(x: int) -> tuple[int, int]:
    print("printed by the work: goes to standard error, not into the answers")  # noqa: T201
    return x * x, os.getpid()


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"item {x} is bad: name the rule")
    return x


def disk_full(x: int) -> int:
    raise OSError(errno.ENOSPC, "No space left on device", "/tmp/chunk")


class Unpicklable(Exception):
    def __init__(self, handle):
        super().__init__("cannot travel")
        self.handle = handle

    def __reduce__(self):
        raise TypeError("not picklable")


def unpicklable(x: int) -> int:
    raise Unpicklable(lambda: None)


def die(x: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return x


def modules_loaded(names: tuple[str, ...]) -> dict[str, bool]:
    return {n: n in sys.modules for n in names}


def import_and_report(name: str) -> bool:
    """Import ``name`` here (the child) and say whether great-expectations is loaded now."""
    import importlib

    importlib.import_module(name)
    return "great_expectations" in sys.modules


def a_module(x: int):
    return sys  # a module does not pickle


def warn_and_log(x: str) -> str:
    """A warning and a library's log record quoting a value (a private cell)."""
    import logging
    import warnings

    warnings.warn(f"value {x} looks odd", UserWarning)
    logging.getLogger("some.library").warning("saw value %s", x)
    return x
