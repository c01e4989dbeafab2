"""Private files are private on disk (issue 33, part 5; DESIGN.md rule 11).

Under the usual umask 022, a whole release (the demo spec, every step, the demo data materialised under
the home) leaves every file of the home with the mode of a table in this test: private data and owner-only
results 0600 in 0700 folders, the public bundle readable. A path the table does not know fails the test.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import yaml

from dpcore.storage.private_files import (
    owner_umask, private_dir, private_open, private_umask, publish, write_private_atomic,
)

ROOT = Path(__file__).resolve().parents[1]

PRIVATE_FILE, PRIVATE_DIR, PUBLIC_FILE, PUBLIC_DIR = 0o600, 0o700, 0o644, 0o755

#: (pattern on the path relative to the home, expected mode): the first match decides
MODES: list[tuple[str, int]] = [
    # the home itself and the bundles' tree: public folders
    (r"bundles", PUBLIC_DIR),
    (r"bundles/[^/]+", PUBLIC_DIR),
    (r"bundles/[^/]+/[^/]+", PUBLIC_DIR),
    # the owner-only part of a bundle
    (r"bundles/[^/]+/[^/]+/owner", PRIVATE_DIR),
    (r"bundles/[^/]+/[^/]+/owner/(validation_summary\.json|outlier_rules\.csv)", PRIVATE_FILE),
    (r"bundles/[^/]+/[^/]+/owner/[a-z_]+__[a-z_]+\.csv", PRIVATE_FILE),  # a step's owner-only table
    # the public part of a bundle
    (r"bundles/[^/]+/[^/]+/(manifest\.json|report\.md|[^/]+\.png)", PUBLIC_FILE),
    (r"bundles/[^/]+/[^/]+/tables", PUBLIC_DIR),
    (r"bundles/[^/]+/[^/]+/tables/[^/]+\.(csv|parquet)", PUBLIC_FILE),
    # the warehouse (raw rows, quarantine, validation results, the ledger), its log, spill and scratch folders
    # .lock: the queue processes wait on; .wait: where a waiting process says so (both empty)
    (r"warehouse\.duckdb(\.wal|\.lock|\.wait)?", PRIVATE_FILE),
    (r"warehouse\.duckdb\.(tmp|scratch|locks)", PRIVATE_DIR),
    (r"warehouse\.duckdb\.(tmp|scratch|locks)/.+", None),  # any folder 0700, any file 0600 (checked below)
    # the owner key and the home's ledger marker
    (r"owner", PRIVATE_DIR),
    (r"owner/owner\.key", PRIVATE_FILE),
    (r"ledger\.json", PRIVATE_FILE),
    # the materialised demo data and the plots drawn under it
    (r"data", PRIVATE_DIR),
    (r"data/nycflights13_flights_v\d+_first\d+\.csv", PRIVATE_FILE),
    (r"data/plots(/[^/]+)?", PRIVATE_DIR),
    (r"data/plots/[^/]+/[^/]+\.png", PRIVATE_FILE),
]


def expected_mode(rel: str, is_dir: bool) -> int | None:
    """The mode the table gives ``rel``; raises for a path the table does not know."""
    for pattern, mode in MODES:
        if re.fullmatch(pattern, rel):
            return mode if mode is not None else (PRIVATE_DIR if is_dir else PRIVATE_FILE)
    raise AssertionError(f"unexpected path under the home: {rel}")


def modes_under(home: Path) -> dict[str, int]:
    return {str(p.relative_to(home)): stat.S_IMODE(p.lstat().st_mode) for p in sorted(home.rglob("*"))}


@pytest.fixture
def umask_022():
    from dpcore.storage.warehouse_lease import close_all

    close_all()  # a connection an earlier test of this process kept holds the private umask until let go
    old = os.umask(0o022)
    try:
        yield
    finally:
        close_all()
        os.umask(old)


@pytest.fixture
def demo_spec(tmp_path) -> Path:
    """The demo spec, every step on, the first 3,000 demo flights (materialised under the home's data/)."""
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = {"kind": "demo", "limit": 3000}
    spec["dataset"]["roster"]["file"] = str(ROOT / "specs" / "demo_roster.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.5  # the gate has its own test
    spec["release_id"] = "modes-r1"
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.usefixtures("prefect_harness", "umask_022")
def test_a_whole_release_leaves_every_private_file_0600_and_the_bundle_public(dpr_home, demo_spec, register_dataset):
    from flows.release_pipeline import release_pipeline

    register_dataset(demo_spec)  # the data owner, before the run (under the same umask 022)
    out = release_pipeline(spec_path=str(demo_spec))
    bundle = Path(out["bundle"])
    assert (bundle / "owner" / "validation_summary.json").is_file() and (bundle / "owner" / "outlier_rules.csv").is_file()
    found = modes_under(dpr_home)
    # what the run must have made: the table is not checked against an empty home
    for rel in ("warehouse.duckdb", "owner/owner.key", "ledger.json", "data", "bundles/nycflights13/modes-r1/owner"):
        assert rel in found, rel
    assert any(r.startswith("data/plots/") and r.endswith(".png") for r in found)
    wrong = {rel: f"{mode:o} (want {expected_mode(rel, (dpr_home / rel).is_dir()):o})"
             for rel, mode in found.items() if mode != expected_mode(rel, (dpr_home / rel).is_dir())}
    assert not wrong, wrong


def test_the_warehouse_its_log_and_spill_folder_are_created_private(tmp_path, umask_022):
    """DuckDB takes no mode: its file, .wal and .tmp spill folder come out 0600/0700 under umask 022."""
    from dpcore.runtime.chunks import MemoryBudget
    from dpcore.storage.warehouse import Warehouse

    wh = Warehouse(tmp_path / "w.duckdb", memory=MemoryBudget(256 << 20))
    seen = {}

    def op(con):
        con.execute("SET memory_limit = '50MB'")
        con.execute("SET threads = 1")
        con.execute("CREATE TABLE internal.t AS SELECT range AS i, random()::VARCHAR AS s FROM range(2000000)")
        con.execute("SELECT s, count(*) FROM internal.t GROUP BY s ORDER BY s").fetchall()
        for p in tmp_path.iterdir():  # while the connection is open: the log and the spill folder exist
            seen[p.name] = stat.S_IMODE(p.stat().st_mode)

    wh.run(op)
    wh.let_go()  # the process keeps its connection (and the private umask) until it lets go of the file
    assert seen["w.duckdb"] == 0o600 and seen["w.duckdb.wal"] == 0o600, seen
    assert seen.get("w.duckdb.tmp", 0o700) == 0o700, seen
    assert "w.duckdb.tmp" in seen, "the query did not spill: raise its size"
    assert stat.S_IMODE(os.umask(0o022)) == 0o022  # the owner's umask is back after the connection


def test_an_older_warehouse_made_with_the_umask_is_tightened_when_opened(tmp_path, umask_022):
    import duckdb

    from dpcore.storage.warehouse import Warehouse

    path = tmp_path / "old.duckdb"
    duckdb.connect(str(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    Warehouse(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_private_helpers_create_private_whatever_the_umask(tmp_path, umask_022):
    d = private_dir(tmp_path / "a" / "b", root=tmp_path)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700 and stat.S_IMODE(d.stat().st_mode) == 0o700
    shared = private_dir(tmp_path / "home" / "data")  # the parent (a shared home) keeps the usual mode
    assert stat.S_IMODE(shared.parent.stat().st_mode) == 0o755 and stat.S_IMODE(shared.stat().st_mode) == 0o700
    f = d / "x.csv"
    f.write_text("old")
    os.chmod(f, 0o644)
    with private_open(f) as fh:  # an existing file is truncated and made private
        fh.write("new")
    assert f.read_text() == "new" and stat.S_IMODE(f.stat().st_mode) == 0o600
    m = write_private_atomic(tmp_path / "marker.json", "{}")
    assert stat.S_IMODE(m.stat().st_mode) == 0o600 and [p.name for p in tmp_path.glob(".marker*")] == []


def test_private_umask_blocks_nest_across_threads_and_restore_the_owners_umask(umask_022):
    import threading

    barrier = threading.Barrier(2)

    def hold():
        with private_umask():
            barrier.wait()
            barrier.wait()

    t = threading.Thread(target=hold)
    t.start()
    barrier.wait()
    with private_umask():  # overlaps the other thread's block
        assert owner_umask() == 0o022
    barrier.wait()
    t.join()
    assert os.umask(0o022) == 0o022


def test_publish_opens_the_public_part_and_leaves_owner_private(tmp_path, umask_022):
    with private_umask():  # as if another thread held the private umask while the bundle was written
        (tmp_path / "tables").mkdir()
        (tmp_path / "tables" / "t.csv").write_text("a\n")
        (tmp_path / "manifest.json").write_text("{}")
        private_dir(tmp_path / "owner")
        (tmp_path / "owner" / "s.json").write_text("{}")
    publish(tmp_path)
    assert stat.S_IMODE((tmp_path / "tables" / "t.csv").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "tables").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "manifest.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "owner").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "owner" / "s.json").stat().st_mode) == 0o600
