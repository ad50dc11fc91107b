"""The documentation: the site builds strict-clean, the getting-started commands run, links resolve.

- `mkdocs build --strict` succeeds (no broken link or anchor, no page missing from the
  nav or the nav naming a page that is missing), into a temporary folder, and the API
  page holds the five functions mkdocstrings generates from `lrtransfer/api.py`.
- The README's set-up (`make demo`, at small size, the install being done), then every
  command in `docs/getting-started.md`'s bash blocks, in order, as a new user types it:
  each in a new shell whose PATH holds no virtual environment (`fresh_shell`), in a
  folder holding the installed `.venv`, after the page's own shell lines (`source
  .venv/bin/activate`); `lrtransfer sweep ...` with the overrides of `SMALL` appended
  (later overrides win in Hydra). The README's first commands are among them. Lines
  whose program is in `SKIPPED` are not run, for the reason given there; any other
  program fails the test, so the page cannot grow a command nothing runs.
- README.md is the landing page (at most 250 lines), and every relative link in
  README.md and docs/*.md points to a file that exists (and an anchor into a Markdown
  file to one of its headings, as GitHub names them).
"""

from __future__ import annotations

import html
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent  # the venv pytest runs in: its mkdocs and lrtransfer
README_MAX_LINES = 250

# Programs in getting-started.md's bash blocks that the test does not run, and why.
SKIPPED = {
    "make": "`make demo` runs before the page's commands, once, at small size (the install done); "
            "`make test` runs the whole test suite, this file included",
    "pip": "installs the package; the test runs in the environment it is installed in",
}
SHELL_LINES = ("source",)  # set up the shell the later lines run in: each later line runs after them
# Appended to every `lrtransfer sweep`: 3 widths x 6 LRs x 20 steps (seconds, not a minute).
# The grid reaches up to 2^0 so that at 20 steps no width's optimum sits on the grid's edge,
# and `predict` has a drift to extrapolate.
# widths spanning 4 doublings, as the default study's do: `predict --width 4096` reaches no further past them
SMALL = ["width=16,64,256", "train.steps=20", "lr.log2_min=-10", "lr.log2_max=0", "lr.log2_step=2",
         "engine.progress=false"]


def _env() -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_WAIT_POLICY": "PASSIVE"}


# --- (a) the site builds -------------------------------------------------------------------

def test_site_builds_strict(tmp_path):
    mkdocs = BIN / "mkdocs"
    assert mkdocs.exists(), f"no {mkdocs}: pip install -e '.[docs]' (the test extra has it too)"
    site = tmp_path / "site"
    out = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env=_env())
    assert out.returncode == 0, out.stdout + out.stderr
    for page in sorted(DOCS.glob("*.md")):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.exists(), f"{page.name} was not built"
    api = (site / "api" / "index.html").read_text()
    for name in ("sweep", "plan", "load", "summarize", "predict"):
        assert f'id="lrtransfer.api.{name}"' in api, f"the API page lacks lrtransfer.api.{name}"
    text = html.unescape(re.sub(r"<[^>]+>", "", api))
    # a signature formatter (black, in the docs extra) breaks long signatures, one parameter a line
    assert "sweep(\n    overrides: str | Sequence[str] = (),\n    *,\n    rerun: bool = False," in text, text
    for internal in ("error switch", "lazily", "__init__"):  # notes for the code's reader stay in the code
        assert internal not in text, f"the API page says {internal!r}"


# --- (b) the getting-started commands and the README's set-up run in a new shell ------------

def bash_blocks(page: Path) -> list[list[str]]:
    """The command lines of each of a Markdown page's ```bash blocks (continuations joined, comments kept)."""
    blocks, block, pending = [], None, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            block = [] if block is None and line.strip() == "```bash" else None
            if block is not None:
                blocks.append(block)
            continue
        if block is None or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        block.append(pending + line)
        pending = ""
    return blocks


def bash_commands(page: Path) -> list[str]:
    return [line for block in bash_blocks(page) for line in block]


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A folder as a new user's checkout is after the set-up: the Makefile, and `.venv`, the
    environment this test runs in (skipped where that is no virtual environment)."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").exists() or shutil.which("make", path="/usr/bin:/bin") is None:
        pytest.skip(f"{venv} is not a virtual environment (no bin/activate), or no make")
    (tmp_path / ".venv").symlink_to(venv)
    (tmp_path / "Makefile").symlink_to(ROOT / "Makefile")
    return tmp_path


