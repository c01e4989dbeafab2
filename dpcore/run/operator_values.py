"""The values an operator flow runs with: each from the request, else from the spec it runs on (issue 32 §1).

An operator flow (``aiq_query``, ``explain_outlier``, ``outlier_counts``, ``coco_publish``,
``unattributed_publish``, ``explain_rules``; the ``dpr`` commands ``aiq``, ``explain``, ``counts``, ``coco``,
``sizes``, ``rules``) overrides one step of the spec with its parameters. Every parameter is optional
(None = "the spec's value") and is resolved here, before anything is read or charged:

* given by the request (flow parameter, ``dpr`` option) -> that value, source ``request``;
* else written in the spec file under ``steps.<step>`` -> the spec's value, source ``spec``;
* else, for a method choice whose default in the spec format does not depend on the data (the coco
  method, PCOR's sampler, AIQ's mechanism, ...) -> that documented default, source ``spec default``;
* else, for a privacy amount or a public fact about the data (epsilon, delta, the bound K, the radius r,
  beta, k, h) -> refused with :class:`MissingOperatorValueError`, naming the parameter and the spec key
  to set. A default chosen for the demo's data (K = 730, r = 0.02) would be wrong for another table and
  silently charged.

:meth:`OperatorValues.line` states the values used and where each came from (logged by the flows,
printed by ``dpr``). The values are public parameters: stating them discloses nothing about the data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from dpcore.release.spec import ReleaseSpec, SpecError

#: Methods of ``steps.outlier_counts`` that spend no delta (delta_count is then unused).
PURE_COUNT_METHODS = ("global_laplace", "smooth_student_t")


class MissingOperatorValueError(SpecError):
    """An operator parameter that costs budget or describes the data was neither given nor set in the spec."""


@dataclass(frozen=True)
class Param:
    """One operator parameter and the spec key it defaults to.

    ``required``: True when the spec format's own default may not stand in (a privacy amount or a public
    fact about the data); ``required_if``: required only when this holds of the other resolved values.
    """

    name: str
    key: str = ""
    required: bool = True
    required_if: Callable[[Mapping[str, Any]], bool] | None = None

    @property
    def spec_key(self) -> str:
        return self.key or self.name


@dataclass(frozen=True)
class UsedValue:
    """A parameter's effective value and where it came from (``request``, ``spec`` or ``spec default``)."""

    name: str
    key: str
    value: Any
    source: str
    note: str = ""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return "null" if v is None else str(v)


@dataclass(frozen=True)
class OperatorValues:
    """The effective parameters of one operator run (see the module docstring)."""

    flow: str
    step: str
    spec_path: str
    used: tuple[UsedValue, ...] = field(default_factory=tuple)

    def __getitem__(self, name: str) -> Any:
        return self._get(name).value

    def source(self, name: str) -> str:
        """``request``, ``spec`` or ``spec default``."""
        return self._get(name).source

    def _get(self, name: str) -> UsedValue:
        for u in self.used:
            if u.name == name:
                return u
        raise KeyError(name)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """``{name: {"value", "source", "spec_key"}}`` (JSON-friendly)."""
        return {u.name: {"value": u.value, "source": u.source, "spec_key": f"steps.{self.step}.{u.key}"}
                for u in self.used}

    def line(self) -> str:
        """One line: ``values used (steps.coco of my.yaml): max_group_size=30000 (spec), ...``."""
        return (f"values used (steps.{self.step} of {self.spec_path}): "
                + ", ".join(f"{u.name}={_fmt(u.value)} ({u.source}{'; ' + u.note if u.note else ''})"
                            for u in self.used))


def _aiq_sp(v: Mapping[str, Any]) -> bool:
    return v.get("mechanism") == "sp"


