"""Run the array API standard's own test suite (data-apis/array-api-tests) on flowjit and NumPy.

Issue 24 asks that flowjit conform to the standard at least as closely as NumPy 2.x does; this
bench measures that with a suite nobody here wrote.  It sets up a checkout of the suite and of the
spec it pins, runs chosen test files for each module with the same options, and prints one table
per module and file (passed / failed / errors / skipped) and the failing tests grouped by cause.

Usage::

    python -m bench.array_api_conformance --setup            # clone suite + spec into --suite
    python -m bench.array_api_conformance --modules flowjit numpy --max-examples 20 \\
        --files test_has_names.py test_signatures.py ...
    python -m bench.array_api_conformance --no-run ...   # tabulate the JSON reports in --out

The suite's dependencies (hypothesis, ndindex, pytest-json-report, pytest-timeout) must be
installed (``pip install -r <suite>/requirements.txt pytest-timeout``).  The suite is run from
local git mirrors only (``--suite-mirror``, ``--spec-mirror``), so nothing is downloaded here.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

SUITE_MIRROR = "/work/.mirror/data-apis+array-api-tests/repo"
SPEC_MIRROR = "/work/.mirror/data-apis+array-api/repo"

DEFAULT_FILES = [
    "test_has_names.py", "test_signatures.py", "test_constants.py",
    "test_data_type_functions.py", "test_creation_functions.py",
    "test_manipulation_functions.py", "test_sorting_functions.py",
    "test_statistical_functions.py", "test_linalg.py",
    "test_operators_and_elementwise_functions.py", "test_special_cases.py",
]

# The suite takes the widest of the module's complex dtypes at import and so cannot even load a
# namespace without complex64/complex128: with no complex dtype, the rest of the suite stays
# usable (tests that need one are skipped, and test_has_names still reports the missing dtypes).
_HARNESS_PATCHES = [
    ("array_api_tests/dtype_helpers.py",
     "    [(dt, dtype_nbits[dt]) for dt in complex_dtypes], key=lambda x: x[1]\n)[0]",
     "    [(dt, dtype_nbits[dt]) for dt in complex_dtypes], key=lambda x: x[1],\n"
     "    default=(None, 0),\n)[0]"),
    ("array_api_tests/test_signatures.py",
     "cmplx_name = dh.dtype_to_name[dh.widest_complex_dtype]",
     "cmplx_name = (dh.dtype_to_name[dh.widest_complex_dtype]\n"
     "                      if dh.widest_complex_dtype is not None else \"complex128\")"),
]


def setup_suite(suite: Path, suite_mirror: str = SUITE_MIRROR,
                spec_mirror: str = SPEC_MIRROR) -> str:
    """Clone the suite and the spec commit its submodule pins into `suite`, and patch the harness.

    Idempotent: an existing checkout is reused.  Returns the suite's commit, for the record.
    """
    if not (suite / ".git").exists():
        subprocess.run(["git", "clone", "-q", suite_mirror, str(suite)], check=True)
    pin = subprocess.run(["git", "-C", str(suite), "ls-tree", "HEAD", "array-api"],
                         check=True, capture_output=True, text=True).stdout.split()[2]
    spec = suite / "array-api"
    if not (spec / ".git").exists():
        if spec.exists():
            spec.rmdir()
        subprocess.run(["git", "clone", "-q", spec_mirror, str(spec)], check=True)
    subprocess.run(["git", "-C", str(spec), "checkout", "-q", pin], check=True)
    for path, old, new in _HARNESS_PATCHES:
        f = suite / path
        text = f.read_text()
        if old in text:
            f.write_text(text.replace(old, new))
    return subprocess.run(["git", "-C", str(suite), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def missing_dtypes(module: str) -> list[str]:
    """The standard's complex dtypes that `module` lacks: the suite's import probes them, so they
    go to ARRAY_API_TESTS_SKIP_DTYPES (dtypes the module lacks are skipped by the suite anyway)."""
    code = (f"import {module} as m; print(','.join(n for n in ('complex64', 'complex128') "
            "if not hasattr(m, n)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return [n for n in out.stdout.strip().split(",") if n]


STANDARD_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                   "uint64", "float32", "float64", "complex64", "complex128")


def dtypes_present(module: str) -> list[str]:
    """The standard's 13 dtypes that `module` has: the suite draws examples only from these, so a
    module lacking dtypes passes tests it was never checked on."""
    code = (f"import {module} as m; print(','.join(n for n in {STANDARD_DTYPES!r} "
            "if hasattr(m, n)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return [n for n in out.stdout.strip().split(",") if n]


def run_file(suite: Path, module: str, test_file: str, out_dir: Path, max_examples: int,
             timeout: int, file_timeout: int, extra: list[str]) -> dict:
    """Run one test file of the suite on `module`; returns the pytest-json-report document
    (or a stand-in recording the crash or the whole-file timeout)."""
    report = out_dir / f"{module}-{test_file.removesuffix('.py')}.json"
    env = dict(os.environ, ARRAY_API_TESTS_MODULE=module)
    skip = missing_dtypes(module)
    if skip:
        env["ARRAY_API_TESTS_SKIP_DTYPES"] = ",".join(skip)
    cmd = [sys.executable, "-m", "pytest", f"array_api_tests/{test_file}", "-q",
           "-p", "no:cacheprovider", "--max-examples", str(max_examples), "--disable-deadline",
           "--derandomize", f"--timeout={timeout}", "--json-report",
           f"--json-report-file={report}", *extra]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True,
                              timeout=file_timeout)
        tail = proc.stdout[-2000:] + proc.stderr[-2000:]
    except subprocess.TimeoutExpired:
        tail = f"whole file exceeded {file_timeout}s"
    doc = json.loads(report.read_text()) if report.exists() else {"tests": [], "crash": tail}
    doc["wall_s"] = round(time.time() - t0, 1)
    return doc


def _cause(test: dict) -> str:
    """A short cause for one failing test: the kind of failure with its specifics stripped, so
    that failures of the same origin group together."""
    phase = test.get("call") or test.get("setup") or {}
    crash = (phase.get("crash") or {}).get("message", "") or phase.get("longrepr", "")
    if re.match(r"(\w+\.)*(ExceptionGroup|FlakyStrategyDefinition)", crash):
        # Hypothesis wraps what the function raised: the first error under it is the cause.
        inner = re.search(r"^[E|\s]+((\w+\.)*\w+(Error|Exception): (?!Inconsistent).*)$",
                          phase.get("longrepr", ""), re.M)
        crash = inner.group(1) if inner else crash
    msg = crash.strip().splitlines()[0] if crash.strip() else "?"
    nodeid = test["nodeid"]
    m = re.search(r"test_has_names\[(\w+)-", nodeid)
    if m:
        return f"missing name ({m.group(1)})"
    if "Timeout" in crash or "Timeout" in phase.get("longrepr", ""):
        return "per-test timeout"
    m = re.search(r"has no attribute '(\w+)'|(\w+) not found in array module|(\w+) is not "
                  r"defined in", crash)
    if m:
        return f"missing function {next(g for g in m.groups() if g)}"
    m = re.search(r"'NoneType' object is not callable.*?func_name='(\w+)'", crash, re.S)
    if m:
        return f"missing function {m.group(1)}"
    if "no real float dtype to match None" in crash:
        return "complex case: the module has no complex dtype"
    if "unexpected keyword" in crash or "positional argument" in crash:
        return "signature: " + re.sub(r"\w+\(\)", "f()", msg)[:90]
    m = re.match(r"AssertionError: (Argument '\w+' missing from signature|Expected argument "
                 r"'\w+' to be named '\w+'|\w+ is a pos-only argument.*)", msg)
    if m:
        return "signature: " + m.group(1)
    m = re.match(r"(\w+(?:\.\w+)*(?:Error|Exception|Warning)):?\s*(.*)", msg)
    kind, rest = (m.group(1).split(".")[-1], m.group(2)) if m else ("AssertionError", msg)
    rest = re.sub(r"0x[0-9a-f]+|[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "N", rest)
    rest = re.sub(r"\[[^\]]*\]|\([^)]*\)|'[^']*'", "…", rest)
    return f"{kind}: {rest[:90]}"


def summarize(doc: dict) -> tuple[Counter, dict[str, list[str]]]:
    """Outcome counts of one report and its failing/erroring test ids grouped by cause."""
    counts: Counter = Counter()
    causes: dict[str, list[str]] = defaultdict(list)
    for t in doc.get("tests", []):
        outcome = t["outcome"]
        outcome = {"xfailed": "skipped", "xpassed": "passed"}.get(outcome, outcome)
        counts[outcome] += 1
        if outcome in ("failed", "error"):
            causes[_cause(t)].append(t["nodeid"].split("::", 1)[1])
        elif outcome == "skipped":
            # A skip can hide a missing extension: list skips too, under their reason.
            phase = t.get("setup", {}) if t.get("setup", {}).get("outcome") == "skipped" else (
                t.get("call") or {})
            reason = str(phase.get("longrepr", "?")).rsplit("Skipped: ", 1)[-1].rstrip("')")
            reason = re.sub(r"[-+]?\d+(\.\d+)?", "N", reason)[:90]
            causes[f"(skipped) {reason}"].append(t["nodeid"].split("::", 1)[1])
    if not doc.get("tests"):
        counts["error"] += 1
        causes["file did not run: " + doc.get("crash", "?")[-200:].replace("\n", " ")].append("*")
    return counts, causes


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, set up the suite, run each file for each module, print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, default=Path("/tmp/aat"))
    ap.add_argument("--setup", action="store_true", help="only set up the suite checkout")
    ap.add_argument("--modules", nargs="+", default=["flowjit", "numpy"])
    ap.add_argument("--files", nargs="+", default=DEFAULT_FILES)
    ap.add_argument("--max-examples", type=int, default=20)
    ap.add_argument("--timeout", type=int, default=60, help="per-test timeout, seconds")
    ap.add_argument("--file-timeout", type=int, default=1800, help="per-file timeout, seconds")
    ap.add_argument("--out", type=Path, default=Path("/tmp/aat-reports"))
    ap.add_argument("--no-run", action="store_true",
                    help="only tabulate the reports already in --out (from earlier runs)")
    ap.add_argument("--show", type=int, default=6, help="test ids listed per cause")
    ap.add_argument("extra", nargs="*", help="passed on to pytest (after --), e.g. -k expr")
    args = ap.parse_args(argv)
    commit = setup_suite(args.suite)
    if args.setup:
        print(f"array-api-tests {commit} set up in {args.suite}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, tuple[Counter, dict]]] = defaultdict(dict)
    walls: dict[str, dict[str, float]] = defaultdict(dict)
    for test_file in args.files:
        for module in args.modules:
            report = args.out / f"{module}-{test_file.removesuffix('.py')}.json"
            if args.no_run:
                doc = json.loads(report.read_text()) if report.exists() else {
                    "tests": [], "crash": "no report"}
                doc["wall_s"] = round(doc.get("duration", 0.0), 1)
            else:
                doc = run_file(args.suite, module, test_file, args.out, args.max_examples,
                               args.timeout, args.file_timeout, args.extra)
            results[module][test_file] = summarize(doc)
            walls[module][test_file] = doc["wall_s"]
            c = results[module][test_file][0]
            print(f"# {module:8} {test_file:45} {dict(c)} {doc['wall_s']}s", file=sys.stderr)
    print(f"array-api-tests {commit[:12]}, --max-examples {args.max_examples}, "
          f"--derandomize, per-test timeout {args.timeout}s"
          + (f" (tabulated from the reports in {args.out})" if args.no_run else "") + "\n")
    for m in args.modules:
        have = dtypes_present(m)
        lack = [n for n in STANDARD_DTYPES if n not in have]
        print(f"- {m}: {len(have)} of the standard's 13 dtypes"
              + (f" (lacks {', '.join(lack)}: never drawn)" if lack else ""))
    print()
    cols = ["passed", "failed", "error", "skipped"]
    head = " | ".join(f"{m} {c}" for m in args.modules for c in ("pass", "fail", "err", "skip"))
    print(f"| file | {head} |")
    print("|---" * (1 + 4 * len(args.modules)) + "|")
    totals = {m: Counter() for m in args.modules}
    for test_file in args.files:
        cells = []
        for m in args.modules:
            c = results[m][test_file][0]
            totals[m] += c
            cells += [str(c.get(k, 0)) for k in cols]
        print(f"| {test_file.removeprefix('test_').removesuffix('.py')} | {' | '.join(cells)} |")
    cells = [str(totals[m].get(k, 0)) for m in args.modules for k in cols]
    print(f"| **total** | {' | '.join(cells)} |\n")
    for m in args.modules:
        grouped: dict[str, list[str]] = defaultdict(list)
        for test_file in args.files:
            for cause, ids in results[m][test_file][1].items():
                grouped[cause] += ids
        n_fail = sum(len(v) for k, v in grouped.items() if not k.startswith("(skipped)"))
        print(f"### {m}: failures by cause ({n_fail}), then skips by reason\n")
        for cause, ids in sorted(grouped.items(),
                                 key=lambda kv: (kv[0].startswith("(skipped)"), -len(kv[1]))):
            shown = ", ".join(ids[:args.show]) + (" …" if len(ids) > args.show else "")
            print(f"- **{len(ids)}** {cause}: {shown}")
        print()


if __name__ == "__main__":
    main()
