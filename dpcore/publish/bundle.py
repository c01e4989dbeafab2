"""The release bundle: one folder per (dataset, release id).

Layout::

    <bundles>/<dataset>/<release_id>/
        manifest.json            what was released, mechanisms, notions, epsilon/delta spent and left,
                                 per step what is and is not protected, budget identity, the random
                                 input id, the owner-keyed spec fingerprint, code version, time
        report.md                human report (links the PNG plots)
        budget.png               budget use
        tables/<name>.csv|.parquet   the private tables (noisy outputs) and the ledger's charges
        owner/validation_summary.json  data-quality summary for the data owner (counts, rules, row
                                 numbers: NOT privacy-protected, never publish this folder)
        owner/<step>__<name>.csv  a step's owner-only tables, e.g. the answers about the records the
                                 non-private detector chose (unless the spec publishes them, issue 28)

``owner/`` is created 0700 and its files 0600 whatever the umask (DESIGN.md
rule 11); the public part gets the owner's usual modes. The manifest's
``ledger`` section names the ledger that charged the release and its exact
totals so far (:mod:`dpcore.budget.ledger_home`: a lost warehouse never resets the budget).

Only privacy-protected outputs and data-independent metadata go into the
public part (DESIGN.md rule 6). No identifier derived from the data is
published (rule 7): the input is named by its random ``ingest_id``, each charge
by its random ``public_ref`` (never the idempotency key), and the spec by an
HMAC under the data owner's key. The bundle is written into a temporary folder
and renamed into place, so a crash never leaves a half-written bundle.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dpcore import __version__
from .background_plots import wait_for as wait_for_pictures
from dpcore.budget.amounts import NOTION_LABELS, PrivacyCost
from dpcore.budget.ledger import LedgerError, PrivacyLedger
from dpcore.budget.ledger_home import manifest_section
from dpcore.storage.lineage import owner_hmac
from .plots import budget_plot
from dpcore.storage.private_files import private_dir, private_open, public_mkdir, publish
from dpcore.release.spec import ReleaseSpec
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

#: Ledger columns that are public (data-independent) and may be published.
#: ``epsilon``/``delta`` are charged against the budget (in its neighbour relation), ``stated_*`` are the
#: mechanism's own cost under its relation ``neighbour``.
PUBLIC_CHARGE_COLUMNS = [
    "public_ref", "release_id", "step", "mechanism", "notion", "neighbour", "stated_epsilon", "stated_delta", "epsilon", "delta",
    "status", "publishable", "reserved_at",
]


#: What no output of any release protects (DESIGN.md rule 9), stated in every manifest and report.
ALWAYS_NOT_PROTECTED = [
    "The dataset's header (its column names) and whether the input has any row at all: a missing, extra or "
    "reserved column, or an input with no row, stops the run before any charge.",
    "Budget identity: which budget this dataset name charges and which datasets the data owner keeps separate, "
    "as the owner registered them (`dpr dataset add`, deciding on the record-id overlap only the owner saw); "
    "the datasets sharing a budget and the owner's separations are named in the report. Nothing a run computes "
    "from its record ids shows.",
    "Neighbour relations are stated on raw input rows: a raw row replaced so that it fails validation is a "
    "removal from the validated table, so every step's guarantee is stated for add/remove of validated rows "
    "(or converted to it by the ledger).",
    "Timing: how long a run, a step or a task takes (Prefect records durations) depends on the data's size and "
    "the parameters; nothing pads a whole run. No step shortens its work because an asked or chosen record is "
    "absent (a PCOR search or an AIQ count runs on a stand-in record) or because the input is unchanged, and "
    "PCOR's searches do the same work for every record; what timing can still tell is listed in the project's "
    "privacy documentation (docs/privacy.md, \"Always not protected\").",
    "Whether the warehouse's disk has room for the release: a release whose estimated disk need (a fixed factor "
    "times the input's size in bytes) exceeds the free space stops before its first charge, naming no figure; "
    "this depends on the input's size only within one row's bytes of the free-space threshold.",
    "Failures inside a private computation: a step that fails on the data after its charge (e.g. the outlier "
    "count's exact search reaching its node limit, or too few validated rows for a detector template) fails "
    "the run with a generic message; that it failed is a fact about the data no charge covers.",
]


def protection_of(out: "StepOutput", charges: pd.DataFrame) -> dict[str, Any]:
    """Per step: its notions, neighbour relations, what it charged, and what it does not protect (rule 9)."""
    rows = charges[charges["key"].isin(out.keys)]
    return {
        "step": out.step,
        "notions": sorted(set(rows["notion"])),
        "neighbour": sorted(set(rows["neighbour"])),
        "charged": {"epsilon": float(rows["epsilon"].sum()), "delta": float(rows["delta"].sum())},
        "charges": [str(r) for r in rows["public_ref"]],
        "not_protected": list(out.not_protected),
        "accuracy": dict(out.accuracy),
    }


def code_version() -> str:
    """Package version plus the git commit of the checkout when available."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+{sha}" if sha else __version__


