"""Where a command writes (`--out`), checked before any record is read: a path typed empty, a
folder that cannot be written, or a file a sweep wrote is one line, not a late failure or a lost
record."""

from __future__ import annotations

from pathlib import Path


def out_path(text: str) -> Path:
    """--out as typed: Typer makes "" Path("."), this folder, where plot and coord-check then wrote
    without a word (and export, report said the folder could not be written)."""
    from lrtransfer.errors import UserError

    if not text.strip():  # " " too: plot made a folder named by a space and wrote there
        raise UserError(f"--out {text!r} is empty: give a path (--out PATH), or leave --out out for the command's "
                        "default (--help says it)")
    return Path(text)


def writable(out: Path, folder: bool) -> Path:
    """`--out` checked before any record is read: the folder it writes into made if missing, and
    writable, or one line saying why not (exit 2)."""
    from lrtransfer.errors import UserError
    from lrtransfer.store import probe_writable

    try:
        if not folder and out.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        probe_writable(out if folder else out.parent)
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror}); choose a writable path") from None
    if not folder and out.exists() and (out.name in SWEEP_FILES or ".hydra" in out.parts
                                        or (out.parent / "record.json").exists()):
        raise UserError(f"--out {out}: a file a sweep wrote (a job's record, checkpoint or log), which this would "
                        "overwrite; choose another path")
    return out


SWEEP_FILES = ("record.json", "checkpoint.pt", "multirun.yaml", "adaptive.json", "job.log")
