"""Sources where the owner keeps the table: PostgreSQL, Parquet datasets, DuckDB files (issue 31).

Against a real PostgreSQL server (``pg_fixtures.pg_server``, started once per session):

* the demo's first 3,000 flights ingested from a CSV, a Parquet dataset folder (plain and hive-partitioned),
  a DuckDB file and PostgreSQL give identical raw and validated tables and, with seeded noise, identical
  releases;
* a password that is a recognisable token never appears on any surface (Prefect's database: logs, states,
  artifacts, parameters; the bundle; the warehouse including the ledger; ``dpr`` output; exception text),
  for a good run, a wrong password and an unreachable server;
* every refusal (unreachable, wrong password, no such table, a failing query, a writing query, a permission
  error, a DOUBLE column against an integer domain, a missing variable) is raised before any charge and
  names the source kind, the table or column and the fix.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from owner_registration import register_spec
from pg_fixtures import pg_server  # noqa: F401 - the session's PostgreSQL server

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "PWTOKEN-q7Zx31-DoNotLeak"  # the reader role's password: searched for on every surface
WRONG = "WRONGPW-k4Vb88-DoNotLeak"
PG_COLUMNS = ("flight_id text, carrier text, origin text, month integer, dest text, tailnum text, distance integer, "
              "air_time integer, dep_delay integer, arr_delay integer")
INT_COLUMNS = ("distance", "air_time", "dep_delay", "arr_delay", "month")


def _typed(csv: Path) -> pd.DataFrame:
    df = pd.read_csv(csv, dtype={"flight_id": str, "carrier": str, "origin": str, "dest": str, "tailnum": str},
                     keep_default_na=False, na_values={c: [""] for c in INT_COLUMNS})
    for c in INT_COLUMNS:
        df[c] = df[c].astype("Int64")
    df["tailnum"] = df["tailnum"].astype(str)
    return df


@pytest.fixture(scope="module")
def sources(tmp_path_factory, small_flights_csv, pg_server):  # noqa: F811
    """The small flights table in every kind of source: {label: dataset.source mapping}."""
    folder = tmp_path_factory.mktemp("sources")
    df = _typed(small_flights_csv)
    plain = folder / "flights_parquet"
    plain.mkdir()
    for i, part in enumerate((df.iloc[:1000], df.iloc[1000:2200], df.iloc[2200:])):
        part.to_parquet(plain / f"part-{i}.parquet", index=False)
    db = folder / "owner.duckdb"
    con = duckdb.connect(str(db))
    con.register("df", df)
    con.execute("CREATE TABLE flights AS SELECT * FROM df")
    con.close()
    pg_server.load_csv("public.flights", PG_COLUMNS, small_flights_csv)
    pg_server.add_password_role("dpr_reader", TOKEN)
    pg_server.execute("GRANT SELECT ON public.flights TO dpr_reader")
    os.environ["DPR_TEST_PG_DSN"] = pg_server.uri("dpr_reader", TOKEN)
    yield {
        "csv": {"kind": "csv", "path": str(small_flights_csv)},
        "parquet": {"kind": "parquet", "path": str(plain)},
        "duckdb": {"kind": "duckdb", "path": str(db), "table": "flights"},
        "postgres": {"kind": "postgres", "dsn_env": "DPR_TEST_PG_DSN", "table": "public.flights"},
    }
    os.environ.pop("DPR_TEST_PG_DSN", None)


def _spec(small_spec_path: Path, folder: Path, source: dict, name: str = "spec.yaml", **steps) -> Path:
    spec = yaml.safe_load(small_spec_path.read_text())
    spec["dataset"]["source"] = source
    for step in ("detect", "rules", "outlier_counts", "pcor", "aiq", "unattributed"):
        spec["steps"].setdefault(step, {})["enabled"] = False
    # coco: a noisy output over every validated row's group (its accuracy bootstrap off: time only)
    spec["steps"]["coco"].update({"enabled": True, "epsilon_per_level": 0.5, "max_group_size": 60,
                                  "accuracy_replicates": 0})
    for key, value in steps.items():
        spec["steps"][key].update(value)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(spec))
    return path


# --------------------------------------------------------------------------- the same table from every source


def test_every_source_kind_ingests_the_same_text_table(sources, small_spec_path, tmp_path):
    from dpcore.ingest.raw import ingest, load_raw
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse

    hive = tmp_path / "hive"
    _typed(Path(sources["csv"]["path"])).to_parquet(hive, partition_cols=["origin"], index=False)
    kinds = {**sources, "parquet-hive": {"kind": "parquet", "path": str(hive), "partitioning": "hive"}}
    raws = {}
    for label, src in kinds.items():
        spec = load_spec(_spec(small_spec_path, tmp_path / label, src))
        wh = Warehouse(tmp_path / label / "w.duckdb")
        raws[label] = load_raw(wh, ingest(spec, wh, tmp_path / label))
    ref = raws["csv"]
    assert len(ref) == 3000 and set(ref.dtypes.astype(str)[1:]) == {"str"}
    for label in ("parquet", "duckdb", "postgres"):
        pd.testing.assert_frame_equal(raws[label], ref, check_dtype=True, obj=label)
    # hive: the partition column comes last and the rows folder by folder; the same rows, the same text
    h = raws["parquet-hive"]
    assert list(h.columns) == [c for c in ref.columns if c != "origin"] + ["origin"]
    key = ["flight_id"]
    pd.testing.assert_frame_equal(h.drop(columns="_row")[list(ref.columns[1:])].sort_values(key).reset_index(drop=True),
                                  ref.drop(columns="_row").sort_values(key).reset_index(drop=True))


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.unregistered
def test_every_source_kind_gives_the_same_validated_table_and_release(sources, small_spec_path, tmp_path,
                                                                     monkeypatch):
    from dpcore.storage.settings import Settings
    from dpcore.storage.warehouse import Warehouse
    from flows.release_pipeline import release_pipeline

    monkeypatch.setenv("DPR_TEST_NOISE_SEED", "31")
    monkeypatch.setenv("DPR_ALLOW_TEST_NOISE", "1")
    got = {}
    for label, src in sources.items():
        home = tmp_path / label / "home"
        monkeypatch.setenv("DPR_HOME", str(home))
        path = _spec(small_spec_path, tmp_path / label, src)
        register_spec(path)
        out = release_pipeline(spec_path=str(path))
        wh = Warehouse(Settings.from_env().warehouse)
        (table,), = wh.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated'")
        validated = wh.query_df(f'SELECT * FROM validated."{table}" ORDER BY _row')
        quarantine = wh.query_df("SELECT table_name FROM information_schema.tables WHERE table_schema = 'quarantine'")
        bundle = Path(out["bundle"])
        tables = {p.name: pd.read_csv(p).drop(columns=["public_ref", "reserved_at"], errors="ignore").to_csv()
                  for p in sorted((bundle / "tables").glob("*.csv"))}  # less the random refs and the clock
        manifest = json.loads((bundle / "manifest.json").read_text())
        values = [(r["step"], r.get("epsilon"), r.get("delta")) for r in manifest["releases"]]
        got[label] = (validated, len(quarantine), tables, values)
    ref = got["csv"]
    assert len(ref[0]) > 2000 and ref[2] and any("coco" in name for name in ref[2])
    for label in ("parquet", "duckdb", "postgres"):
        pd.testing.assert_frame_equal(got[label][0], ref[0], obj=f"validated table from {label}")
        assert got[label][1:] == ref[1:], label  # the same bundle tables (seeded noise), steps and costs


# --------------------------------------------------------------------------- credentials on every surface


def _dpr(*args: str, home: Path) -> str:
    """``dpr ARGS`` in a subprocess (the real console entry point); its stdout and stderr together."""
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "DPR_HOME": str(home), "PREFECT_API_URL": str(PREFECT_API_URL.value()), "COLUMNS": "200"}
    res = subprocess.run([str(Path(sys.executable).parent / "dpr"), *args], env=env, capture_output=True, text=True,
                         timeout=300)
    return f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"


def _files_holding(folder: Path, needles: list[bytes]) -> list[str]:
    """Files below ``folder`` whose bytes hold any of ``needles``."""
    hits = []
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{p}: {n!r}" for n in needles if n in data]
    return hits


def _warehouse_cells_holding(path: Path, needles: list[str]) -> list[str]:
    """Text cells of every table of a DuckDB warehouse (raw, ledger, internal, ...) that hold any needle."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        hits = []
        cols = con.execute("SELECT table_schema, table_name, column_name FROM information_schema.columns "
                           "WHERE data_type = 'VARCHAR'").fetchall()
        for schema, table, col in cols:
            for n in needles:
                found = con.execute(f'SELECT count(*) FROM "{schema}"."{table}" WHERE contains("{col}", ?)',
                                    [n]).fetchone()[0]
                if found:
                    hits.append(f"{schema}.{table}.{col}")
        return hits
    finally:
        con.close()


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.unregistered
def test_the_password_never_appears_on_any_surface(sources, pg_server, small_spec_path, tmp_path, monkeypatch,  # noqa: F811
                                                    capfd, caplog):
    import traceback

    from prefect.settings import get_current_settings

    from dpcore.ingest.sources import SourceError
    from flows.release_pipeline import release_pipeline

    home = tmp_path / "home"
    monkeypatch.setenv("DPR_HOME", str(home))
    gone = tmp_path / "no-server"
    monkeypatch.setenv("DPR_TEST_PG_WRONG", pg_server.uri("dpr_reader", WRONG))
    monkeypatch.setenv("DPR_TEST_PG_GONE", f"postgresql://dpr_reader:{TOKEN}@/postgres?host={gone}")
    good = _spec(small_spec_path, tmp_path, sources["postgres"], "good.yaml", coco={"enabled": False})
    register_spec(good)
    out = release_pipeline(spec_path=str(good))  # the token is the password the server checks (scram-sha-256)
    assert (Path(out["bundle"]) / "manifest.json").exists()
    said = []
    for var, fragment in (("DPR_TEST_PG_WRONG", "authentication failed"), ("DPR_TEST_PG_GONE", "could not be reached")):
        bad = _spec(small_spec_path, tmp_path, {**sources["postgres"], "dsn_env": var}, f"{var}.yaml",
                    coco={"enabled": False})
        with pytest.raises(SourceError, match=fragment) as ei:
            release_pipeline(spec_path=str(bad), release_id=f"r-{var.lower().replace('_', '-')}")
        assert "postgres source (table public.flights)" in str(ei.value) and var in str(ei.value)
        said += [str(ei.value), "".join(traceback.format_exception(ei.value)), repr(ei.value)]
    wrong = str(tmp_path / "DPR_TEST_PG_WRONG.yaml")
    said += [
        _dpr("spec", "check", wrong, "--data", home=home),
        _dpr("spec", "draft", "--source", "postgres", "--dsn-env", "DPR_TEST_PG_DSN", "--table", "public.flights",
             home=home),
        _dpr("spec", "draft", "--source", "postgres", "--dsn-env", "DPR_TEST_PG_WRONG", "--table", "public.flights",
             home=home),
        _dpr("plan", str(good), home=home),
        _dpr("budget", home=home),
        _dpr("validation", "show", "nycflights13", home=home),
    ]
    assert "# from the data" in said[-5] and "dsn_env: DPR_TEST_PG_DSN" in said[-5]  # the draft from PostgreSQL
    assert "authentication failed" in said[-4] and "exit 2" in said[-4]
    captured = capfd.readouterr()
    said += [captured.out, captured.err, caplog.text]
    secrets = [TOKEN, WRONG, os.environ["DPR_TEST_PG_DSN"], os.environ["DPR_TEST_PG_WRONG"],
               os.environ["DPR_TEST_PG_GONE"]]
    assert not [(i, s) for i, text in enumerate(said) for s in secrets if s in text]
    # Prefect's database (logs, states and their messages, artifacts, task and flow parameters) and its files
    db_url = str(get_current_settings().server.database.connection_url.get_secret_value()
                 if hasattr(get_current_settings().server.database.connection_url, "get_secret_value")
                 else get_current_settings().server.database.connection_url)
    db = Path(db_url.split("///", 1)[1])
    needles = [s.encode() for s in secrets]
    assert db.exists() and not _files_holding(db.parent, needles)
    assert not _files_holding(Path(os.environ["PREFECT_HOME"]), needles)
    # the home: bundles (manifest, report, tables), the owner's files; the warehouse's every text cell
    assert not _files_holding(home, needles)
    assert not _warehouse_cells_holding(home / "warehouse.duckdb", secrets)


