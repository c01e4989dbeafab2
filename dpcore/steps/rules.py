"""Owner-only step ``rules``: unit-respecting rules that explain the detector's outliers (seed 004,
"Outlier Rules Discovery").

For each detector template, :class:`~dpcore.explain.RuleMiner` searches
operation trees over the numeric attributes that declare a unit
(``schema.numeric.<name>.unit``) and categorical values for the rules that
best separate the records the template flagged, ranked by F1.

Not a release (DESIGN.md rule 9): a rule's thresholds, precision, recall and
support are exact functions of the private data and of the non-private
detector's labels, so no charge covers them. They are written to the
warehouse's ``internal.outlier_rules`` and, at bundle time, to the bundle's
``owner/outlier_rules.csv`` only; nothing about them is returned to Prefect,
logged, or put in a public file. What the public report says about the step
depends on the spec alone.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from ..ingest import IngestResult
from ..settings import Settings
from ..spec import ReleaseSpec
from .common import StepInputError, load_columns, open_stores

#: The warehouse table (schema ``internal``) holding every mined rule.
RULES_TABLE = "outlier_rules"
#: Columns of :data:`RULES_TABLE` and of the owner's CSV.
RULE_COLUMNS = ["table_suffix", "template", "rank", "rule", "precision", "recall", "f1", "support", "n_flagged",
                "note", "params", "created_at"]
#: Default cap on a categorical attribute's domain size for categorical rules.
MAX_RULE_CATEGORIES = 50


@dataclass(frozen=True)
class RulesDone:
    """Opaque handle of a finished rules step: which templates were explained (public, from the spec)."""

    templates: tuple[str, ...]
    table_suffix: str


def rules_inputs(spec: ReleaseSpec, templates: list[str] | None = None) -> tuple[list[str], dict[str, str], list[str]]:
    """The templates, numeric attributes with their units, and categorical attributes the step uses (spec only).

    Raises
    ------
    StepInputError
        A named template is not in ``steps.detect.templates``, or no numeric attribute declares a unit.
    """
    cfg = spec.steps.rules
    names = [t.name for t in spec.steps.detect.templates]
    chosen = list(templates or cfg.templates or names)
    bad = [t for t in chosen if t not in names]
    if bad:
        raise StepInputError(f"steps.rules.templates {bad} are not templates of steps.detect.templates {names}")
    num = spec.public_schema.numeric
    attrs = cfg.attributes if cfg.attributes is not None else [a for a, v in num.items() if v.unit]
    if not attrs or any(a not in num or not num[a].unit for a in attrs):
        raise StepInputError("steps.rules needs numeric attributes that declare a unit (schema.numeric.<name>.unit)")
    cats = spec.public_schema.categorical
    categorical = (list(cfg.categorical) if cfg.categorical is not None
                   else [a for a, v in cats.items() if len(v.domain) <= MAX_RULE_CATEGORIES])
    return chosen, {a: num[a].unit for a in attrs}, categorical


def mine_rules(
    spec: ReleaseSpec, settings: Settings, ingested: IngestResult, templates: list[str] | None = None,
    max_depth: int | None = None, max_rules: int | None = None,
) -> RulesDone:
    """Mine each template's rules against its stored labels and write them to ``internal.outlier_rules``.

    Needs the detector's results for this validated table
    (``internal.detect_scores__<suffix>``, written by the detect step).
    A template that flagged no record (or every record) gets one row with a
    note instead of rules; the step never fails on a fact of the data.

    Parameters
    ----------
    templates : list of str, optional
        Default ``steps.rules.templates`` (or every template).
    max_depth, max_rules : int, optional
        Default ``steps.rules.max_depth`` / ``max_rules``.

    Returns
    -------
    RulesDone
        Template names and the table suffix only (no count, no rule).
    """
    from ..explain import RuleMiner
    from ..validation import validated_table_name

    cfg = spec.steps.rules
    chosen, units, categorical = rules_inputs(spec, templates)
    depth, top = max_depth or cfg.max_depth, max_rules or cfg.max_rules
    wh = open_stores(settings).warehouse
    suffix = validated_table_name(ingested, spec)
    rid = spec.dataset.record_id
    frame = load_columns(wh, spec, ingested, [*units, *categorical])
    scores = wh.query_df(
        f'SELECT "{rid}", template, label FROM internal."detect_scores__{suffix}" WHERE template IN '
        "(SELECT unnest(?::VARCHAR[]))", [chosen],
    )
    params = json.dumps({"max_depth": depth, "max_rules": top, "units": units, "categorical": categorical})
    now = datetime.now(timezone.utc)
    rows = []
    for template in chosen:
        lab = scores[scores["template"] == template].set_index(rid)["label"]
        labels = lab.reindex(frame[rid]).fillna(0).to_numpy(dtype=bool)
        n_flagged = int(labels.sum())
        base = {"table_suffix": suffix, "template": template, "n_flagged": n_flagged, "params": params,
                "created_at": now}
        if n_flagged == 0 or n_flagged == len(labels):
            rows.append({**base, "rank": 0, "rule": None, "precision": np.nan, "recall": np.nan, "f1": np.nan,
                         "support": 0, "note": "the template flagged no record" if n_flagged == 0
                         else "the template flagged every record"})
            continue
        miner = RuleMiner(max_depth=depth, max_rules=top).fit(
            frame[[*units, *categorical]], labels, units=units, categorical=categorical)
        for rank, rule in enumerate(miner.rules_, start=1):
            rows.append({**base, "rank": rank, "rule": rule.text, "precision": float(rule.precision),
                         "recall": float(rule.recall), "f1": float(rule.f1), "support": int(rule.support),
                         "note": None})
    out = pd.DataFrame(rows, columns=RULE_COLUMNS)

    def op(con):
        con.execute(
            f"CREATE TABLE IF NOT EXISTS internal.{RULES_TABLE} (table_suffix VARCHAR, template VARCHAR, "
            "rank INTEGER, rule VARCHAR, precision DOUBLE, recall DOUBLE, f1 DOUBLE, support BIGINT, "
            "n_flagged BIGINT, note VARCHAR, params VARCHAR, created_at TIMESTAMPTZ)"
        )
        con.execute(f"DELETE FROM internal.{RULES_TABLE} WHERE table_suffix = ? AND template IN "
                    "(SELECT unnest(?::VARCHAR[]))", [suffix, chosen])
        con.register("_rules", out)
        con.execute(f"INSERT INTO internal.{RULES_TABLE} SELECT * FROM _rules")
        con.unregister("_rules")

    wh.run(op, transaction=True)
    return RulesDone(tuple(chosen), suffix)


def owner_rules(settings: Settings, done: RulesDone) -> pd.DataFrame:
    """The stored rules of ``done``'s templates, for the bundle's owner-only folder."""
    wh = open_stores(settings).warehouse
    if not wh.table_exists("internal", RULES_TABLE):
        return pd.DataFrame(columns=RULE_COLUMNS)
    return wh.query_df(
        f"SELECT * FROM internal.{RULES_TABLE} WHERE table_suffix = ? AND template IN (SELECT unnest(?::VARCHAR[])) "
        "ORDER BY template, rank", [done.table_suffix, list(done.templates)],
    )

