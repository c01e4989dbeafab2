"""dpcore.runtime.child_map (issue 29, goal 4): a mapper whose calls run in one child process that ends with the map.

Real child processes: results equal the calls made here (in order, every item, the work's prints kept
out of the answers); an exception the work raises is raised here with its type, message and errno; a child
that dies raises ChildProcessFailed naming how; no child is left behind; what the work imports stays out of
this process.
"""
from __future__ import annotations

import errno
import sys

import psutil
import pytest

from dpcore.runtime.child_map import ChildProcessFailed, child_map

sys.path.insert(0, __import__("os").path.dirname(__file__))
import child_map_work as W  # noqa: E402


@pytest.fixture(autouse=True)
def _child_finds_the_work(monkeypatch):
    """The child is a fresh interpreter: it imports the work's module from the tests folder."""
    import os

    here = os.path.dirname(__file__)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p))


def _no_children():
    return [p for p in psutil.Process().children(recursive=True) if "dpcore.runtime.child_map" in " ".join(p.cmdline())]


def test_results_equal_the_calls_in_order_from_one_other_process(capfd):
    out = child_map(W.square_and_pid, range(7))
    assert [r for r, _ in out] == [x * x for x in range(7)]
    pids = {p for _, p in out}
    assert len(pids) == 1 and pids != {__import__("os").getpid()}  # one child for the whole map, not this process
    assert "printed by the work" in capfd.readouterr().err
    assert not _no_children()
    assert child_map(W.square_and_pid, []) == []


def test_the_work_shows_no_warning_and_no_log_record(capfd):
    """The child's work is private: a warning or a library's log line quoting a value is not shown (as in a
    private task of the flow process)."""
    assert child_map(W.warn_and_log, ["SECRET123"]) == ["SECRET123"]
    captured = capfd.readouterr()
    assert "SECRET123" not in captured.err and "SECRET123" not in captured.out


def test_an_exception_in_the_work_is_raised_here_with_its_type_and_message():
    with pytest.raises(ValueError, match="item 3 is bad: name the rule") as info:
        child_map(W.fail_on_three, range(6))
    assert any("child process of dpcore.runtime.child_map" in n for n in info.value.__notes__)
    assert "Traceback" in str(info.value.__cause__)
    assert not _no_children()


def test_a_full_disk_in_the_child_is_still_an_enospc_oserror():
    with pytest.raises(OSError) as info:
        child_map(W.disk_full, [1])
    assert info.value.errno == errno.ENOSPC and info.value.filename == "/tmp/chunk"


def test_an_exception_that_does_not_pickle_arrives_as_its_text():
    with pytest.raises(RuntimeError, match="cannot travel"):
        child_map(W.unpicklable, [1])


def test_a_child_killed_mid_map_raises_and_names_the_signal():
    with pytest.raises(ChildProcessFailed, match="killed by signal 9"):
        child_map(W.die, [1, 2])
    assert not _no_children()


def test_a_result_that_does_not_pickle_is_an_error_not_a_dead_child():
    with pytest.raises(TypeError):
        child_map(W.a_module, [1])
    assert child_map(W.fail_on_three, [1, 2]) == [1, 2]


def test_what_the_work_imports_stays_in_the_child():
    """great-expectations imported by the work in the child; this (fresh) process never loads it."""
    import subprocess
    from pathlib import Path

    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from dpcore.runtime.child_map import child_map\n"
        "import child_map_work as W\n"
        "print(child_map(W.import_and_report, ['dpcore.validation.suite'])[0], 'great_expectations' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]