#: flow name -> (step, parameters). The outlier_counts budget (epsilon_total, or epsilon_select and
#: epsilon_count) is resolved by :func:`_counts_budget`.
OPERATOR_PARAMS: dict[str, tuple[str, tuple[Param, ...]]] = {
    "aiq_query": ("aiq", (
        Param("epsilon"), Param("beta"), Param("r"), Param("mechanism", required=False),
        Param("k", required=False, required_if=_aiq_sp),
    )),
    "explain_outlier": ("pcor", (
        Param("epsilon"), Param("sampler", required=False), Param("n_samples", required=False),
        Param("verifier", required=False), Param("utility", required=False), Param("start", required=False),
        Param("final_share", required=False), Param("metric", required=False),
        Param("attributes", required=False),
    )),
    "outlier_counts": ("outlier_counts", (
        Param("k"), Param("r"), Param("h"), Param("subspace_dim", required=False),
        Param("method", required=False), Param("attributes", required=False),
    )),
    "coco_publish": ("coco", (
        Param("epsilon_per_level"), Param("max_group_size"), Param("method", required=False),
    )),
    "unattributed_publish": ("unattributed", (
        Param("epsilon"), Param("max_group_size"), Param("method", required=False), Param("metric", required=False),
    )),
    "explain_rules": ("rules", (
        Param("template", key="templates", required=False), Param("max_depth", required=False),
        Param("max_rules", required=False),
    )),
}


def require_spec_path(spec_path: str | None) -> str:
    """``spec_path``, or a refusal saying how to name the spec (nothing falls back to the demo's)."""
    if not spec_path:
        raise SpecError(
            "no spec given: an operator run needs the release spec it runs on. Set the run's spec_path "
            "parameter (a deployment sets it in prefect.yaml's parameters), or with dpr pass --spec PATH or set "
            "DPR_SPEC=PATH (scripts/demo.sh sets DPR_SPEC=specs/demo.yaml). Nothing was read or charged."
        )
    return spec_path


