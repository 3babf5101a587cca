"""The autograd peer-suite runner (bench/autograd_peer.py): a smoke run of two small files of
HIPS/autograd's tests through the flowjit shim, read back from JUnit XML; and a test file whose
shim lookup fails, which must be counted as a failure under its cause, not hidden."""
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import autograd_peer

needs_mirror = pytest.mark.skipif(not os.path.isdir(autograd_peer.MIRROR),
                                reason="no local mirror of HIPS/autograd")


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("autograd-suite")
    autograd_peer.setup_suite(path)
    return path


@needs_mirror
def test_smoke_two_files_counts_from_junit(suite, tmp_path, capsys):
    out = tmp_path / "out"
    autograd_peer.main(["--suite", str(suite), "--out", str(out), "--modules", "fj", "--tiers", "core",
                        "--files", "test_direct.py", "test_jacobian.py"])
    report = capsys.readouterr().out
    counts = {}
    for name in ("direct", "jacobian"):
        xml = out / f"fj-test_{name}.xml"
        cases = list(ET.parse(xml).getroot().iter("testcase"))
        assert len(cases) == 4  # each file has 4 tests at the pinned commit
        counts[name], _ = autograd_peer.summarize(xml)
        assert counts[name]["collected"] == 4
        assert sum(counts[name][k] for k in ("passed", "failed", "error", "skipped")) == 4
    passed = counts["direct"]["passed"] + counts["jacobian"]["passed"]
    assert f"| core | fj | 8 | {passed} |" in report
    # two files of core's eight: fewer tests than pinned, so the runner warns
    assert "**warning** | core collected 8 tests for fj, pinned 128" in report


@needs_mirror
def test_a_shim_failure_is_counted_as_a_failure(suite, tmp_path, capsys):
    (suite / "tests" / "test_peer_shim_probe.py").write_text(
        "import autograd.numpy as np\n"
        "from autograd import grad\n\n"
        "def test_missing_name():\n"
        "    np.no_such_function_in_flowjit(1.0)\n\n"
        "def test_grad():\n"
        "    assert abs(grad(lambda x: x * x)(3.0) - 6.0) < 1e-12\n")
    out = tmp_path / "out"
    autograd_peer.main(["--suite", str(suite), "--out", str(out), "--modules", "fj", "--tiers", "rest",
                        "--files", "test_peer_shim_probe.py"])
    report = capsys.readouterr().out
    counts, causes = autograd_peer.summarize(out / "fj-test_peer_shim_probe.xml")
    assert (counts["collected"], counts["passed"], counts["failed"]) == (2, 1, 1)
    assert causes == {"missing function numpy.no_such_function_in_flowjit":
                      ["test_peer_shim_probe::test_missing_name"]}
    assert "- **1** missing function numpy.no_such_function_in_flowjit" in report


@needs_mirror
def test_a_file_that_cannot_run_is_an_error(suite, tmp_path):
    (suite / "tests" / "test_peer_broken.py").write_text("import autograd.no_such_module\n")
    xml = autograd_peer.run_file(suite, "fj", "test_peer_broken.py", tmp_path, 60, 600, False, [])
    counts, causes = autograd_peer.summarize(xml)
    assert counts["error"] == 1 and counts["passed"] == 0
    assert len(causes) == 1


def test_causes_group_by_origin_and_keep_what_tells_them_apart():
    cause = autograd_peer.cause
    assert cause("AttributeError: flowjit has no attribute 'inner' (autograd.numpy.inner)") == \
        "missing function numpy.inner"
    assert cause("AttributeError: 'numpy.ndarray' object has no attribute 'replace'") == \
        "AttributeError: numpy.ndarray object has no attribute replace"
    assert cause("TypeError: 'DType' object is not callable") == "TypeError: DType object is not callable"
    # numbers and shapes differ between tests of one cause
    assert cause("flowjit.ir.errors.AutodiffError: grad of f: got f64[1]") == \
        cause("flowjit.ir.errors.AutodiffError: grad of f: got f64[1,1]")
    assert cause("AssertionError: Derivative (VJP) check of vjp_fun failed with arg 2.0:\nanalytic: 1") == \
        "numerical mismatch: VJP against finite differences"


