"""trainer=command: each run of a job is a process of the user's own command, in its own run folder.

`trainer.command` is a template over the run's values (`template.py`): one run of
`trainer.command='python train.py --n_embd={width} --learning_rate={lr} --seed={seed}
--out_dir={run_dir}'` at width 64, LR 2^-8 and seed 1 runs `python train.py --n_embd=64
--learning_rate=0.00390625 --seed=1 --out_dir=<job folder>/runs/log2_lr_-8.0_seed_1`. The
command line is split like a shell's words (`shlex`) before its placeholders are filled, so a
value never splits or joins arguments, and it runs without a shell (`bash -c '...'` where
one is wanted). The losses come from what the script writes (`readers.py`).

The parameterization, model, optimizer and data are the script's own: the engine's groups
(`ENGINE_GROUPS`) are left out of such a job's record and identity, and setting one of them on
the command line is refused (`refuse_engine_keys`). A job's identity holds the command
template, its values, and the content of each file the command names (and of
`trainer.sources`): an edit of the script retrains, a re-run does not. `label`, `cwd` and
`parallel` say how and where, not what: no part of it.

The command is the user's code, as `model.target` is: it runs with the user's rights. Nothing
read from a results folder ever runs one: a job runs the command of the config it was given.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import importlib.util
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

from lrtransfer.options.contents import fingerprint
from lrtransfer.options.schema import ConfigError, location
from lrtransfer.options.trainer import ENGINE_GROUPS, readers, template

# The default pattern: `step 10 loss 2.31`, `step=10, loss=2.31`, `iter 10: loss 2.31, time ...`,
# `step 100: train loss 2.1, val loss 2.2` (the val loss is the run's eval_loss).
NUMBER = r"[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|NaN|inf|Inf)"
DEFAULT_PATTERN = (rf"\b(?:step|iter)[\s=:]*(?P<step>\d+)[\s,:;|]+(?:train[\s_/]?)?loss[\s=:]+(?P<loss>{NUMBER})"
                   rf"(?:[\s,;|]+(?:val|eval|valid|validation)[\s_/]?loss[\s=:]+(?P<eval_loss>{NUMBER}))?")
MAX_PARALLEL = 4096
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class CommandOptions:
    name: str = "command"
    command: Optional[str] = None  # the command line of one run, with placeholders: {width} {lr} {seed} {run_dir} ...
    label: Optional[str] = location(None)  # a readable name for the command ("nanoGPT muP"), wherever a group is named
    cwd: Optional[str] = location(None)  # where each run starts; null: where the sweep was started
    env: Dict[str, str] = field(default_factory=dict)  # extra environment variables, with placeholders
    vars: Dict[str, Any] = field(default_factory=dict)  # the user's own values: {trainer.vars.NAME}; may be swept
    sources: List[str] = field(default_factory=list)  # more files or folders whose content is part of a job's identity
    loss_pattern: Optional[str] = DEFAULT_PATTERN  # standard output: named groups loss, step, eval_loss
    diverged_pattern: Optional[str] = None  # a line of output (either stream) that says the run diverged
    metrics_file: Optional[str] = None  # a CSV / JSON-lines file or TensorBoard events, in {run_dir}: read instead
    metrics_format: str = "auto"  # auto (by its name: .csv, .jsonl/.json, else TensorBoard) | csv | jsonl | tensorboard
    loss_column: Optional[str] = None  # the metrics file's training loss (a column, a key, a tag)
    step_column: Optional[str] = None  # its step; null: `step` where there is one, else the row number
    eval_column: Optional[str] = None  # its held-out loss, if any
    parallel: int = location(1)  # runs of a job at a time on this machine; the machine's GPUs are shared among them

    def check(self) -> None:
        if not (self.command or "").strip():
            raise ConfigError("trainer=command needs trainer.command, the command line of one run, e.g. "
                              "trainer.command='python train.py --lr={lr} --seed={seed} --out_dir={run_dir}'")
        words(self.command)
        if self.metrics_file is None:
            if self.loss_pattern is None:
                raise ConfigError("trainer=command reads no loss: set trainer.loss_pattern (its standard output) "
                                  "or trainer.metrics_file with trainer.loss_column")
            readers.compile_pattern(self.loss_pattern, "trainer.loss_pattern")
        else:
            if self.metrics_format not in readers.FORMATS:
                raise ConfigError(f"trainer.metrics_format={self.metrics_format!r} is not one of: "
                                  f"{', '.join(readers.FORMATS)}")
            if not self.loss_column:
                raise ConfigError(f"trainer.metrics_file={self.metrics_file} needs trainer.loss_column, the "
                                  "column (or key, or TensorBoard tag) of its training loss")
            kind = readers.table_format(self.metrics_file, self.metrics_format)
            if kind == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
                raise ConfigError(f"trainer.metrics_file={self.metrics_file} is read as TensorBoard events, which "
                                  "needs the tensorboard package: pip install 'lrtransfer[tensorboard]' (or name a "
                                  ".csv or .jsonl file)")
        if self.diverged_pattern is not None:
            readers.compile_pattern(self.diverged_pattern, "trainer.diverged_pattern", required=())
        if not 1 <= self.parallel <= MAX_PARALLEL:
            raise ConfigError(f"trainer.parallel={self.parallel} is out of range; valid: 1 .. {MAX_PARALLEL} runs at once")
        for key in self.env:
            if not ENV_NAME.fullmatch(str(key)):
                raise ConfigError(f"trainer.env.{key}: not an environment variable's name (letters, digits, _)")

    def check_with(self, cfg) -> None:
        """Every placeholder names a key, the working folder exists and the program is found, before any run."""
        config = flat(cfg)
        grid = {k.removeprefix("grid."): v[0] for k, v in config.items() if k.startswith("grid.") and v}  # a first run's
        values = run_values(config, log2_lr=cfg.lr.log2_min, seed=cfg.seed, grid=grid, run_dir="/run_dir")
        launch = render(self, values)
        if not Path(launch.cwd).is_dir():
            raise ConfigError(f"trainer.cwd={launch.cwd}: no such folder")
        program = launch.argv[0]
        if find_program(program, launch.cwd, launch.env) is None:
            where = f"in {launch.cwd}" if "/" in program else "on PATH"
            raise ConfigError(f"trainer.command: program '{program}' not found {where} (or not executable); give "
                              "its full path, or set trainer.cwd / trainer.env.PATH")

    @staticmethod
    def contents(node: dict) -> dict:
        """What the files the command names hold (`config.identity.semantic`): an edit retrains."""
        return {"files": named_files(node)} if named_files(node) else {}


OPTIONS = CommandOptions


@dataclass
class Launch:
    """One run's process, ready to start."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