@dataclass
class StepOutput:
    """What a private step contributes to the bundle.

    Parameters
    ----------
    step : str
        Step name (matches the ledger's ``step``).
    tables : dict of str to DataFrame
        Released (privacy-protected) tables.
    markdown : str
        A report section (only private or public quantities).
    images : list of Path
        PNG files to copy into the bundle and link from the report.
    keys : list of str
        Ledger idempotency keys of the charges behind these outputs (they stay
        inside the ledger; the bundle publishes each charge's random public ref).
    not_protected : list of str
        DESIGN.md rule 9: what this output's guarantee does NOT cover, in plain
        words (e.g. the queried record's own value and presence; the choice of
        detector-chosen records). Printed next to the output in the report and
        listed per step in the manifest.
    accuracy : dict of str to dict
        Issue 16: the public accuracy statement of each released number,
        keyed ``"<table>"`` or ``"<table>.<cell or column>"``
        (:class:`dpcore.mechanisms.accuracy.Accuracy` as a dict: half_width, level, kind,
        statement). Functions of public parameters only. Listed per step in
        the manifest; the tables carry them as columns and the report next
        to each number.
    owner_tables : dict of str to DataFrame
        Owner-only tables of the step (e.g. the answers about records the
        non-private detector chose, issue 28), written as
        ``owner/<step>__<name>.csv`` and never to ``tables/``, the report or
        an artifact. Which names a step gives must depend on the spec alone
        (the manifest lists the files); their rows are the owner's.
    """

    step: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    markdown: str = ""
    images: list[Path] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    not_protected: list[str] = field(default_factory=list)
    accuracy: dict[str, dict[str, Any]] = field(default_factory=dict)
    owner_tables: dict[str, pd.DataFrame] = field(default_factory=dict)


@dataclass(frozen=True)
class BundleResult:
    """Where the bundle was written and its manifest."""

    path: Path
    manifest: dict[str, Any]


def _has_carriage_return(df: pd.DataFrame) -> bool:
    for col in df.columns:
        s = df[col]
        if s.dtype == object or pd.api.types.is_string_dtype(s.dtype):
            if s.astype("string").str.contains("\r", regex=False).fillna(False).any():
                return True
    return False


#: What the public report says about each owner-only table (a fixed text: it depends on the spec alone).
OWNER_NOTES = {
    "outlier_rules": (
        "## Outlier rules (data owner only)\n\n"
        "Rules that explain the detector's outliers with unit-respecting combinations of attributes (seed 004, "
        "\"Outlier Rules Discovery\") are in `owner/outlier_rules.csv`. They are exact functions of the private "
        "data and of the non-private detector: not privacy-protected, never part of the release. Do not publish "
        "the `owner/` folder."
    ),
}


def _write_table(df: pd.DataFrame, folder: Path, name: str) -> list[str]:
    """Write a released table as CSV and Parquet; text cells come back exactly (any category text).

    The CSV quotes, as usual, the cells holding a comma, a quote or a line
    feed. Python's ``csv`` does not quote a lone carriage return, which
    readers take for a line break, so a table holding one is written with
    every field quoted.
    """
    folder.mkdir(parents=True, exist_ok=True)
    quoting = csv.QUOTE_ALL if _has_carriage_return(df) else csv.QUOTE_MINIMAL
    df.to_csv(folder / f"{name}.csv", index=False, quoting=quoting)
    df.to_parquet(folder / f"{name}.parquet", index=False)
    return [f"tables/{name}.csv", f"tables/{name}.parquet"]


@dataclass(frozen=True)
class RunCost:
    """What a run's lines cost in total (held by its release id) and what the run itself reserved (public)."""

    total: PrivacyCost
    new: PrivacyCost


def _pair(c: PrivacyCost) -> dict[str, float]:
    return {"epsilon": float(c.epsilon), "delta": float(c.delta)}


def _sum_pair(charges) -> dict[str, float]:
    return {"epsilon": float(charges["epsilon"].sum()), "delta": float(charges["delta"].sum())}


