"""``dpr run`` and the operator queries (``aiq``, ``explain``, ``counts``, ``coco``) as real Prefect flow runs.

Each operator subcommand is built from its flow's typed parameters: an
option per parameter (``--record-id`` for ``record_ids``, repeatable for
lists, choices for literals), with the flow's own ``Args:`` text as help, so
the command line and the Prefect UI's form can never disagree. Prefect
validates the values (ranges, patterns) exactly as for a UI run, and every
charge goes through the ledger like the flows' do.

The spec is ``--spec PATH`` or ``$DPR_SPEC`` (refused without one: nothing
falls back to the demo's). Every option left out takes the spec's value
(:mod:`dpcore.run.operator_values`); one that spends budget or describes the data
(ε, δ, K, r, β, k, h) and is set nowhere is refused before Prefect starts.
The values used, and where each came from, are printed first (on stderr
with ``--json``).
"""
from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable

import click

from .console import err, out, prefect_environment, print_json, refusals, refuse

#: subcommand -> (flow module, flow function name, one-line summary)
OPERATOR_FLOWS = {
    "aiq": ("flows.aiq_query", "aiq_query", "Ask privately whether records are (β, r)-anomalies (seed 001)."),
    "explain": ("flows.explain_outlier", "explain_outlier",
                "Release a private context in which a record is an outlier (PCOR, seed 003)."),
    "counts": ("flows.outlier_counts", "outlier_counts",
               "Top-h outlier subspaces and their noisy outlier counts (seed 002)."),
    "coco": ("flows.coco_publish", "coco_publish", "Publish the count-of-counts histograms of the hierarchy (seed 004)."),
    "sizes": ("flows.unattributed_publish", "unattributed_publish",
              "Publish the sorted group sizes, labels dropped (unattributed histogram, seed 004)."),
    "rules": ("flows.explain_rules", "explain_rules",
              "Unit-respecting rules explaining the detector's outliers, for the data owner only (seed 004)."),
}
#: flow parameter -> option name, where the plain name reads badly on a command line
RENAMED = {"record_ids": "record-id", "spec_path": "spec", "attributes": "attribute"}


@click.command("run")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--release-id", help="Override the spec's release id (the same id again spends nothing new).")
@click.option("--period", help="A series spec's period to release (2013-05, 2013-W05, 2013-05-31, 2013-Q2, 2018).")
@click.option("--from", "start", help="Backfill a series spec: the first period to release (with --to).")
@click.option("--to", "end", help="Backfill a series spec: the last period to release, included (with --from).")
def run(spec, release_id, period, start, end) -> None:
    """Run the whole release of SPEC (the demo's path) and print where the bundle is and the budget.

    The release is checked first as `dpr plan` does (every step's parameters, the whole cost against
    the remaining budget) and stops before its first charge on any problem, before Prefect starts (no
    flow run is created). A finished release id prints its stored release from the ledger, also without
    Prefect and without reading the data. Progress is logged by Prefect as the steps run.

    A series spec releases one period per run: --period P, or --from A --to B to release every period
    from A to B in order (each all or nothing; a period released before is returned as stored; the
    first failed period stops the backfill, and the periods before it stay released).
    """
    from dpcore.release.path_checks import check_paths
    from dpcore.release.series import backfill_periods, check_run_flags
    from dpcore.storage.settings import Settings, check_memory_floor
    from dpcore.release.spec import SpecFile, check_release_id_flag
    from dpcore.release.spec_dirs import allowed_spec_file

    with refusals():  # fail fast, before Prefect starts a server or a flow run is created (issue 48 §6)
        check_memory_floor()  # DPR_MEMORY_LIMIT below what a run needs (dpcore.storage.settings.MEMORY_FLOOR)
        check_release_id_flag(release_id)
        # the folders flow runs may load specs from (DPR_SPECS_DIR): the flow refuses any other spec, so refuse
        # it here, before the file is opened and without a flow run (it took 12 s under load, issue 48 §6)
        allowed_spec_file(spec, Settings.from_env().specs_dirs)
        check_run_flags(spec, period, start, end)
        if start is not None:
            periods = backfill_periods(spec, start, end)
            if _answer_stored_backfill(spec, periods, Settings.from_env()):
                return  # every period released before: from the ledger (no Prefect, no data read)
        source = SpecFile(spec)  # read once; validated once below (the spec is loaded once per run, issue 49)
        if start is None and period is None and (series := source.series()) is not None:
            # examples of the spec's own cadence (issue 48): its first periods, never another kind's label
            some = series.cadence().following(series.cadence().first, 4)
            refuse(f"--period: SPEC is a series spec ({series.cadence().describe()}); give the period to release "
                   f"(--period {some[0].label}) or a range (--from {some[0].label} --to {some[-1].label}). Nothing "
                   "was read or charged.")
        loaded = source.load(release_id=release_id, period=period)
        check_paths(loaded, Settings.from_env())
        if start is None:  # what blocks the release, decided as `dpr plan` decides it (issue 48.3)
            blockers = refuse_blocked(loaded)
            if blockers.plan.finished and _answer_stored(loaded, Settings.from_env(), blockers):
                return  # a finished release id: its stored release, from the ledger (no Prefect, no data read)
    prefect_environment()
    from flows.release_pipeline import main as release_main

    extra = (["--release-id", release_id] if release_id else []) + (["--period", period] if period else [])
    extra += ["--from", start, "--to", end] if start is not None else []
    # the pipeline takes the spec loaded here (flows.release_pipeline.main, tasks.common.given_spec)
    same = start is None and release_id != "" and period != ""  # main reads an empty flag as not given
    raise SystemExit(release_main(["--spec", spec] + extra, loaded=loaded if same else None))


