"""A series spec's templates filled for one period, before the spec is validated (issue 30).

``release_id`` and the source's ``path`` (``period`` for the demo source; a postgres query binds the
period as a parameter) hold ``{period}`` and ``{dataset}``; :func:`fill_series` fills them on the raw
YAML mapping when :func:`dpcore.release.spec.load_spec` reads the file. Kept apart from
:mod:`dpcore.release.series` (the period of a run, the series cap), which reads loaded specs, so
the spec loader and the series do not import each other.
"""
from __future__ import annotations

import re
from typing import Any

from .periods import LABEL_FORMS, PeriodError, cadence, parse_period
from .spec_errors import SpecError

#: The template names a series spec may use in ``release_id`` and ``dataset.source.path``.
TEMPLATE_NAMES = ("period", "dataset")
#: The names a series spec's postgres query may use; each is bound as a query parameter (issue 31).
PERIOD_PARAMETERS = ("period", "period_start", "period_end")


def _fill(text: str, values: dict[str, str], key: str) -> str:
    out = text
    for name, value in values.items():
        out = out.replace("{" + name + "}", value)
    left = re.findall(r"\{[^{}]*\}", out)
    if left:
        shown = [x if re.fullmatch(r"\{[A-Za-z0-9_]{0,40}\}", x) else "{<not shown>}" for x in left]
        raise SpecError(f"{key}: unknown template {', '.join(shown)}: a series spec may use "
                        f"{', '.join('{' + n + '}' for n in TEMPLATE_NAMES)}")
    return out


def fill_series(data: dict[str, Any], period: object, origin: str, release_id_override: bool = False) -> dict:
    """Fill a series spec's templates for ``period`` (the raw YAML mapping, before validation).

    Parameters
    ----------
    data : dict
        The spec file's mapping.
    period : str, date or None
        The period's label; None for a series spec reads it as its first period (``series.first``: what
        ``dpr dataset add``, ``dpr spec check`` and ``dpr plan`` see); a run refuses a series spec without
        a period (:func:`dpcore.release.series.run_period`).
    origin : str
        The spec's path, for messages.
    release_id_override : bool
        A release id was given outside the file (``--release-id``); refused for a series spec.

    Returns
    -------
    dict
        ``data`` with ``release_id`` and the source filled, ``period`` set to the label and
        ``release_id_template`` to the release id as written; unchanged without a ``series`` section.

    Raises
    ------
    SpecError
        A period for a spec without series, a label that is not a period of the series or lies outside
        ``series.first`` .. ``series.last``, a template without ``{period}`` or with an unknown name, or a
        release id override; each message names the key, flag or parameter and the fix.
    """
    for key in ("period", "release_id_template"):
        if key in data:
            raise SpecError(f"{origin}: {key!r} is not a key of the spec file: a series spec names its periods in "
                            "series: {period: monthly, first: ...}; the period of a run is given with --period (dpr "
                            "run) or the flow's period parameter")
    series = data.get("series")
    if series is None:
        if period is not None:
            raise SpecError(
                f"{origin} declares no series, so it has no periods: run it without a period (leave out --period / "
                "the period parameter), or add a series section to the spec (series: {period: monthly, first: "
                "2013-01} with {period} in release_id and dataset.source.path)")
        return data
    if not isinstance(series, dict) or series.get("period") not in LABEL_FORMS:
        return data  # the model's validation names what is wrong with the series section
    kind = series["period"]
    try:
        cad = cadence(kind, series.get("first"), series.get("last"), series.get("every"), series.get("periods"))
    except PeriodError:
        return data  # reported by the model's validation
    if release_id_override:
        raise SpecError(
            f"{origin} is a series spec: each period's release id comes from its release_id template, so "
            "--release-id (the release_id parameter) cannot be given; change the template in the spec instead")
    try:
        p = cad.following(cad.first, 1)[0] if period is None else parse_period(kind, period, "period (--period)")
    except PeriodError as exc:
        raise SpecError(str(exc)) from None
    problem = cad.refusal(p)
    if problem:
        raise SpecError(f"{problem}, in {origin}; give a period of the series")
    rid = data.get("release_id")
    if not isinstance(rid, str) or "{period}" not in rid:
        raise SpecError(
            "release_id: a series spec names each period's release, so its release_id must contain {period} "
            "(e.g. release_id: \"{dataset}-{period}\"): one release id for every period would return the first "
            "period's stored release every time")
    ds = data.get("dataset")
    name = ds.get("name") if isinstance(ds, dict) else None
    values = {"period": p.label, "dataset": name if isinstance(name, str) else ""}
    out = {**data, "release_id": _fill(rid, values, "release_id"), "period": p.label, "release_id_template": rid}
    src = ds.get("source") if isinstance(ds, dict) else None
    if isinstance(src, dict) and src.get("kind") == "postgres":
        # the period is a bound parameter of the source's query (dpcore.ingest.sources.postgres), never pasted into it
        query = src.get("query")
        if not isinstance(query, str) or not any("{" + n + "}" in query for n in PERIOD_PARAMETERS):
            raise SpecError("dataset.source.query: a series spec reads each period's own rows, so a postgres source "
                            "needs a query using {period} (or {period_start} and {period_end}), bound as query "
                            "parameters, e.g. query: \"select * from flights where month = {period}\"")
        out["dataset"] = {**ds, "source": {**src, "period": p.label}}
    elif isinstance(src, dict):
        key = "period" if src.get("kind") == "demo" else "path"
        value = src.get(key)
        if not isinstance(value, str) or "{period}" not in value:
            example = "period: \"{period}\"" if key == "period" else "path: data/flights_{period}.csv"
            raise SpecError(f"dataset.source.{key}: a series spec reads each period's own input, so it must contain "
                            f"{{period}} (e.g. {example})")
        out["dataset"] = {**ds, "source": {**src, key: _fill(value, values, f"dataset.source.{key}")}}
    return out
