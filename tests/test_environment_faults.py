"""Faults that are not the user's (issue 33, part 4).

An environment failure (a full disk, a home this user cannot write, a symlink loop, an I/O error) exits 1
with its first cause in one line, not 2 ("refused") and not a traceback; a bundle path that exists as a file,
a home that is not writable and an input path that is a folder are refused before any charge (exit 2, one
line). ``dpr`` runs through its console entry point; the full disk is injected in-process into the bundle
writer of a real release (Prefect test harness).
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest
import yaml

from dpcore.runtime.faults import environment_fault

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).with_name("dpr"))


def dpr(*args: str, home: Path, cwd: Path = ROOT, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPR_HOME": str(home)}
    return subprocess.run([DPR, *args], env=env, capture_output=True, text=True, timeout=300, cwd=cwd, **kw)


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


@pytest.fixture
def public_tmp():
    """A temporary folder any user may enter (pytest's own is 0700: the unprivileged run below needs this)."""
    folder = Path(tempfile.mkdtemp(prefix="dpr-faults-"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def demo_spec(folder: Path, **source) -> Path:
    """The demo spec with absolute public files (and another source if given), in ``folder``."""
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["roster"]["file"] = str(ROOT / "specs" / "demo_roster.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    if source:
        spec["dataset"]["source"] = source
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    os.chmod(path, 0o644)
    return path


# ----------------------------------------------------------------------------------------- the first cause
def test_the_first_cause_is_found_through_the_chain_and_stated_in_one_line():
    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/h/bundles/x/manifest.json")
        except OSError:
            raise KeyError("later")  # raised while handling it: the disk is still the first cause
    except KeyError as exc:
        line = environment_fault(exc)
    assert line is not None and "\n" not in line
    assert line.startswith("No space left on device (ENOSPC) on /h/bundles/x/manifest.json")
    duck = duckdb.IOException('IO Error: Could not write file "/h/warehouse.duckdb.wal": No space left on device')
    assert environment_fault(duck).startswith("No space left on device (ENOSPC) on /h/warehouse.duckdb.wal")
    assert "ELOOP" in environment_fault(OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/x"))
    assert "EIO" in environment_fault(OSError(errno.EIO, os.strerror(errno.EIO)))
    assert environment_fault(ValueError("a bad value")) is None
    assert environment_fault(OSError(errno.ENOENT, "missing")) is None  # a missing file is the user's to fix


def test_a_noise_task_is_not_retried_after_a_full_disk():
    """A retry after ENOSPC found the charge orphaned and replaced the first cause with OrphanedChargeError."""
    from types import SimpleNamespace

    from tasks.common import _no_retry_for_user_errors

    full = SimpleNamespace(data=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert _no_retry_for_user_errors(None, None, full) is False
    assert _no_retry_for_user_errors(None, None, SimpleNamespace(data=RuntimeError("flaky"))) is True


@pytest.mark.usefixtures("prefect_harness")
def test_a_full_disk_while_the_bundle_is_written_exits_1_with_enospc(dpr_home, small_spec_path, monkeypatch, capsys):
    from flows.release_pipeline import main

    real = Path.write_text

    def full_disk(self, *args, **kwargs):
        if self.name == "manifest.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(SystemExit) as ex:
        main(["--spec", str(small_spec_path)])
    assert ex.value.code == 1
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, errors
    assert "No space left on device (ENOSPC)" in errors[0] and "manifest.json" in errors[0]
    assert "an environment failure, not a refusal" in errors[0] and "OrphanedCharge" not in errors[0]
    assert not (dpr_home / "bundles" / "nycflights13" / "test-r1").exists()  # nothing half published


# ------------------------------------------------------------------------------------ refused at preflight
def test_a_bundle_path_that_is_a_file_is_refused_before_any_charge(public_tmp):
    home = public_tmp / "home"
    (home / "bundles" / "nycflights13").mkdir(parents=True)
    (home / "bundles" / "nycflights13" / "demo-2013-r1").write_text("not a folder")
    res = dpr("run", str(demo_spec(public_tmp)), home=home)
    assert res.returncode == 2, res.stderr
    (line,) = error_lines(res.stderr)
    assert "bundle path" in line and "demo-2013-r1 exists and is not a folder" in line
    assert not (home / "warehouse.duckdb").exists()  # refused before the ledger was even opened


def test_an_input_path_that_is_a_folder_is_refused_before_any_charge(public_tmp):
    folder = public_tmp / "input.csv"
    folder.mkdir()
    home = public_tmp / "home"
    res = dpr("run", str(demo_spec(public_tmp, kind="csv", path=str(folder))), home=home)
    assert res.returncode == 2, res.stderr
    (line,) = error_lines(res.stderr)
    assert f"the input {folder} (dataset.source.path) is a folder" in line
    assert not (home / "warehouse.duckdb").exists()


def _without_root_override():
    """In the child: drop root's capabilities to override file modes (so a 0500 folder stops root too)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone for the child and what it runs
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_home_that_is_not_writable_is_refused_before_any_charge(public_tmp):
    """chmod 0500 on the home; as root, whose capabilities ignore modes, the command runs without them."""
    home = public_tmp / "home"
    home.mkdir()
    spec = demo_spec(public_tmp)
    os.chmod(home, 0o500)
    try:
        extra = {}
        if os.geteuid() == 0:
            extra["preexec_fn"] = _without_root_override
            try:
                probe = subprocess.run(["touch", str(home / "probe")], capture_output=True, timeout=60, **extra)
            except (OSError, subprocess.SubprocessError) as exc:
                pytest.skip(f"running as root and root's capability to ignore file modes cannot be dropped here ({exc})")
            if probe.returncode == 0:
                pytest.skip("running as root and a 0500 folder does not stop root here even without CAP_DAC_OVERRIDE")
        res = dpr("run", str(spec), home=home, cwd=public_tmp, **extra)
    finally:
        os.chmod(home, 0o700)
    assert res.returncode == 2, res.stderr
    (line,) = error_lines(res.stderr)
    assert f"the home (DPR_HOME) {home} is not writable by this user (Permission denied)" in line
    assert list(home.iterdir()) == []


# --------------------------------------------------------------------------------------- symlink loops
def test_a_symlink_loop_as_spec_path_exits_1_in_one_line(public_tmp):
    loop = public_tmp / "loop.yaml"
    loop.symlink_to(loop)
    for args in (("spec", "check", str(loop)), ("plan", str(loop)), ("run", str(loop))):
        res = dpr(*args, home=public_tmp / "home")
        assert res.returncode == 1, (args, res.stderr)
        (line,) = error_lines(res.stderr)
        assert "Traceback" not in res.stderr and "(ELOOP)" in line and str(loop) in line, (args, line)


@pytest.mark.parametrize("relative", [False, True])
def test_a_symlink_loop_as_data_path_exits_1_in_one_line(public_tmp, relative):
    loop = public_tmp / "data.csv"
    loop.symlink_to(loop)
    spec = demo_spec(public_tmp, kind="csv", path="data.csv" if relative else str(loop))
    res = dpr("run", str(spec), home=public_tmp / "home")
    assert res.returncode == 1, res.stderr
    (line,) = error_lines(res.stderr)
    assert "Traceback" not in res.stderr and "(ELOOP)" in line and "data.csv" in line, line
    assert not (public_tmp / "home" / "warehouse.duckdb").exists()