_SHIM_PROBE = '''
import warnings
import numpy as onp
import autograd.numpy as np
from autograd import grad, deriv
from autograd.core import primitive
from autograd.extend import defjvp, defvjp, primitive as extend_primitive

@extend_primitive
def scaled(x, k):                 # k (an int) is static
    return x * k
defvjp(scaled, lambda ans, x, k: lambda g: 10.0 * g)   # deliberately not the true derivative
assert grad(lambda x: np.sum(scaled(x, 3)))(onp.ones(2)).tolist() == [10.0, 10.0]

@extend_primitive
def cube(x):
    return x ** 3
defjvp(cube, lambda g, ans, x: 7.0 * g)
assert float(deriv(cube)(2.0)) == 7.0

@primitive
def mul(x, y):
    return x * y
with warnings.catch_warnings(record=True):
    mul.defgrad(lambda ans, x, y: lambda g: y * g)
    mul.defvjp(lambda g, ans, vs, gvs, x, y: x * g + 1.0, argnum=1)
gx = grad(lambda x, y: np.sum(mul(x, y)), 0)(onp.full(2, 2.0), onp.full(2, 5.0))
gy = grad(lambda x, y: np.sum(mul(x, y)), 1)(onp.full(2, 2.0), onp.full(2, 5.0))
assert gx.tolist() == [5.0, 5.0] and gy.tolist() == [3.0, 3.0]

plain = extend_primitive(lambda x: 2.0 * x)   # no rule: the library differentiates it
assert float(grad(plain)(1.0)) == 2.0

assert type(np.where(True, 1, 2)) is int and np.where(False, 1, 2.0) == 2.0
assert np.where(True, [1, 2], [3, 4]) == [1, 2]
assert not isinstance(np.where(True, onp.ones(1), onp.zeros(1)), list)
print("probe ok")
'''


def test_shim_maps_autograd_primitives_onto_custom_rules_and_keeps_autograds_where():
    # autograd.extend.primitive with defvjp is fj.custom_vjp, with only defjvp fj.custom_jvp
    # (the rules above are deliberately wrong, so a pass shows they were used and not the
    # library's own derivative); autograd's where returns Python values for Python inputs.
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(autograd_peer.SHIMS / "fj"), str(autograd_peer.SHIMS / "shared")]))
    run = subprocess.run([sys.executable, "-c", _SHIM_PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "probe ok" in run.stdout


def test_the_report_names_the_checkout_as_it_was_when_the_run_started(tmp_path, monkeypatch, capsys):
    # The checkout may change while the suite runs (20 minutes): the report names what ran.
    edited = []
    monkeypatch.setattr(autograd_peer, "_versions", lambda: "flowjit bbbb with uncommitted changes" if edited
                        else "flowjit aaaa, at the start")

    def fake_run(suite, module, test_file, out, *rest):
        edited.append(test_file)  # the checkout is edited while this file's tests run
        xml = out / f"{module}-{test_file.removesuffix('.py')}.xml"
        xml.write_text('<testsuites><testsuite name="s" time="1"><testcase classname="test_direct" name="t"/>'
                       '</testsuite></testsuites>')
        return xml

    monkeypatch.setattr(autograd_peer, "run_file", fake_run)
    # What is checked is the report, not the suite's unpacking (which needs the local mirror).
    monkeypatch.setattr(autograd_peer, "setup_suite", lambda suite: "0" * 40)
    autograd_peer.main(["--suite", str(tmp_path / "suite"), "--out", str(tmp_path / "out"), "--modules", "fj",
                        "--tiers", "core", "--files", "test_direct.py"])
    report = capsys.readouterr().out
    assert "flowjit aaaa, at the start" in report and "bbbb" not in report
