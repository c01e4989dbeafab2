"""The leak tests' shared masking (``tests/masking.py``): every random token kind is masked, a number that is not
part of one stays visible (issue 28, "Done when": ``bundle-837`` read as the count 837)."""
from __future__ import annotations

import re

from masking import Masker, mask_task_runs, project_task_names, task_label


def _number(n: int) -> re.Pattern:
    """As tests/test_operations.py searches a count."""
    return re.compile(rf"(?<![0-9A-Za-z.])(?<![0-9],){n}(?![0-9A-Za-z]|\.[0-9]|,[0-9]{{3}})")


def test_random_tokens_that_look_like_a_count_are_masked():
    text = "\n".join([
        "Task run 'bundle-837' - Finished in state Completed()",  # Prefect's random 3-hex suffix
        "Created task run 'record-counts-837' for task 'record-counts'",
        "fit-template-837 done",  # a submitted task's counter
        "bundle at /tmp/pytest-of-dpr/pytest-837/test_x0/dpr/bundles/nyc/r1",  # pytest's numbered base folder
        "PREFECT_HOME=/tmp/tmpab_837_x/prefect",  # a tempfile name
        "dask-scratch-space/worker-_837abcd",
        "API at http://127.0.0.1:837/api",
        "ingested nyc as input 0000000000000837 (a random ingest id)",
        "flow run 'cheerful-otter' id 8370aaaa-0837-4837-8837-083700000837",
        "2026-11-26 16:08:37.837 | INFO",
    ])
    assert _number(837).search(text)
    masked = Masker(flow_run_names=["cheerful-otter"])(text)
    assert not _number(837).search(masked), masked
    assert "'bundle-<run>'" in masked and "'record-counts-<run>'" in masked and "fit-template-<run>" in masked
    assert "pytest-<n>" in masked and "127.0.0.1:<port>" in masked and "<flow-run-1>" in masked


def test_a_count_next_to_a_name_that_is_not_a_task_stays_visible():
    masked = Masker()("quarantined 837 rows; nyc-837; count 837")
    assert masked.count("837") == 3


def test_equal_tokens_keep_equal_placeholders_and_different_ones_differ():
    mask = Masker()
    a, b = "0123456789abcdef", "fedcba9876543210"
    assert mask(f"input {a}") == "input <nonce-1>" and mask(f"again {a}") == "again <nonce-1>"
    assert mask(f"new {b}") == "new <nonce-2>"
    assert Masker(nonces=False)(f"input {a}") == f"input {a}"


def test_task_names_come_from_the_project_and_labels_drop_the_suffix():
    assert {"ingest", "validate", "bundle", "record-counts", "cost-preflight"} <= project_task_names()
    assert task_label("bundle-837") == "bundle" and task_label("bundle") == "bundle"
    assert mask_task_runs("bundle-837 bundles-837 xbundle-837") == "bundle-<run> bundles-837 xbundle-837"
