"""The outlier-counts step (seed 002, Scenario 2) wired into flows."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from prefect.exceptions import ParameterTypeError

from dpcore.mechanisms.accuracy import interval_text
from dpcore.budget.ledger import PrivacyLedger
from dpcore.storage.settings import Settings
from dpcore.steps.common import StepInputError
from dpcore.storage.warehouse import Warehouse

pytestmark = pytest.mark.usefixtures("prefect_harness")
STEPS = ("outlier_subspaces", "outlier_count")


def _without_detector(spec: dict) -> None:
    """The detector and its owner-only rules off: the outlier-counts step does not use them (its subspaces and
    counts are over the validated table) and they charge nothing; off, each release is cheaper."""
    spec["steps"]["detect"]["enabled"] = False
    spec["steps"]["rules"]["enabled"] = False


def _charges():
    ch = PrivacyLedger(Warehouse(Settings.from_env().warehouse)).charges("nycflights13")
    return ch[ch["step"].isin(STEPS)]


def test_pipeline_selects_h_subspaces_and_charges_each_release(dpr_home, small_spec_path, tmp_path):
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    _without_detector(spec)
    spec["steps"]["outlier_counts"] = {"enabled": True, "k": 3, "r": 0.02, "h": 2, "subspace_dim": 1,
                                       "epsilon_select": 0.4, "epsilon_count": 0.3, "delta_count": 1e-6,
                                       "method": "smooth"}
    path = tmp_path / "oc.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = release_pipeline(spec_path=str(path))
    ch = _charges()
    assert list(ch["step"]) == ["outlier_subspaces", "outlier_count", "outlier_count"]
    assert (ch["neighbour"] == "replace-one").all() and (ch["notion"] == "dp").all()
    assert ch["epsilon"].round(12).tolist() == [0.4, 0.3, 0.3]
    # replace-one mechanisms on the demo's replace-one cap: charged as stated
    assert set(ch["neighbour"]) == {"replace-one"} and (ch["epsilon"] == ch["stated_epsilon"]).all()
    assert ch["delta"].round(15).tolist() == [0.0, 1e-6, 1e-6]
    t = pd.read_csv(Path(out["bundle"]) / "tables" / "outlier_counts__counts.csv")
    assert t["rank"].tolist() == [1, 2] and t["subspace"].nunique() == 2
    assert set(t["subspace"]) <= {"distance", "air_time", "dep_delay", "arr_delay"}
    diag = Warehouse(Settings.from_env().warehouse).query_df("SELECT * FROM internal.outlier_count_diagnostics")
    assert len(diag) == 2 and (diag["sigma"] > 0).all()
    public = "".join(p.read_text(errors="ignore") for p in Path(out["bundle"]).rglob("*")
                     if p.suffix in {".csv", ".md", ".json"} and "owner" not in p.parts)
    assert "true_count" not in public and "sigma" not in public

    # same release id: stored, nothing new
    release_pipeline(spec_path=str(path))
    assert len(_charges()) == 3


def test_operator_flow_and_parameter_errors_before_any_charge(dpr_home, small_spec_path):
    from flows.outlier_counts import outlier_counts

    rows = outlier_counts(spec_path=str(small_spec_path), h=1, r=0.02, epsilon_select=0.2, epsilon_count=0.2)
    assert len(rows) == 1 and len(_charges()) == 2
    assert outlier_counts(spec_path=str(small_spec_path), h=1, r=0.02, epsilon_select=0.2, epsilon_count=0.2) == rows
    assert len(_charges()) == 2
    for kwargs, exc, fragment in [
        ({"k": 0}, ParameterTypeError, "k"),
        ({"r": 0.0}, ParameterTypeError, "r"),
        ({"delta_count": 1.0}, ParameterTypeError, "delta_count"),
        ({"h": 5}, StepInputError, "h"),
        ({"subspace_dim": 5}, StepInputError, "subspace_dim"),
        ({"attributes": ["carrier"]}, Exception, "not numeric"),
    ]:
        with pytest.raises(exc, match=fragment):
            outlier_counts(spec_path=str(small_spec_path), **kwargs)
        assert len(_charges()) == 2


def test_count_epsilon_must_be_below_one_for_the_gaussian_methods(dpr_home, small_spec_path):
    """Theorems 1-2 of seed 002 are stated for epsilon < 1: a Gaussian method with 1.0 is refused before any
    charge, naming the key."""
    from flows.outlier_counts import outlier_counts

    with pytest.raises(Exception, match="epsilon_count"):
        outlier_counts(spec_path=str(small_spec_path), method="smooth", epsilon_select=0.5, epsilon_count=1.0)
    assert _charges().empty


def test_operator_flow_defaults_to_the_spec(dpr_home, small_spec_path, tmp_path):
    """Issue 16: parameters left empty take the spec's values (here epsilon_total 1.5 and method auto, as in
    the demo): the charges are the spec's split, pure DP; an explicit pair replaces the spec's total."""
    from flows.outlier_counts import outlier_counts

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["outlier_counts"].update({"r": 0.02, "epsilon_total": 1.5, "method": "auto"})
    path = tmp_path / "oc_defaults.yaml"
    path.write_text(yaml.safe_dump(spec))
    rows = outlier_counts(spec_path=str(path))
    ch = _charges()
    assert ch["epsilon"].round(12).tolist() == [0.345, 0.5775, 0.5775] and (ch["delta"] == 0).all()
    assert len(rows) == 2 and all(float(r["noisy_count"]).is_integer() for r in rows)
    outlier_counts(spec_path=str(path), release_id="oc-pair", h=1, epsilon_select=0.25, epsilon_count=0.75)
    assert _charges()["epsilon"].round(12).tolist()[3:] == [0.25, 0.75]


def test_epsilon_total_with_auto_charges_the_total_as_pure_dp_and_publishes_the_interval(dpr_home, small_spec_path,
                                                                                          tmp_path):
    """Issue 16: one epsilon_total split by the public rule (m = 4, h = 2: 23% to the selection), method auto ->
    the global discrete Laplace at these public parameters: integer counts, delta 0 on every charge, the
    charges summing exactly to the total, and the 95% half-width (public) in the table and the report."""
    from fractions import Fraction

    from dpcore.mechanisms.outlier_count import OutlierCountMechanism
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    _without_detector(spec)
    spec["steps"]["outlier_counts"] = {"enabled": True, "k": 3, "r": 0.02, "h": 2, "subspace_dim": 1,
                                       "epsilon_total": 1.5, "method": "auto"}
    path = tmp_path / "oc_total.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = release_pipeline(spec_path=str(path))
    ch = _charges()
    assert list(ch["step"]) == ["outlier_subspaces", "outlier_count", "outlier_count"]
    assert ch["epsilon"].round(12).tolist() == [0.345, 0.5775, 0.5775] and ch["epsilon"].sum() == pytest.approx(1.5)
    assert (ch["delta"] == 0).all() and (ch["notion"] == "dp").all() and (ch["neighbour"] == "replace-one").all()
    t = pd.read_csv(Path(out["bundle"]) / "tables" / "outlier_counts__counts.csv")
    assert list(t.columns) == ["rank", "subspace", "noisy_count", "ci_level", "ci_half_width"]
    hw = OutlierCountMechanism(3, 0.02, Fraction(231, 400), 0, method="global_laplace").ci_half_width(1)
    assert (t["ci_level"] == 0.95).all() and (t["ci_half_width"] == hw).all() and hw == 36
    assert (t["noisy_count"] >= 0).all() and (t["noisy_count"] == t["noisy_count"].round()).all()
    report = (Path(out["bundle"]) / "report.md").read_text()
    for n in t["noisy_count"]:
        assert f"| {interval_text(int(n), hw)} |" in report  # clipped at 0 (issue 32 section 4)
    assert "where K_1 = 2 is the kissing number in 1 dimension" in report  # K_d defined where used
    assert "discrete Laplace" in report and "epsilon_total = 1.5" in report
    public = "".join(p.read_text(errors="ignore") for p in Path(out["bundle"]).rglob("*")
                     if p.suffix in {".csv", ".md", ".json"} and "owner" not in p.parts)
    assert "true_count" not in public and "sigma" not in public


def test_epsilon_total_and_an_explicit_epsilon_are_refused_before_any_charge(dpr_home, small_spec_path, tmp_path):
    from dpcore.release.spec import SpecError, load_spec

    spec = yaml.safe_load(small_spec_path.read_text())
    spec["steps"]["outlier_counts"].update({"enabled": True, "epsilon_total": 1.5, "epsilon_count": 0.5})
    path = tmp_path / "oc_both.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="either epsilon_total"):
        load_spec(path)


def test_smooth_student_t_charges_pure_dp_and_publishes_integer_counts_with_the_public_interval(dpr_home,
                                                                                               small_spec_path,
                                                                                               tmp_path):
    """Issue 16 part 2: method smooth_student_t through the whole pipeline: every count charge is (epsilon, 0)
    whatever delta_count says, the counts are integers, the 95% half-width is the public one (S = G), and
    neither the true count nor the data-dependent scale reaches the bundle."""
    from dpcore.mechanisms.outlier_count import OutlierCountMechanism
    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    _without_detector(spec)
    spec["steps"]["outlier_counts"] = {"enabled": True, "k": 3, "r": 0.02, "h": 2, "subspace_dim": 1,
                                       "epsilon_select": 0.4, "epsilon_count": 1.5, "delta_count": 1e-6,
                                       "method": "smooth_student_t"}
    path = tmp_path / "oc_t.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = release_pipeline(spec_path=str(path))
    ch = _charges()
    assert list(ch["step"]) == ["outlier_subspaces", "outlier_count", "outlier_count"]
    assert ch["epsilon"].round(12).tolist() == [0.4, 1.5, 1.5] and (ch["delta"] == 0).all()
    t = pd.read_csv(Path(out["bundle"]) / "tables" / "outlier_counts__counts.csv")
    hw = OutlierCountMechanism(3, 0.02, 1.5, 0, method="smooth_student_t").ci_half_width(1)
    assert (t["ci_half_width"] == hw).all()
    assert (t["noisy_count"] >= 0).all() and (t["noisy_count"] == t["noisy_count"].round()).all()
    report = (Path(out["bundle"]) / "report.md").read_text()
    assert "Student's T" in report
    public = "".join(p.read_text(errors="ignore") for p in Path(out["bundle"]).rglob("*")
                     if p.suffix in {".csv", ".md", ".json"} and "owner" not in p.parts)
    assert "true_count" not in public and "sigma" not in public


def _upper_half_width(line: str) -> float:
    """``high - count`` of a report row ``| rank | subspace | count (95%: low to high...) |``: the published
    half-width as the reader sees it (the low end may be clipped at 0, the high end never is)."""
    m = re.search(r"\| ([\d,.]+) \(\d+%: [\d,.]+ to ([\d,.]+)", line)
    assert m, line
    from decimal import Decimal

    value, high = (Decimal(x.replace(",", "")) for x in m.groups())  # exact: 752.3 - 12.3 is 740, not 739.99…
    return float(high - value)


@pytest.mark.parametrize("method", ["smooth", "smooth_student_t"])
def test_published_accuracy_of_a_smooth_release_is_identical_on_neighbouring_inputs(dpr_home, small_spec_path,
                                                                                   tmp_path, method):
    """Issue 16: the smooth methods' noise scale S(X)/alpha is a function of the data; their published accuracy
    (table column, manifest statement, report) must not be. D and D + one added flight (a new id, a
    dep_delay of 110 minutes, where the first 300 delays are sparse): the internal noise scales differ, every
    published accuracy figure and statement is the same."""
    import json

    from flows.release_pipeline import release_pipeline

    spec = yaml.safe_load(small_spec_path.read_text())
    _without_detector(spec)
    rows = Path(spec["dataset"]["source"]["path"]).read_text().splitlines()[:301]  # 300 flights: S(X) < G
    src = tmp_path / "flights_300.csv"
    src.write_text("\n".join(rows) + "\n")
    header = rows[0].split(",")
    extra = rows[1].split(",")
    extra[header.index("flight_id")] = "F999990"
    extra[header.index("dep_delay")] = "110"  # near the sparse part of the first 300 delays: S(X) moves
    neighbour = tmp_path / "flights_plus_one.csv"
    neighbour.write_text("\n".join([*rows, ",".join(extra)]) + "\n")
    spec["dataset"]["roster"]["ids"].append("F999990")
    spec["steps"]["outlier_counts"] = {"enabled": True, "k": 3, "r": 0.02, "h": 1, "candidates": [["dep_delay"]],
                                       "epsilon_select": 0.2, "epsilon_count": 0.5, "delta_count": 1e-6,
                                       "method": method}
    published, sigmas = [], []
    for i, csv in enumerate([src, neighbour]):
        spec["dataset"]["source"]["path"] = str(csv)
        path = tmp_path / f"n{i}.yaml"
        path.write_text(yaml.safe_dump(spec))
        out = release_pipeline(spec_path=str(path), release_id=f"nb-{method}-{i}")
        bundle = Path(out["bundle"])
        t = pd.read_csv(bundle / "tables" / "outlier_counts__counts.csv")
        (prot,) = [p for p in json.loads((bundle / "manifest.json").read_text())["protection"]
                   if p["step"] == "outlier_counts"]
        report = (bundle / "report.md").read_text()
        published.append((t[["ci_level", "ci_half_width"]].to_dict("records"), prot["accuracy"],
                          [_upper_half_width(line) for line in report.splitlines() if line.startswith("| 1 | dep_delay")]))
        sigmas.append(Warehouse(Settings.from_env().warehouse).query(
            "SELECT sigma FROM internal.outlier_count_diagnostics ORDER BY rowid DESC LIMIT 1")[0][0])
    assert published[0] == published[1] and published[0][2]
    assert sigmas[0] != sigmas[1], sigmas  # the data-dependent scale really moved
