"""``spec_path`` cannot read the worker's files, and spec load errors quote nothing of a file (issue 33 item 7).

Every flow takes ``spec_path`` from an operator's UI form. A flow loads a spec only from the folders of
``DPR_SPECS_DIR`` (links resolved, ``..`` applied), and a spec that fails to load is reported by key path,
line and column, never by the text of a line that is not a plausible spec key. The fake system files here
carry recognisable tokens that must appear in no state message, log, exception or console output.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpcore.storage.settings import PROJECT_SPECS, Settings, specs_dirs_from_env
from dpcore.release.spec import SpecError, load_spec
from dpcore.release.spec_dirs import SpecPathError, allowed_spec_file

ROOT = Path(__file__).resolve().parents[1]
DPR = str(Path(sys.executable).parent / "dpr")

#: Tokens planted in the fake system files: none may reach any message.
TOKENS = ("SECRETSALT7Qx", "SECRETHASHabc123", "ALICEHASHzz9", "HUNTER2TOKEN")
#: A shadow-like file: each line ends with ':', so YAML reads every line as a key (the old loader named them all).
SHADOW = (
    "root:$6$SECRETSALT7Qx$SECRETHASHabc123:19000:0:99999:7:::\n"
    "daemon:*:19000:0:99999:7:::\n"
    "alice:$y$j9T$ALICEHASHzz9:19500:0:99999:7:::\n"
    "bob:HUNTER2TOKEN:19500:0:99999:7:::\n"
)


def _no_token(*texts: str) -> None:
    for text in texts:
        leaked = [t for t in TOKENS if t in text]
        assert not leaked, f"{leaked} leaked in: {text[:2000]}"


@pytest.fixture
def allowed(tmp_path, monkeypatch) -> Path:
    """One allowed spec folder (``DPR_SPECS_DIR``), with the fake system file outside it."""
    specs = tmp_path / "allowed" / "specs"
    specs.mkdir(parents=True)
    monkeypatch.setenv("DPR_SPECS_DIR", str(specs))
    return specs


@pytest.fixture
def fake_shadow(tmp_path) -> Path:
    outside = tmp_path / "etc"
    outside.mkdir()
    path = outside / "shadow"
    path.write_text(SHADOW)
    return path


def _good_spec_text(release_id: str = "sp-1") -> dict:
    spec = yaml.safe_load((ROOT / "specs" / "demo.yaml").read_text())
    spec["release_id"] = release_id
    for key in ("steps",):
        spec[key] = {}
    fleet = str(ROOT / "specs" / "demo_fleet.csv")
    spec["schema"]["categorical"]["tailnum"]["domain_from"]["file"] = fleet
    spec["dataset"]["roster"] = {"ids": ["F000001"]}
    return spec


def _write_spec_with_lines(folder: Path, name: str, extra: str) -> tuple[Path, int]:
    """A valid spec plus ``extra`` appended at the top level; returns its path and the line ``extra`` is on."""
    text = yaml.safe_dump(_good_spec_text(), sort_keys=False)
    line = text.count("\n") + 1
    path = folder / name
    path.write_text(text + extra)
    return path, line


# ----------------------------------------------------------------------------- the allowed folders
def test_default_folders_are_the_project_specs_and_the_owners_spec_folder(tmp_path):
    home = tmp_path / "home"
    assert specs_dirs_from_env({}, home) == (Path(os.path.realpath(PROJECT_SPECS)),)
    (home / "specs").mkdir(parents=True)
    assert specs_dirs_from_env({"DPR_SPECS_DIR": ""}, home) == (
        Path(os.path.realpath(PROJECT_SPECS)), Path(os.path.realpath(home / "specs")))
    a, b = tmp_path / "a", tmp_path / "b"
    given = {"DPR_SPECS_DIR": f"{a}{os.pathsep}{os.pathsep}{b}"}
    assert specs_dirs_from_env(given, home) == (a.resolve(), b.resolve())


def test_a_path_outside_the_allowed_folders_is_refused_naming_only_the_folders(allowed, fake_shadow):
    with pytest.raises(SpecPathError) as exc:
        allowed_spec_file(str(fake_shadow), Settings.from_env().specs_dirs)
    msg = str(exc.value)
    assert str(allowed) in msg and str(fake_shadow) in msg and "DPR_SPECS_DIR" in msg
    _no_token(msg)


def test_a_link_inside_an_allowed_folder_that_points_out_is_refused(allowed, fake_shadow):
    link = allowed / "release.yaml"
    link.symlink_to(fake_shadow)
    with pytest.raises(SpecPathError) as exc:
        allowed_spec_file(link, Settings.from_env().specs_dirs)
    assert str(fake_shadow) not in str(exc.value)  # where the link points is not said
    # a linked folder inside the allowed one is no way out either
    (allowed / "sub").symlink_to(fake_shadow.parent, target_is_directory=True)
    with pytest.raises(SpecPathError):
        allowed_spec_file(allowed / "sub" / "shadow", Settings.from_env().specs_dirs)


def test_dotdot_cannot_climb_out_and_links_within_the_folders_are_followed(allowed, fake_shadow):
    climb = allowed / ".." / ".." / "etc" / "shadow"
    with pytest.raises(SpecPathError):
        allowed_spec_file(climb, Settings.from_env().specs_dirs)
    with pytest.raises(SpecPathError):  # the folder itself is not a spec
        allowed_spec_file(allowed, Settings.from_env().specs_dirs)
    (allowed / "sub").mkdir()
    with pytest.raises(SpecPathError, match="not a regular file"):
        allowed_spec_file(allowed / "sub", Settings.from_env().specs_dirs)
    real = allowed / "sub" / "real.yaml"
    real.write_text("release_id: x\n")
    (allowed / "alias.yaml").symlink_to(real)
    assert allowed_spec_file(allowed / "alias.yaml", Settings.from_env().specs_dirs) == real.resolve()
    assert allowed_spec_file(allowed / "sub" / ".." / "sub" / "real.yaml", Settings.from_env().specs_dirs) == \
        real.resolve()
    # an allowed folder reached through a link is compared by its real path
    via = allowed.parent / "specs_link"
    via.symlink_to(allowed, target_is_directory=True)
    assert allowed_spec_file(via / "alias.yaml", (via,)) == real.resolve()


# ----------------------------------------------------------------------------- what a load error says
def test_a_line_that_is_no_plausible_key_is_named_by_its_number_only(allowed):
    path, line = _write_spec_with_lines(allowed, "bad.yaml", "bob:HUNTER2TOKEN:19500:0:99999:7:::\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    msg = str(exc.value)
    assert f"line {line} is not a spec key" in msg, msg
    _no_token(msg)
    # nested too, with the path of its parent
    spec = _good_spec_text()
    text = yaml.safe_dump(spec, sort_keys=False).replace("steps: {}\n", "steps:\n  alice:$y$ALICEHASHzz9::\n")
    nested = allowed / "nested.yaml"
    nested.write_text(text)
    n = text.splitlines().index("  alice:$y$ALICEHASHzz9::") + 1
    with pytest.raises(SpecError) as exc:
        load_spec(nested)
    assert f"steps: line {n} is not a spec key" in str(exc.value), str(exc.value)
    _no_token(str(exc.value))


def test_an_unknown_plausible_key_is_still_named(allowed):
    path, _ = _write_spec_with_lines(allowed, "typo.yaml", "acuracy_alpha: 0.1\n")
    with pytest.raises(SpecError, match=r"acuracy_alpha: unknown key \(check the spelling"):
        load_spec(path)
    spec = _good_spec_text()
    spec["budget"]["epsilom"] = 1
    (allowed / "typo2.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=r"budget\.epsilom: unknown key"):
        load_spec(allowed / "typo2.yaml")


def test_a_yaml_syntax_error_gives_line_and_column_not_the_text(allowed):
    bad = allowed / "syntax.yaml"
    bad.write_text("release_id: x\ndataset:\n  name: [unclosed HUNTER2TOKEN\n")
    with pytest.raises(SpecError) as exc:
        load_spec(bad)
    msg = str(exc.value)
    assert "not valid YAML" in msg and "line 4, column 1" in msg and "from line 3, column 9" in msg, msg
    _no_token(msg)
    for text in ("release_id: *HUNTER2TOKEN$x\n", "release_id: !HUNTER2TOKEN$x y\n", "a: 1\n\tHUNTER2TOKEN: 2\n",
                 "a: 1\nHUNTER2TOKEN\x01: 2\n"):
        bad.write_text(text)
        with pytest.raises(SpecError, match="not valid YAML: line ") as exc:
            load_spec(bad)
        _no_token(str(exc.value))


def test_a_file_that_is_not_a_mapping_says_so_without_content(allowed):
    for text in ("root:x:0:0:HUNTER2TOKEN:/root:/bin/bash\n", "- HUNTER2TOKEN\n", ""):
        (allowed / "passwd").write_text(text)
        with pytest.raises(SpecError, match="must be a mapping of keys to values") as exc:
            load_spec(allowed / "passwd")
        _no_token(str(exc.value))


def test_quoted_values_in_validator_messages_are_shown_only_when_plausible(allowed):
    spec = _good_spec_text()
    spec["schema"]["categorical"]["$HUNTER2TOKEN$"] = {"domain": ["a"]}
    spec["dataset"]["source"] = {"kind": "$SECRETHASHabc123", "path": "x"}
    (allowed / "values.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as exc:
        load_spec(allowed / "values.yaml")
    msg = str(exc.value)
    assert "dataset.source: Input tag <not shown> found using 'kind'" in msg, msg
    assert "schema: attribute name <not shown> must be a plain column name" in msg, msg
    _no_token(msg)


def test_dpr_spec_check_on_a_shadow_file_prints_no_password_field(fake_shadow, tmp_path):
    """The owner's own command uses the same safe messages (a wrong file given by mistake)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_")}
    env["DPR_HOME"] = str(tmp_path / "home")
    res = subprocess.run([DPR, "spec", "check", str(fake_shadow)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "line 1 is not a spec key" in out and "line 4 is not a spec key" in out, out
    _no_token(out)


# ----------------------------------------------------------------------------- through real flow runs
def _run_texts(state) -> tuple[list[str], list[str]]:
    from child_runs import flushed_texts

    return flushed_texts(str(state.state_details.flow_run_id), "Finished in state Failed")


@pytest.mark.usefixtures("prefect_harness")
def test_a_flow_run_refuses_a_spec_path_outside_the_allowed_folders(allowed, fake_shadow, dpr_home, capfd):
    from flows.ingest import ingest_flow

    link = allowed / "release.yaml"
    link.symlink_to(fake_shadow)
    for spec_path in (str(fake_shadow), str(link), str(allowed / ".." / ".." / "etc" / "shadow")):
        state = ingest_flow(spec_path=spec_path, return_state=True)
        assert state.is_failed()
        exc = state.result(raise_on_failure=False)
        assert isinstance(exc, SpecPathError), repr(exc)
        assert str(allowed) in str(exc) and spec_path in str(exc)
        logs, states = _run_texts(state)
        assert any("is outside the folders flow runs may load specs from" in s for s in states), states
        console = capfd.readouterr()
        _no_token(str(exc), repr(exc), state.message or "", *logs, *states, console.out, console.err)
    assert not (dpr_home / "warehouse.duckdb").exists()  # refused before anything was touched


@pytest.mark.usefixtures("prefect_harness")
def test_a_flow_run_reports_a_bad_spec_line_by_number_only(allowed, dpr_home, capfd):
    from flows.ingest import ingest_flow

    path, line = _write_spec_with_lines(allowed, "bad.yaml", "bob:HUNTER2TOKEN:19500:0:99999:7:::\nacuracy_alpha: 1\n")
    state = ingest_flow(spec_path=str(path), return_state=True)
    assert state.is_failed()
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, SpecError) and not isinstance(exc, SpecPathError), repr(exc)
    logs, states = _run_texts(state)
    assert any(f"line {line} is not a spec key" in s for s in states), states
    assert any("acuracy_alpha: unknown key" in s for s in states), states
    console = capfd.readouterr()
    _no_token(str(exc), repr(exc), *logs, *states, console.out, console.err)


@pytest.mark.usefixtures("prefect_harness")
def test_dpr_operator_query_on_a_spec_outside_the_folders_is_refused_before_any_charge(tmp_path, allowed):
    """``dpr aiq`` runs the flow in the owner's shell: the same folders apply, refused with exit 2."""
    from prefect.settings import PREFECT_API_URL

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    spec = outside / "spec.yaml"
    spec.write_text(yaml.safe_dump(_good_spec_text()))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_")}
    env.update(DPR_HOME=str(home), DPR_SPECS_DIR=str(allowed), PREFECT_API_URL=str(PREFECT_API_URL.value()),
               PREFECT_LOGGING_LEVEL="WARNING", COLUMNS="200")
    res = subprocess.run([DPR, "aiq", "--spec", str(spec), "--record-id", "F000001"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "is outside the folders flow runs may load specs from" in res.stderr and str(allowed) in res.stderr
    assert not (home / "warehouse.duckdb").exists()