# --------------------------------------------------------------------------- refusals, before any charge


@pytest.fixture
def refusal_cases(sources, pg_server, tmp_path, monkeypatch):  # noqa: F811
    """(label, dataset.source, fragments the message must hold) for every refusal of a typed source."""
    pg_server.execute("DROP TABLE IF EXISTS public.wages_secret", "CREATE TABLE public.wages_secret (id text)",
                      "DROP TABLE IF EXISTS public.flights_double",
                      "CREATE TABLE public.flights_double AS SELECT * FROM public.flights",
                      "ALTER TABLE public.flights_double ALTER COLUMN month TYPE double precision",
                      "GRANT SELECT ON public.flights_double TO dpr_reader",
                      "DROP TABLE IF EXISTS public.flights_array",  # issue 47.4: a nested type declared numeric
                      "CREATE TABLE public.flights_array AS SELECT * FROM public.flights",
                      "ALTER TABLE public.flights_array ALTER COLUMN distance TYPE integer[] USING ARRAY[distance]",
                      "GRANT SELECT ON public.flights_array TO dpr_reader",
                      "DROP SEQUENCE IF EXISTS public.dpr_seq", "CREATE SEQUENCE public.dpr_seq",
                      "GRANT USAGE ON public.dpr_seq TO dpr_reader")
    monkeypatch.setenv("DPR_TEST_PG_WRONG", pg_server.uri("dpr_reader", WRONG))
    monkeypatch.setenv("DPR_TEST_PG_GONE", f"postgresql://dpr_reader:{TOKEN}@/postgres?host={tmp_path}/none")
    monkeypatch.delenv("DPR_TEST_PG_UNSET", raising=False)
    pg = sources["postgres"]
    doubles = tmp_path / "doubles"
    doubles.mkdir()
    df = _typed(Path(sources["csv"]["path"]))
    df.assign(month=df["month"].astype(float)).to_parquet(doubles / "part-0.parquet", index=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    return [
        ("unreachable", {**pg, "dsn_env": "DPR_TEST_PG_GONE"}, ["postgres source", "could not be reached",
                                                             "DPR_TEST_PG_GONE"]),
        ("wrong password", {**pg, "dsn_env": "DPR_TEST_PG_WRONG"}, ["postgres source", "authentication failed"]),
        ("no variable", {**pg, "dsn_env": "DPR_TEST_PG_UNSET"}, ["postgres source", "DPR_TEST_PG_UNSET", "not set"]),
        ("no table", {**pg, "table": "public.nosuch"}, ["table public.nosuch", "does not exist"]),
        ("failing query", {**pg, "table": None, "query": "select * from public.flights where"},
         ["dataset.source.query", "syntax error"]),
        ("writing query", {**pg, "table": None, "query": "select *, nextval('public.dpr_seq') from public.flights"},
         ["dataset.source.query", "read-only"]),
        ("permission", {**pg, "table": "public.wages_secret"}, ["table public.wages_secret", "GRANT SELECT"]),
        ("double column", {**pg, "table": "public.flights_double"},
         ["table public.flights_double", "'month'", "double precision", "schema.categorical.month.domain"]),
        ("array column", {**pg, "table": "public.flights_array"},
         ["table public.flights_array", "'distance'", "int4[]", "nested type"]),
        ("parquet double", {"kind": "parquet", "path": str(doubles)}, ["parquet dataset", "'month'", "DOUBLE"]),
        ("duckdb table", {**sources["duckdb"], "table": "nosuch"}, ["duckdb source", "table nosuch", "no such table"]),
        ("parquet empty", {"kind": "parquet", "path": str(empty)}, ["parquet dataset", "no *.parquet file"]),
    ]


@pytest.mark.unregistered
def test_each_refusal_names_the_source_and_the_fix_before_any_charge(refusal_cases, sources, small_spec_path,
                                                                     tmp_path, dpr_home):
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.run.pipeline import ingest_stage
    from dpcore.storage.settings import Settings
    from dpcore.ingest.sources import SourceError
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse

    register_spec(_spec(small_spec_path, tmp_path / "good", sources["postgres"]))
    settings = Settings.from_env()
    for label, source, fragments in refusal_cases:
        spec = load_spec(_spec(small_spec_path, tmp_path / label.replace(" ", "_"),
                               {k: v for k, v in source.items() if v is not None}))
        with pytest.raises(SourceError) as ei:
            ingest_stage(spec, settings)
        text = str(ei.value)
        assert all(f in text for f in fragments), (label, text)
        assert not [v for v in (TOKEN, WRONG, os.environ["DPR_TEST_PG_DSN"], os.environ["DPR_TEST_PG_WRONG"],
                                os.environ["DPR_TEST_PG_GONE"]) if v in text], label
        # no driver or server exception chained to it (its text may hold the DSN or a value)
        assert ei.value.__cause__ is None and (ei.value.__context__ is None or ei.value.__suppress_context__), label
    ledger = PrivacyLedger(Warehouse(settings.warehouse))
    assert ledger.charges("nycflights13").empty
    assert not ledger.wh.query("SELECT * FROM ledger.reservations")


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.unregistered
def test_a_refused_source_stops_the_flow_before_its_first_charge(refusal_cases, sources, small_spec_path, tmp_path,
                                                                 dpr_home):
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.settings import Settings
    from dpcore.ingest.sources import SourceError
    from dpcore.storage.warehouse import Warehouse
    from flows.release_pipeline import release_pipeline

    register_spec(_spec(small_spec_path, tmp_path / "good", sources["postgres"]))
    cases = {label: (src, frags) for label, src, frags in refusal_cases}
    for label in ("wrong password", "double column"):
        src, frags = cases[label]
        path = _spec(small_spec_path, tmp_path / label.replace(" ", "_"), src)
        with pytest.raises(SourceError, match=frags[-1]):
            release_pipeline(spec_path=str(path))
    ledger = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    assert ledger.charges("nycflights13").empty
    assert not ledger.wh.query("SELECT * FROM ledger.reservations")


def test_a_connection_string_in_the_spec_is_refused_without_being_shown(tmp_path, small_spec_path):
    from dpcore.release.spec import SpecError, load_spec

    good = load_spec(_spec(small_spec_path, tmp_path, {"kind": "postgres", "dsn_env": "DPR_PG_DSN", "table": "t"}))
    assert good.dataset.source.dsn_env == "DPR_PG_DSN"
    for source, fix in (({"kind": "postgres", "dsn": f"postgresql://u:{TOKEN}@h/db", "table": "t"}, "never written"),
                        ({"kind": "postgres", "dsn_env": f"postgresql://u:{TOKEN}@h/db", "table": "t"}, "NAME of"),
                        ({"kind": "postgres", "dsn_env": "X", "password": TOKEN, "table": "t"}, "never written")):
        with pytest.raises(SpecError) as ei:
            load_spec(_spec(small_spec_path, tmp_path, source))
        text = str(ei.value)
        assert "dataset.source" in text and fix in text and "dsn_env" in text and TOKEN not in text, text


def test_a_series_period_is_a_bound_parameter_of_the_query(sources, pg_server, small_spec_path, tmp_path):  # noqa: F811
    """A series spec's postgres query gets {period_start} / {period_end} as bound parameters (a literal % kept)."""
    from dpcore.ingest.raw import read_input
    from dpcore.release.spec import SpecError, load_spec

    pg_server.execute("DROP TABLE IF EXISTS public.visits", "CREATE TABLE public.visits (flight_id text, day date)",
                      "INSERT INTO public.visits VALUES ('F1', '2013-01-31'), ('F2', '2013-02-01'), "
                      "('F3', '2013-02-28'), ('X4', '2013-02-15'), ('F5', '2013-03-01')",
                      "GRANT SELECT ON public.visits TO dpr_reader")
    query = "select * from public.visits where day >= {period_start} and day < {period_end} and flight_id like 'F%'"
    path = _spec(small_spec_path, tmp_path, {**sources["postgres"], "query": query})
    spec = yaml.safe_load(path.read_text())
    spec["dataset"]["source"].pop("table")
    spec.update(release_id="{dataset}-{period}", series={"period": "monthly", "first": "2013-01"})
    path.write_text(yaml.safe_dump(spec))
    for period, ids in (("2013-01", ["F1"]), ("2013-02", ["F2", "F3"]), ("2013-04", [])):
        df = read_input(load_spec(path, period=period), tmp_path)
        assert df["flight_id"].tolist() == ids, period
    spec["dataset"]["source"]["query"] = "select * from public.visits"  # no placeholder: every period the same rows
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match=r"dataset.source.query.*\{period\}"):
        load_spec(path, period="2013-01")