def fresh_shell(home: Path) -> dict[str, str]:
    """A new shell's environment: no virtual environment on the PATH, nothing of this process's."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_lines(lines: list[str], folder: Path, then=None) -> list[str]:
    """Each `lrtransfer` line in a new bash (after the shell lines before it), at small size, then
    `then(argv, result)`; shell lines and SKIPPED programs are not run on their own. Returns what ran."""
    shell, ran = [], []
    for line in lines:
        words = shlex.split(line, comments=True)
        if not words or words[0] in SKIPPED:
            continue
        if words[0] in SHELL_LINES:
            shell.append(line)
            continue
        assert words[0] == "lrtransfer", f"a page runs `{words[0]}`, which this test neither runs nor skips: {line}"
        argv = [*words[1:], *(SMALL if words[1] == "sweep" else [])]
        script = "\n".join([*shell, shlex.join(["lrtransfer", *argv])])
        out = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=folder, capture_output=True,
                             text=True, timeout=300, env=fresh_shell(folder))
        assert out.returncode == 0, f"`{line.split('#')[0].strip()}` failed:\n{out.stdout}\n{out.stderr}"
        assert "error:" not in out.stderr, out.stderr
        if then is not None:
            then(argv, out)
        ran.append(argv[0])
    return ran


def check(folder: Path, argv: list[str], out: subprocess.CompletedProcess) -> None:
    """What each command of the first study says or leaves behind (after `make demo` made its records)."""
    records = list(folder.glob("results/width/*/record.json"))
    if argv[0] == "sweep" and "--plan" in argv:
        assert "nothing to run" in out.stdout and len(records) == 3, out.stdout  # it trains nothing
    elif argv[0] == "sweep":
        assert "0 job(s) ran, 3 already done" in out.stdout and len(records) == 3, out.stdout
    elif argv[0] == "summary":
        assert "drift" in out.stdout, out.stdout
    elif argv[0] == "plot":
        assert list((folder / argv[1]).glob("figures/*.png")), "plot wrote no figure"
    elif argv[0] == "report":
        assert (folder / argv[1] / "report.html").exists()
    elif argv[0] == "predict":
        assert "95% prediction interval" in out.stdout, out.stdout


def test_readme_set_up_and_the_first_commands_run_in_a_new_shell(checkout):
    """The README's set-up, `make demo` (the install already done: `-o` leaves it; ARGS at small
    size), then getting-started.md's commands as written, each in a new shell: nothing but the
    pages puts lrtransfer on the PATH. The README's first commands are among them, in order."""
    setup, first = bash_blocks(ROOT / "README.md")[:2]
    assert [shlex.split(c, comments=True)[:2] for c in setup] == [["make", "demo"], ["make", "test"]], setup
    guide = bash_commands(DOCS / "getting-started.md")
    words = lambda lines: [shlex.split(c, comments=True) for c in lines]  # noqa: E731
    assert [w for w in words(guide) if w in words(first)] == words(first), "README's first commands: not the guide's"
    assert ["make", "demo"] in words(guide), "the guide lost its set-up commands"

    demo = subprocess.run(["make", "-o", ".venv/.installed", "demo", f"ARGS={' '.join(SMALL)}"], cwd=checkout,
                          capture_output=True, text=True, timeout=300, env=fresh_shell(checkout))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert list(checkout.glob("results/width/figures/*.png")), demo.stdout
    ran = run_lines(guide, checkout, then=lambda argv, out: check(checkout, argv, out))
    assert ran == ["sweep", "sweep", "summary", "plot", "report", "predict"], ran  # `make test` runs the suite: not here


# --- (c) the README is a landing page; links resolve ----------------------------------------

def test_readme_is_a_landing_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*?\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The Markdown outside fenced code blocks and inline code."""
    out, block = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            block = not block
            continue
        if not block:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub (and here MkDocs) names them."""
    found, seen = set(), {}
    for line in prose(page.read_text().replace("`", "")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto:


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(page):
    links = relative_links(page)
    bad = []
    for target in links:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not bad, f"{page.name}: " + "; ".join(bad)
    if page.name == "README.md":
        assert any(t.startswith("docs/") and t.split("#")[0].endswith(".md") for t in links), "README links no docs page"


def test_no_page_holds_a_placeholder():
    """A number or paragraph left to fill in (an all-caps marker, TODO, TBD) never reaches a reader."""
    marker = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:PLACEHOLDER|NOTE|TODO)\b|\bTODO\b|\bTBD\b|\bFIXME\b")
    found = [f"{page.name}: {m.group(0)}" for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
             for m in marker.finditer(page.read_text())]
    assert not found, found


def test_every_figure_is_on_a_page():
    text = "".join(p.read_text() for p in DOCS.glob("*.md"))
    unused = [png.name for png in sorted(DOCS.glob("*.png")) if f"]({png.name}" not in text]
    assert not unused, f"figures in docs/ that no page shows: {unused}"


def test_the_security_section_says_what_runs_code_and_what_never_does():
    """Issue 40, case 9: the model files run; nothing read from a results or data folder does. The
    section is linked from the README and Getting started."""
    section = (ROOT / "docs" / "troubleshooting.md").read_text().partition("\n## Security\n")[2]
    for said in ("`model.target` and `model.config`", "imports its parent packages", "results folder runs code",
                 "data folder runs code", "weights_only=True", "allow_pickle=False"):
        assert said in section, said
    for page in ("README.md", "docs/getting-started.md"):
        assert "troubleshooting.md#security" in (ROOT / page).read_text(), page
