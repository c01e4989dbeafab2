"""The count-of-counts pictures drawn in a child process (dpcore.publish.background_plots; issue 29, goal 5): the same
bytes as a drawing in the process, private modes, a failure or a kill raises at the wait (never a missing file
without an error), a killed drawing leaves no half-written picture under a picture's name, and a release whose
drawing fails fails with that error."""
from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpcore.publish import background_plots
from dpcore.publish.background_plots import PictureError, submit, wait_for
from dpcore.mechanisms.coco import Hierarchy
from dpcore.publish.plots import coco_plot_paths, coco_plots, drawn_nodes


@pytest.fixture
def shape():
    """Three levels (root, 6 carriers, carrier x origin), histograms of K = 60, as the demo draws them."""
    leaves = pd.DataFrame({"carrier": [c for c in "ABCDEF" for _ in range(3)], "origin": ["EWR", "JFK", "LGA"] * 6})
    h = Hierarchy.from_leaf_paths(leaves, ["carrier", "origin"])
    rng = np.random.default_rng(3)
    return {n: rng.integers(0, 50, 61) for n in h.nodes}, h


def _modes(folder: Path) -> set[tuple[str, int]]:
    return {(p.name, stat.S_IMODE(p.stat().st_mode)) for p in [folder, *folder.iterdir()]}


def test_pictures_are_the_bytes_drawn_in_the_process_and_private(tmp_path, shape):
    est, h = shape
    here = coco_plots(est, h, tmp_path / "here", 60)
    paths = submit(est, h, tmp_path / "child", 60)
    assert paths == coco_plot_paths(h, tmp_path / "child") and [p.name for p in paths] == [p.name for p in here]
    wait_for(paths)
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in here]
    assert {m for _, m in _modes(tmp_path / "child")} == {0o700, 0o600}  # the folder 0700, every file 0600
    assert not list((tmp_path / "child").glob(".*"))  # no temporary file left
    wait_for(paths)  # a second wait (another step's images, a retried bundle) returns at once


