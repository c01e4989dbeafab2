"""Shared fixtures.

The Prefect test harness (a real temporary Prefect server) is started once per
session, only by tests that ask for the ``prefect_harness`` fixture.

A run of a dataset name the data owner has not registered is refused (the
registration rule): a test that runs a pipeline on a fresh home registers its
spec first with the ``register_dataset`` fixture (what ``dpr dataset add``
does, in the current ``$DPR_HOME``). A test that uses both ``dpr_home`` and
``small_spec_path`` gets the small spec's dataset (``nycflights13``, the
demo's cap) registered in that home before it starts (``_registered_small_spec``),
unless it is marked ``@pytest.mark.unregistered`` (it registers what it needs
itself, e.g. another cap, or tests the refusal).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from owner_registration import register_spec

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# Under pytest-xdist (scripts/test.sh) each worker process gets its own pipeline and Prefect homes below the
# ones the script made, so two workers never share a warehouse file (one DuckDB writer process per file) or
# Prefect's local state. Set here, before anything imports prefect (its settings are read at import).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    for _var in ("DPR_HOME", "PREFECT_HOME"):
        if os.environ.get(_var):
            _own = Path(os.environ[_var]) / _WORKER
            _own.mkdir(parents=True, exist_ok=True)
            os.environ[_var] = str(_own)


@pytest.fixture(scope="session", autouse=True)
def specs_dirs_for_tests(tmp_path_factory):
    """Let flow runs load specs from pytest's temporary folders too (``DPR_SPECS_DIR``, issue 33 item 7).

    Flows load a spec only from the folders of ``DPR_SPECS_DIR``; many tests write their
    spec into a temporary folder, all of which lie under pytest's base temporary folder.
    The subprocess helpers (``ops_fixtures.make_env``, ``child_runs.child_env``,
    ``test_dpr_cli.dpr``) pass this variable on. Tests of the refusal itself set their own.
    """
    value = os.pathsep.join([str(ROOT / "specs"), str(tmp_path_factory.getbasetemp())])
    before = os.environ.get("DPR_SPECS_DIR")
    os.environ["DPR_SPECS_DIR"] = value
    yield value
    if before is None:
        os.environ.pop("DPR_SPECS_DIR", None)
    else:
        os.environ["DPR_SPECS_DIR"] = before


#: Settings of the harness's server process only (its environment while it starts; the tests' own processes and
#: the servers some tests start themselves keep Prefect's defaults). Neither changes what a flow run does or
#: what the API stores and serves: no flow of this project uses a block (``flows/prefect_api.py`` starts its
#: temporary servers the same way), and no test defines an automation, which is all the triggers and actions
#: services serve. Events, task-run states and logs are recorded as before (the leak tests read all three).
#: Measured on this machine at a load of 8-12 (server CPU seconds): start-up 11.6-12.1 -> 8.1-9.8, a release
#: of the small spec 0.92-1.26 -> 0.80-1.00.
HARNESS_SERVER_ENV = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
                      "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
                      "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """``os.environ`` updated with ``values`` inside the block, as it was after it."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """A real temporary Prefect API for flow runs (``prefect_test_harness``; its server: :data:`HARNESS_SERVER_ENV`)."""
    from prefect.testing.utilities import prefect_test_harness

    timeout = int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90"))
    with contextlib.ExitStack() as stack:
        with _environ(HARNESS_SERVER_ENV):  # read by the server process when it starts, and only there
            stack.enter_context(prefect_test_harness(server_startup_timeout=timeout))
        yield


@pytest.fixture
def dpr_home(tmp_path, monkeypatch) -> Path:
    """A fresh pipeline home (warehouse, bundles, data) for one test."""
    home = tmp_path / "dpr"
    monkeypatch.setenv("DPR_HOME", str(home))
    monkeypatch.delenv("DPR_WAREHOUSE", raising=False)
    monkeypatch.delenv("DPR_BUNDLES", raising=False)
    return home


@pytest.fixture(autouse=True)
def _registered_small_spec(request):
    """Register the small spec's dataset in the test's fresh home when the test uses both (see module doc)."""
    names = request.fixturenames
    if "dpr_home" in names and "small_spec_path" in names and not request.node.get_closest_marker("unregistered"):
        request.getfixturevalue("dpr_home")
        register_spec(request.getfixturevalue("small_spec_path"))


@pytest.fixture(autouse=True)
def _detector_fit_memo(request, monkeypatch):
    """The flow's fit-template task answers a fit seen before in this process from memory
    (``tests/detector_fit_memo.py``), unless the test is marked ``real_detector_fit``."""
    if request.node.get_closest_marker("real_detector_fit"):
        return
    import sys

    module = sys.modules.get("tasks.detect")
    if module is None:  # imported by the first flow test of the process: patched from then on
        if not any(name.startswith(("flows", "tasks")) for name in sys.modules):
            return
        import tasks.detect as module
    from detector_fit_memo import memo_fit_streamed

    monkeypatch.setattr(module, "fit_streamed", memo_fit_streamed)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "unregistered: the test registers its own dataset names (no automatic registration of the "
                   "small spec in dpr_home)")
    config.addinivalue_line(
        "markers", "real_detector_fit: the flow's detector fits for real in this test (no memo of earlier fits, "
                   "tests/detector_fit_memo.py)")


#: The slowest modules, slowest first (wall seconds measured on the CI machine's kind on 2026-11-26, about:
#: crash_resume 600, dpr_cli 570, leak_end_to_end 450, operations 330, pcor_privacy 310, neighbours_bounded
#: 275, flows 270, aiq_flow 260, deployments 250, ...). pytest-xdist (scripts/test.sh) hands whole modules to
#: the workers in collection order, so these go first: the long ones overlap with everything else instead of
#: leaving one worker running them at the end. The other modules keep their order.
SLOW_FIRST = [
    "tests/test_crash_resume.py", "tests/test_crash_resume_late.py", "tests/test_dpr_cli.py",
    "tests/test_leak_end_to_end.py", "tests/test_sources.py",
    "tests/test_operations.py", "tests/test_pcor_privacy.py", "tests/test_neighbours_bounded.py",
    "tests/test_flows.py", "tests/test_aiq_flow.py", "tests/test_deployments.py", "tests/test_release_identity.py",
    "tests/test_outlier_counts_flow.py", "tests/test_validation_chunks.py", "tests/test_pcor_aggregates.py",
    "tests/test_pcor_flow.py", "tests/test_reservations.py", "tests/test_ui_browser.py",
    "tests/test_operator_values.py", "tests/test_outlier_count_cdp.py", "tests/test_bounded_memory.py",
    "tests/test_coco_dask.py", "tests/test_outlier_count_student_t.py", "tests/test_cost_plan.py",
    "tests/test_readme.py", "tests/test_outlier_count_neighbours.py",
    # late in the alphabet and heavy in the 2026-12-07 full runs (tests of 20-70 s): started early too
    "tests/test_scratch_store.py", "tests/test_fault_lines.py", "tests/test_tiny_validated_tables.py",
    "tests/test_private_files.py", "tests/test_dpr_server.py", "tests/test_fast_refusals.py",
    "tests/test_series_flow.py", "tests/test_validation_id_forms.py",
]


def pytest_collection_modifyitems(config, items):
    """Run the modules of :data:`SLOW_FIRST` first, in that order (a stable sort: nothing else moves)."""
    rank = {m: i for i, m in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


#: Tests allowed to run over :data:`LONG_TEST_SECONDS` (the README's Tests section lists them with the reason).
#: Any other test over it is named at the end of the run (``pytest_terminal_summary``): not a failure, since a
#: loaded machine makes any test slow, but the list to look at before the suite grows past its time.
LONG_TEST_SECONDS = float(os.environ.get("DPR_TEST_LONG_SECONDS", "60"))
LONG_ALLOWED = {
    "tests/test_crash_resume.py::test_a_release_stopped_at_every_early_point_in_turn_completes_within_its_plan":
        "one release stopped at each of the first half of its fault points (16 today) in turn, then completed",
    "tests/test_crash_resume_late.py::test_a_release_stopped_at_every_late_point_in_turn_completes_within_its_plan":
        "the same for the second half of the fault points",
    "tests/test_leak_end_to_end.py::test_neighbouring_inputs_leave_identical_public_traces_except_charged_noise":
        "four whole releases (D and three neighbours) in child processes, every public surface compared",
    "tests/test_leak_end_to_end.py::test_a_rerun_on_changed_data_leaves_the_trace_of_a_rerun_on_unchanged_data":
        "four whole releases per case in child processes (two snapshots released in sequence, twice)",
    "tests/test_scratch_store.py::test_a_seeded_demo_release_through_s3_on_hidden_workers_equals_the_default_runners":
        "two whole releases of the demo spec on its 336,776 rows (default runner; Dask workers through S3), "
        "public files compared: 55 s at load 5, 140 s at load 17 on 2 cores",
}


def pytest_runtest_logreport(report):
    """Note a test whose call ran over :data:`LONG_TEST_SECONDS` and is not in :data:`LONG_ALLOWED`."""
    if report.when == "call" and report.duration > LONG_TEST_SECONDS:
        if report.nodeid.split("[", 1)[0] not in LONG_ALLOWED:
            _LONG_TESTS.append((report.duration, report.nodeid))


_LONG_TESTS: list[tuple[float, str]] = []


def pytest_terminal_summary(terminalreporter):
    if _LONG_TESTS:
        terminalreporter.section(f"tests over {LONG_TEST_SECONDS:.0f} s not in conftest.LONG_ALLOWED")
        for seconds, nodeid in sorted(_LONG_TESTS, reverse=True):
            terminalreporter.write_line(f"{seconds:7.1f}s {nodeid}")


@pytest.fixture
def register_dataset():
    """``register_dataset(spec_path, settings=None, *, home=None, **choice)``: the owner's registration (:func:`register_spec`)."""
    return register_spec