def refuse_blocked(spec: Any) -> Any:
    """Refuse (exit 2, before Prefect starts) a release that :func:`dpcore.run.cost_plan.release_blockers` blocks.

    The reasons are every reason ``dpr plan`` lists for the same spec and ledger, in the same order, and the
    message is the one the release flow refuses with (:class:`dpcore.run.cost_plan.ReleaseBlockedError`); nothing
    was read or charged. Returns the :class:`~dpcore.run.cost_plan.Blockers` of a release that may run.
    """
    from dpcore.run.cost_plan import ReleaseBlockedError, release_blockers

    from .plan_cmd import open_ledger

    blockers = release_blockers(spec, open_ledger())
    if blockers.reasons:
        refuse(str(ReleaseBlockedError(blockers.reasons)))
    return blockers


def _answer_stored(spec: Any, settings: Any, blockers: Any = None) -> bool:
    """Print the stored release of a finished release id from the ledger, as the flow's re-run would (issue 48 §6).

    A finished release's outcome never changes, so its re-run needs neither Prefect nor the data: this prints
    the same lines as a re-run through the flow, the budget line read from the ledger now
    (:func:`dpcore.run.cost_plan.stored_answer` decides when; a series period whose page is older than its
    bundle goes through the flow, which rebuilds the page). Returns False when the flow must run.
    """
    from dpcore.budget.charge_summary import release_outcome_lines
    from dpcore.run.cost_plan import stored_answer

    from .plan_cmd import open_ledger

    ledger = open_ledger()
    outcome = stored_answer(spec, ledger, settings.bundles, blockers)
    if outcome is None:
        return False
    click.echo("\n".join(release_outcome_lines(ledger, spec.dataset.name, spec.release_id, outcome)))
    return True


def _answer_stored_backfill(spec_path: str, periods: list[str], settings: Any) -> bool:
    """Print a backfill whose every period is stored from the ledger, as ``--from/--to`` prints it (issue 48 §6).

    Returns False, having printed nothing, when a period must go through the flow: the flow's backfill then
    answers the stored periods from the ledger the same way and runs only the others.
    """
    from dpcore.budget.charge_summary import release_outcome_lines
    from dpcore.release.series import backfill_done_line
    from dpcore.release.spec import load_spec
    from dpcore.run.cost_plan import stored_answer

    from .plan_cmd import open_ledger

    ledger = open_ledger()
    answers = []
    for p in periods:
        spec = load_spec(spec_path, period=p)
        outcome = stored_answer(spec, ledger, settings.bundles)
        if outcome is None:
            return False
        answers.append((p, spec, outcome))
    for p, spec, outcome in answers:
        click.echo(f"\nperiod    : {p}")
        click.echo("\n".join(release_outcome_lines(ledger, spec.dataset.name, spec.release_id, outcome)))
    click.echo(backfill_done_line(periods))
    return True


def _arg_help(doc: str) -> dict[str, str]:
    """The ``Args:`` entries of a Google-style docstring (name -> text, continuation lines joined)."""
    found: dict[str, str] = {}
    lines = doc.split("Args:", 1)[1].splitlines() if "Args:" in doc else []
    entries = [ln for ln in lines if ln.strip()]
    if not entries:
        return found
    indent = len(entries[0]) - len(entries[0].lstrip())
    current = None
    for line in lines:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        m = re.match(r"^(\w+): (.*)$", line.strip())
        if depth == indent and m:
            current = m.group(1)
            found[current] = m.group(2).strip()
        elif depth > indent and current:
            found[current] += " " + line.strip()
        else:
            break
    return found