def test_under_a_small_cap_pictures_are_drawn_by_a_child_process_with_the_same_bytes(tmp_path, shape, monkeypatch):
    """draw_privately under DPR_MEMORY_LIMIT=512MiB: a child process draws (matplotlib never loads in the caller:
    checked in a fresh interpreter), the same bytes and private modes as a drawing here (issue 29, goal 4)."""
    import pickle
    import subprocess
    import sys

    from dpcore.publish.plots import draw_privately, rank_size_plot

    est, h = shape
    here = coco_plots(est, h, tmp_path / "here", 60)
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "512MiB")
    child = draw_privately(coco_plots, {n: est[n] for n in drawn_nodes(h)}, h, tmp_path / "child", 60)
    assert [p.name for p in child] == [p.name for p in here]
    assert [p.read_bytes() for p in child] == [p.read_bytes() for p in here]
    assert {m for _, m in _modes(tmp_path / "child")} == {0o700, 0o600}
    job = tmp_path / "job.pkl"
    job.write_bytes(pickle.dumps((np.arange(50, 0, -1), tmp_path / "rank" / "r.png")))
    code = ("import pickle, sys\n"
            "from dpcore.publish.plots import draw_privately, rank_size_plot\n"
            f"sizes, path = pickle.loads(open({str(job)!r}, 'rb').read())\n"
            "draw_privately(rank_size_plot, sizes, path, 'sizes')\n"
            "print(path.exists(), 'matplotlib' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]
    assert (tmp_path / "rank" / "r.png").read_bytes() == rank_size_plot(
        np.arange(50, 0, -1), tmp_path / "rank-here.png", "sizes").read_bytes()


@pytest.mark.usefixtures("prefect_harness")
def test_a_busy_machine_draws_in_the_flow_process(dpr_home, small_spec_path, tmp_path, monkeypatch):
    """No free core (load average at or above the cores): no drawing process, the pictures drawn by coco-finish
    itself, the same files in the bundle."""
    import subprocess

    from flows.release_pipeline import release_pipeline

    monkeypatch.setattr(background_plots, "core_free", lambda: False)
    monkeypatch.setattr(background_plots, "_idle", None)
    spawned = []
    monkeypatch.setattr(background_plots, "_spawn", lambda: spawned.append(1) or subprocess.Popen(["false"]))
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["coco"].update({"enabled": True, "max_group_size": 60, "levels": ["origin"]})
    # the detector and its owner-only rules are not what this file tests, and charge nothing; off, each release
    # here costs about half the CPU (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False
    path = tmp_path / "coco.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = release_pipeline(spec_path=str(path))
    assert spawned == [] and (Path(out["bundle"]) / "coco_overview.png").is_file()
    assert len(list(Path(out["bundle"]).glob("coco_*.png"))) == 1 + 3  # the overview and the 3 origins


def test_only_the_drawn_nodes_are_needed(shape):
    est, h = shape
    assert set(drawn_nodes(h)) == set(h.nodes_at(1)) | set(h.nodes_at(2))


def test_a_failed_drawing_raises_with_its_cause(tmp_path, shape):
    est, h = shape
    (tmp_path / "plots").write_text("a file where the pictures' folder goes")
    paths = submit(est, h, tmp_path / "plots" / "r1", 60)
    with pytest.raises(PictureError, match="pictures were not drawn.*failed: NotADirectoryError") as err:
        wait_for(paths)
    assert isinstance(err.value.__cause__, NotADirectoryError)  # an OSError: an environment fault as before
    with pytest.raises(PictureError):
        wait_for(paths)  # it stays failed: a retried bundle does not publish without the pictures


def test_a_killed_drawing_raises_and_leaves_no_half_written_picture(tmp_path):
    # 80 pictures (several seconds of drawing, whatever the load): the kill lands while it draws
    h = Hierarchy.from_leaf_paths(pd.DataFrame({"carrier": [f"C{i:02d}" for i in range(80)]}), ["carrier"])
    est = {n: np.arange(61) % 7 for n in h.nodes}
    background_plots.start()
    proc = background_plots._idle
    paths = submit(est, h, tmp_path / "plots", 60)
    deadline = time.monotonic() + 60
    while not any((tmp_path / "plots").glob("*.png")) and time.monotonic() < deadline:
        time.sleep(0.01)  # kill it while it draws: some files written, the others not
    os.kill(proc.pid, signal.SIGKILL)
    with pytest.raises(PictureError, match="killed by signal SIGKILL"):
        wait_for(paths)
    for p in paths:
        if p.exists():  # a file under a picture's name is a whole PNG (its last chunk is IEND)
            assert p.read_bytes()[-12:-4] == b"\x00\x00\x00\x00IEND", p


def test_a_newer_drawing_of_the_same_files_replaces_the_older(tmp_path, shape):
    est, h = shape
    first = submit(est, h, tmp_path / "plots", 60)
    second = submit({n: v + 1 for n, v in est.items()}, h, tmp_path / "plots", 60)
    wait_for(second)
    assert first == second and all(p.is_file() for p in second)
    assert [p.read_bytes() for p in second] == [p.read_bytes() for p in
                                                coco_plots({n: v + 1 for n, v in est.items()}, h, tmp_path / "x", 60)]


@pytest.mark.usefixtures("prefect_harness")
def test_a_release_whose_drawing_fails_fails_with_that_error(dpr_home, small_spec_path, tmp_path, monkeypatch):
    """The pictures are drawn while the later steps run; their failure fails the release at the bundle, which
    is then not written (never a bundle without its pictures)."""
    from dpcore.storage.settings import Settings
    from flows.release_pipeline import release_pipeline

    monkeypatch.setattr(background_plots, "core_free", lambda: True)  # whatever the machine's load

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["coco"].update({"enabled": True, "max_group_size": 60, "levels": ["origin"]})
    # the detector and its owner-only rules are not what this file tests, and charge nothing; off, each release
    # here costs about half the CPU (BENCHMARKS.md, "Test suite time")
    spec["steps"]["detect"]["enabled"] = spec["steps"]["rules"]["enabled"] = False
    path = tmp_path / "coco.yaml"
    path.write_text(yaml.safe_dump(spec))
    settings = Settings.from_env()
    plots = settings.data / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    (plots / spec["release_id"]).write_text("a file where the release's pictures go")
    with pytest.raises(PictureError, match="count-of-counts pictures were not drawn"):
        release_pipeline(spec_path=str(path))
    assert not (settings.bundles / spec["dataset"]["name"] / spec["release_id"]).exists()