def written_keys(spec_path: str | Path, step: str) -> set[str]:
    """The keys written under ``steps.<step>`` in the spec file (not the spec format's defaults)."""
    try:
        data = yaml.safe_load(Path(spec_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return set()  # load_spec has already reported an unreadable spec
    steps = data.get("steps") if isinstance(data, dict) else None
    section = steps.get(step) if isinstance(steps, dict) else None
    return set(section) if isinstance(section, dict) else set()


def _option(name: str) -> str:
    return "--" + {"record_ids": "record-id", "attributes": "attribute"}.get(name, name.replace("_", "-"))


def _missing(flow: str, step: str, spec_path: str, params: list[Param]) -> MissingOperatorValueError:
    what = ", ".join(p.name for p in params)
    keys = ", ".join(f"steps.{step}.{p.spec_key}" for p in params)
    given = ", ".join(f"{p.name} ({_option(p.name)})" for p in params)
    return MissingOperatorValueError(
        f"{flow}: no value for {what}: the spec {spec_path} does not set {keys} and the request did not give "
        f"it. These values spend budget or describe the data, so no default stands in for them: set {keys} in "
        f"the spec (the data owner's public choice), or give {given}. Nothing was read or charged."
    )


def _counts_budget(
    spec_path: str, section: Any, written: set[str], request: Mapping[str, Any]
) -> list[UsedValue]:
    """The outlier_counts budget: epsilon_total, or epsilon_select and epsilon_count (never the format's 0.5)."""
    step = "outlier_counts"
    if request.get("epsilon_total") is not None:
        return [UsedValue("epsilon_total", "epsilon_total", request["epsilon_total"], "request")]
    pair = ("epsilon_select", "epsilon_count")
    if any(request.get(n) is not None for n in pair) or "epsilon_total" not in written:
        used, missing = [], []
        for n in pair:
            if request.get(n) is not None:
                used.append(UsedValue(n, n, request[n], "request"))
            elif n in written and getattr(section, n) is not None:
                used.append(UsedValue(n, n, getattr(section, n), "spec"))
            else:
                missing.append(n)
        if not missing:
            return used
        if len(missing) == 2:
            raise MissingOperatorValueError(
                f"outlier_counts: no budget: the spec {spec_path} sets none of steps.{step}.epsilon_total, "
                f"steps.{step}.epsilon_select, steps.{step}.epsilon_count and the request gave none. Set "
                f"steps.{step}.epsilon_total (or epsilon_select and epsilon_count) in the spec, or give "
                "epsilon_total (--epsilon-total) or epsilon_select and epsilon_count. Nothing was read or charged."
            )
        raise _missing("outlier_counts", step, spec_path, [Param(n) for n in missing])
    return [UsedValue("epsilon_total", "epsilon_total", section.epsilon_total, "spec")]


def _counts_delta(spec_path: str, spec: ReleaseSpec, section: Any, written: set[str],
                  request: Mapping[str, Any], used: list[UsedValue]) -> list[UsedValue]:
    """``delta_count`` of an outlier_counts request: asked for and listed only when the chosen method uses it.

    ``method: auto`` is resolved exactly as the release resolves it
    (:func:`dpcore.steps.outlier_counts.outlier_counts_planned_charges` through
    ``OutlierCountMechanism.for_dimension``): from the public parameters of the
    resolved request (k, r, h, the budget, the candidates, and the delta the
    step would run with: the request's, else the spec's). When every candidate
    dimension's mechanism spends no delta, ``delta_count`` is neither asked for
    nor listed (a given one is unused and named as such); otherwise it must be
    given or written in the spec (a privacy amount: no default stands in).

    Returns
    -------
    list of UsedValue
        ``used`` with ``delta_count`` added when it is used, and the method's
        entry noting what ``auto`` resolved to.

    Raises
    ------
    MissingOperatorValueError
        The chosen method spends delta and delta_count is set nowhere.
    StepInputError
        The resolved parameters fail the step's public checks (the message names the key).
    """
    from dpcore.release.spec import outlier_counts_section, with_step
    from dpcore.steps.outlier_counts import _checked

    values = {u.name: u.value for u in used}
    if request.get("delta_count") is not None:
        values["delta_count"] = request["delta_count"]
    resolved = with_step(spec, "outlier_counts", outlier_counts_section(spec, values))
    mechs = _checked(resolved)[3]
    methods = sorted({m.method for m in mechs.values()})
    spends_delta = any(m.privacy_map().delta > 0 for m in mechs.values())
    out = []
    for u in used:
        if u.name == "method" and u.value == "auto":
            u = UsedValue(u.name, u.key, u.value, u.source,
                          f"resolved from public parameters to {'/'.join(methods)}, as the release does")
        out.append(u)
    if not spends_delta:
        if request.get("delta_count") is not None:
            out.append(UsedValue("delta_count", "delta_count", request["delta_count"], "request",
                                 f"unused: {'/'.join(methods)} spends no delta"))
        return out
    if request.get("delta_count") is not None:
        out.append(UsedValue("delta_count", "delta_count", request["delta_count"], "request"))
    elif "delta_count" in written:
        out.append(UsedValue("delta_count", "delta_count", section.delta_count, "spec"))
    else:
        raise _missing("outlier_counts", "outlier_counts", spec_path, [Param("delta_count")])
    return out


def operator_values(
    flow: str, spec_path: str, spec: ReleaseSpec, request: Mapping[str, Any]
) -> OperatorValues:
    """Resolve every parameter of operator flow ``flow`` (see the module docstring).

    Parameters
    ----------
    flow : str
        A key of :data:`OPERATOR_PARAMS`.
    spec_path : str
        The spec file ``spec`` was loaded from (to tell written keys from the format's defaults).
    spec : ReleaseSpec
    request : mapping
        The flow's parameters as given (None = not given).

    Returns
    -------
    OperatorValues

    Raises
    ------
    MissingOperatorValueError
        A required value is neither given nor written in the spec (every such parameter is named, with its
        spec key). Raised before anything is read or charged.
    """
    step, params = OPERATOR_PARAMS[flow]
    section = getattr(spec.steps, step)
    written = written_keys(spec_path, step)
    used: list[UsedValue] = []
    pending: list[Param] = []
    for p in params:
        if request.get(p.name) is not None:
            used.append(UsedValue(p.name, p.spec_key, request[p.name], "request"))
        elif p.spec_key in written:
            used.append(UsedValue(p.name, p.spec_key, getattr(section, p.spec_key), "spec"))
        else:
            pending.append(p)
    known = {u.name: u.value for u in used}
    for p in pending:  # the spec format's default, where it may stand in
        if not p.required and p.required_if is None:
            known[p.name] = getattr(section, p.spec_key)
    missing = []
    for p in pending:
        if p.required or (p.required_if is not None and p.required_if(known)):
            missing.append(p)
        else:
            used.append(UsedValue(p.name, p.spec_key, getattr(section, p.spec_key), "spec default"))
    if missing:
        raise _missing(flow, step, spec_path, missing)
    if flow == "outlier_counts":
        used += _counts_budget(spec_path, section, written, request)
        used = _counts_delta(spec_path, spec, section, written, request, used)
    order = [p.name for p in params] + ["delta_count"]
    used.sort(key=lambda u: order.index(u.name) if u.name in order else len(order))
    return OperatorValues(flow, step, str(spec_path), tuple(used))