def words(command: str) -> list[str]:
    """The command's words, as a shell splits them, each placeholder whole (`{width * 2}` has spaces)."""
    pieces = template.parts(command, "trainer.command")
    masked = "".join(f"\0{i}\0" if held else text.replace("{", "{{").replace("}", "}}")
                     for i, (held, text) in enumerate(pieces))
    try:
        out = shlex.split(masked)
    except ValueError as e:
        raise ConfigError(f"trainer.command={command!r} cannot be split into words ({e})") from None
    if not out:
        raise ConfigError("trainer.command is empty")
    return [re.sub("\0([0-9]+)\0", lambda m: "{" + pieces[int(m.group(1))][1] + "}", w) for w in out]


def render(options: CommandOptions, values: dict) -> Launch:
    """The run's command line, working folder and environment, its placeholders filled from `values`."""
    argv = [template.render(w, values, "trainer.command") for w in words(options.command)]
    cwd = str(Path(template.render(options.cwd, values, "trainer.cwd")).expanduser().resolve()) if options.cwd \
        else os.getcwd()
    env = {str(k): template.render(str(v), values, f"trainer.env.{k}") for k, v in options.env.items()}
    if options.metrics_file is not None:
        template.render(options.metrics_file, values, "trainer.metrics_file")
    return Launch(argv, cwd, env)


def metrics_path(options: CommandOptions, values: dict, run_dir: Path) -> Path:
    """The metrics file of a run: relative paths are in its run folder."""
    path = Path(template.render(options.metrics_file, values, "trainer.metrics_file")).expanduser()
    return path if path.is_absolute() else run_dir / path


def run_values(config: dict, *, log2_lr: float, seed: int, grid: dict, run_dir) -> dict:
    """What a run's placeholders read: the config's keys (dotted) and the run's own values."""
    return {**config, "lr": 2.0**log2_lr, "log2_lr": float(log2_lr), "seed": int(seed), "run_dir": str(run_dir),
            **grid}


def flat(node, prefix: str = "") -> dict:
    """A config (typed or a resolved mapping) as {dotted key: value}, less the engine's groups."""
    if hasattr(node, "__dataclass_fields__"):
        node = {f.name: getattr(node, f.name) for f in fields(node)}
    out = {}
    for k, v in node.items():
        if not prefix and k in (*ENGINE_GROUPS, "hydra"):
            continue
        if isinstance(v, dict) or hasattr(v, "__dataclass_fields__"):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v.value if isinstance(v, Enum) else v
    return out


def find_program(program: str, cwd: str, env: dict[str, str]) -> str | None:
    """Where `program` is: a path (relative to `cwd`) to an executable file, or a name on PATH."""
    if "/" in program:
        path = Path(cwd) / Path(program).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH", os.environ.get("PATH", os.defpath)))


def named_files(node: dict) -> dict[str, str]:
    """Each file the command template names (an argument, or the value of `--key=value`; the program
    too where it is a path), and each of `sources`, by content: relative to `cwd`."""
    cwd = Path(os.path.expanduser(str(node.get("cwd") or ".")))
    try:
        tokens = shlex.split(str(node.get("command") or ""))
    except ValueError:
        return {}
    found = {}
    for i, token in enumerate(tokens):
        for candidate in (token, token.partition("=")[2]):
            if not candidate or "{" in candidate or (i == 0 and "/" not in candidate):
                continue
            path = cwd / Path(candidate).expanduser()
            if path.is_file():
                found[candidate] = fingerprint(str(path))
    for source in node.get("sources") or []:
        found[f"source:{source}"] = fingerprint(str(cwd / Path(str(source)).expanduser()))
    return found


def refuse_engine_keys(overrides: list[str]) -> None:
    """Under trainer=command the engine's groups compute nothing: a key of one given on the command
    line is a mistake (the script has its own settings), refused in one line."""
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        group = re.split(r"[./@]", key, maxsplit=1)[0]
        if group in ENGINE_GROUPS:
            raise ConfigError(f"{key}: trainer=command runs your own script, which has its own {group}; lrtransfer's "
                              f"engine keys (model.*, param.*, optim.*, data.*) do nothing there. Pass the setting "
                              "in trainer.command (or trainer.vars.NAME) instead")
