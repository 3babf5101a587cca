"""The README and the guide (docs/, a MkDocs site) against the code.

- README.md stays a front door: at most 250 lines, and its relative links lead to files.
- ``mkdocs build --strict`` builds the site: a broken link, a page missing from the nav or a
  nav entry without a page fails.
- Every ```python block of README.md and of each guide page runs: a page's blocks in order,
  in one fresh namespace, in a subprocess whose working directory is a new empty folder, so a
  page cannot drift from the code. A block that cannot run here (it needs a GPU, a Ray
  cluster, a file of yours) is preceded by ``<!-- no-run: why -->``; keep those few.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 250

# Internal plans live in docs/plans/ but are not part of the guide (mkdocs.yml excludes them).
PAGES = [README] + sorted(p for p in DOCS.rglob("*.md") if "plans" not in p.relative_to(DOCS).parts)

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)(.*)$")
_NO_RUN = re.compile(r"<!--\s*no-run\b")


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line number, source)`` of each ```python block of ``path`` that runs: not
    preceded (blank lines aside) by a ``<!-- no-run: ... -->`` comment."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if lang == "python":
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            skipped = k >= 0 and _NO_RUN.search(lines[k])
            if not skipped:
                body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
                blocks.append((i + 2, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


# Runs the blocks of one page in one namespace; each block compiled under the page's name with
# its lines padded, so a traceback points at the page's own line.
_RUNNER = """
import sys, json
page, blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for line, source in blocks:
    code = compile("\\n" * (line - 1) + source, page, "exec")
    exec(code, namespace)
"""


def test_readme_is_a_front_door():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; the guide (docs/) takes the rest"


def test_readme_links_lead_somewhere():
    text = README.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"README.md links to files that do not exist: {missing}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed (the test extra has it)")
def test_site_builds_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                        "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    assert (tmp_path / "site" / "index.html").exists()


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=_page_id)
def test_code_blocks_run(page, tmp_path):
    import json

    blocks = python_blocks(page)
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps([str(page), blocks]),
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, (f"a python block of {_page_id(page)} failed (the traceback's line numbers are the "
                               f"page's; mark a block that cannot run here with <!-- no-run: why -->):\n"
                               f"{r.stdout[-4000:]}\n{r.stderr[-8000:]}")


def test_no_run_blocks_say_why():
    """Each ``<!-- no-run -->`` marker gives its reason beside it."""
    bare = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = _NO_RUN.search(line)
            if m and not re.search(r"no-run\s*:\s*\S", line):
                bare.append(f"{_page_id(page)}:{n}")
    assert not bare, f"no-run markers without a reason (write <!-- no-run: why -->): {bare}"
