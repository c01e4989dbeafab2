"""Any category text (issue 20, item 3): values with commas, braces, ``=``, quotes, pipes, unicode and
leading/trailing spaces go through every step unchanged -- ingest, validation, coco levels, PCOR
contexts (render and parse back), the report's tables and the bundle's CSV/Parquet outputs.

The unit tests of each piece are next to it (tests/test_pcor_contexts.py, tests/test_validation.py,
tests/test_coco.py); here are the bundle writer, the Markdown cells and one real release run."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.publish.bundle import _write_table
from dpcore.storage.quoting import md_cell, needs_quotes, quote, read_quoted

STATUS = ["Employed", "Unemployed, Laid Off", " lead space", "trail space ", 'quote"d']
CITY = ["Washington, D.C.", "a=b", "{brace}", "pipe|bar", "Zürich ∧ ∈"]
REGION = {"Washington, D.C.": "North/East", "a=b": "North", "{brace}": "North", "pipe|bar": " South",
          "Zürich ∧ ∈": "Europe"}
AWKWARD = [*STATUS[1:], *CITY, "line\nbreak", "cr\ronly", "crlf\r\nend", "tab\tin", "", "NA", "any", "∅", "=1+2",
           "\u00a0nbsp", "back\\slash", "😀"]


# ---------------------------------------------------------------- pieces


def test_bundle_tables_round_trip_the_exact_text(tmp_path: Path):
    df = pd.DataFrame({"text": AWKWARD, "n": np.arange(len(AWKWARD)), "x": np.linspace(0, 1, len(AWKWARD))})
    df["maybe"] = pd.Series([None if i % 3 == 0 else v for i, v in enumerate(AWKWARD)], dtype=object)
    files = _write_table(df, tmp_path / "tables", "t")
    assert files == ["tables/t.csv", "tables/t.parquet"]
    csv_back = pd.read_csv(tmp_path / "tables" / "t.csv", dtype={"text": str}, keep_default_na=False)
    assert csv_back["text"].tolist() == AWKWARD  # a lone carriage return included (csv does not quote it alone)
    assert csv_back["n"].tolist() == df["n"].tolist() and np.allclose(csv_back["x"], df["x"])
    pq_back = pd.read_parquet(tmp_path / "tables" / "t.parquet")
    assert pq_back["text"].tolist() == AWKWARD
    assert [None if pd.isna(v) else v for v in pq_back["maybe"]] == df["maybe"].tolist()
    # without a carriage return the CSV keeps pandas' usual minimal quoting (unchanged files for plain tables)
    _write_table(df.iloc[:8], tmp_path / "tables", "plain")
    text = (tmp_path / "tables" / "plain.csv").read_text(encoding="utf-8")
    assert text.startswith("text,n,x,maybe\n") and '"Unemployed, Laid Off"' in text and "\n lead space," in text
    assert pd.read_csv(tmp_path / "tables" / "plain.csv", dtype={"text": str}, keep_default_na=False)["text"].tolist() \
        == AWKWARD[:8]


def _md_cells(line: str) -> list[str]:
    """Cells of a GFM table row: split on pipes not escaped by a backslash."""
    assert line.startswith("|") and line.endswith("|"), line
    return [c.strip() for c in re.split(r"(?<!\\)\|", line[1:-1])]


def _md_unescape(cell: str) -> str:
    return (re.sub(r"\\([\\|`*_\[\]~$])", r"\1", cell).replace("<br>", "\n").replace("&lt;", "<")
            .replace("&amp;", "&"))


@pytest.mark.parametrize("value", [*AWKWARD, "a\\|b", "x | y", "*bold* _it_ `code` [l](u) ~~s~~ $m$", "<b>&amp;"])
def test_md_cell_keeps_one_cell_per_value(value):
    cell = md_cell(value)
    assert "\n" not in cell and "\r" not in cell
    row = f"| {cell} | next |"
    cells = _md_cells(row)
    assert len(cells) == 2 and cells[1] == "next"
    assert _md_unescape(cells[0]) == value.replace("\r\n", "\n").replace("\r", "\n").strip()


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(alphabet=",{}/=:", max_size=3))
def test_quote_reads_back_and_is_visible(text, specials):
    q = quote(text)
    assert q.isprintable() and read_quoted(q + " tail", 0) == (text, len(q))
    assert json.loads(q) == text
    if not needs_quotes(text, specials):
        assert text and text == text.strip() and not any(c in text for c in specials)


# ---------------------------------------------------------------- one release run


def _dataset() -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """200 valid rows (8 per status x city cell) + 3 near-miss rows, the public groups table, the explained ids.

    Hours are ~40 everywhere except in two cells where they are ~10; one record of each of those cells works
    40 hours: an outlier in its own cell only (adding any other cell brings rows of ~40), so its one valid
    context is its own cell and the release is known in advance.
    """
    households = [f'hh {i}, "{CITY[i % 5]}"' for i in range(10)]
    low = {("Unemployed, Laid Off", "pipe|bar"), (" lead space", "Washington, D.C.")}
    rows, explained = [], []
    for s in STATUS:
        for c in CITY:
            for k in range(8):
                hours = (9 + k % 3) if (s, c) in low else (39 + k % 3)
                rid = f"r{len(rows) + 1:03d}"
                if (s, c) in low and k == 7:
                    hours = 40
                    explained.append(rid)
                hh = households[CITY.index(c) + 5 * (k % 2)]
                rows.append({"id": rid, "status": s, "city": c, "household": hh, "hours": str(hours)})
    # out of the public domain by one space, one comma or one character: quarantined as they are
    for j, (s, c) in enumerate([("Unemployed,Laid Off", "a=b"), ("lead space", "a=b"), ("Employed", "Washington, D.C. ")]):
        rows.append({"id": f"q{j}", "status": s, "city": c, "household": households[1], "hours": "40"})
    groups = pd.DataFrame({"household": households, "region": [REGION[CITY[i % 5]] for i in range(10)],
                           "city": [CITY[i % 5] for i in range(10)]})
    return pd.DataFrame(rows), groups, explained


def _spec(tmp_path: Path, data: pd.DataFrame, groups: pd.DataFrame, explained: list[str]) -> Path:
    data.to_csv(tmp_path / "people.csv", index=False)
    groups.to_csv(tmp_path / "households.csv", index=False)
    spec = {
        "release_id": "awkward-r1",
        "dataset": {"name": "awkward", "source": {"kind": "csv", "path": "people.csv"}, "record_id": "id",
                    "roster": {"ids": explained}},
        "schema": {
            "categorical": {"status": {"domain": STATUS}, "city": {"domain": CITY},
                            "household": {"domain_from": {"file": "households.csv", "column": "household"}}},
            "numeric": {"hours": {"min": 0, "max": 100, "integer": True}},
        },
        "budget": {"epsilon": 20.0},
        "steps": {
            "validation": {"max_rejected_fraction": 0.5},
            "record_counts": {"epsilon": 1.0},
            "coco": {"enabled": True, "group_column": "household", "groups_file": "households.csv",
                     "levels": ["region", "city"], "max_group_size": 30, "epsilon_per_level": 1.0,
                     "accuracy_replicates": 5},
            "pcor": {"enabled": True, "attributes": ["status", "city"], "metric": "hours", "verifier": "grubbs",
                     "sampler": "bfs", "n_samples": 10, "epsilon": 1.0, "record_ids": explained},
        },
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.usefixtures("prefect_harness")
def test_release_with_awkward_category_text(dpr_home, tmp_path):
    from dpcore.ingest.raw import load_raw
    from dpcore.mechanisms.coco import Hierarchy
    from dpcore.mechanisms.pcor.contexts import ContextSpace
    from dpcore.storage.settings import Settings
    from dpcore.release.spec import load_spec
    from dpcore.storage.warehouse import Warehouse
    from flows.release_pipeline import release_pipeline

    data, groups, explained = _dataset()
    spec_path = _spec(tmp_path, data, groups, explained)
    from owner_registration import register_spec

    register_spec(spec_path)  # the data owner registers the dataset name before any run
    spec = load_spec(spec_path)
    assert spec.public_schema.categorical["household"].domain == groups["household"].tolist()
    out = release_pipeline(spec_path=str(spec_path))
    bundle = Path(out["bundle"])

    # ingest and validation: the raw cells are kept exactly, the near misses are quarantined, nothing is fixed
    wh = Warehouse(Settings.from_env().warehouse)
    (table,) = [r[0] for r in wh.query("SELECT table_name FROM raw.ingests WHERE dataset = 'awkward'")]
    raw = wh.query_df(f'SELECT * FROM raw."{table}" ORDER BY _row')
    assert raw[["id", "status", "city", "household"]].values.tolist() == \
        data[["id", "status", "city", "household"]].values.tolist()
    (vtable,) = [r[0] for r in wh.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'validated' AND table_name LIKE 'awkward%'")]
    valid = wh.query_df(f'SELECT * FROM validated."{vtable}" ORDER BY _row')
    assert valid[["status", "city", "household"]].values.tolist() == \
        data[["status", "city", "household"]].iloc[:200].values.tolist()
    q = wh.query_df(f'SELECT _row, rule, "column", cells FROM quarantine."{vtable}" ORDER BY _row')
    assert list(zip(q["_row"], q["rule"], q["column"])) == [(201, "in_domain", "status"), (202, "in_domain", "status"),
                                                            (203, "in_domain", "city")]
    assert [json.loads(c)["status"] for c in q["cells"]] == ["Unemployed,Laid Off", "lead space", "Employed"]
    assert json.loads(q["cells"].iloc[2])["city"] == "Washington, D.C. "

    # PCOR: the released contexts parse back with the step's ContextSpace, from the CSV and the Parquet table
    space = ContextSpace.from_domains(["status", "city"], [STATUS, CITY])
    csv_t = pd.read_csv(bundle / "tables" / "pcor__explanations.csv", dtype=str, keep_default_na=False)
    pq_t = pd.read_parquet(bundle / "tables" / "pcor__explanations.parquet")
    assert csv_t["context"].tolist() == pq_t["context"].tolist()
    assert csv_t["record_id"].tolist() == explained and (csv_t["status"] == "released").all()
    for rid, ctx, bits in zip(csv_t["record_id"], csv_t["context"], csv_t["bits"]):
        assert (space.parse(ctx) == space.from_bitstring(bits)).all(), ctx
        assert space.render(space.parse(ctx)) == ctx
    # each record's only valid context is its own cell (see _dataset)
    assert csv_t["context"].tolist() == ['status = "Unemployed, Laid Off" ∧ city = pipe|bar',
                                         'status = " lead space" ∧ city = "Washington, D.C."']

    # coco: node ids built from the awkward levels, unambiguous, and every leaf is a (region, city) of the groups
    hist = pd.read_csv(bundle / "tables" / "coco__histograms.csv", dtype={"node": str}, keep_default_na=False)
    assert hist["node"].tolist() == pd.read_parquet(bundle / "tables" / "coco__histograms.parquet")["node"].tolist()
    # (every node has groups, so each has a non-zero cell in the table)
    leaves = {tuple(Hierarchy.split_node_id(n, ["region", "city"])) for n in hist.loc[hist["level"] == 2, "node"]}
    assert leaves == set(map(tuple, groups[["region", "city"]].values.tolist()))
    tops = {tuple(Hierarchy.split_node_id(n, ["region", "city"])) for n in hist.loc[hist["level"] == 1, "node"]}
    assert tops == {(r,) for r in groups["region"]}
    assert {'region="North/East"', 'region=" South"/city=pipe|bar', "region=Europe/city=Zürich ∧ ∈"} <= set(hist["node"])
    for level in range(3):  # every level's histograms sum to the public number of groups
        assert hist.loc[hist["level"] == level, "groups"].sum() == len(groups)

    # the report: the PCOR table keeps one cell per column, the cells read back as the released contexts,
    # and every linked plot exists
    report = (bundle / "report.md").read_text(encoding="utf-8")
    start = report.index("| record | context | status |")
    rows = [ln for ln in report[start:].splitlines()[2:] if ln.startswith("|")][: len(explained)]
    assert [_md_cells(r) for r in rows] == [[rid, md_cell(c), "released"] for rid, c in zip(explained, csv_t["context"])]
    assert [_md_unescape(_md_cells(r)[1]) for r in rows] == csv_t["context"].tolist()
    assert "pipe\\|bar" in report
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert any(link.startswith("coco_") for link in links)
    for link in links:
        assert (bundle / link).is_file(), link
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert {r["step"] for r in manifest["releases"]} >= {"record_counts", "pcor", "coco_level0"}
