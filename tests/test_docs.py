"""The documentation: the site builds strict-clean, the getting-started commands run, links resolve.

- `mkdocs build --strict` succeeds (no broken link or anchor, no page missing from the
  nav or the nav naming a page that is missing), into a temporary folder, and the API
  page holds the five functions mkdocstrings generates from `lrtransfer/api.py`.
- Every command in `docs/getting-started.md`'s bash blocks is run, in order, at small
  size: `lrtransfer sweep ...` with the overrides of `SMALL` appended (later overrides win
  in Hydra) and its records in a temporary folder; the analysis commands pointed at that
  folder. Lines whose program is in `SKIPPED` are not run, for the reason given there;
  any other program fails the test, so the page cannot grow a command nothing runs.
- README.md is the landing page (at most 250 lines), and every relative link in
  README.md and docs/*.md points to a file that exists (and an anchor into a Markdown
  file to one of its headings, as GitHub names them).
"""

from __future__ import annotations

import os
import re
import shlex
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
    "make": "`make demo` / `make test` install into .venv and then run the full default study "
            "(about a minute) or the whole test suite (this file included); the lrtransfer "
            "commands they run are on the page and run here at small size",
    "pip": "installs the package; the test runs in the environment it is installed in",
}
# Appended to every `lrtransfer sweep`: 3 widths x 6 LRs x 20 steps (seconds, not a minute).
# The grid reaches up to 2^0 so that at 20 steps no width's optimum sits on the grid's edge,
# and `predict` has a drift to extrapolate.
SMALL = ["width=16,32,64", "train.steps=20", "lr.log2_min=-10", "lr.log2_max=0", "lr.log2_step=2",
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


# --- (b) the getting-started commands run ---------------------------------------------------

def bash_commands(page: Path) -> list[str]:
    """The command lines of a Markdown page's ```bash blocks (continuations joined, comments kept)."""
    commands, block, pending = [], False, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            block = line.strip() == "```bash"
            continue
        if not block or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


def small(argv: list[str], results: Path) -> list[str]:
    """`argv` (after `lrtransfer`) at small size, writing to and reading from `results`."""
    if argv[0] == "sweep":
        return [*argv, f"results_dir={results}", *SMALL]
    return [str(results / a[len("results/"):]) if a.startswith("results/") else a for a in argv]


def test_getting_started_commands_run(tmp_path):
    commands = bash_commands(DOCS / "getting-started.md")
    results = tmp_path / "results"
    ran, skipped = [], []
    for line in commands:
        words = shlex.split(line, comments=True)
        if not words:
            continue
        program = words[0]
        if program in SKIPPED:
            skipped.append(line)
            continue
        assert program == "lrtransfer", (
            f"getting-started.md runs `{program}`, which this test neither runs nor skips: {line}")
        argv = small(words[1:], results)
        out = subprocess.run([str(BIN / "lrtransfer"), *argv], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, env=_env())
        assert out.returncode == 0, f"`{line.split('#')[0].strip()}` failed:\n{out.stdout}\n{out.stderr}"
        assert "error:" not in out.stderr, out.stderr
        records = list(results.rglob("record.json"))
        if argv[0] == "sweep" and "--plan" in argv:
            assert not records, "`sweep --plan` trains nothing"
        elif argv[0] == "sweep":
            assert len(records) == 3, records
        elif argv[0] == "summary":
            assert "drift" in out.stdout, out.stdout
        elif argv[0] == "plot":
            assert list(Path(argv[1]).glob("figures/*.png")), "plot wrote no figure"
        elif argv[0] == "report":
            assert (Path(argv[1]) / "report.html").exists()
        elif argv[0] == "predict":
            assert "95% prediction interval" in out.stdout, out.stdout
        ran.append(argv[0])
    assert "sweep" in ran and len(ran) >= 5, f"the page's commands changed? ran {ran}"
    assert skipped, "the page lost its set-up commands (make demo, make test, pip install)"


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


def test_every_figure_is_on_a_page():
    text = "".join(p.read_text() for p in DOCS.glob("*.md"))
    unused = [png.name for png in sorted(DOCS.glob("*.png")) if f"]({png.name}" not in text]
    assert not unused, f"figures in docs/ that no page shows: {unused}"
