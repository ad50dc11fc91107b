"""Shell completion of `lrtransfer sweep` overrides: `mo<TAB>` -> `model=`, `model=<TAB>` -> its options.

Typer's `--install-completion` / `--show-completion` install the script; the
candidates come from `lrtransfer.cli.catalog` (Hydra's completion engine). Hydra's own
script cannot be used: it calls `lrtransfer -sc query=bash`, which knows no
subcommand. Typer's bash script needs two changes for overrides, the same two
Hydra's own script makes: `=` leaves COMP_WORDBREAKS (else bash splits
`model=ml` into three words, and readline replaces only the text after `=`), and
no space follows a candidate that ends in `=` or `/` (a group waits for its option).
Only typer is imported here: the CLI imports this module at start-up.
"""

from __future__ import annotations

from typing import List

import typer

BASH_SCRIPT = r"""
%(complete_func)s() {
    local IFS=$'\n'
    COMPREPLY=( $( env COMP_WORDS="${COMP_WORDS[*]}" \
                   COMP_CWORD=$COMP_CWORD \
                   %(autocomplete_var)s=complete_bash $1 ) )
    if [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *[=/] ]]; then
        compopt -o nospace
    fi
    return 0
}

COMP_WORDBREAKS=${COMP_WORDBREAKS//=}
complete -o default -F %(complete_func)s %(prog_name)s
"""


def use_override_aware_bash_script() -> None:
    """Make Typer's --show-completion / --install-completion write BASH_SCRIPT for bash.

    Typer keeps its scripts in a private table (typer 0.12 to 0.29 at least); if it
    moves, completion falls back to Typer's own script, which completes commands
    and options but splits overrides at `=`.
    """
    try:
        from typer._completion_shared import _completion_scripts
    except ImportError:  # pragma: no cover - a Typer without the table
        return
    _completion_scripts["bash"] = BASH_SCRIPT


def complete_override(ctx: typer.Context, args: List[str], incomplete: str) -> List[str]:
    """Typer's autocompletion callback for a command's OVERRIDES argument."""
    from lrtransfer.cli.catalog import complete

    # the overrides typed before this one: Typer has parsed them into the argument
    previous = [*(ctx.params.get("overrides") or ()), *args]
    return complete(previous, incomplete)