class BundleExistsError(LedgerError):
    """A bundle is already published for this release id (or operator query): it is never rewritten."""


def published_refs(folder: Path) -> set[str] | None:
    """The charge refs a published bundle's manifest lists (None: no bundle published in ``folder``).

    Raises
    ------
    BundleExistsError
        The folder holds a manifest that cannot be read: it is published, and never rewritten.
    """
    path = Path(folder) / "manifest.json"
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
        return {str(r["ref"]) for r in m.get("releases", []) if isinstance(r, dict) and r.get("ref")}
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError, KeyError):
        raise BundleExistsError(
            f"a bundle is published at {folder} but its manifest cannot be read; a published bundle is never "
            "rewritten, so nothing was written: restore it from your backup (docs/backups.md, 'What, when and how')") from None


def write_bundle(
    root: Path,
    spec: ReleaseSpec,
    ledger: PrivacyLedger,
    ingest_id: str,
    validation_summary: dict[str, Any] | None = None,
    steps: list[StepOutput] | None = None,
    subfolder_prefix: str | None = None,
    *,
    owner_key: bytes,
    stopped: str | None = None,
    owner_tables: dict[str, Any] | None = None,
    run_cost: "RunCost | None" = None,
) -> BundleResult:
    """Assemble the release bundle for ``spec.release_id``.

    Parameters
    ----------
    root : Path
        The bundles folder; the bundle goes to ``root/<dataset>/<release_id>``.
    spec : ReleaseSpec
    ledger : PrivacyLedger
        Source of the charges and the remaining budget.
    ingest_id : str
        The input's random ingest id (public lineage; never a content hash).
    validation_summary : dict, optional
        The validator's summary (counts and row numbers only); stored under
        ``owner/`` for the data owner.
    steps : list of StepOutput
        Private outputs of the steps that ran; the manifest lists exactly
        their charges.
    subfolder_prefix : str, optional
        Operator runs write ``<release_id>/<prefix>-<public ref of the first
        charge>`` so they never overwrite the scheduled release's bundle.
    owner_key : bytes
        The data owner's HMAC key (the spec fingerprint).
    stopped : str, optional
        Public reason the release stopped early (noisy rejected-fraction gate).
    owner_tables : dict of str to DataFrame, optional
        Owner-only tables (e.g. ``outlier_rules``), written as ``owner/<name>.csv``; the public report only
        names the files (whether they exist depends on the spec alone).
    run_cost : RunCost, optional
        The run's planned total (its reserved lines, held by the release id) and what this run itself
        reserved (zero for a run that resumed a crashed one). Without it (library use) both are the sum of
        the bundle's charges.

    Returns
    -------
    BundleResult
    """
    steps = steps or []
    ds = spec.dataset.name
    status = ledger.status(ds)
    given = ledger.given_back(ds, spec.release_id) if stopped else PrivacyCost(0)
    all_charges = ledger.charges(ds)
    keys = {k for out in steps for k in out.keys}
    mine = all_charges[all_charges["key"].isin(keys)]
    ref_of = dict(zip(all_charges["key"], all_charges["public_ref"]))
    subfolder = None
    if subfolder_prefix:
        first = next((k for out in steps for k in out.keys), None)
        subfolder = f"{subfolder_prefix}-{ref_of[first]}" if first in ref_of else subfolder_prefix
    final = root / ds / spec.release_id / subfolder if subfolder else root / ds / spec.release_id
    published = published_refs(final)
    if published is not None:  # never rewritten (issue 47 §1): the same charges are the run that published it
        if published == set(mine["public_ref"]):
            return BundleResult(final, json.loads((final / "manifest.json").read_text(encoding="utf-8")))
        raise BundleExistsError(
            f"a bundle is already published at {final} with other charges; a published bundle is never "
            "rewritten: give this release a new release id (--release-id)")
    tmp = final.parent / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    public_mkdir(tmp.parent)  # bundles/<dataset>/...: public folders whatever umask a connection holds
    tmp.mkdir()
    files: list[str] = []
    public = mine[PUBLIC_CHARGE_COLUMNS].copy()
    public["reserved_at"] = public["reserved_at"].astype(str)
    files += _write_table(public, tmp / "tables", "ledger_charges")
    for out in steps:
        for name, table in out.tables.items():
            files += _write_table(table, tmp / "tables", f"{out.step}__{name}")
    # the picture shows the table's figures: the ledger's spent (reservations whole) and what is left
    images = [budget_plot(all_charges, float(status.cap.epsilon), tmp / "budget.png", f"Privacy budget of {ds}",
                          spent_epsilon=float(status.spent.epsilon))]
    for out in steps:
        wait_for_pictures(out.images)  # drawn in a child process (dpcore.publish.background_plots): raises if that failed
        for img in out.images:
            dest = tmp / img.name
            shutil.copyfile(img, dest)
            images.append(dest)
    files += [p.name for p in images]
    if validation_summary is not None:
        with private_open(private_dir(tmp / "owner") / "validation_summary.json") as fh:
            fh.write(json.dumps(validation_summary, indent=2, default=str))
        files.append("owner/validation_summary.json")
    owner_notes = [OWNER_NOTES[name] for name in (owner_tables or {}) if name in OWNER_NOTES]
    owned = dict(owner_tables or {})
    owned.update({f"{out.step}__{name}": t for out in steps for name, t in out.owner_tables.items()})
    for name, table in owned.items():
        with private_open(private_dir(tmp / "owner") / f"{name}.csv", newline="") as fh:
            table.to_csv(fh, index=False)
        files.append(f"owner/{name}.csv")

    notions = sorted(set(mine["notion"]), key=list(NOTION_LABELS).index)
    weakest = ledger.weakest_notion(ds)
    publishable = bool(mine["publishable"].all()) if len(mine) else True
    manifest: dict[str, Any] = {
        "dataset": ds,
        "release_id": spec.release_id,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "code_version": code_version(),
        "input_id": ingest_id,
        "spec_fingerprint": owner_hmac(owner_key, "spec", spec.content_hash()),
        "for_publication": publishable,
        "releases": [
            {
                "step": r.step, "mechanism": r.mechanism, "notion": r.notion, "neighbour": r.neighbour,
                "stated_epsilon": r.stated_epsilon, "stated_delta": r.stated_delta,
                "epsilon": r.epsilon, "delta": r.delta, "status": r.status, "ref": r.public_ref,
            }
            for r in mine.itertuples(index=False)
        ],
        "protection": [protection_of(out, mine) for out in steps],
        "always_not_protected": ALWAYS_NOT_PROTECTED,
        "stopped": stopped,
        "budget_identity": ledger.budget_identity(ds),
        "notions_in_this_release": notions,
        "weakest_notion_on_dataset": weakest,
        "budget": {
            "neighbour": status.neighbour,
            "cap": {"epsilon": float(status.cap.epsilon), "delta": float(status.cap.delta)},
            "spent_by_this_release": _pair(run_cost.total - given) if run_cost else _sum_pair(mine),
            "charged_by_this_run": _pair(run_cost.new - given) if run_cost else _sum_pair(mine),
            # what the release reserved and never drew, returned when it stopped on a public fact (issue 48.1)
            "given_back_by_this_release": _pair(given),
            "spent_total": {"epsilon": float(status.spent.epsilon), "delta": float(status.spent.delta)},
            "remaining": {"epsilon": float(status.remaining.epsilon), "delta": float(status.remaining.delta)},
            "exact": {"spent_total_epsilon": str(status.spent.epsilon), "remaining_epsilon": str(status.remaining.epsilon)},
        },
        "ledger": manifest_section(ledger, ds),
        "files": sorted(files + ["report.md", "manifest.json"]),
    }
    (tmp / "report.md").write_text(render_report(manifest, public, steps, validation_summary, owner_notes))
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    publish(tmp)  # the public part readable as the owner's umask says, owner/ left private
    if final.exists():
        # keep operator sub-bundles that live inside a release's folder
        for child in final.iterdir():
            if child.is_dir() and (child / "manifest.json").exists() and subfolder is None:
                child.rename(tmp / child.name)
        shutil.rmtree(final)
    tmp.rename(final)
    ledger.wh.let_go()  # the charges the manifest names are in the warehouse file itself (a backup holds them)
    return BundleResult(final, manifest)