def _option_type(annotation: Any) -> tuple[Any, bool]:
    """The click type of a flow parameter annotation, and whether it is a list (repeatable option)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        return _option_type(args[0])
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(a) for a in typing.get_args(annotation)]), False
    if typing.get_origin(annotation) is list:
        inner, _ = _option_type(typing.get_args(annotation)[0])
        return inner, True
    return {int: int, float: float, bool: bool, str: str}.get(annotation, str), False


def _build(name: str) -> click.Command:
    """The click command of one operator flow, options from the flow's signature (imports the flow)."""
    import importlib

    module, func, summary = OPERATOR_FLOWS[name]
    prefect_environment()
    flow = getattr(importlib.import_module(module), func)
    fn = flow.fn
    hints = typing.get_type_hints(fn, include_extras=True)
    helps = _arg_help(inspect.getdoc(fn) or "")
    params: list[click.Parameter] = []
    for p in inspect.signature(fn).parameters.values():
        ctype, multiple = _option_type(hints[p.name])
        opt = "--" + RENAMED.get(p.name, p.name.replace("_", "-"))
        required = p.default is inspect.Parameter.empty
        kw: dict[str, Any] = {"type": ctype, "multiple": multiple, "required": required,
                              "help": helps.get(p.name, ""), "show_default": not multiple and not required}
        if not required and p.default is not None and not multiple:
            kw["default"] = p.default
        if p.name == "spec_path":  # never the demo's by default: --spec, else $DPR_SPEC, else refused
            kw.update(envvar="DPR_SPEC", show_envvar=True, metavar="PATH",
                      help="Path to the release spec YAML this command runs on (required: --spec or $DPR_SPEC).")
        params.append(click.Option([opt, p.name], **kw))
    params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print the flow's result as JSON."))

    def callback(as_json: bool, **kwargs: Any) -> None:
        from dpcore.run.operator_values import operator_values
        from dpcore.storage.settings import Settings
        from dpcore.release.spec import check_release_id_flag, load_spec
        from dpcore.release.spec_dirs import allowed_spec_file

        values = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}
        values = {k: v for k, v in values.items() if v is not None and v != []}
        if not values.get("spec_path"):
            refuse(f"no spec: dpr {name} needs the release spec it runs on. Give --spec PATH, or set DPR_SPEC=PATH "
                   "(scripts/demo.sh sets DPR_SPEC=specs/demo.yaml). Nothing was read or charged.")
        with refusals():
            check_release_id_flag(values.get("release_id"))  # the --release-id option
            # the folders flow runs may load specs from (DPR_SPECS_DIR) apply first, as in the flow itself
            allowed_spec_file(values["spec_path"], Settings.from_env().specs_dirs)
            spec = load_spec(values["spec_path"], release_id=values.get("release_id"))  # before Prefect starts
            # every value left out comes from the spec; one that spends budget and is set nowhere is refused here
            used = operator_values(func, values["spec_path"], spec, values)
        (err if as_json else out).print(used.line(), markup=False)
        from flows.console_logging import quiet_refusal_tracebacks

        quiet_refusal_tracebacks()  # a refusal (exit 2) prints its message, not Prefect's traceback
        from flows.prefect_api import ready

        with refusals(), ready():
            try:
                state = flow(**values, return_state=True)
                result = state.result()
            except Exception as exc:  # Prefect's parameter validation names the parameter and the rule
                if type(exc).__name__ == "ParameterTypeError":
                    refuse(str(exc))
                raise
        if as_json:
            print_json(result)
        else:
            out.print(result)
        _charge_line(spec, str(state.state_details.flow_run_id), as_json)

    doc = (inspect.getdoc(fn) or "").split("Args:")[0].strip()
    return click.Command(name, params=params, callback=callback, help=f"{summary}\n\n{doc}", short_help=summary)


def _charge_line(spec: Any, flow_run_id: str, as_json: bool) -> None:
    """The one line saying what the run charged and what is left (stderr with ``--json``)."""
    from dpcore.budget.charge_summary import run_charge_line
    from dpcore.budget.ledger import PrivacyLedger
    from dpcore.storage.settings import Settings
    from dpcore.storage.warehouse import Warehouse

    ledger = PrivacyLedger(Warehouse(Settings.from_env().warehouse))
    (err if as_json else out).print(run_charge_line(ledger, spec.dataset.name, flow_run_id), markup=False)


class OperatorCommand(click.Command):
    """An operator subcommand that imports its flow (and Prefect) only when it runs or shows its help."""

    def __init__(self, name: str):
        summary = OPERATOR_FLOWS[name][2]
        super().__init__(name, help=summary, short_help=summary)
        self._loaded = False

    def _load(self) -> None:
        if not self._loaded:
            real = _build(self.name)
            self.params, self.callback, self.help = real.params, real.callback, real.help
            self._loaded = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        self._load()
        return super().parse_args(ctx, args)

    def get_help(self, ctx: click.Context) -> str:
        self._load()
        return super().get_help(ctx)


def operator_command(name: str) -> click.Command:
    """The (lazily built) command of the operator flow ``name`` (see :data:`OPERATOR_FLOWS`)."""
    return OperatorCommand(name)
