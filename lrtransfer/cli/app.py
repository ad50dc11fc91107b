"""The `lrtransfer` command.

Only typer is imported at module level: torch, Hydra, pandas and matplotlib load
inside the command that needs them, so `lrtransfer --help` answers at once.
"""

from __future__ import annotations

import sys

import typer

from lrtransfer.cli import checking, importing, reading, show, sweeping, tuning, usage
from lrtransfer.cli.completion import use_override_aware_bash_script

app = typer.Typer(
    help="Does my learning rate transfer when I scale this model up? Sweep, summarise, plot.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command; sweep keeps -h for its keys
)
use_override_aware_bash_script()

def _version(asked: bool) -> None:
    """What a bug report needs, read from the installed packages' metadata: importing torch would
    take a second."""
    if not asked:
        return
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from lrtransfer import __version__

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    typer.echo(f"lrtransfer {__version__} (torch {installed('torch')}, hydra-core {installed('hydra-core')}, "
               f"python {platform.python_version()})")
    raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the versions of lrtransfer, torch, Hydra and Python, and exit."),
) -> None:
    """Does my learning rate transfer when I scale this model up? Sweep, summarise, plot."""


# The commands, in the order `lrtransfer --help` lists them
app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": ["--help"]})(
    sweeping.sweep)
app.command()(reading.summary)
app.command()(reading.plot)
app.command()(reading.report)
app.command()(reading.predict)
app.command()(reading.export)
app.command("list")(reading.list_)
app.command("coord-check", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(
    checking.coord_check)
app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(checking.inspect)
app.command("import")(importing.import_table)
app.command("tune", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(tuning.tune)


def main() -> None:
    """Entry point: run the app; known user errors become one line and exit code 2 (a fault such as
    a full disk: 1)."""
    import os
    import warnings

    from lrtransfer.errors import new_scope
    from lrtransfer.sweeps.messages import describe

    # Before torch loads OpenMP: idle threads sleep instead of spin-waiting. With the
    # default (active) policy, two threads of one process slowed small ops 10-150x
    # whenever anything else used a core (measured: 46.8 s -> 0.3 s for a small job).
    # Launcher workers inherit the variable.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not getattr(warnings.showwarning, "once", False):
        warnings.showwarning = show.each_warning_once(warnings.showwarning)

    new_scope(command=True)  # each warning once a command (and once a job of a sweep)
    try:
        code = app(prog_name="lrtransfer", standalone_mode=False)  # a usage error comes here as itself: one line
    except usage.ERRORS.UsageError as e:
        if not usage.is_help(e):
            typer.echo(f"error: {usage.one_line(e)}", err=True)
        sys.exit(e.exit_code)
    except typer.Abort:  # end of input at a prompt
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(n) and --help come back as their code


if __name__ == "__main__":
    main()