def render_report(
    manifest: dict[str, Any], charges: pd.DataFrame, steps: list[StepOutput], validation_summary: dict | None,
    owner_notes: list[str] | None = None,
) -> str:
    """The human report (Markdown). Only public or privacy-protected figures."""
    b = manifest["budget"]
    lines = [
        f"# Release `{manifest['release_id']}` of `{manifest['dataset']}`",
        "",
        f"Created {manifest['created_at']} by code {manifest['code_version']}; input `{manifest['input_id']}` "
        f"(a random ingest id), spec fingerprint `{manifest['spec_fingerprint'][:12]}` (keyed by the data owner).",
        "",
    ]
    if not manifest["for_publication"]:
        lines += ["> **NOT FOR PUBLICATION**: made with a seeded test noise generator.", ""]
    if manifest.get("stopped"):
        lines += [f"> **Release stopped early**: {manifest['stopped']}", ""]
    ident = manifest["budget_identity"]
    lines += ["## Budget identity", ""]
    if ident["budget"] != manifest["dataset"] or len(ident["datasets_sharing_it"]) > 1:
        lines.append(
            f"This dataset charges the budget of `{ident['budget']}`, shared by "
            + ", ".join(f"`{d}`" for d in ident["datasets_sharing_it"])
            + ": the data owner registered it so (a budget belongs to the people in the data, not to a name)."
        )
    else:
        lines.append(f"This dataset charges its own budget `{ident['budget']}`.")
    for sep in ident["separations"]:
        lines.append(
            f"- Owner override recorded {sep['recorded_at']}: `{sep['dataset']}` keeps a budget separate from "
            f"`{sep['separate_from']}` although their records may overlap. Reason: {sep['reason']}"
        )
    lines += ["", "## What is not protected", ""]
    lines += [f"- {t}" for t in manifest["always_not_protected"]]
    lines.append("")
    lines += [
        "## Privacy budget",
        "",
        "| | epsilon | delta |",
        "|---|---|---|",
        f"| cap | {b['cap']['epsilon']:g} | {b['cap']['delta']:.3g} |",
        f"| spent by this release (its reserved charges) | {b['spent_by_this_release']['epsilon']:g} | "
        f"{b['spent_by_this_release']['delta']:.3g} |",
        f"| charged by the run that wrote this bundle | {b['charged_by_this_run']['epsilon']:g} | "
        f"{b['charged_by_this_run']['delta']:.3g} |",
        *([f"| given back by this release (reserved, never drawn: it stopped on a public fact) | "
           f"{b['given_back_by_this_release']['epsilon']:g} | {b['given_back_by_this_release']['delta']:.3g} |"]
          if b.get("given_back_by_this_release", {}).get("epsilon") or b.get("given_back_by_this_release", {}).get("delta")
          else []),
        f"| spent in total | {b['spent_total']['epsilon']:g} | {b['spent_total']['delta']:.3g} |",
        f"| remaining | {b['remaining']['epsilon']:g} | {b['remaining']['delta']:.3g} |",
        "",
        f"The cap is stated under **{b['neighbour']}** neighbours; each charge is the mechanism's cost under its own "
        "neighbour relation converted to it (an add/remove cost counts (2 epsilon, (1 + e^epsilon) delta) against a "
        "replace-one cap: replacing a record is removing it and adding another). For the OCDP and SP notions this "
        "two-step argument holds when the intermediate dataset meets the notion's own neighbour condition.",
        "",
        "![budget](budget.png)",
        "",
    ]
    weakest = manifest["weakest_notion_on_dataset"]
    lines.append(
        f"Weakest privacy notion used on this dataset: **{NOTION_LABELS[weakest]}**." if weakest
        else "No private output has been charged to this dataset yet."
    )
    lines += ["", "## Charges of this release", ""]
    if len(charges):
        lines += [
            "| step | mechanism | notion | stated (epsilon, delta), neighbours | charged epsilon | charged delta | status |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.step} | {r.mechanism} | {r.notion} | ({r.stated_epsilon:g}, {r.stated_delta:.3g}), {r.neighbour} "
            f"| {r.epsilon:g} | {r.delta:.3g} | {r.status} |"
            for r in charges.itertuples(index=False)
        ]
    else:
        lines.append("None: this release ran no private step.")
    for out in steps:
        if out.markdown:
            lines += ["", out.markdown.rstrip()]
        if out.not_protected:
            lines += ["", "**Not protected by this output's guarantee:**", ""] + [f"- {t}" for t in out.not_protected]
        for img in out.images:
            lines += ["", f"![{img.stem}]({img.name})"]
    if validation_summary is not None:
        lines += [
            "",
            "## Data validation (data owner only)",
            "",
            "Counts and data row numbers (1 = the first row after the header) of rejected rows are in "
            "`owner/validation_summary.json`; `dpr validation show` prints every failing row of each rule. "
            "They are not privacy-protected: do not publish the `owner/` folder.",
        ]
    for note in owner_notes or []:
        lines += ["", note]
    return "\n".join(lines) + "\n"