@pytest.fixture(scope="session")
def small_flights_csv(tmp_path_factory) -> Path:
    """The first 3,000 NYC flights as a CSV (includes cancelled flights with empty cells)."""
    from dpcore.ingest.raw import materialise_demo
    from dpcore.release.spec import DemoSource

    folder = tmp_path_factory.mktemp("flights")
    src = materialise_demo(DemoSource(kind="demo", limit=3000), folder)
    out = folder / "flights_small.csv"
    shutil.copyfile(src, out)
    return out


@pytest.fixture
def small_spec_path(tmp_path, small_flights_csv) -> Path:
    """The demo spec pointed at the small flights CSV."""
    return write_small_spec(tmp_path, small_flights_csv)


@pytest.fixture(scope="module")
def module_small_spec_path(tmp_path_factory, small_flights_csv) -> Path:
    """The same spec as ``small_spec_path``, once per module (for a home several tests of a module share)."""
    return write_small_spec(tmp_path_factory.mktemp("small_spec"), small_flights_csv)


def write_small_spec(folder: Path, small_flights_csv: Path) -> Path:
    """Write the demo spec pointed at the small flights CSV to ``folder/spec.yaml``; its path."""
    import pandas as pd
    import yaml

    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["dataset"]["source"] = {"kind": "csv", "path": str(small_flights_csv)}
    spec["release_id"] = "test-r1"
    spec["steps"]["aiq"]["enabled"] = False  # the demo's queried ids are not all in the first 3,000 rows
    spec["steps"]["coco"]["enabled"] = False  # tests of the coco step enable it themselves
    # and measure every level (one charge per level), whatever method the demo spec uses (bottom_up_hg)
    spec["steps"]["coco"].update({"method": "top_down_hc", "epsilon_per_level": 0.5})
    spec["steps"]["outlier_counts"]["enabled"] = False  # likewise
    spec["steps"]["pcor"]["enabled"] = False  # likewise
    spec["steps"].setdefault("unattributed", {})["enabled"] = False  # likewise
    # the sample's true rejected fraction (~1.5%) sits within noise reach of the demo's 5% gate (quarantined rows
    # carry the difference of two draws of scale 20); the gate has its own test, here it lets the steps run
    spec["steps"]["validation"]["max_rejected_fraction"] = 0.5
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    spec["steps"]["coco"]["groups_file"] = fleet
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    # the tests' public roster: every id of the small sample plus the demo roster (F000472 is quarantined,
    # F900000 absent); F999999 stays off it
    roster = pd.read_csv(ROOT / "specs" / "demo_roster.csv", dtype=str)["flight_id"].tolist()
    sample = pd.read_csv(small_flights_csv, usecols=["flight_id"], dtype=str)["flight_id"].tolist()
    spec["dataset"]["roster"] = {"ids": list(dict.fromkeys(roster + sample))}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
