"""Run HIPS/autograd's own test suite against flowjit and JAX through thin autograd shims.

Issue 25 measures flowjit's function transforms with a suite nobody here wrote: autograd's tests,
whose ``check_grads`` checks every VJP and JVP against finite differences to second order. Each
module gets an ``autograd`` package (bench/autograd_peer/<module>/autograd, sharing
bench/autograd_peer/shared) that maps autograd's API onto the module's own transforms: grad,
vjp, jvp, jacrev, hessian, remat, and its NumPy namespace. A name the module lacks raises
AttributeError, so the test fails and is counted; the shims never differentiate by themselves.

Tiers (pinned by the lead; the issue's counts, JAX's with these lists is re-measured here):

- core (128 tests): test_core, test_scalar_ops, test_binary_ops, test_wrappers, test_graphs,
  test_jacobian, test_direct, test_tuple;
- extended (197): test_numpy, test_scipy;
- rest (reported, not scored): every other test file.

Usage::

    python -m bench.autograd_peer --setup                     # unpack the suite from the mirror
    python -m bench.autograd_peer --modules fj jax --tiers core extended rest --record
    python -m bench.autograd_peer --no-run ...                # tabulate the XML already in --out

The suite comes from the local git mirror of HIPS/autograd at a pinned commit (no network).
Each test file runs in its own pytest process (``-c /dev/null``: the suite's own configuration
wants pytest-xdist and pytest-cov), under a per-test and a per-file timeout, and writes JUnit
XML; the tables and the failures grouped by cause come from that XML. The recorded numbers use
flowjit's default compiled backend; ``--interpret`` (FLOWJIT_INTERPRET=1) is for quick looks.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

MIRROR = "/work/.mirror/HIPS+autograd/repo"
COMMIT = "bff107b8d71a444a1160deade3e1cbd0b92f4fa6"
SHIMS = Path(__file__).resolve().parent / "autograd_peer"

TIERS = {
    "core": ["test_core.py", "test_scalar_ops.py", "test_binary_ops.py", "test_wrappers.py",
             "test_graphs.py", "test_jacobian.py", "test_direct.py", "test_tuple.py"],
    "extended": ["test_numpy.py", "test_scipy.py"],
}
# Tests each scored tier collects at COMMIT with scipy installed: a different count means the
# suite or its collection changed, and the comparison with the issue's numbers no longer holds.
PINNED_COUNTS = {"core": 128, "extended": 197}
# The issue's JAX baseline on the same tiers, for the record.
ISSUE_JAX = {"core": "123/128", "extended": "184/197"}


def setup_suite(suite: Path, mirror: str = MIRROR, commit: str = COMMIT) -> str:
    """Unpack autograd at ``commit`` from the local mirror into ``suite`` (idempotent: a suite
    already unpacked at that commit is kept). Returns the commit."""
    stamp = suite / ".autograd-commit"
    if stamp.exists() and stamp.read_text().strip() == commit:
        return commit
    suite.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", mirror, "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(suite)], input=archive, check=True)
    stamp.write_text(commit + "\n")
    return commit


def tier_files(suite: Path, tier: str) -> list[str]:
    """The test files of ``tier``; ``rest`` is every test file of the suite in no other tier."""
    if tier in TIERS:
        return TIERS[tier]
    pinned = {f for files in TIERS.values() for f in files}
    return sorted(p.name for p in (suite / "tests").glob("test_*.py") if p.name not in pinned)


def _has_pytest_timeout() -> bool:
    try:
        import pytest_timeout  # noqa: F401
    except ImportError:
        return False
    return True


def run_file(suite: Path, module: str, test_file: str, out: Path, test_timeout: int, file_timeout: int,
             interpret: bool, extra: list[str]) -> Path:
    """Run one test file with ``module``'s shim first on the path; returns its JUnit XML (a
    stand-in recording the crash or the timeout when pytest wrote none)."""
    xml = out / f"{module}-{test_file.removesuffix('.py')}.xml"
    xml.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SHIMS / module), str(SHIMS / "shared"), str(suite / "tests")]))
    if interpret:
        env["FLOWJIT_INTERPRET"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(suite), "-p", "no:cacheprovider",
           "-q", f"--junitxml={xml}", test_file, *extra]
    if _has_pytest_timeout():
        cmd.append(f"--timeout={test_timeout}")
    try:
        proc = subprocess.run(cmd, cwd=suite / "tests", env=env, capture_output=True, text=True,
                              timeout=file_timeout)
        tail = (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        tail = f"the whole file exceeded {file_timeout}s"
    if not xml.exists():
        suite_el = ET.Element("testsuite")
        case = ET.SubElement(suite_el, "testcase", classname=test_file.removesuffix(".py"), name="<file>")
        last = tail.strip().splitlines()[-1] if tail.strip() else "?"
        ET.SubElement(case, "error", message=f"file did not run: {last}")
        ET.ElementTree(suite_el).write(xml)
    return xml


def _first_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[0].strip() if lines else "?"


def cause(message: str) -> str:
    """A short cause for one failing test from its JUnit message, specifics stripped so that
    failures of one origin group together."""
    msg = _first_line(message)
    m = re.search(r"has no attribute '(\w+)' \(autograd\.([\w.]+)\)", msg)
    if m:
        return f"missing function {m.group(2)}"
    m = re.search(r"cannot import name '(\w+)' from '([\w.]+)'", msg)
    if m:
        return f"missing function {m.group(2)}.{m.group(1)}"
    m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", msg)
    if m:
        return f"missing attribute {m.group(1)}.{m.group(2)}"
    if "Derivative (VJP) check" in msg:
        return "numerical mismatch: VJP against finite differences"
    if msg.startswith("AssertionError: Value mismatch"):
        return "numerical mismatch: value (JVP against finite differences, or check_equivalent)"
    if msg.startswith("AssertionError: VSpace mismatch"):
        return "result structure, shape or dtype differs (check_equivalent / check_vjp)"
    m = re.search(r"'([\w.]+)' object (?:has no attribute '(\w+)'|is not callable)", msg)
    if m:  # the type and the attribute say where: keep them
        what = f"has no attribute {m.group(2)}" if m.group(2) else "is not callable"
        return f"{msg.partition(':')[0].split('.')[-1]}: {m.group(1)} object {what}"
    if "Timeout" in msg:
        return "per-test timeout"
    head, _, rest = msg.partition(":")
    if not re.fullmatch(r"[\w.]*(Error|Exception|Warning|Exit|Failed)", head):
        head, rest = "failure", msg
    # numbers, addresses, quoted names and shapes vary between tests of one cause
    for pattern, repl in ((r"0x[0-9a-f]+|[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "N"),
                          (r"\[[^\]]*\]|\([^)]*\)|'[^']*'|\"[^\"]*\"|<[^>]*>", "…")):
        rest = re.sub(pattern, repl, rest)
    return f"{head.split('.')[-1]}: {rest.strip()[:100]}"


def summarize(xml: Path) -> tuple[Counter, dict[str, list[str]]]:
    """Outcome counts of one JUnit XML file (passed, failed, error, skipped, collected) and its
    failing and erroring tests grouped by cause."""
    counts: Counter = Counter()
    causes: dict[str, list[str]] = defaultdict(list)
    for case in ET.parse(xml).getroot().iter("testcase"):
        counts["collected"] += 1
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed" if bad.tag == "failure" else "error"] += 1
            causes[cause(bad.get("message") or bad.text or "")].append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, causes


def _versions() -> str:
    """What was measured: flowjit's commit (and whether its checkout had uncommitted changes),
    and the versions of JAX and NumPy."""
    from importlib import metadata

    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "absent"

    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (f"flowjit {head}{' with uncommitted changes' if dirty else ''}, jax {version('jax')}, "
            f"numpy {version('numpy')}, scipy {version('scipy')}")


def tabulate(results: dict, walls: dict, modules: list[str], tiers: list[str], commit: str, interpret: bool,
             show: int, measured: str | None = None) -> str:
    """The report: a table per tier (one row per module, one per file), a warning for collected
    counts that differ from the pinned ones, and each module's failures grouped by cause;
    ``measured`` names what ran (``_versions()`` taken when the run started; now if None)."""
    lines = [f"HIPS/autograd {commit[:12]} tests through bench/autograd_peer shims, "
             f"{'FLOWJIT_INTERPRET=1' if interpret else 'compiled (default backend)'}; "
             f"{measured or _versions()}.", ""]
    cols = ("collected", "passed", "failed", "error", "skipped")
    lines += ["| tier | module | " + " | ".join(cols) + " | wall s |", "|---" * (3 + len(cols)) + "|"]
    for tier in tiers:
        for m in modules:
            total = sum((results[m][f][0] for f in results[m] if f in results["_files"][tier]), Counter())
            wall = sum(walls[m][f] for f in results["_files"][tier] if f in walls[m])
            lines.append(f"| {tier} | {m} | " + " | ".join(str(total.get(c, 0)) for c in cols) + f" | {wall:.0f} |")
            if tier in PINNED_COUNTS and total["collected"] != PINNED_COUNTS[tier]:
                lines.append(f"| | **warning** | {tier} collected {total['collected']} tests for {m}, "
                             f"pinned {PINNED_COUNTS[tier]} | | | | |")
    lines += ["", f"The issue's JAX baseline: core {ISSUE_JAX['core']}, extended {ISSUE_JAX['extended']}.", ""]
    lines += ["Per file (passed/collected):", "", "| file | " + " | ".join(modules) + " |",
              "|---" * (1 + len(modules)) + "|"]
    for tier in tiers:
        for f in results["_files"][tier]:
            cells = [f"{results[m][f][0]['passed']}/{results[m][f][0]['collected']}" if f in results[m] else "-"
                     for m in modules]
            lines.append(f"| {tier}: {f.removesuffix('.py')} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in modules:
        for tier in tiers:
            grouped: dict[str, list[str]] = defaultdict(list)
            for f in results["_files"][tier]:
                for c, ids in (results[m][f][1] if f in results[m] else {}).items():
                    grouped[c] += ids
            n = sum(len(v) for v in grouped.values())
            lines += [f"### {m}, {tier}: {n} failing, by cause", ""]
            for c, ids in sorted(grouped.items(), key=lambda kv: -len(kv[1])):
                shown = ", ".join(ids[:show]) + (" …" if len(ids) > show else "")
                lines.append(f"- **{len(ids)}** {c}: {shown}")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, set up the suite, run each tier's files for each module, print
    (and with --record write) the report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=Path("/tmp/autograd-suite"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/autograd-peer-reports"))
    ap.add_argument("--modules", nargs="+", default=["fj", "jax"], choices=["fj", "jax"])
    ap.add_argument("--tiers", nargs="+", default=["core", "extended"], choices=["core", "extended", "rest"])
    ap.add_argument("--files", nargs="+", help="run only these test files (of the chosen tiers)")
    ap.add_argument("--setup", action="store_true", help="only unpack the suite into --suite")
    ap.add_argument("--record", action="store_true", help="write bench/results/autograd-peer-<date>.md")
    ap.add_argument("--interpret", action="store_true", help="FLOWJIT_INTERPRET=1 (not for recorded numbers)")
    ap.add_argument("--no-run", action="store_true", help="only tabulate the XML already in --out")
    ap.add_argument("--test-timeout", type=int, default=300, help="per-test timeout, seconds")
    ap.add_argument("--file-timeout", type=int, default=3600, help="per-file timeout, seconds")
    ap.add_argument("--show", type=int, default=8, help="test ids listed per cause")
    ap.add_argument("extra", nargs="*", help="passed on to pytest (after --), e.g. -k expr")
    args = ap.parse_args(argv)
    commit = setup_suite(args.suite)
    if args.setup:
        print(f"HIPS/autograd {commit} unpacked in {args.suite}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    measured = _versions()  # before the run: a checkout edited while it runs is not what ran
    results: dict = defaultdict(dict)
    walls: dict = defaultdict(dict)
    results["_files"] = {t: [f for f in tier_files(args.suite, t) if not args.files or f in args.files]
                         for t in args.tiers}
    for tier in args.tiers:
        for f in results["_files"][tier]:
            for m in args.modules:
                xml = args.out / f"{m}-{f.removesuffix('.py')}.xml"
                t0 = time.time()
                if not args.no_run:
                    xml = run_file(args.suite, m, f, args.out, args.test_timeout, args.file_timeout,
                                   args.interpret, args.extra)
                if not xml.exists():
                    continue
                walls[m][f] = time.time() - t0 if not args.no_run else float(
                    ET.parse(xml).getroot().iter("testsuite").__next__().get("time", 0) or 0)
                results[m][f] = summarize(xml)
                print(f"# {m:4} {tier:9} {f:24} {dict(results[m][f][0])} {walls[m][f]:.0f}s", file=sys.stderr)
    report = tabulate(results, walls, args.modules, args.tiers, commit, args.interpret, args.show,
                      measured if not args.no_run else _versions())
    print(report)
    if args.record:
        path = Path(__file__).resolve().parent / "results" / f"autograd-peer-{datetime.date.today()}.md"
        path.write_text(f"# autograd peer suite, {datetime.date.today()}\n\n"
                        f"`python -m bench.autograd_peer {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
                        + report + "\n")
        print(f"recorded {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
