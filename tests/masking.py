"""Masking of the random tokens on public surfaces, shared by the leak tests.

The tests that compare public surfaces (``tests/test_leak_end_to_end.py``, ``tests/test_ingest_ids.py``) or
search them for internal numbers (``tests/test_operations.py``) must not be fooled by tokens that are random per
run and not a function of the data. Each kind is listed here once, with where it comes from:

* **UUIDs** (:data:`UUID`): flow-run, task-run, state, artifact, log and event ids (uuid4/uuid7 from Prefect),
  Prefect's runner storage folders (``runner_storage/<uuid>``);
* **16-hex-digit nonces** (:data:`NONCE`): ``dpcore.storage.lineage.new_nonce(8)``: ingest ids, charges' public refs,
  the warehouse's scratch folders;
* **task-run names** (:data:`TASK_RUN_SUFFIX`, :func:`mask_task_runs`): a task called from a flow is named
  ``<task name>-<first 3 characters of a uuid4>`` (``prefect.task_engine``: ``bundle-837``); a submitted or mapped
  one ``<task name>-<counter>`` (deterministic, masked alike);
* **flow-run names**: Prefect's random ``adjective-animal`` slug (``prefect.utilities.names.generate_slug``),
  masked by the exact names read from the API (a slug pattern would match ordinary hyphenated words);
* **temporary paths** (:data:`PYTEST_DIR`, :data:`TEMP_NAME`, :data:`DASK_WORKER_DIR`): pytest's numbered base
  folder (``pytest-837``), :mod:`tempfile` names (``tmp8j3_k2xa``, e.g. the Prefect test harness's home), Dask's
  worker scratch folders (``worker-a1b2_c3d``);
* **ports** (:data:`HOST_PORT`): the test server's and Dask's local ports (``127.0.0.1:8370``);
* **clock readings** (:data:`ISO_TIME`, :data:`CONSOLE_TIME`).

:class:`Masker` replaces each distinct token by a numbered placeholder of its kind (``<nonce-1>``, ``<nonce-2>``),
the same placeholder for the same token across every text it masks: whether two tokens are equal is kept, which
is what tells a repeated input from a new one; their values are not.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
#: ``dpcore.storage.lineage.new_nonce(8)``: 16 hex digits, not part of a longer hex run.
NONCE = re.compile(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])")
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")
CONSOLE_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}\.\d{3} \|", re.M)
#: The random suffix of a task-run name (the whole name: ``bundle-837`` -> ``bundle``).
TASK_RUN_SUFFIX = re.compile(r"-[0-9a-f]{3}$")
PYTEST_DIR = re.compile(r"(?<![\w-])pytest-\d+(?![\w-])")
TEMP_NAME = re.compile(r"(?<![\w-])tmp[a-z0-9_]{8}(?![\w-])")
DASK_WORKER_DIR = re.compile(r"(?<![\w-])worker-[a-z0-9_]{8}(?![\w-])")
HOST_PORT = re.compile(r"\b(127\.0\.0\.1|localhost|0\.0\.0\.0):\d{2,5}\b")


def task_label(name: str) -> str:
    """A task-run name without its random suffix (``bundle-837`` -> ``bundle``)."""
    return TASK_RUN_SUFFIX.sub("", name)


@functools.lru_cache(maxsize=1)
def project_task_names() -> frozenset[str]:
    """The name of every Prefect task defined in ``tasks/`` and ``flows/`` (imports those modules)."""
    from prefect import Task

    names: set[str] = set()
    for package in ("tasks", "flows"):
        for info in pkgutil.iter_modules([str(ROOT / package)]):
            module = importlib.import_module(f"{package}.{info.name}")
            names |= {v.name for v in vars(module).values() if isinstance(v, Task)}
    assert {"ingest", "bundle", "validate"} <= names, names
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def _task_run_pattern() -> re.Pattern:
    names = sorted(project_task_names(), key=len, reverse=True)
    return re.compile(rf"(?<![\w-])({'|'.join(map(re.escape, names))})-([0-9a-f]{{3}}|\d+)(?![\w-])")


def mask_task_runs(text: str) -> str:
    """Task-run names (``<task name>-<random 3 hex>`` or ``-<counter>``) in free text as ``<task name>-<run>``."""
    return _task_run_pattern().sub(r"\1-<run>", text)


class Masker:
    """Replaces the random tokens listed in this module's docstring, each distinct one by a numbered placeholder.

    Parameters
    ----------
    flow_run_names : iterable of str
        The Prefect flow-run names (random slugs) to mask, as read from the API.
    nonces : bool
        Mask 16-hex-digit tokens (``new_nonce``). Leave off where a data-derived hex token must stay visible.
    """

    def __init__(self, flow_run_names=(), nonces: bool = True):
        self.flow_run_names = sorted({n for n in flow_run_names if n}, key=len, reverse=True)
        self.nonces = nonces
        self.seen: dict[str, dict[str, str]] = {}

    def _numbered(self, kind: str):
        table = self.seen.setdefault(kind, {})

        def repl(m: re.Match) -> str:
            return table.setdefault(m.group(0), f"<{kind}-{len(table) + 1}>")

        return repl

    def __call__(self, text: str) -> str:
        for name in self.flow_run_names:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", self._numbered("flow-run"), text)
        text = UUID.sub(self._numbered("uuid"), text)
        text = ISO_TIME.sub("<time>", text)
        text = CONSOLE_TIME.sub("<HH:MM:SS.mmm> |", text)
        text = mask_task_runs(text)
        if self.nonces:
            text = NONCE.sub(self._numbered("nonce"), text)
        text = PYTEST_DIR.sub("pytest-<n>", text)
        text = TEMP_NAME.sub(self._numbered("tmp"), text)
        text = DASK_WORKER_DIR.sub(self._numbered("dask-worker"), text)
        return HOST_PORT.sub(r"\1:<port>", text)
