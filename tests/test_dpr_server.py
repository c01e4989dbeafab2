"""``dpr server start|status|stop`` (issue 32 §2): one real local Prefect server that later commands reuse.

The test starts the server in a fresh home (nothing else: no test harness API in the environment), runs an
operator query with ``dpr`` and finds that query's flow run recorded on that server, then stops it.
"""
from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DPR = str(ROOT / ".venv" / "bin" / "dpr")


def _dpr(*args: str, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DPR_", "PREFECT_")) or k in ("DPR_SPECS_DIR", "PREFECT_SERVER_ANALYTICS_ENABLED")}
    env.update(DPR_HOME=str(home), PREFECT_LOGGING_LEVEL="WARNING")
    return subprocess.run([DPR, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _flow_runs(api: str) -> list[dict]:
    req = urllib.request.Request(f"{api}/flow_runs/filter", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 (127.0.0.1)
        return json.loads(r.read())


@pytest.mark.timeout(600)
def test_a_started_server_is_reused_by_operator_queries_and_stops(tmp_path, small_spec_path):
    import yaml

    home = tmp_path / "home"
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["aiq"].update({"enabled": True, "record_ids": ["F000001"], "from_detector": 0})
    path = tmp_path / "aiq.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert _dpr("dataset", "add", "nycflights13", "--spec", str(path), home=home).returncode == 0

    assert _dpr("server", "status", home=home).returncode == 3  # none yet
    started = _dpr("server", "start", home=home)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "dpr server: running at http://127.0.0.1:" in started.stdout
        record = json.loads((home / "prefect" / "dpr-server.json").read_text())
        assert oct((home / "prefect" / "dpr-server.json").stat().st_mode & 0o777) == "0o600"
        again = _dpr("server", "start", home=home)  # idempotent: the same server
        assert again.returncode == 0 and f"pid {record['pid']}" in again.stdout
        status = _dpr("server", "status", home=home)
        assert status.returncode == 0 and record["ui_url"] in status.stdout

        query = _dpr("aiq", "--spec", str(path), "--record-id", "F000001", "--json", home=home)
        assert query.returncode == 0, query.stdout + query.stderr
        # one plain line about money (issue 32 §3), the ledger's figure after the neighbour conversion
        assert ("charged: epsilon=0.2 delta=0 (stated epsilon=0.1 delta=0 under add-remove neighbours, counted as "
                "epsilon=0.2 delta=0 against your replace-one cap); left epsilon=19.8 delta=1e-05") in query.stderr, \
            query.stderr
        again = _dpr("aiq", "--spec", str(path), "--record-id", "F000001", "--json", home=home)
        assert again.returncode == 0 and "charged: nothing" in again.stderr, again.stderr
        runs = _flow_runs(record["api_url"])
        assert [r["state_type"] for r in runs] == ["COMPLETED", "COMPLETED"]  # both queries ran on this server
        refused = _dpr("aiq", "--spec", str(path), "--record-id", "F999999", home=home)  # off the roster
        assert refused.returncode == 2 and "Traceback" not in refused.stderr + refused.stdout, refused.stderr
        assert len(_flow_runs(record["api_url"])) == 3
    finally:
        stopped = _dpr("server", "stop", home=home)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not (home / "prefect" / "dpr-server.json").exists()
    assert _dpr("server", "status", home=home).returncode == 3