def test_the_postgres_spool_parts_are_private_removed_and_numbered_in_order(sources, small_spec_path, tmp_path,
                                                                          monkeypatch):
    """The COPY stream is spooled to 0600 part files in the warehouse's 0700 scratch folder, each loaded while
    the next is written and removed once loaded: with parts of 10 kB (about 14 parts for 3,000 rows) the raw
    table equals the CSV ingest's, ``_row`` included. A query failing part way through the stream is refused
    (nothing stored) and leaves no part behind."""
    import stat

    import dpcore.ingest.sources.postgres as pg
    from dpcore.ingest.raw import ingest
    from dpcore.storage.partitions import scratch_dir
    from dpcore.ingest.sources import SourceError
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse

    parts: list[tuple[Path, int, int]] = []
    opened = pg.private_open

    def watched(path, mode="w", **kwargs):
        fh = opened(path, mode, **kwargs)
        parts.append((Path(path), stat.S_IMODE(os.stat(path).st_mode), stat.S_IMODE(Path(path).parent.stat().st_mode)))
        return fh

    monkeypatch.setattr(pg, "private_open", watched)
    monkeypatch.setattr(pg, "PART_BYTES", 10_000)
    wh = Warehouse(tmp_path / "wh" / "warehouse.duckdb")
    tables = {}
    for label in ("csv", "postgres"):
        res = ingest(load_spec(_spec(small_spec_path, tmp_path / label, sources[label])), wh, tmp_path)
        tables[label] = wh.query_df(f"SELECT * FROM {res.qualified_table} ORDER BY _row")
    assert len(tables["csv"]) == 3000
    pd.testing.assert_frame_equal(tables["postgres"], tables["csv"])
    assert len(parts) >= 10, len(parts)
    assert {(m, fm) for _, m, fm in parts} == {(0o600, 0o700)}
    assert {p.parent for p, _, _ in parts} == {scratch_dir(wh)} and not any(p.exists() for p, _, _ in parts)

    cols = ("flight_id, carrier, origin, case when row_number() over () > 2000 then 1 / (month - month) else month end as month, "
            "dest, tailnum, distance, air_time, dep_delay, arr_delay")
    failing = {k: v for k, v in sources["postgres"].items() if k != "table"}
    failing["query"] = f"select {cols} from public.flights"
    parts.clear()
    with pytest.raises(SourceError, match=r"postgres source \(dataset.source.query\).*SQLSTATE 22012") as info:
        ingest(load_spec(_spec(small_spec_path, tmp_path / "bad", failing)), wh, tmp_path)
    assert "nothing was read or charged" in str(info.value)
    assert parts and not any(p.exists() for p, _, _ in parts)
    assert not list(scratch_dir(wh).glob("postgres-*"))


