"""A mistyped command line (an unknown command or option, a value that is not a number) as one
line naming what was given and what is valid, like every other bad input; Typer's own report is
a usage block and a framed panel that names neither the bad value nor the valid options.

The exceptions are click's, which Typer vendors in recent releases and imports from click in
older ones: they are reached through `typer.BadParameter`'s own module, so either works.
"""

from __future__ import annotations

import difflib
import importlib

import typer

ERRORS = importlib.import_module(typer.BadParameter.__module__)  # click's exceptions, wherever Typer keeps them


def is_help(error: Exception) -> bool:
    """`lrtransfer` with no command: Typer printed the help while raising this, as its own exit does."""
    return type(error).__name__ == "NoArgsIsHelpError"


def refuse_flags(ctx, overrides: list[str]) -> None:
    """A command that takes Hydra overrides receives the options it does not know among them (it
    lets unknown options through for them): one that starts with '-' is an option, never an override."""
    for arg in overrides:
        if arg.startswith("-"):
            raise ERRORS.NoSuchOption(arg.split("=", 1)[0], ctx=ctx)


def one_line(error: Exception) -> str:
    """A click UsageError as one line: the bad value or name, the valid choices, where to read more."""
    ctx = getattr(error, "ctx", None)
    hint = f" ({ctx.command_path} -h)" if ctx is not None else ""
    name = getattr(error, "command_name", None)
    if name is None and str(error.message).startswith("No such command '"):  # click before 8.4
        name = str(error.message).split("'")[1]
    if name is not None and hasattr(getattr(ctx, "command", None), "list_commands"):
        valid = ctx.command.list_commands(ctx)
        return f"unknown command {name!r}; {_did_you_mean(name, valid)}valid: {', '.join(valid)}{hint}"
    if isinstance(error, ERRORS.NoSuchOption) and ctx is not None:
        valid = _options(ctx)
        root = ctx.find_root()  # the app's own option (`summary --version`) is no typo of the command's (--all-versions)
        own = root is not ctx and error.option_name in {o for p in root.command.get_params(root) for o in p.opts}
        return (f"unknown option {error.option_name} for {ctx.command_path}; "
                f"{'' if own else _did_you_mean(error.option_name, valid)}valid: {', '.join(valid)}{hint}")
    given, param = _given(error), getattr(error, "param", None)
    if given is not None and param is not None:
        return f"{max(param.opts, key=len)} {given!r}: {' '.join(str(error.message).split())}{hint}"
    return " ".join(error.format_message().split()) + hint


def _did_you_mean(name: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.7)
    return f"did you mean {close[0]}? " if close else ""


def _options(ctx) -> list[str]:
    """Each option of the command by its longest name, then the help flags."""
    names = {max(p.opts, key=len) for p in ctx.command.get_params(ctx)
             if p.param_type_name == "option" and not getattr(p, "hidden", False)}
    helps = sorted(ctx.help_option_names, key=len)  # -h/--help, said as one
    return sorted(names - set(helps)) + (["/".join(helps)] if helps else [])


def _given(error: Exception):
    """The value a conversion refused, where the refusal kept it (Typer's pydantic-based conversion
    does, in its cause; click's own types already name it in the message)."""
    errors = getattr(error.__cause__, "errors", None)
    if not callable(errors):
        return None
    try:
        return errors()[0].get("input")
    except (IndexError, TypeError, AttributeError):
        return None
