"""Where ``dpr server start`` keeps Prefect's database (issue 48, item 5): code, help and docs agree."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


def test_prefect_home_wins_over_dpr_home_and_every_text_says_so(tmp_path, monkeypatch):
    from dpr.main import cli
    from flows.prefect_api import prefect_home

    monkeypatch.setenv("DPR_HOME", str(tmp_path / "dpr"))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "ph"))
    assert prefect_home() == tmp_path / "ph"
    monkeypatch.delenv("PREFECT_HOME")
    assert prefect_home() == tmp_path / "dpr" / "prefect"
    help_text = " ".join(CliRunner().invoke(cli, ["server", "start", "--help"]).output.split())
    assert "$PREFECT_HOME when it is set, else in $DPR_HOME/prefect" in help_text
    page = (ROOT / "docs" / "own-table.md").read_text()  # the command reference (was the README's table row)
    section = page.split("### `dpr server start`", 1)[1].split("\n#", 1)[0]
    assert "its database in `$PREFECT_HOME` when set, else `$DPR_HOME/prefect`" in section
