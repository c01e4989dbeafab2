"""The yearly PostgreSQL series of docs/series.md (issue 48): its block runs as written against a real PostgreSQL.

A tiny ``survey`` table (1,000 rows per year: the rejected-fraction gate reads noisy counts, so not fewer, in 2010, 2012 and 2016, plus a 2014 row the spec does not list)
in the session's pgserver; the block (register, plan the series, backfill 2010 to 2016, budget) runs in bash
from the repository root with the connection string in ``DPR_PG_DSN``.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from pg_fixtures import pg_server  # noqa: F401 - the session's PostgreSQL server
from test_readme import BIN, ROOT, runnable_block

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_the_yearly_postgres_series_runs_as_written(pg_server, tmp_path):  # noqa: F811
    from prefect.settings import PREFECT_API_URL

    block = runnable_block("tests/test_readme_series_pg.py", "test_the_yearly_postgres_series_runs_as_written")
    assert "specs/survey_yearly.yaml --from" in block
    regions = ["north", "south", "east", "west"]
    rows = [f"({i}, {year}, '{regions[i % 4]}', {20000 + 1000 * (i % 100)})" for year in (2010, 2012, 2014, 2016)
            for i in range(year * 1000, year * 1000 + 1000)]
    pg_server.execute("DROP TABLE IF EXISTS survey",
                      "CREATE TABLE survey (id integer, year integer, region text, income integer)",
                      "INSERT INTO survey VALUES " + ", ".join(rows))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPR_")}
    env.update(DPR_HOME=str(tmp_path / "home"), PREFECT_API_URL=str(PREFECT_API_URL.value()),
               DPR_PG_DSN=pg_server.admin_uri, PREFECT_LOGGING_LEVEL="WARNING", COLUMNS="200",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # `dpr` as the page writes it
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = " ".join(res.stdout.split())
    assert "runway: 3 more period(s) fit (2010 to 2016)" in out, out[-3000:]
    assert "it says whether anyone had a record in that period" in out
    assert "backfill done: 3 period(s), 2010 to 2016" in out, out[-3000:]
    bundles = sorted(p.name for p in (tmp_path / "home" / "bundles" / "survey").iterdir() if p.name != "series")
    assert bundles == ["survey-2010", "survey-2012", "survey-2016"]  # 2014's rows exist, but 2014 is no period
    assert pg_server.admin_uri not in res.stdout + res.stderr