def test_a_spool_part_fits_duckdbs_memory_share(monkeypatch):
    """A part is at most a quarter of DuckDB's share of the cap (DuckDB's CSV reader may hold a small file whole:
    64 MB parts ran out of memory under DPR_MEMORY_LIMIT=256MB), at most 16 MB, at least 1 MB."""
    from dpcore.runtime.chunks import DUCKDB_SHARE
    from dpcore.ingest.sources.postgres import _part_bytes

    monkeypatch.setenv("DPR_MEMORY_LIMIT", "256MB")
    assert _part_bytes() == int(256_000_000 * DUCKDB_SHARE) // 4 < 16 << 20
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "8GB")
    assert _part_bytes() == 16 << 20
    monkeypatch.setattr("dpcore.runtime.chunks.DUCKDB_SHARE", 1 / 64)  # the 1 MB floor (the cap's own floor is 64 MiB)
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "64MiB")
    assert _part_bytes() == 1 << 20


def test_the_csv_readers_buffer_fits_duckdbs_memory_share(monkeypatch):
    """DuckDB's default CSV buffer (16 x max_line_size = 128 MiB) exceeded DuckDB's whole memory_limit under
    DPR_MEMORY_LIMIT=256MB; the buffer is an eighth of DuckDB's share, between 1 and 16 longest rows."""
    from dpcore.runtime.chunks import DUCKDB_SHARE
    from dpcore.ingest.raw import MAX_ROW_BYTES, csv_buffer_bytes

    monkeypatch.setenv("DPR_MEMORY_LIMIT", "256MB")
    assert csv_buffer_bytes() == MAX_ROW_BYTES  # an eighth of 64 MB is below one longest row
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "2GiB")
    assert csv_buffer_bytes() == int(2 * 2**30 * DUCKDB_SHARE) // 8 == 64 * 2**20
    monkeypatch.setenv("DPR_MEMORY_LIMIT", "64GB")
    assert csv_buffer_bytes() == 16 * MAX_ROW_BYTES
