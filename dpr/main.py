"""The ``dpr`` console command (installed by ``pip install -e .`` as a project script)."""
from __future__ import annotations

import os
import sys

import click

from .budget_cmd import budget
from .dataset_cmd import dataset_group
from .plan_cmd import plan
from .run_cmd import OPERATOR_FLOWS, operator_command, run
from .server_cmd import server_group
from .spec_cmd import spec_group
from .validation_cmd import validation_group


class _Lazy(click.Group):
    """Builds the operator subcommands (which import Prefect flows) only when one is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *OPERATOR_FLOWS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in OPERATOR_FLOWS:
            return operator_command(name)
        return super().get_command(ctx, name)


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--home", type=click.Path(file_okay=False), envvar="DPR_HOME",
              help="Where the warehouse, ledger and bundles live (default: $DPR_HOME, else ./var).")
def cli(home: str | None) -> None:
    """The data owner's command line: from a CSV to a private release.

    \b
    Typical session:
      dpr spec draft mydata.csv --id person_id -o my.yaml   # then edit the marked lines
      dpr spec check my.yaml --data
      dpr dataset add mydata --spec my.yaml                 # the data owner registers the name
      dpr plan my.yaml
      dpr run my.yaml
      dpr budget
      dpr validation show --spec my.yaml                    # which rows broke which rule (owner only)

    \b
    `dpr server start` keeps one local Prefect server that later commands reuse (fast operator
    queries; runs visible in its UI); without it each run starts a temporary one.

    \b
    Exit codes: 0 success; 2 refused (bad spec, input, flag or request, or over the budget, a home
    that is not writable, DPR_MEMORY_LIMIT below 192 MiB: nothing charged unless the message says
    so); 1 an environment failure (full disk, symlink loop, I/O error, a damaged warehouse or
    write-ahead log, the Prefect server gone, DuckDB out of memory: its cause in one line, the
    details in the log file it names) or an unexpected error.
    """
    if home:
        os.environ["DPR_HOME"] = home


cli.add_command(spec_group)
cli.add_command(dataset_group)
cli.add_command(plan)
cli.add_command(run)
cli.add_command(budget)
cli.add_command(server_group)
cli.add_command(validation_group)


def main() -> None:
    """Console entry point (an environment failure escaping a command: one line, exit 1).

    A command that ends with an error line (exit 1 or 2) leaves through :func:`_leave`: without the
    interpreter's teardown, which after a failed flow run printed C extensions' reference-leak reports
    (``nanobind: leaked 28 instances!``, objects still held by the failure's traceback) under the one line.
    So does a command that succeeded after loading Prefect (its teardown only cost seconds). An unexpected
    error (a traceback) exits normally.
    """
    from dpcore.run.errors import environment_failure

    try:
        try:
            cli(prog_name="dpr")
        except Exception as exc:
            environment_failure(exc)
            raise
    except SystemExit as done:
        if isinstance(done.code, int) and done.code != 0:
            _leave(done.code)
        if done.code in (0, None) and "prefect" in sys.modules:
            # a command that ran a flow (a release, an operator query): its files are closed and its warehouse
            # released by then; the interpreter's teardown of Prefect, pandas, great-expectations and matplotlib
            # took about 2 s of a small release on a quiet machine, 6 s under load (issue 48 §6, the 'finish' step
            # of benchmarks/commands.py --part small), as flows.release_pipeline's own command line skips it
            _leave(0)
        raise


def _leave(code: int) -> None:
    """Exit with ``code`` after the atexit handlers (Prefect's log flush, the warehouse lease's close, the
    temporary server's stop) and a flush of the standard streams, skipping the modules' finalisers."""
    import atexit
    import sys

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
